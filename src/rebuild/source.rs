//! What a rebuild reads from PostgreSQL: the executions live publication publishes (one
//! outbox row of kind `execution` whose execution succeeded — DNS-only executions have
//! none), the tag changes (outbox rows of kind `tags`), the close runs (kind `close`), and
//! whether live publication has settled. Retention removes the outbox rows of old
//! executions (`pruned_at`), so the whole history also takes those from `executions`. A
//! task being deleted contributes nothing: its deletion run is taking it out of the live
//! view (`crate::forget` reads the same way). Each query is one short statement on a fresh
//! connection.

use postgres::types::Json;

use crate::tags::TagScope;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};

/// One execution to re-publish, or whose close run to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    /// `None` once retention has removed the row (the execution was published long ago).
    pub outbox_id: Option<i64>,
    pub execution_id: Uuid,
    pub owner_id: Uuid,
}

/// One tag change to re-apply.
#[derive(Debug, Clone, PartialEq)]
pub struct TagRow {
    pub outbox_id: i64,
    pub owner_id: Uuid,
    pub scope: TagScope,
}

// In publication order (the outbox id is the order finals committed their rows in), after
// the executions retention pruned (published before every row left; the merge's order
// does not matter anyway). Pruning keeps the execution of a row only once it was
// processed, so a pruned, succeeded, publishing execution is one publication published.
// With $1 set, only rows live publication touched at or after $1, or has not finished:
// what a tick that resolved the aliases before a switch may have written to the old
// version only (never a pruned one). By executions_prune_idx's table and the outbox keys.
const PUBLISHABLE_EXECUTIONS: &str = "
    SELECT o.id, o.execution_id, o.owner_id
      FROM scan_projection_outbox o
      JOIN executions e ON e.id = o.execution_id
      JOIN tasks t ON t.id = e.task_id AND t.deleted_at IS NULL
     WHERE o.kind = 'execution' AND e.status = 'succeeded'
       AND ($1::timestamptz IS NULL OR o.processed_at IS NULL OR o.processed_at >= $1)
    UNION ALL
    SELECT NULL, e.id, t.owner_id
      FROM executions e
      JOIN tasks t ON t.id = e.task_id AND t.deleted_at IS NULL
     WHERE $1::timestamptz IS NULL AND e.pruned_at IS NOT NULL
       AND e.status = 'succeeded' AND t.kind <> 'dns'
     ORDER BY 1 NULLS FIRST, 2";

// In outbox order, as live publication enqueued them (each after its execution's row);
// the order matters, as the first close to apply to a document is the one it keeps.
// Retention keeps close rows for that reason (it removes an execution's own row only).
const CLOSE_RUNS: &str = "
    SELECT o.id, o.closing_execution_id, o.owner_id
      FROM scan_projection_outbox o
      JOIN executions e ON e.id = o.closing_execution_id
      JOIN tasks t ON t.id = e.task_id AND t.deleted_at IS NULL
     WHERE o.kind = 'close'
       AND ($1::timestamptz IS NULL OR o.processed_at IS NULL OR o.processed_at >= $1)
     ORDER BY o.id";

const TAG_CHANGES: &str = "
    SELECT id, owner_id, tag_scope
      FROM scan_projection_outbox
     WHERE kind = 'tags'
       AND ($1::timestamptz IS NULL OR processed_at IS NULL OR processed_at >= $1)
     ORDER BY id";

// Live publication still owes something: a succeeded execution's row, a tags row or a
// close row not yet processed. The oldest is named in the message when waiting gives up.
const UNSETTLED: &str = "
    SELECT count(*), min(o.id)
      FROM scan_projection_outbox o
      LEFT JOIN executions e ON e.id = o.execution_id
     WHERE o.processed_at IS NULL AND (o.kind <> 'execution' OR e.status = 'succeeded')";

// Did live publication finish or start anything since $1 (database time)?
const CHANGED_SINCE: &str = "
    SELECT EXISTS (
        SELECT 1 FROM scan_projection_outbox o
          LEFT JOIN executions e ON e.id = o.execution_id
         WHERE (o.kind <> 'execution' OR e.status = 'succeeded')
           AND (o.processed_at IS NULL OR o.processed_at >= $1 OR o.created_at >= $1))";

pub fn executions(db: &Db, since: Option<DateTime<Utc>>) -> Result<Vec<ExecutionRow>, DbError> {
    execution_rows(db, PUBLISHABLE_EXECUTIONS, since)
}

pub fn close_runs(db: &Db, since: Option<DateTime<Utc>>) -> Result<Vec<ExecutionRow>, DbError> {
    execution_rows(db, CLOSE_RUNS, since)
}

fn execution_rows(
    db: &Db,
    sql: &'static str,
    since: Option<DateTime<Utc>>,
) -> Result<Vec<ExecutionRow>, DbError> {
    let mut conn = db.checkout(Stage::Rebuild)?;
    Ok(conn
        .query(sql, &[&since])?
        .iter()
        .map(|r| ExecutionRow {
            outbox_id: r.get(0),
            execution_id: r.get(1),
            owner_id: r.get(2),
        })
        .collect())
}

pub fn tag_changes(db: &Db, since: Option<DateTime<Utc>>) -> Result<Vec<TagRow>, DbError> {
    let mut conn = db.checkout(Stage::Rebuild)?;
    Ok(conn
        .query(TAG_CHANGES, &[&since])?
        .iter()
        .map(|r| {
            Ok(TagRow {
                outbox_id: r.get(0),
                owner_id: r.get(1),
                scope: r.try_get::<_, Json<TagScope>>(2)?.0,
            })
        })
        .collect::<Result<_, postgres::Error>>()?)
}

/// (rows live publication still owes, the oldest one's outbox id).
pub fn unsettled(db: &Db) -> Result<(i64, Option<i64>), DbError> {
    let mut conn = db.checkout(Stage::Rebuild)?;
    let r = conn.query_one(UNSETTLED, &[])?;
    Ok((r.get(0), r.get(1)))
}

// A task's or an owner's deletion queued at or after $1 (database time), or retention's
// age limit queued or moved on since (its waiting row is updated in place), the first one.
// Reads the outbox once (no index on created_at: one query per switch).
const DELETION_SINCE: &str = "
    SELECT min(id) FROM scan_projection_outbox
     WHERE (kind IN ('forget', 'delete') AND created_at >= $1)
        OR (kind = 'expire' AND updated_at >= $1)";

/// The first deletion run (task, tombstone or age limit) queued at or after `at`, if any.
pub fn deletion_since(db: &Db, at: DateTime<Utc>) -> Result<Option<i64>, DbError> {
    let mut conn = db.checkout(Stage::Rebuild)?;
    Ok(conn.query_one(DELETION_SINCE, &[&at])?.get(0))
}

pub fn changed_since(db: &Db, at: DateTime<Utc>) -> Result<bool, DbError> {
    let mut conn = db.checkout(Stage::Rebuild)?;
    Ok(conn.query_one(CHANGED_SINCE, &[&at])?.get(0))
}

/// The database's clock (leases and `processed_at` use it, so comparisons do too).
pub fn now(db: &Db) -> Result<DateTime<Utc>, DbError> {
    let mut conn = db.checkout(Stage::Rebuild)?;
    Ok(conn.query_one("SELECT now()", &[])?.get(0))
}
