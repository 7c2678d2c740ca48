//! Fault injection: latency, failing the next N requests, bulk item failures, bulk response
//! corruption, refresh failures, connections closed mid-response, pauses, reset, and the
//! request log. These need the emulator; on a real cluster they skip with a reason.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::emulator::{
    emulator_for_faults, plain_emulator, CorruptMode, Emulator, FaultSpec,
};

fn doc_lines(idx: &str, ids: &[&str]) -> Vec<Value> {
    ids.iter()
        .flat_map(|id| {
            [
                json!({"index": {"_index": idx, "_id": id}}),
                json!({"id": id}),
            ]
        })
        .collect()
}

#[test]
fn latency_delays_only_matching_requests() {
    let Some(emu) = emulator_for_faults("latency_delays_only_matching_requests") else {
        return;
    };
    let es = emu.es();
    emu.add_fault(FaultSpec::Latency {
        path: "*/_count".into(),
        method: None,
        ms: 300,
        count: Some(1),
    });
    let hits = |emu: &Emulator| {
        let (_, v) = emu.es().get("/_emulator/faults");
        v["faults"].as_array().cloned().unwrap_or_default()
    };
    es.get("/");
    // A non-matching request leaves the one-shot fault untouched.
    assert_eq!(hits(&emu).len(), 1);
    assert_eq!(hits(&emu)[0]["hits"], 0);
    let t = Instant::now();
    let (status, _) = es.post("/_count", &json!({}));
    assert_eq!(status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    // Consumed: the next count is not delayed.
    assert!(hits(&emu).is_empty());
}

#[test]
fn fail_next_n_requests_with_es_error_shapes() {
    let Some(emu) = emulator_for_faults("fail_next_n_requests_with_es_error_shapes") else {
        return;
    };
    let es = emu.es();
    emu.add_fault(FaultSpec::fail(
        "/_bulk",
        2,
        429,
        "es_rejected_execution_exception",
    ));
    let lines = doc_lines("f", &["1"]);
    for _ in 0..2 {
        let (status, v) = es.bulk("/_bulk", &lines);
        assert_eq!(status, 429);
        assert_eq!(v["error"]["type"], "es_rejected_execution_exception");
        assert_eq!(
            v["error"]["root_cause"][0]["type"],
            "es_rejected_execution_exception"
        );
        assert_eq!(v["status"], 429);
    }
    assert_eq!(
        emu.es().get("/f/_doc/1").0,
        404,
        "rejected requests write nothing"
    );
    let (status, v) = es.bulk("/_bulk", &lines);
    assert_eq!((status, v["errors"].clone()), (200, json!(false)));
    for (status, kind) in [(500, "exception"), (503, "cluster_block_exception")] {
        emu.add_fault(FaultSpec::fail("*/_search", 1, status, kind));
        let (got, v) = es.post("/f/_search", &json!({}));
        assert_eq!((got, v["error"]["type"].clone()), (status, json!(kind)));
    }
}

#[test]
fn bulk_items_fail_by_id_pattern() {
    let Some(emu) = emulator_for_faults("bulk_items_fail_by_id_pattern") else {
        return;
    };
    let es = emu.es();
    emu.add_fault(FaultSpec::BulkItemFail {
        id: "bad-*".into(),
        status: 429,
        error_type: Some("es_rejected_execution_exception".into()),
        reason: None,
        count: None,
    });
    let (status, v) = es.bulk(
        "/_bulk?refresh=true",
        &doc_lines("items", &["ok-1", "bad-1", "ok-2", "bad-2"]),
    );
    assert_eq!(status, 200);
    assert_eq!(v["errors"], true);
    let statuses: Vec<Value> = (0..4)
        .map(|i| v["items"][i]["index"]["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        vec![json!(201), json!(429), json!(201), json!(429)]
    );
    assert_eq!(
        v["items"][1]["index"]["error"]["type"],
        "es_rejected_execution_exception"
    );
    assert_eq!(v["items"][1]["index"]["_id"], "bad-1");
    assert_eq!(es.refreshed_count("items", json!({"match_all": {}})), 2);
    assert_eq!(es.get("/items/_doc/bad-1").0, 404);
}

#[test]
fn bulk_responses_can_be_corrupted_in_four_ways() {
    let Some(emu) = emulator_for_faults("bulk_responses_can_be_corrupted_in_four_ways") else {
        return;
    };
    let es = emu.es();
    let lines = doc_lines("c", &["1", "2"]);
    let items = |v: &Value| v["items"].as_array().cloned().unwrap_or_default();
    emu.add_fault(FaultSpec::CorruptBulk {
        mode: CorruptMode::WrongId,
        count: Some(1),
    });
    let (_, v) = es.bulk("/_bulk", &lines);
    assert_ne!(items(&v)[0]["index"]["_id"], "1");
    emu.add_fault(FaultSpec::CorruptBulk {
        mode: CorruptMode::WrongIndex,
        count: Some(1),
    });
    let (_, v) = es.bulk("/_bulk", &lines);
    assert_ne!(items(&v)[0]["index"]["_index"], "c");
    assert_eq!(items(&v)[0]["index"]["_id"], "1");
    emu.add_fault(FaultSpec::CorruptBulk {
        mode: CorruptMode::MissingItem,
        count: Some(1),
    });
    assert_eq!(items(&es.bulk("/_bulk", &lines).1).len(), 1);
    emu.add_fault(FaultSpec::CorruptBulk {
        mode: CorruptMode::ExtraItem,
        count: Some(1),
    });
    assert_eq!(items(&es.bulk("/_bulk", &lines).1).len(), 3);
    assert_eq!(
        items(&es.bulk("/_bulk", &lines).1).len(),
        2,
        "faults were one-shot"
    );
    // The writes themselves happened; only the response lied.
    assert_eq!(es.get("/c/_doc/2").1["_version"], 5);
}

#[test]
fn refresh_can_fail() {
    let Some(emu) = emulator_for_faults("refresh_can_fail") else {
        return;
    };
    let es = emu.es();
    es.put("/r", &json!({"settings": {"refresh_interval": "-1"}}));
    es.bulk("/r/_bulk", &doc_lines("r", &["1"]));
    emu.add_fault(FaultSpec::RefreshFail { count: Some(1) });
    let (status, v) = es.post("/r/_refresh", &json!({}));
    assert_eq!(status, 500);
    assert_eq!(v["_shards"]["successful"], 0);
    assert_eq!(v["_shards"]["failed"], 1);
    assert_eq!(v["_shards"]["failures"][0]["index"], "r");
    assert_eq!(
        es.post("/r/_count", &json!({})).1["count"],
        0,
        "failed refresh published nothing"
    );
    assert_eq!(es.refreshed_count("r", json!({"match_all": {}})), 1);
}

fn raw_http(emu: &Emulator, request: &[u8]) -> Vec<u8> {
    let addr = emu.url().trim_start_matches("http://").to_owned();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(request).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn connection_closes_mid_response() {
    let Some(emu) = plain_emulator("connection_closes_mid_response") else {
        return;
    };
    emu.add_fault(FaultSpec::Close {
        path: "/".into(),
        method: Some("GET".into()),
        count: Some(1),
    });
    let started = Instant::now();
    let got = raw_http(&emu, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "closed, not timed out"
    );
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let declared: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    assert!(
        !body.is_empty() && body.len() < declared,
        "truncated body: {} of {declared}",
        body.len()
    );
    // The next request is served normally.
    assert_eq!(emu.es().get("/").0, 200);
}

#[test]
fn paused_requests_hang_until_released() {
    let Some(emu) = emulator_for_faults("paused_requests_hang_until_released") else {
        return;
    };
    let id = emu.add_fault(FaultSpec::Pause {
        path: "*/_bulk".into(),
        method: None,
        count: Some(1),
    });
    let es = emu.es();
    let handle = std::thread::spawn(move || es.bulk("/_bulk", &doc_lines("p", &["1"])));
    emu.wait_paused(1, Duration::from_secs(5));
    // Other requests are served while one hangs, and the paused write has not happened.
    assert_eq!(emu.es().get("/").0, 200);
    assert_eq!(emu.es().get("/p/_doc/1").0, 404);
    emu.remove_fault(id);
    let (status, v) = handle.join().expect("bulk thread");
    assert_eq!((status, v["errors"].clone()), (200, json!(false)));
    assert_eq!(emu.paused(), 0);
    // release_all works for unlimited pauses too.
    emu.add_fault(FaultSpec::Pause {
        path: "/".into(),
        method: None,
        count: None,
    });
    let es = emu.es();
    let h = std::thread::spawn(move || es.get("/").0);
    emu.wait_paused(1, Duration::from_secs(5));
    emu.release_all();
    assert_eq!(h.join().expect("get thread"), 200);
}

#[test]
fn reset_clears_data_and_faults() {
    let Some(emu) = emulator_for_faults("reset_clears_data_and_faults") else {
        return;
    };
    let es = emu.es();
    es.bulk("/_bulk?refresh=true", &doc_lines("z", &["1"]));
    es.put("/_index_template/t", &json!({"index_patterns": ["z*"]}));
    emu.add_fault(FaultSpec::fail("/", 5, 503, "cluster_block_exception"));
    emu.reset();
    assert_eq!(es.get("/").0, 200);
    assert_eq!(es.head("/z"), 404);
    assert_eq!(es.get("/_index_template").1["index_templates"], json!([]));
    assert_eq!(
        emu.requests(None, None).count,
        3,
        "log restarted: just the three requests above"
    );
}

#[test]
fn request_log_counts_refreshes_and_longest_line() {
    let Some(emu) = emulator_for_faults("request_log_counts_refreshes_and_longest_line") else {
        return;
    };
    let es = emu.es();
    let names: Vec<String> = (0..20).map(|i| format!("scan-facts-2026.{i:02}")).collect();
    for n in &names {
        es.put(&format!("/{n}"), &json!({}));
    }
    let joined = names.join(",");
    es.post(&format!("/{joined}/_refresh"), &json!({}));
    es.post("/scan-facts-*/_refresh", &json!({}));
    let log = emu.requests(Some("POST"), Some("*/_refresh"));
    assert_eq!(log.count, 2);
    let expected = "POST /".len() + joined.len() + "/_refresh HTTP/1.1".len();
    assert_eq!(log.max_request_line_bytes, expected);
    assert_eq!(log.requests[1].path, "/scan-facts-*/_refresh");
    assert_eq!(log.requests[0].body_bytes, 2);
    assert_eq!(emu.requests(Some("PUT"), None).count, 20);
}
