//! Faults under load. Several scanners upload at once while Elasticsearch misbehaves,
//! PostgreSQL restarts, or the pool has two connections for a hundred scanners; then every
//! execution is checked against what was sent: receipts confirmed, stream and execution
//! counts, ES fact and projection documents, published assets. Test scanners retry 502,
//! 503, 504 and broken connections with the same bytes, as the protocol says (sooner than
//! `Retry-After` asks, which only makes the load harsher). `RELIABILITY_SCALE` (default 1)
//! multiplies the batches per scanner; `scripts/chaos.sh` runs these with a larger one and
//! collects the `CHAOS|…` lines they print into its table.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use super::child::{try_post, ChildConfig, Serve};
use super::wait_published;
use crate::support::db;
use crate::support::emulator::{emulator_for_faults, CorruptMode, Es, FaultSpec};
use crate::support::factory;
use crate::support::scan::t0;
use crate::support::scan::{endpoints, Batch};
use crate::support::stack::Stack;
use crate::support::wait_for;

fn scale() -> usize {
    std::env::var("RELIABILITY_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Statuses seen by all scanners of a scenario.
#[derive(Default)]
struct Seen {
    requests: u64,
    statuses: BTreeMap<String, u64>,
    bad: Vec<String>,
}

/// One scanner: `batches` batches of `per` endpoints from `first`, then a final; every
/// batch retried until 200. `ok_status` says which non-200 answers are acceptable.
#[allow(clippy::too_many_arguments)]
fn scanner(
    base: &Mutex<String>,
    token: &str,
    exec: Uuid,
    first: usize,
    batches: usize,
    per: usize,
    seen: &Mutex<Seen>,
    ok_status: fn(u16, Option<&str>) -> bool,
) {
    let up = Uuid::new_v4();
    let mut plan: Vec<Batch> = (0..batches)
        .map(|i| Batch::main(up, i as u32, endpoints(first + i * per, per, t0())))
        .collect();
    plan.push(Batch::final_(up, batches as u32, vec![]));
    for b in &plan {
        let body = b.body();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(
                Instant::now() < deadline,
                "batch {} never accepted",
                b.index
            );
            let url = base.lock().unwrap().clone();
            let r = try_post(&url, token, exec, &body);
            let mut s = seen.lock().unwrap();
            s.requests += 1;
            match r {
                Ok(r) => {
                    *s.statuses.entry(r.status.to_string()).or_default() += 1;
                    if r.status == 200 {
                        break;
                    }
                    if !ok_status(r.status, r.retry_after.as_deref()) {
                        s.bad
                            .push(format!("{} {:?} {}", r.status, r.retry_after, r.body));
                        return;
                    }
                }
                Err(_) => *s.statuses.entry("conn".into()).or_default() += 1,
            }
            drop(s);
            // A scanner's pause between retries: part of the load, not a wait.
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// Lost and duplicated observations of one execution, from PostgreSQL and ES.
fn verify(
    db_url: &str,
    es: &Es,
    prefix: &str,
    exec: Uuid,
    batches: usize,
    per: usize,
) -> (u64, u64) {
    let mut c = postgres::Client::connect(db_url, postgres::NoTls).unwrap();
    let want = (batches * per) as i64;
    let row = c
        .query_one(
            "SELECT e.status, e.observation_count::bigint,
                    (SELECT count(*) FROM scan_upload_receipts r WHERE r.execution_id = e.id AND r.status = 'confirmed'),
                    (SELECT count(*) FROM scan_upload_receipts r WHERE r.execution_id = e.id),
                    (SELECT coalesce(sum(confirmed_observations), 0)::bigint FROM scan_upload_stream s WHERE s.execution_id = e.id)
             FROM executions e WHERE e.id = $1",
            &[&exec],
        )
        .unwrap();
    let (status, obs, confirmed, receipts, stream): (String, i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(status, "succeeded", "{exec}");
    assert_eq!(
        (confirmed, receipts),
        (batches as i64 + 1, batches as i64 + 1),
        "{exec}"
    );
    assert_eq!((obs, stream), (want, want), "{exec}");
    let term = json!({"term": {"execution_id": exec.to_string()}});
    let facts = es.refreshed_count(&format!("{prefix}-facts-*"), term.clone()) as i64;
    let docs = es.refreshed_count(&format!("{prefix}-execution-endpoints"), term) as i64;
    let lost = (want - facts).max(0) + (want - docs).max(0);
    let dup = (facts - want).max(0) + (docs - want).max(0);
    (lost as u64, dup as u64)
}

fn asset_count(es: &Es, prefix: &str) -> u64 {
    es.refreshed_count(&format!("{prefix}-assets-global"), json!({"match_all": {}}))
}

fn report(scenario: &str, faults: &str, seen: &Seen, checked: u64, lost: u64, dup: u64) {
    println!(
        "CHAOS|{scenario}|{faults}|{}|{checked}|{lost}|{dup}|{:?}",
        seen.requests, seen.statuses
    );
}

fn retryable(status: u16, _: Option<&str>) -> bool {
    matches!(status, 502..=504)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn pool_exhaustion_with_100_scanners_and_2_connections_is_503_retry_after_2_or_success() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |c| {
        c.database.pool_size = 2;
        c.database.pool_timeout = Duration::from_millis(100);
        c.server.worker_threads = 64;
    });
    let mut c = s.sql();
    let (batches, per) = (2 * scale(), 5);
    let runs: Vec<(String, Uuid)> = (0..100)
        .map(|_| {
            let sc = factory::scanner(&mut c, None);
            let run = factory::task(&mut c, s.owner.id, sc.id, "port_scan", "running");
            (sc.token, run.execution_id)
        })
        .collect();
    let base = Arc::new(Mutex::new(s.base().to_string()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    std::thread::scope(|sc| {
        for (i, (tok, exec)) in runs.iter().enumerate() {
            let (base, seen) = (base.clone(), seen.clone());
            sc.spawn(move || {
                scanner(
                    &base,
                    tok,
                    *exec,
                    i * 1000,
                    batches,
                    per,
                    &seen,
                    |st, ra| st == 503 && ra == Some("2"),
                )
            });
        }
    });
    let seen = seen.lock().unwrap();
    assert!(
        seen.bad.is_empty(),
        "answers other than 200 or 503 + Retry-After: 2: {:?}",
        seen.bad
    );
    assert_eq!(seen.statuses.get("conn"), None, "connections broke");
    let (mut lost, mut dup) = (0, 0);
    for (_, exec) in &runs {
        let (l, d) = verify(&s.db.url, &s.es(), &s.prefix(), *exec, batches, per);
        lost += l;
        dup += d;
    }
    report(
        "pool exhaustion (100 scanners, pool_size 2)",
        &format!("{} × 503", seen.statuses.get("503").copied().unwrap_or(0)),
        &seen,
        (100 * batches * per) as u64,
        lost,
        dup,
    );
    assert_eq!((lost, dup), (0, 0));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn es_fault_storm_under_concurrent_scanners_loses_and_doubles_nothing() {
    let Some(s) = Stack::with_faults("es_fault_storm", "port_scan", |c| {
        c.elasticsearch.request_timeout = Duration::from_millis(1500);
        c.server.worker_threads = 16;
    }) else {
        return;
    };
    let emu = s.emulator();
    let k = scale() as u64;
    let faults = [
        FaultSpec::fail("/_bulk", 8 * k, 429, "es_rejected_execution_exception"),
        FaultSpec::fail("/_bulk", 4 * k, 503, "unavailable_shards_exception"),
        FaultSpec::fail("/_bulk", 2 * k, 500, "internal_server_error"),
        FaultSpec::fail("*/_count", 2 * k, 503, "unavailable_shards_exception"),
        FaultSpec::Close {
            path: "/_bulk".into(),
            method: None,
            count: Some(3 * k),
        },
        FaultSpec::Close {
            path: "*/_refresh".into(),
            method: None,
            count: Some(k),
        },
        FaultSpec::Latency {
            path: "/_bulk".into(),
            method: None,
            ms: 2500,
            count: Some(2 * k),
        },
        FaultSpec::Pause {
            path: "/_bulk".into(),
            method: None,
            count: Some(2),
        },
        FaultSpec::BulkItemFail {
            id: "*-m1-*".into(),
            status: 429,
            error_type: Some("es_rejected_execution_exception".into()),
            reason: None,
            count: Some(3 * k),
        },
        FaultSpec::BulkItemFail {
            id: "*-m2-3".into(),
            status: 503,
            error_type: None,
            reason: None,
            count: Some(k),
        },
        FaultSpec::CorruptBulk {
            mode: CorruptMode::WrongId,
            count: Some(k),
        },
        FaultSpec::CorruptBulk {
            mode: CorruptMode::MissingItem,
            count: Some(k),
        },
        FaultSpec::CorruptBulk {
            mode: CorruptMode::ExtraItem,
            count: Some(k),
        },
        FaultSpec::RefreshFail { count: Some(3 * k) },
    ];
    let injected: u64 = faults
        .iter()
        .map(|f| match f {
            FaultSpec::Fail { count, .. }
            | FaultSpec::Close { count, .. }
            | FaultSpec::Latency { count, .. }
            | FaultSpec::Pause { count, .. }
            | FaultSpec::BulkItemFail { count, .. }
            | FaultSpec::CorruptBulk { count, .. }
            | FaultSpec::RefreshFail { count } => count.unwrap_or(0),
        })
        .sum();
    for f in faults {
        emu.add_fault(f);
    }
    let mut c = s.sql();
    let (batches, per) = (4 * scale(), 10);
    let mut runs = vec![(s.scanner.token.clone(), s.execution())];
    for _ in 0..7 {
        let sc = factory::scanner(&mut c, None);
        let run = factory::task(&mut c, s.owner.id, sc.id, "port_scan", "running");
        runs.push((sc.token, run.execution_id));
    }
    let base = Arc::new(Mutex::new(s.base().to_string()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    // Hung requests are let go after a while (their late writes must be harmless).
    let es_ctl = s.emulator().es();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            // How long requests hang is the scenario, not a wait for a condition.
            std::thread::sleep(Duration::from_secs(8));
            es_ctl.post("/_emulator/release", &json!({}));
        });
        for (i, (tok, exec)) in runs.iter().enumerate() {
            let (base, seen) = (base.clone(), seen.clone());
            sc.spawn(move || scanner(&base, tok, *exec, i * 1000, batches, per, &seen, retryable));
        }
    });
    let seen = seen.lock().unwrap();
    assert!(seen.bad.is_empty(), "{:?}", seen.bad);
    emu.release_all();
    let (mut lost, mut dup) = (0, 0);
    for (_, exec) in &runs {
        wait_published(&mut c, *exec, Duration::from_secs(120));
        let (l, d) = verify(&s.db.url, &s.es(), &s.prefix(), *exec, batches, per);
        lost += l;
        dup += d;
    }
    let assets = asset_count(&s.es(), &s.prefix());
    let want_assets = (runs.len() * batches * per) as u64;
    report(
        "ES faults under 8 scanners",
        &format!("{injected} (429, 5xx, timeouts, hung, resets, item failures, corrupt, refresh)"),
        &seen,
        (runs.len() * batches * per) as u64 + want_assets,
        lost + want_assets.saturating_sub(assets),
        dup + assets.saturating_sub(want_assets),
    );
    assert_eq!((lost, dup), (0, 0));
    assert_eq!(assets, want_assets, "published assets");
}

/// A PostgreSQL cluster of this test's own, so that it can be restarted.
struct OwnCluster {
    dir: String,
    port: u16,
}

impl OwnCluster {
    fn sh(cmd: &str) {
        let st = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". {}/scripts/pg-cluster.sh; {cmd}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .status()
            .unwrap();
        assert!(st.success(), "{cmd}");
    }

    fn start() -> OwnCluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = format!("/tmp/scanstore-pgrestart-{}", Uuid::new_v4().simple());
        Self::sh(&format!("PG_PRELOAD= pg_start {dir} {port}"));
        OwnCluster { dir, port }
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn restart(&self) {
        Self::sh(&format!(
            "pg_stop {0}; PG_PRELOAD= pg_start {0} {1}",
            self.dir, self.port
        ));
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        Self::sh(&format!("pg_stop {}", self.dir));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn postgres_restart_in_the_middle_of_a_load_loses_and_doubles_nothing() {
    let Some(emu) = emulator_for_faults("postgres_restart") else {
        return;
    };
    let pg = OwnCluster::start();
    // Not a TestDb: its drop would drop "postgres" on the shared cluster.
    let url = pg.url();
    db::migrate(&url);
    let connect = || postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut c = connect();
    let owner = factory::owner(&mut c, false);
    let (batches, per) = (6 * scale(), 10);
    let runs: Vec<(String, Uuid)> = (0..6)
        .map(|_| {
            let sc = factory::scanner(&mut c, None);
            let run = factory::task(&mut c, owner.id, sc.id, "port_scan", "running");
            (sc.token, run.execution_id)
        })
        .collect();
    drop(c);
    let prefix = super::prefix("pr");
    let serve = Serve::start(&ChildConfig::new(&url, emu.url(), &prefix));
    // ES slowed a little so that the restart lands in the middle of the uploads.
    emu.add_fault(FaultSpec::Latency {
        path: "/_bulk".into(),
        method: None,
        ms: 100,
        count: None,
    });
    let base = Arc::new(Mutex::new(serve.base.clone()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    std::thread::scope(|sc| {
        for (i, (tok, exec)) in runs.iter().enumerate() {
            let (base, seen) = (base.clone(), seen.clone());
            sc.spawn(move || {
                scanner(&base, tok, *exec, i * 1000, batches, per, &seen, |st, _| {
                    matches!(st, 500 | 502..=504)
                })
            });
        }
        // The restart lands once every scanner could have had a batch accepted.
        wait_for("the load to be under way", Duration::from_secs(60), || {
            let s = seen.lock().unwrap();
            s.statuses.get("200").copied().unwrap_or(0) >= runs.len() as u64
        });
        pg.restart();
    });
    emu.clear_faults();
    let seen = seen.lock().unwrap();
    assert!(seen.bad.is_empty(), "{:?}", seen.bad);
    let mut c = connect();
    let (mut lost, mut dup) = (0, 0);
    for (_, exec) in &runs {
        wait_published(&mut c, *exec, Duration::from_secs(120));
        let (l, d) = verify(&url, &emu.es(), &prefix, *exec, batches, per);
        lost += l;
        dup += d;
    }
    report(
        "PostgreSQL restart under 6 scanners",
        "1 pg restart",
        &seen,
        (runs.len() * batches * per) as u64,
        lost,
        dup,
    );
    assert_eq!((lost, dup), (0, 0));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn five_hundred_idle_or_trickling_connections_do_not_stop_scanners_and_memory_stays_bounded() {
    let Some(emu) = emulator_for_faults("slow_clients") else {
        return;
    };
    let tdb = db::fresh();
    let mut c = tdb.connect();
    let owner = factory::owner(&mut c, false);
    let runs: Vec<(String, Uuid)> = (0..4)
        .map(|_| {
            let sc = factory::scanner(&mut c, None);
            let run = factory::task(&mut c, owner.id, sc.id, "port_scan", "running");
            (sc.token, run.execution_id)
        })
        .collect();
    let prefix = super::prefix("sc");
    let cfg = ChildConfig::new(&tdb.url, emu.url(), &prefix);
    // The default body deadline (60 s): trickling bodies are read by helper threads, so
    // they never hold the HTTP workers that serve the scanners.
    let serve = Serve::start(&cfg);
    let addr = serve.base.trim_start_matches("http://").to_string();
    let rss0 = serve.rss_kib();
    // 250 connections that send nothing, 250 that send a head and a trickle of body.
    let mut held = Vec::new();
    for i in 0..500 {
        let mut t = TcpStream::connect(&addr).unwrap();
        if i % 2 == 1 {
            let _ = t.write_all(
                format!("POST /api/v1/scanner/executions/{}/batches HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"protocol_version\":",
                runs[0].1, runs[0].0).as_bytes(),
            );
        }
        held.push(t);
    }
    let start = Instant::now();
    let base = Arc::new(Mutex::new(serve.base.clone()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    std::thread::scope(|sc| {
        for (i, (tok, exec)) in runs.iter().enumerate() {
            let (base, seen) = (base.clone(), seen.clone());
            sc.spawn(move || scanner(&base, tok, *exec, i * 1000, 3, 10, &seen, retryable));
        }
        // Trickle one more byte on every other connection now and then.
        sc.spawn(|| {
            for _ in 0..5 {
                for t in held.iter_mut().skip(1).step_by(2) {
                    let _ = t.write_all(b" ");
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    });
    let served_in = start.elapsed();
    assert!(
        served_in < Duration::from_secs(120),
        "scanners starved for {served_in:?}"
    );
    let seen_l = seen.lock().unwrap();
    assert!(seen_l.bad.is_empty(), "{:?}", seen_l.bad);
    // Oversized and pathological bodies while the 500 are still connected.
    let hostile: Vec<(Vec<u8>, u16)> = vec![
        (vec![b' '; 17 * 1024 * 1024], 413),
        (
            format!("[{}]", "0,".repeat(7_000_000) + "0").into_bytes(),
            400,
        ),
        (
            format!(
                "{{\"protocol_version\":2,\"upload_id\":\"{}\",\"x\":\"{}\"}}",
                Uuid::new_v4(),
                "A".repeat(15 * 1024 * 1024)
            )
            .into_bytes(),
            400,
        ),
        ("[".repeat(8 * 1024 * 1024).into_bytes(), 400),
        ("{\"a\":".repeat(2 * 1024 * 1024).into_bytes(), 400),
    ];
    let mut peak = rss0;
    for round in 0..3 {
        std::thread::scope(|sc| {
            for (body, want) in &hostile {
                let base = serve.base.clone();
                let (tok, exec) = runs[1].clone();
                sc.spawn(move || {
                    let body = String::from_utf8(body.clone()).unwrap();
                    match try_post(&base, &tok, exec, &body) {
                        Ok(r) => assert_eq!(r.status, *want, "round {round}: {}", r.body),
                        // A 413 may be sent before the body is read; the client then sees
                        // the connection close under its upload.
                        Err(e) => assert_eq!(*want, 413, "{e}"),
                    }
                });
            }
        });
        peak = peak.max(serve.rss_kib());
    }
    drop(held);
    let mut c = tdb.connect();
    let (mut lost, mut dup) = (0, 0);
    for (_, exec) in &runs {
        wait_published(&mut c, *exec, Duration::from_secs(60));
        let (l, d) = verify(&tdb.url, &emu.es(), &prefix, *exec, 3, 10);
        lost += l;
        dup += d;
    }
    println!("slow clients: served in {served_in:?}; VmRSS {rss0} KiB at start, peak {peak} KiB");
    report(
        "500 idle/trickling connections + oversized bodies",
        &format!(
            "500 slow connections, {} oversized/deep bodies; VmRSS peak {} MiB",
            hostile.len() * 3,
            peak / 1024
        ),
        &seen_l,
        120,
        lost,
        dup,
    );
    assert_eq!((lost, dup), (0, 0));
    // 16 workers × 16 MiB bodies plus parse trees: bounded well below 1 GiB.
    assert!(peak < 1536 * 1024, "VmRSS peaked at {peak} KiB");
}
