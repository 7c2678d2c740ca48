//! Near-real-time visibility: invisible until refresh, `refresh=true|wait_for`, the periodic
//! refresh (`refresh_interval`, `-1` disables it), realtime GET, and multi-index `_refresh`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::emulator::{target, unique, Es};

fn count(es: &Es, target: &str) -> u64 {
    let (status, v) = es.post(
        &format!("/{target}/_count"),
        &json!({"query": {"match_all": {}}}),
    );
    assert_eq!(status, 200, "{v}");
    v["count"].as_u64().unwrap_or(u64::MAX)
}

#[test]
fn writes_are_invisible_until_refresh_but_get_is_realtime() {
    let t = target();
    let es = t.es();
    let idx = unique("nrt");
    es.put(
        &format!("/{idx}"),
        &json!({"settings": {"refresh_interval": "-1"}}),
    );
    es.bulk(
        &format!("/{idx}/_bulk"),
        &[json!({"index": {"_id": "1"}}), json!({"a": 1})],
    );
    assert_eq!(count(&es, &idx), 0);
    let (_, s) = es.post(
        &format!("/{idx}/_search"),
        &json!({"query": {"match_all": {}}}),
    );
    assert_eq!(s["hits"]["total"]["value"], 0);
    let (status, doc) = es.get(&format!("/{idx}/_doc/1"));
    assert_eq!((status, doc["_source"]["a"].clone()), (200, json!(1)));
    assert_eq!(es.get(&format!("/{idx}/_doc/1?realtime=false")).0, 404);
    let (status, r) = es.post(&format!("/{idx}/_refresh"), &json!({}));
    assert_eq!(status, 200);
    assert_eq!(r["_shards"]["failed"], 0);
    assert_eq!(count(&es, &idx), 1);
}

#[test]
fn refresh_true_and_wait_for_make_writes_visible() {
    let t = target();
    let es = t.es();
    let idx = unique("rf");
    es.put(
        &format!("/{idx}"),
        &json!({"settings": {"refresh_interval": "200ms"}}),
    );
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk?refresh=true"),
        &[json!({"index": {"_id": "1"}}), json!({"a": 1})],
    );
    assert_eq!(v["items"][0]["index"]["forced_refresh"], true);
    assert_eq!(count(&es, &idx), 1);
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk?refresh=wait_for"),
        &[json!({"index": {"_id": "2"}}), json!({"a": 2})],
    );
    assert!(
        v["items"][0]["index"].get("forced_refresh").is_none(),
        "{v}"
    );
    assert_eq!(count(&es, &idx), 2);
    let (status, _) = es.put(&format!("/{idx}/_doc/3?refresh=true"), &json!({"a": 3}));
    assert_eq!(status, 201);
    assert_eq!(count(&es, &idx), 3);
}

#[test]
fn periodic_refresh_follows_refresh_interval() {
    let t = target();
    let es = t.es();
    let idx = unique("periodic");
    // Taken before the index exists: its first periodic refresh is due 300 ms after creation.
    let started = Instant::now();
    es.put(
        &format!("/{idx}"),
        &json!({"settings": {"refresh_interval": "300ms"}}),
    );
    es.bulk(
        &format!("/{idx}/_bulk"),
        &[json!({"index": {"_id": "1"}}), json!({"a": 1})],
    );
    while count(&es, &idx) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "periodic refresh never happened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "visible before the interval: {:?}",
        started.elapsed()
    );
}

#[test]
fn refresh_and_count_over_lists_and_wildcards() {
    let t = target();
    let es = t.es();
    let p = unique("multi");
    let (a, b, missing) = (format!("{p}-a"), format!("{p}-b"), format!("{p}-missing"));
    for i in [&a, &b] {
        es.put(&format!("/{i}"), &json!({"settings": {"number_of_shards": 2, "number_of_replicas": 0, "refresh_interval": "-1"}}));
        es.bulk(
            &format!("/{i}/_bulk"),
            &[
                json!({"index": {"_id": "1"}}),
                json!({"k": "x"}),
                json!({"index": {"_id": "2"}}),
                json!({"k": "y"}),
            ],
        );
    }
    let (status, r) = es.post(&format!("/{a},{b}/_refresh"), &json!({}));
    assert_eq!(status, 200);
    assert_eq!(
        r["_shards"],
        json!({"total": 4, "successful": 4, "failed": 0})
    );
    let (_, c) = es.post(
        &format!("/{p}-*/_count"),
        &json!({"query": {"term": {"k.keyword": "x"}}}),
    );
    assert_eq!(c["count"], 2);
    assert_eq!(c["_shards"]["total"], 4);
    // GET with a body, as ES clients send it.
    let body = br#"{"query":{"term":{"k.keyword":"y"}}}"#;
    let r = es.raw(
        "GET",
        &format!("/{p}-*/_count"),
        Some("application/json"),
        Some(body),
    );
    assert_eq!((r.status, r.json()["count"].clone()), (200, json!(2)));
    let (status, c) = es.post(&format!("/{a},{missing}/_count"), &json!({}));
    assert_eq!(
        (status, c["error"]["type"].clone()),
        (404, json!("index_not_found_exception"))
    );
    let (status, _) = es.post(&format!("/{a},{missing}/_refresh"), &json!({}));
    assert_eq!(status, 404);
    let (status, c) = es.post(
        &format!("/{a},{missing}/_count?ignore_unavailable=true"),
        &json!({}),
    );
    assert_eq!((status, c["count"].clone()), (200, json!(2)));
    let (status, c) = es.post(&format!("/{p}-none-*/_count"), &json!({}));
    assert_eq!(
        (status, c["count"].clone(), c["_shards"]["total"].clone()),
        (200, json!(0), json!(0))
    );
    let (status, _) = es.post(
        &format!("/{p}-none-*/_count?allow_no_indices=false"),
        &json!({}),
    );
    assert_eq!(status, 404);
    let (status, r) = es.post(&format!("/{p}-none-*/_refresh"), &json!({}));
    assert_eq!((status, r["_shards"]["total"].clone()), (200, json!(0)));
}

#[test]
fn term_queries_follow_overwrites_updates_and_deletes() {
    let t = target();
    let es = t.es();
    let idx = unique("terms");
    es.put(
        &format!("/{idx}"),
        &json!({"settings": {"refresh_interval": "-1"},
        "mappings": {"properties": {"k": {"type": "keyword"}, "tags": {"type": "keyword"}}}}),
    );
    let term = |field: &str, v: &str| {
        let (_, c) = es.post(
            &format!("/{idx}/_count"),
            &json!({"query": {"bool": {"filter": [{"term": {field: v}}]}}}),
        );
        c["count"].as_u64().unwrap_or(u64::MAX)
    };
    es.bulk(
        &format!("/{idx}/_bulk?refresh=true"),
        &[
            json!({"index": {"_id": "1"}}),
            json!({"k": "a", "tags": ["x", "y"]}),
            json!({"index": {"_id": "2"}}),
            json!({"k": "a", "tags": "y"}),
        ],
    );
    assert_eq!(
        (term("k", "a"), term("tags", "y"), term("tags", "x")),
        (2, 2, 1)
    );
    es.bulk(
        &format!("/{idx}/_bulk"),
        &[
            json!({"index": {"_id": "1"}}),
            json!({"k": "b", "tags": ["x"]}),
            json!({"update": {"_id": "2"}}),
            json!({"doc": {"k": "c"}}),
        ],
    );
    assert_eq!(
        term("k", "a"),
        2,
        "unrefreshed changes are invisible to term queries too"
    );
    es.post(&format!("/{idx}/_refresh"), &json!({}));
    assert_eq!(
        (
            term("k", "a"),
            term("k", "b"),
            term("k", "c"),
            term("tags", "y")
        ),
        (0, 1, 1, 1)
    );
    es.bulk(
        &format!("/{idx}/_bulk?refresh=true"),
        &[json!({"delete": {"_id": "1"}})],
    );
    assert_eq!((term("k", "b"), term("tags", "x")), (0, 0));
    let (_, c) = es.post(
        &format!("/{idx}/_count"),
        &json!({"query": {"terms": {"k": ["b", "c", "zz"]}}}),
    );
    assert_eq!(c["count"], 1);
}
