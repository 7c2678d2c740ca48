//! The test tools of other workspace crates as programs: `scanstore-es-emulator` and
//! `scanstore-bench`. Cargo builds a package's own binaries for its tests, not other
//! packages', so the first test that needs one builds them (a no-op when they are up to
//! date) into the profile directory this test binary runs from.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The tool crates and their binaries.
const TOOLS: &[(&str, &str)] = &[
    ("scanstore-es-emulator", "scanstore-es-emulator"),
    ("scanstore-bench", "scanstore-bench"),
];

/// `target/<profile>`: the directory above this test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test binary>")
        .to_path_buf()
}

/// Builds every tool once per test process.
fn built() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.arg("build").arg("--quiet");
        for (package, bin) in TOOLS {
            cmd.args(["-p", package, "--bin", bin]);
        }
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        // The target directory this test binary is in, wherever CARGO_TARGET_DIR points.
        if let Some(target) = dir.parent() {
            cmd.arg("--target-dir").arg(target);
        }
        let status = cmd
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build for the test tools");
        assert!(status.success(), "cargo build of the test tools failed");
        dir
    })
}

/// The path of a tool's binary, built if needed.
pub fn bin(name: &str) -> PathBuf {
    assert!(
        TOOLS.iter().any(|(_, b)| *b == name),
        "not a test tool: {name}"
    );
    built().join(name)
}
