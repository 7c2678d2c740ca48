//! The pool: a checkout that times out becomes 503 + `Retry-After: 2`, and every
//! connection goes back after its short transaction.

use scanstore::app::App;
use scanstore::db::{DbError, Queries, Stage};
use scanstore::http::{ApiError, Reply, Req};

use super::NO_ES;
use crate::support::logs::{self, HELD_STAGE};
use crate::support::server::{config, got, http, TestServer};
use crate::support::{db, wait_for};
use std::time::Duration;

/// A handler that runs one short transaction, like every write stage does.
fn one_transaction(app: &App, _req: &Req) -> Result<Reply, ApiError> {
    let n: i32 = app.db.in_tx(Stage::Reserve, |tx| {
        Ok::<_, DbError>(tx.query_one("SELECT 1", &[])?.get(0))
    })?;
    Ok(Reply::ok(serde_json::json!({ "n": n })))
}

#[test]
#[ignore = "needs PostgreSQL"]
fn checkout_timeout_answers_503_with_retry_after_2() {
    let t = db::fresh();
    let mut cfg = config(&t.url, NO_ES);
    cfg.database.pool_size = 1;
    cfg.database.pool_timeout = std::time::Duration::from_millis(200);
    let server = TestServer::start_with(cfg, one_transaction);

    let held = server
        .app()
        .db
        .checkout(Stage::Read)
        .expect("the only connection");
    let r = got(http().post(server.url("/tx")).send_empty());
    assert_eq!(r.status, 503);
    assert_eq!(r.retry_after.as_deref(), Some("2"));
    assert_eq!(r.body["error"]["code"], "database_busy");
    assert_eq!(r.body["success"], false);
    assert!(!logs::lines_with(&["event=ScanWriteConnectionTimedOut", "stage=reserve"]).is_empty());

    drop(held);
    let r = got(http().post(server.url("/tx")).send_empty());
    assert_eq!(r.status, 200);
    assert_eq!(r.body["n"], 1);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn single_connection_pool_serves_many_requests() {
    let t = db::fresh();
    let mut cfg = config(&t.url, NO_ES);
    cfg.database.pool_size = 1;
    cfg.server.worker_threads = 8;
    let server = TestServer::start_with(cfg, one_transaction);
    let base = server.base.clone();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| got(http().post(format!("{base}/tx")).send_empty()).status)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap().iter().all(|s| *s == 200));
    }
    // The background workers (publisher, sampler, lease sweep) borrow the connection now
    // and then, so it must come back idle, not be idle at this very instant.
    assert_eq!(server.app().db.state().connections, 1);
    wait_for(
        "the connection to be returned",
        Duration::from_secs(10),
        || server.app().db.state().idle_connections == 1,
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn acquire_and_release_are_logged_with_stage_and_times() {
    let t = db::fresh();
    let server = TestServer::start_with(config(&t.url, NO_ES), one_transaction);
    assert_eq!(got(http().post(server.url("/tx")).send_empty()).status, 200);
    let acquired = logs::lines_with(&[
        "event=ScanWriteConnectionAcquired",
        "stage=reserve",
        "wait_ms=",
    ]);
    let released = logs::lines_with(&[
        "event=ScanWriteConnectionReleased",
        "stage=reserve",
        "hold_ms=",
    ]);
    assert!(!acquired.is_empty() && !released.is_empty());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_es_request_sent_while_holding_a_connection_is_reported() {
    let t = db::fresh();
    let server = TestServer::start_with(config(&t.url, NO_ES), one_transaction);
    let app = server.app();
    let marker = format!("/held-{}/_count", uuid::Uuid::new_v4().simple());
    let free = format!("/free-{}/_count", uuid::Uuid::new_v4().simple());
    {
        let _conn = app.db.checkout(Stage::Health).unwrap();
        // The request itself fails (no ES there); the report comes before it is sent.
        let _ = app.es.request("GET", &marker, None);
    }
    let _ = app.es.request("GET", &free, None);
    let reported = logs::lines_with(&["event=ElasticsearchRequestWithConnectionHeld", &marker]);
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(reported[0].contains(HELD_STAGE) && reported[0].contains("method=GET"));
    assert!(
        logs::lines_with(&["event=ElasticsearchRequestWithConnectionHeld", &free]).is_empty(),
        "a request after the connection went back is not reported"
    );
    let metrics = scanstore::telemetry::metrics::get().render();
    assert!(
        metrics.contains("es_requests_with_connection_held_total{stage=\"health\"}"),
        "{metrics}"
    );
}
