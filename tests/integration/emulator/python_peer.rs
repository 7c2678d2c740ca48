//! The official Python `elasticsearch` 8.x client against the emulator (or the real cluster
//! of `STORAGE_TEST_ES_URL`): `tests/python/es_peer_check.py`. Without python3 or the
//! package the test fails when `CI` is set and skips with a printed reason otherwise.

use std::path::Path;
use std::process::Command;

use crate::support::emulator::target;

fn missing(reason: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("python peer check cannot run in CI: {reason}");
    }
    println!("SKIP python_client_talks_to_the_emulator: {reason} (set CI to make this fatal)");
}

#[test]
fn python_client_talks_to_the_emulator() {
    let probe = Command::new("python3")
        .args([
            "-c",
            "import elasticsearch, sys; sys.exit(0 if elasticsearch.__version__[0] == 8 else 3)",
        ])
        .output();
    match probe {
        Err(e) => return missing(&format!("python3 not runnable: {e}")),
        Ok(o) if o.status.code() == Some(3) => {
            return missing(
                "installed elasticsearch package is not 8.x (pip install 'elasticsearch>=8,<9')",
            )
        }
        Ok(o) if !o.status.success() => {
            return missing(
                "python package `elasticsearch` missing (pip install 'elasticsearch>=8,<9')",
            )
        }
        Ok(_) => {}
    }
    let t = target();
    let url = t.es().url().to_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/es_peer_check.py");
    let access = crate::support::secure::suite_access();
    let mut cmd = Command::new("python3");
    if let Some(key) = &access.api_key {
        cmd.env("ES_API_KEY", key);
    }
    if let Some(ca) = &access.ca_file {
        cmd.env("ES_CA_FILE", ca);
    }
    let out = cmd.arg(&script).arg(&url).output().expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "es_peer_check.py failed ({:?}):\n{stdout}\n{stderr}",
        out.status.code()
    );
    assert!(stdout.contains("es_peer_check: ok"), "{stdout}");
}
