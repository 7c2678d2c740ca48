//! The scanner's execution lifecycle: the claim's lease and limits, heartbeats, failing
//! with a reason, lapsed leases returning the execution to the queue (or failing it after
//! the last attempt) with the lapsed claim's uploads abandoned, executions queued for any
//! scanner of the owner, and the scanner's own listing — each transition an event and a
//! metric.

use std::time::Duration;

use chrono::{DateTime, Utc};
use postgres::Client;
use uuid::Uuid;

use crate::support::emulator;
use crate::support::factory::{self, Principal};
use crate::support::logs;
use crate::support::read;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::server::{got, http};
use crate::support::stack::Stack;
use crate::support::wait_for;

/// A stack whose leases last `lease` and are swept every 50 ms, with `attempts` claims.
fn stack(lease: Duration, attempts: u32) -> Stack {
    Stack::build(emulator::target(), "port_scan", |cfg| {
        cfg.scanner.lease = lease;
        cfg.scanner.max_attempts = attempts;
        cfg.scanner.sweep_interval = Duration::from_millis(50);
        cfg.scanner.write_grace = Duration::ZERO;
    })
}

/// A queued execution of a new task of the stack's owner, for `scanner` (None: any).
fn queued(c: &mut Client, s: &Stack, scanner: Option<Uuid>) -> Uuid {
    let run = factory::task(c, s.owner.id, s.scanner.id, "port_scan", "queued");
    c.execute(
        "UPDATE executions SET scanner_id = $2::uuid, any_scanner = $2::uuid IS NULL WHERE id = $1",
        &[&run.execution_id, &scanner],
    )
    .unwrap();
    run.execution_id
}

fn row(c: &mut Client, e: Uuid) -> (String, Option<Uuid>, i32, Option<String>) {
    let r = c
        .query_one(
            "SELECT status, scanner_id, attempts, failure_reason FROM executions WHERE id = $1",
            &[&e],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

fn wait_status(c: &mut Client, e: Uuid, status: &str) {
    wait_for(
        &format!("execution {e} to become {status}"),
        Duration::from_secs(20),
        || row(c, e).0 == status,
    );
}

fn at(v: &serde_json::Value) -> DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

fn claim_of(s: &Stack, token: &str) -> serde_json::Value {
    let r = scan::claim(s.base(), token);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_claim_answers_the_lease_and_limits_and_heartbeats_and_batches_renew_it() {
    let s = stack(Duration::from_secs(600), 3);
    let mut c = s.sql();
    let e = queued(&mut c, &s, Some(s.scanner.id));
    let before = Utc::now();
    let claim = claim_of(&s, &s.scanner.token);
    assert_eq!(claim["execution_id"], e.to_string());
    assert_eq!(claim["attempt"], 1);
    assert_eq!(claim["max_attempts"], 3);
    assert_eq!(claim["lease_seconds"], 600);
    let lease = at(&claim["lease_expires_at"]);
    assert!(lease >= before + chrono::Duration::seconds(599), "{lease}");
    let limits = &claim["limits"];
    assert_eq!(limits["max_observations"], 5000);
    assert_eq!(limits["max_body_bytes"], 16 * 1024 * 1024);
    assert_eq!(limits["max_observation_age_seconds"], 31 * 86_400);
    assert_eq!(limits["max_clock_skew_seconds"], 300);
    assert!(!claim["targets"].as_array().unwrap().is_empty());

    // A heartbeat moves the lease on; so does an accepted batch.
    c.execute(
        "UPDATE executions SET lease_expires_at = now() + interval '5 minutes' WHERE id = $1",
        &[&e],
    )
    .unwrap();
    let h = scan::heartbeat(s.base(), &s.scanner.token, e);
    assert_eq!(h.status, 200, "{}", h.body);
    assert!(at(&h.body["lease_expires_at"]) >= before + chrono::Duration::seconds(599));
    c.execute(
        "UPDATE executions SET lease_expires_at = now() + interval '5 minutes' WHERE id = $1",
        &[&e],
    )
    .unwrap();
    let lease_of = |c: &mut postgres::Client| -> DateTime<Utc> {
        c.query_one(
            "SELECT lease_expires_at FROM executions WHERE id = $1",
            &[&e],
        )
        .unwrap()
        .get(0)
    };
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 1, t0()));
    assert_eq!(scan::post(s.base(), &s.scanner.token, e, &b).status, 200);
    let lease = lease_of(&mut c);
    assert!(lease >= before + chrono::Duration::seconds(599), "{lease}");
    // The next batch, within a hundredth of the lease, leaves it (and so the execution's
    // row and its indexes) alone.
    let b = Batch::main(b.upload_id, 1, endpoints(1, 1, t0()));
    assert_eq!(scan::post(s.base(), &s.scanner.token, e, &b).status, 200);
    assert_eq!(lease_of(&mut c), lease);

    // Only the claimant may heartbeat, and only a running execution.
    let other = factory::scanner(&mut c, None);
    assert_eq!(scan::heartbeat(s.base(), &other.token, e).status, 403);
    assert_eq!(
        scan::heartbeat(s.base(), &s.scanner.token, Uuid::new_v4()).status,
        404
    );
    assert_eq!(scan::heartbeat(s.base(), "nope", e).status, 401);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_scanner_fails_its_execution_with_a_reason_the_task_shows() {
    let s = stack(Duration::from_secs(600), 3);
    let mut c = s.sql();
    let e = s.execution();
    let reason = "nmap exited with status 1: permission denied (SYN scan needs root)";
    let r = scan::fail(s.base(), &s.scanner.token, e, reason);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "failed");
    assert_eq!(row(&mut c, e).0, "failed");
    assert_eq!(row(&mut c, e).3.as_deref(), Some(reason));
    // Again: the same answer, nothing changes.
    let again = scan::fail(s.base(), &s.scanner.token, e, "other words");
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["reason"], reason);
    // The owner sees it on the task and its executions.
    let get = |path: String| read::get(s.base(), &s.owner.token, &path);
    let task = get(format!("/api/v1/tasks/{}", s.run.task_id));
    assert_eq!(task.body["status"], "failed", "{}", task.body);
    let execs = get(format!("/api/v1/tasks/{}/executions", s.run.task_id));
    assert_eq!(execs.body["executions"][0]["failure_reason"], reason);
    assert_eq!(execs.body["executions"][0]["status"], "failed");
    // A failed execution takes no batch and no heartbeat.
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 1, t0()));
    let r = scan::post(s.base(), &s.scanner.token, e, &b);
    assert_eq!(r.status, 409);
    assert_eq!(r.body["error"]["code"], "execution_not_running");
    let h = scan::heartbeat(s.base(), &s.scanner.token, e);
    assert_eq!(h.body["error"]["code"], "execution_not_running");
    // A reason is checked; and it never reaches the log.
    let bad = got(http()
        .post(format!("{}/api/v1/scanner/executions/{e}/fail", s.base()))
        .header("Authorization", &format!("Bearer {}", s.scanner.token))
        .send(r#"{"reason": ""}"#));
    assert_eq!(bad.status, 400);
    assert!(
        !logs::all().contains("permission denied (SYN"),
        "a reason was logged"
    );
    assert!(logs::all().contains(&format!("event=ScanExecutionFailed execution_id={e}")));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_lapsed_lease_requeues_then_fails_and_the_next_claim_finishes_without_the_old_upload() {
    let s = stack(Duration::from_secs(1), 2);
    let mut c = s.sql();
    let e = queued(&mut c, &s, Some(s.scanner.id));
    claim_of(&s, &s.scanner.token);
    // The first claim stores batches 0 and 2 of its upload and dies with a gap.
    let old = Uuid::new_v4();
    for i in [0, 2] {
        let b = Batch::main(old, i, endpoints(i as usize * 10, 2, t0()));
        assert_eq!(scan::post(s.base(), &s.scanner.token, e, &b).status, 200);
    }
    wait_status(&mut c, e, "queued");
    assert_eq!(
        row(&mut c, e),
        ("queued".into(), Some(s.scanner.id), 1, None)
    );
    // Its upload is abandoned: no more batches, and the next final does not wait for it.
    let second = claim_of(&s, &s.scanner.token);
    assert_eq!(second["attempt"], 2);
    let late = Batch::main(old, 1, endpoints(10, 2, t0()));
    let r = scan::post(s.base(), &s.scanner.token, e, &late);
    assert_eq!(r.body["error"]["code"], "upload_abandoned", "{}", r.body);
    let new = Uuid::new_v4();
    let fin = Batch::final_(new, 0, endpoints(100, 3, t0()));
    let r = scan::post(s.base(), &s.scanner.token, e, &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    let counted: i64 = c
        .query_one(
            "SELECT observation_count FROM executions WHERE id = $1",
            &[&e],
        )
        .unwrap()
        .get(0);
    assert_eq!(counted, 7, "the abandoned upload's confirmed batches count");

    // With no claims left, a lapsed lease fails the execution and its task.
    let e2 = queued(&mut c, &s, Some(s.scanner.id));
    c.execute("UPDATE executions SET attempts = 1 WHERE id = $1", &[&e2])
        .unwrap();
    claim_of(&s, &s.scanner.token);
    wait_status(&mut c, e2, "failed");
    assert_eq!(row(&mut c, e2).3.as_deref(), Some("lease_expired"));
    let task: String = c
        .query_one(
            "SELECT t.status FROM tasks t JOIN executions e ON e.task_id = t.id WHERE e.id = $1",
            &[&e2],
        )
        .unwrap()
        .get(0);
    assert_eq!(task, "failed");
    let text = logs::all();
    assert!(text.contains(&format!(
        "event=ScanExecutionRequeued execution_id={e} attempt=1"
    )));
    assert!(text.contains(&format!(
        "event=ScanExecutionLeaseExpired execution_id={e2} attempt=2"
    )));
    let m = http()
        .get(format!("{}/metrics", s.base()))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    for line in [
        r#"scanstore_execution_transitions_total{to="queued",cause="lease_expired"}"#,
        r#"scanstore_execution_transitions_total{to="failed",cause="lease_expired"}"#,
        r#"scanstore_execution_transitions_total{to="running",cause="claim"}"#,
        r#"scanstore_execution_transitions_total{to="succeeded",cause="final"}"#,
    ] {
        assert!(m.contains(line), "{line} missing from /metrics");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_execution_without_a_scanner_goes_to_any_enabled_scanner_of_its_owner() {
    let s = stack(Duration::from_secs(1), 3);
    let mut c = s.sql();
    let mine = |c: &mut Client| -> Principal { factory::scanner(c, Some(s.owner.id)) };
    let (a, b) = (mine(&mut c), mine(&mut c));
    let someone = factory::owner(&mut c, false);
    let stranger = factory::scanner(&mut c, Some(someone.id));
    let disabled = mine(&mut c);
    c.execute(
        "UPDATE scanners SET disabled = true WHERE id = $1",
        &[&disabled.id],
    )
    .unwrap();
    let e = queued(&mut c, &s, None);
    // Unrestricted scanners and other owners' scanners never see it; nor a disabled one.
    assert_eq!(scan::claim(s.base(), &s.scanner.token).status, 204);
    assert_eq!(scan::claim(s.base(), &stranger.token).status, 204);
    assert_eq!(scan::claim(s.base(), &disabled.token).status, 401);
    let claim = claim_of(&s, &a.token);
    assert_eq!(claim["execution_id"], e.to_string());
    assert_eq!(row(&mut c, e).1, Some(a.id));
    // Its lease lapses: back to the owner's scanners, and another one takes it.
    wait_status(&mut c, e, "queued");
    assert_eq!(row(&mut c, e).1, None);
    let claim = claim_of(&s, &b.token);
    assert_eq!(claim["execution_id"], e.to_string());
    assert_eq!(claim["attempt"], 2);
    assert_eq!(scan::heartbeat(s.base(), &a.token, e).status, 403);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_scanner_lists_its_own_executions_newest_first_by_page_and_status() {
    let s = stack(Duration::from_secs(600), 3);
    let mut c = s.sql();
    let ids: Vec<Uuid> = (0..5)
        .map(|_| queued(&mut c, &s, Some(s.scanner.id)))
        .collect();
    let other = factory::scanner(&mut c, None);
    let theirs = queued(&mut c, &s, Some(other.id));
    let list = |q: &str| {
        let r = scan::executions(s.base(), &s.scanner.token, q);
        assert_eq!(r.status, 200, "{}", r.body);
        r.body
    };
    let all = list("size=100");
    let listed: Vec<String> = all["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed.len(), 6, "five queued and the stack's running one");
    assert!(!listed.contains(&theirs.to_string()));
    assert_eq!(listed[0], ids[4].to_string(), "newest first");
    let page = list("size=2");
    assert_eq!(page["executions"].as_array().unwrap().len(), 2);
    let next = page["next_after"].as_str().unwrap().to_string();
    let page2 = list(&format!("size=2&after={next}"));
    assert_eq!(page2["executions"][0]["execution_id"], ids[2].to_string());
    let running = list("status=running");
    assert_eq!(running["executions"].as_array().unwrap().len(), 1);
    assert_eq!(
        running["executions"][0]["execution_id"],
        s.execution().to_string()
    );
    assert!(running["next_after"].is_null());
    let bad = scan::executions(s.base(), &s.scanner.token, "status=done");
    assert_eq!(bad.status, 400);
    assert_eq!(scan::executions(s.base(), "nope", "").status, 401);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_sweep_undoes_the_pending_batches_of_a_lapsed_claim() {
    let Some(s) = Stack::with_faults("lapsed_pending", "port_scan", |cfg| {
        cfg.scanner.lease = Duration::from_secs(1);
        cfg.scanner.sweep_interval = Duration::from_millis(50);
        cfg.scanner.write_grace = Duration::ZERO;
    }) else {
        return;
    };
    let mut c = s.sql();
    let e = queued(&mut c, &s, Some(s.scanner.id));
    claim_of(&s, &s.scanner.token);
    let up = Uuid::new_v4();
    let b0 = Batch::main(up, 0, endpoints(0, 3, t0()));
    assert_eq!(scan::post(s.base(), &s.scanner.token, e, &b0).status, 200);
    s.emulator()
        .add_fault(crate::support::emulator::FaultSpec::item_fails_once(
            format!("{}-{}-m1-0", e.simple(), up.simple()),
        ));
    let b1 = Batch::main(up, 1, endpoints(10, 4, t0()));
    assert_eq!(scan::post(s.base(), &s.scanner.token, e, &b1).status, 502);
    wait_status(&mut c, e, "queued");
    let receipts = |c: &mut Client| -> Vec<(i32, String)> {
        c.query(
            "SELECT batch_index, status FROM scan_upload_receipts WHERE execution_id = $1 ORDER BY batch_index",
            &[&e],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    wait_for(
        "the pending batch to be undone",
        Duration::from_secs(20),
        || receipts(&mut c).len() <= 1,
    );
    assert_eq!(receipts(&mut c), vec![(0, "confirmed".to_string())]);
    let facts = s.es().refreshed_count(
        &format!("{}-facts-*", s.prefix()),
        serde_json::json!({"bool": {"filter": [
            {"term": {"upload_id": up.to_string()}}, {"term": {"batch_index": 1}}
        ]}}),
    );
    assert_eq!(facts, 0, "the pending batch's facts");
    // The next claim's final counts the confirmed batch only.
    claim_of(&s, &s.scanner.token);
    let fin = Batch::final_(Uuid::new_v4(), 0, vec![]);
    let r = scan::post(s.base(), &s.scanner.token, e, &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    let counts: (i64, i64) = {
        let r = c
            .query_one(
                "SELECT observation_count, endpoint_count FROM executions WHERE id = $1",
                &[&e],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(counts, (3, 3));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_failed_execution_keeps_nothing_of_a_batch_written_across_the_fail() {
    let Some(s) = Stack::with_faults("fail_during_batch", "port_scan", |cfg| {
        cfg.scanner.sweep_interval = Duration::from_millis(50);
        cfg.scanner.write_grace = Duration::ZERO;
    }) else {
        return;
    };
    let mut c = s.sql();
    let e = s.execution();
    let up = Uuid::new_v4();
    // The batch's bulk waits while its scanner fails the execution.
    s.emulator()
        .add_fault(crate::support::emulator::FaultSpec::Pause {
            path: "/_bulk".into(),
            method: None,
            count: Some(1),
        });
    let (base, token) = (s.base().to_string(), s.scanner.token.clone());
    let inflight = std::thread::spawn(move || {
        scan::post(&base, &token, e, &Batch::main(up, 0, endpoints(0, 3, t0())))
    });
    s.emulator().wait_paused(1, Duration::from_secs(20));
    assert_eq!(
        scan::fail(s.base(), &s.scanner.token, e, "operator stopped it").status,
        200
    );
    s.emulator().release_all();
    let r = inflight.join().unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "execution_not_running");
    // The sweep undoes the batch: no receipt, no fact.
    wait_for(
        "the sweep to undo the failed execution's batch",
        Duration::from_secs(20),
        || s.receipts().is_empty(),
    );
    assert_eq!(s.fact_count(), 0);
    assert_eq!(row(&mut c, e).0, "failed");
}
