//! The blocking HTTP client for Elasticsearch: one `ureq` agent with connection reuse and
//! a per-request timeout. Every response body is read, because ES reports meaningful
//! conditions in 4xx bodies and `_bulk` answers 200 even when items failed.

use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use ureq::tls::{RootCerts, TlsConfig};

use super::access::{self, EsAuth, Fingerprint};
use super::error::EsError;
use super::index::{Endpoint, Indices};
use crate::telemetry::context;
use crate::telemetry::events::EsRequestWithConnectionHeld;
use crate::telemetry::secret::Secret;

/// Largest response body read (bulk responses of 10k items stay far below).
const MAX_RESPONSE_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Clone)]
pub struct EsClient {
    /// Built at once, or — with a pinned CA — at the first request that finds the CA in
    /// the cluster's chain.
    agent: Arc<OnceLock<ureq::Agent>>,
    pin: Option<Arc<Pin>>,
    timeout: Duration,
    base: String,
    /// Sent as `Authorization` on every request.
    authorization: Option<Secret<String>>,
}

/// `elasticsearch.ca_fingerprint`, and the lock that lets one thread at a time look for
/// the pinned CA.
struct Pin {
    fingerprint: Fingerprint,
    finding: Mutex<()>,
}

/// A response with its status and JSON body (`Value::Null` for HEAD or an empty body).
#[derive(Debug, Clone)]
pub struct EsResponse {
    pub status: u16,
    pub body: Value,
}

impl EsResponse {
    /// Turns an error status into `EsError::Status` with the ES error `type` and `reason`.
    pub fn ok(self) -> Result<EsResponse, EsError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let error = &self.body["error"];
        let (error_type, reason) = match error {
            Value::String(s) => (String::new(), s.clone()),
            _ => (
                error["type"].as_str().unwrap_or_default().to_string(),
                error["reason"].as_str().unwrap_or_default().to_string(),
            ),
        };
        Err(EsError::Status {
            status: self.status,
            error_type,
            reason,
        })
    }
}

/// A response whose body is still bytes, for callers that parse it into their own types
/// (a 1000-item bulk answer is cheaper to read typed than as a `Value` tree).
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub bytes: Vec<u8>,
}

/// Parses a response body into borrowed types. The body is checked as UTF-8 once: parsing
/// from `str`, serde_json does not check every string again (a fifth of reading a
/// 1000-item bulk answer).
pub fn parse<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

impl RawResponse {
    /// The body as JSON (`Value::Null` when empty).
    pub fn json(self) -> Result<EsResponse, EsError> {
        let status = self.status;
        let body = if self.bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&self.bytes).map_err(|e| {
                if (200..300).contains(&status) {
                    EsError::BadResponse(format!("unparseable JSON body: {e}"))
                } else {
                    EsError::Status {
                        status,
                        error_type: String::new(),
                        reason: String::from_utf8_lossy(&self.bytes)
                            .chars()
                            .take(200)
                            .collect(),
                    }
                }
            })?
        };
        Ok(EsResponse { status, body })
    }

    /// A 2xx response as it is; any other status as the error its JSON body describes.
    pub fn ok(self) -> Result<RawResponse, EsError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let status = self.status;
        Err(match self.json().and_then(EsResponse::ok) {
            Err(e) => e,
            Ok(_) => EsError::BadResponse(format!("status {status} read as success")),
        })
    }
}

/// Records a request sent while this thread holds a database connection (which it must not).
fn note_held_connection(method: &str, path: &str) {
    if let Some(stage) = context::held_connection() {
        EsRequestWithConnectionHeld {
            stage,
            method,
            path,
        }
        .emit();
    }
}

/// Reads a whole answer (up to [`MAX_RESPONSE_BYTES`]).
fn read_response(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<RawResponse, EsError> {
    let mut response = result.map_err(|e| EsError::Transport(e.to_string()))?;
    let status = response.status().as_u16();
    // Sized from Content-Length up front: page and bulk responses are hundreds of KiB,
    // and growing a buffer by doubling touches (and faults in) memory twice.
    let body = response.body_mut();
    let expected = body.content_length().unwrap_or(0).min(MAX_RESPONSE_BYTES);
    let mut bytes = Vec::with_capacity(expected as usize);
    body.with_config()
        .limit(MAX_RESPONSE_BYTES)
        .reader()
        .read_to_end(&mut bytes)
        .map_err(|e| EsError::Transport(e.to_string()))?;
    Ok(RawResponse { status, bytes })
}

/// An agent with connection reuse and the client's timeouts, trusting `roots` (the public
/// web roots when `None`).
fn build_agent(timeout: Duration, roots: Option<RootCerts>) -> ureq::Agent {
    let tls = TlsConfig::builder()
        .root_certs(roots.unwrap_or(RootCerts::WebPki))
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .timeout_connect(Some(timeout.min(Duration::from_secs(5))))
        .max_idle_connections_per_host(64)
        .build()
        .into()
}

impl EsClient {
    /// A client without credentials that trusts the public web roots.
    pub fn new(base_url: &str, timeout: Duration) -> EsClient {
        EsClient::with_access(base_url, timeout, &EsAuth::None, None, None)
    }

    /// A client that sends `auth` with every request and, for `https://`, verifies the
    /// cluster against `roots` (the public web roots when `None`), or against the CA in
    /// its chain whose fingerprint is `pin`.
    pub fn with_access(
        base_url: &str,
        timeout: Duration,
        auth: &EsAuth,
        roots: Option<&RootCerts>,
        pin: Option<Fingerprint>,
    ) -> EsClient {
        let agent = OnceLock::new();
        if pin.is_none() {
            let _ = agent.set(build_agent(timeout, roots.cloned()));
        }
        EsClient {
            agent: Arc::new(agent),
            pin: pin.map(|fingerprint| {
                Arc::new(Pin {
                    fingerprint,
                    finding: Mutex::new(()),
                })
            }),
            timeout,
            base: base_url.trim_end_matches('/').to_string(),
            authorization: auth.header(),
        }
    }

    /// The agent; with a pinned CA not yet found, looks for it in the cluster's chain.
    fn agent(&self) -> Result<&ureq::Agent, EsError> {
        if let Some(agent) = self.agent.get() {
            return Ok(agent);
        }
        let Some(pin) = &self.pin else {
            return Err(EsError::Refused("no HTTP agent".into()));
        };
        let _one_at_a_time = pin.finding.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(agent) = self.agent.get() {
            return Ok(agent);
        }
        let connect = self.timeout.min(Duration::from_secs(5));
        let root = access::pinned_root(&self.base, pin.fingerprint, connect)
            .map_err(|why| EsError::Transport(format!("elasticsearch.ca_fingerprint: {why}")))?;
        Ok(self
            .agent
            .get_or_init(|| build_agent(self.timeout, Some(root))))
    }

    /// `request` with the client's credentials.
    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.authorization {
            Some(value) => request.header("Authorization", value.expose()),
            None => request,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends one request and parses its body as JSON; `path` starts with `/` and is
    /// already URL-encoded.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<EsResponse, EsError> {
        self.send(method, path, body)?.json()
    }

    /// Sends one request and reads its whole body.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<RawResponse, EsError> {
        note_held_connection(method, path);
        let url = format!("{}{}", self.base, path);
        let a = self.agent()?;
        let result = match (method, body) {
            ("GET", None) => self.authorized(a.get(&url)).call(),
            ("HEAD", None) => self.authorized(a.head(&url)).call(),
            ("DELETE", None) => self.authorized(a.delete(&url)).call(),
            ("POST", None) => self.authorized(a.post(&url)).send_empty(),
            ("PUT", None) => self.authorized(a.put(&url)).send_empty(),
            ("POST", Some((ct, b))) => self
                .authorized(a.post(&url))
                .header("Content-Type", ct)
                .send(b),
            ("PUT", Some((ct, b))) => self
                .authorized(a.put(&url))
                .header("Content-Type", ct)
                .send(b),
            ("GET", Some((ct, b))) => self
                .authorized(a.get(&url).force_send_body())
                .header("Content-Type", ct)
                .send(b),
            _ => return Err(EsError::Refused(format!("unsupported method {method}"))),
        };
        read_response(result)
    }

    /// POSTs a body of `len` bytes read from `body` (sent with its Content-Length, as
    /// [`EsClient::send`] sends a slice) and reads the whole answer.
    pub fn post_reader(
        &self,
        path: &str,
        content_type: &str,
        len: usize,
        mut body: impl Read,
    ) -> Result<RawResponse, EsError> {
        note_held_connection("POST", path);
        let result = self
            .authorized(self.agent()?.post(format!("{}{}", self.base, path)))
            .header("Content-Type", content_type)
            .header("Content-Length", len)
            .send(ureq::SendBody::from_reader(&mut body));
        read_response(result)
    }

    /// JSON request helper.
    pub fn json(&self, method: &str, path: &str, body: &Value) -> Result<EsResponse, EsError> {
        let bytes = serde_json::to_vec(body).map_err(|e| EsError::Refused(e.to_string()))?;
        self.request(method, path, Some(("application/json", &bytes)))
    }

    /// `POST /{indices}/_refresh`: what was written becomes visible to searches.
    pub fn refresh(&self, indices: &Indices) -> Result<(), EsError> {
        self.request("POST", &indices.path(Endpoint::Refresh), None)?
            .ok()?;
        Ok(())
    }

    /// `POST /{indices}/_count` with `query`; the answer's body.
    pub fn count(&self, indices: &Indices, query: &Value) -> Result<Value, EsError> {
        Ok(self
            .json("POST", &indices.path(Endpoint::Count), query)?
            .ok()?
            .body)
    }

    /// `POST /{indices}/_search` with `body`; the answer's body.
    pub fn search(&self, indices: &Indices, body: &Value) -> Result<Value, EsError> {
        Ok(self
            .json("POST", &indices.path(Endpoint::Search), body)?
            .ok()?
            .body)
    }

    /// `POST /{indices}/_search` with an encoded body; the answer unparsed, for callers
    /// that read it into their own types.
    pub fn search_raw(&self, indices: &Indices, body: &[u8]) -> Result<RawResponse, EsError> {
        let path = indices.path(Endpoint::Search);
        self.send("POST", &path, Some(("application/json", body)))?
            .ok()
    }

    /// `DELETE /{index}`.
    pub fn delete_index(&self, name: &str) -> Result<(), EsError> {
        self.request(
            "DELETE",
            &format!("/{}", super::index::encode_path(name)),
            None,
        )?
        .ok()?;
        Ok(())
    }

    /// `GET /`: reachable and answering as a cluster.
    pub fn ping(&self) -> Result<String, EsError> {
        let r = self.request("GET", "/", None)?.ok()?;
        Ok(r.body["version"]["number"]
            .as_str()
            .unwrap_or("unknown")
            .to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    use super::*;

    /// A streamed body goes out with its length, as a slice does: ES (and proxies in
    /// front of it) see an ordinary sized request, not chunked transfer.
    #[test]
    fn a_streamed_body_is_sent_with_its_content_length() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (socket, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(socket.try_clone().unwrap());
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                head.push(line.trim_end().to_ascii_lowercase());
            }
            let mut body = vec![0u8; 11];
            reader.read_exact(&mut body).unwrap();
            let mut socket = socket;
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                .unwrap();
            (head, body)
        });
        let es = EsClient::new(&url, Duration::from_secs(10));
        let r = es
            .post_reader("/_bulk", "application/x-ndjson", 11, &b"hello world"[..])
            .unwrap();
        assert_eq!((r.status, r.bytes.as_slice()), (200, &b"{}"[..]));
        let (head, body) = server.join().unwrap();
        assert!(head.contains(&"content-length: 11".to_string()), "{head:?}");
        assert!(
            !head.iter().any(|h| h.starts_with("transfer-encoding")),
            "{head:?}"
        );
        assert_eq!(body, b"hello world");
    }
}
