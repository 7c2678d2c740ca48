//! Transaction B of the write path: confirm the receipt and record the batch's DNS
//! answers; for a final also, in the same transaction, the execution's counts and
//! `succeeded`, the task aggregation, DNS child tasks, target freshness, the analysis
//! queue row and the asset publication outbox row (none for DNS-only executions).
//! Holds one pooled connection for one short transaction; never touches Elasticsearch.

use std::net::IpAddr;

use super::children::ChildTargets;
use super::error::{conflict, UploadError};
use super::final_scope::Counts;
use super::reserve::Execution;
use super::{children, freshness};
use crate::db::{Queries, Tx};
use crate::telemetry::span::UploadSpan;

const LOCK_EXECUTION: &str = "SELECT status FROM executions WHERE id = $1 FOR UPDATE";

// In one round trip, under the execution lock (which abandoning takes too): whether the
// receipt's upload was abandoned while its batch was written (null: the receipt itself is
// gone with the upload's pending batches), and if not, the confirm. A repeated confirm
// matches no row and changes nothing (the trigger adds nothing either).
// dns_answers_recorded tells a later final that this batch's answers are in
// execution_dns_answers (recorded in this same transaction).
pub const CONFIRM_RECEIPT: &str = "
    WITH upload AS (
        SELECT s.abandoned_at IS NOT NULL AS abandoned
          FROM scan_upload_receipts r
          JOIN scan_upload_stream s
            ON s.execution_id = r.execution_id AND s.upload_id = r.upload_id
         WHERE r.id = $1),
    confirmed AS (
        UPDATE scan_upload_receipts
           SET status = 'confirmed', confirmed_at = now(), dns_answers_recorded = true
         WHERE id = $1 AND status = 'pending' AND NOT (SELECT abandoned FROM upload))
    SELECT (SELECT abandoned FROM upload)";

// Only the running -> succeeded transition counts, so task aggregation happens once even
// if the final's confirm were replayed.
const EXECUTION_SUCCEEDED: &str = "
    UPDATE executions
       SET status = 'succeeded', finished_at = now(),
           observation_count = $2, endpoint_count = $3,
           dns_record_count = (SELECT coalesce(sum(dns_record_count), 0) FROM scan_upload_receipts
                                WHERE execution_id = $1 AND status = 'confirmed'),
           lease_expires_at = NULL
     WHERE id = $1 AND status = 'running'
    RETURNING dns_record_count, attempts";

// Counters only; whether the task is settled (succeeded) is decided by freshness::apply,
// which also knows about generated child tasks.
const TASK_AGGREGATION: &str = "
    UPDATE tasks
       SET executions_succeeded = executions_succeeded + 1,
           endpoints_total = endpoints_total + $2,
           dns_records_total = dns_records_total + $3,
           last_succeeded_at = now(),
           status = 'running'
     WHERE id = $1";

const ANALYSIS_ROW: &str = "
    INSERT INTO scan_analysis_queue (execution_id) VALUES ($1) ON CONFLICT (execution_id) DO NOTHING";

// One publication row per execution (unique index); a duplicate final adds nothing.
const OUTBOX_ROW: &str = "
    INSERT INTO scan_projection_outbox (kind, execution_id, owner_id)
    VALUES ('execution', $1, $2) ON CONFLICT (execution_id) DO NOTHING";

/// What a final commits besides the receipt.
pub struct FinalFacts {
    pub counts: Counts,
    pub child_targets: ChildTargets,
}

/// Confirms `receipt_id` and records the batch's A/AAAA `answers` (empty for a
/// `port_scan` execution); with `final_facts`, also commits the final's bookkeeping.
/// Returns the execution's attempt when this final made it `succeeded`.
pub fn run(
    tx: &mut Tx<'_>,
    span: &UploadSpan,
    execution: &Execution,
    receipt_id: i64,
    answers: &[IpAddr],
    final_facts: Option<&FinalFacts>,
) -> Result<Option<i32>, UploadError> {
    let status: String = span
        .stage("execution_lock", || {
            tx.query_one(LOCK_EXECUTION, &[&execution.id])
        })?
        .get(0);
    // It may have failed, or gone back to the queue, while this batch was written: then
    // the batch is not kept (its pending receipt is undone with the claim's uploads).
    if status != "running" {
        return Err(conflict(
            "execution_not_running",
            format!("execution became {status} while this batch was written"),
        ));
    }
    let abandoned = span.stage("receipt_confirm", || {
        tx.query_one(CONFIRM_RECEIPT, &[&receipt_id])
            .map(|r| r.get::<_, Option<bool>>(0).unwrap_or(true))
    })?;
    if abandoned {
        return Err(conflict(
            "upload_abandoned",
            "the upload was abandoned while this batch was written; it is not kept",
        ));
    }
    if !answers.is_empty() {
        span.stage("dns_answers", || {
            children::record(tx, execution.id, answers)
        })?;
    }
    let Some(FinalFacts {
        counts,
        child_targets,
    }) = final_facts
    else {
        return Ok(None);
    };
    let transitioned = span.stage("execution_stats", || {
        tx.query_opt(
            EXECUTION_SUCCEEDED,
            &[&execution.id, &counts.observations, &counts.endpoints],
        )
    })?;
    let Some(row) = transitioned else {
        // Already succeeded: a replayed final commits nothing twice.
        return Ok(None);
    };
    let (dns_records, attempt): (i64, i32) = (row.get(0), row.get(1));
    span.stage("task_aggregation", || {
        tx.execute(
            TASK_AGGREGATION,
            &[&execution.task_id, &counts.endpoints, &dns_records],
        )
    })?;
    let recorded;
    let addresses: &[IpAddr] = match child_targets {
        ChildTargets::None => &[],
        ChildTargets::Recorded => {
            recorded = span.stage("dns_answers_read", || {
                children::take_recorded(tx, execution.id)
            })?;
            &recorded
        }
        ChildTargets::Read(from_facts) => {
            span.stage("dns_answers_read", || {
                children::forget_recorded(tx, execution.id)
            })?;
            from_facts
        }
    };
    if !addresses.is_empty() {
        span.stage("dns_children", || {
            children::generate(tx, execution.task_id, execution.id, addresses)
        })?;
    }
    span.stage("target_freshness", || {
        freshness::apply(tx, execution.owner_id, execution.task_id)
    })?;
    span.stage("queues", || enqueue(tx, execution))?;
    Ok(Some(attempt))
}

fn enqueue(tx: &mut Tx<'_>, execution: &Execution) -> Result<(), postgres::Error> {
    tx.execute(ANALYSIS_ROW, &[&execution.id])?;
    // DNS-only executions have no endpoints to publish.
    if execution.task_kind.publishes() {
        tx.execute(OUTBOX_ROW, &[&execution.id, &execution.owner_id])?;
    }
    Ok(())
}
