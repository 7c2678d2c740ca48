//! The daily retention run inside `scanstore serve`: a thread that now and then asks the
//! database whether a run is due — none completed within `retention.interval_hours`, and
//! none failed or begun within the retry pause — and runs one. Every instance has it; the
//! run's lock lets one of them run at a time, and the recorded runs keep the others from
//! running again the same day.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::app::App;
use crate::db::{DbError, Queries, Stage};
use crate::telemetry::Line;

// Due unless a completed run began within the interval ($1 s), or any run (failed, or
// under way or cut short by a crash) began within the retry pause ($2 s). retention_runs
// has a row a day: no index needed.
const DUE: &str = "
    SELECT NOT EXISTS (
        SELECT 1 FROM retention_runs
         WHERE started_at > now() - make_interval(secs => $1)
           AND (outcome = 'completed' OR started_at > now() - make_interval(secs => $2)))";

/// A failed run is tried again after this long (or the interval, if shorter).
const RETRY_PAUSE: Duration = Duration::from_secs(3600);

/// The running thread.
pub struct Daily {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Daily {
    /// Starts the thread, or nothing when the configuration ages nothing out.
    pub fn start(app: Arc<App>) -> std::io::Result<Option<Daily>> {
        if !super::configured(&app) {
            return Ok(None);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("retention".into())
            .spawn(move || looped(&app, &flag))?;
        Ok(Some(Daily {
            stop,
            thread: Some(thread),
        }))
    }

    /// Stops the thread; a run under way ends after its current batch.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn looped(app: &App, stop: &AtomicBool) {
    let every = app.config.retention.check_every;
    let tick = Duration::from_millis(50).min(every);
    // The first check comes at start: an instance that was down when a run fell due runs it.
    let mut waited = every;
    while !stop.load(Ordering::SeqCst) {
        if waited >= every {
            waited = Duration::ZERO;
            // A panic ends this run, not the daily runs.
            let ran = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
                if due(app).map_err(|e| e.to_string())? {
                    super::run(app, stop).map_err(|e| e.to_string())?;
                }
                Ok(())
            }));
            match ran {
                Ok(Ok(())) => {}
                // The run has logged its own failure; this is a failure to ask.
                Ok(Err(e)) => Line::new("RetentionCheckFailed").field("error", e).warn(),
                Err(_) => Line::new("RetentionRunPanicked").warn(),
            }
        }
        std::thread::sleep(tick);
        waited += tick;
    }
}

fn due(app: &App) -> Result<bool, DbError> {
    let interval = app.config.retention.interval;
    let pause = RETRY_PAUSE.min(interval);
    let mut conn = app.db.checkout(Stage::Retention)?;
    Ok(conn
        .query_one(DUE, &[&interval.as_secs_f64(), &pause.as_secs_f64()])?
        .get(0))
}
