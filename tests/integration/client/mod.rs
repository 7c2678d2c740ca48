//! The reference scanner client from outside, run with `cargo test --test integration
//! client:: -- --include-ignored`: imports of masscan and naabu files written in those
//! tools' documented formats, an nmap agent scanning services of the test's own on
//! loopback, resuming after kill -9, retries, refusals and HTTPS with a private CA.

mod agent;
mod import;
mod resume;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use uuid::Uuid;

use crate::support::factory::{self, TaskRun};
use crate::support::read::ok;
use crate::support::secure::{suite_ca, temp_dir};
use crate::support::stack::Stack;

/// The client with the stack's server, scanner token and a journal directory of the test's
/// own; `--quiet`, as under a service manager.
pub fn client(s: &Stack, journal: &Path) -> Command {
    client_for(s.base(), &s.scanner.token, journal)
}

pub fn client_for(base: &str, token: &str, journal: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scanstore-client"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SCANSTORE_URL", base)
        .env("SCANSTORE_SCANNER_TOKEN", token)
        .env("SCANSTORE_JOURNAL_DIR", journal)
        // Trusted when the suite's servers speak HTTPS; unused over HTTP.
        .env("SCANSTORE_CA_FILE", &suite_ca().pem)
        .env("RUST_LOG", "info")
        .arg("--quiet");
    cmd
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run scanstore-client");
    eprintln!(
        "scanstore-client: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A queued execution of a new task of the stack's owner, for the stack's scanner, whose
/// targets are exactly `targets`.
pub fn queued(s: &Stack, kind: &str, targets: &[(&str, &str)]) -> TaskRun {
    factory::task_with_targets(
        &mut s.sql(),
        s.owner.id,
        s.scanner.id,
        kind,
        "queued",
        targets,
    )
}

pub fn execution_status(s: &Stack, execution: Uuid) -> (String, Option<String>) {
    let row = s
        .sql()
        .query_one(
            "SELECT status, failure_reason FROM executions WHERE id = $1",
            &[&execution],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Every endpoint of the task's results, as the owner reads them, in (ip, transport,
/// port) order.
pub fn endpoints(s: &Stack, task: Uuid) -> Vec<Value> {
    let mut all = Vec::new();
    let mut path = format!("/api/v1/tasks/{task}/results?size=500");
    loop {
        let page = ok(s.base(), &s.owner.token, &path);
        for ip in page["ips"].as_array().unwrap() {
            all.extend(ip["endpoints"].as_array().unwrap().iter().cloned());
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/api/v1/tasks/{task}/results?size=500&after={next}"),
            None => return all,
        }
    }
}

/// The fields an endpoint carries from its scanner (not which execution it came from).
pub fn scanned(e: &Value) -> Value {
    let mut e = e.clone();
    if let Some(o) = e.as_object_mut() {
        o.remove("execution_id");
    }
    e
}

/// A fixture file in a fresh directory.
pub fn fixture(name: &str, body: &str) -> PathBuf {
    let path = temp_dir("client-fixture").join(name);
    std::fs::write(&path, body).unwrap();
    path
}
