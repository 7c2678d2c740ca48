//! `scripts/install.sh` into a temporary prefix: the layout, the modes, an idempotent
//! second run that keeps an edited configuration, and the unit checked by
//! `systemd-analyze verify` where it can run.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install.sh")
}

fn install(prefix: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(script())
        .args(["--binary", env!("CARGO_BIN_EXE_scanstore"), "--prefix"])
        .arg(prefix)
        .output()
        .unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn install_lays_out_binary_config_and_unit_with_modes_and_is_idempotent() {
    let root =
        TempDir(std::env::temp_dir().join(format!("scanstore-install-{}", uuid::Uuid::new_v4())));
    let out = install(&root.0);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = |rel: &str| root.0.join(rel);
    assert_eq!(mode(&p("usr/local/bin/scanstore")), 0o755);
    assert_eq!(mode(&p("usr/local/bin/scanstore-client")), 0o755);
    assert_eq!(mode(&p("etc/scanstore")), 0o750);
    assert_eq!(mode(&p("etc/scanstore/scanstore.toml")), 0o640);
    assert_eq!(mode(&p("etc/scanstore/scanstore.env")), 0o600);
    assert_eq!(mode(&p("etc/systemd/system/scanstore.service")), 0o644);
    assert_eq!(
        mode(&p("usr/local/share/doc/scanstore/scanner-api.md")),
        0o644
    );
    assert_eq!(
        std::fs::read_to_string(p("etc/scanstore/scanstore.toml")).unwrap(),
        include_str!("../../../scripts/scanstore.example.toml")
    );
    assert_eq!(
        std::fs::read_to_string(p("etc/systemd/system/scanstore.service")).unwrap(),
        include_str!("../../../scripts/systemd/scanstore.service")
    );
    // The installed binary runs and accepts the installed configuration.
    let check = Command::new(p("usr/local/bin/scanstore"))
        .arg("check-config")
        .arg(p("etc/scanstore/scanstore.toml"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // An operator edits the configuration; a second run keeps it and changes nothing else.
    let edited = "[server]\nlisten = \"0.0.0.0:8080\"\n";
    std::fs::write(p("etc/scanstore/scanstore.toml"), edited).unwrap();
    std::fs::write(
        p("etc/scanstore/scanstore.env"),
        "SCANSTORE_DATABASE_URL=x\n",
    )
    .unwrap();
    let again = install(&root.0);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(said.contains("kept existing"), "{said}");
    assert_eq!(
        std::fs::read_to_string(p("etc/scanstore/scanstore.toml")).unwrap(),
        edited
    );
    assert_eq!(
        std::fs::read_to_string(p("etc/scanstore/scanstore.env")).unwrap(),
        "SCANSTORE_DATABASE_URL=x\n"
    );
    assert_eq!(mode(&p("etc/scanstore/scanstore.toml")), 0o640);
    assert_eq!(mode(&p("usr/local/bin/scanstore")), 0o755);
}

#[test]
fn install_refuses_unknown_arguments_and_a_missing_binary() {
    let out = Command::new("bash")
        .arg(script())
        .arg("--bogus")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument: --bogus"));
    let out = Command::new("bash")
        .arg(script())
        .args([
            "--binary",
            "/nonexistent/scanstore",
            "--prefix",
            "/tmp/unused-scanstore-prefix",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an executable file"));
    let _ = std::fs::remove_dir_all("/tmp/unused-scanstore-prefix");
}

/// The unit as installed, checked by systemd itself. `systemd-analyze verify` needs the
/// ExecStart binary to exist, so it runs on a copy pointing at the installed tree.
#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let Ok(which) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(which.status.success());
    let root =
        TempDir(std::env::temp_dir().join(format!("scanstore-unit-{}", uuid::Uuid::new_v4())));
    let out = install(&root.0);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unit = std::fs::read_to_string(root.0.join("etc/systemd/system/scanstore.service"))
        .unwrap()
        .replace(
            "/usr/local/bin/",
            &format!("{}/usr/local/bin/", root.0.display()),
        )
        .replace(
            "/etc/scanstore/",
            &format!("{}/etc/scanstore/", root.0.display()),
        );
    let dir = root.0.join("verify");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("scanstore.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "systemd-analyze verify: {said}");
    assert!(!said.contains("scanstore.service:"), "warnings: {said}");
}
