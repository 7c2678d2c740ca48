//! Retention: stale assets deleted with tombstones that no replay or rebuild undoes,
//! tombstones retired into marks that keep doing so, finished executions' upload records
//! pruned while the execution still reads and rebuilds, old facts indices dropped a month
//! at a time, one run at a time across instances, the daily run inside `serve`, and the
//! dry run.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::publish::{assets, drain, rebuild, reopen};
use crate::support::read::ok;
use crate::support::scan::{self, endpoint, stored, t0, Batch};
use crate::support::stack::Stack;
use crate::support::{config_file, wait_for};
use scanstore::retention::{self, Outcome, Report};

fn run(s: &Stack) -> Report {
    match retention::run(s.server.app(), &AtomicBool::new(false)).expect("retention run") {
        Outcome::Ran(report) => report,
        Outcome::Busy => panic!("another run holds the lock"),
    }
}

fn owner_ids(s: &Stack) -> Vec<String> {
    let prefix = format!("{}-", s.owner.id.simple());
    assets(s, "user")
        .into_iter()
        .map(|(id, _)| id.trim_start_matches(&prefix).to_string())
        .collect()
}

fn count(s: &Stack, sql: &str) -> i64 {
    s.sql().query_one(sql, &[]).unwrap().get(0)
}

/// A stack with `adjust`'s retention configured, once `serve`'s daily run, due at start,
/// has completed on the empty stack and what it queued is published: left running, it
/// would race the runs a test makes (holding their lock, or expiring documents first).
fn settled(adjust: impl FnOnce(&mut scanstore::config::Config)) -> Stack {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", adjust);
    wait_for_the_run_at_start(&s);
    drain(&s, 20);
    s
}

fn wait_for_the_run_at_start(s: &Stack) {
    wait_for("the daily run at start", Duration::from_secs(20), || {
        count(
            s,
            "SELECT count(*) FROM retention_runs WHERE outcome = 'completed'",
        ) == 1
    });
}

/// A new running execution of the stack's task.
fn new_execution(s: &Stack) -> Uuid {
    s.sql()
        .query_one(
            "INSERT INTO executions (task_id, scanner_id, status, started_at)
             VALUES ($1, $2, 'running', now()) RETURNING id",
            &[&s.run.task_id, &s.scanner.id],
        )
        .unwrap()
        .get(0)
}

/// A new execution observes 10.0.0.1:22 now: the owner's view then holds `expected`, and
/// the asset is back with `first_seen` now (whatever was deleted before stays gone).
fn rescan_brings_back(s: &Stack, expected: &[&str]) {
    let now = Utc::now().to_rfc3339();
    post_final(s, new_execution(s), vec![endpoint("10.0.0.1", 22, &now)]);
    drain(s, 20);
    assert_eq!(owner_ids(s), expected);
    assert_eq!(assets(s, "user")[0].1["first_seen"], json!(stored(&now)));
}

fn post_final(s: &Stack, execution: Uuid, endpoints: Vec<Value>) {
    let b = Batch::final_(Uuid::new_v4(), 0, endpoints);
    let r = scan::post(s.base(), &s.scanner.token, execution, &b);
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn stale_assets_are_deleted_with_tombstones_and_stay_deleted_until_seen_again() {
    let s = settled(|cfg| {
        cfg.projection.workers = 0;
        cfg.retention.asset_age = Some(chrono::Duration::days(1));
    });
    let now = Utc::now().to_rfc3339();
    post_final(
        &s,
        s.execution(),
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.2", 80, t0()),
            endpoint("10.0.0.3", 443, &now),
        ],
    );
    drain(&s, 20);
    let global_before = assets(&s, "global");
    assert_eq!(global_before.len(), 3);

    let report = run(&s);
    assert_eq!((report.stale_assets, report.expire_runs), (2, 1));
    assert_eq!(
        count(&s, "SELECT count(*) FROM scan_projection_outbox WHERE kind = 'expire' AND processed_at IS NULL"),
        1
    );
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.0.3-tcp-443"]);
    assert_eq!(
        assets(&s, "global"),
        global_before,
        "the global view is kept"
    );
    // One tombstone per stale endpoint, at the time it was last seen.
    let rows = s
        .sql()
        .query(
            "SELECT target::text, port, transport, deleted_at FROM asset_tombstones
              WHERE owner_id = $1 ORDER BY target",
            &[&s.owner.id],
        )
        .unwrap();
    let tombstones: Vec<(String, i32, String, String)> = rows
        .iter()
        .map(|r| {
            let at: chrono::DateTime<Utc> = r.get(3);
            (
                r.get(0),
                r.get(1),
                r.get(2),
                scanstore::upload::facts::es_time(&at),
            )
        })
        .collect();
    assert_eq!(
        tombstones,
        [
            ("10.0.0.1/32".into(), 22, "tcp".into(), stored(t0())),
            ("10.0.0.2/32".into(), 80, "tcp".into(), stored(t0())),
        ]
    );

    // A second run finds nothing more, and writes no second tombstone.
    let again = run(&s);
    assert_eq!(again.stale_assets, 0);
    drain(&s, 20);
    assert_eq!(count(&s, "SELECT count(*) FROM asset_tombstones"), 2);

    // The execution's pages replayed from the start: still deleted.
    reopen(&s, "execution_id", &s.execution());
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.0.3-tcp-443"]);

    // A rebuild verifies against the live view and keeps them deleted.
    rebuild(&s);
    assert_eq!(owner_ids(&s), ["10.0.0.3-tcp-443"]);

    // Seen again: back, first seen now.
    rescan_brings_back(&s, &["10.0.0.1-tcp-22", "10.0.0.3-tcp-443"]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_retired_tombstone_leaves_marks_that_keep_the_deletion() {
    let s = settled(|cfg| {
        cfg.projection.workers = 0;
        // Shorter than the file allows (it must outlast the upload window), so that an
        // observation the test can upload is old enough.
        cfg.retention.tombstone_age = Some(chrono::Duration::hours(30));
    });
    post_final(
        &s,
        s.execution(),
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.2", 22, t0()),
        ],
    );
    drain(&s, 20);
    let global_before = assets(&s, "global");
    let owner = s.owner.id.to_string();
    crate::support::admin::admin(&s.db, &["asset", "delete", "--owner", &owner, "10.0.0.1"]).ok();
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.0.2-tcp-22"]);
    // Made 36 hours ago: after every observation above (t0 is two days back at 10:00).
    s.sql()
        .execute(
            "UPDATE asset_tombstones SET deleted_at = now() - interval '36 hours'",
            &[],
        )
        .unwrap();

    let planned = retention::plan(s.server.app()).unwrap();
    assert_eq!(planned.retired.tombstones, 1);
    let report = run(&s);
    assert_eq!(
        report.retired,
        retention::Retired {
            tombstones: 1,
            marked: 1
        }
    );
    assert_eq!(count(&s, "SELECT count(*) FROM asset_tombstones"), 0);
    let marked = s.es().refreshed_count(
        &format!("{}-execution-endpoints", s.prefix()),
        json!({"term": {"erased": true}}),
    );
    assert_eq!(marked, 1);

    // Without the row, the mark keeps it out: a replay from the start, then a rebuild.
    reopen(&s, "execution_id", &s.execution());
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.0.2-tcp-22"]);
    assert_eq!(
        assets(&s, "global"),
        global_before,
        "the global view is kept"
    );
    rebuild(&s);
    assert_eq!(owner_ids(&s), ["10.0.0.2-tcp-22"]);
    // A rescan still brings it back.
    rescan_brings_back(&s, &["10.0.0.1-tcp-22", "10.0.0.2-tcp-22"]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_asset_merged_after_its_page_was_read_is_kept() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
    });
    post_final(
        &s,
        s.execution(),
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.2", 22, t0()),
        ],
    );
    drain(&s, 20);
    let app = s.server.app();
    let targets =
        scanstore::es::alias::current(&app.es, &app.config.elasticsearch.index_prefix).unwrap();
    let ids: Vec<std::borrow::Cow<str>> = assets(&s, "user")
        .into_iter()
        .map(|(id, _)| id.into())
        .collect();
    let run = scanstore::retention::assets::ExpireRun::new(Utc::now());
    let (ops, stale) = run
        .operations(&app.es, &app.db, &targets, s.owner.id, &ids)
        .unwrap();
    assert_eq!((ops.len(), stale), (2, 2));

    // A rescan of one of them lands between the read and the delete.
    let now = Utc::now().to_rfc3339();
    post_final(&s, new_execution(&s), vec![endpoint("10.0.0.1", 22, &now)]);
    drain(&s, 20);
    let report = app
        .writer(1, scanstore::projection::worker::OUTBOX_BACKOFF, "test")
        .write(&ops)
        .expect("a changed document is kept, which is no failure");
    assert_eq!(report.items, 2);
    let left = assets(&s, "user");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].1["ip"], "10.0.0.1");
    assert_eq!(left[0].1["last_seen"], json!(stored(&now)));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn finished_executions_lose_their_upload_records_but_still_read_and_rebuild() {
    let s = settled(|cfg| {
        cfg.projection.workers = 0;
        cfg.retention.execution_age = Some(chrono::Duration::days(1));
        cfg.retention.batch_size = 100;
    });
    let b = Batch::final_(
        Uuid::new_v4(),
        0,
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.2", 80, t0()),
        ],
    );
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b).status,
        200
    );
    drain(&s, 20);
    // A second execution finished as long ago, whose publication is still owed: kept.
    let owed = new_execution(&s);
    post_final(&s, owed, vec![endpoint("10.0.0.9", 22, t0())]);
    s.sql()
        .execute(
            "UPDATE executions SET finished_at = now() - interval '2 days' WHERE id = ANY($1)",
            &[&vec![s.execution(), owed]],
        )
        .unwrap();

    let plan = retention::plan(s.server.app()).unwrap();
    let report = run(&s);
    assert_eq!(
        plan.pruned, report.pruned,
        "the dry run saw what the run did"
    );
    assert_eq!(report.pruned.executions, 1);
    assert_eq!(report.pruned.receipts, 1);
    assert_eq!(report.pruned.upload_streams, 1);
    assert_eq!(report.pruned.outbox_rows, 1);
    let left = |table: &str, id: Uuid| -> i64 {
        s.sql()
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE execution_id = $1"),
                &[&id],
            )
            .unwrap()
            .get(0)
    };
    for table in [
        "scan_upload_receipts",
        "scan_upload_stream",
        "scan_projection_outbox",
    ] {
        assert_eq!(left(table, s.execution()), 0, "{table}");
        assert_eq!(left(table, owed), 1, "{table} of the owed execution");
    }
    let pruned: Option<chrono::DateTime<Utc>> = s
        .sql()
        .query_one(
            "SELECT pruned_at FROM executions WHERE id = $1",
            &[&s.execution()],
        )
        .unwrap()
        .get(0);
    assert!(pruned.is_some());

    // It still reads as published, with its counts.
    let body = ok(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/tasks/{}/executions", s.run.task_id),
    );
    let e = body["executions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == s.execution().to_string())
        .unwrap()
        .clone();
    assert_eq!(e["projection_status"], "ready", "{e}");
    assert_eq!(e["counts"]["endpoints"], 2, "{e}");
    // A retry of its final is refused now (no receipt answers it), and writes nothing.
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(count(&s, "SELECT count(*) FROM scan_upload_receipts"), 1);

    // A rebuild replays the pruned execution too and verifies equal.
    drain(&s, 20);
    let outcome = rebuild(&s);
    assert_eq!(outcome.executions, 2);
    assert_eq!(
        owner_ids(&s),
        ["10.0.0.1-tcp-22", "10.0.0.2-tcp-80", "10.0.0.9-tcp-22"]
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn facts_indices_are_dropped_a_whole_month_at_a_time() {
    let s = settled(|cfg| {
        cfg.projection.workers = 0;
        cfg.retention.facts_months = Some(1);
    });
    post_final(&s, s.execution(), vec![endpoint("10.0.0.1", 22, t0())]);
    let prefix = s.prefix();
    let old = format!("{prefix}-facts-2020.01");
    let es = s.es();
    let (status, body) = es.put(&format!("/{old}"), &json!({}));
    assert_eq!(status, 200, "{body}");
    let current = scanstore::es::index::facts_index(&prefix, &scan::parse(t0()));

    let plan = retention::plan(s.server.app()).unwrap();
    assert_eq!(plan.facts_indices, std::slice::from_ref(&old));
    assert_eq!(es.head(&format!("/{old}")), 200, "a dry run drops nothing");
    let report = run(&s);
    assert_eq!(report.facts_indices, std::slice::from_ref(&old));
    assert_eq!(es.head(&format!("/{old}")), 404);
    assert_eq!(es.head(&format!("/{current}")), 200);
    assert!(s.fact_count() > 0);
    // Recorded, with what it removed.
    let removed: Value = s
        .sql()
        .query_one(
            "SELECT removed FROM retention_runs WHERE outcome = 'completed' ORDER BY id DESC LIMIT 1",
            &[],
        )
        .unwrap()
        .get::<_, postgres::types::Json<Value>>(0)
        .0;
    assert_eq!(removed["facts_indices"], 1);
    assert_eq!(removed["facts_index_names"], json!([old]));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn one_instance_runs_at_a_time_and_serve_runs_it_when_due() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
        cfg.retention.execution_age = Some(chrono::Duration::days(30));
        cfg.retention.check_every = Duration::from_millis(100);
    });
    // The daily run: due at start (no run recorded), then not again within the interval.
    wait_for_the_run_at_start(&s);
    std::thread::sleep(Duration::from_millis(500)); // five more checks: none runs
    assert_eq!(count(&s, "SELECT count(*) FROM retention_runs"), 1);

    // While another session holds the run's lock, a run does nothing.
    let mut holder = s.sql();
    holder
        .execute("SELECT pg_advisory_lock(x'726574656e74696f'::bigint)", &[])
        .unwrap();
    let outcome = retention::run(s.server.app(), &AtomicBool::new(false)).unwrap();
    assert!(matches!(outcome, Outcome::Busy), "{outcome:?}");
    assert_eq!(count(&s, "SELECT count(*) FROM retention_runs"), 1);
    drop(holder);
    assert!(matches!(
        retention::run(s.server.app(), &AtomicBool::new(false)).unwrap(),
        Outcome::Ran(_)
    ));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_command_line_shows_a_dry_run_and_runs() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
    });
    post_final(&s, s.execution(), vec![endpoint("10.0.0.1", 22, t0())]);
    drain(&s, 20);
    s.sql()
        .execute(
            "UPDATE executions SET finished_at = now() - interval '3 days' WHERE id = $1",
            &[&s.execution()],
        )
        .unwrap();
    let app = s.server.app();
    let db_ca = app
        .config
        .database
        .ca_file
        .as_ref()
        .map(|f| format!("ca_file = {:?}\n", f.display().to_string()))
        .unwrap_or_default();
    let config = config_file(&format!(
        "[database]\nurl = {:?}\n{db_ca}[elasticsearch]\nurl = {:?}\nindex_prefix = {:?}\n{}\
         [retention]\nexecution_days = 2\n",
        app.config.database.url,
        app.config.elasticsearch.url,
        app.config.elasticsearch.index_prefix,
        crate::support::secure::suite_access().toml(),
    ));
    let admin = |args: &[&str]| {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(crate::support::admin::SCRIPT)
            .arg("--config")
            .arg(&config.0)
            .args(args)
            .env("SCANSTORE_BIN", env!("CARGO_BIN_EXE_scanstore"));
        crate::support::secure::suite_access().apply(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let dry = admin(&["retention", "run", "--dry-run"]);
    assert!(dry.contains("dry_run=true\n"), "{dry}");
    assert!(dry.contains("executions_pruned=1\n"), "{dry}");
    assert!(dry.contains("receipts=1\n"), "{dry}");
    assert_eq!(count(&s, "SELECT count(*) FROM scan_upload_receipts"), 1);
    assert_eq!(count(&s, "SELECT count(*) FROM retention_runs"), 0);
    let done = admin(&["retention", "run"]);
    assert!(done.contains("dry_run=false\n"), "{done}");
    assert!(done.contains("executions_pruned=1\n"), "{done}");
    assert_eq!(count(&s, "SELECT count(*) FROM scan_upload_receipts"), 0);
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM retention_runs WHERE outcome = 'completed'"
        ),
        1
    );
}
