//! Abandoning an upload: allowed while none of its batches is confirmed; its pending
//! batches, their facts and the endpoint documents only they wrote go, the endpoint
//! documents another upload also observed are rebuilt from that upload's facts, the
//! stream is repaired and takes no more batches, and a final of another upload then
//! succeeds counting exactly what stayed. Repeating the request completes it.

use serde_json::json;
use uuid::Uuid;

use crate::support::emulator::FaultSpec;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::server::{got, http, Got};
use crate::support::stack::Stack;

pub fn abandon(base: &str, token: &str, execution: Uuid, upload: Uuid) -> Got {
    got(http()
        .delete(format!(
            "{base}/api/v1/scanner/executions/{execution}/uploads/{upload}"
        ))
        .header("Authorization", &format!("Bearer {token}"))
        .call())
}

/// Facts of `upload` in the stack's facts indices (refreshed).
pub fn facts_of(s: &Stack, upload: Uuid) -> u64 {
    s.es().refreshed_count(
        &format!("{}-facts-*", s.prefix()),
        json!({"term": {"upload_id": upload.to_string()}}),
    )
}

/// The execution's endpoint documents: (ip, product), by ip.
pub fn endpoint_products(s: &Stack) -> Vec<(String, String)> {
    let index = format!("{}-execution-endpoints", s.prefix());
    s.es().post(&format!("/{index}/_refresh"), &json!({}));
    let (_, r) = s.es().post(
        &format!("/{index}/_search"),
        &json!({"size": 100, "query": {"term": {"execution_id": s.execution().to_string()}},
                "sort": [{"ip": "asc"}]}),
    );
    r["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_source"]["ip"].as_str().unwrap().to_string(),
                h["_source"]["product"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Which write of upload `a`'s batch fails, leaving its receipt pending.
#[derive(Clone, Copy)]
pub enum Lost {
    /// The fact of 10.0.0.5 (its endpoint document is written).
    Fact,
    /// The endpoint document of 10.0.0.5 (every fact is written).
    EndpointDocument,
}

/// Upload `a` has one pending batch of ten endpoints (one write failed); upload `b` has a
/// confirmed batch observing the first three of them earlier, with another product.
pub fn two_uploads(s: &Stack, lost: Lost) -> (Uuid, Uuid) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let mut older = endpoints(0, 3, &scan::t0_plus(-5));
    for o in &mut older {
        o["product"] = json!("apache");
    }
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::main(b, 0, older),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let failing = match lost {
        Lost::Fact => format!("{}-{}-m0-4", s.execution().simple(), a.simple()),
        Lost::EndpointDocument => {
            scanstore::es::index::execution_endpoint_id(s.execution(), "10.0.0.5", "tcp", 443)
        }
    };
    s.emulator().add_fault(FaultSpec::item_fails_once(failing));
    let pending = Batch::main(a, 0, endpoints(0, 10, t0()));
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &pending).status,
        502
    );
    (a, b)
}

/// What an abandoned `a` leaves, with `b` finished: nothing of `a`, `b`'s three endpoints
/// as `b` saw them, and counts that agree.
pub fn assert_abandoned(s: &Stack, a: Uuid) {
    assert_eq!(facts_of(s, a), 0, "the pending batch's facts");
    assert_eq!(
        endpoint_products(s),
        vec![
            ("10.0.0.1".to_string(), "apache".to_string()),
            ("10.0.0.2".to_string(), "apache".to_string()),
            ("10.0.0.3".to_string(), "apache".to_string()),
        ]
    );
    let stream = s
        .sql()
        .query_one(
            "SELECT batch_count, pending_count, dirty, abandoned_at IS NOT NULL FROM scan_upload_stream
              WHERE execution_id = $1 AND upload_id = $2",
            &[&s.execution(), &a],
        )
        .unwrap();
    let got: (i32, i32, bool, bool) = (stream.get(0), stream.get(1), stream.get(2), stream.get(3));
    assert_eq!(got, (0, 0, false, true), "the stream, repaired");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_upload_with_only_pending_batches_is_abandoned_and_a_final_counts_without_it() {
    for lost in [Lost::Fact, Lost::EndpointDocument] {
        abandon_and_finish(lost);
    }
}

fn abandon_and_finish(lost: Lost) {
    // No batch of this test is in flight when it abandons: no grace to wait out.
    let Some(s) = Stack::with_faults("abandon_upload", "port_scan", |cfg| {
        cfg.scanner.write_grace = std::time::Duration::ZERO;
    }) else {
        return;
    };
    let (a, b) = two_uploads(&s, lost);
    let (base, token, e) = (s.base(), s.scanner.token.as_str(), s.execution());
    // The final of `b` waits for `a`.
    let fin = Batch::final_(b, 1, vec![]);
    let r = scan::post(base, token, e, &fin);
    assert_eq!(r.body["error"]["code"], "final_incomplete", "{}", r.body);
    assert_eq!(
        r.body["error"]["details"]["incomplete_uploads"][0]["pending"],
        json!([0])
    );
    // `b` has a confirmed batch: it can only be finished. An unknown upload: 404.
    assert_eq!(
        abandon(base, token, e, b).body["error"]["code"],
        "upload_has_confirmed_batches"
    );
    assert_eq!(abandon(base, token, e, Uuid::new_v4()).status, 404);

    let r = abandon(base, token, e, a);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["removed_batches"], 1);
    assert!(s.receipts().iter().all(|(_, _, st)| st == "confirmed"));
    assert_abandoned(&s, a);
    let again = abandon(base, token, e, a);
    assert_eq!(
        (again.status, again.body["removed_batches"].clone()),
        (200, json!(0))
    );
    // No batch enters it again, not even the pending one retried.
    let retry = Batch::main(a, 0, endpoints(0, 10, t0()));
    assert_eq!(
        scan::post(base, token, e, &retry).body["error"]["code"],
        "upload_abandoned"
    );

    let r = scan::post(base, token, e, &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    let counts = s
        .sql()
        .query_one(
            "SELECT status, observation_count, endpoint_count FROM executions WHERE id = $1",
            &[&e],
        )
        .unwrap();
    let counts: (String, i64, i64) = (counts.get(0), counts.get(1), counts.get(2));
    assert_eq!(counts, ("succeeded".to_string(), 3, 3));
    assert_eq!(
        abandon(base, token, e, a).body["error"]["code"],
        "execution_not_running"
    );
}
