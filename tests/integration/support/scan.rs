//! A scanner's side of the protocol for tests: batch bodies with correct checksums over the
//! exact bytes of the observations array, and the HTTP calls.

use std::sync::OnceLock;

use chrono::{DateTime, Duration, NaiveTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::server::{got, http, Got};

/// The tests' observation time: 10:00 UTC two days ago, so it always lies inside the
/// server's default observation window (31 days back, 300 s ahead) and stays fixed for the
/// whole test process.
pub fn t0() -> &'static str {
    static T0: OnceLock<String> = OnceLock::new();
    T0.get_or_init(|| {
        let day = (Utc::now() - Duration::days(2)).date_naive();
        let at = day.and_time(NaiveTime::from_hms_opt(10, 0, 0).unwrap_or_default());
        rfc3339(at.and_utc())
    })
}

/// `t0()` moved by `hours` (negative = earlier).
pub fn t0_plus(hours: i64) -> String {
    rfc3339(parse(t0()) + Duration::hours(hours))
}

/// `at` as the server stores it: millisecond precision, `Z`.
pub fn stored(at: &str) -> String {
    parse(at).to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub fn parse(at: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(at)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("{at}: {e}"))
}

/// One endpoint observation.
pub fn endpoint(ip: &str, port: u16, observed_at: &str) -> Value {
    json!({"type": "endpoint", "ip": ip, "port": port, "transport": "tcp", "service": "https",
           "product": "nginx", "banner": "HTTP/1.1 200 OK", "observed_at": observed_at})
}

/// One DNS observation.
pub fn dns(name: &str, value: &str, observed_at: &str) -> Value {
    json!({"type": "dns", "name": name, "record_type": "A", "value": value, "observed_at": observed_at})
}

/// `n` endpoints 10.x.y.z:443 observed at `observed_at`, starting at `first`.
pub fn endpoints(first: usize, n: usize, observed_at: &str) -> Vec<Value> {
    (first..first + n)
        .map(|i| endpoint(&nth_ip(i), 443, observed_at))
        .collect()
}

/// The i-th test address: 10.0.0.1, 10.0.0.2, … (250 per /24).
pub fn nth_ip(i: usize) -> String {
    format!("10.{}.{}.{}", i / 62_500, (i / 250) % 250, i % 250 + 1)
}

pub struct Batch {
    pub upload_id: Uuid,
    pub stream: &'static str,
    pub index: u32,
    pub is_final: bool,
    pub observations: Vec<Value>,
}

impl Batch {
    pub fn main(upload_id: Uuid, index: u32, observations: Vec<Value>) -> Batch {
        Batch {
            upload_id,
            stream: "main",
            index,
            is_final: false,
            observations,
        }
    }

    pub fn final_(upload_id: Uuid, index: u32, observations: Vec<Value>) -> Batch {
        Batch {
            upload_id,
            stream: "main",
            index,
            is_final: true,
            observations,
        }
    }

    pub fn dns(upload_id: Uuid, index: u32, observations: Vec<Value>) -> Batch {
        Batch {
            upload_id,
            stream: "dns",
            index,
            is_final: false,
            observations,
        }
    }

    /// The exact request body, checksum over the serialised observations.
    pub fn body(&self) -> String {
        let observations = serde_json::to_string(&self.observations).unwrap();
        let checksum = hex::encode(Sha256::digest(observations.as_bytes()));
        format!(
            r#"{{"protocol_version":2,"upload_id":"{}","stream":"{}","batch_index":{},"is_final":{},"checksum":"sha256:{checksum}","observations":{observations}}}"#,
            self.upload_id, self.stream, self.index, self.is_final
        )
    }

    pub fn checksum(&self) -> String {
        let observations = serde_json::to_string(&self.observations).unwrap();
        hex::encode(Sha256::digest(observations.as_bytes()))
    }
}

pub fn post_raw(base: &str, token: Option<&str>, execution: &str, body: &[u8]) -> Got {
    let mut r = http().post(format!(
        "{base}/api/v1/scanner/executions/{execution}/batches"
    ));
    if let Some(t) = token {
        r = r.header("Authorization", &format!("Bearer {t}"));
    }
    got(r.header("Content-Type", "application/json").send(body))
}

pub fn post(base: &str, token: &str, execution: Uuid, batch: &Batch) -> Got {
    post_raw(
        base,
        Some(token),
        &execution.to_string(),
        batch.body().as_bytes(),
    )
}

pub fn claim(base: &str, token: &str) -> Got {
    got(http()
        .post(format!("{base}/api/v1/scanner/executions/claim"))
        .header("Authorization", &format!("Bearer {token}"))
        .send_empty())
}

/// `POST /api/v1/scanner/executions/{execution}/heartbeat`.
pub fn heartbeat(base: &str, token: &str, execution: Uuid) -> Got {
    got(http()
        .post(format!(
            "{base}/api/v1/scanner/executions/{execution}/heartbeat"
        ))
        .header("Authorization", &format!("Bearer {token}"))
        .send_empty())
}

/// `POST /api/v1/scanner/executions/{execution}/fail` with `reason`.
pub fn fail(base: &str, token: &str, execution: Uuid, reason: &str) -> Got {
    got(http()
        .post(format!("{base}/api/v1/scanner/executions/{execution}/fail"))
        .header("Authorization", &format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(json!({ "reason": reason }).to_string()))
}

/// `GET /api/v1/scanner/executions?{query}`.
pub fn executions(base: &str, token: &str, query: &str) -> Got {
    got(http()
        .get(format!("{base}/api/v1/scanner/executions?{query}"))
        .header("Authorization", &format!("Bearer {token}"))
        .call())
}

/// Uploads `n` endpoints (from `first`) in batches of `batch` and a final; panics on any
/// non-200 answer.
pub fn upload_execution(
    base: &str,
    token: &str,
    execution: Uuid,
    first: usize,
    n: usize,
    batch: usize,
    at: &str,
) {
    let up = Uuid::new_v4();
    let mut index = 0;
    let mut done = 0;
    while done < n {
        let take = batch.min(n - done);
        let b = Batch::main(up, index, endpoints(first + done, take, at));
        let r = post(base, token, execution, &b);
        assert_eq!(r.status, 200, "batch {index}: {}", r.body);
        done += take;
        index += 1;
    }
    let r = post(base, token, execution, &Batch::final_(up, index, vec![]));
    assert_eq!(r.status, 200, "final: {}", r.body);
}
