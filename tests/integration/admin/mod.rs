//! `scripts/scanstore-admin` run as an operator would: `bash` on the script with
//! `SCANSTORE_DATABASE_URL` pointing at a throwaway database, its key=value output parsed,
//! and the rows it wrote (or refused to write) checked in PostgreSQL.

mod backlog;
mod cli;
mod executions;
mod outbox;
mod principals;
mod tags;
mod task_delete;
mod tasks;

use crate::support::db::TestDb;
use std::process::Command;

pub use crate::support::admin::{admin, admin_with_url, admin_without_url, command, Run};

pub fn owner(t: &TestDb, name: &str) -> String {
    admin(t, &["owner", "create", name])
        .ok()
        .get("owner_id")
        .to_string()
}

/// A scanner created through the script (optionally restricted to `owner`); returns its id.
pub fn scanner(t: &TestDb, name: &str, owner: Option<&str>) -> String {
    let mut args = vec!["scanner", "create", name];
    if let Some(o) = owner {
        args.extend(["--owner", o]);
    }
    admin(t, &args).ok().get("scanner_id").to_string()
}

/// A task with one queued execution of a new unrestricted scanner; returns
/// (owner_id, task_id, execution_id).
pub fn queued_execution(t: &TestDb, kind: &str) -> (String, String, String) {
    let o = owner(t, "owner-x");
    let s = scanner(t, "scanner-x", None);
    let r = admin(
        t,
        &[
            "task",
            "create",
            "--owner",
            &o,
            "--kind",
            kind,
            "--target",
            "203.0.113.0/24",
            "--scanner",
            &s,
        ],
    )
    .ok();
    (
        o,
        r.get("task_id").to_string(),
        r.get("execution_id").to_string(),
    )
}

/// The number of rows of `table` (a fixed table name from the test, never input).
pub fn count(t: &TestDb, table: &str) -> i64 {
    t.connect()
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .unwrap()
        .get(0)
}

/// `pg_dump --data-only` of the test database: to prove a value is stored nowhere.
pub fn data_dump(t: &TestDb) -> String {
    let out = Command::new("pg_dump")
        .args(["--data-only", "--no-owner", &t.url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
