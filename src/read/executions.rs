//! `GET /api/v1/tasks/{id}/executions`: a task's executions, oldest first, each with its
//! status, counts, timestamps and asset publication progress: `projection_status` (from
//! [`status::derive`]), `processed_endpoints`, `attempts`, phase, next attempt and the last
//! error's *class* (`transient`/`permanent`), never its text. PostgreSQL only.

use crate::task::TaskKind;
use chrono::{DateTime, SecondsFormat, Utc};
use postgres::Row;
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::ReadError;
use super::{params, tasks, with_owner};
use crate::app::App;
use crate::db::Queries;
use crate::http::request::{Reply, Req};
use crate::projection::status::{self, OutboxState};

pub const DEFAULT_SIZE: usize = 50;
pub const MAX_SIZE: usize = 200;

/// An execution page: `$keyset` narrows it to the rows after the cursor.
macro_rules! page_sql {
    ($keyset:literal) => {
        concat!(
            "SELECT e.id, e.scanner_id, e.status, e.observation_count, e.endpoint_count,
                e.dns_record_count, e.created_at, e.started_at, e.finished_at, e.updated_at,
                e.attempts AS execution_attempts, e.lease_expires_at AS execution_lease_expires_at,
                e.failure_reason,
                o.id IS NOT NULL OR e.pruned_at IS NOT NULL AS has_row,
                coalesce(o.processed_at, e.pruned_at) AS processed_at, o.lease_expires_at,
                o.last_error IS NOT NULL AS has_error, o.last_error_class, o.attempts,
                o.processed_endpoints, o.phase, o.available_at,
                c.id IS NOT NULL AS has_close, c.processed_at AS close_processed_at,
                c.lease_expires_at AS close_lease_expires_at,
                c.last_error IS NOT NULL AS close_has_error,
                c.processed_endpoints AS closed_endpoints, now() AS now
           FROM executions e
           LEFT JOIN scan_projection_outbox o ON o.execution_id = e.id
           LEFT JOIN scan_projection_outbox c ON c.closing_execution_id = e.id
          WHERE e.task_id = $1 ",
            $keyset,
            " ORDER BY e.created_at, e.id LIMIT $2"
        )
    };
}

// Index executions_task_idx (task_id, created_at); the outbox by its unique execution_id
// and closing_execution_id indexes. An execution whose records retention pruned (its
// outbox rows with them) was published: it reads as processed when it was pruned.
const FIRST_PAGE: &str = page_sql!("");
const PAGE_AFTER: &str = page_sql!("AND (e.created_at, e.id) > ($3, $4)");

fn time(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, |t| {
        json!(t.to_rfc3339_opts(SecondsFormat::Micros, true))
    })
}

/// An outbox row's state from its columns (processed at, lease expiry, has an error).
fn outbox_state(r: &Row, [processed, lease, error]: [&str; 3]) -> OutboxState {
    OutboxState {
        processed_at: r.get(processed),
        lease_expires_at: r.get(lease),
        last_error: r
            .get::<_, Option<bool>>(error)
            .unwrap_or(false)
            .then(String::new),
    }
}

fn execution_json(r: &Row, task_kind: TaskKind) -> Value {
    let has_row: bool = r.get("has_row");
    let state = outbox_state(r, ["processed_at", "lease_expires_at", "has_error"]);
    let s = status::derive(
        r.get("status"),
        task_kind,
        has_row.then_some(&state),
        r.get("now"),
    );
    let projection = if has_row {
        json!({
            "processed_endpoints": r.get::<_, Option<i64>>("processed_endpoints"),
            "attempts": r.get::<_, Option<i32>>("attempts"),
            "phase": r.get::<_, Option<String>>("phase"),
            "last_error_class": r.get::<_, Option<String>>("last_error_class")
                .or_else(|| state.last_error.as_ref().map(|_| "unknown".to_string())),
            "next_attempt_at": if state.processed_at.is_none() { time(r.get("available_at")) } else { Value::Null },
            "processed_at": time(state.processed_at),
        })
    } else {
        json!({
            "processed_endpoints": 0, "attempts": 0, "phase": null, "last_error_class": null,
            "next_attempt_at": null, "processed_at": null,
        })
    };
    let closing = r.get::<_, bool>("has_close").then(|| {
        let close = outbox_state(
            r,
            [
                "close_processed_at",
                "close_lease_expires_at",
                "close_has_error",
            ],
        );
        let s = status::derive(r.get("status"), task_kind, Some(&close), r.get("now"));
        json!({
            "status": s.as_str(),
            "closed_endpoints": r.get::<_, Option<i64>>("closed_endpoints"),
            "processed_at": time(close.processed_at),
        })
    });
    json!({
        "id": r.get::<_, Uuid>("id"),
        "scanner_id": r.get::<_, Option<Uuid>>("scanner_id"),
        "status": r.get::<_, String>("status"),
        "attempts": r.get::<_, i32>("execution_attempts"),
        "lease_expires_at": time(r.get("execution_lease_expires_at")),
        "failure_reason": r.get::<_, Option<String>>("failure_reason"),
        "counts": {
            "observations": r.get::<_, i64>("observation_count"),
            "endpoints": r.get::<_, i64>("endpoint_count"),
            "dns_records": r.get::<_, i64>("dns_record_count"),
        },
        "created_at": time(Some(r.get("created_at"))),
        "started_at": time(r.get("started_at")),
        "finished_at": time(r.get("finished_at")),
        "updated_at": time(Some(r.get("updated_at"))),
        "projection_status": s.as_str(),
        "closing": closing,
        "projection": projection,
    })
}

/// `GET /api/v1/tasks/{id}/executions?size=&after=`
pub fn list(app: &App, req: &Req, task: &str) -> Result<Reply, ReadError> {
    let task = params::path_id(task);
    let size = params::size(req, DEFAULT_SIZE, MAX_SIZE)?;
    let after = match params::cursor(req, "executions", 2)? {
        None => None,
        Some(v) => {
            let bad = || ReadError::invalid("bad_cursor", "after is not a cursor of this listing");
            let at = v[0]
                .as_str()
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .ok_or_else(bad)?;
            let id = v[1]
                .as_str()
                .and_then(|s| Uuid::parse_str(s).ok())
                .ok_or_else(bad)?;
            Some((at.with_timezone(&Utc), id))
        }
    };
    let (executions, next) = with_owner(app, req, |tx, owner| {
        let task = task?;
        let kind = tasks::owned_kind(tx, task, owner.id)?;
        let limit = size as i64 + 1;
        let mut rows = match after {
            None => tx.query(FIRST_PAGE, &[&task, &limit])?,
            Some((at, id)) => tx.query(PAGE_AFTER, &[&task, &limit, &at, &id])?,
        };
        let more = rows.len() > size;
        rows.truncate(size);
        let next = match (more, rows.last()) {
            (true, Some(last)) => {
                let at: DateTime<Utc> = last.get("created_at");
                Some(params::encode_cursor(
                    "executions",
                    &[
                        json!(at.to_rfc3339_opts(SecondsFormat::Micros, true)),
                        json!(last.get::<_, Uuid>("id")),
                    ],
                ))
            }
            _ => None,
        };
        let list: Vec<Value> = rows.iter().map(|r| execution_json(r, kind)).collect();
        Ok((list, next))
    })?;
    Ok(Reply::ok(json!({ "executions": executions, "next": next })))
}
