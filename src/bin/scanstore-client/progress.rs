//! What a terminal sees while an import or a scan runs: input read, hosts, ports and
//! batches; nothing when standard error is no terminal or `--quiet` is given.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Counts of what was sent, shown while it runs and summed up at the end.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub hosts: u64,
    pub ports: u64,
    pub records: u64,
    pub batches: u64,
    pub saved: u64,
}

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `total` input bytes, or a spinner when the size is unknown (a scan).
    pub fn new(total: Option<u64>, quiet: bool) -> Progress {
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner(),
        };
        if quiet || !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        } else {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Progress { bar }
    }

    pub fn update(&self, read: Option<u64>, c: &Counts) {
        if let Some(read) = read {
            self.bar.set_position(read);
        }
        self.bar.set_message(format!(
            "hosts {} · ports {} · batches {}",
            c.hosts, c.ports, c.batches
        ));
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
