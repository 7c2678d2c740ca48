//! `_bulk`: item results, parser rules, conflicts, versions, mapping rejections, updates,
//! stored scripts (the asset merge) and unknown scripts.

use serde_json::{json, Value};

use scanstore::es::painless::{ASSET_MERGE_ID, ASSET_MERGE_SOURCE};

use crate::support::emulator::{target, unique, Es};

fn strict_index(es: &Es, name: &str) {
    let (status, v) = es.put(&format!("/{name}"), &json!({"settings": {"number_of_replicas": 0}, "mappings": {"dynamic": "strict", "properties": {
        "ip": {"type": "ip"}, "port": {"type": "long"}, "seen": {"type": "date"}, "name": {"type": "keyword"},
        "tags": {"type": "keyword"}, "svc": {"type": "object", "properties": {"product": {"type": "keyword"}}}}}}));
    assert_eq!(status, 200, "{v}");
}

fn item(v: &Value, i: usize) -> &Value {
    v["items"][i]
        .as_object()
        .and_then(|o| o.values().next())
        .unwrap_or(&Value::Null)
}

#[test]
fn items_come_back_in_order_with_every_field() {
    let t = target();
    let es = t.es();
    let idx = unique("bulk");
    strict_index(&es, &idx);
    let (status, v) = es.bulk(
        &format!("/{idx}/_bulk"),
        &[
            json!({"index": {"_id": "a"}}),
            json!({"name": "a"}),
            json!({"create": {"_id": "b"}}),
            json!({"name": "b"}),
            json!({"index": {"_id": "a"}}),
            json!({"name": "a2"}),
            json!({"delete": {"_id": "b"}}),
            json!({"delete": {"_id": "zz"}}),
            json!({"update": {"_id": "a"}}),
            json!({"doc": {"port": 80}}),
        ],
    );
    assert_eq!(status, 200);
    assert_eq!(v["errors"], false, "{v}");
    assert!(v["took"].is_u64());
    let ops: Vec<&str> = v["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i.as_object()?.keys().next().map(String::as_str))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        ops,
        ["index", "create", "index", "delete", "delete", "update"]
    );
    let results: Vec<(Value, Value, Value)> = (0..6)
        .map(|i| {
            (
                item(&v, i)["_id"].clone(),
                item(&v, i)["result"].clone(),
                item(&v, i)["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        results,
        vec![
            (json!("a"), json!("created"), json!(201)),
            (json!("b"), json!("created"), json!(201)),
            (json!("a"), json!("updated"), json!(200)),
            (json!("b"), json!("deleted"), json!(200)),
            (json!("zz"), json!("not_found"), json!(404)),
            (json!("a"), json!("updated"), json!(200))
        ]
    );
    for i in 0..6 {
        let it = item(&v, i);
        assert_eq!(it["_index"], json!(idx));
        assert!(
            it["_seq_no"].is_i64() && it["_primary_term"] == 1 && it["_shards"]["successful"] == 1,
            "{it}"
        );
    }
    assert_eq!(item(&v, 5)["_version"], 3);
    let (_, doc) = es.get(&format!("/{idx}/_doc/a"));
    assert_eq!(doc["_source"], json!({"name": "a2", "port": 80}));
    assert_eq!(es.get(&format!("/{idx}/_doc/b")).0, 404);
}

#[test]
fn body_must_end_with_newline_and_bad_lines_fail_the_request() {
    let t = target();
    let es = t.es();
    let idx = unique("nl");
    let r = es.raw(
        "POST",
        &format!("/{idx}/_bulk"),
        Some("application/x-ndjson"),
        Some(b"{\"index\":{}}\n{\"a\":1}"),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "illegal_argument_exception");
    assert_eq!(
        r.json()["error"]["reason"],
        "The bulk request must be terminated by a newline [\\n]"
    );
    let r = es.raw(
        "POST",
        &format!("/{idx}/_bulk"),
        Some("application/x-ndjson"),
        Some(b"{\"index\":{\"nope\":1}}\n{}\n"),
    );
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["reason"]
        .as_str()
        .unwrap_or("")
        .contains("unknown parameter [nope]"));
    assert_eq!(
        es.head(&format!("/{idx}")),
        404,
        "a rejected request writes nothing"
    );
}

#[test]
fn create_conflict_and_external_versions_are_strict() {
    let t = target();
    let es = t.es();
    let idx = unique("ver");
    strict_index(&es, &idx);
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk"),
        &[
            json!({"create": {"_id": "1"}}),
            json!({"name": "first"}),
            json!({"create": {"_id": "1"}}),
            json!({"name": "second"}),
            json!({"index": {"_id": "2", "version": 5, "version_type": "external"}}),
            json!({"name": "v5"}),
            json!({"index": {"_id": "2", "version": 5, "version_type": "external"}}),
            json!({"name": "v5-again"}),
            json!({"index": {"_id": "2", "version": 4, "version_type": "external"}}),
            json!({"name": "v4"}),
            json!({"index": {"_id": "2", "version": 7, "version_type": "external"}}),
            json!({"name": "v7"}),
        ],
    );
    assert_eq!(v["errors"], true);
    assert_eq!(item(&v, 1)["status"], 409);
    assert_eq!(
        item(&v, 1)["error"]["type"],
        "version_conflict_engine_exception"
    );
    assert_eq!(item(&v, 2)["_version"], 5);
    assert_eq!(
        (item(&v, 3)["status"].clone(), item(&v, 4)["status"].clone()),
        (json!(409), json!(409))
    );
    assert_eq!(item(&v, 5)["_version"], 7);
    let (_, d1) = es.get(&format!("/{idx}/_doc/1"));
    let (_, d2) = es.get(&format!("/{idx}/_doc/2"));
    assert_eq!(
        (
            d1["_source"]["name"].clone(),
            d2["_source"]["name"].clone(),
            d2["_version"].clone()
        ),
        (json!("first"), json!("v7"), json!(7))
    );
}

#[test]
fn mapping_rejections_are_item_errors_and_nothing_is_stored() {
    let t = target();
    let es = t.es();
    let idx = unique("map");
    strict_index(&es, &idx);
    let (_, v) = es.bulk(&format!("/{idx}/_bulk?refresh=true"), &[
        json!({"index": {"_id": "ok"}}), json!({"ip": "2001:db8::1", "port": "443", "seen": 1764410400000u64, "svc": {"product": "x"}}),
        json!({"index": {"_id": "unknown"}}), json!({"ip": "10.0.0.1", "surprise": true}),
        json!({"index": {"_id": "port"}}), json!({"port": "https"}),
        json!({"index": {"_id": "ip"}}), json!({"ip": "10.0.0.300"}),
        json!({"index": {"_id": "date"}}), json!({"seen": "yesterday"}),
        json!({"index": {"_id": "nested"}}), json!({"svc": {"vendor": "y"}}),
    ]);
    assert_eq!(item(&v, 0)["status"], 201, "{v}");
    let kinds: Vec<Value> = (1..6)
        .map(|i| item(&v, i)["error"]["type"].clone())
        .collect();
    assert_eq!(
        kinds,
        vec![
            json!("strict_dynamic_mapping_exception"),
            json!("mapper_parsing_exception"),
            json!("mapper_parsing_exception"),
            json!("mapper_parsing_exception"),
            json!("strict_dynamic_mapping_exception")
        ]
    );
    assert!((1..6).all(|i| item(&v, i)["status"] == 400));
    for id in ["unknown", "port", "ip", "date", "nested"] {
        assert_eq!(
            es.get(&format!("/{idx}/_doc/{id}")).0,
            404,
            "{id} must not be stored"
        );
    }
    assert_eq!(es.refreshed_count(&idx, json!({"match_all": {}})), 1);
}

#[test]
fn update_doc_upserts_and_noop() {
    let t = target();
    let es = t.es();
    let idx = unique("upd");
    strict_index(&es, &idx);
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk"),
        &[
            json!({"update": {"_id": "1"}}),
            json!({"doc": {"name": "x"}, "doc_as_upsert": true}),
            json!({"update": {"_id": "1"}}),
            json!({"doc": {"name": "x"}}),
            json!({"update": {"_id": "1"}}),
            json!({"doc": {"port": 1}}),
            json!({"update": {"_id": "2"}}),
            json!({"doc": {"name": "y"}}),
            json!({"update": {"_id": "3"}}),
            json!({"doc": {"name": "y"}, "upsert": {"name": "fresh"}}),
        ],
    );
    let results: Vec<Value> = (0..5).map(|i| item(&v, i)["result"].clone()).collect();
    assert_eq!(
        results[..3],
        [json!("created"), json!("noop"), json!("updated")]
    );
    assert_eq!(item(&v, 1)["_version"], 1);
    assert_eq!(item(&v, 1)["_shards"]["total"], 0);
    assert_eq!(item(&v, 3)["error"]["type"], "document_missing_exception");
    assert_eq!(item(&v, 3)["status"], 404);
    assert_eq!(results[4], json!("created"));
    assert_eq!(
        es.get(&format!("/{idx}/_doc/3")).1["_source"],
        json!({"name": "fresh"})
    );
    assert_eq!(
        es.get(&format!("/{idx}/_doc/1")).1["_source"],
        json!({"name": "x", "port": 1})
    );
}

fn merge_line(idx: &str, id: &str, obs: Value) -> [Value; 2] {
    [
        json!({"update": {"_index": idx, "_id": id}}),
        json!({"script": {"id": ASSET_MERGE_ID, "params": {"obs": obs}}, "upsert": {}, "scripted_upsert": true}),
    ]
}

fn obs(at: &str, exec: &str, product: &str) -> Value {
    json!({"ip": "203.0.113.7", "port": 443, "transport": "tcp", "owner_id": "o1", "service": "https",
        "product": product, "version": "1", "banner": "b", "observed_at": at, "execution_id": exec})
}

#[test]
fn asset_merge_stored_script_runs_through_bulk() {
    let t = target();
    let es = t.es();
    let idx = unique("assets");
    es.put(
        &format!("/{idx}"),
        &json!({"mappings": scanstore::es::setup::assets_mapping()}),
    );
    let (status, v) = es.put(
        &format!("/_scripts/{ASSET_MERGE_ID}"),
        &json!({"script": {"lang": "painless", "source": ASSET_MERGE_SOURCE}}),
    );
    assert_eq!(status, 200, "{v}");
    let (_, stored) = es.get(&format!("/_scripts/{ASSET_MERGE_ID}"));
    assert_eq!(stored["script"]["source"], ASSET_MERGE_SOURCE);
    let mut lines = Vec::new();
    lines.extend(merge_line(
        &idx,
        "h1",
        obs("2026-11-29T10:00:00.000Z", "e2", "nginx"),
    ));
    lines.extend(merge_line(
        &idx,
        "h1",
        obs("2026-11-28T10:00:00.000Z", "e1", "apache"),
    ));
    lines.extend(merge_line(
        &idx,
        "h1",
        obs("2026-11-29T10:00:00.000Z", "e2", "nginx"),
    ));
    let (_, v) = es.bulk("/_bulk", &lines);
    assert_eq!(v["errors"], false, "{v}");
    let results: Vec<Value> = (0..3).map(|i| item(&v, i)["result"].clone()).collect();
    assert_eq!(
        results,
        vec![json!("created"), json!("updated"), json!("noop")]
    );
    let (_, doc) = es.get(&format!("/{idx}/_doc/h1"));
    let src = &doc["_source"];
    assert_eq!(src["first_seen"], "2026-11-28T10:00:00.000Z");
    assert_eq!(src["last_seen"], "2026-11-29T10:00:00.000Z");
    assert_eq!(
        (
            src["product"].clone(),
            src["execution_id"].clone(),
            src["owner_id"].clone()
        ),
        (json!("nginx"), json!("e2"), json!("o1"))
    );
    assert_eq!(doc["_version"], 2);
}

#[test]
fn unknown_or_missing_scripts_fail_the_item() {
    let t = target();
    if t.is_real() {
        println!("SKIP unknown_or_missing_scripts_fail_the_item: a real cluster runs any Painless");
        return;
    }
    let es = t.es();
    let idx = unique("noscript");
    es.put(
        "/_scripts/custom",
        &json!({"script": {"lang": "painless", "source": "ctx._source.n += 1"}}),
    );
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk"),
        &[
            json!({"update": {"_id": "1"}}),
            json!({"script": {"id": "custom"}, "upsert": {"n": 0}, "scripted_upsert": true}),
            json!({"update": {"_id": "1"}}),
            json!({"script": {"id": "absent"}, "upsert": {}, "scripted_upsert": true}),
        ],
    );
    assert_eq!(item(&v, 0)["status"], 400);
    assert_eq!(item(&v, 0)["error"]["type"], "script_exception");
    assert!(item(&v, 0)["error"]["reason"]
        .as_str()
        .unwrap_or("")
        .contains("cannot run Painless"));
    assert_eq!(
        item(&v, 1)["error"]["caused_by"]["type"],
        "resource_not_found_exception"
    );
    assert_eq!(es.get(&format!("/{idx}/_doc/1")).0, 404);
}

#[test]
fn filter_path_keeps_only_the_item_fields_it_names() {
    let t = target();
    let es = t.es();
    let idx = unique("filtered");
    strict_index(&es, &idx);
    let lines = |n: &str| {
        [
            json!({"index": {"_id": format!("{n}a")}}),
            json!({"name": "a"}),
            json!({"create": {"_id": format!("{n}a")}}),
            json!({"name": "again"}),
            json!({"delete": {"_id": format!("{n}zz")}}),
        ]
    };
    // What scanstore asks for: everything its verification reads, nothing else.
    let (status, v) = es.bulk(
        &format!(
            "/{idx}/_bulk?filter_path=took,errors,items.*._index,items.*._id,items.*.status,items.*.result,items.*.error"
        ),
        &lines("1"),
    );
    assert_eq!(status, 200, "{v}");
    assert!(v["took"].is_u64(), "{v}");
    assert_eq!(v["errors"], true);
    let conflict = &v["items"][1]["create"];
    assert_eq!(
        conflict["error"]["type"], "version_conflict_engine_exception",
        "{v}"
    );
    let mut without_error = v.clone();
    if let Some(item) = without_error["items"][1]["create"].as_object_mut() {
        item.remove("error");
    }
    assert_eq!(
        without_error["items"],
        json!([
            {"index": {"_index": idx, "_id": "1a", "result": "created", "status": 201}},
            {"create": {"_index": idx, "_id": "1a", "status": 409}},
            {"delete": {"_index": idx, "_id": "1zz", "result": "not_found", "status": 404}}
        ])
    );
    // Fields kept in part.
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk?filter_path=items.*.error.type,items.*._shards.failed"),
        &lines("2"),
    );
    assert_eq!(
        v,
        json!({"items": [
            {"index": {"_shards": {"failed": 0}}},
            {"create": {"error": {"type": "version_conflict_engine_exception"}}},
            {"delete": {"_shards": {"failed": 0}}}
        ]})
    );
    // Items with nothing named are left out, and then the array.
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk?filter_path=errors,items.*.error.type"),
        &lines("3"),
    );
    assert_eq!(
        v,
        json!({"errors": true, "items": [
            {"create": {"error": {"type": "version_conflict_engine_exception"}}}
        ]})
    );
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk?filter_path=errors,items.*.error"),
        &[json!({"index": {"_id": "4a"}}), json!({"name": "a"})],
    );
    assert_eq!(v, json!({"errors": false}));
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk?filter_path=-items,-took"),
        &lines("5"),
    );
    assert_eq!(v, json!({"errors": true}));
}

#[test]
fn filter_path_applies_to_every_answer_but_errors() {
    let t = target();
    let es = t.es();
    let idx = unique("filtered-search");
    strict_index(&es, &idx);
    es.bulk(
        &format!("/{idx}/_bulk?refresh=true"),
        &[
            json!({"index": {"_id": "x"}}),
            json!({"name": "x", "port": 22}),
        ],
    );
    let (status, v) = es.get(&format!(
        "/{idx}/_search?filter_path=hits.hits._id,hits.hits._source.port"
    ));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"hits": {"hits": [{"_id": "x", "_source": {"port": 22}}]}})
    );
    let (status, v) = es.get(&format!("/{idx}-missing/_search?filter_path=took"));
    assert_eq!(status, 404);
    assert_eq!(v["error"]["type"], "index_not_found_exception", "{v}");
}
