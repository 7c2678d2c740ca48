//! Claims and leases: concurrent claimers take different rows, a stale token changes
//! nothing, the heartbeat keeps a lease alive while ES hangs, and connections are not
//! held across ES I/O.

use std::time::Duration;

use scanstore::projection::outbox;
use scanstore::projection::worker::TickOutcome;
use scanstore::projection::ProjectionError;

use crate::support::emulator::FaultSpec;
use crate::support::factory;
use crate::support::logs;
use crate::support::publish::{assets, outbox_row, worker};
use crate::support::scan;
use crate::support::scan::t0;
use crate::support::stack::Stack;
use crate::support::wait_for;

fn manual(test: &str, adjust: impl FnOnce(&mut scanstore::config::Config)) -> Option<Stack> {
    Stack::with_faults(test, "port_scan", |cfg| {
        cfg.projection.workers = 0;
        adjust(cfg);
    })
}

#[test]
#[ignore = "needs PostgreSQL"]
fn concurrent_claims_take_different_rows() {
    let Some(s) = manual("concurrent_claims", |_| {}) else {
        return;
    };
    let mut c = s.sql();
    let mut executions = vec![s.execution()];
    for _ in 0..5 {
        executions.push(
            factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running").execution_id,
        );
    }
    for (i, e) in executions.iter().enumerate() {
        scan::upload_execution(s.base(), &s.scanner.token, *e, i * 10, 3, 3, t0());
    }
    let app = s.server.app_arc();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let app = app.clone();
            std::thread::spawn(move || {
                outbox::claim(&app.db, Duration::from_secs(60))
                    .unwrap()
                    .map(|c| c.id)
            })
        })
        .collect();
    let mut claimed: Vec<i64> = handles
        .into_iter()
        .filter_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(claimed.len(), 6, "each due row once, the rest find nothing");
    claimed.sort();
    claimed.dedup();
    assert_eq!(claimed.len(), 6, "a row was claimed twice");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_stale_token_changes_nothing() {
    let Some(s) = manual("stale_token", |_| {}) else {
        return;
    };
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 5, 5, t0());
    let app = s.server.app_arc();
    let lease = Duration::from_secs(60);
    let old = outbox::claim(&app.db, lease).unwrap().unwrap();
    s.sql()
        .execute(
            "UPDATE scan_projection_outbox SET lease_expires_at = now() - interval '1 second'",
            &[],
        )
        .unwrap();
    let new = outbox::claim(&app.db, lease).unwrap().unwrap();
    assert_eq!(new.id, old.id);
    assert_ne!(new.token, old.token);
    outbox::checkpoint(&app.db, &new, "[\"10.0.0.1\",443,\"tcp\"]", 1).unwrap();
    let before = outbox_row(&s, s.execution());
    let lost = |r: Result<(), ProjectionError>| matches!(r, Err(ProjectionError::LeaseLost));
    assert!(lost(outbox::checkpoint(&app.db, &old, "[\"z\"]", 99)));
    assert!(lost(outbox::renew(&app.db, &old, lease)));
    assert!(lost(outbox::enter_refreshing(&app.db, &old)));
    assert!(lost(outbox::release(&app.db, &old)));
    assert!(lost(outbox::complete(&app.db, &old)));
    assert!(matches!(
        outbox::record_error(&app.db, &old, "x", "transient", Duration::from_secs(1)),
        Err(ProjectionError::LeaseLost)
    ));
    assert_eq!(
        outbox_row(&s, s.execution()),
        before,
        "a stale owner changed the row"
    );
    // An expired lease is no lease either, even with the right token.
    s.sql()
        .execute(
            "UPDATE scan_projection_outbox SET lease_expires_at = now() - interval '1 second'",
            &[],
        )
        .unwrap();
    assert!(lost(outbox::complete(&app.db, &new)));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn lease_is_renewed_while_es_hangs_longer_than_the_lease() {
    let Some(s) = manual("lease_renewal", |cfg| {
        cfg.projection.lease = Duration::from_secs(10);
        cfg.projection.heartbeat = Duration::from_secs(1);
        cfg.elasticsearch.request_timeout = Duration::from_secs(60);
    }) else {
        return;
    };
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 5, 5, t0());
    let fault = s.emulator().add_fault(FaultSpec::Pause {
        path: "/_bulk".into(),
        method: None,
        count: Some(1),
    });
    let w = worker(&s);
    let ticking = std::thread::spawn(move || w.tick().unwrap());
    s.emulator().wait_paused(1, Duration::from_secs(10));
    // Hang for longer than the lease: the time passing is what is tested (only the
    // heartbeats can keep the claim through it).
    std::thread::sleep(Duration::from_secs(12));
    let row = outbox_row(&s, s.execution());
    assert!(
        row["claim_token"].is_string(),
        "the lease was lost while ES hung: {row}"
    );
    s.emulator().remove_fault(fault);
    s.emulator().release_all();
    assert_eq!(ticking.join().unwrap(), TickOutcome::Completed { pages: 1 });
    let id = row["id"].to_string();
    let renewals = logs::lines_with(&[
        "event=ScanProjectionLeaseRenewed",
        &format!("outbox_id={id} "),
    ]);
    assert!(
        renewals.len() >= 8,
        "only {} renewals in 12 s",
        renewals.len()
    );
    assert!(
        logs::lines_with(&["event=ScanProjectionLeaseLost", &format!("outbox_id={id} ")])
            .is_empty()
    );
    assert_eq!(assets(&s, "global").len(), 5);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn single_connection_pool_is_released_during_publication() {
    let Some(s) = Stack::with_faults("pool_release_publication", "port_scan", |cfg| {
        cfg.database.pool_size = 1;
        cfg.projection.workers = 1;
    }) else {
        return;
    };
    let mut c = s.sql();
    let other = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running");
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 30, 30, t0());
    // Asset writes are slow; uploads still get the one connection between statements.
    s.emulator().add_fault(FaultSpec::Latency {
        path: "/_bulk".into(),
        method: None,
        ms: 500,
        count: None,
    });
    scan::upload_execution(
        s.base(),
        &s.scanner.token,
        other.execution_id,
        100,
        5,
        5,
        t0(),
    );
    wait_for("both published", Duration::from_secs(60), || {
        outbox_row(&s, s.execution())["processed_at"].is_string()
            && outbox_row(&s, other.execution_id)["processed_at"].is_string()
    });
    for line in logs::lines_with(&["event=ScanWriteConnectionReleased"]) {
        let stage_ok = [
            "stage=claim ",
            "stage=renew ",
            "stage=checkpoint ",
            "stage=outbox_error ",
        ]
        .iter()
        .any(|s| line.contains(s));
        if !stage_ok {
            continue;
        }
        let hold: f64 = line
            .split("hold_ms=")
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(
            hold < 500.0,
            "a publication connection was held across ES I/O: {line}"
        );
    }
    assert_eq!(assets(&s, "global").len(), 35);
}

/// A `scanstore serve` child process whose log goes to a file.
struct Child {
    child: std::process::Child,
    log: std::path::PathBuf,
    base: String,
}

impl Child {
    fn start(db_url: &str, es_url: &str, prefix: &str) -> Child {
        let dir =
            std::env::temp_dir().join(format!("scanstore-proc-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("scanstore.toml");
        let access = crate::support::secure::suite_access();
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{db_url}\"\npool_size = 4\n\
                 [elasticsearch]\nurl = \"{es_url}\"\nindex_prefix = \"{prefix}\"\n{}\
                 [projection]\nworkers = 2\npage_size = 5\npages_per_tick = 1\nlease_seconds = 30\n\
                 heartbeat_seconds = 5\n",
                access.toml()
            ),
        )
        .unwrap();
        let log = dir.join("stderr.log");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_scanstore"));
        access.apply(&mut child);
        let mut child = child
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let base = line
            .trim()
            .trim_start_matches("scanstore listening on ")
            .to_string();
        Child { child, log, base }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn two_processes_never_publish_the_same_page_twice() {
    let Some(s) = manual("two_processes", |_| {}) else {
        return;
    };
    let prefix = s.prefix();
    let a = Child::start(&s.db.url, s.emulator().url(), &prefix);
    let b = Child::start(&s.db.url, s.emulator().url(), &prefix);
    let mut c = s.sql();
    let mut executions = vec![s.execution()];
    for _ in 0..7 {
        executions.push(
            factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running").execution_id,
        );
    }
    for (i, e) in executions.iter().enumerate() {
        let base = if i % 2 == 0 { &a.base } else { &b.base };
        scan::upload_execution(base, &s.scanner.token, *e, i * 100, 23, 23, t0());
    }
    wait_for(
        "all published by two processes",
        Duration::from_secs(120),
        || {
            executions
                .iter()
                .all(|e| outbox_row(&s, *e)["processed_at"].is_string())
        },
    );
    // Every page of every row was published by exactly one process, once.
    let logs = format!("{}\n{}", a.log(), b.log());
    for e in &executions {
        let row = outbox_row(&s, *e);
        assert_eq!(row["processed_endpoints"], 23);
        let id = format!("outbox_id={} ", row["id"]);
        let published: i64 = logs
            .lines()
            .filter(|l| l.contains("event=ScanProjectionPageCompleted") && l.contains(&id))
            .map(|l| {
                l.split(" endpoints=")
                    .nth(1)
                    .and_then(|v| v.split(' ').next())
                    .unwrap()
                    .parse::<i64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(
            published, 23,
            "execution {e} published {published} endpoints for 23"
        );
    }
    let by_a = a.log().matches("event=ScanProjectionPageCompleted").count();
    let by_b = b.log().matches("event=ScanProjectionPageCompleted").count();
    assert!(
        by_a > 0 && by_b > 0,
        "both processes should have worked ({by_a}, {by_b})"
    );
    assert_eq!(assets(&s, "global").len(), 8 * 23);
}
