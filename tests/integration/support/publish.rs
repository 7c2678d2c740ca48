//! Driving and inspecting publication from tests: workers ticked by hand (or held
//! mid-tick), outbox rows and their progress, the asset documents of a view.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use super::stack::Stack;

/// A worker on the stack's app, for tests that tick by hand.
pub fn worker(s: &Stack) -> scanstore::projection::worker::Worker {
    scanstore::projection::worker::Worker::new(Arc::clone(&s.server.app_arc()))
}

/// One tick on another thread with every request matching `path` held: once `paused` of
/// them wait, `meanwhile` runs, then they are let go. Returns the tick's outcome.
pub fn tick_holding(
    s: &Stack,
    path: &str,
    paused: usize,
    meanwhile: impl FnOnce(),
) -> scanstore::projection::worker::TickOutcome {
    let hold = s.emulator().add_fault(super::emulator::FaultSpec::Pause {
        path: path.into(),
        method: None,
        count: None,
    });
    let ticking = {
        let w = worker(s);
        std::thread::spawn(move || w.tick().unwrap())
    };
    s.emulator().wait_paused(paused, Duration::from_secs(10));
    meanwhile();
    s.emulator().remove_fault(hold);
    s.emulator().release_all();
    ticking.join().unwrap()
}

/// A stack with no workers that publishes one page of 10 per tick, holding a 25-endpoint
/// execution (pages of 10, 10 and 5) with its final uploaded; `None` on a real cluster.
pub fn three_pages_one_per_tick(name: &str) -> Option<Stack> {
    let s = Stack::with_faults(name, "port_scan", |cfg| {
        cfg.projection.workers = 0;
        cfg.projection.page_size = 10;
        cfg.projection.pages_per_tick = 1;
    })?;
    super::scan::upload_execution(
        s.base(),
        &s.scanner.token,
        s.execution(),
        0,
        25,
        25,
        super::scan::t0(),
    );
    Some(s)
}

/// The outbox row of an execution as JSON (for before/after comparisons).
pub fn outbox_row(s: &Stack, execution: Uuid) -> Value {
    let text: String = s
        .sql()
        .query_one(
            "SELECT row_to_json(o)::text FROM scan_projection_outbox o WHERE execution_id = $1",
            &[&execution],
        )
        .unwrap()
        .get(0);
    serde_json::from_str(&text).unwrap()
}

/// A row's progress: (`processed_endpoints`, `attempts`).
pub fn progress(row: &Value) -> (Option<i64>, Option<i64>) {
    (
        row["processed_endpoints"].as_i64(),
        row["attempts"].as_i64(),
    )
}

/// The stack's execution is wholly published: its row counts `endpoints`, and each asset
/// view holds that many documents.
pub fn assert_published(s: &Stack, endpoints: usize) {
    let row = outbox_row(s, s.execution());
    assert_eq!(row["processed_endpoints"], endpoints, "{row}");
    assert_eq!(assets(s, "global").len(), endpoints);
    assert_eq!(assets(s, "user").len(), endpoints);
}

/// Every document of an asset view (alias `global` or `user`), sorted by id.
pub fn assets(s: &Stack, view: &str) -> Vec<(String, Value)> {
    let es = s.es();
    let alias = format!("{}-assets-{view}", s.prefix());
    es.post(&format!("/{alias}/_refresh"), &serde_json::json!({}));
    let (status, body) = es.post(
        &format!("/{alias}/_search"),
        &serde_json::json!({"size": 10000, "sort": [{"ip": "asc"}, {"port": "asc"}], "query": {"match_all": {}}}),
    );
    assert_eq!(status, 200, "{body}");
    let mut docs: Vec<(String, Value)> = body["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_source"].clone()))
        .collect();
    docs.sort_by(|a, b| a.0.cmp(&b.0));
    docs
}

/// Ticks until the execution's row is processed (at most `max` ticks).
pub fn tick_until_done(
    w: &scanstore::projection::worker::Worker,
    s: &Stack,
    execution: Uuid,
    max: usize,
) {
    for _ in 0..max {
        w.tick().unwrap();
        if outbox_row(s, execution)["processed_at"].is_string() {
            return;
        }
    }
    panic!(
        "not published after {max} ticks: {}",
        outbox_row(s, execution)
    );
}

/// Whether every outbox row is processed.
pub fn outbox_drained(s: &Stack) -> bool {
    let pending: i64 = s
        .sql()
        .query_one(
            "SELECT count(*) FROM scan_projection_outbox WHERE processed_at IS NULL",
            &[],
        )
        .unwrap()
        .get(0);
    pending == 0
}

/// Ticks a hand-driven worker until every outbox row is processed (at most `max` ticks).
pub fn drain(s: &Stack, max: usize) {
    let w = worker(s);
    for _ in 0..max {
        w.tick().unwrap();
        if outbox_drained(s) {
            return;
        }
    }
    panic!("outbox not drained after {max} ticks");
}

/// Rebuilds the asset views, which verifies the new version against the live one.
pub fn rebuild(s: &Stack) -> scanstore::rebuild::Outcome {
    let opts = scanstore::rebuild::Options {
        settle_timeout: std::time::Duration::from_secs(60),
        rounds: 5,
    };
    scanstore::rebuild::rebuild(s.server.app(), opts).expect("rebuild")
}

/// Makes the outbox row whose `column` is `id` due again from its first page (a replay,
/// as after a lost completion or a requeue); the next ticks publish it again.
pub fn reopen(s: &Stack, column: &str, id: &(dyn postgres::types::ToSql + Sync)) {
    s.sql()
        .execute(
            &format!(
                "UPDATE scan_projection_outbox SET processed_at = NULL, cursor = NULL,
                        phase = 'publishing', processed_endpoints = 0
                  WHERE {column} = $1"
            ),
            &[id],
        )
        .unwrap();
}
