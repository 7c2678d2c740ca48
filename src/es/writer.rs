//! Sends a list of bulk operations: split by count and bytes, each request under a
//! concurrency permit, transient failures retried with backoff (cancellable), every
//! response verified, and one `ElasticsearchBulkCompleted` event per request.

use std::ops::Range;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::bulk::{self, BulkOp};
use super::client::EsClient;
use super::error::{ErrorClass, EsError};
use super::limit::Limiter;
use super::retry::Backoff;
use super::verify::{self, Verified};
use crate::telemetry::events::BulkCompleted;

/// Limits and retry behaviour of one write.
#[derive(Debug, Clone, Copy)]
pub struct WritePolicy {
    pub max_ops: usize,
    pub max_bytes: usize,
    /// Attempts per request (1 = no retry).
    pub attempts: u32,
    pub backoff: Backoff,
}

/// Totals over all requests of one write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    pub requests: usize,
    pub items: usize,
    pub noops: usize,
    pub bytes: usize,
}

impl WriteReport {
    /// Adds another write's requests.
    pub fn add(&mut self, other: &WriteReport) {
        self.requests += other.requests;
        self.items += other.items;
        self.noops += other.noops;
        self.bytes += other.bytes;
    }
}

pub struct Writer<'a> {
    pub es: &'a EsClient,
    pub limiter: &'a Limiter,
    pub policy: WritePolicy,
    /// A message or disconnect here aborts waits at once (lost lease, shutdown).
    pub cancel: Option<&'a Receiver<()>>,
    /// Correlates the events with the caller's request or claim.
    pub trace_id: &'a str,
}

impl Writer<'_> {
    /// Writes every operation, one request after the other, or fails at the first failed
    /// request; a failed write may have applied some requests, which is why every caller's
    /// operations are idempotent. (Requests sent together go through
    /// [`super::senders::Senders::write`].)
    pub fn write(&self, ops: &[BulkOp]) -> Result<WriteReport, EsError> {
        let mut report = WriteReport::default();
        for range in self.requests(ops)? {
            report.add(&self.send(&ops[range], Duration::ZERO)?);
        }
        Ok(report)
    }

    /// The requests `ops` is sent as: consecutive ranges within the policy's limits.
    pub fn requests(&self, ops: &[BulkOp]) -> Result<Vec<Range<usize>>, EsError> {
        bulk::split(ops, self.policy.max_ops, self.policy.max_bytes)
    }

    /// Sends one request of [`Writer::requests`], retrying transient failures; `queued` is
    /// how long it already waited for a thread to send it (counted as queue wait).
    pub fn send(&self, part: &[BulkOp], queued: Duration) -> Result<WriteReport, EsError> {
        let bytes = bulk::body_len(part);
        let verified = self.send_with_retry(part, bytes, queued)?;
        Ok(WriteReport {
            requests: 1,
            items: verified.items,
            noops: verified.noops,
            bytes,
        })
    }

    /// Sends `ops` (`body_len` bytes) as one request, retrying transient failures.
    fn send_with_retry(
        &self,
        ops: &[BulkOp],
        body_len: usize,
        queued: Duration,
    ) -> Result<Verified, EsError> {
        let started = Instant::now();
        let mut queue_wait = queued;
        let mut request_time = Duration::ZERO;
        let mut backoff_time = Duration::ZERO;
        let mut attempt = 0;
        let outcome = loop {
            attempt += 1;
            let permit = self.limiter.acquire();
            queue_wait += permit.waited;
            let sent = Instant::now();
            let body = bulk::BodyReader::new(ops);
            let response = self
                .es
                .post_reader(verify::BULK_PATH, "application/x-ndjson", body_len, body)
                .and_then(|r| r.ok());
            request_time += sent.elapsed();
            // The permit bounds requests to the cluster; checking the answer is this
            // process's own work, so the next request goes out meanwhile.
            drop(permit);
            let result = response.and_then(|r| verify::verify(ops, &r.bytes));
            match result {
                Err(e) if e.class() == ErrorClass::Transient && attempt < self.policy.attempts => {
                    let delay = self.policy.backoff.delay_random(attempt);
                    backoff_time += delay;
                    if self.cancelled_during(delay) {
                        break Err(e);
                    }
                }
                other => break other,
            }
        };
        BulkCompleted {
            duration: queued + started.elapsed(),
            queue_wait,
            request: request_time,
            backoff: backoff_time,
            attempts: attempt,
            request_bytes: body_len,
            operations: ops.len(),
            es_took_ms: outcome.as_ref().map(|v| v.es_took_ms).unwrap_or(0),
            success: outcome.is_ok(),
            trace_id: self.trace_id,
        }
        .emit();
        outcome
    }

    /// Sleeps `delay` unless cancelled first; true when cancelled.
    fn cancelled_during(&self, delay: Duration) -> bool {
        match self.cancel {
            Some(rx) => !matches!(
                rx.recv_timeout(delay),
                Err(crossbeam_channel::RecvTimeoutError::Timeout)
            ),
            None => {
                std::thread::sleep(delay);
                false
            }
        }
    }
}
