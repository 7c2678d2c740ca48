//! Shared test support: throwaway databases, in-process scanstore servers and whole stacks,
//! captured logs, the ES emulator process and its control client, the workspace's test
//! tools as programs, the suite's TLS material, publication helpers, scans, the owner's
//! reads and the OpenAPI checker, temp files and waits.

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

/// Polls `cond` until it holds or `limit` passes (then panics with `what`).
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
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
