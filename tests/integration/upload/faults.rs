//! Faults on the write path: failing bulk items, a confirm that fails after ES succeeded,
//! slow ES with a one-connection pool. Nothing lost, nothing doubled.

use std::time::Duration;

use uuid::Uuid;

use crate::support::emulator::FaultSpec;
use crate::support::logs;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::stack::Stack;

#[test]
#[ignore = "needs PostgreSQL"]
fn failing_bulk_item_keeps_the_receipt_pending_and_the_retry_writes_once() {
    let Some(s) = Stack::with_faults("failing_bulk_item", "port_scan", |_| {}) else {
        return;
    };
    let up = Uuid::new_v4();
    let b0 = Batch::main(up, 0, endpoints(0, 10, t0()));
    let item = format!("{}-{}-m0-4", s.execution().simple(), up.simple());
    s.emulator().add_fault(FaultSpec::item_fails_once(item));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b0);
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(s.receipts(), vec![("main".into(), 0, "pending".into())]);
    let confirmed: i64 = s
        .sql()
        .query_one(
            "SELECT confirmed_observations FROM scan_upload_stream WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap()
        .get(0);
    assert_eq!(confirmed, 0);

    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b0);
    assert_eq!(
        (r.status, r.body["saved"].as_u64()),
        (200, Some(10)),
        "{}",
        r.body
    );
    assert_eq!(s.receipts(), vec![("main".into(), 0, "confirmed".into())]);
    assert_eq!(s.fact_count(), 10, "the retry doubled or lost facts");
    assert_eq!(s.endpoint_docs(), 10);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_pending_batch_retried_after_the_execution_ended_is_refused_and_writes_nothing() {
    let Some(s) = Stack::with_faults("late_pending_retry", "port_scan", |_| {}) else {
        return;
    };
    let up = Uuid::new_v4();
    let b0 = Batch::main(up, 0, endpoints(0, 3, t0()));
    let b1 = Batch::main(up, 1, endpoints(3, 10, t0()));
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b0).status,
        200
    );
    // Batch 1's ES write fails: its receipt stays pending.
    s.emulator().add_fault(FaultSpec::item_fails_once(format!(
        "{}-{}-m1-3",
        s.execution().simple(),
        up.simple()
    )));
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b1).status,
        502
    );
    let facts_before = s.fact_count();
    for status in ["failed", "succeeded"] {
        s.sql()
            .execute(
                "UPDATE executions SET status = $2, finished_at = now() WHERE id = $1",
                &[&s.execution(), &status],
            )
            .unwrap();
        // The late retry of the pending batch is refused, and writes nothing anywhere.
        let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b1);
        assert_eq!(
            (r.status, r.body["error"]["code"].as_str()),
            (409, Some("execution_not_running")),
            "{status}: {}",
            r.body
        );
        assert_eq!(
            s.receipts(),
            vec![
                ("main".into(), 0, "confirmed".into()),
                ("main".into(), 1, "pending".into())
            ]
        );
        assert_eq!(
            s.fact_count(),
            facts_before,
            "{status}: the late batch was written"
        );
        // A confirmed retry still answers saved: 0.
        let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b0);
        assert_eq!(
            (r.status, r.body["saved"].as_u64()),
            (200, Some(0)),
            "{}",
            r.body
        );
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn transient_bulk_failures_are_retried_within_the_request() {
    let Some(s) = Stack::with_faults("transient_bulk", "port_scan", |_| {}) else {
        return;
    };
    s.emulator().add_fault(FaultSpec::fail(
        "/_bulk",
        2,
        429,
        "es_rejected_execution_exception",
    ));
    let b0 = Batch::main(Uuid::new_v4(), 0, endpoints(0, 4, t0()));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b0);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.fact_count(), 4);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn corrupted_bulk_response_is_not_trusted() {
    let Some(s) = Stack::with_faults("corrupted_bulk", "port_scan", |_| {}) else {
        return;
    };
    // Every attempt gets a corrupted answer: three attempts each of the facts request and
    // of the endpoints request, which go out together.
    s.emulator().add_fault(FaultSpec::CorruptBulk {
        mode: crate::support::emulator::CorruptMode::WrongId,
        count: Some(6),
    });
    let b0 = Batch::main(Uuid::new_v4(), 0, endpoints(0, 4, t0()));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b0);
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(s.receipts(), vec![("main".into(), 0, "pending".into())]);
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b0);
    assert_eq!(r.status, 200);
    assert_eq!(s.fact_count(), 4);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn confirm_failure_after_es_success_stays_pending_and_the_retry_completes() {
    let Some(s) = Stack::with_faults("confirm_failure", "port_scan", |_| {}) else {
        return;
    };
    let mut c = s.sql();
    // A real database failure in transaction B only: confirming a receipt raises.
    c.batch_execute(
        "CREATE FUNCTION fail_confirm() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'injected confirm failure' USING ERRCODE = '57P01'; END $$;
         CREATE TRIGGER fail_confirm BEFORE UPDATE OF status ON scan_upload_receipts
           FOR EACH ROW WHEN (NEW.status = 'confirmed') EXECUTE FUNCTION fail_confirm();",
    )
    .unwrap();
    let up = Uuid::new_v4();
    let fin = Batch::final_(up, 0, endpoints(0, 6, t0()));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(s.receipts(), vec![("main".into(), 0, "pending".into())]);
    assert_eq!(s.execution_status(), "running");
    assert_eq!(s.fact_count(), 6, "ES was written before the confirm");

    c.batch_execute("DROP TRIGGER fail_confirm ON scan_upload_receipts")
        .unwrap();
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &fin);
    assert_eq!(
        (r.status, r.body["saved"].as_u64()),
        (200, Some(6)),
        "{}",
        r.body
    );
    assert_eq!(s.execution_status(), "succeeded");
    assert_eq!(s.fact_count(), 6, "the retry doubled facts");
    let counted = s.observation_count();
    assert_eq!(counted, 6);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn one_connection_serves_concurrent_uploads_while_es_is_slow() {
    let Some(s) = Stack::with_faults("pool_size_1_slow_es", "port_scan", |cfg| {
        cfg.database.pool_size = 1;
        cfg.database.pool_timeout = Duration::from_secs(5);
    }) else {
        return;
    };
    s.emulator().add_fault(FaultSpec::Latency {
        path: "/_bulk".into(),
        method: None,
        ms: 400,
        count: None,
    });
    let up = Uuid::new_v4();
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            let (base, token, exec) =
                (s.base().to_string(), s.scanner.token.clone(), s.execution());
            std::thread::spawn(move || {
                let b = Batch::main(up, i, endpoints(i as usize * 10, 10, t0()));
                scan::post(&base, &token, exec, &b)
            })
        })
        .collect();
    let ids: Vec<String> = handles
        .into_iter()
        .map(|h| {
            let r = h.join().unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            r.request_id
        })
        .collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(s.fact_count(), 40);
    // No checkout of these requests was held across a 400 ms bulk.
    for id in &ids {
        let lines = logs::lines_with(&[
            "event=ScanWriteConnectionReleased",
            &format!("request_id={id}"),
        ]);
        assert!(
            lines.len() >= 3,
            "auth, reserve and confirm checkouts of {id}: {lines:?}"
        );
        for line in lines {
            let hold: f64 = line
                .split("hold_ms=")
                .nth(1)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap();
            assert!(hold < 400.0, "a connection was held across ES I/O: {line}");
        }
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn final_returns_without_waiting_for_publication() {
    let Some(s) = Stack::with_faults("final_no_wait", "port_scan", |cfg| {
        cfg.projection.workers = 0
    }) else {
        return;
    };
    let up = Uuid::new_v4();
    let fin = Batch::final_(up, 0, endpoints(0, 3, t0()));
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &fin).status,
        200
    );
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &fin).body["saved"],
        0
    );
    assert_eq!(s.execution_status(), "succeeded");
    let pending: i64 = s
        .sql()
        .query_one(
            "SELECT count(*) FROM scan_projection_outbox WHERE execution_id = $1 AND processed_at IS NULL",
            &[&s.execution()],
        )
        .unwrap()
        .get(0);
    assert_eq!(pending, 1, "the outbox row waits for the publisher");
    // Nothing was written to the asset projection by the upload itself.
    let assets = s.es().refreshed_count(
        &format!("{}-assets-*", s.prefix()),
        serde_json::json!({"match_all": {}}),
    );
    assert_eq!(assets, 0);
}
