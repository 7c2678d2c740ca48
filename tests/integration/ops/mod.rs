//! Operating scanstore: installation under systemd and readiness notification,
//! upgrade of a previous-release database by starting the new binary, and the verified
//! rebuild of the asset projection with its atomic alias switch, switch-back and drop,
//! the indices' configured shards and replicas, and retention.
//! Run with `cargo test --test integration ops:: -- --include-ignored`.

mod install;
mod notify;
mod proxy;
mod rebuild;
mod retention;
mod shards;
mod upgrade;

use crate::support::wait_for;
use crate::support::TempFile;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The `scanstore` binary under test, with the suite's ES API key in its environment.
pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scanstore"));
    crate::support::secure::suite_access().apply(&mut cmd);
    cmd
}

/// A `scanstore serve` child process, SIGTERMed and reaped on drop.
pub struct Served {
    pub child: Child,
    pub base: String,
}

impl Served {
    /// Starts `serve` and waits for its "listening" line (start-up done: migrated, bound).
    pub fn start(config: &TempFile, envs: &[(&str, &str)]) -> Served {
        let mut cmd = bin();
        cmd.args(["serve", "--config"])
            .arg(&config.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("scanstore listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Served { child, base }
    }

    /// SIGTERM, then waits (at most 20 s) for a successful exit.
    pub fn stop(mut self) {
        if self.child.try_wait().unwrap().is_none() {
            term(&self.child);
        }
        let mut status = None;
        wait_for(
            "serve to exit after SIGTERM",
            Duration::from_secs(20),
            || {
                status = self.child.try_wait().unwrap();
                status.is_some()
            },
        );
        assert!(status.unwrap().success(), "exit status {status:?}");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends SIGTERM (the process may have exited already: not an error here).
pub fn term(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}
