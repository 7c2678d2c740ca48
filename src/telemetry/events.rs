//! The structured log events, each rendered as one `event=Name key=value …` line: the
//! events of the write path, the pool and the publisher as structs (fixed field order,
//! metrics fed as they are emitted), the rest built where they happen with [`Line`]. Only
//! ids, counts, durations, stage names and error classes are ever fields — never tokens,
//! checksums or observation content.

use std::fmt::{self, Write as _};
use std::time::Duration;

use super::metrics;

/// One log line under construction. Values containing spaces, quotes or `=` are quoted
/// so that the line stays machine-splittable.
pub struct Line {
    text: String,
}

impl Line {
    pub fn new(event: &str) -> Line {
        Line {
            text: format!("event={event}"),
        }
    }

    pub fn field(mut self, key: &str, value: impl fmt::Display) -> Line {
        let value = value.to_string();
        let plain = !value.is_empty()
            && !value
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '=' || c.is_control());
        if plain {
            let _ = write!(self.text, " {key}={value}");
        } else {
            let _ = write!(self.text, " {key}={value:?}");
        }
        self
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn info(self) {
        log::info!(target: "scanstore::event", "{}", self.text);
    }

    pub fn warn(self) {
        log::warn!(target: "scanstore::event", "{}", self.text);
    }
}

/// Milliseconds with microsecond resolution, as logged.
pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// A pooled connection was handed out (`wait` = time spent waiting for it).
pub struct ConnectionAcquired<'a> {
    pub stage: &'a str,
    pub wait: Duration,
}

/// Adds the request the thread serves, when it serves one.
fn with_request(line: Line) -> Line {
    match super::context::request_id() {
        Some(id) => line.field("request_id", id),
        None => line,
    }
}

impl ConnectionAcquired<'_> {
    pub fn line(&self) -> Line {
        with_request(
            Line::new("ScanWriteConnectionAcquired")
                .field("stage", self.stage)
                .field("wait_ms", ms(self.wait)),
        )
    }

    pub fn emit(&self) {
        metrics::observe(
            &metrics::get()
                .pool_wait_seconds
                .get_or_create(&metrics::stage(self.stage)),
            self.wait,
        );
        self.line().info()
    }
}

/// A pooled connection went back (`hold` = time it was checked out).
pub struct ConnectionReleased<'a> {
    pub stage: &'a str,
    pub wait: Duration,
    pub hold: Duration,
}

impl ConnectionReleased<'_> {
    pub fn line(&self) -> Line {
        with_request(
            Line::new("ScanWriteConnectionReleased")
                .field("stage", self.stage)
                .field("wait_ms", ms(self.wait))
                .field("hold_ms", ms(self.hold)),
        )
    }

    pub fn emit(&self) {
        metrics::observe(
            &metrics::get()
                .pool_hold_seconds
                .get_or_create(&metrics::stage(self.stage)),
            self.hold,
        );
        self.line().info()
    }
}

/// A checkout gave up after the pool timeout; the request answers 503.
pub struct ConnectionTimedOut<'a> {
    pub stage: &'a str,
    pub wait: Duration,
}

impl ConnectionTimedOut<'_> {
    pub fn line(&self) -> Line {
        Line::new("ScanWriteConnectionTimedOut")
            .field("stage", self.stage)
            .field("wait_ms", ms(self.wait))
    }

    pub fn emit(&self) {
        metrics::get()
            .pool_timeouts
            .get_or_create(&metrics::stage(self.stage))
            .inc();
        self.line().warn()
    }
}

/// An Elasticsearch request is about to go out from a thread that holds a pooled
/// connection (checked out for `stage`): the house rule says this never happens, so the
/// event and its counter stay at zero in a healthy build. The path names indices, never
/// document content.
pub struct EsRequestWithConnectionHeld<'a> {
    pub stage: &'a str,
    pub method: &'a str,
    pub path: &'a str,
}

impl EsRequestWithConnectionHeld<'_> {
    pub fn line(&self) -> Line {
        with_request(
            Line::new("ElasticsearchRequestWithConnectionHeld")
                .field("stage", self.stage)
                .field("method", self.method)
                .field("path", self.path),
        )
    }

    pub fn emit(&self) {
        metrics::get()
            .es_requests_with_connection_held
            .get_or_create(&metrics::stage(self.stage))
            .inc();
        self.line().warn()
    }
}

/// One `_bulk` request finished (after its retries). `queue_wait` is time spent waiting
/// for a concurrency permit, kept apart so that it is never mistaken for scan time.
pub struct BulkCompleted<'a> {
    pub duration: Duration,
    pub queue_wait: Duration,
    pub request: Duration,
    pub backoff: Duration,
    pub attempts: u32,
    pub request_bytes: usize,
    pub operations: usize,
    pub es_took_ms: u64,
    pub success: bool,
    pub trace_id: &'a str,
}

impl BulkCompleted<'_> {
    pub fn line(&self) -> Line {
        Line::new("ElasticsearchBulkCompleted")
            .field("duration_ms", ms(self.duration))
            .field("queue_wait_ms", ms(self.queue_wait))
            .field("request_ms", ms(self.request))
            .field("backoff_ms", ms(self.backoff))
            .field("attempts", self.attempts)
            .field("request_bytes", self.request_bytes)
            .field("operations", self.operations)
            .field("es_took_ms", self.es_took_ms)
            .field("success", self.success)
            .field("trace_id", self.trace_id)
    }

    pub fn emit(&self) {
        let m = metrics::get();
        let outcome = metrics::OutcomeLabels {
            success: self.success.to_string(),
        };
        metrics::observe(&m.bulk_seconds.get_or_create(&outcome), self.duration);
        m.bulk_bytes.observe(self.request_bytes as f64);
        m.bulk_operations.observe(self.operations as f64);
        if self.success {
            self.line().info()
        } else {
            self.line().warn()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquired_line() {
        let l = ConnectionAcquired {
            stage: "reserve",
            wait: Duration::from_micros(1500),
        }
        .line();
        assert_eq!(
            l.text(),
            "event=ScanWriteConnectionAcquired stage=reserve wait_ms=1.500"
        );
    }

    #[test]
    fn released_line() {
        let l = ConnectionReleased {
            stage: "confirm",
            wait: Duration::from_millis(2),
            hold: Duration::from_millis(7),
        }
        .line();
        assert_eq!(
            l.text(),
            "event=ScanWriteConnectionReleased stage=confirm wait_ms=2.000 hold_ms=7.000"
        );
    }

    #[test]
    fn timed_out_line() {
        let l = ConnectionTimedOut {
            stage: "reserve",
            wait: Duration::from_millis(100),
        }
        .line();
        assert_eq!(
            l.text(),
            "event=ScanWriteConnectionTimedOut stage=reserve wait_ms=100.000"
        );
    }

    #[test]
    fn bulk_completed_line() {
        let l = BulkCompleted {
            duration: Duration::from_millis(12),
            queue_wait: Duration::from_millis(1),
            request: Duration::from_millis(10),
            backoff: Duration::ZERO,
            attempts: 1,
            request_bytes: 2048,
            operations: 10,
            es_took_ms: 4,
            success: true,
            trace_id: "r1",
        }
        .line();
        assert_eq!(
            l.text(),
            "event=ElasticsearchBulkCompleted duration_ms=12.000 queue_wait_ms=1.000 request_ms=10.000 \
             backoff_ms=0.000 attempts=1 request_bytes=2048 operations=10 es_took_ms=4 success=true trace_id=r1"
        );
    }

    #[test]
    fn awkward_values_are_quoted() {
        let l = Line::new("X")
            .field("error", "bad thing=1 \"q\"")
            .field("empty", "");
        assert_eq!(l.text(), r#"event=X error="bad thing=1 \"q\"" empty="""#);
    }
}
