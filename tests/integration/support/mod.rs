//! Shared test support: throwaway databases, in-process scanstore servers and whole stacks,
//! captured logs, the ES emulator process and its control client, the workspace's test
//! tools as programs, the suite's TLS material, publication helpers, scans, the owner's
//! reads and the OpenAPI checker, temp files and waits.

pub mod admin;
pub mod db;
pub mod emulator;
pub mod factory;
pub mod logs;
pub mod openapi;
pub mod publish;
pub mod read;
pub mod scan;
pub mod secure;
pub mod server;
pub mod stack;
pub mod tools;

use std::time::{Duration, Instant};

/// Polls `cond` every 50 ms until it holds (true) or `limit` passes (false): the suite's one
/// way to wait for something it can observe, instead of sleeping for a guessed time.
pub fn poll_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `cond` until it holds, or panics naming `what` once `limit` has passed.
pub fn wait_for(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    assert!(
        poll_until(limit, cond),
        "timed out after {limit:?} waiting for {what}"
    );
}

/// A file in the temp directory, removed on drop.
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// A fresh file named `scanstore-…{suffix}` holding `body`.
    pub fn new(suffix: &str, body: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "scanstore-{}{suffix}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&p, body).unwrap();
        TempFile(p)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A configuration file with the given TOML body.
pub fn config_file(body: &str) -> TempFile {
    TempFile::new(".toml", body)
}
