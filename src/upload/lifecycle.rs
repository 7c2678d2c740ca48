//! The scanner's side of an execution's life after the claim: heartbeats that renew its
//! lease, failing it with a reason, listing its own executions — and the closed set of
//! transitions, each logged as an event and counted as a metric. Every request is one
//! short transaction under the execution lock.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::error::{conflict, UploadError};
use super::{children, lease, reserve};
use crate::auth::Scanner;
use crate::config::Config;
use crate::db::{Queries, Tx};
use crate::telemetry::metrics::{self, TransitionLabels};
use crate::telemetry::Line;

/// Longest failure reason accepted, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// Most executions one listing page returns.
pub const MAX_LIST_SIZE: usize = 100;

/// How an execution changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// queued → running: a scanner claimed it.
    Claimed,
    /// running → succeeded: its final was committed.
    Succeeded,
    /// running → failed: its scanner said so.
    FailedByScanner,
    /// running → queued: the lease lapsed with claims left.
    Requeued,
    /// running → failed: the lease lapsed on the last claim allowed.
    LeaseExpired,
}

impl Transition {
    fn event(self) -> &'static str {
        match self {
            Transition::Claimed => "ScanExecutionClaimed",
            Transition::Succeeded => "ScanExecutionSucceeded",
            Transition::FailedByScanner => "ScanExecutionFailed",
            Transition::Requeued => "ScanExecutionRequeued",
            Transition::LeaseExpired => "ScanExecutionLeaseExpired",
        }
    }

    fn labels(self) -> TransitionLabels {
        let (to, cause) = match self {
            Transition::Claimed => ("running", "claim"),
            Transition::Succeeded => ("succeeded", "final"),
            Transition::FailedByScanner => ("failed", "scanner"),
            Transition::Requeued => ("queued", "lease_expired"),
            Transition::LeaseExpired => ("failed", "lease_expired"),
        };
        TransitionLabels {
            to: to.into(),
            cause: cause.into(),
        }
    }

    /// The event line and the metric, once the transition has committed. The scanner's
    /// own words (a failure reason) are never logged: they may quote anything.
    pub fn record(self, execution_id: Uuid, attempt: i32) {
        metrics::get()
            .execution_transitions
            .get_or_create(&self.labels())
            .inc();
        Line::new(self.event())
            .field("execution_id", execution_id)
            .field("attempt", attempt)
            .info();
    }
}

// Under the execution lock taken by reserve::lock_execution.
const RENEW: &str = "
    UPDATE executions SET lease_expires_at = now() + make_interval(secs => $2)
     WHERE id = $1
    RETURNING lease_expires_at, attempts";

const FAIL: &str = "
    UPDATE executions
       SET status = 'failed', finished_at = now(), failure_reason = $2, lease_expires_at = NULL
     WHERE id = $1
    RETURNING attempts";

/// A task fails once none of its executions can still succeed and one has failed.
pub const TASK_FAILED: &str = "
    UPDATE tasks SET status = 'failed'
     WHERE id = $1 AND status IN ('pending', 'running')
       AND NOT EXISTS (SELECT 1 FROM executions
                        WHERE task_id = $1 AND status IN ('queued', 'running'))";

const FAILURE_REASON: &str = "SELECT failure_reason FROM executions WHERE id = $1";

/// `POST …/executions/{id}/heartbeat`: the lease lasts `scanner.lease_seconds` from now.
pub fn heartbeat(
    tx: &mut Tx<'_>,
    scanner: &Scanner,
    execution_id: Uuid,
    config: &Config,
) -> Result<Value, UploadError> {
    let (status, _) = reserve::lock_execution(tx, scanner, execution_id)?;
    running(&status)?;
    let row = tx.query_one(RENEW, &[&execution_id, &config.scanner.lease.as_secs_f64()])?;
    let (expires, attempt): (DateTime<Utc>, i32) = (row.get(0), row.get(1));
    Ok(json!({
        "execution_id": execution_id,
        "status": "running",
        "attempt": attempt,
        "lease_expires_at": super::facts::es_time(&expires),
        "lease_seconds": config.scanner.lease.as_secs(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailBody {
    reason: String,
}

/// The reason of a fail request: 1..=1024 bytes of printable text.
pub fn parse_reason(body: &[u8]) -> Result<String, UploadError> {
    let bad = |m: &str| UploadError::Invalid {
        code: "bad_field",
        message: m.to_string(),
    };
    let b: FailBody = serde_json::from_slice(body)
        .map_err(|_| bad("the body must be {\"reason\": \"…\"} and nothing else"))?;
    if b.reason.is_empty() || b.reason.len() > MAX_REASON_BYTES {
        return Err(bad("reason must be 1..=1024 bytes"));
    }
    if b.reason
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(bad("reason must not contain control characters"));
    }
    Ok(b.reason)
}

/// The answer to a fail request, and the attempt it failed when it did so now (to record
/// the transition once the transaction has committed).
pub struct Failed {
    pub body: Value,
    pub now: Option<i32>,
}

/// `POST …/executions/{id}/fail`: the execution ends `failed` with the scanner's reason;
/// its task fails when it has nothing left that could succeed. A repeated fail of an
/// execution that already failed answers the same.
pub fn fail(
    tx: &mut Tx<'_>,
    scanner: &Scanner,
    execution_id: Uuid,
    reason: &str,
) -> Result<Failed, UploadError> {
    let (status, execution) = reserve::lock_execution(tx, scanner, execution_id)?;
    if status == "failed" {
        let reason: Option<String> = tx.query_one(FAILURE_REASON, &[&execution_id])?.get(0);
        return Ok(Failed {
            body: json!({"execution_id": execution_id, "status": "failed", "reason": reason}),
            now: None,
        });
    }
    running(&status)?;
    let attempt: i32 = tx.query_one(FAIL, &[&execution_id, &reason])?.get(0);
    children::forget_recorded(tx, execution_id)?;
    tx.execute(lease::ABANDON_UPLOADS, &[&vec![execution_id]])?;
    tx.execute(TASK_FAILED, &[&execution.task_id])?;
    Ok(Failed {
        body: json!({"execution_id": execution_id, "status": "failed", "reason": reason}),
        now: Some(attempt),
    })
}

fn running(status: &str) -> Result<(), UploadError> {
    if status == "running" {
        Ok(())
    } else {
        Err(conflict(
            "execution_not_running",
            format!("execution is {status}; only a running execution has a lease"),
        ))
    }
}

/// What a listing asks for: `status`, `size` (1..=100, default 50), `after` (the last id
/// of the previous page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub status: Option<&'static str>,
    pub size: usize,
    pub after: Option<Uuid>,
}

impl ListQuery {
    pub fn parse(params: &[(String, String)]) -> Result<ListQuery, UploadError> {
        let bad = |m: String| UploadError::Invalid {
            code: "bad_parameter",
            message: m,
        };
        let mut q = ListQuery {
            status: None,
            size: 50,
            after: None,
        };
        for (k, v) in params {
            match k.as_str() {
                "status" => {
                    q.status = Some(
                        ["queued", "running", "succeeded", "failed"]
                            .into_iter()
                            .find(|s| s == v)
                            .ok_or_else(|| {
                                bad("status must be queued, running, succeeded or failed".into())
                            })?,
                    )
                }
                "size" => {
                    q.size = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIST_SIZE).contains(n))
                        .ok_or_else(|| bad(format!("size must be 1..={MAX_LIST_SIZE}")))?
                }
                "after" => {
                    q.after = Some(
                        Uuid::parse_str(v)
                            .map_err(|_| bad("after must be an execution id".into()))?,
                    )
                }
                _ => return Err(bad(format!("{k} is not a parameter of this listing"))),
            }
        }
        Ok(q)
    }
}

// A scanner's own executions, newest first, through executions_scanner_idx; `after`
// continues below the given execution of this scanner (keyset on created_at, id).
const LIST: &str = "
    SELECT e.id, e.task_id, t.kind, e.status, e.attempts, e.lease_expires_at, e.created_at,
           e.started_at, e.finished_at, e.failure_reason, e.observation_count,
           e.endpoint_count, e.dns_record_count
      FROM executions e JOIN tasks t ON t.id = e.task_id
     WHERE e.scanner_id = $1
       AND ($2::text IS NULL OR e.status = $2)
       AND ($3::uuid IS NULL OR (e.created_at, e.id) <
            (SELECT a.created_at, a.id FROM executions a WHERE a.id = $3 AND a.scanner_id = $1))
     ORDER BY e.created_at DESC, e.id DESC
     LIMIT $4";

/// `GET /api/v1/scanner/executions`: the scanner's own executions.
pub fn list(tx: &mut Tx<'_>, scanner: &Scanner, q: &ListQuery) -> Result<Value, UploadError> {
    let limit = q.size as i64 + 1;
    let mut rows = tx.query(LIST, &[&scanner.id, &q.status, &q.after, &limit])?;
    let more = rows.len() > q.size;
    rows.truncate(q.size);
    let time = |t: Option<DateTime<Utc>>| t.map(|t| super::facts::es_time(&t));
    let executions: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "execution_id": r.get::<_, Uuid>(0),
                "task_id": r.get::<_, Uuid>(1),
                "kind": r.get::<_, String>(2),
                "status": r.get::<_, String>(3),
                "attempt": r.get::<_, i32>(4),
                "lease_expires_at": time(r.get(5)),
                "created_at": time(Some(r.get(6))),
                "started_at": time(r.get(7)),
                "finished_at": time(r.get(8)),
                "failure_reason": r.get::<_, Option<String>>(9),
                "counts": {
                    "observations": r.get::<_, i64>(10),
                    "endpoints": r.get::<_, i64>(11),
                    "dns_records": r.get::<_, i64>(12),
                },
            })
        })
        .collect();
    let next = match (more, rows.last()) {
        (true, Some(last)) => Some(last.get::<_, Uuid>(0)),
        _ => None,
    };
    Ok(json!({"executions": executions, "next_after": next}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Result<ListQuery, UploadError> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ListQuery::parse(&owned)
    }

    #[test]
    fn listing_parameters_are_checked() {
        assert_eq!(q(&[]).unwrap().size, 50);
        assert_eq!(q(&[("status", "failed")]).unwrap().status, Some("failed"));
        for bad in [
            vec![("status", "done")],
            vec![("size", "0")],
            vec![("size", "101")],
            vec![("after", "x")],
            vec![("sort", "id")],
        ] {
            assert!(q(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_reason_is_short_printable_text() {
        assert_eq!(
            parse_reason(br#"{"reason": "nmap exited 1"}"#).unwrap(),
            "nmap exited 1"
        );
        for bad in [
            r#"{"reason": ""}"#.to_string(),
            format!(r#"{{"reason": "{}"}}"#, "x".repeat(1025)),
            r#"{"reason": "a\u0000b"}"#.to_string(),
            r#"{"reason": "x", "more": 1}"#.to_string(),
            "not json".to_string(),
        ] {
            assert!(parse_reason(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
