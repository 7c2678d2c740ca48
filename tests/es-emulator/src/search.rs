//! `_search` and `_count` over refreshed documents: index resolution, query, sort,
//! `search_after`, `from`/`size`, `track_total_hits`, `_source` filtering, aggregations.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::aggs::{self, DocRef};
use crate::app::{lock, App};
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::mapping::Mapping;
use crate::query::{self, Query};
use crate::query_exec::{compile, score};
use crate::ranked::Hit;
use crate::resolve::{resolve_read, IndicesOptions};
use crate::sort::{after_value, cmp_sort, parse_sort, set_sort_keys, SortSpec, SortValues};
use crate::source_filter::{SourceFilter, SourceView};
use crate::store::Store;
use crate::values::Key;

/// The search body keys the emulator implements. `timeout` holds by construction (a search
/// never stops early); `explain` and `profile` are taken when false.
const SEARCH_KEYS: [&str; 13] = [
    "query",
    "size",
    "from",
    "sort",
    "search_after",
    "track_total_hits",
    "_source",
    "aggs",
    "aggregations",
    "timeout",
    "track_scores",
    "version",
    "seq_no_primary_term",
];

fn shards_header(store: &Store, names: &[String]) -> Value {
    let total: u64 = names
        .iter()
        .filter_map(|n| store.indices.get(n))
        .map(|i| i.shards)
        .sum();
    json!({"total": total, "successful": total, "skipped": 0, "failed": 0})
}

/// Runs `q` over every refreshed document of `names`. The hits share what they need, so
/// the caller can release the store lock before ordering them.
fn matching(store: &Store, names: &[String], q: &Query) -> Result<Vec<Hit>, EsError> {
    let mut hits = Vec::new();
    for n in names {
        let Some(idx) = store.indices.get(n) else {
            continue;
        };
        let (index, mapping): (Arc<str>, Arc<Mapping>) =
            (Arc::from(idx.name.as_str()), Arc::new(idx.mapping.clone()));
        let c = compile(q, &idx.mapping)?;
        let candidates = crate::postings::candidates(&c, &crate::index_view::IndexView::of(idx));
        // Postings are exact for keyword terms: no need to re-check each candidate's source.
        let exact = candidates.as_ref().and(crate::postings::exact_score(&c));
        // In number order either way, as a real shard returns equal scores in doc order.
        let docs: Box<dyn Iterator<Item = &crate::postings::Published>> = match &candidates {
            Some(docnos) => Box::new(docnos.iter().filter_map(|&d| idx.searchable.get(d))),
            None => Box::new(idx.searchable.iter()),
        };
        for crate::postings::Published { id, doc } in docs {
            if let Some(score) = exact.or_else(|| score(&c, &idx.mapping, id, doc)) {
                hits.push(Hit {
                    index: index.clone(),
                    mapping: mapping.clone(),
                    id: id.clone(),
                    doc: doc.clone(),
                    score,
                    sort: Vec::new(),
                });
            }
        }
    }
    Ok(hits)
}

fn parse_int(
    v: Option<&Value>,
    param: Option<&str>,
    name: &str,
    default: i64,
) -> Result<i64, EsError> {
    if let Some(p) = param {
        return p.parse().map_err(|_| {
            EsError::bad_request(format!(
                "Failed to parse int parameter [{name}] with value [{p}]"
            ))
        });
    }
    match v {
        None => Ok(default),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| EsError::parsing(format!("[{name}] must be an integer"))),
    }
}

/// Typed `search_after` values, one per sort field.
fn search_after(
    store: &Store,
    names: &[String],
    sort: &[SortSpec],
    v: &Value,
) -> Result<Vec<Option<Key>>, EsError> {
    let Some(after) = v
        .as_array()
        .filter(|a| a.len() == sort.len() && !sort.is_empty())
    else {
        return Err(EsError::bad_request(
            "search_after has to have the same number of values as the sort fields",
        ));
    };
    Ok(after
        .iter()
        .zip(sort)
        .map(|(v, s)| {
            let ty = names
                .iter()
                .filter_map(|n| store.indices.get(n))
                .find_map(|i| i.mapping.resolve(&s.field).map(|r| r.field.ty));
            after_value(v, ty)
        })
        .collect())
}

/// What a sorted result set depends on: the query and sort as sent, and each index's
/// identity and refresh generation (searchable documents change only on a refresh).
fn ranked_key(store: &Store, names: &[String], body: &Map<String, Value>) -> String {
    let mut key = String::new();
    for n in names {
        match store.indices.get(n) {
            Some(i) => key.push_str(&format!("{n}/{}/{};", i.uuid, i.refresh_gen)),
            None => key.push_str(&format!("{n}/-;")),
        }
    }
    let text = |k: &str| body.get(k).map(Value::to_string).unwrap_or_default();
    format!("{key}|{}|{}", text("query"), text("sort"))
}

/// Orders the first `window` hits (by sort keys, or by score without a sort) and drops the
/// rest. Ties break as Elasticsearch merges the shards' hits: by the shard's place in the
/// search, shard number first and index name second (`ShardId.compareTo`, in
/// OSP:libs/core/src/main/java/org/opensearch/core/index/shard/ShardId.java, sorted by
/// `GroupShardsIterator.sortAndCreate`), then in the shard's document order (Lucene's
/// `TopDocs.merge`); with one shard per index, index name and then indexing order.
fn order(hits: &mut Vec<Hit>, sort: &[SortSpec], window: usize) {
    let cmp = |a: &Hit, b: &Hit| {
        let first = if sort.is_empty() {
            b.score.partial_cmp(&a.score).unwrap_or(Ordering::Equal)
        } else {
            cmp_sort(sort, &a.sort, &b.sort)
        };
        first
            .then(a.doc.shard.cmp(&b.doc.shard))
            .then(a.index.cmp(&b.index))
            .then(a.doc.seq_no.cmp(&b.doc.seq_no))
    };
    if window == 0 {
        hits.clear();
        return;
    }
    if hits.len() > window {
        hits.select_nth_unstable_by(window - 1, cmp);
        hits.truncate(window);
    }
    hits.sort_by(cmp);
}

pub fn search(app: &App, req: &Req, expr: &str) -> HandlerResult {
    let started = Instant::now();
    let body = req.json_body()?.unwrap_or_else(|| json!({}));
    let obj = body.as_object().cloned().unwrap_or_default();
    let off = |k: &str, v: &Value| matches!(k, "explain" | "profile") && *v == json!(false);
    if let Some((bad, v)) = obj
        .iter()
        .find(|(k, v)| !SEARCH_KEYS.contains(&k.as_str()) && !off(k, v))
    {
        return Err(EsError::parsing(format!(
            "Unknown key for a {} in [{bad}].",
            crate::strict::token(v)
        ))
        .with("line", 1)
        .with("col", 1));
    }
    let q = obj
        .get("query")
        .map(query::parse)
        .transpose()?
        .unwrap_or(Query::MatchAll);
    let size = parse_int(obj.get("size"), req.param("size"), "size", 10)?;
    let from = parse_int(obj.get("from"), req.param("from"), "from", 0)?;
    if size < 0 || from < 0 {
        return Err(EsError::bad_request(format!(
            "[{}] parameter cannot be negative",
            if size < 0 { "size" } else { "from" }
        )));
    }
    if from + size > 10_000 {
        return Err(EsError::bad_request(format!("Result window is too large, from + size must be less than or equal to: [10000] but was [{}].", from + size)));
    }
    let as_int = req.flag("rest_total_hits_as_int")?.unwrap_or(false);
    let tth = match (req.param("track_total_hits"), obj.get("track_total_hits")) {
        (Some("true"), _) | (None, Some(Value::Bool(true))) => Some(i64::MAX),
        (Some("false"), _) | (None, Some(Value::Bool(false))) => None,
        (Some(p), _) => Some(p.parse::<i64>().map_err(|_| {
            EsError::bad_request(format!("Failed to parse [track_total_hits] value [{p}]"))
        })?),
        (None, Some(Value::Number(n))) => Some(n.as_i64().unwrap_or(10_000)),
        (None, Some(other)) => {
            return Err(EsError::parsing(format!("bad track_total_hits [{other}]")))
        }
        (None, None) => Some(if as_int { i64::MAX } else { 10_000 }),
    };
    if let Some(t) = tth {
        if t < -1 {
            return Err(EsError::new(400, "action_request_validation_exception", format!("Validation Failed: 1: [track_total_hits] parameter must be positive or equals to -1, got {t};")));
        }
        if as_int && t != i64::MAX && t != -1 {
            return Err(EsError::new(400, "action_request_validation_exception", format!("Validation Failed: 1: [rest_total_hits_as_int] cannot be used if the tracking of total hits is not accurate, got {t};")));
        }
    }
    let tth = tth.map(|t| if t == -1 { i64::MAX } else { t });
    let sort = parse_sort(obj.get("sort"))?;
    let filter = SourceFilter::from_body(obj.get("_source")).with_params(
        req.param("_source"),
        req.param("_source_includes"),
        req.param("_source_excludes"),
    );
    let scored = sort.is_empty()
        || obj
            .get("track_scores")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let mut guard = app.lock_store();
    let names = resolve_read(&guard, expr, IndicesOptions::from_req(req)?)?;
    let aggs = obj.get("aggs").or_else(|| obj.get("aggregations"));
    crate::fielddata::check(app, &guard, &names, &sort, aggs)?;
    let after = match obj.get("search_after") {
        Some(v) => Some(search_after(&guard, &names, &sort, v)?),
        None => None,
    };
    // With `size: 0` (aggregation-only searches) there is no page to order.
    let paging = size > 0;
    let window = (from + size) as usize;
    // A page that needs no total, scores or aggregations, sorted on an address its query
    // bounds below, is walked in address order (see `walk`).
    let walked = match paging && tth.is_none() && !scored && aggs.is_none() {
        true => crate::walk::page(&mut guard, &names, &q, &sort, after.as_deref(), window)?,
        false => None,
    };
    let store = &*guard;
    let shards = shards_header(store, &names);
    // A sorted page walk (no aggregations) reuses the fully sorted hits of its earlier pages.
    let cache_key = (walked.is_none() && paging && !sort.is_empty() && aggs.is_none())
        .then(|| ranked_key(store, &names, &obj));
    let cached = cache_key.as_ref().and_then(|k| lock(&app.ranked).get(k));
    let fresh = match (&walked, &cached) {
        (None, None) => Some(matching(store, &names, &q)?),
        _ => None,
    };
    // Sort keys, ordering and rendering need no store: other requests go on meanwhile.
    drop(guard);
    let (ranked, total, aggregations) = match (walked, cached) {
        // No total is asked for (`track_total_hits: false`).
        (Some(mut hits), _) => {
            order(&mut hits, &sort, window);
            (Arc::new(hits), 0, None)
        }
        (None, Some(ranked)) => {
            let total = ranked.len() as i64;
            (ranked, total, None)
        }
        (None, None) => {
            let mut hits = fresh.unwrap_or_default();
            let total = hits.len() as i64;
            let aggregations = match aggs {
                Some(Value::Object(spec)) => {
                    let docs: Vec<DocRef> = hits
                        .iter()
                        .map(|h| DocRef {
                            mapping: &h.mapping,
                            source: &h.doc.source,
                            shard: (&h.index, h.doc.shard),
                        })
                        .collect();
                    Some(aggs::run(spec, &docs, true)?)
                }
                Some(_) => return Err(EsError::parsing("[aggs] must be an object")),
                None => None,
            };
            if paging {
                set_sort_keys(&sort, &mut hits);
                // Uncached, only the first `from + size` hits after `search_after` matter:
                // select them before sorting (O(matches) rather than O(matches · log)).
                let window = match (&cache_key, &after) {
                    (Some(_), _) => hits.len(),
                    (None, Some(after)) => {
                        hits.retain(|h| cmp_sort(&sort, &h.sort, after) == Ordering::Greater);
                        window
                    }
                    (None, None) => window,
                };
                order(&mut hits, &sort, window);
            } else {
                hits.clear();
            }
            let ranked = Arc::new(hits);
            if let Some(k) = cache_key {
                lock(&app.ranked).put(k, ranked.clone());
            }
            (ranked, total, aggregations)
        }
    };
    let start = after.as_ref().map_or(0, |after| {
        ranked.partition_point(|r| cmp_sort(&sort, &r.sort, after) != Ordering::Greater)
    });
    let hits = &ranked[start..];
    let version = obj.get("version").and_then(Value::as_bool) == Some(true);
    let seq_no = obj.get("seq_no_primary_term").and_then(Value::as_bool) == Some(true);
    let page: Vec<HitReply> = hits
        .iter()
        .skip(from as usize)
        .take(size as usize)
        .map(|h| HitReply {
            index: &h.index,
            id: &h.id,
            version: version.then_some(h.doc.version),
            seq_no: seq_no.then_some(h.doc.seq_no),
            primary_term: seq_no.then_some(1),
            score: scored.then_some(f64::from(h.score)),
            routing: h.doc.routing.as_deref(),
            source: filter.view_doc(&h.doc),
            sort: (!sort.is_empty()).then_some(SortValues {
                specs: &sort,
                keys: &h.sort,
            }),
        })
        .collect();
    let max_score = if scored && size > 0 {
        hits.iter().map(|h| h.score).reduce(f32::max).map(f64::from)
    } else {
        None
    };
    let total = match (tth, as_int) {
        (None, true) => Some(json!(-1)),
        (None, false) => None,
        (Some(_), true) => Some(json!(total)),
        (Some(limit), false) => {
            let (value, relation) = if total > limit {
                (limit, "gte")
            } else {
                (total, "eq")
            };
            Some(json!({"value": value, "relation": relation}))
        }
    };
    // Room for the page at a typical document's size.
    let capacity = 512 + page.len() * HIT_BYTES;
    Ok(Reply::json_sized(
        200,
        &SearchReply {
            took: started.elapsed().as_millis() as u64,
            timed_out: false,
            shards,
            hits: HitsReply {
                total,
                max_score,
                hits: page,
            },
            aggregations,
        },
        capacity,
    ))
}

/// A hit's expected share of a reply: a small document with its metadata and sort values.
const HIT_BYTES: usize = 512;

/// A search reply, in ES's key order; hits are written straight from the stored
/// documents (no JSON tree per hit).
#[derive(Serialize)]
struct SearchReply<'a> {
    took: u64,
    timed_out: bool,
    #[serde(rename = "_shards")]
    shards: Value,
    hits: HitsReply<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregations: Option<Value>,
}

#[derive(Serialize)]
struct HitsReply<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<Value>,
    max_score: Option<f64>,
    hits: Vec<HitReply<'a>>,
}

#[derive(Serialize)]
struct HitReply<'a> {
    #[serde(rename = "_index")]
    index: &'a str,
    #[serde(rename = "_id")]
    id: &'a str,
    #[serde(rename = "_version", skip_serializing_if = "Option::is_none")]
    version: Option<i64>,
    #[serde(rename = "_seq_no", skip_serializing_if = "Option::is_none")]
    seq_no: Option<i64>,
    #[serde(rename = "_primary_term", skip_serializing_if = "Option::is_none")]
    primary_term: Option<i64>,
    #[serde(rename = "_score")]
    score: Option<f64>,
    #[serde(rename = "_routing", skip_serializing_if = "Option::is_none")]
    routing: Option<&'a str>,
    #[serde(rename = "_source", skip_serializing_if = "Option::is_none")]
    source: Option<SourceView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sort: Option<SortValues<'a>>,
}

pub fn count(app: &App, req: &Req, expr: &str) -> HandlerResult {
    let body = req.json_body()?;
    let q = match &body {
        None => Query::MatchAll,
        Some(b) => {
            let obj = b.as_object().cloned().unwrap_or_default();
            if let Some(bad) = obj.keys().find(|k| k.as_str() != "query") {
                return Err(
                    EsError::parsing(format!("request does not support [{bad}]"))
                        .with("line", 1)
                        .with("col", 1),
                );
            }
            obj.get("query")
                .map(query::parse)
                .transpose()?
                .unwrap_or(Query::MatchAll)
        }
    };
    let guard = app.lock_store();
    let names = resolve_read(&guard, expr, IndicesOptions::from_req(req)?)?;
    let store = &*guard;
    let mut n = 0;
    for name in &names {
        let Some(idx) = store.indices.get(name) else {
            continue;
        };
        let c = compile(&q, &idx.mapping)?;
        let view = crate::index_view::IndexView::of(idx);
        // Postings index only searchable documents: an exact answer from them is the count.
        n += match crate::postings::exact_count(&c, &view) {
            Some(count) => count,
            None => matching(store, std::slice::from_ref(name), &q)?.len(),
        };
    }
    Ok(Reply::ok(
        &json!({"count": n, "_shards": shards_header(store, &names)}),
    ))
}
