//! A background thread that runs one job now and then — every interval, optionally once at
//! start — until stopped; a panic in a run is logged and ends that run, not the thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::telemetry::Line;

/// How a job is scheduled.
pub struct Schedule {
    /// The thread's name.
    pub name: &'static str,
    pub every: Duration,
    /// Run once as soon as the thread starts, rather than an interval later.
    pub at_start: bool,
    /// The event logged when a run panics.
    pub panicked: &'static str,
}

/// The running thread; [`Periodic::stop`] ends it after the run under way.
pub struct Periodic {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts the thread; `job` gets the stop flag, so that a long run can end early.
    pub fn start(
        schedule: Schedule,
        mut job: impl FnMut(&AtomicBool) + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(schedule.name.into())
            .spawn(move || {
                let every = schedule.every;
                // A short tick, so that a stop is seen promptly however long the interval.
                let tick = Duration::from_millis(50).min(every);
                let mut waited = if schedule.at_start {
                    every
                } else {
                    Duration::ZERO
                };
                while !flag.load(Ordering::SeqCst) {
                    if waited >= every {
                        waited = Duration::ZERO;
                        if catch_unwind(AssertUnwindSafe(|| job(&flag))).is_err() {
                            Line::new(schedule.panicked).warn();
                        }
                    }
                    std::thread::sleep(tick);
                    waited += tick;
                }
            })?;
        Ok(Periodic {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
