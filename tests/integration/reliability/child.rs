//! `scanstore serve` as a child process (the real binary, its own logger), so that a test
//! can `kill -9` it at a chosen point and start a new one on the same database and ES.
//! Its stderr (every log line) goes to a file that the token-leak check reads.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use uuid::Uuid;

use crate::support::poll_until;
use crate::support::server::{http, Got};

/// Settings of a child's config file.
#[derive(Clone)]
pub struct ChildConfig {
    pub db_url: String,
    pub es_url: String,
    pub prefix: String,
    pub workers: u32,
    pub pool_size: u32,
    pub pool_timeout_ms: u64,
    pub worker_threads: u32,
    pub extra_projection: String,
    pub extra_server: String,
    pub request_timeout_ms: u64,
    /// Further sections, appended as they are (`[scanner]\nlease_seconds = 5\n`).
    pub extra_sections: String,
    /// The child's limit of open file descriptors (`RLIMIT_NOFILE`), if set.
    pub nofile: Option<u64>,
}

impl ChildConfig {
    pub fn new(db_url: &str, es_url: &str, prefix: &str) -> ChildConfig {
        ChildConfig {
            db_url: db_url.into(),
            es_url: es_url.into(),
            prefix: prefix.into(),
            workers: 1,
            pool_size: 4,
            pool_timeout_ms: 5000,
            worker_threads: 8,
            extra_projection: String::new(),
            extra_server: String::new(),
            request_timeout_ms: 10_000,
            extra_sections: String::new(),
            nofile: None,
        }
    }

    fn toml(&self) -> String {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworker_threads = {}\nshutdown_grace_seconds = 2\n{}\n\
             [database]\nurl = \"{}\"\npool_size = {}\npool_timeout_ms = {}\n\
             [elasticsearch]\nurl = \"{}\"\nindex_prefix = \"{}\"\nrequest_timeout_ms = {}\n{}\
             [projection]\nworkers = {}\nlease_seconds = 10\nheartbeat_seconds = 3\n{}\n{}",
            self.worker_threads,
            self.extra_server,
            self.db_url,
            self.pool_size,
            self.pool_timeout_ms,
            self.es_url,
            self.prefix,
            self.request_timeout_ms,
            crate::support::secure::suite_access().toml(),
            self.workers,
            self.extra_projection,
            self.extra_sections
        )
    }
}

/// Directory for child logs: `target/reliability-logs/` (kept for the leak scan).
pub fn log_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/reliability-logs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub struct Serve {
    child: Option<Child>,
    pub base: String,
    config: PathBuf,
    log: PathBuf,
}

impl Serve {
    /// Writes the config (mode 0600) and starts `scanstore serve`; returns once it listens.
    pub fn start(cfg: &ChildConfig) -> Serve {
        let id = Uuid::new_v4().simple().to_string();
        let config = std::env::temp_dir().join(format!("scanstore-rel-{id}.toml"));
        std::fs::write(&config, cfg.toml()).unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
        let log = log_dir().join(format!("serve-{id}.log"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_scanstore"));
        crate::support::secure::suite_access().apply(&mut command);
        if let Some(n) = cfg.nofile {
            // SAFETY: setrlimit is async-signal-safe, as pre_exec requires.
            unsafe {
                command.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: n,
                        rlim_max: n,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = command
            .args(["serve", "--config"])
            .arg(&config)
            .env("RUST_LOG", "info")
            .env_remove("SCANSTORE_DATABASE_URL")
            .env_remove("SCANSTORE_ES_URL")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn scanstore serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("scanstore listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "serve did not start: {line:?}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
            .to_string();
        Serve {
            child: Some(child),
            base,
            config,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: no shutdown code runs, open transactions die with the connections.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Resident memory of the child in KiB (`VmRSS` of /proc/PID/status).
    pub fn rss_kib(&self) -> u64 {
        self.status_field("VmRSS:")
    }

    /// The child's thread count (`Threads` of /proc/PID/status).
    pub fn threads(&self) -> u64 {
        self.status_field("Threads:")
    }

    fn status_field(&self, name: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Sends the signal `name` (`HUP`, `TERM`, ...).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name}");
    }

    /// Still running (neither exited nor a zombie).
    pub fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("State:") && !l.contains('Z'))
            })
            .unwrap_or(false)
    }

    /// Everything the child has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            poll_until(Duration::from_secs(5), || {
                c.try_wait().ok().flatten().is_some()
            });
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.config);
    }
}

/// A batch POST that reports a broken connection instead of panicking (the server may die
/// under it).
pub fn try_post(base: &str, token: &str, execution: Uuid, body: &str) -> Result<Got, String> {
    let r = http()
        .post(format!(
            "{base}/api/v1/scanner/executions/{execution}/batches"
        ))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(body.as_bytes());
    match r {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let request_id = resp
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let text = resp
                .body_mut()
                .read_to_string()
                .map_err(|e| e.to_string())?;
            let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
            Ok(Got {
                status,
                retry_after,
                request_id,
                body,
            })
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A raw HTTP/1.1 exchange over TCP: exactly these bytes out, status and body back.
/// For requests no well-behaved client library would send.
pub fn raw_exchange(base: &str, request: &[u8]) -> (u16, String, String) {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}
