//! `_search`: queries, sorting and `search_after`, total hits, `_source` filtering and
//! aggregations, asserted on the returned documents and buckets.

use serde_json::{json, Value};

use crate::support::emulator::{emulator_for_faults, target, unique, Emulator, Es};

fn seed(es: &Es) -> String {
    let idx = unique("search");
    let (status, v) = es.put(&format!("/{idx}"), &json!({"settings": {"number_of_replicas": 0}, "mappings": {"dynamic": "strict", "properties": {
        "ip": {"type": "ip"}, "port": {"type": "long"}, "host": {"type": "keyword"}, "seen": {"type": "date"},
        "banner": {"type": "text"}, "up": {"type": "boolean"}, "owner": {"type": "keyword"}, "name": {"type": "keyword"}}}}));
    assert_eq!(status, 200, "{v}");
    let docs = [
        (
            "d1",
            json!({"name": "d1", "ip": "10.0.0.9", "port": 80, "host": "a.example", "seen": "2026-11-01T00:00:00.000Z", "banner": "Apache httpd", "up": true, "owner": "o1"}),
        ),
        (
            "d2",
            json!({"name": "d2", "ip": "10.0.0.12", "port": 443, "host": "a.example", "seen": "2026-11-15T00:00:00.000Z", "banner": "nginx server", "up": true}),
        ),
        (
            "d3",
            json!({"name": "d3", "ip": "10.0.1.1", "port": 22, "host": "b.example", "seen": "2026-10-31T23:59:59.999Z", "banner": "OpenSSH", "up": false, "owner": "o2"}),
        ),
        (
            "d4",
            json!({"name": "d4", "ip": "2001:db8::1", "port": 8080, "host": "c.example", "seen": "2026-12-01T00:00:00.000Z", "up": true, "owner": "o1"}),
        ),
        (
            "d5",
            json!({"name": "d5", "ip": "192.168.0.1", "port": 443, "host": "b.example", "seen": "2026-11-20T00:00:00.000Z", "banner": "nginx proxy", "owner": "o2"}),
        ),
    ];
    let mut lines = Vec::new();
    for (id, d) in docs {
        lines.push(json!({"index": {"_id": id}}));
        lines.push(d);
    }
    let (_, v) = es.bulk(&format!("/{idx}/_bulk?refresh=true"), &lines);
    assert_eq!(v["errors"], false, "{v}");
    idx
}

fn ids(es: &Es, idx: &str, body: Value) -> Vec<String> {
    let (status, v) = es.post(&format!("/{idx}/_search"), &body);
    assert_eq!(status, 200, "{body} → {v}");
    assert_eq!(v["timed_out"], false);
    assert_eq!(v["_shards"]["failed"], 0);
    let mut out: Vec<String> = v["hits"]["hits"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter_map(|x| x["_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if body.get("sort").is_none() {
        out.sort();
    }
    out
}

#[test]
fn queries_select_the_right_documents() {
    let t = target();
    let es = t.es();
    let idx = seed(&es);
    let q = |query: Value| ids(&es, &idx, json!({"query": query}));
    assert_eq!(q(json!({"match_all": {}})).len(), 5);
    // Numeric ids match their decimal text, as ES reads them.
    let numbered = unique("numeric-ids");
    es.put(
        &format!("/{numbered}/_doc/7?refresh=true"),
        &json!({"n": 7}),
    );
    assert_eq!(
        ids(&es, &numbered, json!({"query": {"ids": {"values": [7]}}})),
        ["7"]
    );
    assert_eq!(q(json!({"term": {"host": "a.example"}})), ["d1", "d2"]);
    assert_eq!(q(json!({"terms": {"port": [22, 8080]}})), ["d3", "d4"]);
    assert_eq!(
        q(json!({"range": {"port": {"gte": 80, "lt": 443}}})),
        ["d1"]
    );
    assert_eq!(
        q(json!({"range": {"seen": {"gte": "2026-11-01", "lt": "2026-12-01"}}})),
        ["d1", "d2", "d5"]
    );
    assert_eq!(q(json!({"term": {"ip": "10.0.0.0/24"}})), ["d1", "d2"]);
    assert_eq!(q(json!({"term": {"ip": "2001:db8::/32"}})), ["d4"]);
    assert_eq!(
        q(json!({"range": {"ip": {"gte": "10.0.0.10", "lte": "10.0.1.1"}}})),
        ["d2", "d3"]
    );
    assert_eq!(q(json!({"match": {"banner": "NGINX"}})), ["d2", "d5"]);
    assert_eq!(
        q(json!({"exists": {"field": "owner"}})),
        ["d1", "d3", "d4", "d5"]
    );
    assert_eq!(
        q(
            json!({"bool": {"filter": [{"term": {"up": true}}], "must_not": [{"term": {"port": 443}}]}})
        ),
        ["d1", "d4"]
    );
    assert_eq!(
        q(
            json!({"bool": {"should": [{"term": {"host": "a.example"}}, {"term": {"port": 443}}, {"term": {"owner": "o2"}}], "minimum_should_match": 2}})
        ),
        ["d2", "d5"]
    );
    assert_eq!(
        q(
            json!({"bool": {"must": [{"term": {"host": "b.example"}}], "should": [{"term": {"port": 9}}]}})
        ),
        ["d3", "d5"]
    );
    let (status, v) = es.post(
        &format!("/{idx}/_search"),
        &json!({"query": {"term": {"port": "not-a-number"}}}),
    );
    assert_eq!(status, 400, "{v}");
}

/// One `search_after` page of `(host, name)`-sorted ids, with the cursor of its last hit.
fn page_after(es: &Es, idx: &str, after: Option<&Value>, size: u64) -> (Vec<String>, Value, u64) {
    let mut body = json!({"size": size, "sort": ["host", "name"], "query": {"bool": {"filter": [{"exists": {"field": "host"}}]}}});
    if let Some(a) = after {
        body["search_after"] = a.clone();
    }
    let (status, v) = es.post(&format!("/{idx}/_search"), &body);
    assert_eq!(status, 200, "{v}");
    let hits = v["hits"]["hits"].as_array().cloned().unwrap_or_default();
    let ids = hits
        .iter()
        .filter_map(|h| h["_id"].as_str().map(str::to_owned))
        .collect();
    let cursor = hits.last().map_or(Value::Null, |h| h["sort"].clone());
    (
        ids,
        cursor,
        v["hits"]["total"]["value"].as_u64().unwrap_or(0),
    )
}

// A page walk must see what a refresh published between its pages (and nothing that is not
// refreshed yet), even though the emulator reuses the sorted result of earlier pages.
#[test]
fn search_after_walk_sees_refreshed_writes_between_pages() {
    let t = target();
    let es = t.es();
    let idx = seed(&es);
    let (first, cursor, total) = page_after(&es, &idx, None, 2);
    assert_eq!(first, ["d1", "d2"]);
    assert_eq!(total, 5);
    // Written but not refreshed: invisible to the next page.
    let (_, v) = es.bulk(
        &format!("/{idx}/_bulk"),
        &[
            json!({"index": {"_id": "d6"}}),
            json!({"name": "d6", "host": "b.example"}),
            json!({"delete": {"_id": "d5"}}),
        ],
    );
    assert_eq!(v["errors"], false, "{v}");
    let (second, _, total) = page_after(&es, &idx, Some(&cursor), 2);
    assert_eq!(second, ["d3", "d5"]);
    assert_eq!(total, 5);
    // Refreshed: the same page now has the new document and not the deleted one.
    let (status, _) = es.post(&format!("/{idx}/_refresh"), &json!({}));
    assert_eq!(status, 200);
    let (second, cursor, total) = page_after(&es, &idx, Some(&cursor), 2);
    assert_eq!(second, ["d3", "d6"]);
    assert_eq!(total, 5);
    let (third, _, _) = page_after(&es, &idx, Some(&cursor), 2);
    assert_eq!(third, ["d4"]);
    // A different query over the same index is not answered from the first one's result.
    let (status, v) = es.post(
        &format!("/{idx}/_search"),
        &json!({"size": 10, "sort": ["host", "name"], "query": {"term": {"host": "b.example"}}}),
    );
    assert_eq!(status, 200, "{v}");
    let got: Vec<&str> = v["hits"]["hits"]
        .as_array()
        .map(|h| h.iter().filter_map(|x| x["_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(got, ["d3", "d6"]);
}

#[test]
fn sorting_and_search_after_page_through_everything() {
    let t = target();
    let es = t.es();
    let idx = seed(&es);
    assert_eq!(
        ids(&es, &idx, json!({"sort": ["name"]})),
        ["d1", "d2", "d3", "d4", "d5"]
    );
    assert_eq!(
        ids(&es, &idx, json!({"sort": [{"port": "desc"}, "name"]})),
        ["d4", "d2", "d5", "d1", "d3"]
    );
    assert_eq!(
        ids(&es, &idx, json!({"sort": [{"seen": {"order": "asc"}}]})),
        ["d3", "d1", "d2", "d5", "d4"]
    );
    assert_eq!(
        ids(&es, &idx, json!({"sort": ["ip"]})),
        ["d1", "d2", "d3", "d5", "d4"]
    );
    assert_eq!(
        ids(
            &es,
            &idx,
            json!({"sort": [{"host": "desc"}, {"name": "asc"}]})
        ),
        ["d4", "d3", "d5", "d1", "d2"]
    );
    // Page by two with search_after on (host, name).
    let mut seen = Vec::new();
    let mut after: Option<Value> = None;
    loop {
        let mut body = json!({"size": 2, "sort": ["host", "name"], "track_total_hits": false});
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let (_, v) = es.post(&format!("/{idx}/_search"), &body);
        assert!(
            v["hits"].get("total").is_none(),
            "track_total_hits false omits total: {v}"
        );
        let hits = v["hits"]["hits"].as_array().cloned().unwrap_or_default();
        if hits.is_empty() {
            break;
        }
        for h in &hits {
            seen.push(h["_id"].as_str().unwrap_or("").to_owned());
        }
        after = hits.last().map(|h| h["sort"].clone());
    }
    assert_eq!(seen, ["d1", "d2", "d3", "d5", "d4"]);
    let (_, v) = es.post(
        &format!("/{idx}/_search"),
        &json!({"size": 1, "sort": ["seen"]}),
    );
    assert_eq!(
        v["hits"]["hits"][0]["sort"][0],
        json!(1_793_491_199_999u64),
        "dates sort as epoch millis"
    );
    let (_, v) = es.post(
        &format!("/{idx}/_search"),
        &json!({"size": 2, "from": 3, "sort": ["name"]}),
    );
    assert_eq!(v["hits"]["hits"][0]["_id"], "d4");
}

#[test]
fn total_hits_and_source_filtering() {
    let t = target();
    let es = t.es();
    let idx = seed(&es);
    let total = |body: Value| es.post(&format!("/{idx}/_search"), &body).1["hits"]["total"].clone();
    assert_eq!(total(json!({})), json!({"value": 5, "relation": "eq"}));
    assert_eq!(
        total(json!({"track_total_hits": true})),
        json!({"value": 5, "relation": "eq"})
    );
    assert_eq!(
        total(json!({"track_total_hits": 3})),
        json!({"value": 3, "relation": "gte"})
    );
    assert_eq!(total(json!({"track_total_hits": false})), Value::Null);
    let (_, v) = es.post(&format!("/{idx}/_search"), &json!({"size": 0}));
    assert_eq!(
        (v["hits"]["hits"].clone(), v["hits"]["max_score"].clone()),
        (json!([]), Value::Null)
    );
    let (_, v) = es.post(
        &format!("/{idx}/_search"),
        &json!({"query": {"ids": {"values": ["d1"]}}, "_source": ["host", "po*"]}),
    );
    assert_eq!(
        v["hits"]["hits"][0]["_source"],
        json!({"host": "a.example", "port": 80})
    );
    let (_, v) = es.post(
        &format!("/{idx}/_search"),
        &json!({"query": {"ids": {"values": ["d1"]}}, "_source": false}),
    );
    assert!(v["hits"]["hits"][0].get("_source").is_none());
    let (_, v) = es.post(
        &format!("/{idx}/_search?_source_excludes=banner,seen,up"),
        &json!({"query": {"ids": {"values": ["d1"]}}}),
    );
    assert_eq!(
        v["hits"]["hits"][0]["_source"],
        json!({"name": "d1", "host": "a.example", "port": 80, "ip": "10.0.0.9", "owner": "o1"})
    );
}

#[test]
fn aggregations_composite_pages_and_metrics() {
    let t = target();
    let es = t.es();
    let idx = seed(&es);
    let mut keys = Vec::new();
    let mut after: Option<Value> = None;
    let mut pages = 0;
    loop {
        let mut comp = json!({"size": 2, "sources": [{"host": {"terms": {"field": "host"}}}, {"port": {"terms": {"field": "port", "order": "desc"}}}]});
        if let Some(a) = &after {
            comp["after"] = a.clone();
        }
        let (status, v) = es.post(
            &format!("/{idx}/_search"),
            &json!({"size": 0, "track_total_hits": false, "aggs": {"pairs": {"composite": comp}}}),
        );
        assert_eq!(status, 200, "{v}");
        let agg = &v["aggregations"]["pairs"];
        let buckets = agg["buckets"].as_array().cloned().unwrap_or_default();
        if buckets.is_empty() {
            assert!(
                agg.get("after_key").is_none(),
                "no after_key on an empty page"
            );
            break;
        }
        assert_eq!(agg["after_key"], buckets[buckets.len() - 1]["key"]);
        keys.extend(buckets.iter().map(|b| {
            (
                b["key"]["host"].clone(),
                b["key"]["port"].clone(),
                b["doc_count"].clone(),
            )
        }));
        after = Some(agg["after_key"].clone());
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(
        keys,
        vec![
            (json!("a.example"), json!(443), json!(1)),
            (json!("a.example"), json!(80), json!(1)),
            (json!("b.example"), json!(443), json!(1)),
            (json!("b.example"), json!(22), json!(1)),
            (json!("c.example"), json!(8080), json!(1))
        ]
    );
    let (_, v) = es.post(&format!("/{idx}/_search"), &json!({"size": 0, "aggs": {
        "by_ip": {"composite": {"sources": [{"ip": {"terms": {"field": "ip"}}}], "size": 10}},
        "hosts": {"terms": {"field": "host"}, "aggs": {"distinct_ports": {"cardinality": {"field": "port"}}}},
        "owners": {"cardinality": {"field": "owner"}}, "with_owner": {"value_count": {"field": "owner"}},
        "first": {"min": {"field": "seen"}}, "top_port": {"max": {"field": "port"}}}}));
    let a = &v["aggregations"];
    let ips: Vec<Value> = a["by_ip"]["buckets"]
        .as_array()
        .map(|b| b.iter().map(|x| x["key"]["ip"].clone()).collect())
        .unwrap_or_default();
    assert_eq!(
        ips,
        vec![
            json!("10.0.0.9"),
            json!("10.0.0.12"),
            json!("10.0.1.1"),
            json!("192.168.0.1"),
            json!("2001:db8::1")
        ]
    );
    assert_eq!(a["hosts"]["buckets"][0]["key"], "a.example");
    assert_eq!(a["hosts"]["buckets"][0]["doc_count"], 2);
    assert_eq!(a["hosts"]["buckets"][0]["distinct_ports"]["value"], 2);
    assert_eq!(a["hosts"]["buckets"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        (
            a["owners"]["value"].clone(),
            a["with_owner"]["value"].clone()
        ),
        (json!(2), json!(4))
    );
    assert_eq!(a["first"]["value_as_string"], "2026-10-31T23:59:59.999Z");
    assert_eq!(a["top_port"]["value"], json!(8080.0));
}

#[test]
fn sorting_on_id_needs_id_field_data_as_in_es8() {
    let Some(emu) = emulator_for_faults(
        "sorting_on_id_needs_id_field_data_as_in_es8 (changes cluster settings)",
    ) else {
        return;
    };
    let es = emu.es();
    let idx = seed(&es);
    let (status, v) = es.post(&format!("/{idx}/_search"), &json!({"sort": ["_id"]}));
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "search_phase_execution_exception");
    assert_eq!(
        v["error"]["root_cause"][0]["type"],
        "illegal_argument_exception"
    );
    assert!(v["error"]["root_cause"][0]["reason"]
        .as_str()
        .unwrap_or("")
        .contains("indices.id_field_data.enabled"));
    let (status, _) = es.put(
        "/_cluster/settings",
        &json!({"transient": {"indices.id_field_data.enabled": true}}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        ids(&es, &idx, json!({"sort": [{"_id": "desc"}]})),
        ["d5", "d4", "d3", "d2", "d1"]
    );
    let (_, s) = es.get("/_cluster/settings");
    assert_eq!(s["transient"]["indices.id_field_data.enabled"], true);
    // The command-line flag sets the default instead.
    let lenient = Emulator::start_with(&["--id-field-data"]);
    let es = lenient.es();
    let idx = seed(&es);
    assert_eq!(
        ids(&es, &idx, json!({"sort": ["_id"]})),
        ["d1", "d2", "d3", "d4", "d5"]
    );
}

#[test]
fn sorting_or_aggregating_on_text_fails_as_in_es() {
    let t = target();
    let es = t.es();
    let idx = seed(&es);
    for body in [
        json!({"sort": ["banner"]}),
        json!({"size": 0, "aggs": {"b": {"terms": {"field": "banner"}}}}),
    ] {
        let (status, v) = es.post(&format!("/{idx}/_search"), &body);
        assert_eq!(status, 400, "{body} → {v}");
        assert_eq!(
            v["error"]["root_cause"][0]["type"],
            "illegal_argument_exception"
        );
        assert!(v["error"]["root_cause"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("Fielddata is disabled on [banner]"));
    }
}
