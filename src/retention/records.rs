//! Finished executions' upload records — receipts, upload streams, DNS answers, analysis
//! and publication rows — removed some days after the execution finished, in bounded short
//! transactions. The execution's row and its results stay, marked `pruned_at`, and a
//! rebuild still replays it (see `rebuild::source`).

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};

// The next $2 executions finished before $1 and not pruned, after the cursor ($3, $4), in
// (finished_at, id) order by executions_prune_idx, each with whether it owes nothing: a
// succeeded publishing execution only once its publication row is processed (the row is
// what says it was published), no close row waiting, and no abandoned upload whose
// pending batches the lease sweep has yet to undo (their stream rows say which).
// Taking the candidates first bounds each statement by $2 however much history waits,
// and the cursor walks past those that still owe something. The checks are LATERAL with
// LIMIT 1 so that each is a probe of a key of e.id, not a hashed scan of the history.
pub const CANDIDATES: &str = "
    SELECT e.id, e.finished_at,
           (e.status <> 'succeeded' OR t.kind = 'dns' OR published.x IS NOT NULL)
           AND closing.x IS NULL AND pending.x IS NULL
      FROM (SELECT id, task_id, status, finished_at FROM executions
             WHERE finished_at IS NOT NULL AND pruned_at IS NULL AND finished_at < $1
               AND (finished_at, id) > ($3, $4)
             ORDER BY finished_at, id LIMIT $2) e
      JOIN tasks t ON t.id = e.task_id
      LEFT JOIN LATERAL (SELECT 1 AS x FROM scan_projection_outbox o
                          WHERE o.execution_id = e.id AND o.processed_at IS NOT NULL
                          LIMIT 1) published ON true
      LEFT JOIN LATERAL (SELECT 1 AS x FROM scan_projection_outbox c
                          WHERE c.closing_execution_id = e.id AND c.processed_at IS NULL
                          LIMIT 1) closing ON true
      LEFT JOIN LATERAL (SELECT 1 AS x FROM scan_upload_stream s
                          WHERE s.execution_id = e.id
                            AND (s.pending_count > 0 OR s.dns_pending_count > 0)
                          LIMIT 1) pending ON true
     ORDER BY e.finished_at, e.id";

// A dry run's counts: the executions CANDIDATES would prune, and the rows that would go
// with them (the same conditions over all history at once, as semi-joins).
const PRUNABLE_COUNTS: &str = "
    WITH due AS (
        SELECT e.id FROM executions e JOIN tasks t ON t.id = e.task_id
         WHERE e.finished_at IS NOT NULL AND e.pruned_at IS NULL AND e.finished_at < $1
           AND (e.status <> 'succeeded' OR t.kind = 'dns'
                OR EXISTS (SELECT 1 FROM scan_projection_outbox o
                            WHERE o.execution_id = e.id AND o.processed_at IS NOT NULL))
           AND NOT EXISTS (SELECT 1 FROM scan_projection_outbox c
                            WHERE c.closing_execution_id = e.id AND c.processed_at IS NULL)
           AND NOT EXISTS (SELECT 1 FROM scan_upload_stream s
                            WHERE s.execution_id = e.id
                              AND (s.pending_count > 0 OR s.dns_pending_count > 0)))
    SELECT (SELECT count(*) FROM due),
           (SELECT count(*) FROM scan_upload_receipts WHERE execution_id IN (SELECT id FROM due)),
           (SELECT count(*) FROM scan_upload_stream WHERE execution_id IN (SELECT id FROM due)),
           (SELECT count(*) FROM scan_projection_outbox WHERE execution_id IN (SELECT id FROM due))";

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
// The execution's own row only: close rows stay, since a rebuild replays closes in their
// outbox order (the first close to apply to a document is the one it keeps).
const DELETE_OUTBOX: &str = "
    DELETE FROM scan_projection_outbox WHERE execution_id = ANY($1) AND processed_at IS NOT NULL";
const MARK_PRUNED: &str = "UPDATE executions SET pruned_at = now() WHERE id = ANY($1)";

// Processed rows that belong to no execution (tag changes, deletions, age limits), done
// before $1, at most $2 a statement, by scan_projection_outbox_processed_idx.
const DELETE_DONE_ROWS: &str = "
    DELETE FROM scan_projection_outbox
     WHERE id IN (SELECT id FROM scan_projection_outbox
                   WHERE kind IN ('tags', 'delete', 'expire', 'forget') AND processed_at < $1
                   LIMIT $2)";
const DONE_ROWS_COUNT: &str = "
    SELECT count(*) FROM scan_projection_outbox
     WHERE kind IN ('tags', 'delete', 'expire', 'forget') AND processed_at < $1";

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
    let mut cursor = (DateTime::<Utc>::UNIX_EPOCH, Uuid::nil());
    while !stop.load(Ordering::SeqCst) {
        let candidates: Vec<(Uuid, DateTime<Utc>, bool)> = {
            let mut conn = db.checkout(Stage::Retention)?;
            conn.query(CANDIDATES, &[&before, &limit, &cursor.0, &cursor.1])?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        };
        let Some(&(last, last_at, _)) = candidates.last() else {
            break;
        };
        cursor = (last_at, last);
        let more = candidates.len() == batch;
        let ids: Vec<Uuid> = candidates.iter().filter(|c| c.2).map(|c| c.0).collect();
        if !ids.is_empty() {
            prune_batch(db, &ids, limit, pruned)?;
        }
        if !more {
            break;
        }
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

/// Removes the records of `ids`: their receipts `limit` at a time, then the rest and the
/// mark in one transaction.
fn prune_batch(db: &Db, ids: &[Uuid], limit: i64, pruned: &mut Pruned) -> Result<(), DbError> {
    loop {
        let n = db.in_tx(Stage::Retention, |tx| {
            Ok::<_, DbError>(tx.execute(DELETE_RECEIPTS, &[&ids, &limit])?)
        })?;
        pruned.receipts += n;
        if n < limit as u64 {
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
