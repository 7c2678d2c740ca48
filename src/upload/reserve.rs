//! Transaction A of the write path: under the execution lock, check the batch's identity
//! against this execution's upload stream only (never the receipt history), check
//! continuity, reserve a `pending` receipt, and for a final collect its index scope.
//! Holds one pooled connection for one short transaction; never touches Elasticsearch.

use crate::task::TaskKind;
use std::net::IpAddr;

use uuid::Uuid;

use super::batch::{Batch, Observation};
use super::coverage::Coverage;
use super::error::{conflict, UploadError};
use super::final_scope::Scope;
use crate::auth::Scanner;
use crate::db::{Queries, Tx};
use crate::tags::{self, Tags};
use crate::telemetry::span::UploadSpan;
use crate::telemetry::Line;

/// The execution a batch belongs to, as read under its lock.
#[derive(Debug, Clone)]
pub struct Execution {
    pub id: Uuid,
    pub task_id: Uuid,
    pub owner_id: Uuid,
    pub task_kind: TaskKind,
}

/// What transaction A decided.
#[derive(Debug, Clone)]
pub enum Reservation {
    /// The same batch was confirmed before: answer `saved: 0`, change nothing.
    AlreadyConfirmed,
    /// Write (a new batch, or a pending one retried) and confirm receipt `receipt_id`;
    /// a final also carries what it reads. `tags` are the owner's tags that apply;
    /// `answers` the batch's DNS answers its confirm records.
    Write {
        receipt_id: i64,
        final_: Option<FinalReads>,
        tags: Tags,
        answers: Vec<IpAddr>,
    },
}

/// What a final reads before transaction B.
#[derive(Debug, Clone)]
pub struct FinalReads {
    /// The indices it refreshes and counts.
    pub scope: Scope,
    /// Every confirmed DNS batch of the execution recorded its answers (always true for
    /// `port_scan`); false only across an upgrade from a release that did not.
    pub answers_recorded: bool,
}

// The execution lock: every transaction A and B of one execution serialises here, which
// is what makes "one final" and "no batch after a final" hold under concurrency. Short.
// With it, whether scanner $2 is still enabled: its token was checked before a large body
// was read, which may take until `server.body_deadline`, and a scanner disabled meanwhile
// must not have the batch reserved.
const LOCK_EXECUTION: &str = "
    SELECT e.status, e.scanner_id, e.task_id, t.owner_id, t.kind,
           EXISTS (SELECT 1 FROM scanners s WHERE s.id = $2 AND NOT s.disabled)
      FROM executions e JOIN tasks t ON t.id = e.task_id
     WHERE e.id = $1
       FOR UPDATE OF e";

// In one round trip, after the lock: the receipt of this batch's identity, through the
// receipts' unique identity index (one row at most), beside each of this execution's
// upload streams (a handful of rows by primary-key prefix). At least one row: the
// receipt's columns repeat on every stream's row, and are null when it is new.
pub const IDENTITY_AND_STREAMS: &str = "
    SELECT r.id, r.checksum, r.is_final, r.observation_count, r.status,
           s.upload_id, s.dirty, s.final_count, s.abandoned
      FROM (SELECT 1) AS one
      LEFT JOIN scan_upload_receipts r
             ON r.execution_id = $1 AND r.upload_id = $2 AND r.stream = $3 AND r.batch_index = $4
      LEFT JOIN (SELECT upload_id, dirty, final_count, abandoned_at IS NOT NULL AS abandoned
                   FROM scan_upload_stream WHERE execution_id = $1) AS s ON true";

// Under the execution lock: every accepted batch keeps the scanner's claim alive (a new
// batch renews it in INSERT_RECEIPT), unless a renewal within the last hundredth of the
// lease already did. lease_expires_at is indexed, so each renewal writes a new row version
// into every index of executions and runs its update trigger; at a batch every few
// milliseconds that made the receipt insert the write path's costliest statement. `$id`
// and `$secs` are the parameters holding the execution and the lease in seconds.
macro_rules! renew_lease {
    ($id:literal, $secs:literal) => {
        concat!(
            "UPDATE executions SET lease_expires_at = now() + make_interval(secs => ",
            $secs,
            ")
              WHERE id = ",
            $id,
            " AND lease_expires_at < now() + make_interval(secs => ",
            $secs,
            "::float8 * 0.99)"
        )
    };
}

const RENEW_LEASE: &str = renew_lease!("$1", "$2");

pub(super) const REPAIR_STREAM: &str = "SELECT 1 FROM scan_upload_stream_repair($1, $2)";

const STREAM: &str = "
    SELECT batch_count, confirmed_count, pending_count, min_batch, max_batch,
           dns_pending_count, dns_max_batch
      FROM scan_upload_stream WHERE execution_id = $1 AND upload_id = $2";

// With the lease renewal of RENEW_LEASE, in the same round trip.
pub const INSERT_RECEIPT: &str = concat!(
    "WITH renewed AS (",
    renew_lease!("$1", "$11"),
    ")
    INSERT INTO scan_upload_receipts
        (execution_id, upload_id, stream, batch_index, is_final, checksum,
         observation_count, endpoint_count, dns_record_count, storage_references)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    RETURNING id"
);

// Answers of batches confirmed by an older release are only in the facts. Runs once per
// final over the execution's receipts (identity index, leading execution_id).
const UNRECORDED_ANSWERS: &str = "
    SELECT EXISTS (SELECT 1 FROM scan_upload_receipts
                    WHERE execution_id = $1 AND status = 'confirmed'
                      AND dns_record_count > 0 AND NOT dns_answers_recorded)";

// The final's scope: indices of the execution's confirmed receipts, every upload's, so
// that its counts agree with what the execution stored; any receipt with observations but
// no references forces the legacy all-history scope.
const CONFIRMED_SCOPE: &str = "
    SELECT coalesce(array_agg(DISTINCT ref) FILTER (WHERE ref IS NOT NULL), '{}'),
           coalesce(bool_or(r.storage_references IS NULL AND r.observation_count > 0), false)
      FROM scan_upload_receipts r
      LEFT JOIN LATERAL unnest(r.storage_references) AS ref ON true
     WHERE r.execution_id = $1 AND r.status = 'confirmed'";

// Every upload stream of the execution, for the final's check that all are complete: a
// handful of rows by primary-key prefix.
const ALL_STREAMS: &str = "
    SELECT upload_id, dirty, batch_count, confirmed_count, pending_count, min_batch, max_batch,
           dns_pending_count, dns_max_batch, abandoned_at IS NOT NULL
      FROM scan_upload_stream WHERE execution_id = $1";

// The receipts of the incomplete uploads, to name their pending and missing batches
// (identity index, leading execution_id and upload_id).
const INCOMPLETE_RECEIPTS: &str = "
    SELECT upload_id, stream, batch_index, status
      FROM scan_upload_receipts
     WHERE execution_id = $1 AND upload_id = ANY($2)
     ORDER BY upload_id, stream, batch_index";

/// Most batch indexes listed per upload and kind in a `final_incomplete` answer.
const LISTED_INDEXES: usize = 100;

pub fn run(
    tx: &mut Tx<'_>,
    span: &UploadSpan,
    scanner: &Scanner,
    execution_id: Uuid,
    batch: &Batch,
    refs: &[String],
    lease: std::time::Duration,
) -> Result<(Execution, Reservation), UploadError> {
    let (status, execution) = span.stage("execution_lock", || {
        lock_execution(tx, scanner, execution_id)
    })?;
    span.set("task_id", execution.task_id);

    let Known {
        receipt: existing,
        streams,
    } = span.stage("upload_identity", || known_receipt(tx, execution_id, batch))?;
    if let Some((_, state)) = &existing {
        if state == "confirmed" {
            return Ok((execution, Reservation::AlreadyConfirmed));
        }
    }
    // The execution's state gates every write, a pending batch's retry included: once it
    // has ended, what it stored is what its counts say, so nothing may be added to it.
    if status != "running" {
        return Err(conflict(
            "execution_not_running",
            format!("execution is {status}; batches are accepted only while it is running"),
        ));
    }
    if existing.is_none() {
        batch.check_window()?;
    }
    // Within the task's targets, or nothing is written (a pending retry was checked when
    // first reserved; the check is repeated, as the targets never shrink).
    let coverage = span.stage("scope", || {
        let coverage = Coverage::load(tx, execution.task_id, execution_id, batch)?;
        coverage.check(batch)?;
        Ok::<_, UploadError>(coverage)
    })?;
    if let Some((id, _)) = existing {
        tx.execute(RENEW_LEASE, &[&execution_id, &lease.as_secs_f64()])?;
        let abandoned = streams
            .iter()
            .any(|s| s.upload_id == batch.upload_id && s.abandoned);
        if abandoned {
            return Err(upload_abandoned());
        }
        let write = write(tx, span, &execution, batch, refs, id, &coverage)?;
        return Ok((execution, write));
    }
    span.stage("upload_stream", || {
        check_streams(tx, execution_id, batch.upload_id, &streams)
    })?;
    if batch.is_final {
        span.stage("final_continuity", || {
            final_continuity(tx, execution_id, batch)
        })?;
    }
    let receipt_id: i64 = span.stage("receipt_reserve", || {
        tx.query_one(
            INSERT_RECEIPT,
            &[
                &execution_id,
                &batch.upload_id,
                &batch.stream.as_str(),
                &(batch.batch_index as i32),
                &batch.is_final,
                &batch.checksum,
                &(batch.observations.len() as i32),
                &(batch.endpoint_count() as i32),
                &(batch.dns_count() as i32),
                &refs,
                &lease.as_secs_f64(),
            ],
        )
        .map(|r| r.get(0))
    })?;
    let write = write(tx, span, &execution, batch, refs, receipt_id, &coverage)?;
    Ok((execution, write))
}

/// The reservation of a batch to write: a final's scope and the tags that apply.
fn write(
    tx: &mut Tx<'_>,
    span: &UploadSpan,
    execution: &Execution,
    batch: &Batch,
    refs: &[String],
    receipt_id: i64,
    coverage: &Coverage,
) -> Result<Reservation, UploadError> {
    let final_ = match batch.is_final {
        true => Some(FinalReads {
            scope: final_scope(tx, execution, batch, refs)?,
            answers_recorded: !execution.task_kind.records_answers()
                || !tx
                    .query_one(UNRECORDED_ANSWERS, &[&execution.id])?
                    .get::<_, bool>(0),
        }),
        false => None,
    };
    let tags = span.stage("tags", || batch_tags(tx, execution, batch))?;
    Ok(Reservation::Write {
        receipt_id,
        final_,
        tags,
        // A port scan's DNS records are facts only: no answers, no child task.
        answers: match execution.task_kind.records_answers() {
            false => Vec::new(),
            true => coverage.answers_of(batch),
        },
    })
}

/// The owner's tags for the batch's addresses and names.
fn batch_tags(
    tx: &mut Tx<'_>,
    execution: &Execution,
    batch: &Batch,
) -> Result<Tags, postgres::Error> {
    let mut ips = Vec::new();
    let mut names = Vec::new();
    for o in &batch.observations {
        match o {
            Observation::Endpoint(e) => ips.push(e.ip.as_str()),
            Observation::Host(h) => ips.push(h.ip.as_str()),
            Observation::Dns(d) => names.push(d.name.as_str()),
        }
    }
    tags::lookup(tx, execution.owner_id, &ips, &names)
}

/// What transaction A reads after the lock: the receipt of this batch's identity (id and
/// status) if it was received before, and the execution's upload streams.
struct Known {
    receipt: Option<(i64, String)>,
    streams: Vec<StreamRow>,
}

/// One upload stream of the execution, as transaction A reads it.
struct StreamRow {
    upload_id: Uuid,
    dirty: bool,
    finals: i32,
    abandoned: bool,
}

/// The receipt of this batch identity, if it was received before with the same content
/// (id and status), and the execution's upload streams; the same identity with other
/// content is a conflict.
fn known_receipt(tx: &mut Tx<'_>, execution_id: Uuid, batch: &Batch) -> Result<Known, UploadError> {
    let rows = tx.query(
        IDENTITY_AND_STREAMS,
        &[
            &execution_id,
            &batch.upload_id,
            &batch.stream.as_str(),
            &(batch.batch_index as i32),
        ],
    )?;
    let streams = rows
        .iter()
        .filter_map(|r| {
            Some(StreamRow {
                upload_id: r.get::<_, Option<Uuid>>(5)?,
                dirty: r.get(6),
                finals: r.get(7),
                abandoned: r.get(8),
            })
        })
        .collect();
    let Some(row) = rows
        .first()
        .filter(|r| r.get::<_, Option<i64>>(0).is_some())
    else {
        return Ok(Known {
            receipt: None,
            streams,
        });
    };
    let (id, checksum, is_final, count, state): (i64, String, bool, i32, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    if checksum != batch.checksum
        || is_final != batch.is_final
        || count as usize != batch.observations.len()
    {
        return Err(conflict(
            "identity_conflict",
            "this batch was received before with different content",
        ));
    }
    Ok(Known {
        receipt: Some((id, state)),
        streams,
    })
}

/// Locks the execution for this scanner: its status and what a batch needs of it. A scanner
/// disabled since its token was checked is refused here.
pub(super) fn lock_execution(
    tx: &mut Tx<'_>,
    scanner: &Scanner,
    execution_id: Uuid,
) -> Result<(String, Execution), UploadError> {
    let row = tx
        .query_opt(LOCK_EXECUTION, &[&execution_id, &scanner.id])?
        .ok_or(UploadError::NotFound)?;
    let (status, scanner_id, task_id, owner_id, task_kind, enabled): (
        String,
        Option<Uuid>,
        Uuid,
        Uuid,
        TaskKind,
        bool,
    ) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
    );
    if !enabled {
        return Err(UploadError::Unauthorized);
    }
    // No scanner: queued again for any scanner of the owner after a lapsed lease.
    let Some(scanner_id) = scanner_id else {
        return Err(conflict(
            "execution_not_running",
            format!("execution is {status}; claim it to work on it"),
        ));
    };
    if scanner_id != scanner.id || scanner.owner_id.is_some_and(|o| o != owner_id) {
        return Err(UploadError::Forbidden(
            "this execution is assigned to another scanner".into(),
        ));
    }
    Ok((
        status,
        Execution {
            id: execution_id,
            task_id,
            owner_id,
            task_kind,
        },
    ))
}

/// Repairs this upload's stream if a receipt deletion marked it dirty, and refuses new
/// batches once any stream of the execution has reserved its final.
fn check_streams(
    tx: &mut Tx<'_>,
    execution_id: Uuid,
    upload_id: Uuid,
    streams: &[StreamRow],
) -> Result<(), UploadError> {
    let mut closed = false;
    for &StreamRow {
        upload_id: stream_upload,
        dirty,
        finals,
        abandoned,
    } in streams
    {
        if abandoned {
            if stream_upload == upload_id {
                return Err(upload_abandoned());
            }
            // An abandoned upload's pending final closes nothing.
            continue;
        }
        if dirty && stream_upload == upload_id {
            tx.query(REPAIR_STREAM, &[&execution_id, &upload_id])?;
            Line::new("ScanUploadStreamRepaired")
                .field("execution_id", execution_id)
                .field("upload_id", upload_id)
                .info();
        }
        closed |= finals > 0;
    }
    if closed {
        return Err(conflict(
            "upload_closed",
            "the final batch was already received; no new batches",
        ));
    }
    Ok(())
}

fn upload_abandoned() -> UploadError {
    conflict(
        "upload_abandoned",
        "this upload was abandoned (by its scanner, or when the execution's lease lapsed); \
         continue under a new upload_id",
    )
}

/// A final is accepted only when main batches 0..index-1 are all confirmed, none is
/// pending, and every DNS sidecar batch is confirmed and inside that range.
fn final_continuity(tx: &mut Tx<'_>, execution_id: Uuid, batch: &Batch) -> Result<(), UploadError> {
    let row = tx.query_opt(STREAM, &[&execution_id, &batch.upload_id])?;
    let index = batch.batch_index as i32;
    let (count, confirmed, pending, min, max, dns_pending, dns_max): (
        i32,
        i32,
        i32,
        Option<i32>,
        Option<i32>,
        i32,
        Option<i32>,
    ) = match &row {
        Some(r) => (
            r.get(0),
            r.get(1),
            r.get(2),
            r.get(3),
            r.get(4),
            r.get(5),
            r.get(6),
        ),
        None => (0, 0, 0, None, None, 0, None),
    };
    let incomplete = |why: String| Err(conflict("final_incomplete", why));
    if pending > 0 {
        return incomplete(format!("{pending} main batches are still pending"));
    }
    let contiguous = count == index
        && confirmed == index
        && (index == 0 || (min == Some(0) && max == Some(index - 1)));
    if !contiguous {
        let needed = match index {
            0 => "no batch before it".to_string(),
            n => format!("batches 0 to {} confirmed", n - 1),
        };
        let has = match (min, max) {
            (Some(lo), Some(hi)) => format!("{count} numbered {lo} to {hi}, {confirmed} confirmed"),
            _ => "none".to_string(),
        };
        return incomplete(format!(
            "final batch {index} needs {needed}; this upload has {has}"
        ));
    }
    if dns_pending > 0 {
        return incomplete(format!(
            "{dns_pending} dns sidecar batches are still pending"
        ));
    }
    if let Some(m) = dns_max.filter(|m| *m > index) {
        return incomplete(format!(
            "dns sidecar batch {m} lies beyond the final batch {index}"
        ));
    }
    other_uploads_complete(tx, execution_id, batch.upload_id)
}

/// The final succeeds the whole execution, so every other upload of it must be complete
/// too: main batches 0..=max all confirmed, no pending DNS sidecar batch, none beyond the
/// main range. Streams marked dirty are repaired first, so their counts are true.
fn other_uploads_complete(
    tx: &mut Tx<'_>,
    execution_id: Uuid,
    final_upload: Uuid,
) -> Result<(), UploadError> {
    let mut rows = tx.query(ALL_STREAMS, &[&execution_id])?;
    let dirty: Vec<Uuid> = rows
        .iter()
        .filter(|r| r.get::<_, bool>(1) && r.get::<_, Uuid>(0) != final_upload)
        .map(|r| r.get(0))
        .collect();
    if !dirty.is_empty() {
        for upload_id in &dirty {
            tx.query(REPAIR_STREAM, &[&execution_id, upload_id])?;
        }
        rows = tx.query(ALL_STREAMS, &[&execution_id])?;
    }
    let incomplete: Vec<(Uuid, bool)> = rows
        .iter()
        .filter(|r| r.get::<_, Uuid>(0) != final_upload)
        .filter(|r| {
            let (count, confirmed, pending): (i32, i32, i32) = (r.get(2), r.get(3), r.get(4));
            let (min, max): (Option<i32>, Option<i32>) = (r.get(5), r.get(6));
            let (dns_pending, dns_max): (i32, Option<i32>) = (r.get(7), r.get(8));
            if r.get::<_, bool>(9) {
                // Abandoned: done once what its pending batches wrote is undone (the
                // abandon request, or the lease sweep, removes them).
                return pending > 0 || dns_pending > 0;
            }
            let main_complete = pending == 0
                && confirmed == count
                && (count == 0 || (min == Some(0) && max == Some(count - 1)));
            let dns_complete =
                dns_pending == 0 && !dns_max.is_some_and(|d| max.map_or(true, |m| d > m));
            !(main_complete && dns_complete)
        })
        .map(|r| (r.get(0), r.get(9)))
        .collect();
    if incomplete.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = incomplete.iter().map(|(u, _)| *u).collect();
    let receipts = tx.query(INCOMPLETE_RECEIPTS, &[&execution_id, &ids])?;
    let details: Vec<serde_json::Value> = incomplete
        .iter()
        .map(|(upload_id, abandoned)| {
            let of = |stream: &str| -> Vec<(i32, String)> {
                receipts
                    .iter()
                    .filter(|r| r.get::<_, Uuid>(0) == *upload_id && r.get::<_, &str>(1) == stream)
                    .map(|r| (r.get(2), r.get(3)))
                    .collect()
            };
            let main = of("main");
            let dns = of("dns");
            let pending = |batches: &[(i32, String)]| -> Vec<i32> {
                batches
                    .iter()
                    .filter(|(_, status)| status == "pending")
                    .map(|(i, _)| *i)
                    .take(LISTED_INDEXES)
                    .collect()
            };
            let max = main.last().map_or(-1, |(i, _)| *i);
            let missing: Vec<i32> = (0..=max)
                .filter(|i| main.binary_search_by_key(i, |(j, _)| *j).is_err())
                .take(LISTED_INDEXES)
                .collect();
            let dns_beyond: Vec<i32> = dns
                .iter()
                .map(|(i, _)| *i)
                .filter(|i| *i > max)
                .take(LISTED_INDEXES)
                .collect();
            serde_json::json!({
                "upload_id": upload_id,
                "pending": pending(&main),
                "missing": missing,
                "dns_pending": pending(&dns),
                "dns_beyond_main": dns_beyond,
                "abandoned": abandoned,
            })
        })
        .collect();
    Err(UploadError::Conflict {
        code: "final_incomplete",
        message: format!(
            "{} other upload(s) of this execution are incomplete; see details",
            incomplete.len()
        ),
        details: Some(serde_json::json!({ "incomplete_uploads": details })),
    })
}

fn final_scope(
    tx: &mut Tx<'_>,
    execution: &Execution,
    batch: &Batch,
    refs: &[String],
) -> Result<Scope, UploadError> {
    let row = tx.query_one(CONFIRMED_SCOPE, &[&execution.id])?;
    let (mut indices, legacy): (Vec<String>, bool) = (row.get(0), row.get(1));
    if legacy {
        Line::new("ScanSummaryLegacyIndexScope")
            .field("execution_id", execution.id)
            .field("upload_id", batch.upload_id)
            .info();
        return Ok(Scope::Legacy);
    }
    indices.extend(refs.iter().cloned());
    indices.sort();
    indices.dedup();
    Ok(Scope::Indices(indices))
}
