//! The front door against clients that stall, flood or frame requests ambiguously, over
//! raw sockets: no worker is pinned, nothing grows without bound, the accept loop outlives
//! running out of file descriptors, and what a client sent never reaches the log.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use scanstore::config::Config;
use uuid::Uuid;

use super::child::{ChildConfig, Serve};
use crate::support::emulator;
use crate::support::logs;
use crate::support::read;
use crate::support::scan::{self, t0, Batch};
use crate::support::server::got;
use crate::support::stack::Stack;
use crate::support::wait_for;

/// A stack whose server has short deadlines, so stalls end within the test.
fn stack(adjust: impl FnOnce(&mut Config)) -> Stack {
    Stack::build(emulator::target(), "port_scan", |c| {
        c.server.header_timeout = Duration::from_millis(1000);
        c.server.body_deadline = Duration::from_millis(1000);
        adjust(c);
    })
}

fn connect(base: &str) -> TcpStream {
    let s = TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Everything the server sends until it closes the connection (or the socket's read
/// timeout passes).
pub(super) fn read_to_close(s: &mut impl Read) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The status codes of the responses in a connection's output, in order.
fn statuses(output: &str) -> Vec<u16> {
    output
        .match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| output[i + 9..].get(..3)?.parse().ok())
        .collect()
}

/// A `scanstore serve` child process with its database and ES target (kept alive with it).
struct Child {
    serve: Serve,
    _db: crate::support::db::TestDb,
    _es: emulator::Target,
}

fn child(adjust: impl FnOnce(&mut ChildConfig)) -> Child {
    let es = emulator::target();
    let db = crate::support::db::fresh();
    let prefix = emulator::es_prefix("fd");
    let mut cfg = ChildConfig::new(&db.url, es.es().url(), &prefix);
    adjust(&mut cfg);
    Child {
        serve: Serve::start(&cfg),
        _db: db,
        _es: es,
    }
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// `/healthz` answers, with a client timeout short of every stall in these tests.
fn assert_serving(base: &str) {
    let r = agent(Duration::from_secs(5))
        .get(format!("{base}/healthz"))
        .call();
    assert_eq!(got(r).status, 200, "the server stopped serving");
}

/// Whether `/healthz` answers 200 now (a refused or failed exchange is a no).
fn serves(base: &str) -> bool {
    agent(Duration::from_secs(2))
        .get(format!("{base}/healthz"))
        .call()
        .is_ok_and(|r| r.status().as_u16() == 200)
}

fn batches_path(s: &Stack) -> String {
    format!("/api/v1/scanner/executions/{}/batches", s.execution())
}

#[test]
#[ignore = "needs PostgreSQL"]
fn stalled_expect_continue_and_upgrade_requests_do_not_pin_the_workers() {
    let s = stack(|c| c.server.worker_threads = 4);
    let path = batches_path(&s);
    let mut held = Vec::new();
    for _ in 0..4 {
        // The body is promised after 100 Continue and never sent.
        let mut c = connect(s.base());
        write!(c, "POST {path} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n").unwrap();
        held.push(c);
    }
    let mut upgrades = Vec::new();
    for _ in 0..4 {
        let mut c = connect(s.base());
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
            .unwrap();
        upgrades.push(c);
    }
    wait_for(
        "the four promised bodies to be awaited",
        Duration::from_secs(5),
        || s.server.app().http_load.body_reads.get() == 4,
    );
    for _ in 0..8 {
        assert_serving(s.base());
    }
    // Upgrades are answered as plain requests and closed; nothing is upgraded.
    for mut c in upgrades {
        let out = read_to_close(&mut c);
        assert_eq!(statuses(&out), vec![200], "{out}");
        assert!(out.contains("Connection: close"), "{out}");
    }
    // The promised bodies get 100 Continue, then 408 at the body deadline.
    for mut c in held {
        let out = read_to_close(&mut c);
        assert_eq!(statuses(&out), vec![100, 408], "{out}");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn clients_that_read_no_answers_do_not_pin_the_workers() {
    let s = stack(|c| c.server.worker_threads = 4);
    let addr: std::net::SocketAddr = s.base().trim_start_matches("http://").parse().unwrap();
    // Per connection, 200 pipelined requests for the 50 KiB OpenAPI document, and a
    // receive buffer too small for one answer; nothing is ever read.
    let mut held = Vec::new();
    for _ in 0..6 {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(&addr.into()).unwrap();
        let mut c: TcpStream = sock.into();
        c.write_all(
            "GET /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"
                .repeat(200)
                .as_bytes(),
        )
        .unwrap();
        held.push(c);
    }
    wait_for(
        "an answer blocked on each connection",
        Duration::from_secs(5),
        || s.server.app().http_load.answer_writes.get() == 6,
    );
    for _ in 0..8 {
        assert_serving(s.base());
    }
    drop(held);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn large_bodies_without_a_valid_scanner_token_are_refused_unread() {
    let c = child(|cfg| cfg.extra_server = "body_deadline_ms = 60000\n".into());
    let serve = &c.serve;
    assert_serving(&serve.base);
    let (rss_before, threads_before) = (serve.rss_kib(), serve.threads());
    let path = format!("/api/v1/scanner/executions/{}/batches", Uuid::new_v4());
    let chunk = vec![b'['; 64 * 1024];
    let mut conns = Vec::new();
    for i in 0..40 {
        // Half without a token, half with one that names no scanner; each declares
        // 16 MiB, sends 64 KiB of it and stalls.
        let auth = if i % 2 == 0 {
            String::new()
        } else {
            format!("Authorization: Bearer scn_{}\r\n", Uuid::new_v4().simple())
        };
        let mut c = connect(&serve.base);
        write!(c, "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: 16777216\r\n\r\n").unwrap();
        let _ = c.write_all(&chunk);
        conns.push(c);
    }
    let started = Instant::now();
    for c in &mut conns {
        let out = read_to_close(c);
        assert_eq!(statuses(&out), vec![401], "{out}");
        assert!(out.contains("Connection: close"), "{out}");
    }
    // Answered at once, long before the 60 s body deadline.
    assert!(started.elapsed() < Duration::from_secs(9));
    // A client that sends its whole body before it reads gets the 401 too, not a reset:
    // the refused body is read off and dropped while the connection closes.
    let r = crate::support::scan::post_raw(
        &serve.base,
        Some(&format!("scn_{}", Uuid::new_v4().simple())),
        &Uuid::new_v4().to_string(),
        &vec![b' '; 8 << 20],
    );
    assert_eq!(r.status, 401);
    drop(conns);
    let grown_mib = serve.rss_kib().saturating_sub(rss_before) / 1024;
    assert!(grown_mib < 32, "resident memory grew by {grown_mib} MiB");
    // Connection threads idle in tiny_http's pool for 5 s before they end.
    wait_for(
        &format!("the stalls' threads to end ({threads_before} threads before them)"),
        Duration::from_secs(15),
        || serve.threads() <= threads_before + 4,
    );
    assert_serving(&serve.base);
}

// Scanner lookups by token run in this test's database (`pg_stat_statements`, shared by
// the cluster, so counted per database).
const SCANNER_LOOKUPS: &str = "
    SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND query LIKE '%FROM scanners WHERE token_sha256%'";

#[test]
#[ignore = "needs PostgreSQL"]
fn a_large_batch_looks_its_scanner_up_once() {
    // Every body is large: the body reader verifies the token before reading it, and the
    // batch's handler takes that scanner instead of looking it up again.
    let s = stack(|c| c.server.preauth_body_bytes = 0);
    let mut sql = s.sql();
    sql.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .unwrap();
    let Ok(row) = sql.query_one(SCANNER_LOOKUPS, &[]) else {
        println!("SKIP: pg_stat_statements is not preloaded in this cluster");
        return;
    };
    let before: i64 = row.get(0);
    let up = Uuid::new_v4();
    let batch = Batch::main(up, 0, scan::endpoints(0, 3, t0()));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &batch);
    assert_eq!(r.status, 200, "{}", r.body);
    let after: i64 = sql.query_one(SCANNER_LOOKUPS, &[]).unwrap().get(0);
    assert_eq!(after - before, 1, "scanner lookups for one large batch");
    assert_eq!(s.fact_count(), 3);
    // A token that names no scanner is still refused before the body is read.
    let r = scan::post(s.base(), "scn_unknown", s.execution(), &batch);
    assert_eq!(r.status, 401);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_scanner_disabled_while_its_large_body_is_read_has_nothing_written() {
    // Every body is large, so its token is checked before it is read; the body then takes
    // as long as the client sends it (up to body_deadline).
    let s = stack(|c| {
        c.server.preauth_body_bytes = 0;
        c.server.body_deadline = Duration::from_secs(30);
    });
    // Over the 1 KiB tiny_http reads whole before it hands a request over.
    let body = Batch::main(Uuid::new_v4(), 0, scan::endpoints(0, 40, t0())).body();
    assert!(body.len() > 4096);
    let (head, tail) = body.as_bytes().split_at(body.len() / 2);
    let mut c = connect(s.base());
    write!(
        c,
        "POST {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        batches_path(&s),
        s.scanner.token,
        body.len()
    )
    .unwrap();
    c.write_all(head).unwrap();
    // Time for the body reader to look the token up (were it slower, it would find the
    // scanner disabled and refuse the body unread: a 401 all the same).
    std::thread::sleep(Duration::from_millis(500));
    s.sql()
        .execute(
            "UPDATE scanners SET disabled = true WHERE id = $1",
            &[&s.scanner.id],
        )
        .unwrap();
    c.write_all(tail).unwrap();
    let out = read_to_close(&mut c);
    assert_eq!(statuses(&out), vec![401], "{out}");
    assert!(s.receipts().is_empty());
    assert_eq!(s.fact_count(), 0);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn oversized_heads_are_431_and_closed() {
    let s = stack(|_| {});
    // One 16 KiB + 1 header line with no end: refused once the head budget is spent.
    let mut c = connect(s.base());
    let mut head = b"GET /healthz HTTP/1.1\r\nX-Long: ".to_vec();
    head.resize(16 * 1024 + 1, b'a');
    c.write_all(&head).unwrap();
    let out = read_to_close(&mut c);
    assert_eq!(statuses(&out), vec![431], "{out}");
    // 200 short headers: over the count.
    let mut c = connect(s.base());
    let mut req = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for i in 0..200 {
        req.push_str(&format!("X-{i}: 1\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    assert_eq!(statuses(&read_to_close(&mut c)), vec![431]);
    // 100 headers are within the limit.
    let mut c = connect(s.base());
    let mut req = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for i in 0..98 {
        req.push_str(&format!("X-{i}: 1\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    assert_eq!(statuses(&read_to_close(&mut c)), vec![200]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn connections_over_the_cap_are_refused_and_idle_ones_closed() {
    let s = stack(|c| c.server.max_connections = 16);
    let mut idle: Vec<TcpStream> = (0..16).map(|_| connect(s.base())).collect();
    wait_for(
        "the 16 connections to count",
        Duration::from_secs(5),
        || s.server.app().http_load.connections.get() == 16,
    );
    let mut over = connect(s.base());
    let out = read_to_close(&mut over);
    assert_eq!(statuses(&out), vec![503], "{out}");
    assert!(out.contains("Retry-After: 1"), "{out}");
    // Idle connections are closed at the header timeout, without an answer.
    for c in &mut idle {
        assert_eq!(read_to_close(c), "");
    }
    // A connection counts until its thread has finished closing it: once the client has
    // closed its side too (or after the linger time).
    drop(idle);
    wait_for(
        "a connection slot once the idle connections closed",
        Duration::from_secs(5),
        || serves(s.base()),
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_head_trickled_byte_by_byte_is_cut_off_at_the_header_deadline() {
    let s = stack(|_| {});
    let mut c = connect(s.base());
    c.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ").unwrap();
    let mut w = c.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        // Each byte comes well within the socket timeout; the head never ends.
        for _ in 0..30 {
            if w.write_all(b"a").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let out = read_to_close(&mut c);
    assert_eq!(statuses(&out), vec![408], "{out}");
    trickle.join().unwrap();
}

#[test]
#[ignore = "needs PostgreSQL"]
fn ambiguous_framing_is_400_and_nothing_after_it_is_parsed() {
    let s = stack(|_| {});
    let path = batches_path(&s);
    let smuggled = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases = [
        ("Content-Length: abc\r\n", ""),
        ("Content-Length: -1\r\n", ""),
        ("Content-Length: +5\r\n", "hello"),
        ("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"),
        (
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "0\r\n\r\n",
        ),
        ("Transfer-Encoding: gzip\r\n", "hello"),
        ("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "0\r\n\r\n",
        ),
    ];
    for (headers, body) in cases {
        let mut c = connect(s.base());
        let request = format!("POST {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n{body}{smuggled}");
        // The server may close before the last byte: only the answer counts.
        let _ = c.write_all(request.as_bytes());
        let out = read_to_close(&mut c);
        assert_eq!(statuses(&out), vec![400], "{headers:?}: {out}");
    }
    // Two honest pipelined requests get two answers: the count above is real.
    let mut c = connect(s.base());
    write!(
        c,
        "{smuggled}GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    assert_eq!(statuses(&read_to_close(&mut c)), vec![200, 200]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn large_body_reads_are_capped_and_the_rest_refused_with_retry_after() {
    let s = stack(|c| {
        c.server.max_body_reads = 1;
        c.server.preauth_body_bytes = 0;
        c.server.body_deadline = Duration::from_millis(3000);
    });
    let path = batches_path(&s);
    // Two authenticated bodies that trickle: one is read until its deadline; the other
    // waits for its turn for the header timeout, then is refused.
    let mut conns = Vec::new();
    let mut tricklers = Vec::new();
    for first in [true, false] {
        let mut c = connect(s.base());
        write!(c, "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n[", s.scanner.token).unwrap();
        let mut w = c.try_clone().unwrap();
        tricklers.push(std::thread::spawn(move || {
            for _ in 0..40 {
                if w.write_all(b" ").is_err() {
                    break;
                }
                // The trickle itself: a byte every 100 ms.
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
        conns.push(c);
        if first {
            wait_for(
                "the first body to hold the permit",
                Duration::from_secs(5),
                || s.server.app().http_load.large_body_reads.get() == 1,
            );
        }
    }
    let second = read_to_close(&mut conns[1]);
    assert_eq!(statuses(&second), vec![503], "{second}");
    assert!(
        second.contains("Retry-After: 1") && second.contains("server_busy"),
        "{second}"
    );
    let first = read_to_close(&mut conns[0]);
    assert_eq!(statuses(&first), vec![408], "{first}");
    for t in tricklers {
        t.join().unwrap();
    }
    // The permit came back: a whole body is read again.
    let b = crate::support::scan::Batch::main(
        Uuid::new_v4(),
        0,
        crate::support::scan::endpoints(0, 3, crate::support::scan::t0()),
    );
    let r = crate::support::scan::post(s.base(), &s.scanner.token, s.execution(), &b);
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Holds `connections` connections open for `hold`, closes them, and waits until the server
/// answers again; the accept loop must have logged its failures. Returns the child's log.
fn flood_then_serve(serve: &Serve, connections: usize, hold: Duration) -> String {
    let flood: Vec<TcpStream> = (0..connections).map(|_| connect(&serve.base)).collect();
    // Holding the flood for `hold` is the scenario.
    std::thread::sleep(hold);
    drop(flood);
    // Descriptors and threads come back as the flood's connections end.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = agent(Duration::from_secs(2))
            .get(format!("{}/healthz", serve.base))
            .call();
        if let Ok(r) = r {
            assert_eq!(r.status().as_u16(), 200);
            break;
        }
        assert!(Instant::now() < deadline, "the server never served again");
    }
    let log = serve.log();
    assert!(
        log.contains("event=HttpAcceptFailed"),
        "no accept failure was logged"
    );
    log
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_accept_loop_survives_running_out_of_file_descriptors() {
    let c = child(|cfg| {
        cfg.nofile = Some(64);
        cfg.workers = 0;
    });
    let serve = &c.serve;
    assert_serving(&serve.base);
    // Far more connections than descriptors: the kernel queues them, accept() fails.
    let log = flood_then_serve(serve, 120, Duration::from_millis(500));
    let logged = log.matches("event=HttpAcceptFailed").count();
    assert!(
        logged < 50,
        "{logged} accept-failure lines: not rate-limited"
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_accept_loop_survives_failing_to_start_threads() {
    // A pids cgroup (v1 or v2) caps the child's threads; without one this cannot be tried.
    let name = format!("scanstore-test-{}", Uuid::new_v4().simple());
    let group = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .map(|root| std::path::Path::new(root).join(&name))
        .find(|g| {
            let made = std::fs::create_dir(g).is_ok();
            let usable = made && g.join("pids.max").exists();
            if made && !usable {
                let _ = std::fs::remove_dir(g);
            }
            usable
        });
    let Some(group) = group else {
        eprintln!("skipped: no writable pids cgroup on this machine");
        return;
    };
    let c = child(|cfg| cfg.workers = 0);
    let serve = &c.serve;
    assert_serving(&serve.base);
    std::fs::write(group.join("cgroup.procs"), serve.pid().to_string()).unwrap();
    // Room for a few more threads than the child has: the flood needs one per connection.
    let limit = serve.threads() + 4;
    std::fs::write(group.join("pids.max"), limit.to_string()).unwrap();
    let log = flood_then_serve(serve, 40, Duration::from_millis(1000));
    assert!(!log.contains("panicked"), "a thread panicked:\n{log}");
    // Back in the parent group, so the test group can go.
    let parent = group.parent().unwrap().join("cgroup.procs");
    let _ = std::fs::write(parent, serve.pid().to_string());
    drop(c);
    let _ = std::fs::remove_dir(&group);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn rejected_values_never_reach_the_log() {
    let s = stack(|_| {});
    let marker = format!("LEAK{}", Uuid::new_v4().simple());
    let obs = format!(
        r#"[{{"type":"endpoint","ip":"10.0.0.1","port":"SSH-2.0-{marker}","transport":"tcp","observed_at":"{}"}}]"#,
        crate::support::scan::t0()
    );
    let body = format!(
        r#"{{"protocol_version":2,"upload_id":"{}","stream":"main","batch_index":0,"is_final":false,"checksum":"sha256:{}","observations":{obs}}}"#,
        Uuid::new_v4(),
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(obs.as_bytes()))
    );
    let r = crate::support::scan::post_raw(
        s.base(),
        Some(&s.scanner.token),
        &s.execution().to_string(),
        body.as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.to_string().contains(&marker), "the client is told");
    for query in [
        format!("ip={marker}"),
        format!("size={marker}"),
        format!("scope={marker}"),
    ] {
        let r = read::get(s.base(), &s.owner.token, &format!("/api/v1/assets?{query}"));
        assert_eq!(r.status, 400, "{query}: {}", r.body);
    }
    let lines = logs::lines_with(&["event=HttpRequest", "status=400"]);
    assert!(
        lines.iter().any(|l| l.contains("at=observations[0]")),
        "the position is logged: {lines:?}"
    );
    assert!(
        !logs::all().contains(&marker),
        "a rejected value reached the log"
    );
}
