//! `POST /api/v1/scanner/executions/claim`: hands a scanner its oldest queued execution —
//! one assigned to it, or one queued for any scanner of its owner — marking it running
//! under a lease, in one short transaction. `SKIP LOCKED` lets concurrent claims take
//! different executions instead of waiting on each other. The answer carries the lease
//! and every limit the server will hold the scanner's batches to.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::UploadError;
use crate::auth::Scanner;
use crate::config::Config;
use crate::db::{Queries, Tx};

// The claim: the oldest queued execution of the scanners `$scanners` admits, running
// under a lease from now. `SKIP LOCKED`: concurrent claims take different executions. No
// claim hands out a deleted task's queued executions, which wait for its deletion run (the
// task's primary key, per candidate row).
macro_rules! claim {
    ($scanners:literal) => {
        concat!(
            "WITH next AS (
                SELECT e.id FROM executions e
                 WHERE e.status = 'queued' AND (",
            $scanners,
            ")   AND NOT EXISTS (SELECT 1 FROM tasks d
                                  WHERE d.id = e.task_id AND d.deleted_at IS NOT NULL)
                 ORDER BY e.created_at, e.id LIMIT 1 FOR UPDATE OF e SKIP LOCKED)
             UPDATE executions e
                SET status = 'running', scanner_id = $1, started_at = now(),
                    attempts = e.attempts + 1,
                    lease_expires_at = now() + make_interval(secs => $2)
               FROM next WHERE e.id = next.id
             RETURNING e.id, e.task_id, e.attempts, e.lease_expires_at"
        )
    };
}

// An unrestricted scanner takes only what is assigned to it: executions_claim_idx by
// scanner_id.
const CLAIM_ASSIGNED: &str = claim!("e.scanner_id = $1");

// A scanner restricted to owner $3 also takes that owner's unassigned executions; both
// arms use executions_claim_idx (scanner_id = $1, scanner_id IS NULL).
const CLAIM_FOR_OWNER: &str = claim!(
    "e.scanner_id = $1
     OR (e.scanner_id IS NULL
         AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = e.task_id AND t.owner_id = $3))"
);

const TASK: &str = "
    UPDATE tasks SET status = CASE WHEN status = 'pending' THEN 'running' ELSE status END
     WHERE id = $1
    RETURNING kind, tags, owner_id, ports";

const TARGETS: &str =
    "SELECT kind, value FROM task_targets WHERE task_id = $1 ORDER BY kind, value";

/// A claim: the execution as the scanner receives it, its id and attempt.
pub struct Claimed {
    pub body: Value,
    pub execution_id: Uuid,
    pub attempt: i32,
}

/// The claimed execution, or `None` when nothing is queued.
pub fn run(
    tx: &mut Tx<'_>,
    scanner: &Scanner,
    config: &Config,
) -> Result<Option<Claimed>, UploadError> {
    let lease = config.scanner.lease.as_secs_f64();
    let claimed = match scanner.owner_id {
        None => tx.query_opt(CLAIM_ASSIGNED, &[&scanner.id, &lease])?,
        Some(owner) => tx.query_opt(CLAIM_FOR_OWNER, &[&scanner.id, &lease, &owner])?,
    };
    let Some(row) = claimed else {
        return Ok(None);
    };
    let (execution_id, task_id, attempt, lease_expires_at): (Uuid, Uuid, i32, DateTime<Utc>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let task = tx.query_one(TASK, &[&task_id])?;
    let (kind, tags, owner_id, ports): (String, Vec<String>, Uuid, Option<String>) =
        (task.get(0), task.get(1), task.get(2), task.get(3));
    if scanner.owner_id.is_some_and(|o| o != owner_id) {
        return Err(UploadError::Forbidden(
            "execution belongs to another owner".into(),
        ));
    }
    let targets: Vec<Value> = tx
        .query(TARGETS, &[&task_id])?
        .iter()
        .map(|r| json!({ "kind": r.get::<_, String>(0), "value": r.get::<_, String>(1) }))
        .collect();
    let body = json!({
        "execution_id": execution_id,
        "task_id": task_id,
        "kind": kind,
        "tags": tags,
        "targets": targets,
        "ports": ports,
        "protocol_version": super::batch::PROTOCOL_VERSION,
        "attempt": attempt,
        "max_attempts": config.scanner.max_attempts,
        "lease_expires_at": super::facts::es_time(&lease_expires_at),
        "lease_seconds": config.scanner.lease.as_secs(),
        "limits": {
            "max_observations": config.server.max_observations,
            "max_body_bytes": config.server.max_body_bytes,
            "max_observation_age_seconds": config.upload.max_observation_age.num_seconds(),
            "max_clock_skew_seconds": config.upload.max_clock_skew.num_seconds(),
        },
    });
    Ok(Some(Claimed {
        body,
        execution_id,
        attempt,
    }))
}
