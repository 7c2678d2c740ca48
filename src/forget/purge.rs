//! The end of a task deletion, once the asset views no longer hold the task: its
//! execution-projection documents and facts deleted (searched by `task_id`, deleted by id,
//! refreshed, until none is left: the emulator has no `_delete_by_query`, and this needs
//! nothing more of a cluster), then its receipts, executions and targets deleted in short
//! bounded transactions. Every step is idempotent, so a run that resumes after a crash
//! redoes whatever was left and goes on; the completion deletes the task row.

use std::collections::BTreeSet;

use postgres::types::ToSql;
use serde_json::{json, Value};

use super::ForgetRun;
use crate::app::App;
use crate::db::{Queries, Stage};
use crate::es::bulk::BulkOp;
use crate::es::index::{self, Indices};
use crate::es::writer::Writer;
use crate::projection::heartbeat::Heartbeat;
use crate::projection::worker::OUTBOX_BACKOFF;
use crate::projection::ProjectionError;
use crate::telemetry::Line;

/// Documents deleted per search-and-delete round.
const DOCUMENTS_PER_ROUND: usize = 1000;
/// Rows deleted per transaction: a few milliseconds each, so no lock is held for long.
const ROWS_PER_TRANSACTION: i64 = 500;

// Receipts first, in bounded steps: an execution's cascade would otherwise delete all of
// its receipts (thousands for a large scan) in one transaction. Through executions_task_idx
// and the receipts' identity key (leading execution_id).
const PURGE_RECEIPTS: &str = "
    DELETE FROM scan_upload_receipts WHERE id IN (
        SELECT r.id FROM executions e
          JOIN scan_upload_receipts r ON r.execution_id = e.id
         WHERE e.task_id = $1 LIMIT $2)";

// Then the executions; each cascades its few remaining rows (streams, DNS answers, its
// publication and close outbox rows, its analysis row). executions_task_idx.
const PURGE_EXECUTIONS: &str = "
    DELETE FROM executions WHERE id IN (
        SELECT id FROM executions WHERE task_id = $1 LIMIT $2)";

// Then the targets, by the primary key's leading task_id.
const PURGE_TARGETS: &str = "
    DELETE FROM task_targets WHERE (task_id, kind, value) IN (
        SELECT task_id, kind, value FROM task_targets WHERE task_id = $1 LIMIT $2)";

/// What a purge deleted.
#[derive(Debug, Default)]
struct Purged {
    projection: u64,
    facts: u64,
    receipts: u64,
    executions: u64,
    targets: u64,
}

impl ForgetRun {
    /// Deletes the task's documents, then its rows but the task's own (the completion's).
    pub fn purge(&self, app: &App, heartbeat: &Heartbeat) -> Result<(), ProjectionError> {
        let prefix = &app.config.elasticsearch.index_prefix;
        let trace_id = format!("forget-{}", self.task_id);
        let writer = Writer {
            cancel: Some(heartbeat.cancel()),
            ..app.writer(1, OUTBOX_BACKOFF, &trace_id)
        };
        let query = json!({ "term": { "task_id": self.task_id.to_string() } });
        let mut purged = Purged {
            projection: delete_matching(
                app,
                &writer,
                heartbeat,
                Indices::one(&index::execution_endpoints(prefix)),
                &query,
            )?,
            // Every month's facts: a missing month is no error.
            facts: delete_matching(
                app,
                &writer,
                heartbeat,
                Indices::one(&index::facts_pattern(prefix)).lenient(),
                &query,
            )?,
            ..Purged::default()
        };
        for (sql, count) in [
            (PURGE_RECEIPTS, &mut purged.receipts),
            (PURGE_EXECUTIONS, &mut purged.executions),
            (PURGE_TARGETS, &mut purged.targets),
        ] {
            loop {
                if heartbeat.is_lost() {
                    return Err(ProjectionError::LeaseLost);
                }
                let params: [&(dyn ToSql + Sync); 2] = [&self.task_id, &ROWS_PER_TRANSACTION];
                let n = app.db.checkout(Stage::Purge)?.execute(sql, &params)?;
                *count += n;
                if n < ROWS_PER_TRANSACTION as u64 {
                    break;
                }
            }
        }
        Line::new("TaskPurged")
            .field("task_id", self.task_id)
            .field("projection_documents", purged.projection)
            .field("facts", purged.facts)
            .field("receipts", purged.receipts)
            .field("executions", purged.executions)
            .field("targets", purged.targets)
            .info();
        Ok(())
    }
}

/// Deletes every document of `indices` matching `query`, a round at a time: search, delete
/// by index and id, refresh what was written (so the next search no longer sees it).
fn delete_matching(
    app: &App,
    writer: &Writer<'_>,
    heartbeat: &Heartbeat,
    indices: Indices,
    query: &Value,
) -> Result<u64, ProjectionError> {
    let body = json!({
        "size": DOCUMENTS_PER_ROUND,
        "query": { "bool": { "filter": [query] } },
        "_source": false,
        "track_total_hits": false,
    });
    let (mut deleted, mut previous) = (0, Vec::new());
    loop {
        if heartbeat.is_lost() {
            return Err(ProjectionError::LeaseLost);
        }
        let found = app.es.search(&indices, &body)?;
        super::sources::complete(&found)?;
        let ops: Vec<BulkOp> = found["hits"]["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| Some(BulkOp::delete(h["_index"].as_str()?, h["_id"].as_str()?)))
            .collect();
        if ops.is_empty() {
            return Ok(deleted);
        }
        // The same documents again after deleting and refreshing them: something keeps
        // writing them (or the refresh did not publish the deletes); retry later.
        let ids: Vec<String> = ops.iter().map(|op| op.id.clone()).collect();
        if ids == previous {
            return Err(ProjectionError::Unsettled(format!(
                "{} documents of {indices} still found after being deleted",
                ids.len()
            )));
        }
        previous = ids;
        writer.write(&ops)?;
        let touched: BTreeSet<&str> = ops.iter().map(|op| &*op.index).collect();
        app.es
            .refresh(&Indices::of(&touched.into_iter().collect::<Vec<_>>()))?;
        deleted += ops.len() as u64;
    }
}
