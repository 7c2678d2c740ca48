//! Progress of a long rebuild step: a progress bar when stderr is a terminal, otherwise a
//! `RebuildProgress` log line at most every few seconds (systemd journals, CI logs).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::telemetry::Line;

/// How often the non-terminal form logs.
const LOG_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    step: &'static str,
    total: u64,
    done: u64,
    endpoints: u64,
    bar: Option<ProgressBar>,
    logged: Instant,
}

impl Progress {
    pub fn new(step: &'static str, total: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{msg:>12} [{bar:40}] {pos}/{len} executions ({per_sec}, eta {eta})",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(step);
            bar
        });
        Line::new("RebuildStepStarted")
            .field("step", step)
            .field("total", total)
            .info();
        Progress {
            step,
            total,
            done: 0,
            endpoints: 0,
            bar,
            logged: Instant::now(),
        }
    }

    /// One item done, with the endpoints (or documents) it wrote.
    pub fn item(&mut self, endpoints: u64) {
        self.done += 1;
        self.endpoints += endpoints;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None if self.logged.elapsed() >= LOG_EVERY => {
                self.logged = Instant::now();
                self.line("RebuildProgress").info();
            }
            None => {}
        }
    }

    fn line(&self, event: &str) -> Line {
        Line::new(event)
            .field("step", self.step)
            .field("done", self.done)
            .field("total", self.total)
            .field("endpoints", self.endpoints)
    }

    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.line("RebuildStepCompleted").info();
    }
}
