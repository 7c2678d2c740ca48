//! A batch request as the scanner sent it, validated: envelope fields, the checksum over
//! the exact bytes of the `observations` array, and every observation. Pure; touches
//! neither PostgreSQL nor Elasticsearch, so bad input never reaches either.

use std::net::IpAddr;

use chrono::{DateTime, Duration as ChronoDuration, SubsecRound, TimeZone, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::error::UploadError;

pub const PROTOCOL_VERSION: u32 = 2;

const MAX_SHORT_TEXT: usize = 256;
const MAX_BANNER: usize = 16 * 1024;
const MAX_DNS_VALUE: usize = 4096;
const MAX_DOMAIN: usize = 253;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Main,
    Dns,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Main => "main",
            Stream::Dns => "dns",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Canonical text form (IPv6 compressed, lower case).
    pub ip: String,
    pub port: u16,
    pub transport: String,
    pub service: Option<String>,
    pub product: Option<String>,
    pub version: Option<String>,
    pub banner: Option<String>,
    pub observed_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DnsRecord {
    /// Lower case, no trailing dot.
    pub name: String,
    pub record_type: String,
    pub value: String,
    pub observed_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Endpoint(Endpoint),
    Dns(DnsRecord),
}

impl Observation {
    pub fn observed_at(&self) -> &DateTime<Utc> {
        match self {
            Observation::Endpoint(e) => &e.observed_at,
            Observation::Dns(d) => &d.observed_at,
        }
    }
}

/// A validated batch.
#[derive(Debug, Clone)]
pub struct Batch {
    pub protocol_version: u32,
    pub upload_id: Uuid,
    pub stream: Stream,
    pub batch_index: u32,
    pub is_final: bool,
    /// `sha256:<hex>`, lower case, verified against the observations' bytes.
    pub checksum: String,
    pub observations: Vec<Observation>,
}

impl Batch {
    pub fn endpoint_count(&self) -> usize {
        self.observations
            .iter()
            .filter(|o| matches!(o, Observation::Endpoint(_)))
            .count()
    }

    pub fn dns_count(&self) -> usize {
        self.observations.len() - self.endpoint_count()
    }

    /// The distinct A/AAAA answers of the batch, in address order.
    pub fn dns_answers(&self) -> Vec<IpAddr> {
        let mut answers: Vec<IpAddr> = self
            .observations
            .iter()
            .filter_map(|o| match o {
                Observation::Dns(d) if matches!(d.record_type.as_str(), "A" | "AAAA") => {
                    d.value.parse().ok()
                }
                _ => None,
            })
            .collect();
        answers.sort_unstable();
        answers.dedup();
        answers
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    protocol_version: i64,
    upload_id: String,
    stream: String,
    batch_index: i64,
    is_final: bool,
    checksum: String,
    #[serde(borrow)]
    observations: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum RawObservation {
    Endpoint {
        ip: String,
        port: i64,
        transport: String,
        service: Option<String>,
        product: Option<String>,
        version: Option<String>,
        banner: Option<String>,
        observed_at: String,
    },
    Dns {
        name: String,
        record_type: String,
        value: String,
        observed_at: String,
    },
}

fn invalid(code: &'static str, message: impl Into<String>) -> UploadError {
    UploadError::Invalid {
        code,
        message: message.into(),
    }
}

/// Parses and validates a request body. `now` bounds how far in the future an
/// observation may claim to be (clock skew allowance: one day).
pub fn parse(
    body: &[u8],
    max_observations: usize,
    now: DateTime<Utc>,
) -> Result<Batch, UploadError> {
    let env: Envelope = serde_json::from_slice(body)
        .map_err(|e| invalid("malformed_json", format!("request body: {e}")))?;
    if env.protocol_version != i64::from(PROTOCOL_VERSION) {
        return Err(invalid(
            "unsupported_protocol_version",
            format!(
                "protocol_version {} is not supported (expected {PROTOCOL_VERSION})",
                env.protocol_version
            ),
        ));
    }
    let upload_id = Uuid::parse_str(&env.upload_id)
        .map_err(|_| invalid("bad_field", "upload_id must be a UUID"))?;
    let stream = match env.stream.as_str() {
        "main" => Stream::Main,
        "dns" => Stream::Dns,
        _ => return Err(invalid("bad_field", "stream must be \"main\" or \"dns\"")),
    };
    let batch_index = u32::try_from(env.batch_index)
        .ok()
        .filter(|i| *i <= i32::MAX as u32)
        .ok_or_else(|| {
            invalid(
                "bad_field",
                "batch_index must be an integer from 0 to 2147483647",
            )
        })?;
    if stream == Stream::Dns && env.is_final {
        return Err(invalid(
            "bad_field",
            "the dns sidecar stream has no final batch",
        ));
    }
    let checksum = verify_checksum(&env.checksum, env.observations.get().as_bytes())?;
    let raw: Vec<&RawValue> = serde_json::from_str(env.observations.get())
        .map_err(|_| invalid("bad_field", "observations must be an array"))?;
    if raw.len() > max_observations {
        return Err(invalid(
            "too_many_observations",
            format!(
                "{} observations in one batch; at most {max_observations}",
                raw.len()
            ),
        ));
    }
    let earliest = Utc
        .with_ymd_and_hms(1990, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_default();
    let latest = now + ChronoDuration::days(1);
    let mut observations = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let o: RawObservation = serde_json::from_str(r.get())
            .map_err(|e| invalid("bad_field", format!("observations[{i}]: {e}")))?;
        let o = observation(o, earliest, latest)
            .map_err(|m| invalid("bad_field", format!("observations[{i}]: {m}")))?;
        if stream == Stream::Dns && matches!(o, Observation::Endpoint(_)) {
            return Err(invalid(
                "bad_field",
                format!("observations[{i}]: the dns stream carries only dns records"),
            ));
        }
        observations.push(o);
    }
    Ok(Batch {
        protocol_version: PROTOCOL_VERSION,
        upload_id,
        stream,
        batch_index,
        is_final: env.is_final,
        checksum,
        observations,
    })
}

/// `sha256:<64 hex>` over the exact bytes of the observations array.
fn verify_checksum(claimed: &str, bytes: &[u8]) -> Result<String, UploadError> {
    let hex_part = claimed
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            invalid(
                "bad_field",
                "checksum must be \"sha256:\" followed by 64 hex digits",
            )
        })?;
    let actual = hex::encode(Sha256::digest(bytes));
    if !hex_part.eq_ignore_ascii_case(&actual) {
        return Err(invalid(
            "checksum_mismatch",
            "checksum does not match the bytes of the observations array",
        ));
    }
    Ok(format!("sha256:{actual}"))
}

fn text(field: &str, v: Option<String>, max: usize) -> Result<Option<String>, String> {
    match v {
        Some(s) if s.len() > max => Err(format!("{field} longer than {max} bytes")),
        Some(s) if s.is_empty() => Ok(None),
        other => Ok(other),
    }
}

fn time(v: &str, earliest: DateTime<Utc>, latest: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let t = DateTime::parse_from_rfc3339(v)
        .map_err(|_| format!("observed_at {v:?} is not an RFC 3339 time"))?
        .with_timezone(&Utc);
    if t < earliest || t > latest {
        return Err(format!("observed_at {v:?} is out of range"));
    }
    // Millisecond precision everywhere, so that stored strings compare in time order.
    Ok(t.trunc_subsecs(3))
}

fn observation(
    o: RawObservation,
    earliest: DateTime<Utc>,
    latest: DateTime<Utc>,
) -> Result<Observation, String> {
    match o {
        RawObservation::Endpoint {
            ip,
            port,
            transport,
            service,
            product,
            version,
            banner,
            observed_at,
        } => {
            let ip: IpAddr = ip
                .parse()
                .map_err(|_| format!("ip {ip:?} is not an IP address"))?;
            let port = u16::try_from(port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("port {port} is not in 1..=65535"))?;
            if !matches!(transport.as_str(), "tcp" | "udp" | "sctp") {
                return Err(format!("transport {transport:?} is not tcp, udp or sctp"));
            }
            Ok(Observation::Endpoint(Endpoint {
                ip: ip.to_string(),
                port,
                transport,
                service: text("service", service, MAX_SHORT_TEXT)?,
                product: text("product", product, MAX_SHORT_TEXT)?,
                version: text("version", version, MAX_SHORT_TEXT)?,
                banner: text("banner", banner, MAX_BANNER)?,
                observed_at: time(&observed_at, earliest, latest)?,
            }))
        }
        RawObservation::Dns {
            name,
            record_type,
            value,
            observed_at,
        } => {
            let name = domain(&name)?;
            let record_type = record_type.to_ascii_uppercase();
            if !matches!(
                record_type.as_str(),
                "A" | "AAAA" | "CNAME" | "MX" | "NS" | "TXT" | "PTR" | "SOA" | "SRV" | "CAA"
            ) {
                return Err(format!("record_type {record_type:?} is not supported"));
            }
            if value.is_empty() || value.len() > MAX_DNS_VALUE {
                return Err(format!("value must be 1..={MAX_DNS_VALUE} bytes"));
            }
            let value = match record_type.as_str() {
                "A" => canonical_ip(&value, true)?,
                "AAAA" => canonical_ip(&value, false)?,
                _ => value,
            };
            Ok(Observation::Dns(DnsRecord {
                name,
                record_type,
                value,
                observed_at: time(&observed_at, earliest, latest)?,
            }))
        }
    }
}

fn canonical_ip(value: &str, v4: bool) -> Result<String, String> {
    match value.parse::<IpAddr>() {
        Ok(ip) if ip.is_ipv4() == v4 => Ok(ip.to_string()),
        _ => Err(format!(
            "value {value:?} is not an {} address",
            if v4 { "IPv4" } else { "IPv6" }
        )),
    }
}

/// A DNS name: lower-cased, trailing dot removed, labels of 1..=63 letters, digits, `-`,
/// `_` (service labels) or a leading `*` label.
pub fn domain(name: &str) -> Result<String, String> {
    let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let labels_ok = n.split('.').enumerate().all(|(i, l)| {
        (!l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
            || (i == 0 && l == "*")
    });
    if n.is_empty() || n.len() > MAX_DOMAIN || !labels_ok {
        return Err(format!("name {name:?} is not a valid DNS name"));
    }
    Ok(n)
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
