//! The final's index scope: which indices a final refreshes and counts, split
//! into requests whose HTTP request line stays within 3 KiB, and the sequential run of
//! those requests. Planning is pure; `run` is the only part that talks to Elasticsearch.

use crate::es::index::{Endpoint, Indices};
use serde_json::json;
use uuid::Uuid;

use super::error::UploadError;
use crate::es::{index, EsClient};
use crate::telemetry::span::UploadSpan;
use crate::telemetry::Line;

/// Budget of one request line: method, URL-encoded path and query, `HTTP/1.1`.
pub const REQUEST_LINE_BUDGET: usize = 3072;

/// Where a final's facts live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The fact indices recorded by this upload's receipts plus the current batch.
    Indices(Vec<String>),
    /// Receipts with observations but no `storage_references`: every fact index.
    Legacy,
}

/// The requests a final sends, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The indices of each refresh request; the execution projection is in the first
    /// one, exactly once.
    pub refresh: Vec<Indices>,
    /// The indices of each fact-count request (each counts this execution's facts).
    pub count: Vec<Indices>,
    /// The execution projection, counted on its own.
    pub endpoint_count: Indices,
    pub max_request_line_bytes: usize,
}

/// Fails when one index alone cannot fit in a request line; called before any fact of
/// the batch is written, so a too-long prefix never leaves data half written.
pub fn check_budget(indices: &[String]) -> Result<(), UploadError> {
    match indices
        .iter()
        .find(|i| Indices::one(i).request_line_len(Endpoint::Refresh) > REQUEST_LINE_BUDGET)
    {
        Some(i) => Err(UploadError::IndexNameTooLong(format!(
            "index name {i:?} does not fit a {REQUEST_LINE_BUDGET}-byte request line"
        ))),
        None => Ok(()),
    }
}

/// Greedy chunking of `names` (already sorted and unique) into requests to `endpoint`
/// within the request-line budget.
fn chunk(names: &[String], endpoint: Endpoint) -> Result<Vec<Indices>, UploadError> {
    check_budget(names)?;
    let mut chunks = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for name in names {
        current.push(name);
        if Indices::of(&current).request_line_len(endpoint) > REQUEST_LINE_BUDGET {
            current.pop();
            chunks.push(Indices::of(&current));
            current = vec![name];
        }
    }
    if !current.is_empty() {
        chunks.push(Indices::of(&current));
    }
    Ok(chunks)
}

/// Plans the refresh and count requests of a final. No fact index → no fact count.
pub fn plan(prefix: &str, scope: &Scope) -> Result<Plan, UploadError> {
    let projection = index::execution_endpoints(prefix);
    let (refresh, count) = match scope {
        // A wildcard that may match nothing yet.
        Scope::Legacy => {
            let all = index::facts_pattern(prefix);
            (
                vec![Indices::of(&[&projection, &all]).lenient()],
                vec![Indices::one(&all).lenient()],
            )
        }
        Scope::Indices(facts) => {
            let mut names = vec![projection.clone()];
            names.extend(facts.iter().filter(|f| **f != projection).cloned());
            // The projection first, then the months in order: refreshed exactly once.
            names[1..].sort();
            names.dedup();
            let facts_only: Vec<String> = names[1..].to_vec();
            (
                chunk(&names, Endpoint::Refresh)?,
                chunk(&facts_only, Endpoint::Count)?,
            )
        }
    };
    let endpoint_count = Indices::one(&projection);
    let max_request_line_bytes = refresh
        .iter()
        .map(|i| i.request_line_len(Endpoint::Refresh))
        .chain(
            count
                .iter()
                .chain(std::iter::once(&endpoint_count))
                .map(|i| i.request_line_len(Endpoint::Count)),
        )
        .max()
        .unwrap_or(0);
    Ok(Plan {
        refresh,
        count,
        endpoint_count,
        max_request_line_bytes,
    })
}

/// What the final's counts say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub observations: i64,
    pub endpoints: i64,
}

/// Refreshes every chunk, then counts every chunk, in order. Any failure fails the
/// whole final (the receipt stays pending; the retry redoes all chunks).
pub fn run(
    es: &EsClient,
    span: &UploadSpan,
    plan: &Plan,
    execution_id: Uuid,
) -> Result<Counts, UploadError> {
    Line::new("ScanFinalRequestPlan")
        .field("execution_id", execution_id)
        .field("refresh_requests", plan.refresh.len())
        .field("count_requests", plan.count.len() + 1)
        .field("max_request_line_bytes", plan.max_request_line_bytes)
        .info();
    for indices in &plan.refresh {
        span.stage("refresh_execution_index_chunk", || es.refresh(indices))?;
    }
    let query = json!({ "query": { "term": { "execution_id": execution_id.to_string() } } });
    let mut observations: i64 = 0;
    for p in &plan.count {
        let n = span.stage("count_execution_observation_chunk", || count(es, p, &query))?;
        observations = add_counts(observations, n, &p.to_string())?;
    }
    let endpoints = span.stage("count_execution_endpoints", || {
        count(es, &plan.endpoint_count, &query)
    })?;
    Ok(Counts {
        observations,
        endpoints,
    })
}

fn count(es: &EsClient, indices: &Indices, query: &serde_json::Value) -> Result<i64, UploadError> {
    read_count(&es.count(indices, query)?, &indices.to_string())
}

/// A `_count` answer's count: refused when shards failed or the count is negative or
/// missing.
fn read_count(body: &serde_json::Value, path: &str) -> Result<i64, UploadError> {
    if body["_shards"]["failed"].as_u64().unwrap_or(0) > 0 {
        return Err(UploadError::BadCount(format!(
            "shard failures counting {path}"
        )));
    }
    match body["count"].as_i64() {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(UploadError::BadCount(format!(
            "count {} from {path}",
            body["count"]
        ))),
    }
}

/// Adds chunk counts, refusing an overflow.
fn add_counts(total: i64, n: i64, path: &str) -> Result<i64, UploadError> {
    total
        .checked_add(n)
        .ok_or_else(|| UploadError::BadCount(format!("observation count overflows at {path}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn months(prefix: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("{prefix}-facts-{:04}.{:02}", 2020 + i / 12, i % 12 + 1))
            .collect()
    }

    #[test]
    fn few_months_are_one_refresh_with_the_projection() {
        let p = plan("s", &Scope::Indices(months("s", 2))).unwrap();
        assert_eq!(
            p.refresh,
            vec![Indices::of(&[
                "s-execution-endpoints",
                "s-facts-2020.01",
                "s-facts-2020.02"
            ])]
        );
        assert_eq!(
            p.count,
            vec![Indices::of(&["s-facts-2020.01", "s-facts-2020.02"])]
        );
        assert_eq!(p.endpoint_count, Indices::one("s-execution-endpoints"));
    }

    #[test]
    fn sixty_months_with_a_long_prefix_split_within_budget() {
        let prefix = "p".repeat(120);
        let p = plan(&prefix, &Scope::Indices(months(&prefix, 60))).unwrap();
        assert!(p.refresh.len() > 1 && p.count.len() > 1);
        assert!(p.max_request_line_bytes <= REQUEST_LINE_BUDGET);
        let joined = p
            .refresh
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("|");
        assert_eq!(
            joined.matches("execution-endpoints").count(),
            1,
            "projection refreshed once"
        );
        for m in months(&prefix, 60) {
            let holding = |chunks: &[Indices]| {
                chunks
                    .iter()
                    .filter(|i| i.to_string().split(',').any(|n| n == m))
                    .count()
            };
            assert_eq!(holding(&p.refresh), 1);
            assert_eq!(holding(&p.count), 1);
        }
    }

    #[test]
    fn empty_execution_counts_no_facts() {
        let p = plan("s", &Scope::Indices(vec![])).unwrap();
        assert!(p.count.is_empty());
        assert_eq!(p.refresh, vec![Indices::one("s-execution-endpoints")]);
    }

    #[test]
    fn legacy_scope_uses_the_wildcard_leniently() {
        let p = plan("s", &Scope::Legacy).unwrap();
        assert_eq!(p.count, vec![Indices::one("s-facts-*").lenient()]);
    }

    #[test]
    fn a_single_name_over_budget_fails() {
        let long = vec!["x".repeat(3100)];
        assert!(matches!(
            check_budget(&long),
            Err(UploadError::IndexNameTooLong(_))
        ));
        assert!(check_budget(&months("s", 3)).is_ok());
    }

    #[test]
    fn implausible_counts_are_refused() {
        use serde_json::json;
        assert_eq!(
            read_count(&json!({"count": 5, "_shards": {"failed": 0}}), "p").unwrap(),
            5
        );
        assert!(matches!(
            read_count(&json!({"count": -1}), "p"),
            Err(UploadError::BadCount(_))
        ));
        assert!(matches!(
            read_count(&json!({"count": "7"}), "p"),
            Err(UploadError::BadCount(_))
        ));
        assert!(matches!(
            read_count(&json!({}), "p"),
            Err(UploadError::BadCount(_))
        ));
        assert!(matches!(
            read_count(&json!({"count": 5, "_shards": {"failed": 1}}), "p"),
            Err(UploadError::BadCount(_))
        ));
        assert!(matches!(
            add_counts(i64::MAX, 1, "p"),
            Err(UploadError::BadCount(_))
        ));
        assert_eq!(add_counts(2, 3, "p").unwrap(), 5);
    }
}
