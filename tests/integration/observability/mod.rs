//! Observability: the Prometheus exposition, and slow-SQL sampling's honest reasons for
//! being unavailable (extension missing, permission denied, library not loaded) kept apart
//! from sampling failures (pool timeout).

use std::time::Duration;

use uuid::Uuid;

use scanstore::db::{Db, Stage};
use scanstore::telemetry::sampler::{sample_once, SlowSql, Unavailable};

use crate::support::db;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::server::http;
use crate::support::stack::Stack;

use crate::support::scan::t0;

fn pool(url: &str, size: u32) -> Db {
    crate::support::db::pool(url, size, Duration::from_millis(300))
}

/// Parses the text exposition into (series, value) pairs, failing on a malformed line.
fn parse(text: &str) -> Vec<(String, f64)> {
    assert!(text.ends_with("# EOF\n"), "no EOF marker");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("malformed line {l:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {l:?}"));
            (series.to_string(), value)
        })
        .collect()
}

fn metric(series: &[(String, f64)], name: &str) -> f64 {
    series
        .iter()
        .filter(|(s, _)| s == name)
        .map(|(_, v)| *v)
        .sum()
}

fn scrape(s: &Stack) -> Vec<(String, f64)> {
    let mut r = http().get(format!("{}/metrics", s.base())).call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    parse(&r.body_mut().read_to_string().unwrap())
}

#[test]
#[ignore = "needs PostgreSQL"]
fn metrics_parse_and_move_with_uploads() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0
    });
    let before = scrape(&s);
    let normal = r#"scanstore_upload_requests_total{class="normal",status="200"}"#;
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 3, t0()));
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b).status,
        200
    );
    assert_eq!(
        scan::post(
            s.base(),
            &s.scanner.token,
            s.execution(),
            &Batch::final_(b.upload_id, 1, vec![])
        )
        .status,
        200
    );
    let after = scrape(&s);
    assert!(metric(&after, normal) >= metric(&before, normal) + 1.0);
    assert!(
        metric(
            &after,
            r#"scanstore_write_stage_seconds_count{stage="es_facts_bulk"}"#
        ) >= 1.0
    );
    assert!(
        metric(
            &after,
            r#"scanstore_pool_hold_seconds_count{stage="reserve"}"#
        ) >= 1.0
    );
    assert!(metric(&after, r#"scanstore_es_bulk_operations_count"#) >= 1.0);
    // The backlog is sampled for the scrape: this stack's final is waiting to be published.
    assert_eq!(metric(&after, "scanstore_outbox_backlog"), 1.0);
    assert!(after
        .iter()
        .any(|(s, _)| s == "scanstore_outbox_oldest_age_seconds"));
    // The scrape itself holds a connection and a worker (the gauges sum every server in
    // this process, so other tests may add to them).
    assert!(metric(&after, "scanstore_http_connections_open") >= 1.0);
    assert!(metric(&after, "scanstore_http_workers_busy") >= 1.0);
    for gauge in [
        "http_body_reads",
        "http_large_body_reads",
        "http_answer_writes",
        "projection_workers_idle",
    ] {
        let name = format!("scanstore_{gauge}");
        assert!(after.iter().any(|(s, _)| *s == name), "{name} missing");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn slow_sql_is_sampled_when_available_and_says_why_when_not() {
    let t = db::fresh();
    // The test cluster preloads the library, but this database has no extension yet.
    let sample = sample_once(&pool(&t.url, 2));
    assert!(sample.backlog.is_ok());
    assert!(
        matches!(
            sample.slow_sql,
            SlowSql::Unavailable(Unavailable::ExtensionMissing)
        ),
        "{:?}",
        sample.slow_sql
    );

    let mut c = t.connect();
    c.batch_execute("CREATE EXTENSION pg_stat_statements")
        .unwrap();
    c.batch_execute("SELECT count(*) FROM scan_projection_outbox")
        .unwrap();
    let sample = sample_once(&pool(&t.url, 2));
    assert!(
        matches!(sample.slow_sql, SlowSql::Sampled(_)),
        "{:?}",
        sample.slow_sql
    );

    // A role that may not read the statistics.
    let role = format!("r{}", Uuid::new_v4().simple());
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN; REVOKE ALL ON pg_stat_statements FROM PUBLIC;
         GRANT SELECT ON scan_projection_outbox TO {role};"
    ))
    .unwrap();
    let as_role = t.url.replacen("postgres@", &format!("{role}@"), 1);
    let sample = sample_once(&pool(&as_role, 2));
    assert!(
        matches!(
            sample.slow_sql,
            SlowSql::Unavailable(Unavailable::PermissionDenied)
        ),
        "{:?}",
        sample.slow_sql
    );
    drop(c);
    let _ = t
        .connect()
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn slow_sql_without_the_preloaded_library_is_not_loaded() {
    let Ok(url) = std::env::var("STORAGE_TEST_NO_PRELOAD_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide STORAGE_TEST_NO_PRELOAD_URL (scripts/test.sh)"
        );
        println!("SKIP: STORAGE_TEST_NO_PRELOAD_URL is not set (scripts/test.sh sets it)");
        return;
    };
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .unwrap();
    drop(admin);
    let sample = sample_once(&pool(&url, 2));
    assert!(
        matches!(
            sample.slow_sql,
            SlowSql::Unavailable(Unavailable::NotLoaded)
        ),
        "{:?}",
        sample.slow_sql
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_pool_failure_is_a_sampling_failure_not_unavailability() {
    let t = db::fresh();
    t.connect()
        .batch_execute("CREATE EXTENSION pg_stat_statements")
        .unwrap();
    let db = pool(&t.url, 1);
    let held = db.checkout(Stage::Read).unwrap();
    let sample = sample_once(&db);
    assert!(sample.backlog.is_err());
    assert!(
        matches!(sample.slow_sql, SlowSql::Failed(_)),
        "{:?}",
        sample.slow_sql
    );
    drop(held);
    assert!(matches!(sample_once(&db).slow_sql, SlowSql::Sampled(_)));
}
