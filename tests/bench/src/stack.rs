//! The system under test for one scenario: a database (a fresh one in the given cluster,
//! or the given database as is), an ES target (a fresh emulator process, or a real URL),
//! and `scanstore serve` processes started from a generated config, each with its log
//! captured to a file. Everything started here is stopped on drop.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use scanstore::config::DatabaseConfig;
use scanstore::db::Db;
use scanstore::es::access::EsAuth;
use scanstore::es::client::EsClient;
use scanstore::telemetry::secret::Secret;

use postgres::{Client, NoTls};
use uuid::Uuid;

use crate::Opts;

/// A `--tls` run's security: the CA made for it, the certificate the emulator and scanstore
/// serve, and the API key the emulator requires.
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub api_key: String,
}

static TLS: OnceLock<Tls> = OnceLock::new();

/// The run's security, when `--tls` is on.
pub fn tls() -> Option<&'static Tls> {
    TLS.get()
}

/// Makes the CA and certificate in `dir` (`scripts/dev-ca.sh`) and turns security on for
/// everything started and every client made from now on.
pub fn enable_tls(dir: &Path) -> Result<(), String> {
    let made = Command::new("bash")
        .arg("scripts/dev-ca.sh")
        .arg(dir)
        .status()
        .map_err(|e| format!("scripts/dev-ca.sh: {e}"))?;
    if !made.success() {
        return Err("scripts/dev-ca.sh failed (is openssl installed?)".into());
    }
    let api_key = hex::encode(rand::random::<[u8; 24]>());
    let _ = TLS.set(Tls {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
        api_key,
    });
    Ok(())
}

/// What the bench presents to an external cluster (`--es-url`) and trusts it by.
#[derive(Default)]
pub struct External {
    pub api_key: Option<String>,
    pub ca: Option<PathBuf>,
}

static EXTERNAL: OnceLock<External> = OnceLock::new();

/// Sets the external cluster's key and CA for every client made from now on.
pub fn set_external(external: External) {
    let _ = EXTERNAL.set(external);
}

/// The API key the ES target requires: the `--tls` run's own, or the external cluster's.
pub fn es_api_key() -> Option<String> {
    match tls() {
        Some(t) => Some(t.api_key.clone()),
        None => EXTERNAL.get().and_then(|e| e.api_key.clone()),
    }
}

/// The CA every client of the run trusts: the `--tls` run's, or the external cluster's.
pub fn ca_file() -> Option<PathBuf> {
    match tls() {
        Some(t) => Some(t.ca.clone()),
        None => EXTERNAL.get().and_then(|e| e.ca.clone()),
    }
}

/// An Elasticsearch client for the bench's own requests, with the run's key and CA.
pub fn es_client(url: &str, timeout: Duration) -> Result<EsClient, String> {
    let roots = match ca_file() {
        Some(ca) => Some(scanstore::es::access::ca_roots(&ca)?),
        None => None,
    };
    let auth = match es_api_key() {
        Some(key) => EsAuth::ApiKey(Secret::new(key)),
        None if roots.is_none() => return Ok(EsClient::new(url, timeout)),
        None => EsAuth::None,
    };
    Ok(EsClient::with_access(
        url,
        timeout,
        &auth,
        roots.as_ref(),
        None,
    ))
}

/// Seconds the emulator's store lock has been held since it started (`GET
/// /_emulator/store`); `None` from a real cluster, which has no such lock.
pub fn store_lock_held(es_url: &str) -> Option<f64> {
    let es = es_client(es_url, Duration::from_secs(10)).ok()?;
    let r = es
        .request("GET", "/_emulator/store", None)
        .ok()?
        .ok()
        .ok()?;
    r.body["lock_held_ns"].as_u64().map(|ns| ns as f64 / 1e9)
}

/// The `Authorization` header of the bench's own Elasticsearch requests, if any.
pub fn es_authorization() -> Option<String> {
    es_api_key().map(|k| format!("ApiKey {k}"))
}

/// `projection.pages_per_tick` of every scanstore the bench starts: pages a worker publishes
/// of a row per claim before it gives the row back.
pub const PAGES_PER_TICK: usize = 4;

/// What a scenario changes in scanstore's configuration.
#[derive(Clone, Debug)]
pub struct ServeCfg {
    pub pool_size: u32,
    pub workers: usize,
    pub worker_threads: usize,
    pub bulk_max_concurrency: usize,
    pub lease_seconds: u64,
    pub heartbeat_seconds: u64,
    /// The process's nice value (0: the bench's own), as a unit's `Nice=` sets it.
    pub nice: u32,
}

pub struct Database {
    pub url: String,
    admin: Option<(String, String)>,
}

impl Database {
    /// A fresh database in the cluster of `admin_url`, or `url` as is.
    pub fn open(opts: &Opts) -> Result<Database, String> {
        if let Some(url) = &opts.database_url {
            return Ok(Database {
                url: url.clone(),
                admin: None,
            });
        }
        let admin = opts
            .admin_url
            .clone()
            .ok_or("no database: give --admin-url or --database-url")?;
        let name = format!("scanstore_bench_{}", Uuid::new_v4().simple());
        let mut c = Client::connect(&admin, NoTls).map_err(|e| format!("connect {admin}: {e}"))?;
        c.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .map_err(|e| format!("create database: {e}"))?;
        let mut cfg: postgres::Config = admin.parse().map_err(|e| format!("{e}"))?;
        cfg.dbname(&name);
        let host = match cfg.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        let port = cfg.get_ports().first().copied().unwrap_or(5432);
        let user = cfg.get_user().unwrap_or("postgres").to_string();
        let url = match cfg.get_password() {
            Some(p) => format!(
                "postgresql://{user}:{}@{host}:{port}/{name}",
                String::from_utf8_lossy(p)
            ),
            None => format!("postgresql://{user}@{host}:{port}/{name}"),
        };
        Ok(Database {
            url,
            admin: Some((admin, name)),
        })
    }

    pub fn connect(&self) -> Result<Client, String> {
        Client::connect(&self.url, NoTls).map_err(|e| format!("connect: {e}"))
    }

    /// A pool of `pool_size` on this database, its schema brought up to date (as
    /// `scanstore serve` would at start-up) for a scenario that writes rows first.
    pub fn migrated(&self, pool_size: u32) -> Result<Db, String> {
        let db = Db::new(&DatabaseConfig {
            url: self.url.clone(),
            ca_file: None,
            pool_size,
            pool_timeout: Duration::from_secs(30),
        })
        .map_err(|e| e.to_string())?;
        scanstore::db::migrate::run(&db).map_err(|e| format!("migrate: {e}"))?;
        Ok(db)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some((admin, name)) = &self.admin {
            if let Ok(mut c) = Client::connect(admin, NoTls) {
                let _ =
                    c.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"));
            }
        }
    }
}

/// A child process that is stopped (SIGTERM, then SIGKILL) on drop.
pub struct Proc {
    pub child: Child,
    pub url: String,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Peak resident set (VmHWM) in KiB, read from /proc.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        vm_hwm_kib(self.pid())
    }

    /// Graceful stop: SIGTERM and wait (scanstore flushes its log and drains workers).
    pub fn stop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: signals our own child, which has not been reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Starts `cmd`, stderr to `log`, and waits for the first `http(s)://…` URL on its stdout.
fn spawn_announcing(mut cmd: Command, log: &Path, what: &str) -> Result<Proc, String> {
    let err = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(err)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("start {what}: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(at) = line.find("https://").or_else(|| line.find("http://")) {
                let _ = tx.send(line[at..].trim().to_string());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(url) => Ok(Proc { child, url }),
        Err(_) => {
            let _ = child.kill();
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = tail.lines().rev().take(20).collect::<Vec<_>>().join("\n");
            Err(format!(
                "{what} did not announce its URL; log tail:\n{tail}"
            ))
        }
    }
}

/// A fresh emulator process.
pub fn emulator(opts: &Opts, log: &Path, pretouch_mib: usize) -> Result<Proc, String> {
    let mut cmd = Command::new(&opts.emulator_bin);
    cmd.args([
        "--listen",
        "127.0.0.1:0",
        "--threads",
        &opts.emulator_threads.to_string(),
        "--pretouch-mib",
        &pretouch_mib.to_string(),
    ]);
    if let Some(tls) = tls() {
        cmd.arg("--tls-cert")
            .arg(&tls.cert)
            .arg("--tls-key")
            .arg(&tls.key);
        cmd.args(["--api-key", &tls.api_key]);
    }
    crate::cpus::pin_emulator(&mut cmd);
    spawn_announcing(cmd, log, "scanstore-es-emulator")
}

/// Writes the config and starts `scanstore serve`; returns once `/readyz` answers 200.
pub fn scanstore(
    opts: &Opts,
    db: &Database,
    es_url: &str,
    prefix: &str,
    cfg: &ServeCfg,
    dir: &Path,
    name: &str,
) -> Result<Proc, String> {
    let config = dir.join(format!("{name}.toml"));
    let text = format!(
        "# Generated by scanstore-bench; the URLs come from the environment.\n\
         [server]\nlisten = \"127.0.0.1:0\"\nworker_threads = {}\nmax_observations = 5000\nshutdown_grace_seconds = 10\n\
         [database]\npool_size = {}\npool_timeout_ms = 30000\n\
         [elasticsearch]\nindex_prefix = \"{prefix}\"\nbulk_batch_size = {}\nbulk_max_concurrency = {}\n\
         request_timeout_ms = 120000\nbulk_max_bytes = {}\n\
         [projection]\nworkers = {}\nnice = {}\npage_size = {}\n\
         pages_per_tick = {PAGES_PER_TICK}\nlease_seconds = {}\nheartbeat_seconds = {}\n",
        cfg.worker_threads,
        cfg.pool_size,
        opts.bulk_batch_size,
        cfg.bulk_max_concurrency,
        opts.bulk_max_bytes,
        cfg.workers,
        opts.projection_nice,
        opts.page_size,
        cfg.lease_seconds,
        cfg.heartbeat_seconds,
    );
    let text = match tls() {
        Some(tls) => text.replace(
            "[server]\n",
            &format!(
                "[server]\ntls_cert = {:?}\ntls_key = {:?}\n",
                tls.cert.display().to_string(),
                tls.key.display().to_string()
            ),
        ),
        None => text,
    };
    let text = match ca_file() {
        Some(ca) => text.replace(
            "[elasticsearch]\n",
            &format!(
                "[elasticsearch]\nca_file = {:?}\n",
                ca.display().to_string()
            ),
        ),
        None => text,
    };
    std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
    let mut cmd = Command::new(&opts.scanstore_bin);
    if cfg.nice > 0 {
        let nice = cfg.nice as libc::c_int;
        // SAFETY: between fork and exec the child only makes one syscall, which touches
        // no memory; every thread scanstore starts inherits the value.
        unsafe {
            cmd.pre_exec(
                move || match libc::setpriority(libc::PRIO_PROCESS, 0, nice) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                },
            );
        }
    }
    if let Some(key) = es_api_key() {
        cmd.env("SCANSTORE_ES_API_KEY", key);
    }
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .env("SCANSTORE_DATABASE_URL", &db.url)
        .env("SCANSTORE_ES_URL", es_url)
        .env("RUST_LOG", "info");
    let proc = spawn_announcing(cmd, &log_path(dir, name), "scanstore")?;
    let agent = crate::scanner::agent();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = agent.get(format!("{}/readyz", proc.url)).call() {
            if r.status() == 200 {
                return Ok(proc);
            }
        }
        if Instant::now() > deadline {
            return Err("scanstore never became ready".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

/// A live process's peak resident set (VmHWM) in KiB, read from /proc; none once it has
/// exited.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}
