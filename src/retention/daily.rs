//! The daily retention run inside `scanstore serve`: a thread that now and then asks the
//! database whether a run is due — none completed within `retention.interval_hours`, and
//! none failed or begun within the retry pause — and runs one. Every instance has it; the
//! run's lock lets one of them run at a time, and the recorded runs keep the others from
//! running again the same day.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::db::{DbError, Queries, Stage};
use crate::periodic::{Periodic, Schedule};
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

/// Starts the thread, or nothing when the configuration ages nothing out. The first check
/// comes at start: an instance that was down when a run fell due runs it. A run under way
/// when the thread is stopped ends after its current batch.
pub fn start(app: Arc<App>) -> std::io::Result<Option<Periodic>> {
    if !super::configured(&app) {
        return Ok(None);
    }
    let schedule = Schedule {
        name: "retention",
        every: app.config.retention.check_every,
        at_start: true,
        panicked: "RetentionRunPanicked",
    };
    Periodic::start(schedule, move |stop| match due(&app) {
        // The run logs its outcome, a failure included.
        Ok(true) => {
            let _ = super::run(&app, stop);
        }
        Ok(false) => {}
        Err(e) => Line::new("RetentionCheckFailed").field("error", e).warn(),
    })
    .map(Some)
}

fn due(app: &App) -> Result<bool, DbError> {
    let interval = app.config.retention.interval;
    let pause = RETRY_PAUSE.min(interval);
    let mut conn = app.db.checkout(Stage::Retention)?;
    Ok(conn
        .query_one(DUE, &[&interval.as_secs_f64(), &pause.as_secs_f64()])?
        .get(0))
}
