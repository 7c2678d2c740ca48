//! `POST /api/v1/scanner/executions/claim`: hands a scanner its oldest queued execution,
//! marking it running, in one short transaction. `SKIP LOCKED` lets concurrent claims of
//! the same scanner take different executions instead of waiting on each other.

use serde_json::{json, Value};
use uuid::Uuid;

use super::error::UploadError;
use crate::auth::Scanner;
use crate::db::{Queries, Tx};

const CLAIM: &str = "
    WITH next AS (
        SELECT id FROM executions
         WHERE scanner_id = $1 AND status = 'queued'
         ORDER BY created_at, id
         LIMIT 1
           FOR UPDATE SKIP LOCKED)
    UPDATE executions e SET status = 'running', started_at = now()
      FROM next WHERE e.id = next.id
    RETURNING e.id, e.task_id";

const TASK: &str = "
    UPDATE tasks SET status = CASE WHEN status = 'pending' THEN 'running' ELSE status END
     WHERE id = $1
    RETURNING kind, tags, owner_id";

const TARGETS: &str =
    "SELECT kind, value FROM task_targets WHERE task_id = $1 ORDER BY kind, value";

/// The claimed execution as the scanner receives it, or `None` when nothing is queued.
pub fn run(tx: &mut Tx<'_>, scanner: &Scanner) -> Result<Option<Value>, UploadError> {
    let Some(row) = tx.query_opt(CLAIM, &[&scanner.id])? else {
        return Ok(None);
    };
    let (execution_id, task_id): (Uuid, Uuid) = (row.get(0), row.get(1));
    let task = tx.query_one(TASK, &[&task_id])?;
    let (kind, tags, owner_id): (String, Vec<String>, Uuid) =
        (task.get(0), task.get(1), task.get(2));
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
    Ok(Some(json!({
        "execution_id": execution_id,
        "task_id": task_id,
        "kind": kind,
        "tags": tags,
        "targets": targets,
        "protocol_version": super::batch::PROTOCOL_VERSION,
    })))
}
