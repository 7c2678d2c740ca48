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

    /// Runs stage `a` here and stage `b` on a scoped thread at the same time, for work
    /// that is independent (requests to different indices); each reports its own duration.
    /// Both run to the end; `a`'s error is returned first.
    pub fn stages_together<A, B, E: Send>(
        &self,
        a: (&'static str, impl FnOnce() -> Result<A, E>),
        b: (&'static str, impl FnOnce() -> Result<B, E> + Send),
    ) -> Result<(A, B), E>
    where
        B: Send,
    {
        let (out_a, (elapsed_b, out_b)) = std::thread::scope(|s| {
            let run_b = s.spawn(|| {
                let started = Instant::now();
                let out = b.1();
                (started.elapsed(), out)
            });
            let out_a = self.stage(a.0, a.1);
            match run_b.join() {
                Ok(done) => (out_a, done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        });
        self.completed(b.0, elapsed_b, out_b.is_ok());
        Ok((out_a?, out_b?))
    }

    /// The metric and `ScanWriteStageCompleted` line of one finished stage.
    fn completed(&self, stage: &'static str, elapsed: Duration, success: bool) {
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

    #[test]
    fn stages_together_run_at_the_same_time_and_both_finish() {
        let span = UploadSpan::new("r2");
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        // `a` can only succeed while `b` runs: it waits for `b`'s message.
        let out = span.stages_together(
            ("a", || {
                rx.recv_timeout(std::time::Duration::from_secs(10))
                    .map(|_| 1)
            }),
            ("b", || {
                tx.send(())
                    .map(|_| 2)
                    .map_err(|_| crossbeam_channel::RecvTimeoutError::Disconnected)
            }),
        );
        assert_eq!(out, Ok((1, 2)));
    }

    #[test]
    fn stages_together_return_the_first_error_after_both_ran() {
        let span = UploadSpan::new("r3");
        let ran_b = std::sync::atomic::AtomicBool::new(false);
        let out: Result<((), ()), &str> = span.stages_together(
            ("a", || Err("a failed")),
            ("b", || {
                ran_b.store(true, std::sync::atomic::Ordering::SeqCst);
                Err("b failed")
            }),
        );
        assert_eq!(out, Err("a failed"));
        assert!(ran_b.load(std::sync::atomic::Ordering::SeqCst));
        let out: Result<((), ()), &str> =
            span.stages_together(("a", || Ok(())), ("b", || Err("b failed")));
        assert_eq!(out, Err("b failed"));
    }
}
