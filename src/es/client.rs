//! The blocking HTTP client for Elasticsearch: one `ureq` agent with connection reuse and
//! a per-request timeout. Every response body is read, because ES reports meaningful
//! conditions in 4xx bodies and `_bulk` answers 200 even when items failed.

use std::io::Read;
use std::time::Duration;

use serde_json::Value;

use super::error::EsError;
use crate::telemetry::context;
use crate::telemetry::events::EsRequestWithConnectionHeld;

/// Largest response body read (bulk responses of 10k items stay far below).
const MAX_RESPONSE_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Clone)]
pub struct EsClient {
    agent: ureq::Agent,
    base: String,
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

impl EsClient {
    pub fn new(base_url: &str, timeout: Duration) -> EsClient {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(5))))
            .max_idle_connections_per_host(64)
            .build();
        EsClient {
            agent: config.into(),
            base: base_url.trim_end_matches('/').to_string(),
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
        if let Some(stage) = context::held_connection() {
            EsRequestWithConnectionHeld {
                stage,
                method,
                path,
            }
            .emit();
        }
        let url = format!("{}{}", self.base, path);
        let result = match (method, body) {
            ("GET", None) => self.agent.get(&url).call(),
            ("HEAD", None) => self.agent.head(&url).call(),
            ("DELETE", None) => self.agent.delete(&url).call(),
            ("POST", None) => self.agent.post(&url).send_empty(),
            ("PUT", None) => self.agent.put(&url).send_empty(),
            ("POST", Some((ct, b))) => self.agent.post(&url).header("Content-Type", ct).send(b),
            ("PUT", Some((ct, b))) => self.agent.put(&url).header("Content-Type", ct).send(b),
            ("GET", Some((ct, b))) => self
                .agent
                .get(&url)
                .force_send_body()
                .header("Content-Type", ct)
                .send(b),
            _ => return Err(EsError::Refused(format!("unsupported method {method}"))),
        };
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

    /// JSON request helper.
    pub fn json(&self, method: &str, path: &str, body: &Value) -> Result<EsResponse, EsError> {
        let bytes = serde_json::to_vec(body).map_err(|e| EsError::Refused(e.to_string()))?;
        self.request(method, path, Some(("application/json", &bytes)))
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
