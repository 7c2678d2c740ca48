//! DNS child tasks: the A/AAAA answers of a `dns` or `mixed` execution become one
//! generated `port_scan` task of the same owner (targets = the resolved addresses,
//! deduplicated and bounded) with a queued execution for the same scanner. Idempotent: at
//! most one child per source execution (unique index), so retries generate nothing twice.
//! The answers are read from Elasticsearch before transaction B; the task is written in it.

use postgres::Transaction;
use serde_json::json;
use uuid::Uuid;

use super::error::UploadError;
use super::final_scope::Plan;
use crate::es::EsClient;

/// Most addresses one DNS execution turns into child targets.
pub const MAX_CHILD_TARGETS: usize = 1024;

/// The distinct A/AAAA answers of an execution, over the final's fact indices (the
/// count chunks' index lists), at most `MAX_CHILD_TARGETS`.
pub fn resolved_addresses(
    es: &EsClient,
    plan: &Plan,
    execution_id: Uuid,
) -> Result<Vec<String>, UploadError> {
    let query = json!({
        "size": 0,
        "query": { "bool": { "filter": [
            { "term": { "execution_id": execution_id.to_string() } },
            { "term": { "type": "dns" } },
            { "terms": { "record_type": ["A", "AAAA"] } }
        ] } },
        "aggs": { "answers": { "terms": { "field": "value", "size": MAX_CHILD_TARGETS } } }
    });
    let mut out: Vec<String> = Vec::new();
    for count_path in &plan.count {
        let path = count_path.replacen("/_count", "/_search", 1);
        let r = es.json("POST", &path, &query)?.ok()?;
        if r.body["_shards"]["failed"].as_u64().unwrap_or(0) > 0 || r.body["timed_out"] == true {
            return Err(UploadError::BadCount(format!(
                "partial DNS answer search at {path}"
            )));
        }
        for b in r.body["aggregations"]["answers"]["buckets"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(v) = b["key"].as_str() {
                out.push(v.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out.truncate(MAX_CHILD_TARGETS);
    Ok(out)
}

const SOURCE: &str = "
    SELECT t.owner_id, t.tags, e.scanner_id
      FROM executions e JOIN tasks t ON t.id = e.task_id WHERE e.id = $1";

// One child per source execution: a retry finds the conflict and inserts nothing.
const CHILD_TASK: &str = "
    INSERT INTO tasks (owner_id, kind, status, parent_task_id, source_execution_id, tags, executions_total)
    VALUES ($1, 'port_scan', 'pending', $2, $3, $4, 1)
    ON CONFLICT (source_execution_id) WHERE source_execution_id IS NOT NULL DO NOTHING
    RETURNING id";

const CHILD_TARGETS: &str = "
    INSERT INTO task_targets (task_id, kind, value)
    SELECT $1, 'ip', host(a) FROM unnest($2::inet[]) AS a
    ON CONFLICT DO NOTHING";

const CHILD_EXECUTION: &str = "
    INSERT INTO executions (task_id, scanner_id, status) VALUES ($1, $2, 'queued')";

/// Creates the child task of `execution_id` for `addresses`; `None` when there is
/// nothing to scan or the child exists already.
pub fn generate(
    tx: &mut Transaction<'_>,
    task_id: Uuid,
    execution_id: Uuid,
    addresses: &[String],
) -> Result<Option<Uuid>, postgres::Error> {
    if addresses.is_empty() {
        return Ok(None);
    }
    let source = tx.query_one(SOURCE, &[&execution_id])?;
    let (owner_id, tags, scanner_id): (Uuid, Vec<String>, Uuid) =
        (source.get(0), source.get(1), source.get(2));
    let Some(row) = tx.query_opt(CHILD_TASK, &[&owner_id, &task_id, &execution_id, &tags])? else {
        return Ok(None);
    };
    let child: Uuid = row.get(0);
    let inets: Vec<std::net::IpAddr> = addresses.iter().filter_map(|a| a.parse().ok()).collect();
    tx.execute(CHILD_TARGETS, &[&child, &inets])?;
    tx.execute(CHILD_EXECUTION, &[&child, &scanner_id])?;
    Ok(Some(child))
}
