//! Text analysis as the built-in `standard` (Unicode word boundaries, lower case) and
//! `simple` (runs of letters, lower case) analyzers do it: `_analyze` gives the documented
//! tokens, a `match` query finds exactly what those tokens allow, and a multi-field added to
//! a live index indexes only what is written after — on the emulator and on a real cluster
//! alike.

use serde_json::{json, Value};

use crate::support::emulator::{target, unique};

fn tokens(v: &Value) -> Vec<&str> {
    v["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("no tokens: {v}"))
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect()
}

#[test]
fn analyze_gives_the_standard_analyzers_documented_tokens() {
    let t = target();
    let es = t.es();
    let (status, v) = es.post(
        "/_analyze",
        &json!({"analyzer": "standard", "text": "The 2 QUICK Brown-Foxes jumped over the lazy dog's bone."}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        tokens(&v),
        ["the", "2", "quick", "brown", "foxes", "jumped", "over", "the", "lazy", "dog's", "bone"]
    );
    assert_eq!(v["tokens"][1]["type"], "<NUM>");
    assert_eq!(v["tokens"][3]["start_offset"], 12);
    assert_eq!(v["tokens"][3]["end_offset"], 17);
    assert_eq!(v["tokens"][4]["position"], 4);
    let (_, v) = es.post(
        "/_analyze",
        &json!({"analyzer": "standard", "text": "SSH-2.0-OpenSSH_8.9p1 example.com 2.4.41"}),
    );
    assert_eq!(
        tokens(&v),
        ["ssh", "2.0", "openssh_8.9p1", "example.com", "2.4.41"]
    );
    let (_, v) = es.post(
        "/_analyze",
        &json!({"analyzer": "keyword", "text": "Brown-Foxes"}),
    );
    assert_eq!(tokens(&v), ["Brown-Foxes"]);
    // An analyzer that does not exist is refused.
    let (status, _) = es.post("/_analyze", &json!({"analyzer": "no-such", "text": "x"}));
    assert_eq!(status, 400);
}

#[test]
fn a_match_query_finds_only_what_the_tokens_allow() {
    let t = target();
    let es = t.es();
    let idx = unique("analysis");
    let (status, v) = es.put(
        &format!("/{idx}"),
        &json!({"mappings": {"dynamic": "strict", "properties": {"banner": {"type": "text"}, "n": {"type": "keyword"}}}}),
    );
    assert_eq!(status, 200, "{v}");
    for (id, banner) in [
        ("1", "the lazy dog's bone"),
        ("2", "SSH-2.0-OpenSSH_8.9p1 Ubuntu-3"),
    ] {
        let (status, v) = es.put(
            &format!("/{idx}/_doc/{id}?refresh=true"),
            &json!({"banner": banner, "n": id}),
        );
        assert!(status < 300, "{v}");
    }
    let found = |q: &str| -> Vec<String> {
        let (status, v) = es.post(
            &format!("/{idx}/_search"),
            &json!({"query": {"match": {"banner": q}}, "sort": [{"n": "asc"}]}),
        );
        assert_eq!(status, 200, "{v}");
        v["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(found("dog").is_empty(), "dog's is one token");
    assert_eq!(found("DOG'S"), ["1"]);
    assert!(found("openssh").is_empty(), "openssh_8.9p1 is one token");
    assert_eq!(found("OpenSSH_8.9p1"), ["2"]);
    assert_eq!(found("ssh"), ["2"]);
    let (_, v) = es.post(
        &format!("/{idx}/_analyze"),
        &json!({"field": "banner", "text": "Ubuntu-3"}),
    );
    assert_eq!(tokens(&v), ["ubuntu", "3"]);
    let (_, v) = es.post(
        &format!("/{idx}/_analyze"),
        &json!({"field": "n", "text": "Ubuntu-3"}),
    );
    assert_eq!(tokens(&v), ["Ubuntu-3"]);
    es.delete(&format!("/{idx}"));
}

/// Elasticsearch's reference for the simple analyzer, and Lucene's `TestAnalyzers.testSimple`.
#[test]
fn analyze_gives_the_simple_analyzers_documented_tokens() {
    let t = target();
    let es = t.es();
    let simple = |text: &str| -> Vec<String> {
        let (status, v) = es.post("/_analyze", &json!({"analyzer": "simple", "text": text}));
        assert_eq!(status, 200, "{v}");
        tokens(&v).into_iter().map(str::to_owned).collect()
    };
    assert_eq!(
        simple("The 2 QUICK Brown-Foxes jumped over the lazy dog's bone."),
        ["the", "quick", "brown", "foxes", "jumped", "over", "the", "lazy", "dog", "s", "bone"]
    );
    assert_eq!(simple("U.S.A."), ["u", "s", "a"]);
    assert_eq!(simple("B2B"), ["b", "b"]);
    assert_eq!(simple("C++"), ["c"]);
    assert_eq!(simple("SSH-2.0-OpenSSH_8.9p1"), ["ssh", "openssh", "p"]);
}

#[test]
fn a_multi_field_added_to_a_live_index_indexes_only_later_writes() {
    let t = target();
    let es = t.es();
    let idx = unique("analysis-added");
    let (status, v) = es.put(
        &format!("/{idx}"),
        &json!({"mappings": {"dynamic": "strict", "properties": {"banner": {"type": "text"}}}}),
    );
    assert_eq!(status, 200, "{v}");
    let write = |id: &str, banner: &str| {
        let (status, v) = es.put(
            &format!("/{idx}/_doc/{id}?refresh=true"),
            &json!({ "banner": banner }),
        );
        assert!(status < 300, "{v}");
    };
    write("old", "SSH-2.0-OpenSSH_8.9p1");
    let words = json!({"properties": {"banner": {"type": "text",
        "fields": {"words": {"type": "text", "analyzer": "simple"}}}}});
    let (status, v) = es.put(&format!("/{idx}/_mapping"), &words);
    assert_eq!(status, 200, "adding a multi-field is allowed: {v}");
    // Changing the analyzer of a mapped field is not.
    let (status, v) = es.put(
        &format!("/{idx}/_mapping"),
        &json!({"properties": {"banner": {"type": "text", "analyzer": "simple"}}}),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "illegal_argument_exception", "{v}");
    let reason = v["error"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("[analyzer]"), "{reason}");
    write("new", "SSH-2.0-OpenSSH_9.6");
    let found = |field: &str, q: &str| -> Vec<String> {
        let (status, v) = es.post(
            &format!("/{idx}/_search"),
            &json!({"query": {"match": {field: q}}}),
        );
        assert_eq!(status, 200, "{v}");
        let mut ids: Vec<String> = v["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        found("banner.words", "openssh"),
        ["new"],
        "the old document is not indexed there"
    );
    assert_eq!(found("banner", "ssh"), ["new", "old"]);
    write("old", "SSH-2.0-OpenSSH_8.9p1");
    assert_eq!(
        found("banner.words", "openssh"),
        ["new", "old"],
        "written again, it is"
    );
    let (_, v) = es.post(
        &format!("/{idx}/_analyze"),
        &json!({"field": "banner.words", "text": "OpenSSH_8.9p1"}),
    );
    assert_eq!(tokens(&v), ["openssh", "p"]);
    es.delete(&format!("/{idx}"));
}

/// The emulator analyses only with what it implements; anything else is refused, never
/// analysed some other way. (A real cluster has these analyzers, so this is emulator-only.)
#[test]
fn analysis_the_emulator_lacks_is_refused() {
    let Some(emu) =
        crate::support::emulator::emulator_for_faults("analysis_the_emulator_lacks_is_refused")
    else {
        return;
    };
    let es = emu.es();
    let (status, v) = es.put(
        "/lacks-a",
        &json!({"mappings": {"properties": {"b": {"type": "text", "analyzer": "whitespace"}}}}),
    );
    assert_eq!(
        (status, v["error"]["type"].as_str()),
        (400, Some("mapper_parsing_exception")),
        "{v}"
    );
    let (status, v) = es.put(
        "/lacks-b",
        &json!({"mappings": {"properties": {"b": {"type": "keyword", "analyzer": "simple"}}}}),
    );
    assert_eq!(status, 400, "an analyzer on a keyword field: {v}");
    let (status, v) = es.put(
        "/lacks-c",
        &json!({"settings": {"analysis": {"analyzer": {"mine": {"type": "custom", "tokenizer": "standard"}}}}}),
    );
    assert_eq!(status, 400, "custom analysis: {v}");
    assert!(
        v["error"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("index.analysis"),
        "{v}"
    );
    let (status, _) = es.post("/_analyze", &json!({"analyzer": "whitespace", "text": "x"}));
    assert_eq!(status, 400);
    assert_eq!(es.head("/lacks-a"), 404, "nothing was created");
}
