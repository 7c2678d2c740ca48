//! The ES emulator process and its typed control client, and the choice between the
//! emulator and a real cluster (`STORAGE_TEST_ES_URL`).
//!
//! `Emulator::start()` spawns `scanstore-es-emulator --listen 127.0.0.1:0`, reads the URL it
//! prints, and kills the child on drop. Tests that need no fault injection call
//! [`target()`], which returns the real cluster when `STORAGE_TEST_ES_URL` is set; fault
//! tests call [`emulator_for_faults`], which returns `None` (after printing why) there.
//! Every name the suite gives an index, alias, template or scanstore prefix starts with
//! [`es_root`], so that `scripts/test-real-es.sh` can remove exactly what a run made.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use super::secure::{self, Access};

/// A bulk-response corruption the emulator can inject.
pub use scanstore_es_emulator::faults::{CorruptMode, FaultSpec};
pub use scanstore_es_emulator::reqlog::Summary;

#[derive(Clone)]
pub struct Es {
    base: String,
    agent: ureq::Agent,
    /// `Authorization` sent with every request (the emulator's control API ignores it).
    authorization: Option<String>,
}

pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl Es {
    /// A client of the suite's cluster, with the suite's credentials and CA.
    pub fn new(base: &str) -> Es {
        Es::with_access(base, &secure::suite_access())
    }

    pub fn with_access(base: &str, access: &Access) -> Es {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)));
        if let Some(ca) = &access.ca_file {
            let roots = scanstore::es::access::ca_roots(ca).expect("the suite's CA");
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        Es {
            base: base.trim_end_matches('/').to_owned(),
            agent: config.build().new_agent(),
            authorization: access.api_key.as_ref().map(|k| format!("ApiKey {k}")),
        }
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    /// Any method, optional body with an explicit content type.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> RawResponse {
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(ct) = content_type {
            b = b.header("Content-Type", ct);
        }
        if let Some(auth) = &self.authorization {
            b = b.header("Authorization", auth);
        }
        let result = match body {
            Some(bytes) => self
                .agent
                .run(b.body(bytes.to_vec()).expect("request builds")),
            None => self.agent.run(b.body(()).expect("request builds")),
        };
        let mut resp = result.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let status = resp.status().as_u16();
        let body = if method == "HEAD" {
            Vec::new()
        } else {
            resp.body_mut()
                .with_config()
                .limit(256 * 1024 * 1024)
                .read_to_vec()
                .unwrap_or_default()
        };
        RawResponse {
            status,
            headers,
            body,
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("json"));
        let r = self.raw(
            method,
            path,
            bytes.as_ref().map(|_| "application/json"),
            bytes.as_deref(),
        );
        (r.status, r.json())
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None)
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("POST", path, Some(body))
    }

    pub fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("PUT", path, Some(body))
    }

    pub fn delete(&self, path: &str) -> (u16, Value) {
        self.call("DELETE", path, None)
    }

    pub fn head(&self, path: &str) -> u16 {
        self.raw("HEAD", path, None, None).status
    }

    /// `POST {path}` with NDJSON built from `lines` (each followed by `\n`).
    pub fn bulk(&self, path: &str, lines: &[Value]) -> (u16, Value) {
        let mut body = Vec::new();
        for l in lines {
            body.extend(serde_json::to_vec(l).expect("json"));
            body.push(b'\n');
        }
        let r = self.raw("POST", path, Some("application/x-ndjson"), Some(&body));
        (r.status, r.json())
    }

    /// Count of documents visible to search in `target` (refreshing first).
    pub fn refreshed_count(&self, target: &str, query: Value) -> u64 {
        self.post(&format!("/{target}/_refresh"), &json!({}));
        let (status, v) = self.post(&format!("/{target}/_count"), &json!({"query": query}));
        assert_eq!(status, 200, "count failed: {v}");
        v["count"].as_u64().expect("count")
    }
}

/// A running emulator child process.
pub struct Emulator {
    child: Child,
    es: Es,
}

impl Emulator {
    pub fn start() -> Emulator {
        Emulator::start_with(&[])
    }

    /// Starts with extra command-line arguments (e.g. `--max-content-length 1024`). In
    /// secure mode it serves HTTPS, and requires the suite's API key unless `args` name
    /// other credentials (then its client sends none).
    pub fn start_with(args: &[&str]) -> Emulator {
        let tls = secure::emulator_tls();
        Emulator::spawn(args, tls, tls.is_some())
    }

    /// Serves HTTPS with `tls` (its client trusts `tls.ca`), in any mode.
    pub fn start_tls(args: &[&str], tls: &secure::EmulatorTls) -> Emulator {
        Emulator::spawn(args, Some(tls), secure::emulator_tls().is_some())
    }

    /// Plain HTTP without credentials in any mode, for tests of the emulator's own wire
    /// behaviour over raw sockets.
    pub fn start_plain(args: &[&str]) -> Emulator {
        Emulator::spawn(args, None, false)
    }

    fn spawn(args: &[&str], tls: Option<&secure::EmulatorTls>, key: bool) -> Emulator {
        let mut cmd = Command::new(super::tools::bin("scanstore-es-emulator"));
        cmd.args(["--listen", "127.0.0.1:0"]).args(args);
        let mut access = Access::default();
        if let Some(tls) = tls {
            cmd.arg("--tls-cert")
                .arg(&tls.cert)
                .arg("--tls-key")
                .arg(&tls.key);
            access.ca_file = Some(tls.ca.clone());
        }
        let own_credentials = args
            .iter()
            .any(|a| *a == "--api-key" || *a == "--basic-auth");
        if key && !own_credentials {
            cmd.args(["--api-key", secure::EMULATOR_API_KEY]);
            access.api_key = Some(secure::EMULATOR_API_KEY.into());
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn scanstore-es-emulator");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        Emulator {
            child,
            es: Es::with_access(&url, &access),
        }
    }

    pub fn url(&self) -> &str {
        self.es.url()
    }

    pub fn es(&self) -> Es {
        self.es.clone()
    }

    fn control(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v) = self
            .es
            .call(method, &format!("/_emulator/{path}"), body.as_ref());
        assert!(
            status < 300,
            "emulator control {method} {path}: {status} {v}"
        );
        v
    }

    /// Deletes all data (indices, templates, scripts), faults and the request log.
    pub fn reset(&self) {
        self.control("POST", "reset", None);
    }

    pub fn add_fault(&self, fault: FaultSpec) -> u64 {
        let v = self.control(
            "POST",
            "faults",
            Some(serde_json::to_value(fault).expect("fault json")),
        );
        v["id"].as_u64().expect("fault id")
    }

    /// Removes one fault; requests paused by it continue.
    pub fn remove_fault(&self, id: u64) {
        self.control("DELETE", &format!("faults/{id}"), None);
    }

    pub fn clear_faults(&self) {
        self.control("DELETE", "faults", None);
    }

    /// Releases every paused request.
    pub fn release_all(&self) {
        self.control("POST", "release", None);
    }

    pub fn paused(&self) -> usize {
        self.control("GET", "paused", None)["paused"]
            .as_u64()
            .unwrap_or(0) as usize
    }

    /// Waits until `n` requests are paused (or panics after `timeout`).
    pub fn wait_paused(&self, n: usize, timeout: Duration) {
        super::wait_for(&format!("{n} paused requests"), timeout, || {
            self.paused() >= n
        });
    }

    /// The request log, filtered by method and/or path glob.
    pub fn requests(&self, method: Option<&str>, path: Option<&str>) -> Summary {
        let mut q = Vec::new();
        if let Some(m) = method {
            q.push(format!("method={m}"));
        }
        if let Some(p) = path {
            q.push(format!(
                "path={}",
                p.replace('*', "%2A").replace('/', "%2F")
            ));
        }
        let v = self.control("GET", &format!("requests?{}", q.join("&")), None);
        serde_json::from_value(v).expect("request log")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a test runs: the emulator, or a real cluster from `STORAGE_TEST_ES_URL`.
pub enum Target {
    Emulator(Emulator),
    Real(Es),
}

impl Target {
    pub fn es(&self) -> Es {
        match self {
            Target::Emulator(e) => e.es(),
            Target::Real(es) => es.clone(),
        }
    }

    pub fn is_real(&self) -> bool {
        matches!(self, Target::Real(_))
    }
}

/// The test target: a real cluster when `STORAGE_TEST_ES_URL` is set, else a fresh emulator.
pub fn target() -> Target {
    match std::env::var("STORAGE_TEST_ES_URL") {
        Ok(url) if !url.is_empty() => Target::Real(Es::new(&url)),
        _ => Target::Emulator(Emulator::start()),
    }
}

/// A fresh emulator for a fault-injection test, or `None` (with the reason printed) when the
/// suite runs against a real cluster, where faults cannot be injected.
pub fn emulator_for_faults(test: &str) -> Option<Emulator> {
    emulator_only(test).then(Emulator::start)
}

/// As [`emulator_for_faults`], for tests of the emulator's plain-HTTP wire behaviour.
pub fn plain_emulator(test: &str) -> Option<Emulator> {
    emulator_only(test).then(|| Emulator::start_plain(&[]))
}

/// False (with the reason printed) when the suite runs against a real cluster: for tests
/// that prove something about the emulator (or scanstore against it) only.
pub fn emulator_only(test: &str) -> bool {
    match std::env::var("STORAGE_TEST_ES_URL") {
        Ok(url) if !url.is_empty() => {
            println!(
                "SKIP {test}: needs the emulator; STORAGE_TEST_ES_URL points at a real cluster"
            );
            false
        }
        _ => true,
    }
}

/// The start of every ES name the suite makes: `STORAGE_TEST_ES_PREFIX` (empty unless
/// set), which a run against a shared cluster makes unique so that it can delete exactly
/// its own indices, aliases and templates afterwards, even after a failed test.
pub fn es_root() -> String {
    std::env::var("STORAGE_TEST_ES_PREFIX").unwrap_or_default()
}

/// An index name unique to this process and call, so tests never collide on a real cluster.
pub fn unique(base: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}{base}-{}-{}",
        es_root(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A scanstore `index_prefix` unique to this call: `tag` and random hex after [`es_root`].
pub fn es_prefix(tag: &str) -> String {
    format!(
        "{}{tag}{}",
        es_root(),
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}
