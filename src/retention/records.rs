//! Finished executions' upload records — receipts, upload streams, DNS answers, analysis
//! and outbox rows — removed some days after the execution finished, in bounded short
//! transactions. The execution's row and its results stay, marked `pruned_at`, and a
//! rebuild still replays it (see `rebuild::source`).

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};

// What may be pruned: finished before $1, not yet pruned (executions_prune_idx, oldest
// first), and owing nothing: a succeeded publishing execution only once its publication
// row is processed (the row is what says it was published), and no close row waiting,
// nor an abandoned upload whose pending batches the lease sweep has yet to undo (their
// stream rows say which).
macro_rules! prunable {
    ($select:literal, $tail:literal) => {
        concat!(
            "SELECT ",
            $select,
            " FROM executions e
               JOIN tasks t ON t.id = e.task_id
              WHERE e.finished_at IS NOT NULL AND e.pruned_at IS NULL AND e.finished_at < $1
                AND (e.status <> 'succeeded' OR t.kind = 'dns'
                     OR EXISTS (SELECT 1 FROM scan_projection_outbox o
                                 WHERE o.execution_id = e.id AND o.processed_at IS NOT NULL))
                AND NOT EXISTS (SELECT 1 FROM scan_projection_outbox c
                                 WHERE c.closing_execution_id = e.id AND c.processed_at IS NULL)
                AND NOT EXISTS (SELECT 1 FROM scan_upload_stream s
                                 WHERE s.execution_id = e.id
                                   AND (s.pending_count > 0 OR s.dns_pending_count > 0)) ",
            $tail
        )
    };
}

const PRUNABLE: &str = prunable!("e.id", "ORDER BY e.finished_at LIMIT $2");

// A dry run's counts: the executions and the rows their pruning would remove.
const PRUNABLE_COUNTS: &str = concat!(
    "WITH due AS (",
    prunable!("e.id", ""),
    ") SELECT (SELECT count(*) FROM due),
              (SELECT count(*) FROM scan_upload_receipts WHERE execution_id IN (SELECT id FROM due)),
              (SELECT count(*) FROM scan_upload_stream WHERE execution_id IN (SELECT id FROM due)),
              (SELECT count(*) FROM scan_projection_outbox
                WHERE execution_id IN (SELECT id FROM due)
                   OR closing_execution_id IN (SELECT id FROM due))"
);

// Receipts of the batch's executions, at most $2 a statement, by the identity key (whose
// leading column is execution_id). Their streams are deleted after them, so the delete
// trigger's "mark dirty" touches rows that are about to go.
const DELETE_RECEIPTS: &str = "
    DELETE FROM scan_upload_receipts
     WHERE id IN (SELECT id FROM scan_upload_receipts WHERE execution_id = ANY($1) LIMIT $2)";

// The rest of the batch's records, and the mark, in one transaction: each by its
// execution_id key (a handful of rows per execution).
const DELETE_STREAMS: &str = "DELETE FROM scan_upload_stream WHERE execution_id = ANY($1)";
const DELETE_DNS_ANSWERS: &str = "DELETE FROM execution_dns_answers WHERE execution_id = ANY($1)";
const DELETE_ANALYSIS: &str = "DELETE FROM scan_analysis_queue WHERE execution_id = ANY($1)";
const DELETE_OUTBOX: &str = "
    DELETE FROM scan_projection_outbox
     WHERE (execution_id = ANY($1) OR closing_execution_id = ANY($1))
       AND processed_at IS NOT NULL";
const MARK_PRUNED: &str = "UPDATE executions SET pruned_at = now() WHERE id = ANY($1)";

// Processed rows that belong to no execution (tag changes, deletions, age limits), done
// before $1, at most $2 a statement, by scan_projection_outbox_processed_idx.
const DELETE_DONE_ROWS: &str = "
    DELETE FROM scan_projection_outbox
     WHERE id IN (SELECT id FROM scan_projection_outbox
                   WHERE kind IN ('tags', 'delete', 'expire') AND processed_at < $1
                   LIMIT $2)";
const DONE_ROWS_COUNT: &str = "
    SELECT count(*) FROM scan_projection_outbox
     WHERE kind IN ('tags', 'delete', 'expire') AND processed_at < $1";

/// What pruning removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub executions: u64,
    pub receipts: u64,
    pub upload_streams: u64,
    pub outbox_rows: u64,
}

/// Prunes the records of executions finished before `before`, `batch` rows at a time,
/// until `stop`; `pruned` counts as it goes, so a failure still tells what was done.
pub fn prune(
    db: &Db,
    before: DateTime<Utc>,
    batch: usize,
    stop: &AtomicBool,
    pruned: &mut Pruned,
) -> Result<(), DbError> {
    let limit = batch as i64;
    while !stop.load(Ordering::SeqCst) {
        let ids: Vec<Uuid> = {
            let mut conn = db.checkout(Stage::Retention)?;
            conn.query(PRUNABLE, &[&before, &limit])?
                .iter()
                .map(|r| r.get(0))
                .collect()
        };
        if ids.is_empty() {
            break;
        }
        loop {
            let n = db.in_tx(Stage::Retention, |tx| {
                Ok::<_, DbError>(tx.execute(DELETE_RECEIPTS, &[&ids, &limit])?)
            })?;
            pruned.receipts += n;
            if n < batch as u64 {
                break;
            }
        }
        let (streams, rows) = db.in_tx(Stage::Retention, |tx| {
            let streams = tx.execute(DELETE_STREAMS, &[&ids])?;
            tx.execute(DELETE_DNS_ANSWERS, &[&ids])?;
            tx.execute(DELETE_ANALYSIS, &[&ids])?;
            let rows = tx.execute(DELETE_OUTBOX, &[&ids])?;
            tx.execute(MARK_PRUNED, &[&ids])?;
            Ok::<_, DbError>((streams, rows))
        })?;
        pruned.executions += ids.len() as u64;
        pruned.upload_streams += streams;
        pruned.outbox_rows += rows;
    }
    while !stop.load(Ordering::SeqCst) {
        let n = db.in_tx(Stage::Retention, |tx| {
            Ok::<_, DbError>(tx.execute(DELETE_DONE_ROWS, &[&before, &limit])?)
        })?;
        pruned.outbox_rows += n;
        if n < batch as u64 {
            break;
        }
    }
    Ok(())
}

/// What [`prune`] would remove now.
pub fn plan(db: &Db, before: DateTime<Utc>) -> Result<Pruned, DbError> {
    let mut conn = db.checkout(Stage::Retention)?;
    let r = conn.query_one(PRUNABLE_COUNTS, &[&before])?;
    let done: i64 = conn.query_one(DONE_ROWS_COUNT, &[&before])?.get(0);
    let count = |i: usize| r.get::<_, i64>(i) as u64;
    Ok(Pruned {
        executions: count(0),
        receipts: count(1),
        upload_streams: count(2),
        outbox_rows: count(3) + done as u64,
    })
}
