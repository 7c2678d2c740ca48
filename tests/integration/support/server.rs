//! In-process scanstore servers for tests: a config pointing at a test database and an ES
//! URL, started on a free loopback port, shut down on drop.

use std::time::Duration;

use scanstore::app::{self, Running};
use scanstore::config::{Config, RawConfig};
use scanstore::http::router::BodyPolicy;
use scanstore::http::server::{Handler, Routes};

use super::logs;

/// A valid config for `db_url`/`es_url` listening on a free port; tests adjust fields.
pub fn config(db_url: &str, es_url: &str) -> Config {
    let mut raw = RawConfig::default();
    raw.server.listen = "127.0.0.1:0".into();
    raw.server.worker_threads = 4;
    raw.server.shutdown_grace_seconds = 5;
    raw.database.url = Some(db_url.to_string());
    raw.database.pool_size = 4;
    raw.elasticsearch.url = es_url.to_string();
    raw.elasticsearch.index_prefix = super::emulator::es_prefix("t");
    raw.elasticsearch.request_timeout_ms = 10_000;
    if let Some((cert, key)) = super::secure::server_tls() {
        raw.server.tls_cert = Some(cert.display().to_string());
        raw.server.tls_key = Some(key.display().to_string());
    }
    // STORAGE_TEST_ES_SHARDS=N: every index family scanstore creates gets N primary
    // shards (scripts/test.sh runs the ES-facing tests once with 3).
    if let Some(n) = es_shards() {
        let e = &mut raw.elasticsearch;
        (
            e.facts_shards,
            e.execution_endpoints_shards,
            e.assets_shards,
        ) = (n, n, n);
    }
    let access = super::secure::suite_access();
    raw.elasticsearch.api_key = access.api_key;
    raw.elasticsearch.ca_file = access.ca_file.map(|f| f.display().to_string());
    Config::from_raw(raw, &|_| None).expect("test config")
}

/// `STORAGE_TEST_ES_SHARDS`, the shard count of every index the servers create.
pub fn es_shards() -> Option<u64> {
    let v = std::env::var("STORAGE_TEST_ES_SHARDS").ok()?;
    Some(
        v.parse()
            .expect("STORAGE_TEST_ES_SHARDS: a number of shards"),
    )
}

pub struct TestServer {
    running: Option<Running>,
    pub base: String,
}

impl TestServer {
    pub fn start(config: Config) -> TestServer {
        logs::capture();
        let running = app::start(config).expect("start scanstore");
        TestServer::wrap(running)
    }

    pub fn start_with(config: Config, handler: Handler) -> TestServer {
        logs::capture();
        // Test handlers read the body of any request that carries content.
        let routes = Routes {
            handle: handler,
            body_policy: |method, _| match method {
                "POST" | "PUT" | "PATCH" => BodyPolicy::Open,
                _ => BodyPolicy::Ignored,
            },
        };
        let running = app::start_with(config, routes).expect("start scanstore");
        TestServer::wrap(running)
    }

    fn wrap(running: Running) -> TestServer {
        let base = running.url();
        TestServer {
            running: Some(running),
            base,
        }
    }

    pub fn app(&self) -> &scanstore::app::App {
        &self.running.as_ref().expect("running").app
    }

    pub fn app_arc(&self) -> std::sync::Arc<scanstore::app::App> {
        self.running.as_ref().expect("running").app.clone()
    }

    /// Graceful shutdown; true when in-flight requests finished in time.
    pub fn shutdown(mut self) -> bool {
        self.running.take().map(Running::shutdown).unwrap_or(true)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown();
        }
    }
}

/// An HTTP client that never treats a status as an error and trusts the suite's CA.
pub fn http() -> ureq::Agent {
    static ROOTS: std::sync::OnceLock<ureq::tls::RootCerts> = std::sync::OnceLock::new();
    let roots = ROOTS
        .get_or_init(|| scanstore::es::access::ca_roots(&super::secure::suite_ca().pem).unwrap())
        .clone();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// Status, headers of interest and JSON body of a response.
pub struct Got {
    pub status: u16,
    pub retry_after: Option<String>,
    /// The server's `X-Request-Id`, to find this request's log lines.
    pub request_id: String,
    pub body: serde_json::Value,
}

pub fn got(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Got {
    let mut resp = resp.expect("HTTP exchange");
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
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Got {
        status,
        retry_after,
        request_id,
        body,
    }
}

/// Opens a connection, reads the start of the answer to one keep-alive `GET path`, and
/// leaves the connection open.
fn answered(addr: &str, path: &str) -> Result<std::net::TcpStream, String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)
        .map_err(|e| format!("no answer within 5 s: {e}"))?;
    if &head != b"HTTP/1.1 200" {
        return Err(format!("answered {:?}", String::from_utf8_lossy(&head)));
    }
    Ok(s)
}

/// `rounds` bursts of `burst` connections opened at once against a tiny_http server, every
/// one kept open afterwards (keep-alive connections hold pool threads): each must be
/// answered within 5 s. Returns how many connections ended up open.
pub fn keep_alive_bursts(addr: &str, path: &str, rounds: usize, burst: usize) -> usize {
    let mut open = Vec::new();
    for round in 0..rounds {
        let clients: Vec<_> = (0..burst)
            .map(|_| {
                let (addr, path) = (addr.to_owned(), path.to_owned());
                std::thread::spawn(move || answered(&addr, &path))
            })
            .collect();
        for c in clients {
            match c.join() {
                Ok(Ok(s)) => open.push(s),
                Ok(Err(e)) => panic!("round {round}: {e} ({} connections open)", open.len()),
                Err(_) => panic!("round {round}: client thread panicked"),
            }
        }
    }
    open.len()
}
