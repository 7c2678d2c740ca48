//! Throwaway databases: each test gets its own, cloned from a template migrated once per
//! test process, in the cluster named by `STORAGE_TEST_DATABASE_URL` (which
//! `scripts/test.sh` starts). Dropped (with FORCE) when the handle goes.

use std::sync::{Mutex, OnceLock};

use postgres::{Client, NoTls};

pub const ENV_URL: &str = "STORAGE_TEST_DATABASE_URL";

/// The maintenance URL of the test cluster.
pub fn admin_url() -> String {
    std::env::var(ENV_URL).unwrap_or_else(|_| {
        panic!("{ENV_URL} is not set: run scripts/test.sh, or point it at a disposable PostgreSQL")
    })
}

fn with_database(url: &str, db: &str) -> String {
    let mut cfg: postgres::Config = url.parse().expect("test database URL");
    cfg.dbname(db);
    // Rebuild a URL the pool and psql both understand.
    let host = match cfg.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_string(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let user = cfg.get_user().unwrap_or("postgres");
    match cfg.get_password() {
        Some(p) => format!(
            "postgresql://{user}:{}@{host}:{port}/{db}",
            String::from_utf8_lossy(p)
        ),
        None => format!("postgresql://{user}@{host}:{port}/{db}"),
    }
}

fn admin() -> Client {
    Client::connect(&admin_url(), NoTls).expect("connect to the test cluster")
}

/// Serialises CREATE DATABASE … TEMPLATE, which fails while another copy of the template runs.
static CREATE: Mutex<()> = Mutex::new(());
static TEMPLATE: OnceLock<String> = OnceLock::new();

pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub fn connect(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the test database")
    }

    /// A one-connection scanstore pool on this database.
    pub fn pool(&self) -> scanstore::db::Db {
        pool(&self.url, 1, std::time::Duration::from_secs(30))
    }

    /// Whether scanstore's readiness check finds the current schema here.
    pub fn schema_is_current(&self) -> bool {
        schema_is_current(&self.url)
    }
}

/// A scanstore pool of `size` connections on `url`, waiting at most `timeout` for one.
pub fn pool(url: &str, size: u32, timeout: std::time::Duration) -> scanstore::db::Db {
    let cfg = scanstore::config::DatabaseConfig {
        url: url.to_string(),
        ca_file: None,
        pool_size: size,
        pool_timeout: timeout,
    };
    scanstore::db::Db::new(&cfg).expect("pool")
}

/// Whether scanstore's readiness check finds the current schema at `url`.
pub fn schema_is_current(url: &str) -> bool {
    pool(url, 1, std::time::Duration::from_secs(30))
        .read_tx(scanstore::db::Stage::Health, |tx| {
            scanstore::db::migrate::is_current(tx)
        })
        .expect("schema check")
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&admin_url(), NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            ));
        }
    }
}

fn unique_name(kind: &str) -> String {
    format!("scanstore_{kind}_{}", uuid::Uuid::new_v4().simple())
}

/// An empty database (no schema): for migration and upgrade tests.
pub fn empty() -> TestDb {
    let name = unique_name("t");
    admin()
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .expect("create test database");
    TestDb {
        url: with_database(&admin_url(), &name),
        name,
    }
}

/// A database with the current schema, cloned from a per-process migrated template.
pub fn fresh() -> TestDb {
    let template = TEMPLATE.get_or_init(|| {
        let name = unique_name("tpl");
        admin()
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .expect("create template database");
        let url = with_database(&admin_url(), &name);
        migrate(&url);
        name
    });
    let name = unique_name("t");
    {
        let _guard = CREATE.lock().unwrap_or_else(|p| p.into_inner());
        admin()
            .batch_execute(&format!(
                "CREATE DATABASE \"{name}\" TEMPLATE \"{template}\""
            ))
            .expect("clone template database");
    }
    TestDb {
        url: with_database(&admin_url(), &name),
        name,
    }
}

/// Runs scanstore's embedded migrations against `url` with a one-connection pool that is
/// gone when this returns (a template must have no open connections).
pub fn migrate(url: &str) {
    let db = pool(url, 1, std::time::Duration::from_secs(30));
    scanstore::db::migrate::run(&db).expect("migrate");
}

/// `pg_dump --schema-only` of a database, for schema comparisons.
pub fn schema_dump(url: &str) -> String {
    let out = std::process::Command::new("pg_dump")
        .args(["--schema-only", "--no-owner", "--no-privileges", url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // The dump's header names the server and dump versions, not the schema.
        .filter(|l| {
            !l.starts_with("-- Dumped")
                && !l.starts_with("\\restrict")
                && !l.starts_with("\\unrestrict")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits (at most 20 s) until a session of `c`'s database waits on a lock: a statement
/// blocked behind a transaction the test holds open.
pub fn wait_lock_waiter(c: &mut Client, what: &str) {
    super::wait_for(what, std::time::Duration::from_secs(20), || {
        let waiting: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get(0);
        waiting > 0
    });
}
