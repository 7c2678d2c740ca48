//! DNS child tasks: the A/AAAA answers of a `dns` or `mixed` execution become one
//! generated `port_scan` task of the same owner (targets = the resolved addresses,
//! deduplicated and bounded) with a queued execution for the same scanner. Idempotent: at
//! most one child per source execution (unique index), so retries generate nothing twice.
//! Each batch's confirm records its answers in `execution_dns_answers` (the first
//! `MAX_CHILD_TARGETS` distinct ones of the execution), so the final reads a bounded set
//! whatever the execution's size; only an execution with batches confirmed by an older
//! release aggregates its answers from the facts in Elasticsearch, before transaction B.

use std::net::IpAddr;

use serde_json::json;
use uuid::Uuid;

use super::error::UploadError;
use super::final_scope::Plan;
use crate::db::{Queries, Tx};
use crate::es::EsClient;

/// Most addresses one DNS execution turns into child targets.
pub const MAX_CHILD_TARGETS: usize = 1024;

/// Where a final's child targets come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildTargets {
    /// A `port_scan` execution: no child task.
    None,
    /// Every DNS batch recorded its answers at confirm.
    Recorded,
    /// Aggregated from the facts (some batch was confirmed by an older release).
    Read(Vec<IpAddr>),
}

// Under the execution lock (transaction B takes it first), so the room left is exact and
// an execution never holds more than MAX_CHILD_TARGETS answers.
const RECORD_ANSWERS: &str = "
    INSERT INTO execution_dns_answers (execution_id, address)
    SELECT $1, a FROM unnest($2::inet[]) AS a
     WHERE NOT EXISTS (SELECT 1 FROM execution_dns_answers d
                        WHERE d.execution_id = $1 AND d.address = a)
     ORDER BY a
     LIMIT greatest(0, $3 - (SELECT count(*) FROM execution_dns_answers WHERE execution_id = $1))
    ON CONFLICT DO NOTHING";

// Primary-key range: at most MAX_CHILD_TARGETS rows, read as they are removed.
const TAKE_ANSWERS: &str = "
    DELETE FROM execution_dns_answers WHERE execution_id = $1 RETURNING address";

const FORGET_ANSWERS: &str = "DELETE FROM execution_dns_answers WHERE execution_id = $1";

/// Records a confirmed batch's distinct answers, up to the execution's room left.
pub fn record(
    tx: &mut Tx<'_>,
    execution_id: Uuid,
    answers: &[IpAddr],
) -> Result<(), postgres::Error> {
    tx.execute(
        RECORD_ANSWERS,
        &[&execution_id, &answers, &(MAX_CHILD_TARGETS as i64)],
    )?;
    Ok(())
}

/// The answers recorded for `execution_id`, removed: the final that reads them is their
/// last use.
pub fn take_recorded(tx: &mut Tx<'_>, execution_id: Uuid) -> Result<Vec<IpAddr>, postgres::Error> {
    let mut answers: Vec<IpAddr> = tx
        .query(TAKE_ANSWERS, &[&execution_id])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Address order, as inet sorts (IPv4 before IPv6).
    answers.sort_unstable();
    Ok(answers)
}

/// Removes the answers recorded for `execution_id` unread (the final took them from the
/// facts, which hold them too).
pub fn forget_recorded(tx: &mut Tx<'_>, execution_id: Uuid) -> Result<(), postgres::Error> {
    tx.execute(FORGET_ANSWERS, &[&execution_id]).map(|_| ())
}

/// The distinct A/AAAA answers of an execution aggregated from the facts, over the
/// final's fact indices (the count chunks' index lists), at most `MAX_CHILD_TARGETS`
/// (the most frequent). Only for executions with receipts that recorded no answers.
pub fn resolved_addresses(
    es: &EsClient,
    plan: &Plan,
    execution_id: Uuid,
) -> Result<Vec<IpAddr>, UploadError> {
    let query = json!({
        "size": 0,
        "query": { "bool": { "filter": [
            { "term": { "execution_id": execution_id.to_string() } },
            { "term": { "type": "dns" } },
            { "terms": { "record_type": ["A", "AAAA"] } }
        ] } },
        "aggs": { "answers": { "terms": { "field": "value", "size": MAX_CHILD_TARGETS } } }
    });
    let mut out: Vec<IpAddr> = Vec::new();
    // The fact indices the final counted, searched in the same chunks.
    for indices in &plan.count {
        let body = es.search(indices, &query)?;
        if body["_shards"]["failed"].as_u64().unwrap_or(0) > 0 || body["timed_out"] == true {
            return Err(UploadError::BadCount(format!(
                "partial DNS answer search of {indices}"
            )));
        }
        for b in body["aggregations"]["answers"]["buckets"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(ip) = b["key"].as_str().and_then(|v| v.parse().ok()) {
                out.push(ip);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out.truncate(MAX_CHILD_TARGETS);
    Ok(out)
}

const SOURCE: &str = "
    SELECT t.owner_id, t.tags, e.scanner_id, t.ports
      FROM executions e JOIN tasks t ON t.id = e.task_id WHERE e.id = $1";

// One child per source execution: a retry finds the conflict and inserts nothing. The
// child scans the parent's port scope.
const CHILD_TASK: &str = "
    INSERT INTO tasks (owner_id, kind, status, parent_task_id, source_execution_id, tags, executions_total, ports)
    VALUES ($1, 'port_scan', 'pending', $2, $3, $4, 1, $5)
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
    tx: &mut Tx<'_>,
    task_id: Uuid,
    execution_id: Uuid,
    addresses: &[IpAddr],
) -> Result<Option<Uuid>, postgres::Error> {
    if addresses.is_empty() {
        return Ok(None);
    }
    let source = tx.query_one(SOURCE, &[&execution_id])?;
    let (owner_id, tags, scanner_id, ports): (Uuid, Vec<String>, Uuid, Option<String>) =
        (source.get(0), source.get(1), source.get(2), source.get(3));
    let child = tx.query_opt(
        CHILD_TASK,
        &[&owner_id, &task_id, &execution_id, &tags, &ports],
    )?;
    let Some(row) = child else {
        return Ok(None);
    };
    let child: Uuid = row.get(0);
    tx.execute(CHILD_TARGETS, &[&child, &addresses])?;
    tx.execute(CHILD_EXECUTION, &[&child, &scanner_id])?;
    Ok(Some(child))
}
