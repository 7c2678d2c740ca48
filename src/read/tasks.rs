//! `GET /api/v1/tasks` and `GET /api/v1/tasks/{id}`: an owner's tasks, newest first, with
//! targets, tags, counters and the task-level `projection_status`.
//!
//! The task-level status is the worst of its executions' statuses, "worst" being
//! [`ProjectionStatus::severity`]: `retrying` > `running` > `pending` > `not_started` >
//! `ready` > `not_applicable`. A task without executions is `not_started`. Each execution's
//! status comes from [`status::derive`], the one derivation; this file only feeds it.
//! PostgreSQL only; one short read transaction per request. A task being deleted
//! (`deleted_at` set) is gone: not listed, and 404 like another owner's.

use crate::task::TaskKind;
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, SecondsFormat, Utc};
use postgres::Row;
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::ReadError;
use super::{params, with_owner};
use crate::app::App;
use crate::db::{DbError, Queries, Tx};
use crate::http::request::{Reply, Req};
use crate::projection::status::{self, OutboxState, ProjectionStatus};

/// Page size of the task list.
pub const DEFAULT_SIZE: usize = 50;
pub const MAX_SIZE: usize = 200;
/// Targets shown per task; `targets_total` tells how many there are.
pub const MAX_TARGETS: i64 = 100;

/// A task query: the columns every task answer shows, then `$rest`.
macro_rules! task_sql {
    ($rest:literal) => {
        concat!(
            "SELECT id, kind, status, parent_task_id, tags, executions_total,
                executions_succeeded, endpoints_total, dns_records_total, last_succeeded_at,
                created_at, updated_at FROM tasks ",
            $rest
        )
    };
}

// Index tasks_owner_created_idx (owner_id, created_at); ties on created_at are broken by id.
const FIRST_PAGE: &str = task_sql!(
    "WHERE owner_id = $1 AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT $2"
);
const PAGE_AFTER: &str = task_sql!(
    "WHERE owner_id = $1 AND deleted_at IS NULL AND (created_at, id) < ($3, $4)
     ORDER BY created_at DESC, id DESC LIMIT $2"
);

// Primary key; the owner condition makes another owner's task indistinguishable from none.
const TASK_BY_ID: &str = task_sql!("WHERE id = $1 AND owner_id = $2 AND deleted_at IS NULL");

// At most MAX_TARGETS per task, through the primary key (task_id, kind, value).
const TARGETS: &str = "
    SELECT x.id, t.kind, t.value
      FROM unnest($1::uuid[]) AS x(id)
      CROSS JOIN LATERAL (SELECT kind, value FROM task_targets WHERE task_id = x.id
                           ORDER BY kind, value LIMIT $2) t";
const TARGET_COUNTS: &str = "
    SELECT task_id, count(*) FROM task_targets WHERE task_id = ANY($1) GROUP BY task_id";

// The inputs of status::derive, grouped so a task with many executions yields a handful
// of rows: one per distinct (execution status, outbox state) combination, with a
// representative value of each field and the number of executions in the group.
// Index executions_task_idx; the outbox by its unique execution_id index. An execution
// whose records retention pruned (its outbox row with them) was published: it counts as
// processed when it was pruned.
const PROJECTION_GROUPS: &str = "
    SELECT e.task_id, t.kind, e.status, o.id IS NOT NULL OR e.pruned_at IS NOT NULL,
           max(coalesce(o.processed_at, e.pruned_at)), max(o.lease_expires_at),
           bool_or(o.last_error IS NOT NULL), count(*), now()
      FROM executions e
      JOIN tasks t ON t.id = e.task_id
      LEFT JOIN scan_projection_outbox o ON o.execution_id = e.id
     WHERE e.task_id = ANY($1)
     GROUP BY e.task_id, t.kind, e.status, o.id IS NOT NULL OR e.pruned_at IS NOT NULL,
              coalesce(o.processed_at, e.pruned_at) IS NOT NULL,
              o.lease_expires_at > now(), o.last_error IS NOT NULL";

/// A task's publication summary: the worst status and how many executions have each.
#[derive(Debug, Clone)]
pub struct TaskProjection {
    pub status: ProjectionStatus,
    pub counts: BTreeMap<&'static str, i64>,
}

impl Default for TaskProjection {
    fn default() -> Self {
        TaskProjection {
            status: ProjectionStatus::NotStarted,
            counts: BTreeMap::new(),
        }
    }
}

/// The worst of `statuses` by severity; `not_started` for none.
pub fn worst(statuses: impl IntoIterator<Item = ProjectionStatus>) -> ProjectionStatus {
    statuses
        .into_iter()
        .max_by_key(|s| s.severity())
        .unwrap_or(ProjectionStatus::NotStarted)
}

pub fn projections(
    tx: &mut Tx<'_>,
    task_ids: &[Uuid],
) -> Result<HashMap<Uuid, TaskProjection>, DbError> {
    let mut groups: HashMap<Uuid, Vec<(ProjectionStatus, i64)>> = HashMap::new();
    for r in tx.query(PROJECTION_GROUPS, &[&task_ids])? {
        let kind: TaskKind = r.get(1);
        let execution_status: String = r.get(2);
        let has_row: bool = r.get(3);
        let state = OutboxState {
            processed_at: r.get(4),
            lease_expires_at: r.get(5),
            last_error: r
                .get::<_, Option<bool>>(6)
                .unwrap_or(false)
                .then(String::new),
        };
        let now: DateTime<Utc> = r.get(8);
        let s = status::derive(&execution_status, kind, has_row.then_some(&state), now);
        groups.entry(r.get(0)).or_default().push((s, r.get(7)));
    }
    Ok(groups
        .into_iter()
        .map(|(id, list)| {
            let mut counts = BTreeMap::new();
            for (s, n) in &list {
                *counts.entry(s.as_str()).or_insert(0) += n;
            }
            let status = worst(list.iter().map(|(s, _)| *s));
            (id, TaskProjection { status, counts })
        })
        .collect())
}

fn rfc3339(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, |t| {
        json!(t.to_rfc3339_opts(SecondsFormat::Micros, true))
    })
}

/// JSON of a task row plus its targets and projection summary.
fn task_json(
    r: &Row,
    targets: &HashMap<Uuid, Vec<Value>>,
    target_counts: &HashMap<Uuid, i64>,
    projections: &HashMap<Uuid, TaskProjection>,
) -> Value {
    let id: Uuid = r.get("id");
    let p = projections.get(&id).cloned().unwrap_or_default();
    json!({
        "id": id,
        "kind": r.get::<_, String>("kind"),
        "status": r.get::<_, String>("status"),
        "parent_task_id": r.get::<_, Option<Uuid>>("parent_task_id"),
        "tags": r.get::<_, Vec<String>>("tags"),
        "targets": targets.get(&id).cloned().unwrap_or_default(),
        "targets_total": target_counts.get(&id).copied().unwrap_or(0),
        "counters": {
            "executions_total": r.get::<_, i64>("executions_total"),
            "executions_succeeded": r.get::<_, i64>("executions_succeeded"),
            "endpoints_total": r.get::<_, i64>("endpoints_total"),
            "dns_records_total": r.get::<_, i64>("dns_records_total"),
        },
        "last_succeeded_at": rfc3339(r.get("last_succeeded_at")),
        "created_at": rfc3339(Some(r.get("created_at"))),
        "updated_at": rfc3339(Some(r.get("updated_at"))),
        "projection_status": p.status.as_str(),
        "projection_counts": p.counts,
    })
}

fn tasks_json(tx: &mut Tx<'_>, rows: &[Row]) -> Result<Vec<Value>, DbError> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.get("id")).collect();
    let mut targets: HashMap<Uuid, Vec<Value>> = HashMap::new();
    for r in tx.query(TARGETS, &[&ids, &MAX_TARGETS])? {
        targets.entry(r.get(0)).or_default().push(json!({
            "kind": r.get::<_, String>(1),
            "value": r.get::<_, String>(2),
        }));
    }
    let counts: HashMap<Uuid, i64> = tx
        .query(TARGET_COUNTS, &[&ids])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let projections = projections(tx, &ids)?;
    Ok(rows
        .iter()
        .map(|r| task_json(r, &targets, &counts, &projections))
        .collect())
}

/// `GET /api/v1/tasks?size=&after=`
pub fn list(app: &App, req: &Req) -> Result<Reply, ReadError> {
    let size = params::size(req, DEFAULT_SIZE, MAX_SIZE)?;
    let after = match params::cursor(req, "tasks", 2)? {
        None => None,
        Some(v) => {
            let bad = || ReadError::invalid("bad_cursor", "after is not a cursor of this listing");
            let at = v[0].as_str().ok_or_else(bad)?;
            let at = DateTime::parse_from_rfc3339(at).map_err(|_| bad())?;
            let id = v[1].as_str().and_then(|s| Uuid::parse_str(s).ok());
            Some((at.with_timezone(&Utc), id.ok_or_else(bad)?))
        }
    };
    let (tasks, next) = with_owner(app, req, |tx, owner| {
        let limit = size as i64 + 1;
        let mut rows = match after {
            None => tx.query(FIRST_PAGE, &[&owner.id, &limit])?,
            Some((at, id)) => tx.query(PAGE_AFTER, &[&owner.id, &limit, &at, &id])?,
        };
        let more = rows.len() > size;
        rows.truncate(size);
        let next = match (more, rows.last()) {
            (true, Some(last)) => {
                let at: DateTime<Utc> = last.get("created_at");
                let id: Uuid = last.get("id");
                Some(params::encode_cursor(
                    "tasks",
                    &[
                        json!(at.to_rfc3339_opts(SecondsFormat::Micros, true)),
                        json!(id),
                    ],
                ))
            }
            _ => None,
        };
        Ok((tasks_json(tx, &rows)?, next))
    })?;
    Ok(Reply::ok(json!({ "tasks": tasks, "next": next })))
}

/// `GET /api/v1/tasks/{id}`
pub fn get(app: &App, req: &Req, id: &str) -> Result<Reply, ReadError> {
    let id = params::path_id(id);
    let task = with_owner(app, req, |tx, owner| {
        let id = id?;
        let row = tx
            .query_opt(TASK_BY_ID, &[&id, &owner.id])?
            .ok_or(ReadError::NotFound)?;
        Ok(tasks_json(tx, &[row])?.remove(0))
    })?;
    Ok(Reply::ok(task))
}

/// The task's kind if it belongs to `owner` and is not being deleted (404 otherwise).
pub fn owned_kind(tx: &mut Tx<'_>, task: Uuid, owner: Uuid) -> Result<TaskKind, ReadError> {
    tx.query_opt(
        "SELECT kind FROM tasks WHERE id = $1 AND owner_id = $2 AND deleted_at IS NULL",
        &[&task, &owner],
    )?
    .map(|r| r.get(0))
    .ok_or(ReadError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_follows_severity() {
        use ProjectionStatus::*;
        assert_eq!(worst([]), NotStarted);
        assert_eq!(worst([Ready, NotApplicable]), Ready);
        assert_eq!(worst([Ready, NotStarted]), NotStarted);
        assert_eq!(worst([Ready, Pending, NotStarted]), Pending);
        assert_eq!(worst([Pending, Running]), Running);
        assert_eq!(worst([Running, Retrying, Ready]), Retrying);
        assert_eq!(worst([NotApplicable]), NotApplicable);
    }
}
