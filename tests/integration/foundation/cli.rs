//! The `scanstore` command line: config checking, migrate, serve with signal shutdown.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::poll_until;
use crate::support::{config_file, db};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_scanstore"))
}

#[test]
fn check_config_refuses_heartbeat_over_a_third_of_the_lease() {
    let f = config_file(
        "[database]\nurl = \"postgresql://x@127.0.0.1/x\"\n[projection]\nheartbeat_seconds = 50\nlease_seconds = 120\n",
    );
    let out = bin().arg("check-config").arg(&f.0).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("projection.heartbeat_seconds"), "{err}");
    assert!(err.contains("projection.lease_seconds"), "{err}");
}

#[test]
fn old_projection_key_names_are_read_with_a_deprecation_warning() {
    let f = config_file(
        "[database]\nurl = \"postgresql://x@127.0.0.1/x\"\n[elasticsearch]\nprojection_page_size = 50\n",
    );
    let out = bin().arg("check-config").arg(&f.0).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("elasticsearch.projection_page_size is deprecated; use projection.page_size"),
        "{err}"
    );
}

#[test]
fn check_config_accepts_the_example() {
    let out = bin()
        .args([
            "check-config",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/scanstore.example.toml"
            ),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn version_flag() {
    let out = bin().arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("scanstore "));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn serve_stops_cleanly_on_sigterm() {
    let t = db::empty();
    let f = config_file(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{}\"\n[elasticsearch]\nurl = \"http://127.0.0.1:9\"\n",
        t.url
    ));
    let migrated = bin()
        .args(["migrate", "--config"])
        .arg(&f.0)
        .output()
        .unwrap();
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let mut child = bin()
        .args(["serve", "--config"])
        .arg(&f.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(
        line.starts_with("scanstore listening on http://127.0.0.1:"),
        "{line}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut status = None;
    if !poll_until(Duration::from_secs(10), || {
        status = child.try_wait().unwrap();
        status.is_some()
    }) {
        let _ = child.kill();
        panic!("serve did not stop within 10 s of SIGTERM");
    }
    assert!(status.unwrap().success(), "exit status {status:?}");
}
