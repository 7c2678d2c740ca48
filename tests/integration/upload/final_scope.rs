//! The final's index scope on the wire: chunked refresh and count requests within the
//! 3 KiB request-line budget, the projection refreshed once, nothing counted for an empty
//! execution, and a failed chunk keeping the receipt pending.

use uuid::Uuid;

use crate::support::emulator::FaultSpec;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::stack::Stack;

/// The 15th of the `i + 1`-th month before this one: months apart, years back.
fn month(i: usize) -> String {
    use chrono::Datelike;
    let now = chrono::Utc::now();
    let m = now.year() as usize * 12 + now.month0() as usize - (i + 1);
    format!("{:04}-{:02}-15T12:00:00Z", m / 12, m % 12 + 1)
}

/// Observations years back are accepted, as for an operator importing old scans.
fn years_back(cfg: &mut scanstore::config::Config) {
    cfg.upload.max_observation_age = chrono::Duration::days(3650);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn sixty_months_and_a_long_prefix_split_refresh_and_count() {
    let long_prefix = format!("p{}", "x".repeat(119));
    let Some(s) = Stack::with_faults("final_sixty_months", "port_scan", |cfg| {
        cfg.elasticsearch.index_prefix = long_prefix.clone();
        years_back(cfg);
    }) else {
        return;
    };
    let up = Uuid::new_v4();
    // Batch 0: 60 observations, one per month; the final adds one more in month 0.
    let obs: Vec<_> = (0..60)
        .map(|i| endpoint(&format!("10.1.0.{}", i + 1), 80, &month(i)))
        .collect();
    assert_eq!(
        scan::post(
            s.base(),
            &s.scanner.token,
            s.execution(),
            &Batch::main(up, 0, obs)
        )
        .status,
        200
    );
    let before = s
        .emulator()
        .requests(Some("POST"), Some("*/_refresh"))
        .count;
    let fin = Batch::final_(up, 1, vec![endpoint("10.1.1.1", 80, &month(0))]);
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert_eq!(r.status, 200, "{}", r.body);

    let refresh = s.emulator().requests(Some("POST"), Some("*/_refresh"));
    let count = s.emulator().requests(Some("POST"), Some("*/_count"));
    let refreshes = &refresh.requests[before..];
    assert!(
        refreshes.len() > 1,
        "60 long names must need several refresh requests"
    );
    assert!(count.count > 2, "and several count requests");
    for r in refreshes.iter().chain(&count.requests) {
        assert!(
            r.request_line_bytes <= 3072,
            "request line of {} bytes: {}",
            r.request_line_bytes,
            r.path
        );
    }
    let projection_refreshes = refreshes
        .iter()
        .filter(|r| r.path.contains("execution-endpoints"))
        .count();
    assert_eq!(
        projection_refreshes, 1,
        "the execution projection is refreshed exactly once"
    );

    let counted = s.observation_count();
    assert_eq!(counted, 61);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn empty_final_sends_no_count_of_facts() {
    let Some(s) = Stack::with_faults("empty_final", "port_scan", |_| {}) else {
        return;
    };
    let fin = Batch::final_(Uuid::new_v4(), 0, vec![]);
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert_eq!((r.status, r.body["saved"].as_u64()), (200, Some(0)));
    assert_eq!(s.execution_status(), "succeeded");
    let fact_counts = s.emulator().requests(Some("POST"), Some("*facts*/_count"));
    assert_eq!(fact_counts.count, 0);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn failed_refresh_keeps_the_final_pending_and_the_retry_redoes_every_chunk() {
    let Some(s) = Stack::with_faults("final_refresh_fails", "port_scan", years_back) else {
        return;
    };
    let up = Uuid::new_v4();
    let obs: Vec<_> = (0..3)
        .map(|i| endpoint(&format!("10.2.0.{}", i + 1), 22, &month(i)))
        .collect();
    assert_eq!(
        scan::post(
            s.base(),
            &s.scanner.token,
            s.execution(),
            &Batch::main(up, 0, obs)
        )
        .status,
        200
    );
    s.emulator()
        .add_fault(FaultSpec::RefreshFail { count: Some(1) });
    let fin = Batch::final_(up, 1, vec![]);
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert!(r.status >= 500, "{}", r.body);
    assert_eq!(s.execution_status(), "running");
    assert_eq!(s.receipts()[1], ("main".into(), 1, "pending".into()));
    let before = s.emulator().requests(Some("POST"), Some("*/_count")).count;
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.execution_status(), "succeeded");
    let after = s.emulator().requests(Some("POST"), Some("*/_count")).count;
    assert_eq!(
        after - before,
        2,
        "the retry counts the facts chunk and the projection again"
    );
    let counted = s.observation_count();
    assert_eq!(counted, 3);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn legacy_receipts_use_the_all_history_scope() {
    let Some(s) = Stack::with_faults("legacy_scope", "port_scan", years_back) else {
        return;
    };
    let up = Uuid::new_v4();
    assert_eq!(
        scan::post(
            s.base(),
            &s.scanner.token,
            s.execution(),
            &Batch::main(up, 0, vec![endpoint("10.3.0.1", 22, &month(0))])
        )
        .status,
        200
    );
    // A receipt written by the previous release: observations, no references.
    s.sql()
        .execute(
            "UPDATE scan_upload_receipts SET storage_references = NULL WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap();
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::final_(up, 1, vec![]),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!crate::support::logs::lines_with(&[
        "event=ScanSummaryLegacyIndexScope",
        &s.execution().to_string()
    ])
    .is_empty());
    let wildcard = s
        .emulator()
        .requests(Some("POST"), Some("*facts-%2A/_count"));
    assert_eq!(
        wildcard.count,
        1,
        "{:?}",
        s.emulator()
            .requests(Some("POST"), Some("*/_count"))
            .requests
    );
}
