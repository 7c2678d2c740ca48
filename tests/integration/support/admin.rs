//! `scripts/scanstore-admin` from tests: run as an operator would (`bash` on the script, a
//! clean libpq environment, the test database's URL), with its output parsed.

use std::process::{Command, Output};

use super::db::TestDb;

pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/scanstore-admin");

/// One run of the script: exit status, both streams, and the key=value lines of stdout.
pub struct Run {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Every `key=value` line in order (a line's value is everything after the first `=`).
    pub fn pairs(&self) -> Vec<(&str, &str)> {
        self.stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .collect()
    }

    /// The value of the only line with `key`; panics (showing the run) otherwise.
    pub fn get(&self, key: &str) -> &str {
        let found: Vec<&str> = self.all(key);
        assert_eq!(found.len(), 1, "expected one {key}= line\n{self}");
        found[0]
    }

    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs()
            .into_iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn uuid(&self, key: &str) -> uuid::Uuid {
        self.get(key)
            .parse()
            .unwrap_or_else(|e| panic!("{key} is not a UUID ({e})\n{self}"))
    }

    /// Asserts exit status 0 and returns the run.
    pub fn ok(self) -> Self {
        assert_eq!(self.code, Some(0), "expected success\n{self}");
        self
    }

    /// Asserts a non-zero exit, nothing on stdout, and `needle` in the message on stderr.
    pub fn fails_with(self, needle: &str) -> Self {
        assert!(
            self.code.is_some_and(|c| c != 0),
            "expected failure\n{self}"
        );
        assert!(self.stdout.is_empty(), "a failure printed a result\n{self}");
        assert!(
            self.stderr.contains(needle),
            "stderr lacks {needle:?}\n{self}"
        );
        assert!(
            self.stderr.starts_with("scanstore-admin: error: "),
            "unprefixed message\n{self}"
        );
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "$ scanstore-admin {:?}\nexit: {:?}\n--- stdout\n{}--- stderr\n{}",
            self.args, self.code, self.stdout, self.stderr
        )
    }
}

fn finish(args: &[&str], out: Output) -> Run {
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The script with a clean environment for the database: no inherited
/// `SCANSTORE_DATABASE_URL`, no libpq defaults from the test runner.
pub fn command() -> Command {
    let mut c = Command::new("bash");
    c.arg(SCRIPT);
    for var in [
        "SCANSTORE_DATABASE_URL",
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGDATABASE",
        "PGPASSWORD",
        "PGSERVICE",
    ] {
        c.env_remove(var);
    }
    c
}

/// `scanstore-admin ARGS…` against the test database.
pub fn admin(t: &TestDb, args: &[&str]) -> Run {
    let out = command()
        .args(args)
        .env("SCANSTORE_DATABASE_URL", &t.url)
        .output()
        .expect("run bash scripts/scanstore-admin");
    finish(args, out)
}

/// `scanstore-admin ARGS…` with no database URL at all (help, usage errors, --config).
pub fn admin_without_url(args: &[&str]) -> Run {
    let out = command()
        .args(args)
        .output()
        .expect("run bash scripts/scanstore-admin");
    finish(args, out)
}

/// `scanstore-admin ARGS…` with `SCANSTORE_DATABASE_URL=url`.
pub fn admin_with_url(url: &str, args: &[&str]) -> Run {
    let out = command()
        .args(args)
        .env("SCANSTORE_DATABASE_URL", url)
        .output()
        .expect("run bash scripts/scanstore-admin");
    finish(args, out)
}
