//! Shared test support: throwaway databases, in-process scanstore servers, captured logs,
//! the ES emulator process and its control client.
#![allow(dead_code)]

pub mod db;
pub mod emulator;
pub mod factory;
pub mod logs;
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
