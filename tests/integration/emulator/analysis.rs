//! Text analysis as the standard analyzer does it (Unicode word boundaries, lower case):
//! `_analyze` gives the documented tokens, and a `match` query finds exactly what those
//! tokens allow — on the emulator and on a real cluster alike.

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
