//! The outbox's SQL: claim, context, lease renewal, checkpoint, release, completion and
//! error recording — each one short statement, prepared once per connection, on a freshly
//! checked-out connection. Every write after the claim matches the whole lease
//! (`claim_token = $2 AND lease_expires_at > now()`): zero rows means the lease is lost and
//! the caller must stop. Leases use the database clock, so workers' clocks never matter.

use postgres::types::Json;

use crate::tags::TagScope;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::ProjectionError;
use crate::db::{Db, Queries, Stage};

/// A publisher's claim on an outbox row, as the claim returned it (a scanner's claim on an
/// execution is [`crate::upload::claim`]).
#[derive(Debug, Clone)]
pub struct OutboxClaim {
    pub id: i64,
    pub token: Uuid,
    /// What to publish: an execution's endpoints, an owner's re-tagged documents, or the
    /// closing of what a scoped execution did not see.
    pub work: Work,
    pub owner_id: Uuid,
    pub cursor: Option<String>,
    pub refreshing: bool,
    pub processed_endpoints: i64,
    pub attempts: i32,
}

/// The kinds of outbox rows.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    Execution(Uuid),
    /// Re-publish the tags of the owner's documents within this scope.
    Tags(TagScope),
    /// Close the owner's assets in this succeeded execution's targets × port scope that
    /// it did not see.
    Close(Uuid),
    /// Delete the owner's documents this tombstone covers.
    Delete(i64),
    /// Delete the owner's documents last seen before this time, each with a tombstone.
    Expire(DateTime<Utc>),
    /// Take a deleted task's observations out of the asset views, then remove its
    /// documents and rows (see [`crate::forget`]).
    Forget(Uuid),
}

impl std::fmt::Display for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Work::Execution(id) => write!(f, "execution:{id}"),
            Work::Tags(scope) => write!(f, "tags:{scope}"),
            Work::Close(id) => write!(f, "close:{id}"),
            Work::Delete(id) => write!(f, "delete:{id}"),
            Work::Expire(before) => write!(f, "expire:{}", before.to_rfc3339()),
            Work::Forget(id) => write!(f, "forget:{id}"),
        }
    }
}

// Takes the oldest due row — a tags, close, delete, expire or forget row (a close row is
// made only for a succeeded execution), or an execution row whose execution has succeeded —
// whose lease is free or expired. All kinds share one order, so they take turns. SKIP
// LOCKED: concurrent claimers take different rows instead of queueing on one. The partial
// index scan_projection_outbox_claim_idx serves the ORDER BY.
// A deleted task's execution and close rows are never taken again: its deletion run takes
// its observations out, and would race a publication of them. That run waits while one of
// those rows is still leased (a worker may be writing it). Both by primary and unique keys
// (executions, tasks, executions_task_idx, the outbox's execution and closing keys, each
// probed on its own: a join on either of them would read the whole outbox).
pub const OUTBOX_CLAIM: &str = "
    WITH next AS (
        SELECT o.id
          FROM scan_projection_outbox o
          LEFT JOIN executions e ON e.id = o.execution_id
         WHERE o.processed_at IS NULL
           AND o.available_at <= now()
           AND (o.claim_token IS NULL OR o.lease_expires_at <= now())
           AND (o.kind <> 'execution' OR e.status = 'succeeded')
           AND NOT EXISTS (
                 SELECT 1 FROM executions x JOIN tasks t ON t.id = x.task_id
                  WHERE x.id = coalesce(o.execution_id, o.closing_execution_id)
                    AND t.deleted_at IS NOT NULL)
           AND (o.kind <> 'forget' OR NOT EXISTS (
                 SELECT 1 FROM executions x
                  WHERE x.task_id = o.forget_task_id
                    AND (EXISTS (SELECT 1 FROM scan_projection_outbox p
                                  WHERE p.execution_id = x.id AND p.lease_expires_at > now())
                         OR EXISTS (SELECT 1 FROM scan_projection_outbox p
                                     WHERE p.closing_execution_id = x.id
                                       AND p.lease_expires_at > now()))))
         ORDER BY o.available_at, o.id
         LIMIT 1
           FOR UPDATE OF o SKIP LOCKED)
    UPDATE scan_projection_outbox o
       SET claim_token = $1, lease_expires_at = now() + make_interval(secs => $2)
      FROM next
     WHERE o.id = next.id
    RETURNING o.id, o.execution_id, o.owner_id, o.cursor, o.phase = 'refreshing',
              o.processed_endpoints, o.attempts, o.tag_scope, o.closing_execution_id,
              o.tombstone_id, o.expire_before, o.forget_task_id";

const OUTBOX_RENEW_LEASE: &str = "
    UPDATE scan_projection_outbox SET lease_expires_at = now() + make_interval(secs => $3)
     WHERE id = $1 AND claim_token = $2 AND lease_expires_at > now()";

pub const OUTBOX_CHECKPOINT: &str = "
    UPDATE scan_projection_outbox
       SET cursor = $3, processed_endpoints = processed_endpoints + $4
     WHERE id = $1 AND claim_token = $2 AND lease_expires_at > now()";

const OUTBOX_ENTER_REFRESHING: &str = "
    UPDATE scan_projection_outbox SET phase = 'refreshing'
     WHERE id = $1 AND claim_token = $2 AND lease_expires_at > now()";

// Gives the row back, due now: it queues behind every row that was due earlier.
const OUTBOX_RELEASE: &str = "
    UPDATE scan_projection_outbox
       SET claim_token = NULL, lease_expires_at = NULL, available_at = now()
     WHERE id = $1 AND claim_token = $2 AND lease_expires_at > now()";

// Completes the row; an execution row of a task with a port scope enqueues the execution's
// close run with it, in the same statement: the close runs only once the execution's own
// observations are in the asset view. ON CONFLICT: a completion repeated (a requeue)
// enqueues nothing twice. A forget row deletes its task with it (by primary key; the run
// has removed the task's executions and targets in short steps before), so the task is
// there until the run is done and gone once it is. Counts the completed rows (0: the
// lease is lost).
const OUTBOX_COMPLETE: &str = "
    WITH done AS (
        UPDATE scan_projection_outbox
           SET processed_at = now(), claim_token = NULL, lease_expires_at = NULL,
               last_error = NULL, last_error_class = NULL
         WHERE id = $1 AND claim_token = $2 AND lease_expires_at > now()
        RETURNING kind, execution_id, owner_id, forget_task_id),
    forgotten AS (
        DELETE FROM tasks t USING done d
         WHERE d.kind = 'forget' AND t.id = d.forget_task_id AND t.deleted_at IS NOT NULL),
    closing AS (
        INSERT INTO scan_projection_outbox (kind, closing_execution_id, owner_id)
        SELECT 'close', d.execution_id, d.owner_id
          FROM done d
          JOIN executions e ON e.id = d.execution_id
          JOIN tasks t ON t.id = e.task_id
         WHERE d.kind = 'execution' AND t.ports IS NOT NULL
        ON CONFLICT (closing_execution_id) DO NOTHING)
    SELECT count(*) FROM done";

const OUTBOX_RECORD_ERROR: &str = "
    UPDATE scan_projection_outbox
       SET attempts = attempts + 1, last_error = $3, last_error_class = $4,
           available_at = now() + make_interval(secs => $5),
           claim_token = NULL, lease_expires_at = NULL
     WHERE id = $1 AND claim_token = $2 AND lease_expires_at > now()
    RETURNING attempts";

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Claims the next due row for `lease`, or `None` when nothing is due.
pub fn claim(db: &Db, lease: Duration) -> Result<Option<OutboxClaim>, ProjectionError> {
    let token = Uuid::new_v4();
    let mut conn = db.checkout(Stage::OutboxClaim)?;
    let Some(r) = conn.query_opt(OUTBOX_CLAIM, &[&token, &secs(lease)])? else {
        return Ok(None);
    };
    // The table's CHECK makes each row carry exactly its kind's reference.
    let work = match (
        r.get::<_, Option<Uuid>>(1),
        r.get::<_, Option<Uuid>>(8),
        r.get::<_, Option<i64>>(9),
        r.get::<_, Option<DateTime<Utc>>>(10),
        r.get::<_, Option<Uuid>>(11),
    ) {
        (Some(e), ..) => Work::Execution(e),
        (None, Some(e), ..) => Work::Close(e),
        (None, None, Some(t), ..) => Work::Delete(t),
        (None, None, None, Some(before), _) => Work::Expire(before),
        (None, None, None, None, Some(t)) => Work::Forget(t),
        (None, None, None, None, None) => Work::Tags(
            r.try_get::<_, Json<TagScope>>(7)
                .map_err(crate::db::DbError::from)?
                .0,
        ),
    };
    Ok(Some(OutboxClaim {
        id: r.get(0),
        token,
        work,
        owner_id: r.get(2),
        cursor: r.get(3),
        refreshing: r.get(4),
        processed_endpoints: r.get(5),
        attempts: r.get(6),
    }))
}

/// Runs one lease-guarded write; zero rows is `LeaseLost`.
fn guarded(
    db: &Db,
    stage: Stage,
    sql: &'static str,
    claim: &OutboxClaim,
    extra: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<(), ProjectionError> {
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&claim.id, &claim.token];
    params.extend_from_slice(extra);
    let mut conn = db.checkout(stage)?;
    match conn.execute(sql, &params)? {
        0 => Err(ProjectionError::LeaseLost),
        _ => Ok(()),
    }
}

pub fn renew(db: &Db, claim: &OutboxClaim, lease: Duration) -> Result<(), ProjectionError> {
    guarded(db, Stage::Renew, OUTBOX_RENEW_LEASE, claim, &[&secs(lease)])
}

pub fn checkpoint(
    db: &Db,
    claim: &OutboxClaim,
    cursor: &str,
    endpoints: i64,
) -> Result<(), ProjectionError> {
    guarded(
        db,
        Stage::Checkpoint,
        OUTBOX_CHECKPOINT,
        claim,
        &[&cursor, &endpoints],
    )
}

pub fn enter_refreshing(db: &Db, claim: &OutboxClaim) -> Result<(), ProjectionError> {
    guarded(db, Stage::Checkpoint, OUTBOX_ENTER_REFRESHING, claim, &[])
}

pub fn release(db: &Db, claim: &OutboxClaim) -> Result<(), ProjectionError> {
    guarded(db, Stage::Checkpoint, OUTBOX_RELEASE, claim, &[])
}

pub fn complete(db: &Db, claim: &OutboxClaim) -> Result<(), ProjectionError> {
    let mut conn = db.checkout(Stage::Checkpoint)?;
    match conn
        .query_one(OUTBOX_COMPLETE, &[&claim.id, &claim.token])?
        .get::<_, i64>(0)
    {
        0 => Err(ProjectionError::LeaseLost),
        _ => Ok(()),
    }
}

/// Records a failed tick and schedules the next attempt after `backoff`; returns the new
/// attempt count.
pub fn record_error(
    db: &Db,
    claim: &OutboxClaim,
    message: &str,
    class: &str,
    backoff: Duration,
) -> Result<i32, ProjectionError> {
    let mut conn = db.checkout(Stage::OutboxError)?;
    let row = conn.query_opt(
        OUTBOX_RECORD_ERROR,
        &[&claim.id, &claim.token, &message, &class, &secs(backoff)],
    )?;
    row.map(|r| r.get(0)).ok_or(ProjectionError::LeaseLost)
}
