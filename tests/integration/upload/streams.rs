//! Upload streams: continuity, a single final, no batch after the final, DNS sidecar
//! rules, and the repair of a stream marked dirty by a receipt deletion.

use uuid::Uuid;

use crate::support::emulator::FaultSpec;
use crate::support::scan::t0;
use crate::support::scan::{self, dns, endpoints, Batch};
use crate::support::stack::Stack;

fn post(s: &Stack, b: &Batch) -> crate::support::server::Got {
    scan::post(s.base(), &s.scanner.token, s.execution(), b)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn final_needs_every_earlier_batch_confirmed() {
    let s = Stack::new("port_scan");
    let up = Uuid::new_v4();
    assert_eq!(
        post(&s, &Batch::main(up, 0, endpoints(0, 1, t0()))).status,
        200
    );
    assert_eq!(
        post(&s, &Batch::main(up, 2, endpoints(2, 1, t0()))).status,
        200
    );
    // Batch 1 is missing: a final at 3 is incomplete, and so is one at 2 (taken) or 1.
    let r = post(&s, &Batch::final_(up, 3, vec![]));
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("final_incomplete")),
        "{}",
        r.body
    );
    assert_eq!(
        r.body["error"]["message"],
        "final batch 3 needs batches 0 to 2 confirmed; this upload has 2 numbered 0 to 2, 2 confirmed"
    );
    assert_eq!(
        post(&s, &Batch::main(up, 1, endpoints(1, 1, t0()))).status,
        200
    );
    assert_eq!(post(&s, &Batch::final_(up, 3, vec![])).status, 200);
    // After the final: no new batch, not even in another upload.
    let r = post(&s, &Batch::main(up, 4, endpoints(9, 1, t0())));
    assert_eq!(r.status, 409, "{}", r.body);
    let r = post(&s, &Batch::main(Uuid::new_v4(), 0, endpoints(9, 1, t0())));
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(s.receipts().len(), 4);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_second_final_is_refused() {
    let s = Stack::new("port_scan");
    let up = Uuid::new_v4();
    assert_eq!(
        post(&s, &Batch::final_(up, 0, endpoints(0, 1, t0()))).status,
        200
    );
    let r = post(&s, &Batch::final_(up, 1, vec![]));
    assert_eq!(r.status, 409, "{}", r.body);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn dns_sidecar_is_sparse_never_final_and_inside_the_main_range() {
    let s = Stack::new("mixed");
    let up = Uuid::new_v4();
    for i in 0..3 {
        assert_eq!(
            post(&s, &Batch::main(up, i, endpoints(i as usize, 1, t0()))).status,
            200
        );
    }
    // Sparse sidecar numbers are fine.
    assert_eq!(
        post(
            &s,
            &Batch::dns(up, 0, vec![dns("a.example.com", "10.0.0.1", t0())])
        )
        .status,
        200
    );
    assert_eq!(
        post(
            &s,
            &Batch::dns(up, 7, vec![dns("b.example.com", "10.0.0.2", t0())])
        )
        .status,
        200
    );
    // Sidecar batch 7 lies beyond a final at 3.
    let r = post(&s, &Batch::final_(up, 3, vec![]));
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("final_incomplete")),
        "{}",
        r.body
    );
    for i in 3..8 {
        assert_eq!(
            post(&s, &Batch::main(up, i, endpoints(i as usize, 1, t0()))).status,
            200
        );
    }
    let r = post(&s, &Batch::final_(up, 8, vec![]));
    assert_eq!(r.status, 200, "{}", r.body);
    let dns_records: i64 = s
        .sql()
        .query_one(
            "SELECT dns_record_count FROM executions WHERE id = $1",
            &[&s.execution()],
        )
        .unwrap()
        .get(0);
    assert_eq!(dns_records, 2);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn deleted_receipt_marks_the_stream_dirty_and_the_next_upload_repairs_only_it() {
    let s = Stack::new("port_scan");
    let (up, other) = (Uuid::new_v4(), Uuid::new_v4());
    for i in 0..3 {
        assert_eq!(
            post(&s, &Batch::main(up, i, endpoints(i as usize, 2, t0()))).status,
            200
        );
    }
    assert_eq!(
        post(&s, &Batch::main(other, 0, endpoints(50, 1, t0()))).status,
        200
    );
    let mut c = s.sql();
    c.execute(
        "DELETE FROM scan_upload_receipts WHERE execution_id = $1 AND upload_id = $2 AND batch_index = 2",
        &[&s.execution(), &up],
    )
    .unwrap();
    c.execute(
        "UPDATE scan_upload_stream SET dirty = true WHERE execution_id = $1 AND upload_id = $2",
        &[&s.execution(), &other],
    )
    .unwrap();
    // The next upload of `up` repairs `up` only.
    assert_eq!(
        post(&s, &Batch::main(up, 2, endpoints(2, 2, t0()))).status,
        200
    );
    let rows = c
        .query(
            "SELECT upload_id, dirty, batch_count, confirmed_count, confirmed_observations
               FROM scan_upload_stream WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap();
    for r in rows {
        let id: Uuid = r.get(0);
        if id == up {
            assert_eq!(
                (
                    r.get::<_, bool>(1),
                    r.get::<_, i32>(2),
                    r.get::<_, i32>(3),
                    r.get::<_, i64>(4)
                ),
                (false, 3, 3, 6)
            );
        } else {
            assert!(r.get::<_, bool>(1), "another stream was touched");
        }
    }
    assert_eq!(post(&s, &Batch::final_(up, 3, vec![])).status, 200);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_final_waits_for_every_upload_of_the_execution_and_counts_them_all() {
    let Some(s) = Stack::with_faults("final_waits_for_every_upload", "port_scan", |_| {}) else {
        return;
    };
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    // Upload a: batch 0 confirmed, batch 1 pending (its ES write failed).
    assert_eq!(
        post(&s, &Batch::main(a, 0, endpoints(0, 3, t0()))).status,
        200
    );
    s.emulator().add_fault(FaultSpec::item_fails_once(format!(
        "{}-{}-m1-0",
        s.execution().simple(),
        a.simple()
    )));
    assert_eq!(
        post(&s, &Batch::main(a, 1, endpoints(3, 3, t0()))).status,
        502
    );
    // Upload c: batches 0 and 2, batch 1 never sent.
    for i in [0, 2] {
        assert_eq!(
            post(&s, &Batch::main(c, i, endpoints(10 + i as usize, 1, t0()))).status,
            200
        );
    }
    // A brand-new upload's empty final may not succeed the execution over them.
    let r = post(&s, &Batch::final_(b, 0, vec![]));
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (409, Some("final_incomplete")),
        "{}",
        r.body
    );
    let mut listed: Vec<(String, serde_json::Value, serde_json::Value)> = r.body["error"]
        ["details"]["incomplete_uploads"]
        .as_array()
        .expect("incomplete uploads listed")
        .iter()
        .map(|u| {
            (
                u["upload_id"].as_str().unwrap_or_default().to_string(),
                u["pending"].clone(),
                u["missing"].clone(),
            )
        })
        .collect();
    listed.sort_by(|x, y| x.0.cmp(&y.0));
    let mut want = vec![
        (a.to_string(), serde_json::json!([1]), serde_json::json!([])),
        (c.to_string(), serde_json::json!([]), serde_json::json!([1])),
    ];
    want.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(listed, want);
    assert_eq!(s.execution_status(), "running");
    // Completed, the same final succeeds and counts every upload's observations.
    assert_eq!(
        post(&s, &Batch::main(a, 1, endpoints(3, 3, t0()))).status,
        200
    );
    assert_eq!(
        post(&s, &Batch::main(c, 1, endpoints(11, 1, t0()))).status,
        200
    );
    let r = post(&s, &Batch::final_(b, 0, vec![]));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.execution_status(), "succeeded");
    let (observations, endpoints_counted): (i64, i64) = {
        let row = s
            .sql()
            .query_one(
                "SELECT observation_count, endpoint_count FROM executions WHERE id = $1",
                &[&s.execution()],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((observations, endpoints_counted), (9, 9));
}
