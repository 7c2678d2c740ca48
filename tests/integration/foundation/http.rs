//! The HTTP worker pool: error envelope, body limits, slow clients, panics, shutdown.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use scanstore::app::App;
use scanstore::http::{router, ApiError, Reply, Req};

use super::NO_ES;
use crate::support::db;
use crate::support::server::{config, got, http, keep_alive_bursts, TestServer};
use crate::support::wait_for;

/// How many `/slow` requests have begun (the shutdown test waits for its own).
static SLOW_STARTED: AtomicUsize = AtomicUsize::new(0);

fn test_handler(app: &App, req: &Req) -> Result<Reply, ApiError> {
    match req.path.as_str() {
        "/panic" => panic!("handler bug"),
        "/slow" => {
            SLOW_STARTED.fetch_add(1, Ordering::SeqCst);
            // The slow work itself: the request is in flight for this long.
            std::thread::sleep(Duration::from_millis(600));
            Ok(Reply::ok(serde_json::json!({"slow": true})))
        }
        "/echo" => Ok(Reply::ok(serde_json::json!({ "bytes": req.body.len() }))),
        _ => router::route(app, req),
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn panic_answers_500_and_the_worker_survives() {
    let t = db::fresh();
    let mut cfg = config(&t.url, NO_ES);
    cfg.server.worker_threads = 1;
    let server = TestServer::start_with(cfg, test_handler);
    for _ in 0..3 {
        let r = got(http().get(server.url("/panic")).call());
        assert_eq!(r.status, 500);
        assert_eq!(r.body["error"]["code"], "internal_error");
        assert_eq!(got(http().get(server.url("/healthz")).call()).status, 200);
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn unknown_route_and_wrong_method_use_the_envelope() {
    let t = db::fresh();
    let server = TestServer::start(config(&t.url, NO_ES));
    let r = got(http().get(server.url("/nope")).call());
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(r.body["success"], false);
    let r = got(http().post(server.url("/healthz")).send_empty());
    assert_eq!(r.status, 405);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn body_over_the_limit_is_413() {
    let t = db::fresh();
    let mut cfg = config(&t.url, NO_ES);
    cfg.server.max_body_bytes = 1024;
    let server = TestServer::start_with(cfg, test_handler);
    let r = got(http().post(server.url("/echo")).send(&[b'x'; 1024][..]));
    assert_eq!((r.status, r.body["bytes"].as_u64()), (200, Some(1024)));
    let r = got(http().post(server.url("/echo")).send(&[b'x'; 2048][..]));
    assert_eq!(r.status, 413);
    assert_eq!(r.body["error"]["code"], "payload_too_large");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn trickling_client_is_cut_off_and_others_are_served() {
    let t = db::fresh();
    let mut cfg = config(&t.url, NO_ES);
    cfg.server.worker_threads = 1;
    cfg.server.body_deadline = Duration::from_millis(1000);
    let server = TestServer::start_with(cfg, test_handler);
    let addr = server.base.trim_start_matches("http://").to_string();

    let trickler = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
            .unwrap();
        // One byte every 200 ms: each read succeeds, the whole body never arrives within
        // the 1 s deadline. Keep trickling while waiting for the answer.
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..25 {
                if w.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    wait_for(
        "the trickled body to be read",
        Duration::from_secs(5),
        || server.app().http_load.body_reads.get() == 1,
    );
    // The only worker is busy with the trickler until its deadline passes.
    let r = got(http().get(server.url("/healthz")).call());
    assert_eq!(r.status, 200);
    let answer = trickler.join().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "trickler got: {answer:?}"
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn shutdown_lets_in_flight_requests_finish() {
    let t = db::fresh();
    let server = TestServer::start_with(config(&t.url, NO_ES), test_handler);
    let url = server.url("/slow");
    let started = SLOW_STARTED.load(Ordering::SeqCst);
    let in_flight = std::thread::spawn(move || got(http().get(url).call()));
    wait_for("/slow to be in flight", Duration::from_secs(10), || {
        SLOW_STARTED.load(Ordering::SeqCst) > started
    });
    assert!(server.shutdown(), "shutdown did not finish in time");
    let r = in_flight.join().unwrap();
    assert_eq!((r.status, r.body["slow"].as_bool()), (200, Some(true)));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn readyz_reports_an_unreachable_search_backend() {
    let t = db::fresh();
    let server = TestServer::start(config(&t.url, NO_ES));
    let r = got(http().get(server.url("/readyz")).call());
    assert_eq!(r.status, 503);
    assert_eq!(r.body["postgres"], "ok");
    assert_eq!(r.body["elasticsearch"], "unavailable");
    assert_eq!(r.body["status"], "not_ready");
    // States only: why it failed (addresses, error text) goes to the log, not to anyone
    // who asks.
    let text = r.body.to_string();
    assert!(
        !text.contains("127.0.0.1") && !text.contains(":9"),
        "{text}"
    );
    let logged =
        crate::support::logs::lines_with(&["event=ReadinessFailed", "component=elasticsearch"]);
    assert!(!logged.is_empty());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn answers_are_not_sniffed_or_stored() {
    let t = db::fresh();
    let server = TestServer::start(config(&t.url, NO_ES));
    for path in ["/healthz", "/api/v1/tasks", "/nope"] {
        let r = http().get(server.url(path)).call().unwrap();
        let h = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        assert_eq!(
            h("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(h("cache-control").as_deref(), Some("no-store"), "{path}");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn stalled_client_does_not_pin_the_only_worker() {
    let t = db::fresh();
    let mut cfg = config(&t.url, NO_ES);
    cfg.server.worker_threads = 1;
    cfg.server.body_deadline = Duration::from_millis(1000);
    let server = TestServer::start_with(cfg, test_handler);
    let addr = server.base.trim_start_matches("http://").to_string();
    // Headers promise a body that never comes; the connection stays open.
    let mut stalled = TcpStream::connect(&addr).unwrap();
    stalled
        .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        .unwrap();
    wait_for(
        "the stalled body to be awaited",
        Duration::from_secs(5),
        || server.app().http_load.body_reads.get() == 1,
    );
    for _ in 0..3 {
        let r = got(http().get(server.url("/healthz")).call());
        assert_eq!(r.status, 200);
    }
    drop(stalled);
}

// The same tiny_http connection pool serves scanstore (vendor/tiny_http/PATCHED.md):
// connections accepted back to back are all answered while earlier ones stay open.
#[test]
#[ignore = "needs PostgreSQL"]
fn connections_accepted_back_to_back_are_all_served_while_others_stay_open() {
    let t = db::fresh();
    let server = TestServer::start(config(&t.url, NO_ES));
    let addr = server.base.trim_start_matches("http://");
    assert_eq!(keep_alive_bursts(addr, "/healthz", 25, 6), 150);
}
