//! A batch request as the scanner sent it, validated: envelope fields, the checksum over
//! the exact bytes of the `observations` array, and every observation. Pure; touches
//! neither PostgreSQL nor Elasticsearch, so bad input never reaches either.

use std::borrow::Cow;
use std::net::IpAddr;

use chrono::{DateTime, Duration as ChronoDuration, SubsecRound, Timelike, Utc};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::batch_fast;
use super::details::{self, Details, Hostname, OsGuess, RawDetails, Script};
use super::error::UploadError;
use crate::ports::Transport;

pub const PROTOCOL_VERSION: u32 = 2;

/// Longest service, product and version, in bytes.
pub const MAX_SHORT_TEXT: usize = 256;
/// Longest banner, in bytes.
pub const MAX_BANNER: usize = 16 * 1024;
/// Longest DNS record value, in bytes.
pub const MAX_DNS_VALUE: usize = 4096;
/// Longest DNS name, without its trailing dot.
pub const MAX_DOMAIN: usize = 253;

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
    pub transport: Transport,
    pub service: Option<String>,
    pub product: Option<String>,
    pub version: Option<String>,
    pub banner: Option<String>,
    pub details: Details,
    pub observed_at: DateTime<Utc>,
}

/// What a scanner knows of a host as a whole: its OS guesses and names.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// Canonical text form, as an endpoint's.
    pub ip: String,
    pub os: Vec<OsGuess>,
    pub hostnames: Vec<Hostname>,
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
    Host(Host),
}

impl Observation {
    pub fn observed_at(&self) -> &DateTime<Utc> {
        match self {
            Observation::Endpoint(e) => &e.observed_at,
            Observation::Dns(d) => &d.observed_at,
            Observation::Host(h) => &h.observed_at,
        }
    }

    /// The address an endpoint or host observation is about.
    pub fn ip(&self) -> Option<&str> {
        match self {
            Observation::Endpoint(e) => Some(&e.ip),
            Observation::Host(h) => Some(&h.ip),
            Observation::Dns(_) => None,
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
    /// The window `observed_at` was checked against, and the positions outside it.
    pub window: Window,
    pub out_of_window: Vec<usize>,
}

impl Batch {
    /// 422 `out_of_window` when an observation lies outside the window. Checked for a
    /// batch seen for the first time: a retry was checked when it was first received, and
    /// is answered as before (`saved: 0`, or completed) however its times have aged.
    pub fn check_window(&self) -> Result<(), UploadError> {
        if self.out_of_window.is_empty() {
            return Ok(());
        }
        let at = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        Err(refuse_positions(
            "out_of_window",
            &format!(
                "observed outside {} .. {}",
                at(&self.window.earliest),
                at(&self.window.latest)
            ),
            &self.out_of_window,
        ))
    }

    pub fn endpoint_count(&self) -> usize {
        self.observations
            .iter()
            .filter(|o| matches!(o, Observation::Endpoint(_)))
            .count()
    }

    pub fn dns_count(&self) -> usize {
        self.observations
            .iter()
            .filter(|o| matches!(o, Observation::Dns(_)))
            .count()
    }

    /// The distinct A/AAAA answers to names `wanted` keeps, in address order, IPv4-mapped
    /// answers as IPv4.
    pub fn dns_answers_where(&self, wanted: impl Fn(&str) -> bool) -> Vec<IpAddr> {
        let mut answers: Vec<IpAddr> = self
            .observations
            .iter()
            .filter_map(|o| match o {
                Observation::Dns(d)
                    if matches!(d.record_type.as_str(), "A" | "AAAA") && wanted(&d.name) =>
                {
                    d.value.parse().ok().map(|ip: IpAddr| ip.to_canonical())
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

/// An observation as sent, before validation: what the general reading deserialises each
/// one into, and what `batch_fast` reads the common shape into. The texts that validation
/// only reads are borrowed from the body where they hold no escapes.
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq, Clone))]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawObservation<'a> {
    Endpoint {
        #[serde(borrow)]
        ip: Cow<'a, str>,
        port: i64,
        #[serde(borrow)]
        transport: Cow<'a, str>,
        service: Option<String>,
        product: Option<String>,
        version: Option<String>,
        banner: Option<String>,
        #[serde(borrow)]
        observed_at: Cow<'a, str>,
        state: Option<String>,
        hostnames: Option<Vec<Hostname>>,
        cpe: Option<Vec<String>>,
        extra_info: Option<String>,
        tunnel: Option<String>,
        confidence: Option<i64>,
        scripts: Option<Vec<Script>>,
    },
    Host {
        #[serde(borrow)]
        ip: Cow<'a, str>,
        os: Option<Vec<OsGuess>>,
        hostnames: Option<Vec<Hostname>>,
        #[serde(borrow)]
        observed_at: Cow<'a, str>,
    },
    Dns {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(borrow)]
        record_type: Cow<'a, str>,
        #[serde(borrow)]
        value: Cow<'a, str>,
        #[serde(borrow)]
        observed_at: Cow<'a, str>,
    },
}

fn invalid(code: &'static str, message: impl Into<String>) -> UploadError {
    UploadError::Invalid {
        code,
        message: message.into(),
    }
}

/// The span of time every `observed_at` of a batch must lie in (both ends included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub earliest: DateTime<Utc>,
    pub latest: DateTime<Utc>,
}

impl Window {
    /// `[now - max_age, now + max_skew]`.
    pub fn around(now: DateTime<Utc>, max_age: ChronoDuration, max_skew: ChronoDuration) -> Window {
        Window {
            earliest: now - max_age,
            latest: now + max_skew,
        }
    }

    fn contains(&self, t: &DateTime<Utc>) -> bool {
        (self.earliest..=self.latest).contains(t)
    }
}

/// Most positions listed in an `out_of_window` or `out_of_scope` answer.
pub const LISTED_POSITIONS: usize = 100;

/// The 422 refusal of a whole batch for the observations at `positions`.
pub fn refuse_positions(code: &'static str, what: &str, positions: &[usize]) -> UploadError {
    UploadError::Unprocessable {
        code,
        message: format!(
            "{} observation(s) {what}; the batch is refused whole (error.details.positions)",
            positions.len()
        ),
        details: serde_json::json!({
            "count": positions.len(),
            "positions": &positions[..positions.len().min(LISTED_POSITIONS)],
        }),
    }
}

/// Parses and validates a request body; every `observed_at` must lie in `window`.
pub fn parse(body: &[u8], max_observations: usize, window: Window) -> Result<Batch, UploadError> {
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
    let text = env.observations.get();
    let checksum = verify_checksum(&env.checksum, text.as_bytes())?;
    // The common shape of valid observations in one pass; anything else item by item, so
    // that the first item that cannot be read or accepted is named.
    let observations = match batch_fast::read(text, max_observations, |o| accept(o, stream).ok()) {
        Some(observations) => observations,
        None => {
            let raw: Vec<&RawValue> = serde_json::from_str(text)
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
            raw.into_iter()
                .enumerate()
                .map(|(i, r)| {
                    serde_json::from_str(r.get())
                        .map_err(|e| e.to_string())
                        .and_then(|o| accept(o, stream))
                        .map_err(|m| invalid("bad_field", format!("observations[{i}]: {m}")))
                })
                .collect::<Result<Vec<_>, _>>()?
        }
    };
    let out_of_window = observations
        .iter()
        .enumerate()
        .filter(|(_, o)| !window.contains(o.observed_at()))
        .map(|(i, _)| i)
        .collect();
    Ok(Batch {
        protocol_version: PROTOCOL_VERSION,
        upload_id,
        stream,
        batch_index,
        is_final: env.is_final,
        checksum,
        observations,
        window,
        out_of_window,
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

/// `YYYY-MM-DDTHH:MM:SS[.fraction]` then `Z` or `±HH:MM`: the RFC 3339 times that
/// Elasticsearch's `strict_date_optional_time` reads the same way (upper-case `T` and
/// `Z`, 1 to 9 fraction digits, no leap second), checked before chrono parses the value.
fn strict_time_shape(v: &str) -> bool {
    let b = v.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let fixed = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !fixed {
        return false;
    }
    let mut rest = &b[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = fraction.iter().take_while(|d| d.is_ascii_digit()).count();
        if !(1..=9).contains(&n) {
            return false;
        }
        rest = &fraction[n..];
    }
    match rest {
        b"Z" => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    }
}

fn time(v: &str) -> Result<DateTime<Utc>, String> {
    let t = strict_time_shape(v)
        .then(|| DateTime::parse_from_rfc3339(v).ok())
        .flatten()
        // chrono reads `:60` as a leap second; Elasticsearch refuses it.
        .filter(|t| t.nanosecond() < 1_000_000_000)
        .ok_or_else(|| format!("observed_at {v:?} is not a time such as 2026-11-29T10:00:00Z"))?
        .with_timezone(&Utc);
    // Millisecond precision everywhere, so that stored strings compare in time order.
    Ok(t.trunc_subsecs(3))
}

/// One observation of a batch on `stream`, validated; the error names what is wrong.
fn accept(o: RawObservation, stream: Stream) -> Result<Observation, String> {
    let o = observation(o)?;
    if stream == Stream::Dns && !matches!(o, Observation::Dns(_)) {
        return Err("the dns stream carries only dns records".into());
    }
    Ok(o)
}

fn observation(o: RawObservation) -> Result<Observation, String> {
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
            state,
            hostnames,
            cpe,
            extra_info,
            tunnel,
            confidence,
            scripts,
        } => {
            let ip = address(ip)?;
            let port = u16::try_from(port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("port {port} is not in 1..=65535"))?;
            let transport = Transport::from_name(&transport)
                .ok_or_else(|| format!("transport {transport:?} is not tcp, udp or sctp"))?;
            let details = RawDetails {
                state,
                hostnames,
                cpe,
                extra_info,
                tunnel,
                confidence,
                scripts,
            }
            .validate()?;
            Ok(Observation::Endpoint(Endpoint {
                ip,
                port,
                transport,
                service: text("service", service, MAX_SHORT_TEXT)?,
                product: text("product", product, MAX_SHORT_TEXT)?,
                version: text("version", version, MAX_SHORT_TEXT)?,
                banner: text("banner", banner, MAX_BANNER)?,
                details,
                observed_at: time(&observed_at)?,
            }))
        }
        RawObservation::Host {
            ip,
            os,
            hostnames,
            observed_at,
        } => Ok(Observation::Host(Host {
            ip: address(ip)?,
            os: details::os_guesses(os)?,
            hostnames: details::hostnames(hostnames)?,
            observed_at: time(&observed_at)?,
        })),
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
                _ => value.into_owned(),
            };
            Ok(Observation::Dns(DnsRecord {
                name,
                record_type,
                value,
                observed_at: time(&observed_at)?,
            }))
        }
    }
}

/// An endpoint's or host's address in canonical text form. An IPv4-mapped IPv6 address
/// is the IPv4 host it maps, one endpoint either way.
fn address(ip: Cow<str>) -> Result<String, String> {
    match ip.parse::<IpAddr>() {
        // Dotted quads parse only in their one text form (no leading zeros): kept as sent.
        Ok(IpAddr::V4(_)) => Ok(ip.into_owned()),
        Ok(a) => Ok(a.to_canonical().to_string()),
        Err(_) => Err(format!("ip {ip:?} is not an IP address")),
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
pub(super) mod tests;
