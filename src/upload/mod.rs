//! The upload write path: a batch is validated, reserved in short transaction A,
//! written to Elasticsearch with no connection held, counted if final, and confirmed in
//! short transaction B; the answer goes out after the commit. Never publishes assets.
//!
//! ```text
//!  auth ─▶ validate ─▶ tx A (reserve) ─▶ enrichment ─▶ facts bulk ─▶ endpoint bulk
//!        ─▶ [final: refresh chunks ─▶ count chunks]
//!        ─▶ tx B (confirm, DNS answers; final: counts, aggregation, DNS children,
//!                 freshness, queues)
//! ```

pub mod abandon;
pub mod batch;
mod batch_fast;
pub mod children;
pub mod claim;
pub mod confirm;
pub mod coverage;
pub mod details;
pub mod error;
pub mod facts;
pub mod final_scope;
pub mod freshness;
pub mod lease;
pub mod lifecycle;
pub mod reserve;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use crate::app::App;
use crate::auth::{self, Scanner};
use crate::db::Stage;
use crate::es::retry::Backoff;
use crate::http::{Reply, Req};
use crate::telemetry::span::UploadSpan;
use children::ChildTargets;
use lifecycle::{ListQuery, Transition};

pub use error::UploadError;
use reserve::Reservation;

/// In-request retries of a transient bulk failure before the scanner is told to retry.
pub const BULK_ATTEMPTS: u32 = 3;
pub const BULK_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(100),
    cap: Duration::from_secs(2),
};

/// Authenticates the scanner of a request in its own short checkout, unless the body
/// reader already did before reading its body.
pub fn authenticate(app: &App, req: &Req) -> Result<Scanner, UploadError> {
    if let Some(scanner) = req.scanner {
        return Ok(scanner);
    }
    let token = req.bearer_token().ok_or(UploadError::Unauthorized)?;
    let mut conn = app.db.checkout(Stage::Auth)?;
    auth::scanner(&mut conn, &token)?.ok_or(UploadError::Unauthorized)
}

/// `POST /api/v1/scanner/executions/claim`.
pub fn claim(app: &App, req: &Req) -> Result<Reply, UploadError> {
    let scanner = authenticate(app, req)?;
    match app.db.in_tx(Stage::ClaimExecution, |tx| {
        claim::run(tx, &scanner, &app.config)
    })? {
        Some(c) => {
            Transition::Claimed.record(c.execution_id, c.attempt);
            Ok(Reply::ok(c.body))
        }
        None => Ok(Reply::empty(204)),
    }
}

/// `POST /api/v1/scanner/executions/{id}/heartbeat`.
pub fn heartbeat(app: &App, req: &Req, execution_id: &str) -> Result<Reply, UploadError> {
    let execution_id = Uuid::parse_str(execution_id).map_err(|_| UploadError::NotFound)?;
    let scanner = authenticate(app, req)?;
    let body = app.db.in_tx(Stage::Lifecycle, |tx| {
        lifecycle::heartbeat(tx, &scanner, execution_id, &app.config)
    })?;
    Ok(Reply::ok(body))
}

/// `POST /api/v1/scanner/executions/{id}/fail`.
pub fn fail(app: &App, req: &Req, execution_id: &str) -> Result<Reply, UploadError> {
    let execution_id = Uuid::parse_str(execution_id).map_err(|_| UploadError::NotFound)?;
    let scanner = authenticate(app, req)?;
    let reason = lifecycle::parse_reason(&req.body)?;
    let failed = app.db.in_tx(Stage::Lifecycle, |tx| {
        lifecycle::fail(tx, &scanner, execution_id, &reason)
    })?;
    if let Some(attempt) = failed.now {
        Transition::FailedByScanner.record(execution_id, attempt);
    }
    Ok(Reply::ok(failed.body))
}

/// `DELETE /api/v1/scanner/executions/{id}/uploads/{upload_id}`.
pub fn abandon(
    app: &App,
    req: &Req,
    execution_id: &str,
    upload_id: &str,
) -> Result<Reply, UploadError> {
    let execution_id = Uuid::parse_str(execution_id).map_err(|_| UploadError::NotFound)?;
    let upload_id = Uuid::parse_str(upload_id).map_err(|_| UploadError::NotFound)?;
    let scanner = authenticate(app, req)?;
    let body = abandon::run(app, &scanner, execution_id, upload_id, &req.request_id)?;
    Ok(Reply::ok(body))
}

/// `GET /api/v1/scanner/executions`.
pub fn list(app: &App, req: &Req) -> Result<Reply, UploadError> {
    let scanner = authenticate(app, req)?;
    let query = ListQuery::parse(&req.query)?;
    let body = app
        .db
        .in_tx(Stage::Lifecycle, |tx| lifecycle::list(tx, &scanner, &query))?;
    Ok(Reply::ok(body))
}

/// `POST /api/v1/scanner/executions/{id}/batches`: the whole write path of one batch,
/// wrapped in its `ScanResultUpload` span.
pub fn batch(app: &App, req: &Req, execution_id: &str) -> Result<Reply, UploadError> {
    let span = UploadSpan::new(&req.request_id);
    let result = write_batch(app, req, execution_id, &span);
    let status = match &result {
        Ok(_) => 200,
        Err(e) => crate::http::error::upload_status(e),
    };
    span.finish(status);
    result
}

fn write_batch(
    app: &App,
    req: &Req,
    execution_id: &str,
    span: &UploadSpan,
) -> Result<Reply, UploadError> {
    let execution_id = Uuid::parse_str(execution_id).map_err(|_| UploadError::NotFound)?;
    span.set("execution_id", execution_id);
    let scanner = span.stage("auth", || authenticate(app, req))?;
    span.set("scanner_id", scanner.id);

    let cfg = &app.config;
    let batch = span.stage("validate", || {
        let window = batch::Window::around(
            chrono::Utc::now(),
            cfg.upload.max_observation_age,
            cfg.upload.max_clock_skew,
        );
        batch::parse(&req.body, cfg.server.max_observations, window)
    })?;
    span.set("upload_id", batch.upload_id);
    span.set("batch_index", batch.batch_index);
    span.set("is_final", batch.is_final);
    span.set("protocol_version", batch.protocol_version);
    span.set("observation_count", batch.observations.len());
    let class = if batch.is_final {
        "final"
    } else if batch.dns_count() > 0 {
        "dns"
    } else {
        "normal"
    };
    span.set("class", class);

    let prefix = &cfg.elasticsearch.index_prefix;
    let refs = facts::storage_references(prefix, &batch);
    final_scope::check_budget(&refs)?;

    // Transaction A; the connection is back in the pool when it returns.
    let lease = cfg.scanner.lease;
    let (execution, reservation) =
        app.db
            .in_spanned_tx(Stage::Reserve, span, "receipt_commit", |tx| {
                reserve::run(tx, span, &scanner, execution_id, &batch, &refs, lease)
            })?;
    let (receipt_id, final_reads, tags, answers) = match reservation {
        Reservation::AlreadyConfirmed => {
            span.set("class", "confirmed_retry");
            return Ok(saved(0));
        }
        Reservation::Write {
            receipt_id,
            final_,
            tags,
            answers,
        } => (receipt_id, final_, tags, answers),
    };

    // Elasticsearch, with no connection held.
    app.ensure_indices()?;
    let owning = facts::Owning {
        execution_id,
        task_id: execution.task_id,
        owner_id: execution.owner_id,
        scanner_id: scanner.id,
    };
    let ops = span.stage("enrichment", || {
        Ok::<_, UploadError>(facts::build(prefix, &owning, &batch, &tags))
    })?;
    send(app, span, &req.request_id, ops)?;
    let final_facts = match &final_reads {
        Some(reads) => {
            let plan = final_scope::plan(prefix, &reads.scope)?;
            let counts = final_scope::run(&app.es, span, &plan, execution_id)?;
            let child_targets = if !execution.task_kind.records_answers() {
                ChildTargets::None
            } else if reads.answers_recorded {
                ChildTargets::Recorded
            } else {
                ChildTargets::Read(span.stage("dns_answers_from_facts", || {
                    children::resolved_addresses(&app.es, &plan, execution_id)
                })?)
            };
            Some(confirm::FinalFacts {
                counts,
                child_targets,
            })
        }
        None => None,
    };

    // Transaction B. Only answers to names within the task's domain targets make a child
    // task (a port scan has none).
    let succeeded = app.db.in_spanned_tx(Stage::Confirm, span, "commit", |tx| {
        confirm::run(
            tx,
            span,
            &execution,
            receipt_id,
            &answers,
            final_facts.as_ref(),
        )
    })?;
    if let Some(attempt) = succeeded {
        Transition::Succeeded.record(execution_id, attempt);
    }
    if final_facts.is_some() {
        // The execution's outbox row is due now: idle publishers take it at once.
        app.projection_wake.ring();
    }
    Ok(saved(batch.observations.len()))
}

/// Sends a batch's facts and endpoint documents. Every operation writes its own document
/// (a fact per position, an endpoint once per batch), so no order among them matters: all
/// requests go out together on the upload sender threads, each under a concurrency permit,
/// and a batch waits for its slowest request, not for their sum (a mixed batch of 1100
/// observations is two facts requests). Each kind's stage ends with its last request.
fn send(app: &App, span: &UploadSpan, trace_id: &str, ops: facts::Ops) -> Result<(), UploadError> {
    let ctx = Arc::new(app.send_context(BULK_ATTEMPTS, BULK_BACKOFF, trace_id));
    let sent = Instant::now();
    let facts = app.upload_senders.write(&ctx, ops.facts, false)?;
    let endpoints = match app.upload_senders.write(&ctx, ops.endpoints, false) {
        Ok(endpoints) => endpoints,
        Err(e) => {
            facts.wait();
            return Err(e.into());
        }
    };
    let (facts, endpoints) = (facts.wait(), endpoints.wait());
    for (stage, written) in [("es_facts_bulk", &facts), ("es_endpoint_bulk", &endpoints)] {
        let took = written.ended.map_or(Duration::ZERO, |at| at - sent);
        span.completed(stage, took, written.result.is_ok());
    }
    facts.result?;
    endpoints.result?;
    Ok(())
}

fn saved(n: usize) -> Reply {
    Reply::ok(json!({ "success": true, "saved": n }))
}
