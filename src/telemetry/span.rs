//! The `ScanResultUpload` span of one batch request and its `ScanWriteStageCompleted`
//! events. Every stage event repeats the span's identity fields known so far, so stage
//! lines join to their request; a stage that did not finish (error, panic) is recorded
//! with `success=false`.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use super::events::Line;
use super::metrics;

pub struct UploadSpan {
    started: Instant,
    fields: RefCell<Vec<(&'static str, String)>>,
}

impl UploadSpan {
    pub fn new(request_id: &str) -> UploadSpan {
        UploadSpan {
            started: Instant::now(),
            fields: RefCell::new(vec![("request_id", request_id.to_string())]),
        }
    }

    /// Adds or replaces one identity field (scanner_id, task_id, upload_id, …).
    pub fn set(&self, key: &'static str, value: impl ToString) {
        let mut fields = self.fields.borrow_mut();
        let value = value.to_string();
        match fields.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => fields.push((key, value)),
        }
    }

    fn line(&self, event: &str) -> Line {
        self.fields
            .borrow()
            .iter()
            .fold(Line::new(event), |line, (k, v)| line.field(k, v))
    }

    /// Runs one synchronous stage and records its duration and outcome.
    pub fn stage<T, E>(
        &self,
        stage: &'static str,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut guard = StageGuard {
            span: self,
            stage,
            started: Instant::now(),
            success: false,
        };
        let out = f();
        guard.success = out.is_ok();
        out
    }

    /// The metric and `ScanWriteStageCompleted` line of one finished stage (one timed
    /// elsewhere, such as requests sent on other threads).
    pub fn completed(&self, stage: &'static str, elapsed: Duration, success: bool) {
        metrics::observe(
            &metrics::get()
                .stage_seconds
                .get_or_create(&metrics::stage(stage)),
            elapsed,
        );
        self.line("ScanWriteStageCompleted")
            .field("stage", stage)
            .field("duration_us", elapsed.as_micros())
            .field("success", success)
            .info();
    }

    fn get(&self, key: &str) -> Option<String> {
        self.fields
            .borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }

    /// The closing span line: identity, class, HTTP status and total duration.
    pub fn finish(&self, status: u16) {
        let labels = metrics::UploadLabels {
            class: self.get("class").unwrap_or_else(|| "unknown".into()),
            status: status.to_string(),
        };
        let m = metrics::get();
        m.upload_requests.get_or_create(&labels).inc();
        metrics::observe(
            &m.upload_seconds.get_or_create(&labels),
            self.started.elapsed(),
        );
        let line = self
            .line("ScanResultUpload")
            .field("status", status)
            .field("duration_us", self.started.elapsed().as_micros());
        if status >= 500 {
            line.warn()
        } else {
            line.info()
        }
    }
}

struct StageGuard<'a> {
    span: &'a UploadSpan,
    stage: &'static str,
    started: Instant,
    success: bool,
}

impl Drop for StageGuard<'_> {
    fn drop(&mut self) {
        self.span
            .completed(self.stage, self.started.elapsed(), self.success);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_accumulate_and_replace() {
        let span = UploadSpan::new("r1");
        span.set("scanner_id", "s1");
        span.set("batch_index", 3);
        span.set("batch_index", 4);
        assert_eq!(
            span.line("ScanWriteStageCompleted").text(),
            "event=ScanWriteStageCompleted request_id=r1 scanner_id=s1 batch_index=4"
        );
    }

    #[test]
    fn a_failed_stage_passes_its_error_through() {
        let span = UploadSpan::new("r1");
        let r: Result<(), &str> = span.stage("reserve", || Err("no"));
        assert_eq!(r, Err("no"));
        let ok: Result<u8, ()> = span.stage("confirm", || Ok(1));
        assert_eq!(ok, Ok(1));
    }
}
