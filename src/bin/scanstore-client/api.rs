//! The scanner API as the client calls it: claim, batches, heartbeat and fail, each retried
//! through transient failures (no answer, 408, 429, 5xx, a final waiting for the clean-up
//! of an abandoned upload) with capped, jittered backoff or the server's `Retry-After`, and
//! refused for good on any other 4xx.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::error::Error;

/// First backoff step; it doubles per attempt up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// One request's longest wait for an answer: a final batch may wait on Elasticsearch.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest answer body read.
const MAX_ANSWER: u64 = 1024 * 1024;

#[derive(Clone)]
pub struct Server {
    base: String,
    token: String,
    agent: ureq::Agent,
    /// How long a request is retried through transient failures before giving up.
    budget: Duration,
}

/// What a claim hands the scanner.
#[derive(Debug, Deserialize)]
pub struct Claim {
    pub execution_id: Uuid,
    pub targets: Vec<Target>,
    /// An nmap port specification, when the task restricts its ports.
    #[serde(default)]
    pub ports: Option<String>,
    pub lease_seconds: u64,
    pub limits: Limits,
}

#[derive(Debug, Deserialize)]
pub struct Target {
    pub value: String,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Limits {
    pub max_observations: usize,
    pub max_body_bytes: usize,
    /// The observation window (seconds back, seconds ahead of now), when a claim said it.
    #[serde(default)]
    pub max_observation_age_seconds: Option<i64>,
    #[serde(default)]
    pub max_clock_skew_seconds: Option<i64>,
}

/// An answer the client acts on: status and JSON body (`Null` when empty).
struct Answer {
    status: u16,
    body: Value,
}

impl Server {
    /// The server named by `SCANSTORE_URL`, with the token from `token_file` or
    /// `SCANSTORE_SCANNER_TOKEN`; over HTTPS it trusts the CA in `ca_file` (or
    /// `SCANSTORE_CA_FILE`) when one is named, the public web roots otherwise.
    pub fn from_env(
        token_file: Option<&Path>,
        ca_file: Option<&Path>,
        budget: Duration,
    ) -> Result<Server, Error> {
        let base = std::env::var("SCANSTORE_URL").map_err(|_| {
            Error::Usage("SCANSTORE_URL is not set (e.g. https://scanstore.example:8443)".into())
        })?;
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Usage(
                "SCANSTORE_URL must start with http:// or https://".into(),
            ));
        }
        let token = match token_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| Error::Usage(format!("--token-file {}: {e}", path.display())))?,
            None => std::env::var("SCANSTORE_SCANNER_TOKEN").map_err(|_| {
                Error::Usage(
                    "no scanner token: set SCANSTORE_SCANNER_TOKEN or pass --token-file".into(),
                )
            })?,
        };
        let token = token.trim().to_string();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::Usage(
                "the scanner token is empty or not printable ASCII".into(),
            ));
        }
        let ca_file = ca_file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("SCANSTORE_CA_FILE").map(Into::into));
        let mut config = ureq::Agent::config_builder();
        if let Some(ca) = ca_file {
            let roots = scanstore::es::access::ca_roots(&ca).map_err(Error::Usage)?;
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let agent = config
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .timeout_connect(Some(Duration::from_secs(10)))
            .build()
            .into();
        Ok(Server {
            base,
            token,
            agent,
            budget,
        })
    }

    /// The next execution queued for this scanner, marked running for it.
    pub fn claim(&self) -> Result<Option<Claim>, Error> {
        let a = self.call("claim", "/api/v1/scanner/executions/claim", b"{}")?;
        if a.status == 204 {
            return Ok(None);
        }
        serde_json::from_value(a.body)
            .map(Some)
            .map_err(|e| Error::Unavailable(format!("a claim answer that is not a claim: {e}")))
    }

    /// Sends one batch body; the number of observations the server saved (0 when it had
    /// the batch already).
    pub fn send_batch(&self, execution: Uuid, body: &[u8]) -> Result<u64, Error> {
        let path = format!("/api/v1/scanner/executions/{execution}/batches");
        let a = self.call("batch", &path, body)?;
        Ok(a.body["saved"].as_u64().unwrap_or(0))
    }

    /// Renews the execution's lease, once (the caller's loop is the retry).
    pub fn heartbeat(&self, execution: Uuid) -> Result<(), Error> {
        let path = format!("/api/v1/scanner/executions/{execution}/heartbeat");
        match self.once(&path, b"{}") {
            Ok(_) => Ok(()),
            Err(Failure::Final(e)) => Err(e),
            Err(Failure::Transient { reason, .. }) => Err(Error::Unavailable(reason)),
        }
    }

    /// Fails the execution with `reason` (control characters blanked, cut to what the
    /// server takes).
    pub fn fail(&self, execution: Uuid, reason: &str) -> Result<(), Error> {
        let reason: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let reason = crate::observation::fitted(Some(&reason), MAX_REASON)
            .unwrap_or_else(|| "the scanner failed".into());
        let path = format!("/api/v1/scanner/executions/{execution}/fail");
        let body = serde_json::json!({ "reason": reason }).to_string();
        self.call("fail", &path, body.as_bytes()).map(|_| ())
    }

    /// POSTs `body`, retrying transient failures within the budget.
    fn call(&self, what: &str, path: &str, body: &[u8]) -> Result<Answer, Error> {
        let deadline = Instant::now() + self.budget;
        let mut attempt: u32 = 0;
        loop {
            let (reason, wait) = match self.once(path, body) {
                Ok(a) => return Ok(a),
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::Transient {
                    reason,
                    retry_after,
                }) => (reason, retry_after.unwrap_or_else(|| backoff(attempt))),
            };
            if Instant::now() + wait > deadline {
                return Err(Error::Unavailable(format!(
                    "{what}: {reason}; gave up after retrying for {} s",
                    self.budget.as_secs()
                )));
            }
            log::warn!("{what}: {reason}; retrying in {:.1} s", wait.as_secs_f64());
            std::thread::sleep(wait);
            attempt = attempt.saturating_add(1);
        }
    }

    /// One POST and what its answer means.
    fn once(&self, path: &str, body: &[u8]) -> Result<Answer, Failure> {
        let sent = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .content_type("application/json")
            .send(body);
        let mut response = match sent {
            Ok(r) => r,
            Err(e) if is_tls_refusal(&e) => {
                return Err(Failure::Final(Error::Usage(format!(
                    "{}: the TLS connection was refused ({e}); SCANSTORE_CA_FILE names the CA \
                     that signed the server's certificate",
                    self.base
                ))))
            }
            Err(e) => {
                return Err(Failure::Transient {
                    reason: format!("no answer ({e})"),
                    retry_after: None,
                })
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(BACKOFF_CAP.as_secs())));
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER)
            .read_to_string()
            .unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status < 300 {
            return Ok(Answer { status, body });
        }
        let code = body["error"]["code"].as_str().unwrap_or("").to_string();
        let message = body["error"]["message"].as_str().unwrap_or("").to_string();
        if matches!(status, 408 | 429) || status >= 500 || waits_for_clean_up(&code, &body) {
            return Err(Failure::Transient {
                reason: format!("{status} {code}"),
                retry_after,
            });
        }
        Err(Failure::Final(Error::Refused {
            status,
            code,
            message,
        }))
    }
}

/// Whether a failed request failed on the server's certificate or the TLS setup, which no
/// retry changes.
fn is_tls_refusal(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Tls(_)
        | ureq::Error::Rustls(_)
        | ureq::Error::Pem(_)
        | ureq::Error::TlsRequired => true,
        ureq::Error::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}

/// A final refused only because uploads the server abandoned (a lapsed lease's) still have
/// a batch that may be in flight: the server removes it after a grace period, so the same
/// final passes then.
fn waits_for_clean_up(code: &str, body: &Value) -> bool {
    code == "final_incomplete"
        && body["error"]["details"]["incomplete_uploads"]
            .as_array()
            .is_some_and(|u| !u.is_empty() && u.iter().all(|x| x["abandoned"] == true))
}

/// Longest failure reason the server takes, in bytes.
const MAX_REASON: usize = 1024;

enum Failure {
    /// Worth retrying: no answer, 408, 429, 5xx, or a final waiting for a clean-up.
    Transient {
        reason: String,
        retry_after: Option<Duration>,
    },
    Final(Error),
}

/// The wait before retry `attempt` (0-based): half to all of `BASE * 2^attempt`, capped,
/// so that scanners refused together do not come back together.
fn backoff(attempt: u32) -> Duration {
    let full = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_CAP);
    full.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        for attempt in 0..40 {
            let d = backoff(attempt);
            let full = BACKOFF_BASE
                .saturating_mul(1u32 << attempt.min(16))
                .min(BACKOFF_CAP);
            assert!(d >= full / 2 && d <= full, "{attempt}: {d:?}");
        }
        assert!(backoff(30) <= BACKOFF_CAP);
    }
}
