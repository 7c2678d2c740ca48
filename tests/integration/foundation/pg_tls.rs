//! PostgreSQL over TLS: a throwaway cluster that accepts TLS connections only, with a
//! certificate for `localhost` made by a CA of the test. scanstore connects with
//! `sslmode=verify-full` and the CA (from `sslrootcert` or `database.ca_file`), migrates and
//! serves over it; libpq's other modes behave as libpq's do; a wrong CA or a wrong host
//! name fails with a message that says so; the admin script reaches the same cluster with
//! the same URL.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use scanstore::config::DatabaseConfig;
use scanstore::db::{Db, Queries, Stage};

use crate::support::secure::{temp_dir, TestCa};
use crate::support::server::{config, got, http, TestServer};

use super::NO_ES;

/// A TLS-only cluster (scripts/pg-cluster.sh with PG_TLS_DIR), stopped on drop.
struct TlsCluster {
    dir: PathBuf,
    port: u16,
    ca: PathBuf,
}

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

impl TlsCluster {
    fn start() -> TlsCluster {
        let dir = temp_dir("pgtls");
        // The cluster's owner (postgres, when the suite runs as root) must reach its files.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ca = TestCa::new(&dir.join("ca"));
        let certs = dir.join("certs");
        ca.issue_for(&certs, "server", &["localhost"]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". {}/scripts/pg-cluster.sh && PG_PRELOAD= PG_TLS_DIR={} pg_start {} {port}",
                repo(),
                certs.display(),
                dir.join("data").display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TlsCluster {
            dir,
            port,
            ca: ca.pem.clone(),
        }
    }

    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgresql://postgres@{host}:{}/postgres?{params}",
            self.port
        )
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg("-c")
            .arg(format!(
                ". {}/scripts/pg-cluster.sh && pg_stop {}",
                repo(),
                self.dir.join("data").display()
            ))
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether one connection opens, and whether it runs over TLS; or the error's text.
fn over_tls(url: &str, ca_file: Option<&Path>) -> Result<bool, String> {
    let db = Db::new(&DatabaseConfig {
        url: url.to_string(),
        ca_file: ca_file.map(Path::to_path_buf),
        pool_size: 1,
        pool_timeout: std::time::Duration::from_secs(2),
    })
    .map_err(|e| e.to_string())?;
    let mut conn = db.checkout(Stage::Read).map_err(|e| e.to_string())?;
    let row = conn
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// The error text of a connection that must fail.
fn refused(url: &str, ca_file: Option<&Path>) -> String {
    match over_tls(url, ca_file) {
        Ok(tls) => panic!("{url} connected (tls: {tls})"),
        Err(e) => e,
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn verify_full_connects_over_tls_and_every_mode_behaves_as_libpq() {
    let c = TlsCluster::start();
    let ca = format!("sslrootcert={}", c.ca.display());
    // verify-full: the chain and the host name.
    let full = c.url("localhost", &format!("sslmode=verify-full&{ca}"));
    assert_eq!(over_tls(&full, None), Ok(true));
    // The CA from database.ca_file instead of the URL.
    let from_config = c.url("localhost", "sslmode=verify-full");
    assert_eq!(over_tls(&from_config, Some(&c.ca)), Ok(true));
    // verify-ca checks the chain only: 127.0.0.1 is not a name on the certificate.
    let by_ip = c.url("127.0.0.1", &format!("sslmode=verify-ca&{ca}"));
    assert_eq!(over_tls(&by_ip, None), Ok(true));
    let e = refused(
        &c.url("127.0.0.1", &format!("sslmode=verify-full&{ca}")),
        None,
    );
    assert!(e.contains("certificate not valid for name"), "{e}");
    // require and prefer encrypt without a CA, as libpq does; disable is refused by the
    // TLS-only server.
    assert_eq!(
        over_tls(&c.url("127.0.0.1", "sslmode=require"), None),
        Ok(true)
    );
    assert_eq!(
        over_tls(&c.url("127.0.0.1", "sslmode=prefer"), None),
        Ok(true)
    );
    let e = refused(&c.url("127.0.0.1", "sslmode=disable"), None);
    assert!(e.contains("no encryption") || e.contains("pg_hba"), "{e}");

    // A wrong CA: refused, and the message names the certificate problem.
    let other = TestCa::new(&c.dir.join("other"));
    let wrong = c.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", other.pem.display()),
    );
    let e = refused(&wrong, None);
    assert!(e.contains("invalid peer certificate"), "{e}");
    // A CA that is not there is caught when the config is read.
    let e = refused(
        &c.url(
            "localhost",
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
        ),
        None,
    );
    assert!(e.contains("/nonexistent/ca.pem"), "{e}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn scanstore_and_the_admin_script_run_on_a_tls_only_database() {
    let c = TlsCluster::start();
    let url = c.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", c.ca.display()),
    );
    // Migrated and served over TLS.
    let server = TestServer::start(config(&url, NO_ES));
    let r = got(http().get(format!("{}/readyz", server.base)).call());
    assert_eq!(r.body["postgres"], "ok", "{}", r.body);
    drop(server);

    // The admin script hands the same URL to psql (libpq reads sslmode itself).
    let admin = |url: &str| {
        Command::new("bash")
            .arg(format!("{}/scripts/scanstore-admin", repo()))
            .args(["owner", "create", "tls-owner"])
            .env("SCANSTORE_DATABASE_URL", url)
            .output()
            .unwrap()
    };
    let out = admin(&url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("owner_id="));
    let db = Db::new(&DatabaseConfig {
        url: url.clone(),
        ca_file: None,
        pool_size: 1,
        pool_timeout: std::time::Duration::from_secs(5),
    })
    .unwrap();
    let mut conn = db.checkout(Stage::Read).unwrap();
    let n: i64 = conn
        .query_one("SELECT count(*) FROM owners WHERE name = 'tls-owner'", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    let out = admin(&c.url("localhost", "sslmode=disable"));
    assert!(!out.status.success(), "psql connected without TLS");

    // With --config: the URL without its CA, and the CA from [database] ca_file.
    let file = c.dir.join("scanstore.toml");
    std::fs::write(
        &file,
        format!(
            "[database]\nurl = {:?}\nca_file = {:?}\n",
            c.url("localhost", "sslmode=verify-full"),
            c.ca.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new("bash")
        .arg(format!("{}/scripts/scanstore-admin", repo()))
        .arg("--config")
        .arg(&file)
        .args(["owner", "create", "tls-owner-2"])
        .env_remove("SCANSTORE_DATABASE_URL")
        .env_remove("PGSSLROOTCERT")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
