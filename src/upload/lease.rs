//! Lapsed execution leases: a background sweep, in every instance, returns the running
//! executions whose scanner stopped heartbeating and sending batches to the queue — for
//! the same scanner, or any scanner of the owner when none was assigned — or fails them
//! (`lease_expired`) once they have had `scanner.max_attempts` claims. The uploads of the
//! lapsed claim are abandoned: their confirmed batches stay and count, their pending ones
//! are undone ([`abandon::clean`], also for uploads whose clean-up a crash interrupted),
//! and the next claimant continues under new upload ids. One short transaction per lapse
//! sweep; `SKIP LOCKED` keeps instances (and in-flight batches, which hold the execution
//! lock) apart.

use std::sync::Arc;

use uuid::Uuid;

use super::lifecycle::{Transition, TASK_FAILED};
use super::reserve::Execution;
use super::{abandon, children};
use crate::app::App;
use crate::db::{Db, DbError, Queries, Stage};
use crate::periodic::{Periodic, Schedule};
use crate::telemetry::Line;

/// Most executions one sweep handles; the next sweep takes the rest.
const SWEEP_LIMIT: i64 = 100;

/// Most abandoned uploads one sweep cleans up.
const CLEAN_LIMIT: i64 = 20;

// Abandoned uploads with pending batches left, once no write of theirs can be in flight
// (`write_grace`), oldest first, through the partial index
// scan_upload_stream_abandoned_idx (a handful of rows at any time).
const UNCLEANED: &str = "
    SELECT s.execution_id, s.upload_id, e.task_id, t.owner_id, t.kind
      FROM scan_upload_stream s
      JOIN executions e ON e.id = s.execution_id
      JOIN tasks t ON t.id = e.task_id
     WHERE s.abandoned_at IS NOT NULL AND (s.pending_count > 0 OR s.dns_pending_count > 0)
       AND s.abandoned_at <= now() - make_interval(secs => $2)
     ORDER BY s.abandoned_at
     LIMIT $1";

// executions_lease_idx: running rows whose lease has lapsed, oldest first.
const LAPSE: &str = "
    WITH lapsed AS (
        SELECT id FROM executions
         WHERE status = 'running' AND lease_expires_at < now()
         ORDER BY lease_expires_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED)
    UPDATE executions e
       SET status = CASE WHEN e.attempts >= $1 THEN 'failed' ELSE 'queued' END,
           failure_reason = CASE WHEN e.attempts >= $1 THEN 'lease_expired' END,
           finished_at = CASE WHEN e.attempts >= $1 THEN now() END,
           started_at = CASE WHEN e.attempts >= $1 THEN e.started_at END,
           scanner_id = CASE WHEN e.attempts < $1 AND e.any_scanner THEN NULL
                             ELSE e.scanner_id END,
           lease_expires_at = NULL
      FROM lapsed WHERE e.id = lapsed.id
    RETURNING e.id, e.task_id, e.status, e.attempts";

// The uploads of a claim that ended (lapsed or failed) take no more batches; their pending
// batches are undone by the sweep.
pub const ABANDON_UPLOADS: &str = "
    UPDATE scan_upload_stream SET abandoned_at = now(), updated_at = now()
     WHERE execution_id = ANY($1) AND abandoned_at IS NULL";

/// One sweep: returns how many executions were requeued and failed.
pub fn sweep(db: &Db, max_attempts: u32) -> Result<(usize, usize), DbError> {
    let lapsed = db.in_tx(Stage::LeaseSweep, |tx| {
        let rows = tx.query(LAPSE, &[&(max_attempts as i32), &SWEEP_LIMIT])?;
        let lapsed: Vec<(Uuid, Uuid, String, i32)> = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect();
        let ids: Vec<Uuid> = lapsed.iter().map(|l| l.0).collect();
        if !ids.is_empty() {
            tx.execute(ABANDON_UPLOADS, &[&ids])?;
        }
        for (id, task_id, status, _) in &lapsed {
            if status == "failed" {
                children::forget_recorded(tx, *id)?;
                tx.execute(TASK_FAILED, &[task_id])?;
            }
        }
        Ok::<_, DbError>(lapsed)
    })?;
    let mut counts = (0, 0);
    for (id, _, status, attempt) in lapsed {
        if status == "failed" {
            Transition::LeaseExpired.record(id, attempt);
            counts.1 += 1;
        } else {
            Transition::Requeued.record(id, attempt);
            counts.0 += 1;
        }
    }
    Ok(counts)
}

/// Undoes the pending batches of abandoned uploads; returns how many uploads were cleaned.
pub fn clean_abandoned(app: &App) -> Result<usize, DbError> {
    let uploads = app.db.in_tx(Stage::LeaseSweep, |tx| {
        let grace = app.config.scanner.write_grace.as_secs_f64();
        let rows = tx.query(UNCLEANED, &[&CLEAN_LIMIT, &grace])?;
        Ok::<_, DbError>(
            rows.iter()
                .map(|r| {
                    let execution = Execution {
                        id: r.get(0),
                        task_id: r.get(2),
                        owner_id: r.get(3),
                        task_kind: r.get(4),
                    };
                    (execution, r.get::<_, Uuid>(1))
                })
                .collect::<Vec<_>>(),
        )
    })?;
    let mut cleaned = 0;
    for (execution, upload_id) in uploads {
        match abandon::clean(app, &execution, upload_id, "lease-sweep") {
            Ok(_) => cleaned += 1,
            // The kind only: a search backend's item reasons may quote document values.
            Err(e) => Line::new("ScanUploadCleanupFailed")
                .field("execution_id", execution.id)
                .field("upload_id", upload_id)
                .field("error", crate::http::error::upload_code(&e))
                .warn(),
        }
    }
    Ok(cleaned)
}

/// The sweeping thread: every `scanner.sweep_interval`, a sweep and a clean-up.
pub fn start_sweeper(app: Arc<App>) -> std::io::Result<Periodic> {
    let schedule = Schedule {
        name: "lease-sweep",
        every: app.config.scanner.sweep_interval,
        at_start: false,
        panicked: "ScanExecutionLeaseSweepPanicked",
    };
    let max_attempts = app.config.scanner.max_attempts;
    Periodic::start(schedule, move |_| {
        if let Err(e) = sweep(&app.db, max_attempts).and_then(|_| clean_abandoned(&app)) {
            Line::new("ScanExecutionLeaseSweepFailed")
                .field("error", e)
                .warn();
        }
    })
}
