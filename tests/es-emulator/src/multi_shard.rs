//! Tests: an index of several shards answers as a cluster's does from outside. `_shards`
//! counts every shard (and copy), totals, sorts, `search_after` and composite pages are
//! those of one shard, `_seq_no`s count per shard, a write error names its document's shard,
//! equal sort values come shard by shard, and `PUT _settings` changes what may change.

use serde_json::{json, Value};

use crate::app::{App, Limits};
use crate::http::Req;
use crate::router::route;
use crate::routing;

fn call(app: &App, method: &str, url: &str, body: &str) -> (u16, Value) {
    let reply = match route(app, &Req::new(method, url, body.as_bytes().to_vec())) {
        Ok(r) => r,
        Err(e) => crate::http::Reply::error(&e),
    };
    let v = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    (reply.status, v)
}

fn create(app: &App, name: &str, shards: u32, replicas: u32) {
    let body = json!({
        "settings": {"number_of_shards": shards, "number_of_replicas": replicas},
        "mappings": {"properties": {"ip": {"type": "ip"}, "port": {"type": "integer"}, "team": {"type": "keyword"}}}
    });
    let (status, v) = call(app, "PUT", &format!("/{name}"), &body.to_string());
    assert_eq!(status, 200, "{v}");
}

/// Endpoint documents, ids as scanstore's global asset ids; every tenth shares a port.
fn fill(app: &App, name: &str, n: usize) -> Value {
    let mut nd = String::new();
    for i in 0..n {
        let ip = format!("10.0.{}.{}", i / 200, i % 200);
        let port = if i % 10 == 0 { 443 } else { 1000 + i };
        nd.push_str(
            &json!({"index": {"_index": name, "_id": format!("{ip}-tcp-{port}")}}).to_string(),
        );
        nd.push('\n');
        nd.push_str(&json!({"ip": ip, "port": port, "team": format!("t{}", i % 7)}).to_string());
        nd.push('\n');
    }
    let (status, v) = call(app, "POST", "/_bulk?refresh=true", &nd);
    assert_eq!((status, &v["errors"]), (200, &json!(false)), "{v}");
    v
}

fn ids(v: &Value) -> Vec<String> {
    v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn shards_headers_count_every_shard_and_copy() {
    let app = App::new(Limits::default(), false, None);
    create(&app, "many", 3, 0);
    create(&app, "one", 1, 1);
    let bulk = fill(&app, "many", 50);
    // A write is acknowledged by its own shard's copies only.
    assert_eq!(
        bulk["items"][0]["index"]["_shards"],
        json!({"total": 1, "successful": 1, "failed": 0})
    );
    fill(&app, "one", 50);
    let (_, s) = call(&app, "POST", "/many/_search", "{}");
    assert_eq!(
        s["_shards"],
        json!({"total": 3, "successful": 3, "skipped": 0, "failed": 0})
    );
    let (_, c) = call(&app, "POST", "/many,one/_count", "");
    assert_eq!(
        (c["count"].as_u64(), &c["_shards"]["total"]),
        (Some(100), &json!(4))
    );
    let (_, r) = call(&app, "POST", "/many,one/_refresh", "");
    // Primaries × (1 + replicas), the unassignable replica of `one` not successful.
    assert_eq!(
        r["_shards"],
        json!({"total": 5, "successful": 4, "failed": 0})
    );
    let (_, g) = call(&app, "GET", "/many/_settings", "");
    assert_eq!(g["many"]["settings"]["index"]["number_of_shards"], "3");
}

#[test]
fn totals_sorted_pages_and_composite_pages_are_those_of_one_shard() {
    let app = App::new(Limits::default(), false, None);
    create(&app, "one", 1, 0);
    create(&app, "five", 5, 0);
    fill(&app, "one", 600);
    fill(&app, "five", 600);
    let pages = |index: &str| {
        let mut seen = Vec::new();
        let mut after: Option<Value> = None;
        loop {
            let mut body = json!({"size": 70, "sort": [{"port": "asc"}, {"ip": "asc"}], "track_total_hits": true});
            if let Some(a) = after.take() {
                body["search_after"] = a;
            }
            let (status, v) = call(
                &app,
                "POST",
                &format!("/{index}/_search"),
                &body.to_string(),
            );
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["hits"]["total"], json!({"value": 600, "relation": "eq"}));
            let page = ids(&v);
            if page.is_empty() {
                return seen;
            }
            after = v["hits"]["hits"]
                .as_array()
                .unwrap()
                .last()
                .map(|h| h["sort"].clone());
            seen.extend(page);
        }
    };
    let one = pages("one");
    assert_eq!(one.len(), 600);
    assert_eq!(pages("five"), one);
    let buckets = |index: &str| {
        let mut all = Vec::new();
        let mut after: Option<Value> = None;
        loop {
            let mut composite = json!({"size": 4, "sources": [{"team": {"terms": {"field": "team"}}}, {"port": {"terms": {"field": "port"}}}]});
            if let Some(a) = after.take() {
                composite["after"] = a;
            }
            let body = json!({"size": 0, "aggs": {"c": {"composite": composite}}});
            let (_, v) = call(
                &app,
                "POST",
                &format!("/{index}/_search"),
                &body.to_string(),
            );
            let c = &v["aggregations"]["c"];
            let page = c["buckets"].as_array().unwrap().clone();
            if page.is_empty() {
                assert!(c.get("after_key").is_none());
                return all;
            }
            after = Some(c["after_key"].clone());
            all.extend(page);
        }
    };
    let one = buckets("one");
    assert!(one.len() > 500, "{}", one.len());
    assert_eq!(buckets("five"), one);
}

#[test]
fn seq_nos_count_per_shard_and_a_conflict_names_the_documents_shard() {
    let app = App::new(Limits::default(), false, None);
    create(&app, "many", 3, 0);
    let bulk = fill(&app, "many", 90);
    let mut per_shard: Vec<Vec<i64>> = vec![Vec::new(); 3];
    for item in bulk["items"].as_array().unwrap() {
        let i = &item["index"];
        let shard = routing::shard(
            i["_id"].as_str().unwrap(),
            3,
            routing::default_routing_shards(3),
        );
        per_shard[shard as usize].push(i["_seq_no"].as_i64().unwrap());
    }
    for (shard, seqs) in per_shard.iter().enumerate() {
        assert!(seqs.len() > 10, "shard {shard}: {seqs:?}");
        assert_eq!(
            *seqs,
            (0..seqs.len() as i64).collect::<Vec<_>>(),
            "shard {shard}"
        );
    }
    let id = bulk["items"][5]["index"]["_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, v) = call(
        &app,
        "PUT",
        &format!("/many/_create/{id}"),
        r#"{"port": 1}"#,
    );
    let expected = routing::shard(&id, 3, routing::default_routing_shards(3)).to_string();
    assert_eq!(
        (status, &v["error"]["shard"]),
        (409, &json!(expected)),
        "{v}"
    );
    // A custom routing value picks the shard instead of the id.
    let (_, w) = call(&app, "PUT", "/many/_doc/x?routing=r7", r#"{"port": 2}"#);
    let r7 = routing::shard("r7", 3, routing::default_routing_shards(3)) as usize;
    assert_eq!(w["_seq_no"].as_i64(), Some(per_shard[r7].len() as i64));
}

#[test]
fn equal_sort_values_come_shard_by_shard() {
    let app = App::new(Limits::default(), false, None);
    create(&app, "many", 4, 0);
    fill(&app, "many", 200);
    let body = json!({"size": 20, "sort": [{"port": "asc"}]});
    let (_, v) = call(&app, "POST", "/many/_search", &body.to_string());
    // The 20 documents on port 443 (every tenth), in shard order, then indexing order.
    let shards: Vec<u32> = ids(&v)
        .iter()
        .map(|id| routing::shard(id, 4, routing::default_routing_shards(4)))
        .collect();
    assert!(shards.windows(2).all(|w| w[0] <= w[1]), "{shards:?}");
    assert!(shards.first() < shards.last(), "{shards:?}");
}

#[test]
fn dynamic_settings_change_on_a_live_index_and_the_shard_count_does_not() {
    let app = App::new(Limits::default(), false, None);
    create(&app, "many", 3, 1);
    let settings =
        |app: &App| call(app, "GET", "/many/_settings", "").1["many"]["settings"]["index"].clone();
    let (status, _) = call(
        &app,
        "PUT",
        "/many/_settings",
        r#"{"index": {"number_of_replicas": 2, "refresh_interval": "30s"}}"#,
    );
    assert_eq!(status, 200);
    let s = settings(&app);
    assert_eq!(
        (&s["number_of_replicas"], &s["refresh_interval"]),
        (&json!("2"), &json!("30s"))
    );
    let (_, r) = call(&app, "POST", "/many/_refresh", "");
    assert_eq!(r["_shards"]["total"], 9);
    // `null` restores the default; a `settings` wrapper is accepted.
    let (status, _) = call(
        &app,
        "PUT",
        "/many/_settings",
        r#"{"settings": {"index.refresh_interval": null}}"#,
    );
    assert_eq!(status, 200);
    assert!(settings(&app).get("refresh_interval").is_none());
    let (status, e) = call(
        &app,
        "PUT",
        "/many/_settings",
        r#"{"index": {"number_of_shards": 6}}"#,
    );
    let uuid = settings(&app)["uuid"].as_str().unwrap().to_owned();
    assert_eq!(status, 400);
    assert_eq!(
        e["error"]["reason"],
        format!("Can't update non dynamic settings [[index.number_of_shards]] for open indices [[many/{uuid}]]")
    );
    assert_eq!(settings(&app)["number_of_shards"], "3");
    assert_eq!(call(&app, "PUT", "/many/_settings", "{}").0, 400);
    assert_eq!(
        call(
            &app,
            "PUT",
            "/none-*/_settings",
            r#"{"number_of_replicas": 0}"#
        )
        .0,
        404
    );
    assert_eq!(
        call(
            &app,
            "PUT",
            "/many/_settings",
            r#"{"number_of_replicas": "x"}"#
        )
        .0,
        400
    );
}

#[test]
fn an_index_has_1_to_1024_shards() {
    let app = App::new(Limits::default(), false, None);
    let make = |name: &str, n: u32| {
        call(
            &app,
            "PUT",
            &format!("/{name}"),
            &json!({"settings": {"number_of_shards": n}}).to_string(),
        )
    };
    assert_eq!(make("a", 1024).0, 200);
    let (status, e) = make("b", 1025);
    assert_eq!(status, 400);
    assert!(
        e["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("must be <= 1024"),
        "{e}"
    );
    assert_eq!(make("c", 0).0, 400);
}
