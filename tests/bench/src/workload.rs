//! The simulated scanners' data: deterministic endpoint and DNS observations, and batch
//! request bodies whose checksum is the SHA-256 of the exact bytes of their observations
//! array (the protocol of `upload::batch`). Pure; no I/O.

use std::sync::OnceLock;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The observation time of every generated observation (one facts month per run): the
/// bench's start minus an hour, inside the server's observation window, stored as the
/// server stores it (milliseconds, `Z`).
pub fn observed_at() -> &'static str {
    static AT: OnceLock<String> = OnceLock::new();
    AT.get_or_init(|| {
        let at: DateTime<Utc> = Utc::now() - Duration::hours(1);
        at.to_rfc3339_opts(SecondsFormat::Millis, true)
    })
}

const PORTS: [u16; 3] = [22, 80, 443];

/// The i-th endpoint of the run: three ports per address, addresses counted up from
/// 10.0.0.0 (documentation data only; nothing is ever sent to these addresses).
pub fn endpoint(i: usize) -> Value {
    let a = i / PORTS.len();
    let ip = format!("10.{}.{}.{}", (a >> 16) & 255, (a >> 8) & 255, a & 255);
    let port = PORTS[i % PORTS.len()];
    json!({"type": "endpoint", "ip": ip, "port": port, "transport": "tcp",
           "service": if port == 22 { "ssh" } else { "http" }, "product": "nginx", "version": "1.25.3",
           "banner": format!("HTTP/1.1 200 OK server=bench-{}", i % 97), "observed_at": observed_at()})
}

/// The i-th DNS record of the run.
pub fn dns(i: usize) -> Value {
    json!({"type": "dns", "name": format!("host{i}.bench.example"), "record_type": "A",
           "value": format!("192.0.2.{}", i % 250 + 1), "observed_at": observed_at()})
}

/// One batch of an upload: identity, class and exact body.
#[derive(Clone)]
pub struct Batch {
    pub stream: &'static str,
    pub index: u32,
    pub is_final: bool,
    pub endpoints: usize,
    pub dns: usize,
    pub body: Vec<u8>,
}

/// The exact request body, checksum over the serialised observations.
pub fn body(upload_id: Uuid, stream: &str, index: u32, is_final: bool, obs: &[Value]) -> Vec<u8> {
    let observations = serde_json::to_string(obs).expect("observations serialise");
    let checksum = hex::encode(Sha256::digest(observations.as_bytes()));
    format!(
        r#"{{"protocol_version":2,"upload_id":"{upload_id}","stream":"{stream}","batch_index":{index},"is_final":{is_final},"checksum":"sha256:{checksum}","observations":{observations}}}"#
    )
    .into_bytes()
}

/// A mixed execution's main batches carry one DNS record per this many endpoints.
const ENDPOINTS_PER_DNS_RECORD: usize = 10;
/// DNS records in each sidecar batch of a mixed execution.
const SIDECAR_RECORDS: usize = 50;

/// What a `mixed` execution sends per endpoint (a port scan sends one observation): the
/// endpoint, its share of a DNS record in the main batches, and its share of the sidecar
/// batch sent after every `dns_every`-th main batch of `batch` endpoints.
pub fn mixed_observations_per_endpoint(batch: usize, dns_every: usize) -> f64 {
    let sidecar = match dns_every {
        0 => 0.0,
        n => SIDECAR_RECORDS as f64 / (n * batch.max(1)) as f64,
    };
    1.0 + 1.0 / ENDPOINTS_PER_DNS_RECORD as f64 + sidecar
}

/// What one execution uploads: `endpoints` endpoints from `first`, in main batches of
/// `batch` observations; the last main batch is the final. When `batch` does not divide
/// `endpoints`, the short batch is the first, so that every final carries a full batch and
/// finals of executions of different sizes compare like with like. A mixed execution also puts
/// one DNS record per ten endpoints into its main batches and sends a DNS sidecar batch
/// after every `dns_every`-th main batch.
#[derive(Clone, Debug)]
pub struct ExecutionPlan {
    pub first: usize,
    pub endpoints: usize,
    pub batch: usize,
    pub mixed: bool,
    pub dns_every: usize,
}

impl ExecutionPlan {
    /// The main-stream batches in order (the last is the final), each followed by its DNS
    /// sidecar batch where one is due, built as the iterator is read.
    pub fn batches(&self, upload_id: Uuid) -> impl Iterator<Item = Batch> + '_ {
        let n_main = self.endpoints.div_ceil(self.batch).max(1);
        let short = self.endpoints - (n_main - 1) * self.batch;
        // Where main batch `k` starts: the short batch first, then full ones.
        let start = move |k: usize| match k {
            0 => self.first,
            _ => self.first + short + (k - 1) * self.batch,
        };
        (0..n_main).flat_map(move |k| {
            let (from, to) = (start(k), start(k + 1));
            let mut obs: Vec<Value> = (from..to).map(endpoint).collect();
            let mut dns_n = 0;
            if self.mixed {
                for j in (from..to).step_by(ENDPOINTS_PER_DNS_RECORD) {
                    obs.push(dns(j));
                    dns_n += 1;
                }
            }
            let is_final = k + 1 == n_main;
            let main = Batch {
                stream: "main",
                index: k as u32,
                is_final,
                endpoints: to - from,
                dns: dns_n,
                body: body(upload_id, "main", k as u32, is_final, &obs),
            };
            let sidecar =
                (self.mixed && !is_final && self.dns_every > 0 && (k + 1) % self.dns_every == 0)
                    .then(|| {
                        let recs: Vec<Value> = (0..SIDECAR_RECORDS)
                            .map(|j| dns(from + j * 7 + 1))
                            .collect();
                        Batch {
                            stream: "dns",
                            index: k as u32,
                            is_final: false,
                            endpoints: 0,
                            dns: recs.len(),
                            body: body(upload_id, "dns", k as u32, false, &recs),
                        }
                    });
            std::iter::once(main).chain(sidecar)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_covers_the_exact_observation_bytes() {
        let b = body(Uuid::nil(), "main", 0, false, &[endpoint(1)]);
        let v: Value = serde_json::from_slice(&b).unwrap();
        let obs = serde_json::to_string(&v["observations"]).unwrap();
        let want = format!("sha256:{}", hex::encode(Sha256::digest(obs.as_bytes())));
        assert_eq!(v["checksum"], want);
    }

    #[test]
    fn plan_ends_with_one_final_and_sidecars_inside_the_main_range() {
        let p = ExecutionPlan {
            first: 0,
            endpoints: 25,
            batch: 10,
            mixed: true,
            dns_every: 1,
        };
        let b: Vec<Batch> = p.batches(Uuid::nil()).collect();
        let finals: Vec<_> = b.iter().filter(|x| x.is_final).collect();
        assert_eq!(finals.len(), 1);
        assert!(b.last().unwrap().is_final);
        assert_eq!(b.iter().map(|x| x.endpoints).sum::<usize>(), 25);
        // The short batch goes first: the final is a full one.
        let main: Vec<usize> = b
            .iter()
            .filter(|x| x.stream == "main")
            .map(|x| x.endpoints)
            .collect();
        assert_eq!(main, [5, 10, 10]);
        let covered: Vec<Value> = b
            .iter()
            .filter(|x| x.stream == "main")
            .flat_map(|x| {
                serde_json::from_slice::<Value>(&x.body).unwrap()["observations"]
                    .as_array()
                    .unwrap()
                    .clone()
            })
            .filter(|o| o["type"] == "endpoint")
            .collect();
        assert_eq!(covered, (0..25).map(endpoint).collect::<Vec<_>>());
        assert!(b.iter().filter(|x| x.stream == "dns").all(|x| x.index < 2));
    }

    #[test]
    fn a_mixed_plan_sends_what_its_estimate_says() {
        let (batch, dns_every, endpoints) = (1000, 3, 30_000);
        let p = ExecutionPlan {
            first: 0,
            endpoints,
            batch,
            mixed: true,
            dns_every,
        };
        let sent: usize = p.batches(Uuid::nil()).map(|b| b.endpoints + b.dns).sum();
        let estimate = mixed_observations_per_endpoint(batch, dns_every) * endpoints as f64;
        // The final sends no sidecar: at most one sidecar fewer than the estimate.
        let gap = estimate - sent as f64;
        assert!(
            (0.0..=SIDECAR_RECORDS as f64).contains(&gap),
            "{sent} sent, {estimate} estimated"
        );
    }
}
