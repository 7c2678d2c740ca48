//! `kill -9` of `scanstore serve` at known points of the write path and of the publisher,
//! then a new process on the same database and ES; the scanner retries the batch it was
//! sending, as the protocol says (same identity, same bytes). The end state must equal a
//! fault-free run of the same (mixed: endpoints and DNS answers) upload on a second
//! database and index prefix: receipts, streams, execution and task rows, outbox, the
//! generated child task's targets and every ES document, byte for byte apart
//! from the fields `VOLATILE` and `*_at` (wall-clock times, serial ids, lease bookkeeping).
//!
//! A point is reached by pausing the emulator on the request that follows it (`/_bulk`,
//! `*/_refresh`, `*/_count`), or, for "before transaction B" and "after the page's bulk,
//! before its checkpoint", by holding a row lock from another connection so that the
//! transaction blocks, and killing the process while it waits.

use std::time::Duration;

use super::child::{try_post, ChildConfig, Serve};
use super::{prefix, snapshot, wait_published, Ids, Snapshot};
use crate::support::db::{self, TestDb};
use crate::support::emulator::{emulator_for_faults, Emulator, FaultSpec};
use crate::support::scan::Batch;
use crate::support::server::Got;
use crate::support::wait_for;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Point {
    /// Batch 1: transaction A committed, its bulk never reaches ES.
    AfterTxA,
    /// Batch 1: the bulk is applied by ES, the process dies before it sees the answer.
    DuringBulk,
    /// Batch 1: ES done, transaction B blocked on the execution row lock.
    BeforeTxB,
    /// Final: during the refresh of its index scope.
    FinalRefresh,
    /// Final: during the count.
    FinalCount,
    /// Final: refresh and count done, transaction B blocked.
    FinalBeforeTxB,
    /// Publisher: the page's asset bulk is in flight.
    ProjectionMidPage,
    /// Publisher: the page's bulk succeeded, the checkpoint is blocked.
    ProjectionBeforeCheckpoint,
    /// Publisher: during the final refresh of the asset indices.
    ProjectionRefresh,
}

impl Point {
    fn batch(self) -> Option<usize> {
        match self {
            Point::AfterTxA | Point::DuringBulk | Point::BeforeTxB => Some(1),
            Point::FinalRefresh | Point::FinalCount | Point::FinalBeforeTxB => Some(3),
            _ => None,
        }
    }
}

fn pause(path: &str) -> FaultSpec {
    FaultSpec::Pause {
        path: path.into(),
        method: None,
        count: Some(1),
    }
}

/// Posts until 200, again after a 502, a 503 or a failed exchange (a server starting or
/// recovering), for at most 30 s.
pub fn post_until_ok(base: &str, token: &str, exec: uuid::Uuid, b: &Batch) -> Got {
    let body = b.body();
    let mut accepted = None;
    wait_for(
        &format!("batch {} to be accepted", b.index),
        Duration::from_secs(30),
        || match try_post(base, token, exec, &body) {
            Ok(r) if r.status == 200 => {
                accepted = Some(r);
                true
            }
            Ok(r) if r.status == 503 || r.status == 502 => false,
            Ok(r) => panic!("batch {}: {} {}", b.index, r.status, r.body),
            Err(_) => false,
        },
    );
    accepted.unwrap()
}

fn config(db: &TestDb, emu: &Emulator, prefix: &str, workers: u32) -> ChildConfig {
    let mut c = ChildConfig::new(&db.url, emu.url(), prefix);
    c.workers = workers;
    // Small pages: the publisher needs several pages and checkpoints for 55 endpoints.
    c.extra_projection = "page_size = 20\n".into();
    c
}

/// The fault-free run: every batch once, published.
pub fn reference(emu: &Emulator, ids: &Ids) -> Snapshot {
    let db = db::fresh();
    let mut c = db.connect();
    ids.seed(&mut c);
    let p = prefix("ra");
    let s = Serve::start(&config(&db, emu, &p, 1));
    for b in ids.plan() {
        let r = post_until_ok(&s.base, &ids.scanner_token, ids.execution, &b);
        assert_eq!(r.body["saved"], b.observations.len(), "{}", r.body);
    }
    wait_published(&mut c, ids.execution, Duration::from_secs(60));
    snapshot(&mut c, &emu.es(), &p, ids.execution)
}

/// One crash run; returns the snapshot after recovery.
pub fn crash_run(emu: &Emulator, ids: &Ids, point: Point) -> Snapshot {
    let db = db::fresh();
    let mut c = db.connect();
    ids.seed(&mut c);
    let p = prefix("rb");
    let exec = ids.execution;
    let tok = ids.scanner_token.clone();
    let plan = ids.plan();
    let mut locker = db.connect();

    if let Some(k) = point.batch() {
        let mut s = Serve::start(&config(&db, emu, &p, 1));
        for b in &plan[..k] {
            post_until_ok(&s.base, &tok, exec, b);
        }
        match point {
            Point::AfterTxA => {
                // Paused and then failed: the bulk is never applied.
                emu.add_fault(pause("/_bulk"));
                emu.add_fault(FaultSpec::fail(
                    "/_bulk",
                    1,
                    503,
                    "unavailable_shards_exception",
                ));
            }
            Point::DuringBulk | Point::BeforeTxB | Point::FinalBeforeTxB => {
                emu.add_fault(pause("/_bulk"));
            }
            Point::FinalRefresh => {
                emu.add_fault(pause("*/_refresh"));
            }
            Point::FinalCount => {
                emu.add_fault(pause("*/_count"));
            }
            _ => unreachable!(),
        }
        let base = s.base.clone();
        let body = plan[k].body();
        let tok2 = tok.clone();
        let inflight = std::thread::spawn(move || try_post(&base, &tok2, exec, &body));
        emu.wait_paused(1, Duration::from_secs(30));
        // Transaction A has committed: the receipt is pending.
        let pending: i64 = c
            .query_one(
                "SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1 AND batch_index = $2 AND status = 'pending'",
                &[&exec, &(k as i32)],
            )
            .unwrap()
            .get(0);
        assert_eq!(pending, 1, "{point:?}: no pending receipt before the kill");
        let mut tx = None;
        if matches!(point, Point::BeforeTxB | Point::FinalBeforeTxB) {
            let mut t = locker.transaction().unwrap();
            t.execute(
                "SELECT 1 FROM executions WHERE id = $1 FOR UPDATE",
                &[&exec],
            )
            .unwrap();
            tx = Some(t);
            emu.release_all();
            db::wait_lock_waiter(&mut c, "a transaction blocked on the held lock");
        }
        s.kill9();
        let answer = inflight.join().unwrap();
        assert!(
            answer.as_ref().map(|r| r.status != 200).unwrap_or(true),
            "{point:?}: the killed process answered 200"
        );
        if let Some(t) = tx {
            t.rollback().unwrap();
        }
        emu.clear_faults();
        emu.release_all();
        // The dead process's transaction is gone with its connection; the receipt waits.
        let status: String = c
            .query_one(
                "SELECT status FROM scan_upload_receipts WHERE execution_id = $1 AND batch_index = $2",
                &[&exec, &(k as i32)],
            )
            .unwrap()
            .get(0);
        assert_eq!(status, "pending", "{point:?}");
        let s2 = Serve::start(&config(&db, emu, &p, 1));
        let r = post_until_ok(&s2.base, &tok, exec, &plan[k]);
        assert_eq!(
            r.body["saved"],
            plan[k].observations.len(),
            "{point:?}: the retry of a pending batch completes it: {}",
            r.body
        );
        for b in &plan[k + 1..] {
            let r = post_until_ok(&s2.base, &tok, exec, b);
            assert_eq!(r.body["saved"], b.observations.len(), "{}", r.body);
        }
        // A second retry of every batch is a no-op.
        for b in &plan {
            let r = post_until_ok(&s2.base, &tok, exec, b);
            assert_eq!(r.body["saved"], 0, "{point:?}: confirmed retry {}", r.body);
        }
        wait_published(&mut c, exec, Duration::from_secs(60));
        return snapshot(&mut c, &emu.es(), &p, exec);
    }

    // Publisher points: upload everything with no publisher, then start one that dies.
    {
        let s = Serve::start(&config(&db, emu, &p, 0));
        for b in &plan {
            post_until_ok(&s.base, &tok, exec, b);
        }
    }
    match point {
        Point::ProjectionMidPage | Point::ProjectionBeforeCheckpoint => {
            emu.add_fault(pause("/_bulk"));
        }
        Point::ProjectionRefresh => {
            emu.add_fault(pause("*/_refresh"));
        }
        _ => unreachable!(),
    }
    let mut s = Serve::start(&config(&db, emu, &p, 1));
    emu.wait_paused(1, Duration::from_secs(30));
    let claimed: bool = c
        .query_one(
            "SELECT claim_token IS NOT NULL AND processed_at IS NULL FROM scan_projection_outbox WHERE execution_id = $1",
            &[&exec],
        )
        .unwrap()
        .get(0);
    assert!(claimed, "{point:?}: the row is not claimed at the pause");
    let mut tx = None;
    if point == Point::ProjectionBeforeCheckpoint {
        let mut t = locker.transaction().unwrap();
        t.execute(
            "SELECT 1 FROM scan_projection_outbox WHERE execution_id = $1 FOR UPDATE",
            &[&exec],
        )
        .unwrap();
        tx = Some(t);
        emu.release_all();
        db::wait_lock_waiter(&mut c, "a transaction blocked on the held lock");
    }
    s.kill9();
    if let Some(t) = tx {
        t.rollback().unwrap();
    }
    emu.clear_faults();
    emu.release_all();
    let processed: bool = c
        .query_one(
            "SELECT processed_at IS NOT NULL FROM scan_projection_outbox WHERE execution_id = $1",
            &[&exec],
        )
        .unwrap()
        .get(0);
    assert!(!processed, "{point:?}: processed before the kill");
    // A new process takes over once the dead one's lease expires (10 s).
    let _s2 = Serve::start(&config(&db, emu, &p, 1));
    wait_published(&mut c, exec, Duration::from_secs(60));
    snapshot(&mut c, &emu.es(), &p, exec)
}

fn check(point: Point) {
    let Some(emu) = emulator_for_faults("crash") else {
        return;
    };
    let ids = Ids::new();
    let want = reference(&emu, &ids);
    // 55 endpoint facts and 3 DNS facts.
    assert_eq!(want.es.iter().filter(|d| d.0.contains("facts")).count(), 58);
    let targets = &want.pg.iter().find(|t| t.0 == "child targets").unwrap().1;
    assert_eq!(
        targets
            .iter()
            .map(|t| t["value"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["192.0.2.7", "192.0.2.8"],
        "the reference run generated the child task"
    );
    // 50 distinct endpoints, each in the global and the owner's asset view.
    assert_eq!(
        want.es.iter().filter(|d| d.0.contains("assets")).count(),
        100
    );
    let got = crash_run(&emu, &ids, point);
    assert_eq!(got.pg, want.pg, "{point:?}: PostgreSQL state differs");
    assert_eq!(
        got.es.len(),
        want.es.len(),
        "{point:?}: document count differs"
    );
    for (g, w) in got.es.iter().zip(&want.es) {
        assert_eq!(g, w, "{point:?}: ES document differs");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_after_transaction_a_before_the_bulk() {
    check(Point::AfterTxA);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_during_the_bulk() {
    check(Point::DuringBulk);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_before_transaction_b() {
    check(Point::BeforeTxB);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_during_the_final_refresh() {
    check(Point::FinalRefresh);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_during_the_final_count() {
    check(Point::FinalCount);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_before_the_final_transaction_b() {
    check(Point::FinalBeforeTxB);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_the_publisher_mid_page() {
    check(Point::ProjectionMidPage);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_the_publisher_after_the_bulk_before_the_checkpoint() {
    check(Point::ProjectionBeforeCheckpoint);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn kill_the_publisher_during_its_refresh() {
    check(Point::ProjectionRefresh);
}

/// A row of the lifecycle runs (close, delete) in the outbox: progress and whether done.
fn run_progress(
    c: &mut postgres::Client,
    condition: &str,
    id: &(dyn postgres::types::ToSql + Sync),
) -> Option<(i64, bool)> {
    c.query_opt(
        &format!(
            "SELECT processed_endpoints, processed_at IS NOT NULL
               FROM scan_projection_outbox WHERE {condition} = $1"
        ),
        &[id],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

/// `kill -9` of `serve` in the middle of the outbox row whose `condition` column is `id`
/// (writes slowed, so the run is caught between pages): after its first checkpoint, at its
/// next search of the index `reads` (after the prefix: the owner's view, or the execution
/// projection). Then a new process, once the dead one's lease expires, until the row is
/// done.
#[allow(clippy::too_many_arguments)]
fn kill_mid_run(
    emu: &Emulator,
    cfg: &ChildConfig,
    mut serve: Serve,
    c: &mut postgres::Client,
    condition: &str,
    id: &(dyn postgres::types::ToSql + Sync),
    reads: &str,
    start_run: impl FnOnce(&Serve),
) -> Serve {
    emu.add_fault(FaultSpec::Latency {
        path: "/_bulk".into(),
        method: None,
        ms: 300,
        count: None,
    });
    start_run(&serve);
    wait_for(
        "the run's first checkpoint",
        Duration::from_secs(60),
        || run_progress(c, condition, id).is_some_and(|(n, _)| n > 0),
    );
    emu.add_fault(pause(&format!("/{}-{reads}/_search", cfg.prefix)));
    emu.wait_paused(1, Duration::from_secs(30));
    serve.kill9();
    emu.clear_faults();
    emu.release_all();
    let (before, done) = run_progress(c, condition, id).unwrap();
    assert!(!done, "the kill came after the run ({before})");
    let again = Serve::start(cfg);
    wait_for("the run to finish", Duration::from_secs(90), || {
        run_progress(c, condition, id).is_some_and(|(_, done)| done)
    });
    again
}

/// A child with pages of 10 on a fresh database, and an owner whose scanner's unscoped
/// execution has published 60 endpoints (10.0.0.1–60, tcp/443) seen at t0.
fn sixty_published(emu: &Emulator, tag: &str) -> (TestDb, ChildConfig, Serve, Principals) {
    use crate::support::factory;
    use crate::support::scan::{endpoints, t0};
    let db = db::fresh();
    let mut c = db.connect();
    let owner = factory::owner(&mut c, false);
    let scanner = factory::scanner(&mut c, None);
    let seen = factory::task(&mut c, owner.id, scanner.id, "port_scan", "running");
    let mut cfg = config(&db, emu, &prefix(tag), 1);
    cfg.extra_projection = "page_size = 10\n".into();
    let s = Serve::start(&cfg);
    let b = Batch::final_(uuid::Uuid::new_v4(), 0, endpoints(0, 60, t0()));
    post_until_ok(&s.base, &scanner.token, seen.execution_id, &b);
    wait_published(&mut c, seen.execution_id, Duration::from_secs(60));
    (db, cfg, s, Principals { owner, scanner })
}

struct Principals {
    owner: crate::support::factory::Principal,
    scanner: crate::support::factory::Principal,
}

/// Every document of an asset view, refreshed.
fn view(emu: &Emulator, prefix: &str, view: &str) -> Vec<serde_json::Value> {
    let es = emu.es();
    let index = format!("{prefix}-assets-{view}");
    es.post(&format!("/{index}/_refresh"), &serde_json::json!({}));
    let (status, body) = es.post(
        &format!("/{index}/_search"),
        &serde_json::json!({"size": 1000, "query": {"match_all": {}}}),
    );
    assert_eq!(status, 200, "{body}");
    body["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["_source"].clone())
        .collect()
}

/// `kill -9` in the middle of a close run: the run resumes from its checkpoint and both
/// asset views end exactly as one uninterrupted run leaves them.
#[test]
#[ignore = "needs PostgreSQL"]
fn kill_in_the_middle_of_a_close_run() {
    use crate::support::factory;
    use crate::support::scan::endpoints;

    let Some(emu) = emulator_for_faults("crash-close") else {
        return;
    };
    let (db, cfg, serve, who) = sixty_published(&emu, "rc");
    let mut c = db.connect();
    let scoped = factory::task_with_targets(
        &mut c,
        who.owner.id,
        who.scanner.id,
        "port_scan",
        "running",
        &[("cidr", "10.0.0.0/24")],
    );
    c.execute(
        "UPDATE tasks SET ports = '443' WHERE id = $1",
        &[&scoped.task_id],
    )
    .unwrap();
    // The scoped scan sees the first 5 now, so it closes 55 over six pages.
    let _serve = kill_mid_run(
        &emu,
        &cfg,
        serve,
        &mut c,
        "closing_execution_id",
        &scoped.execution_id,
        "assets-user-*",
        |s| {
            let now = chrono::Utc::now().to_rfc3339();
            let b = Batch::final_(uuid::Uuid::new_v4(), 0, endpoints(0, 5, &now));
            post_until_ok(&s.base, &who.scanner.token, scoped.execution_id, &b);
        },
    );
    let start: chrono::DateTime<chrono::Utc> = c
        .query_one(
            "SELECT started_at FROM executions WHERE id = $1",
            &[&scoped.execution_id],
        )
        .unwrap()
        .get(0);
    let start = start.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    for name in ["global", "user"] {
        let docs = view(&emu, &cfg.prefix, name);
        assert_eq!(docs.len(), 60, "{name}: one document per endpoint");
        let closed: Vec<&serde_json::Value> =
            docs.iter().filter(|d| d["status"] == "closed").collect();
        assert_eq!(closed.len(), 55, "{name}: every unseen endpoint closed");
        for d in closed {
            assert_eq!(d["closed_at"], serde_json::json!(start), "{d}");
            assert_eq!(d["closed_by"], scoped.execution_id.to_string());
        }
    }
}

/// `kill -9` in the middle of a deletion run: it resumes, and every document the
/// tombstone covers is gone from the owner's view, the global view untouched.
#[test]
#[ignore = "needs PostgreSQL"]
fn kill_in_the_middle_of_a_deletion() {
    let Some(emu) = emulator_for_faults("crash-delete") else {
        return;
    };
    let (db, cfg, serve, who) = sixty_published(&emu, "rd");
    let mut c = db.connect();
    let global = view(&emu, &cfg.prefix, "global");
    let tombstone: i64 = c
        .query_one(
            "INSERT INTO asset_tombstones (owner_id, target) VALUES ($1, '10.0.0.0/24') RETURNING id",
            &[&who.owner.id],
        )
        .unwrap()
        .get(0);
    let _serve = kill_mid_run(
        &emu,
        &cfg,
        serve,
        &mut c,
        "tombstone_id",
        &tombstone,
        "assets-user-*",
        |_| {
            queue_deletion(&db, who.owner.id, tombstone);
        },
    );
    assert_eq!(view(&emu, &cfg.prefix, "user").len(), 0);
    assert_eq!(view(&emu, &cfg.prefix, "global"), global);
}

/// `kill -9` in the middle of an age-limit run (retention's `asset_days`): it resumes, every
/// stale document is gone from the owner's view with exactly one tombstone each (a page
/// replayed after the kill writes none twice), the global view untouched.
#[test]
#[ignore = "needs PostgreSQL"]
fn kill_in_the_middle_of_an_age_limit_run() {
    let Some(emu) = emulator_for_faults("crash-expire") else {
        return;
    };
    let (db, cfg, serve, who) = sixty_published(&emu, "rx");
    let mut c = db.connect();
    let global = view(&emu, &cfg.prefix, "global");
    let before = chrono::Utc::now() - chrono::Duration::days(1);
    let reads = "assets-user-*";
    let _serve = kill_mid_run(
        &emu,
        &cfg,
        serve,
        &mut c,
        "expire_before",
        &before,
        reads,
        |_| {
            db.connect()
                .execute(
                    "INSERT INTO scan_projection_outbox (kind, owner_id, expire_before)
                 VALUES ('expire', $1, $2)",
                    &[&who.owner.id, &before],
                )
                .unwrap();
        },
    );
    assert_eq!(view(&emu, &cfg.prefix, "user").len(), 0);
    assert_eq!(view(&emu, &cfg.prefix, "global"), global);
    let (tombstones, endpoints): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT count(*), count(DISTINCT (target, port, transport))
                   FROM asset_tombstones WHERE owner_id = $1",
                &[&who.owner.id],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((tombstones, endpoints), (60, 60));
}

/// Queues a tombstone's deletion run, as `scanstore-admin asset delete` does.
fn queue_deletion(db: &TestDb, owner: uuid::Uuid, tombstone: i64) {
    db.connect()
        .execute(
            "INSERT INTO scan_projection_outbox (kind, owner_id, tombstone_id) VALUES ('delete', $1, $2)",
            &[&owner, &tombstone],
        )
        .unwrap();
}

/// `kill -9` in the middle of a task's deletion run: it resumes from its checkpoint, and
/// the views end exactly as they were before the task was published (its 40 later
/// sightings of the other task's endpoints taken back, its 20 own endpoints gone), with
/// its documents and rows gone.
#[test]
#[ignore = "needs PostgreSQL"]
fn kill_in_the_middle_of_a_task_deletion() {
    use crate::support::factory;
    use crate::support::scan::endpoints;

    let Some(emu) = emulator_for_faults("crash-forget") else {
        return;
    };
    let (db, cfg, serve, who) = sixty_published(&emu, "rf");
    let sorted = |name: &str| {
        let mut docs = view(&emu, &cfg.prefix, name);
        docs.sort_by_key(|d| d.to_string());
        docs
    };
    let before = (sorted("global"), sorted("user"));
    let mut c = db.connect();
    let later = factory::task(&mut c, who.owner.id, who.scanner.id, "port_scan", "running");
    let now = chrono::Utc::now().to_rfc3339();
    let mut seen = endpoints(0, 40, &now);
    seen.extend(endpoints(60, 20, &now));
    let b = Batch::final_(uuid::Uuid::new_v4(), 0, seen);
    post_until_ok(&serve.base, &who.scanner.token, later.execution_id, &b);
    wait_published(&mut c, later.execution_id, Duration::from_secs(60));
    assert_eq!(view(&emu, &cfg.prefix, "user").len(), 80);

    let task = later.task_id;
    let _serve = kill_mid_run(
        &emu,
        &cfg,
        serve,
        &mut c,
        "forget_task_id",
        &task,
        "execution-endpoints",
        |_| {
            crate::support::admin::admin(&db, &["task", "delete", &task.to_string()]).ok();
        },
    );
    assert_eq!((sorted("global"), sorted("user")), before);
    let left: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM tasks WHERE id = $1)
                  + (SELECT count(*) FROM executions WHERE task_id = $1)
                  + (SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $2)",
            &[&task, &later.execution_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the task's rows are gone");
    for index in ["execution-endpoints", "facts-*"] {
        let n = emu.es().refreshed_count(
            &format!("{}-{index}", cfg.prefix),
            serde_json::json!({"term": {"task_id": task.to_string()}}),
        );
        assert_eq!(n, 0, "{index}: the task's documents are gone");
    }
}
