//! `kill -9` at the new points of an execution's life. A scanner's claim outlives the
//! process that granted it: the lease, kept in PostgreSQL, still lapses on time — a new
//! instance's sweep returns the execution to the queue, not before the heartbeat's lease
//! ends, and the next claim finishes it. An abandon killed between marking the upload and
//! repairing its stream is completed by repeating the request on a new instance: nothing
//! of the pending batch stays, and the final counts what the other upload stored.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use serde_json::json;

use super::child::{ChildConfig, Serve};
use crate::support::emulator::{emulator_for_faults, FaultSpec};
use crate::support::scan::t0;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::server::{got, http, Got};
use crate::support::wait_for;
use crate::support::{db, emulator, factory};

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_between_a_heartbeat_and_the_lease_expiry() {
    let es = emulator::target();
    let db = db::fresh();
    let mut c = db.connect();
    let owner = factory::owner(&mut c, false);
    let scanner = factory::scanner(&mut c, None);
    let run = factory::task(&mut c, owner.id, scanner.id, "port_scan", "queued");
    let prefix = emulator::es_prefix("ls");
    let mut cfg = ChildConfig::new(&db.url, es.es().url(), &prefix);
    cfg.extra_sections = "[scanner]\nlease_seconds = 5\nmax_attempts = 2\n".into();

    let mut first = Serve::start(&cfg);
    let claim = scan::claim(&first.base, &scanner.token);
    assert_eq!(claim.status, 200, "{}", claim.body);
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 2, t0()));
    assert_eq!(
        scan::post(&first.base, &scanner.token, run.execution_id, &b).status,
        200
    );
    let beat = scan::heartbeat(&first.base, &scanner.token, run.execution_id);
    assert_eq!(beat.status, 200, "{}", beat.body);
    let lease: DateTime<Utc> = beat.body["lease_expires_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    first.kill9();

    let second = Serve::start(&cfg);
    let status = |c: &mut postgres::Client| -> (String, i32) {
        let r = c
            .query_one(
                "SELECT status, attempts FROM executions WHERE id = $1",
                &[&run.execution_id],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    wait_for("the lease to lapse", Duration::from_secs(30), || {
        status(&mut c).0 != "running"
    });
    let requeued = Utc::now();
    assert!(
        requeued >= lease,
        "requeued at {requeued}, before the lease end {lease}"
    );
    assert_eq!(status(&mut c), ("queued".to_string(), 1));
    assert!(second.log().contains(&format!(
        "event=ScanExecutionRequeued execution_id={}",
        run.execution_id
    )));

    // The next claim finishes it; the first claim's upload is abandoned, its batch counts.
    let again = scan::claim(&second.base, &scanner.token);
    assert_eq!(again.body["attempt"], 2, "{}", again.body);
    let fin = Batch::final_(Uuid::new_v4(), 0, endpoints(10, 1, t0()));
    let r = scan::post(&second.base, &scanner.token, run.execution_id, &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    let (state, observations): (String, i64) = {
        let r = c
            .query_one(
                "SELECT status, observation_count FROM executions WHERE id = $1",
                &[&run.execution_id],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((state.as_str(), observations), ("succeeded", 3));
}

fn abandon(base: &str, token: &str, execution: Uuid, upload: Uuid) -> Result<Got, ureq::Error> {
    http()
        .delete(format!(
            "{base}/api/v1/scanner/executions/{execution}/uploads/{upload}"
        ))
        .header("Authorization", &format!("Bearer {token}"))
        .call()
        .map(|r| got(Ok(r)))
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_between_abandon_and_repair() {
    let Some(emu) = emulator_for_faults("kill_between_abandon_and_repair") else {
        return;
    };
    let db = db::fresh();
    let mut c = db.connect();
    let owner = factory::owner(&mut c, false);
    let scanner = factory::scanner(&mut c, None);
    let run = factory::task(&mut c, owner.id, scanner.id, "port_scan", "running");
    let e = run.execution_id;
    let prefix = emulator::es_prefix("ab");
    let mut cfg = ChildConfig::new(&db.url, emu.url(), &prefix);
    cfg.request_timeout_ms = 1000;
    cfg.extra_sections = "[scanner]\nlease_seconds = 60\n".into();
    let mut first = Serve::start(&cfg);
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let mut older = endpoints(0, 3, &scan::t0_plus(-5));
    for o in &mut older {
        o["product"] = json!("apache");
    }
    assert_eq!(
        scan::post(&first.base, &scanner.token, e, &Batch::main(b, 0, older)).status,
        200
    );
    emu.add_fault(FaultSpec::item_fails_once(format!(
        "{}-{}-m0-4",
        e.simple(),
        a.simple()
    )));
    let pending = Batch::main(a, 0, endpoints(0, 10, t0()));
    assert_eq!(
        scan::post(&first.base, &scanner.token, e, &pending).status,
        502
    );

    // The abandon stops at its first bulk: the upload is marked, nothing else is done.
    emu.add_fault(FaultSpec::Pause {
        path: "/_bulk".into(),
        method: None,
        count: Some(1),
    });
    let (base, token) = (first.base.clone(), scanner.token.clone());
    let inflight = std::thread::spawn(move || abandon(&base, &token, e, a));
    emu.wait_paused(1, Duration::from_secs(30));
    let stream = |c: &mut postgres::Client| -> (bool, i32) {
        let r = c
            .query_one(
                "SELECT abandoned_at IS NOT NULL, pending_count FROM scan_upload_stream WHERE execution_id = $1 AND upload_id = $2",
                &[&e, &a],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        stream(&mut c),
        (true, 1),
        "marked, its pending batch still there"
    );
    first.kill9();
    assert!(inflight
        .join()
        .unwrap()
        .map(|r| r.status != 200)
        .unwrap_or(true));
    emu.clear_faults();
    emu.release_all();

    // Until the clean-up has run, a final waits for it.
    let second = Serve::start(&cfg);
    let fin = Batch::final_(b, 1, vec![]);
    let r = scan::post(&second.base, &scanner.token, e, &fin);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["incomplete_uploads"][0]["abandoned"],
        true
    );
    // Repeating the request undoes the batch's writes; its receipt goes once no write of
    // it can be in flight any more (the request, or the new instance's sweep, after the
    // write grace: three 1 s request timeouts and their backoff here).
    let again = abandon(&second.base, &scanner.token, e, a).unwrap();
    assert_eq!(again.status, 200, "{}", again.body);
    wait_for(
        "the pending batch to be removed",
        Duration::from_secs(40),
        || stream(&mut c).1 == 0,
    );
    assert_eq!(stream(&mut c), (true, 0));
    let leftovers: i64 = c
        .query_one(
            "SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1 AND upload_id = $2",
            &[&e, &a],
        )
        .unwrap()
        .get(0);
    assert_eq!(leftovers, 0);
    let facts = emu.es().refreshed_count(
        &format!("{prefix}-facts-*"),
        json!({"term": {"upload_id": a.to_string()}}),
    );
    assert_eq!(facts, 0, "facts of the abandoned batch");
    let r = scan::post(&second.base, &scanner.token, e, &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    let row = c
        .query_one(
            "SELECT status, observation_count, endpoint_count FROM executions WHERE id = $1",
            &[&e],
        )
        .unwrap();
    let counts: (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(counts, ("succeeded".to_string(), 3, 3));
}
