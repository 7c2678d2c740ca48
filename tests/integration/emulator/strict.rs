//! Strict by default: a URL parameter, body key, query, aggregation option or
//! mapping parameter the emulator does not implement is a 400 naming it, never ignored;
//! destructive deletes take concrete names; `_routing` comes back when set.

use serde_json::{json, Value};

use crate::support::emulator::{emulator_for_faults, target, unique, Es};

/// The error type and reason of a call that must be refused with 400.
fn refused(es: &Es, method: &str, path: &str, body: Option<&Value>) -> (String, String) {
    let (status, v) = es.call(method, path, body);
    assert_eq!(status, 400, "{method} {path}: {v}");
    let text = |k: &str| v["error"][k].as_str().unwrap_or_default().to_owned();
    (text("type"), text("reason"))
}

fn strict_index(es: &Es) -> String {
    let name = unique("strict");
    let (status, v) = es.put(
        &format!("/{name}"),
        &json!({"settings": {"number_of_shards": 1, "number_of_replicas": 0},
            "mappings": {"properties": {"k": {"type": "keyword"}, "n": {"type": "long"},
                "at": {"type": "date"}}}}),
    );
    assert_eq!(status, 200, "{v}");
    name
}

#[test]
fn an_unrecognized_url_parameter_is_refused_before_anything_is_written() {
    let t = target();
    let es = t.es();
    let name = strict_index(&es);
    assert_eq!(
        refused(&es, "POST", &format!("/{name}/_search?foo=1"), None),
        (
            "illegal_argument_exception".into(),
            format!("request [/{name}/_search] contains unrecognized parameter: [foo]")
        )
    );
    // Refused before the handler: the document is not written.
    let (kind, reason) = refused(
        &es,
        "PUT",
        &format!("/{name}/_doc/1?refresh=true&bogus=x"),
        Some(&json!({"k": "a"})),
    );
    assert_eq!(kind, "illegal_argument_exception");
    assert!(
        reason.ends_with("contains unrecognized parameter: [bogus]"),
        "{reason}"
    );
    assert_eq!(es.refreshed_count(&name, json!({"match_all": {}})), 0);
    let (kind, reason) = refused(&es, "POST", &format!("/{name}/_count?sise=1&zzz=2"), None);
    assert_eq!(kind, "illegal_argument_exception");
    assert!(
        reason.ends_with("contains unrecognized parameters: [sise], [zzz]"),
        "{reason}"
    );
}

#[test]
fn url_parameters_es_takes_but_the_emulator_does_not_implement_are_refused() {
    let Some(emu) = emulator_for_faults("url_parameters_es_takes") else {
        return;
    };
    let es = emu.es();
    let name = strict_index(&es);
    for (method, path, param) in [
        (
            "GET",
            format!("/{name}/_search?docvalue_fields=k"),
            "docvalue_fields",
        ),
        (
            "GET",
            format!("/{name}/_search?stored_fields=k"),
            "stored_fields",
        ),
        ("GET", format!("/{name}/_search?q=k:a"), "q"),
        (
            "GET",
            format!("/{name}/_doc/1?stored_fields=k"),
            "stored_fields",
        ),
        (
            "GET",
            format!("/{name}/_search?expand_wildcards=open"),
            "expand_wildcards",
        ),
    ] {
        let (kind, reason) = refused(&es, method, &path, None);
        assert_eq!(kind, "illegal_argument_exception");
        assert!(
            reason.contains(&format!("contains unrecognized parameter: [{param}]")),
            "{path}: {reason}"
        );
    }
    let (status, _) = es.get(&format!("/{name}/_search?size=1&pretty&human=true"));
    assert_eq!(status, 200, "pretty and human only format the reply");
}

#[test]
fn search_body_keys_the_emulator_does_not_implement_are_refused() {
    let Some(emu) = emulator_for_faults("search_body_keys") else {
        return;
    };
    let es = emu.es();
    let name = strict_index(&es);
    let search = format!("/{name}/_search");
    for (body, key, token) in [
        (
            json!({"stored_fields": ["k"]}),
            "stored_fields",
            "START_ARRAY",
        ),
        (json!({"min_score": 1}), "min_score", "VALUE_NUMBER"),
        (json!({"explain": true}), "explain", "VALUE_BOOLEAN"),
        (
            json!({"docvalue_fields": ["k"]}),
            "docvalue_fields",
            "START_ARRAY",
        ),
        (json!({"highlight": {}}), "highlight", "START_OBJECT"),
    ] {
        assert_eq!(
            refused(&es, "POST", &search, Some(&body)),
            (
                "parsing_exception".into(),
                format!("Unknown key for a {token} in [{key}].")
            )
        );
    }
    let (status, _) = es.post(&search, &json!({"explain": false, "profile": false}));
    assert_eq!(status, 200, "false is what the emulator does");
    for (body, reason) in [
        (
            json!({"query": {"range": {"at": {"gte": "2024/01/01", "format": "yyyy/MM/dd"}}}}),
            "[range] query does not support [format]",
        ),
        (
            json!({"query": {"range": {"at": {"gte": "2024-01-01", "time_zone": "+01:00"}}}}),
            "[range] query does not support [time_zone]",
        ),
        (
            json!({"query": {"term": {"k": {"value": "a", "case_insensitive": true}}}}),
            "[term] query does not support [case_insensitive]",
        ),
        (
            json!({"query": {"match": {"k": {"query": "a", "fuzziness": 1}}}}),
            "[match] query does not support [fuzziness]",
        ),
    ] {
        let (kind, got) = refused(&es, "POST", &search, Some(&body));
        assert_eq!(kind, "parsing_exception");
        assert!(got.starts_with(reason), "{body}: {got}");
    }
    let (kind, reason) = refused(
        &es,
        "POST",
        &search,
        Some(&json!({"sort": [{"n": {"order": "asc", "unmapped_type": "long"}}]})),
    );
    assert_eq!(
        (kind.as_str(), reason.as_str()),
        (
            "x_content_parse_exception",
            "[field_sort] unknown field [unmapped_type]"
        )
    );
}

#[test]
fn aggregation_options_are_implemented_or_refused() {
    let Some(emu) = emulator_for_faults("aggregation_options") else {
        return;
    };
    let es = emu.es();
    let name = strict_index(&es);
    let (status, _) = es.bulk(
        &format!("/{name}/_bulk?refresh=true"),
        &[
            json!({"index": {"_id": "1"}}),
            json!({"k": "a", "n": 1}),
            json!({"index": {"_id": "2"}}),
            json!({"k": "b"}),
            json!({"index": {"_id": "3"}}),
            json!({"n": 5}),
        ],
    );
    assert_eq!(status, 200);
    let search = format!("/{name}/_search");
    for (opt, value) in [
        ("include", json!(["a"])),
        ("exclude", json!("a.*")),
        ("execution_hint", json!("map")),
    ] {
        let mut terms = json!({"field": "k"});
        terms[opt] = value;
        assert_eq!(
            refused(
                &es,
                "POST",
                &search,
                Some(&json!({"size": 0, "aggs": {"t": {"terms": terms}}}))
            ),
            (
                "x_content_parse_exception".into(),
                format!("[terms] unknown field [{opt}]")
            )
        );
    }
    let (status, v) = es.post(
        &search,
        &json!({"size": 0, "aggs": {
            "t": {"terms": {"field": "k", "missing": "none"}},
            "c": {"value_count": {"field": "n", "missing": 0}},
            "s": {"sum": {"field": "n", "missing": 10}}}}),
    );
    assert_eq!(status, 200, "{v}");
    let aggs = &v["aggregations"];
    assert_eq!(
        aggs["t"]["buckets"],
        json!([{"key": "a", "doc_count": 1}, {"key": "b", "doc_count": 1}, {"key": "none", "doc_count": 1}])
    );
    assert_eq!(aggs["c"]["value"], 3, "{v}");
    assert_eq!(aggs["s"]["value"], 16.0, "{v}");
    let (kind, reason) = refused(
        &es,
        "POST",
        &search,
        Some(&json!({"size": 0, "aggs": {"c": {"composite": {
            "sources": [{"k": {"terms": {"field": "k", "script": "x"}}}]}}}})),
    );
    assert_eq!(
        (kind.as_str(), reason.as_str()),
        (
            "x_content_parse_exception",
            "[terms] unknown field [script]"
        )
    );
}

#[test]
fn mapping_parameters_the_emulator_does_not_implement_are_refused() {
    let Some(emu) = emulator_for_faults("mapping_parameters") else {
        return;
    };
    let es = emu.es();
    for (field, reason) in [
        (
            json!({"type": "keyword", "null_value": "NULL"}),
            "unknown parameter [null_value] on mapper [f] of type [keyword]",
        ),
        (
            json!({"type": "date", "format": "yyyy/MM/dd"}),
            "Error parsing [format] on field [f]",
        ),
        (
            json!({"type": "long", "coerce": false}),
            "unknown parameter [coerce] on mapper [f] of type [long]",
        ),
    ] {
        let name = unique("mp");
        let (kind, got) = refused(
            &es,
            "PUT",
            &format!("/{name}"),
            Some(&json!({"mappings": {"properties": {"f": field}}})),
        );
        assert_eq!(kind, "mapper_parsing_exception");
        assert!(got.starts_with(reason), "{got}");
        assert_eq!(es.head(&format!("/{name}")), 404, "nothing is created");
    }
    let (status, v) = es.put(
        &format!("/{}", unique("mp")),
        &json!({"mappings": {"properties": {
            "d": {"type": "date", "format": "strict_date_optional_time||epoch_millis"},
            "k": {"type": "keyword", "index": false, "doc_values": true}}}}),
    );
    assert_eq!(status, 200, "{v}");
}

#[test]
fn wildcard_all_and_alias_deletes_are_refused_as_in_es8() {
    let t = target();
    let es = t.es();
    let name = strict_index(&es);
    let alias = unique("strict-alias");
    let (status, _) = es.put(&format!("/{name}/_alias/{alias}"), &json!({}));
    assert_eq!(status, 200);
    for expr in [format!("{alias}*"), "_all".to_owned()] {
        assert_eq!(
            refused(&es, "DELETE", &format!("/{expr}"), None),
            (
                "illegal_argument_exception".into(),
                "Wildcard expressions or all indices are not allowed".into()
            )
        );
    }
    let alias_msg = format!(
        "The provided expression [{alias}] matches an alias, specify the corresponding concrete indices instead."
    );
    assert_eq!(
        refused(&es, "DELETE", &format!("/{alias}"), None),
        ("illegal_argument_exception".into(), alias_msg.clone())
    );
    assert_eq!(
        refused(
            &es,
            "POST",
            "/_aliases",
            Some(&json!({"actions": [{"remove_index": {"index": alias}}]}))
        ),
        ("illegal_argument_exception".into(), alias_msg)
    );
    assert_eq!(
        es.head(&format!("/{name}")),
        200,
        "the index is still there"
    );
}

#[test]
fn routing_is_returned_and_an_alias_index_routing_wins() {
    let t = target();
    let es = t.es();
    let name = strict_index(&es);
    let alias = unique("routed");
    let (status, v) = es.post(
        "/_aliases",
        &json!({"actions": [{"add": {"index": name, "alias": alias,
            "routing": "r1", "index_routing": "r2"}}]}),
    );
    assert_eq!(status, 200, "{v}");
    let (_, got) = es.get(&format!("/{name}/_alias/{alias}"));
    assert_eq!(got[&name]["aliases"][&alias]["index_routing"], "r2");
    assert_eq!(got[&name]["aliases"][&alias]["search_routing"], "r1");
    let (status, _) = es.put(&format!("/{alias}/_doc/1"), &json!({"k": "a"}));
    assert_eq!(status, 201);
    let (status, _) = es.put(&format!("/{name}/_doc/2?routing=x"), &json!({"k": "b"}));
    assert_eq!(status, 201);
    let (_, d1) = es.get(&format!("/{name}/_doc/1"));
    assert_eq!(d1["_routing"], "r2", "{d1}");
    let (_, d2) = es.get(&format!("/{name}/_doc/2"));
    assert_eq!(d2["_routing"], "x", "{d2}");
    es.post(&format!("/{name}/_refresh"), &json!({}));
    let (_, s) = es.post(
        &format!("/{name}/_search"),
        &json!({"query": {"ids": {"values": [2]}}, "seq_no_primary_term": true}),
    );
    let hit = &s["hits"]["hits"][0];
    assert_eq!(hit["_routing"], "x", "{s}");
    assert_eq!(hit["_primary_term"], 1, "{s}");
    assert!(hit["_seq_no"].is_u64(), "{s}");
    let (kind, reason) = refused(
        &es,
        "PUT",
        &format!("/{alias}/_doc/3?routing=other"),
        Some(&json!({"k": "c"})),
    );
    assert_eq!(kind, "illegal_argument_exception");
    assert_eq!(
        reason,
        format!("Alias [{alias}] has index routing associated with it [r2], and was provided with routing value [other], rejecting operation")
    );
}

#[test]
fn alias_names_take_all_and_exclusions() {
    let t = target();
    let es = t.es();
    let name = strict_index(&es);
    let base = unique("al");
    for a in ["x", "y", "z"] {
        let (status, _) = es.put(&format!("/{name}/_alias/{base}-{a}"), &json!({}));
        assert_eq!(status, 200);
    }
    let (status, v) = es.get(&format!("/{name}/_alias/_all"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v[&name]["aliases"].as_object().map(|m| m.len()), Some(3));
    let (status, v) = es.get(&format!("/{name}/_alias/{base}-*,-{base}-y"));
    assert_eq!(status, 200, "{v}");
    let mut got: Vec<&String> = v[&name]["aliases"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    got.sort();
    assert_eq!(got, [&format!("{base}-x"), &format!("{base}-z")]);
    let (kind, reason) = refused(
        &es,
        "POST",
        &format!("/{name}/_search"),
        Some(&json!({"query": {"ids": {"values": [true]}}})),
    );
    assert_eq!(kind, "x_content_parse_exception", "{reason}");
}

#[test]
fn a_field_without_doc_values_is_searched_but_not_sorted_or_aggregated() {
    let t = target();
    let es = t.es();
    let name = unique("nodv");
    let (status, v) = es.put(
        &format!("/{name}"),
        &json!({"mappings": {"properties": {"k": {"type": "keyword", "doc_values": false}}}}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = es.put(&format!("/{name}/_doc/1?refresh=true"), &json!({"k": "a"}));
    assert!(status < 300, "{v}");
    let search = |body: Value| es.post(&format!("/{name}/_search"), &body);
    let (status, v) = search(json!({"query": {"term": {"k": "a"}}}));
    assert_eq!(
        (status, &v["hits"]["total"]["value"]),
        (200, &json!(1)),
        "{v}"
    );
    for body in [
        json!({"sort": [{"k": "asc"}]}),
        json!({"size": 0, "aggs": {"t": {"terms": {"field": "k"}}}}),
    ] {
        let (status, v) = search(body.clone());
        assert_eq!(status, 400, "{body}: {v}");
        let cause = v["error"]["caused_by"]["reason"]
            .as_str()
            .unwrap_or_default();
        assert!(cause.contains("Use doc values instead"), "{body}: {v}");
    }
    es.delete(&format!("/{name}"));
}

#[test]
fn root_mapping_options_the_emulator_does_not_implement_are_refused() {
    let Some(emu) = emulator_for_faults("root_mapping_options") else {
        return;
    };
    let es = emu.es();
    for (key, value) in [
        ("_source", json!({"excludes": ["secret"]})),
        ("_source", json!({"enabled": false})),
        ("_routing", json!({"required": true})),
        (
            "dynamic_templates",
            json!([{"s": {"match": "*", "mapping": {"type": "keyword"}}}]),
        ),
        ("date_detection", json!(false)),
        ("numeric_detection", json!(true)),
    ] {
        let name = unique("root");
        let (kind, reason) = refused(
            &es,
            "PUT",
            &format!("/{name}"),
            Some(&json!({"mappings": { key: value }})),
        );
        assert_eq!(kind, "mapper_parsing_exception", "{key}");
        assert!(reason.contains(key), "{key}: {reason}");
        assert_eq!(es.head(&format!("/{name}")), 404, "nothing is created");
    }
    // What the emulator does anyway is taken.
    let (status, v) = es.put(
        &format!("/{}", unique("root")),
        &json!({"mappings": {"_source": {"enabled": true}, "date_detection": true,
                             "_meta": {"owner": "scanstore"}}}),
    );
    assert_eq!(status, 200, "{v}");
}
