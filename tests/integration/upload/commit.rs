//! The commit boundary: batches and a final commit receipts, facts, the execution
//! projection, counts, the execution state, task aggregation and the queues.

use uuid::Uuid;

use crate::support::scan::t0;
use crate::support::scan::{self, dns, endpoint, endpoints, Batch};
use crate::support::stack::Stack;

#[test]
#[ignore = "needs PostgreSQL"]
fn batches_and_final_commit_everything_in_both_stores() {
    let s = Stack::new("mixed");
    let up = Uuid::new_v4();
    let b0 = Batch::main(up, 0, endpoints(0, 3, t0()));
    let mut obs1 = endpoints(3, 2, t0());
    obs1.push(dns("www.example.com", "10.0.0.1", t0()));
    // The same endpoint again in a later batch is still one execution-projection document.
    obs1.push(endpoint("10.0.0.1", 443, &scan::t0_plus(1)));
    let b1 = Batch::main(up, 1, obs1);
    let fin = Batch::final_(up, 2, endpoints(5, 1, t0()));
    for (b, n) in [(&b0, 3), (&b1, 4), (&fin, 1)] {
        let r = scan::post(s.base(), &s.scanner.token, s.execution(), b);
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body, serde_json::json!({"success": true, "saved": n}));
    }
    assert_eq!(
        s.receipts(),
        vec![
            ("main".into(), 0, "confirmed".into()),
            ("main".into(), 1, "confirmed".into()),
            ("main".into(), 2, "confirmed".into())
        ]
    );
    assert_eq!(s.fact_count(), 8);
    assert_eq!(s.endpoint_docs(), 6);

    let mut c = s.sql();
    let e = c
        .query_one(
            "SELECT status, observation_count, endpoint_count, dns_record_count, finished_at IS NOT NULL
               FROM executions WHERE id = $1",
            &[&s.execution()],
        )
        .unwrap();
    assert_eq!(e.get::<_, String>(0), "succeeded");
    assert_eq!(
        (e.get::<_, i64>(1), e.get::<_, i64>(2), e.get::<_, i64>(3)),
        (8, 6, 1)
    );
    assert!(e.get::<_, bool>(4));
    let t = c
        .query_one(
            "SELECT status, executions_succeeded, endpoints_total, dns_records_total FROM tasks WHERE id = $1",
            &[&s.run.task_id],
        )
        .unwrap();
    // The DNS answer generated a child port scan, which the mixed task now waits for.
    assert_eq!(t.get::<_, String>(0), "running");
    assert_eq!(
        (t.get::<_, i64>(1), t.get::<_, i64>(2), t.get::<_, i64>(3)),
        (1, 6, 1)
    );
    let child = c
        .query_one(
            "SELECT t.kind, t.status, array_agg(tt.value ORDER BY tt.value),
                    (SELECT count(*) FROM executions e WHERE e.task_id = t.id AND e.status = 'queued')
               FROM tasks t JOIN task_targets tt ON tt.task_id = t.id
              WHERE t.parent_task_id = $1 AND t.source_execution_id = $2
              GROUP BY t.id",
            &[&s.run.task_id, &s.execution()],
        )
        .unwrap();
    assert_eq!(child.get::<_, String>(0), "port_scan");
    assert_eq!(child.get::<_, Vec<String>>(2), vec!["10.0.0.1".to_string()]);
    assert_eq!(child.get::<_, i64>(3), 1);
    let queued: (i64, i64) = {
        let r = c
            .query_one(
                // Counted processed or not: the final rings the publishers, which may have
                // taken the row already.
                "SELECT (SELECT count(*) FROM scan_projection_outbox WHERE execution_id = $1),
                        (SELECT count(*) FROM scan_analysis_queue WHERE execution_id = $1)",
                &[&s.execution()],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(queued, (1, 1));
    let stream = c
        .query_one(
            "SELECT batch_count, confirmed_count, pending_count, final_count, final_batch, confirmed_observations
               FROM scan_upload_stream WHERE execution_id = $1 AND upload_id = $2",
            &[&s.execution(), &up],
        )
        .unwrap();
    assert_eq!(
        (
            stream.get::<_, i32>(0),
            stream.get::<_, i32>(1),
            stream.get::<_, i32>(2),
            stream.get::<_, i32>(3)
        ),
        (3, 3, 0, 1)
    );
    assert_eq!(
        (stream.get::<_, Option<i32>>(4), stream.get::<_, i64>(5)),
        (Some(2), 8)
    );

    // A fact document carries the batch identity and the canonical time.
    let (status, hit) = s.es().post(
        &format!("/{}-facts-*/_search", s.prefix()),
        &serde_json::json!({"query": {"bool": {"filter": [
            {"term": {"execution_id": s.execution().to_string()}},
            {"term": {"batch_index": 1}}, {"term": {"type": "dns"}}]}}}),
    );
    assert_eq!(status, 200);
    let doc = &hit["hits"]["hits"][0]["_source"];
    assert_eq!(doc["name"], "www.example.com");
    assert_eq!(doc["observed_at"], scan::stored(t0()));
    assert_eq!(doc["upload_id"], up.to_string());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn confirmed_retry_saves_nothing_and_changes_nothing() {
    // No publisher: the test fakes publication progress and must be the only writer.
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0
    });
    let up = Uuid::new_v4();
    let b0 = Batch::main(up, 0, endpoints(0, 5, t0()));
    let fin = Batch::final_(up, 1, vec![]);
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b0).status,
        200
    );
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &fin).status,
        200
    );
    let mut c = s.sql();
    // Pretend publication made progress: a retry must not reset it.
    c.execute(
        "UPDATE scan_projection_outbox SET processed_endpoints = 3, cursor = 'c3' WHERE execution_id = $1",
        &[&s.execution()],
    )
    .unwrap();
    let before: Vec<String> = c
        .query(
            "SELECT row_to_json(r)::text FROM (SELECT * FROM scan_upload_receipts WHERE execution_id = $1 ORDER BY id) r",
            &[&s.execution()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for b in [&b0, &fin, &b0] {
        let r = scan::post(s.base(), &s.scanner.token, s.execution(), b);
        assert_eq!(
            (r.status, r.body["saved"].as_u64()),
            (200, Some(0)),
            "{}",
            r.body
        );
    }
    let after: Vec<String> = c
        .query(
            "SELECT row_to_json(r)::text FROM (SELECT * FROM scan_upload_receipts WHERE execution_id = $1 ORDER BY id) r",
            &[&s.execution()],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(before, after);
    let progress = c
        .query_one(
            "SELECT processed_endpoints, cursor FROM scan_projection_outbox WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap();
    assert_eq!(
        (
            progress.get::<_, i64>(0),
            progress.get::<_, Option<String>>(1)
        ),
        (3, Some("c3".into()))
    );
    let succeeded: i64 = c
        .query_one(
            "SELECT executions_succeeded FROM tasks WHERE id = $1",
            &[&s.run.task_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(succeeded, 1, "a duplicate final aggregated twice");
    assert_eq!(s.fact_count(), 5);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn dns_only_execution_has_no_publication_row() {
    let s = Stack::new("dns");
    let up = Uuid::new_v4();
    let fin = Batch::final_(
        up,
        0,
        vec![
            dns("a.example.com", "192.0.2.1", t0()),
            dns("b.example.com", "192.0.2.2", t0()),
        ],
    );
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &fin).status,
        200
    );
    let mut c = s.sql();
    let row = c
        .query_one(
            "SELECT e.status, e.dns_record_count,
                    (SELECT count(*) FROM scan_projection_outbox o WHERE o.execution_id = e.id),
                    (SELECT count(*) FROM scan_analysis_queue q WHERE q.execution_id = e.id)
               FROM executions e WHERE e.id = $1",
            &[&s.execution()],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "succeeded");
    assert_eq!(
        (
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
            row.get::<_, i64>(3)
        ),
        (2, 0, 1)
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn claim_hands_out_queued_executions_once() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let queued =
        crate::support::factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "queued");
    let r = scan::claim(s.base(), &s.scanner.token);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["execution_id"], queued.execution_id.to_string());
    assert_eq!(r.body["targets"][0]["value"], "10.0.0.0/8");
    assert_eq!(scan::claim(s.base(), &s.scanner.token).status, 204);
    let status: String = c
        .query_one(
            "SELECT status FROM executions WHERE id = $1",
            &[&queued.execution_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "running");
    assert_eq!(scan::claim(s.base(), "nope").status, 401);
}
