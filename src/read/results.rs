//! `GET /api/v1/tasks/{id}/results`: the execution endpoint projection
//! (`<prefix>-execution-endpoints`) of a task, grouped by IP.
//!
//! A page is a composite aggregation on `ip` (`size` IPs, resumable from the cursor, which
//! is the last IP of the previous page), then the endpoints of exactly those IPs, fetched
//! with `terms` on the page's IPs in chunks sorted on a unique key (ip, transport, port,
//! execution_id) with `search_after`, until every endpoint the buckets counted is read.
//! The first page also carries the exact endpoint total (`track_total_hits: true`) and the
//! exact IP count (a counting pass of composite pages, capped at [`MAX_COUNT_PAGES`]);
//! later pages turn `track_total_hits` off. A page stops early after the IP that takes it
//! past [`MAX_PAGE_ENDPOINTS`] endpoints, so a page is bounded however many ports an IP has.
//!
//! By default the results are those of the task's succeeded executions, which are complete
//! as soon as each execution succeeded (no wait for asset publication); `complete` says no
//! execution of the task is still queued or running. `execution_id` selects one execution
//! of the task, whatever its status (`complete` then says whether it succeeded).

use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::{json, Value};

use crate::upload::details::with_detail_fields;
use uuid::Uuid;

use super::error::ReadError;
use super::{endpoint_json, params, search, tasks, with_owner, SEARCH_TIMEOUT};
use crate::app::App;
use crate::db::Queries;
use crate::es::index;
use crate::es::EsError;
use crate::http::request::{Reply, Req};

pub const DEFAULT_SIZE: usize = 100;
/// IPs per page.
pub const MAX_SIZE: usize = 500;
/// A page ends after the IP that takes it past this many endpoints.
pub const MAX_PAGE_ENDPOINTS: u64 = 10_000;
/// Endpoints per fetch request.
const FETCH_CHUNK: u64 = 2_000;
/// Buckets per request of the IP counting pass, and the most such requests (so the IP
/// count is exact up to 2,000,000 IPs; above, it says `gte`).
const COUNT_PAGE: usize = 10_000;
pub const MAX_COUNT_PAGES: usize = 200;
/// Most succeeded executions of one task the default scope covers.
const MAX_EXECUTIONS: i64 = 10_000;

const ENDPOINT_FIELDS: [&str; 17] = with_detail_fields![
    "ip", "port", "transport", "service", "product", "version", "banner";
    "observed_at", "execution_id", "tags"
];

/// What PostgreSQL says the results cover.
struct Scope {
    executions: Vec<Uuid>,
    complete: bool,
}

// Index executions_task_idx (task_id, created_at).
const SUCCEEDED: &str = "
    SELECT id FROM executions WHERE task_id = $1 AND status = 'succeeded'
     ORDER BY created_at, id LIMIT $2";
// Failed executions are final and simply not covered; queued or running ones may add more.
const UNFINISHED: &str = "
    SELECT count(*) FROM executions WHERE task_id = $1 AND status IN ('queued', 'running')";
const ONE: &str = "SELECT status FROM executions WHERE id = $1 AND task_id = $2";

/// `GET /api/v1/tasks/{id}/results?size=&after=&execution_id=`
pub fn list(app: &App, req: &Req, task: &str) -> Result<Reply, ReadError> {
    let task = params::path_id(task);
    let size = params::size(req, DEFAULT_SIZE, MAX_SIZE)?;
    let after = match params::cursor(req, "results", 1)? {
        None => None,
        Some(v) => Some(
            v[0].as_str()
                .and_then(|s| s.parse::<IpAddr>().ok())
                .ok_or_else(|| {
                    ReadError::invalid("bad_cursor", "after is not a cursor of this listing")
                })?,
        ),
    };
    let execution = params::uuid_param(req, "execution_id")?;
    let (owner, task, scope) = with_owner(app, req, |tx, owner| {
        let task = task?;
        tasks::owned_kind(tx, task, owner.id)?;
        let scope = match execution {
            Some(e) => {
                let status: String = tx
                    .query_opt(ONE, &[&e, &task])?
                    .ok_or(ReadError::NotFound)?
                    .get(0);
                Scope {
                    executions: vec![e],
                    complete: status == "succeeded",
                }
            }
            None => {
                let rows = tx.query(SUCCEEDED, &[&task, &(MAX_EXECUTIONS + 1)])?;
                if rows.len() as i64 > MAX_EXECUTIONS {
                    return Err(ReadError::invalid(
                        "too_many_executions",
                        format!("the task has more than {MAX_EXECUTIONS} succeeded executions; select one with execution_id"),
                    ));
                }
                let unfinished: i64 = tx.query_one(UNFINISHED, &[&task])?.get(0);
                Scope {
                    executions: rows.iter().map(|r| r.get(0)).collect(),
                    complete: unfinished == 0,
                }
            }
        };
        Ok((owner, task, scope))
    })?;
    let first = after.is_none();
    if scope.executions.is_empty() {
        return Ok(Reply::ok(json!({
            "task_id": task, "complete": scope.complete, "ips": [],
            "totals": if first { totals(0, 0, false) } else { Value::Null },
            "next": null,
        })));
    }
    let idx = index::execution_endpoints(&app.config.elasticsearch.index_prefix);
    let filter = json!([
        {"term": {"task_id": task.to_string()}},
        {"term": {"owner_id": owner.id.to_string()}},
        {"terms": {"execution_id": scope.executions.iter().map(Uuid::to_string).collect::<Vec<_>>()}},
    ]);
    let query = json!({"bool": {"filter": filter}});

    let mut composite = json!({"size": size, "sources": [{"ip": {"terms": {"field": "ip"}}}]});
    if let Some(ip) = after {
        composite["after"] = json!({"ip": ip.to_string()});
    }
    let body = json!({
        "size": 0, "timeout": SEARCH_TIMEOUT, "track_total_hits": first, "query": query,
        "aggs": {"ips": {"composite": composite}},
    });
    let page = search(app, &idx, &body)?;
    let buckets = buckets(&page)?;
    let totals = if first {
        let endpoints = &page["hits"]["total"];
        if endpoints["relation"] != "eq" {
            return Err(bad("endpoint total is not exact"));
        }
        let endpoints = endpoints["value"]
            .as_u64()
            .ok_or_else(|| bad("missing hits.total"))?;
        let (ips, capped) = count_ips(app, &idx, &query)?;
        totals(endpoints, ips, capped)
    } else {
        Value::Null
    };

    // Bound the page by endpoints: keep IPs until the one that passes the limit.
    let mut taken: Vec<(IpAddr, u64)> = Vec::new();
    let mut sum = 0;
    for b in &buckets {
        if sum >= MAX_PAGE_ENDPOINTS {
            break;
        }
        sum += b.1;
        taken.push(*b);
    }
    let more = taken.len() < buckets.len() || buckets.len() == size;
    let endpoints = fetch(app, &idx, &filter, &taken, sum)?;
    let mut ips: Vec<Value> = Vec::with_capacity(taken.len());
    let position: HashMap<IpAddr, usize> = taken
        .iter()
        .enumerate()
        .map(|(i, (ip, _))| (*ip, i))
        .collect();
    let mut grouped: Vec<Vec<Value>> = vec![Vec::new(); taken.len()];
    for e in endpoints {
        let ip = e["ip"].as_str().and_then(|s| s.parse::<IpAddr>().ok());
        if let Some(i) = ip.and_then(|ip| position.get(&ip)) {
            grouped[*i].push(e);
        }
    }
    for ((ip, count), endpoints) in taken.iter().zip(grouped) {
        ips.push(json!({"ip": ip.to_string(), "endpoint_count": count, "endpoints": endpoints}));
    }
    let next = match (more, taken.last()) {
        (true, Some((ip, _))) => Some(params::encode_cursor("results", &[json!(ip.to_string())])),
        _ => None,
    };
    Ok(Reply::ok(json!({
        "task_id": task, "complete": scope.complete, "ips": ips, "totals": totals, "next": next,
    })))
}

fn totals(endpoints: u64, ips: u64, capped: bool) -> Value {
    json!({
        "endpoints": {"value": endpoints, "relation": "eq"},
        "ips": {"value": ips, "relation": if capped { "gte" } else { "eq" }},
    })
}

fn bad(what: &str) -> ReadError {
    ReadError::Es(EsError::BadResponse(what.to_string()))
}

/// `(ip, doc_count)` of the composite buckets, in order.
fn buckets(page: &Value) -> Result<Vec<(IpAddr, u64)>, ReadError> {
    let list = page["aggregations"]["ips"]["buckets"]
        .as_array()
        .ok_or_else(|| bad("missing composite buckets"))?;
    list.iter()
        .map(|b| {
            let ip = b["key"]["ip"].as_str().and_then(|s| s.parse().ok());
            match (ip, b["doc_count"].as_u64()) {
                (Some(ip), Some(n)) => Ok((ip, n)),
                _ => Err(bad("malformed composite bucket")),
            }
        })
        .collect()
}

/// The exact number of distinct IPs (composite pages, no sub-aggregations); the flag says
/// the cap was reached and the count is a lower bound.
fn count_ips(app: &App, idx: &str, query: &Value) -> Result<(u64, bool), ReadError> {
    let mut after: Option<Value> = None;
    let mut total = 0u64;
    for _ in 0..MAX_COUNT_PAGES {
        let mut composite =
            json!({"size": COUNT_PAGE, "sources": [{"ip": {"terms": {"field": "ip"}}}]});
        if let Some(a) = &after {
            composite["after"] = a.clone();
        }
        let body = json!({
            "size": 0, "timeout": SEARCH_TIMEOUT, "track_total_hits": false, "query": query,
            "aggs": {"ips": {"composite": composite}},
        });
        let page = search(app, idx, &body)?;
        let agg = &page["aggregations"]["ips"];
        let n = agg["buckets"]
            .as_array()
            .ok_or_else(|| bad("missing composite buckets"))?
            .len();
        total += n as u64;
        if n < COUNT_PAGE || agg["after_key"].is_null() {
            return Ok((total, false));
        }
        after = Some(agg["after_key"].clone());
    }
    Ok((total, true))
}

/// Every endpoint of `ips` (expected: `expected` of them), in chunks with `search_after`.
fn fetch(
    app: &App,
    idx: &str,
    filter: &Value,
    ips: &[(IpAddr, u64)],
    expected: u64,
) -> Result<Vec<Value>, ReadError> {
    if ips.is_empty() {
        return Ok(Vec::new());
    }
    let mut filter = filter.as_array().cloned().unwrap_or_default();
    filter.push(
        json!({"terms": {"ip": ips.iter().map(|(ip, _)| ip.to_string()).collect::<Vec<_>>()}}),
    );
    let mut out: Vec<Value> = Vec::new();
    let mut after: Option<Value> = None;
    // One request more than the expected count needs, in case documents were added since
    // the aggregation; never an unbounded loop.
    let max_requests = expected.div_ceil(FETCH_CHUNK) + 1;
    for _ in 0..max_requests {
        let mut body = json!({
            "size": FETCH_CHUNK, "timeout": SEARCH_TIMEOUT, "track_total_hits": false,
            "_source": ENDPOINT_FIELDS,
            "query": {"bool": {"filter": filter}},
            "sort": [{"ip": "asc"}, {"transport": "asc"}, {"port": "asc"}, {"execution_id": "asc"}],
        });
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let page = search(app, idx, &body)?;
        let hits = page["hits"]["hits"]
            .as_array()
            .ok_or_else(|| bad("missing hits"))?;
        for h in hits {
            out.push(endpoint_json(&h["_source"], &ENDPOINT_FIELDS));
        }
        if (hits.len() as u64) < FETCH_CHUNK {
            return Ok(out);
        }
        after = hits.last().map(|h| h["sort"].clone());
    }
    Ok(out)
}
