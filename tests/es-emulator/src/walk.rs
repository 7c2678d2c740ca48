//! Sorted pages walked in sort order: a search sorted first (ascending) on an `ip` field
//! whose query bounds that field below — a `range`, an address or CIDR `term`, or a `bool`
//! of them — reads the field's points from the bound up, matches each document met, and
//! stops once the page is complete, instead of matching and sorting every document.
//!
//! This is for a scanstore page walk over an index its own pages write (a close run, a
//! deletion, a tags change): each page's writes and the refresh after them leave nothing
//! for `ranked`'s cache to reuse, so every page matched and fully sorted all of the owner's
//! documents (a million per page in the benchmark's close run). A shard visits what its
//! points index finds within the bound and keeps the best page; the walk visits less (it
//! stops at the page's end) because matching a document here costs microseconds, not
//! Lucene's nanoseconds. It starts where the query's own bound starts, never at
//! `search_after` (a collector applies that after matching): a page whose query carries
//! no bound from its cursor still walks over everything behind the cursor, as a shard
//! would visit it.
//!
//! The answer is exactly the general path's: a bounded query matches only documents with
//! an address at or above the bound, each document's sort value is its one address (a
//! field holding two addresses in any version refuses walks), and the documents that share
//! the last address taken are all read before the page is ordered by the full sort.

use std::sync::Arc;

use crate::error::EsError;
use crate::extract::FieldRef;
use crate::index_view::IndexView;
use crate::mapping::{Mapping, Ty};
use crate::postings;
use crate::query::Query;
use crate::query_exec::{compile, score, Compiled};
use crate::ranked::Hit;
use crate::sort::{cmp_sort, set_sort_keys, SortSpec};
use crate::store::Store;
use crate::values::Key;

/// The hits after `after` among the first `window` in sort order, from every index of
/// `names`; unordered. `None` when a walk does not apply (the caller matches and sorts),
/// or when one would read more entries than matching the query would check documents.
pub fn page(
    store: &mut Store,
    names: &[String],
    q: &Query,
    sort: &[SortSpec],
    after: Option<&[Option<Key>]>,
    window: usize,
) -> Result<Option<Vec<Hit>>, EsError> {
    let Some(first) = sort
        .first()
        .filter(|s| !s.desc && !s.field.starts_with('_'))
    else {
        return Ok(None);
    };
    // After a document without an address (sorted last) no address is beyond the cursor.
    let after_address = match after.map(|a| a.first()) {
        None => None,
        Some(Some(Some(Key::Ip(a)))) => Some(*a),
        Some(_) => return Ok(None),
    };
    let mut hits = Vec::new();
    for name in names {
        let Some(idx) = store.indices.get_mut(name) else {
            continue;
        };
        let Some(field) = idx
            .mapping
            .field_ref(&first.field)
            .filter(|f| f.ty == Ty::Ip)
        else {
            return Ok(None);
        };
        let c = compile(q, &idx.mapping)?;
        let Some(bound) = lower_bound(&c, &field) else {
            return Ok(None);
        };
        let view = IndexView::of(idx);
        // Matching would check the postings' candidates, or every document without them.
        let budget = postings::estimate(&c, &view)
            .unwrap_or(idx.searchable.numbers())
            .max(window);
        let (index, mapping): (Arc<str>, Arc<Mapping>) =
            (Arc::from(idx.name.as_str()), Arc::new(idx.mapping.clone()));
        idx.searchable.ensure_points(&first.field, &field);
        let searchable = &idx.searchable;
        let Some(points) = searchable.points(&first.field).filter(|p| p.walkable()) else {
            return Ok(None);
        };
        // Hits whose address lies beyond the cursor's: once `window` of them are taken,
        // the page ends with the last one's address.
        let (mut beyond, mut last) = (0, None);
        for (walked, (address, d)) in points.from(bound).enumerate() {
            if last.is_some_and(|l| address > l) {
                break;
            }
            if walked == budget {
                return Ok(None);
            }
            let Some(p) = searchable.get(d) else {
                continue;
            };
            let Some(score) = score(&c, &idx.mapping, &p.id, &p.doc) else {
                continue;
            };
            hits.push(Hit {
                index: index.clone(),
                mapping: mapping.clone(),
                id: p.id.clone(),
                doc: p.doc.clone(),
                score,
                sort: Vec::new(),
            });
            if after_address.map_or(true, |a| address > a) {
                beyond += 1;
                if beyond == window {
                    last = Some(address);
                }
            }
        }
    }
    set_sort_keys(sort, &mut hits);
    if let Some(after) = after {
        hits.retain(|h| cmp_sort(sort, &h.sort, after).is_gt());
    }
    Ok(Some(hits))
}

/// The least address in `field` that a match of `c` can have: every match has one (a
/// `range` or `term` on the field matches only documents holding an address within it).
fn lower_bound(c: &Compiled, field: &FieldRef) -> Option<u128> {
    let on_field = |f: &FieldRef| f.ty == Ty::Ip && f.path == field.path;
    match c {
        Compiled::Range {
            field: f,
            lo: Some((Key::Ip(a), inclusive)),
            ..
        } if on_field(f) => Some(if *inclusive { *a } else { a.saturating_add(1) }),
        Compiled::Keys {
            field: f,
            keys,
            cidrs,
            ..
        } if on_field(f) => keys
            .iter()
            .filter_map(|k| match k {
                Key::Ip(a) => Some(*a),
                _ => None,
            })
            .chain(cidrs.iter().map(|(lo, _)| *lo))
            .min(),
        Compiled::Bool {
            must,
            filter,
            should,
            msm,
            ..
        } => {
            // Every required clause holds: the highest of their bounds.
            let required = must
                .iter()
                .chain(filter.iter())
                .filter_map(|c| lower_bound(c, field))
                .max();
            // At least one `should` clause holds: the lowest, if each has one.
            let some_of = (*msm > 0 && !should.is_empty())
                .then(|| {
                    should
                        .iter()
                        .map(|c| lower_bound(c, field))
                        .collect::<Option<Vec<_>>>()
                })
                .flatten()
                .and_then(|bounds| bounds.into_iter().min());
            required.max(some_of)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use crate::app::{App, Limits};
    use crate::http::Req;
    use crate::router::route;

    fn call(app: &App, method: &str, url: &str, body: &str) -> Value {
        let reply = match route(app, &Req::new(method, url, body.as_bytes().to_vec())) {
            Ok(r) => r,
            Err(e) => crate::http::Reply::error(&e),
        };
        let v = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        assert!(
            (200..300).contains(&reply.status),
            "{method} {url} {body} → {v}"
        );
        v
    }

    /// One write: document `id` (re)written with an address from a small pool (ties are
    /// common; `None`: no address), or deleted.
    #[derive(Debug, Clone)]
    enum Write {
        Put {
            id: u8,
            address: Option<u8>,
            port: u16,
            owner: bool,
            closed: bool,
        },
        Delete(u8),
        Refresh,
    }

    const ADDRESSES: [&str; 8] = [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.9",
        "10.0.1.0",
        "10.1.0.0",
        "192.0.2.7",
        "2001:db8::1",
        "::1",
    ];

    fn arb_write() -> impl Strategy<Value = Write> {
        prop_oneof![
            6 => (0u8..40, proptest::option::weighted(0.9, 0u8..8), prop_oneof![Just(22u16), Just(80), Just(443)], any::<bool>(), proptest::bool::weighted(0.2))
                .prop_map(|(id, address, port, owner, closed)| Write::Put { id, address, port, owner, closed }),
            1 => (0u8..40).prop_map(Write::Delete),
            1 => Just(Write::Refresh),
        ]
    }

    fn apply(app: &App, index: &str, w: &Write) {
        match w {
            Write::Put {
                id,
                address,
                port,
                owner,
                closed,
            } => {
                let mut doc = json!({"port": port, "transport": "tcp", "owner": if *owner { "a" } else { "b" }});
                if let Some(a) = address {
                    doc["ip"] = json!(ADDRESSES[*a as usize]);
                }
                if *closed {
                    doc["state"] = json!("closed");
                }
                call(app, "PUT", &format!("/{index}/_doc/{id}"), &doc.to_string());
            }
            Write::Delete(id) => {
                let reply = route(
                    app,
                    &Req::new("DELETE", &format!("/{index}/_doc/{id}"), Vec::new()),
                );
                assert!(reply.is_ok());
            }
            Write::Refresh => {
                call(app, "POST", &format!("/{index}/_refresh"), "");
            }
        }
    }

    /// Pages of `filter` sorted on (ip, port), each page bounded by its cursor's address as
    /// scanstore bounds them, every page's documents then closed and refreshed as a close
    /// run's are. `walk`: as scanstore asks (no total, so pages are walked); otherwise with
    /// a total, which the general path answers.
    fn pages(app: &App, index: &str, filter: &[Value], size: usize, walk: bool) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after: Option<Value> = None;
        for _ in 0..50 {
            let mut clauses = filter.to_vec();
            if let Some(ip) = after.as_ref().and_then(|a| a[0].as_str()) {
                clauses.push(json!({"range": {"ip": {"gte": ip}}}));
            }
            let mut body = json!({"size": size, "query": {"bool": {"filter": clauses}},
                "sort": [{"ip": "asc"}, {"port": "asc"}], "track_total_hits": !walk});
            if let Some(a) = &after {
                body["search_after"] = a.clone();
            }
            let v = call(app, "POST", &format!("/{index}/_search"), &body.to_string());
            let hits = v["hits"]["hits"].as_array().cloned().unwrap_or_default();
            let page: Vec<Value> = hits.iter().map(|h| json!([h["_id"], h["sort"]])).collect();
            out.push(json!(page));
            let Some(last) = hits.last() else { break };
            after = Some(last["sort"].clone());
            let mut nd = String::new();
            for h in &hits {
                nd.push_str(&json!({"update": {"_index": index, "_id": h["_id"]}}).to_string());
                nd.push_str("\n{\"doc\": {\"state\": \"closed\"}}\n");
            }
            call(app, "POST", "/_bulk?refresh=true", &nd);
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn walked_pages_are_the_general_paths_pages(
            shards in 1u32..3,
            writes in proptest::collection::vec(arb_write(), 0..80),
            bound in proptest::option::of(0u8..8),
            cidr in proptest::option::of(prop_oneof![Just("10.0.0.0/24"), Just("10.0.0.0/8"), Just("::/0")]),
            open_only in any::<bool>(),
            size in 1usize..5,
        ) {
            let app = App::new(Limits::default(), false, None);
            for index in ["walked", "general"] {
                let body = json!({
                    "settings": {"number_of_shards": shards, "refresh_interval": "-1"},
                    "mappings": {"properties": {"ip": {"type": "ip"}, "port": {"type": "integer"},
                        "transport": {"type": "keyword"}, "owner": {"type": "keyword"}, "state": {"type": "keyword"}}}
                });
                call(&app, "PUT", &format!("/{index}"), &body.to_string());
                for w in &writes {
                    apply(&app, index, w);
                }
            }
            let mut filter = vec![json!({"term": {"owner": "a"}})];
            if let Some(b) = bound {
                filter.push(json!({"range": {"ip": {"gt": ADDRESSES[b as usize]}}}));
            }
            if let Some(c) = cidr {
                filter.push(json!({"bool": {"should": [{"term": {"ip": c}}], "minimum_should_match": 1}}));
            }
            if open_only {
                filter.push(json!({"bool": {"must_not": [{"exists": {"field": "state"}}]}}));
            }
            let walked = pages(&app, "walked", &filter, size, true);
            let general = pages(&app, "general", &filter, size, false);
            prop_assert_eq!(walked, general);
        }
    }

    #[test]
    fn walks_follow_documents_through_renumbering() {
        let app = App::new(Limits::default(), false, None);
        let body = json!({"settings": {"refresh_interval": "-1"},
            "mappings": {"properties": {"ip": {"type": "ip"}, "round": {"type": "integer"}}}});
        call(&app, "PUT", "/r", &body.to_string());
        let docs = 1000;
        let page = |walk: bool| {
            let body = json!({"size": 5, "sort": [{"ip": "asc"}], "track_total_hits": !walk,
                "query": {"range": {"ip": {"gte": "10.0.1.0"}}}, "_source": ["round"]});
            let v = call(&app, "POST", "/r/_search", &body.to_string());
            v["hits"]["hits"].clone()
        };
        // Enough rounds of rewriting every document that the dead numbers pass the live
        // ones plus the slack, so the index renumbers (the points built in the first round
        // move with it); each round moves every address up by one.
        let rounds = 70;
        for round in 0..rounds {
            let mut nd = String::new();
            for i in 0..docs {
                let a = i + round;
                nd.push_str(&format!("{{\"index\":{{\"_id\":\"{i}\"}}}}\n"));
                let doc = json!({"ip": format!("10.0.{}.{}", a / 256, a % 256), "round": round});
                nd.push_str(&format!("{doc}\n"));
            }
            call(&app, "POST", "/r/_bulk?refresh=true", &nd);
            let walked = page(true);
            assert_eq!(walked, page(false), "round {round}");
            // 10.0.1.0 is address 256: document 256 - round.
            assert_eq!(walked[0]["_id"], json!((256 - round).to_string()));
            assert_eq!(walked[0]["_source"]["round"], json!(round));
        }
    }

    #[test]
    fn a_document_with_two_addresses_stops_walks_and_keeps_its_least_as_sort_value() {
        let app = App::new(Limits::default(), false, None);
        let body = json!({"mappings": {"properties": {"ip": {"type": "ip"}}}});
        call(&app, "PUT", "/m", &body.to_string());
        let nd = [
            json!({"index": {"_id": "both"}}),
            json!({"ip": ["10.0.0.9", "10.0.0.1"]}),
            json!({"index": {"_id": "middle"}}),
            json!({"ip": "10.0.0.5"}),
        ];
        let nd: String = nd.iter().map(|l| format!("{l}\n")).collect();
        call(&app, "POST", "/m/_bulk?refresh=true", &nd);
        // A walk from 10.0.0.5 would meet `both` at .9, after `middle`; it sorts first.
        let body = json!({"size": 1, "sort": [{"ip": "asc"}], "track_total_hits": false,
            "query": {"range": {"ip": {"gte": "10.0.0.5"}}}});
        let v = call(&app, "POST", "/m/_search", &body.to_string());
        assert_eq!(v["hits"]["hits"][0]["_id"], "both");
        assert_eq!(v["hits"]["hits"][0]["sort"], json!(["10.0.0.1"]));
    }
}
