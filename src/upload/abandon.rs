//! `DELETE /api/v1/scanner/executions/{id}/uploads/{upload_id}`: a scanner gives up an
//! upload it will not finish, so that a final of the execution need not wait for it.
//! Allowed while the upload has no confirmed batch. Transaction A marks the stream
//! abandoned (no batch enters it again); then [`clean`], which the lease sweep runs as
//! well for the uploads of a lapsed claim: what the pending batches may have written to
//! Elasticsearch is undone, with no connection held, and transaction B deletes the pending
//! receipts and repairs the stream (the design's dirty-stream rule: a deletion marks it
//! dirty, the repair recounts it from the receipts left). Every step is safe to repeat
//! after a crash.

use crate::es::index::Indices;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use uuid::Uuid;

use super::batch::Endpoint;
use super::error::{conflict, UploadError};
use super::facts;
use super::reserve::{self, Execution};
use crate::app::App;
use crate::auth::Scanner;
use crate::db::{Queries, Stage};
use crate::es::bulk::BulkOp;
use crate::es::index;
use crate::es::writer::WriteReport;
use crate::es::EsError;
use crate::telemetry::Line;

/// Document ids per search request when reading what the pending batches wrote.
const IDS_PER_SEARCH: usize = 1000;
/// Endpoints per search request when looking for their other observations.
const KEYS_PER_SEARCH: usize = 200;
/// Most hits one such search may have; more is refused rather than read in part.
const MAX_HITS: usize = 10_000;

/// An endpoint: address, port, transport.
type Key = (String, u16, String);

// The upload's confirmed receipts by the identity index (leading execution_id, upload_id).
const CONFIRMED: &str = "
    SELECT count(*) FILTER (WHERE status = 'confirmed')
      FROM scan_upload_receipts WHERE execution_id = $1 AND upload_id = $2";

const MARK: &str = "
    UPDATE scan_upload_stream SET abandoned_at = coalesce(abandoned_at, now()), updated_at = now()
     WHERE execution_id = $1 AND upload_id = $2";

const PENDING: &str = "
    SELECT stream, batch_index, observation_count, endpoint_count,
           coalesce(storage_references, '{}')
      FROM scan_upload_receipts
     WHERE execution_id = $1 AND upload_id = $2 AND status = 'pending'";

// Serialises with the execution's transactions A and B (a batch of this upload in flight
// is refused at its confirm, as its stream is abandoned).
const LOCK_EXECUTION: &str = "SELECT 1 FROM executions WHERE id = $1 FOR UPDATE";

// Only once no write of the upload can still be in flight: a batch that passed its
// transaction A before the upload was abandoned may still be writing for `write_grace`.
const DELETE_PENDING: &str = "
    DELETE FROM scan_upload_receipts
     WHERE execution_id = $1 AND upload_id = $2 AND status = 'pending'
       AND EXISTS (SELECT 1 FROM scan_upload_stream s
                    WHERE s.execution_id = $1 AND s.upload_id = $2
                      AND s.abandoned_at <= now() - make_interval(secs => $3))";

const STILL_PENDING: &str = "
    SELECT count(*) FROM scan_upload_receipts
     WHERE execution_id = $1 AND upload_id = $2 AND status = 'pending'";

/// A pending batch whose facts are to be removed.
struct PendingBatch {
    stream: String,
    batch_index: u32,
    observations: usize,
    endpoints: usize,
    indices: Vec<String>,
}

/// The whole request: transaction A marks the upload abandoned, then [`clean`].
pub fn run(
    app: &App,
    scanner: &Scanner,
    execution_id: Uuid,
    upload_id: Uuid,
    trace_id: &str,
) -> Result<Value, UploadError> {
    // Transaction A: short, under the execution lock.
    let execution = app.db.in_tx(Stage::Lifecycle, |tx| {
        let (status, execution) = reserve::lock_execution(tx, scanner, execution_id)?;
        if status != "running" {
            return Err(conflict(
                "execution_not_running",
                format!("execution is {status}; uploads are abandoned only while it runs"),
            ));
        }
        let confirmed: i64 = tx
            .query_one(CONFIRMED, &[&execution_id, &upload_id])?
            .get(0);
        if confirmed > 0 {
            return Err(conflict(
                "upload_has_confirmed_batches",
                format!(
                    "{confirmed} batches of this upload are confirmed; it can only be finished"
                ),
            ));
        }
        // The stream row exists once the upload sent anything.
        if tx.execute(MARK, &[&execution_id, &upload_id])? == 0 {
            return Err(UploadError::NotFound);
        }
        Ok::<_, UploadError>(execution)
    })?;
    let cleaned = clean(app, &execution, upload_id, trace_id)?;
    Ok(json!({
        "execution_id": execution_id,
        "upload_id": upload_id,
        "abandoned": true,
        "removed_batches": cleaned.removed,
        "waiting_batches": cleaned.waiting,
    }))
}

/// Removes what the pending batches of an abandoned upload left: the endpoint documents
/// they may have written are rebuilt from the execution's other facts (or deleted), their
/// facts are deleted, then their receipts, and the stream is repaired. Every step may be
/// repeated; a final of the execution waits until this has run. Returns the receipts
/// removed and left.
pub fn clean(
    app: &App,
    execution: &Execution,
    upload_id: Uuid,
    trace_id: &str,
) -> Result<Cleaned, UploadError> {
    let execution_id = execution.id;
    let pending = app.db.in_tx(Stage::Lifecycle, |tx| {
        let rows = tx.query(PENDING, &[&execution_id, &upload_id])?;
        Ok::<_, UploadError>(
            rows.iter()
                .map(|r| PendingBatch {
                    stream: r.get(0),
                    batch_index: r.get::<_, i32>(1) as u32,
                    observations: r.get::<_, i32>(2) as usize,
                    endpoints: r.get::<_, i32>(3) as usize,
                    indices: r.get(4),
                })
                .collect::<Vec<_>>(),
        )
    })?;

    // Elasticsearch, with no connection held: the endpoint documents the pending batches
    // may have written are rebuilt from the execution's other facts (or deleted), then
    // those batches' facts are deleted. Repeating both is harmless.
    let prefix = &app.config.elasticsearch.index_prefix;
    let endpoints_index = index::execution_endpoints(prefix);
    let by_index: Vec<(String, Vec<String>)> = pending
        .iter()
        .flat_map(|p| {
            let batch = index::FactIds::new(execution_id, upload_id, &p.stream, p.batch_index);
            let ids: Vec<String> = (0..p.observations).map(|i| batch.at(i)).collect();
            p.indices
                .iter()
                .filter(|i| **i != endpoints_index)
                .map(move |i| (i.clone(), ids.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    if !by_index.is_empty() {
        // Each repair and delete touches its own document: sent together.
        let ctx = Arc::new(app.send_context(super::BULK_ATTEMPTS, super::BULK_BACKOFF, trace_id));
        let write = |ops: Vec<BulkOp>| -> Result<WriteReport, EsError> {
            app.upload_senders.write(&ctx, ops, false)?.wait().result
        };
        let (mut keys, found) = written_endpoints(app, &by_index)?;
        // A fact that never reached the cluster may still have its endpoint document (the
        // two are written side by side): then which endpoints the batch touched is not
        // known, and every endpoint document of the execution is checked.
        if found < pending.iter().map(|p| p.endpoints).sum::<usize>() {
            keys = execution_endpoints(app, execution_id)?;
        }
        let left_out: Vec<Value> = pending
            .iter()
            .map(|p| {
                json!({"bool": {"filter": [
                    {"term": {"upload_id": upload_id.to_string()}},
                    {"term": {"stream": p.stream}},
                    {"term": {"batch_index": p.batch_index}}
                ]}})
            })
            .collect();
        for chunk in keys.chunks(KEYS_PER_SEARCH) {
            let repairs = endpoint_repairs(app, execution, &left_out, chunk)?;
            write(repairs)?;
        }
        let deletes: Vec<BulkOp> = by_index
            .iter()
            .flat_map(|(i, ids)| ids.iter().map(move |id| BulkOp::delete(i, id)))
            .collect();
        write(deletes)?;
    }

    // Transaction B: the receipts go, and the stream is recounted from what is left.
    let grace = app.config.scanner.write_grace.as_secs_f64();
    let cleaned = app.db.in_tx(Stage::Lifecycle, |tx| {
        tx.execute(LOCK_EXECUTION, &[&execution_id])?;
        let removed = tx.execute(DELETE_PENDING, &[&execution_id, &upload_id, &grace])?;
        tx.query(reserve::REPAIR_STREAM, &[&execution_id, &upload_id])?;
        let waiting: i64 = tx
            .query_one(STILL_PENDING, &[&execution_id, &upload_id])?
            .get(0);
        Ok::<_, UploadError>(Cleaned {
            removed,
            waiting: waiting as u64,
        })
    })?;
    Line::new("ScanUploadAbandoned")
        .field("execution_id", execution_id)
        .field("upload_id", upload_id)
        .field("pending_batches_removed", cleaned.removed)
        .field("pending_batches_waiting", cleaned.waiting)
        .info();
    Ok(cleaned)
}

/// What a clean-up did: pending receipts removed, and those kept until no write of the
/// upload can be in flight (the lease sweep removes them then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    pub removed: u64,
    pub waiting: u64,
}

/// A complete search answer's hits (`_source` of each); a partial one is an error.
fn search(app: &App, indices: &str, body: &Value) -> Result<Vec<Value>, UploadError> {
    // A month whose index was never created holds nothing to find.
    let response = app.es.search(&Indices::one(indices).lenient(), body)?;
    let failed = response["_shards"]["failed"].as_u64().unwrap_or(0);
    if response["timed_out"] == true || failed > 0 {
        return Err(EsError::BadResponse("a search of the facts was incomplete".into()).into());
    }
    let hits = response["hits"]["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let total = response["hits"]["total"]["value"].as_u64().unwrap_or(0) as usize;
    if total > hits.len() {
        return Err(EsError::BadResponse(format!(
            "{total} facts matched where at most {MAX_HITS} are read"
        ))
        .into());
    }
    Ok(hits.into_iter().map(|h| h["_source"].clone()).collect())
}

/// The endpoints of the pending batches' facts that reached the cluster (the facts are
/// refreshed first, so a write that was acknowledged is seen), and how many endpoint facts
/// were found.
fn written_endpoints(
    app: &App,
    by_index: &[(String, Vec<String>)],
) -> Result<(Vec<Key>, usize), UploadError> {
    // Every facts index: the repair then searches them all for the other observations.
    let facts = format!("{}-facts-*", app.config.elasticsearch.index_prefix);
    app.es.refresh(&Indices::one(&facts).lenient())?;
    let mut keys = Vec::new();
    let mut found = 0;
    for (index, ids) in by_index {
        for chunk in ids.chunks(IDS_PER_SEARCH) {
            let body = json!({
                "size": chunk.len(), "track_total_hits": true,
                "_source": ["ip", "port", "transport"],
                "query": {"bool": {"filter": [{"ids": {"values": chunk}}, {"term": {"type": "endpoint"}}]}},
            });
            for source in search(app, index, &body)? {
                found += 1;
                let key = (
                    source["ip"].as_str(),
                    source["port"].as_u64().and_then(|p| u16::try_from(p).ok()),
                    source["transport"].as_str(),
                );
                if let (Some(ip), Some(port), Some(transport)) = key {
                    keys.push((ip.to_string(), port, transport.to_string()));
                }
            }
        }
    }
    keys.sort();
    keys.dedup();
    Ok((keys, found))
}

/// Every endpoint document of the execution, by pages in key order.
fn execution_endpoints(app: &App, execution_id: Uuid) -> Result<Vec<Key>, UploadError> {
    let index = index::execution_endpoints(&app.config.elasticsearch.index_prefix);
    app.es.refresh(&Indices::one(&index))?;
    let mut keys = Vec::new();
    let mut after: Option<Value> = None;
    loop {
        let mut body = json!({
            "size": IDS_PER_SEARCH, "track_total_hits": false,
            "_source": ["ip", "port", "transport"],
            "query": {"term": {"execution_id": execution_id.to_string()}},
            "sort": [{"ip": "asc"}, {"port": "asc"}, {"transport": "asc"}],
        });
        if let Some(a) = after.take() {
            body["search_after"] = a;
        }
        let response = app.es.search(&Indices::one(&index), &body)?;
        if response["timed_out"] == true || response["_shards"]["failed"].as_u64().unwrap_or(0) > 0
        {
            return Err(
                EsError::BadResponse("a search of the endpoints was incomplete".into()).into(),
            );
        }
        let hits = response["hits"]["hits"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for h in &hits {
            let s = &h["_source"];
            if let (Some(ip), Some(port), Some(transport)) = (
                s["ip"].as_str(),
                s["port"].as_u64().and_then(|p| u16::try_from(p).ok()),
                s["transport"].as_str(),
            ) {
                keys.push((ip.to_string(), port, transport.to_string()));
            }
        }
        match hits.last() {
            Some(last) if hits.len() == IDS_PER_SEARCH => after = Some(last["sort"].clone()),
            _ => return Ok(keys),
        }
    }
}

/// For each endpoint (at most `KEYS_PER_SEARCH`), its document rebuilt from the newest
/// observation among the execution's facts but those `left_out` (the pending batches), or
/// deleted when there is none.
fn endpoint_repairs(
    app: &App,
    execution: &Execution,
    left_out: &[Value],
    keys: &[Key],
) -> Result<Vec<BulkOp>, UploadError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let projection = index::execution_endpoints(prefix);
    let facts_pattern = format!("{prefix}-facts-*");
    let should: Vec<Value> = keys
        .iter()
        .map(|(ip, port, transport)| {
            json!({"bool": {"filter": [
                {"term": {"ip": ip}}, {"term": {"port": port}}, {"term": {"transport": transport}}
            ]}})
        })
        .collect();
    let body = json!({
        "size": MAX_HITS, "track_total_hits": true,
        "query": {"bool": {
            "filter": [
                {"term": {"execution_id": execution.id.to_string()}},
                {"term": {"type": "endpoint"}}
            ],
            "must_not": left_out,
            "should": should, "minimum_should_match": 1
        }},
    });
    let mut newest: BTreeMap<Key, (Endpoint, Vec<String>)> = BTreeMap::new();
    for source in search(app, &facts_pattern, &body)? {
        let Some((e, tags)) = facts::endpoint_of_fact(&source) else {
            continue;
        };
        let key = (e.ip.clone(), e.port, e.transport.as_str().to_string());
        match newest.get(&key) {
            Some((held, _)) if !facts::newer(&e, held) => {}
            _ => {
                newest.insert(key, (e, tags));
            }
        }
    }
    let docs = facts::EndpointDocs::new(
        &projection,
        (execution.id, execution.task_id, execution.owner_id),
    );
    let ops = keys
        .iter()
        .map(|key| match newest.get(key) {
            Some((e, tags)) => docs.op(e, tags),
            None => BulkOp::delete(
                &projection,
                &index::execution_endpoint_id(execution.id, &key.0, &key.2, key.1),
            ),
        })
        .collect();
    Ok(ops)
}
