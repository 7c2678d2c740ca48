//! What the client sends: endpoint and DNS observations in the server's wire form, fitted
//! to the server's limits (long text cut at a character boundary, names checked) so that a
//! batch is never refused for what a scanner wrote.

use std::net::IpAddr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use scanstore::upload::batch::{domain, MAX_BANNER, MAX_SHORT_TEXT};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
    Sctp,
}

impl Transport {
    /// The transports scanstore stores; anything else (icmp, arp) is not an endpoint.
    pub fn parse(s: &str) -> Option<Transport> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Transport::Tcp),
            "udp" => Some(Transport::Udp),
            "sctp" => Some(Transport::Sctp),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Observation {
    Endpoint {
        ip: IpAddr,
        port: u16,
        transport: Transport,
        #[serde(skip_serializing_if = "Option::is_none")]
        service: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        product: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        banner: Option<String>,
        observed_at: Time,
    },
    Dns {
        name: String,
        record_type: &'static str,
        value: String,
        observed_at: Time,
    },
}

/// An observation time in the strict form the server reads (`2026-11-29T10:00:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time(pub DateTime<Utc>);

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl Time {
    /// Seconds since the epoch, as nmap and masscan write them.
    pub fn from_epoch(text: &str) -> Option<Time> {
        let secs: i64 = text.trim().parse().ok()?;
        DateTime::from_timestamp(secs, 0).map(Time)
    }

    /// An RFC 3339 time with any offset and precision (naabu's Go timestamps).
    pub fn from_rfc3339(text: &str) -> Option<Time> {
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| Time(t.with_timezone(&Utc)))
    }
}

/// Text as the server takes it: `None` when empty, cut to `max` bytes otherwise.
pub fn fitted(text: Option<&str>, max: usize) -> Option<String> {
    let t = text?.trim();
    if t.is_empty() {
        return None;
    }
    let mut end = t.len().min(max);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    Some(t[..end].to_string())
}

/// An endpoint with what a scanner knows of its service.
pub struct Service<'a> {
    pub name: Option<&'a str>,
    pub product: Option<&'a str>,
    pub version: Option<&'a str>,
    pub banner: Option<&'a str>,
}

impl Service<'_> {
    pub const NONE: Service<'static> = Service {
        name: None,
        product: None,
        version: None,
        banner: None,
    };
}

pub fn endpoint(
    ip: IpAddr,
    port: u16,
    transport: Transport,
    service: Service<'_>,
    at: Time,
) -> Observation {
    Observation::Endpoint {
        ip: ip.to_canonical(),
        port,
        transport,
        service: fitted(service.name, MAX_SHORT_TEXT),
        product: fitted(service.product, MAX_SHORT_TEXT),
        version: fitted(service.version, MAX_SHORT_TEXT),
        banner: fitted(service.banner, MAX_BANNER),
        observed_at: at,
    }
}

/// The A or AAAA record that a scanner resolved `name` to `ip`, or `None` when `name` is
/// no DNS name (a user may have typed anything).
pub fn address_record(name: &str, ip: IpAddr, at: Time) -> Option<Observation> {
    let name = domain(name).ok()?;
    let ip = ip.to_canonical();
    Some(Observation::Dns {
        name,
        record_type: if ip.is_ipv4() { "A" } else { "AAAA" },
        value: ip.to_string(),
        observed_at: at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_character_boundary() {
        let s = "é".repeat(200); // 400 bytes
        let f = fitted(Some(&s), MAX_SHORT_TEXT).unwrap();
        assert!(f.len() <= MAX_SHORT_TEXT && f.len() >= MAX_SHORT_TEXT - 1);
        assert!(f.chars().all(|c| c == 'é'));
        assert_eq!(fitted(Some("  "), 10), None);
    }

    #[test]
    fn wire_form_is_what_the_server_reads() {
        let at = Time::from_epoch("1764410400").unwrap();
        let o = endpoint(
            "::ffff:192.0.2.1".parse().unwrap(),
            443,
            Transport::Tcp,
            Service {
                name: Some("https"),
                ..Service::NONE
            },
            at,
        );
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"type":"endpoint","ip":"192.0.2.1","port":443,"transport":"tcp","service":"https","observed_at":"2025-11-29T10:00:00.000Z"}"#
        );
        assert!(address_record("not a name", "192.0.2.1".parse().unwrap(), at).is_none());
        assert_eq!(
            serde_json::to_value(
                address_record("WWW.Example.com.", "2001:db8::1".parse().unwrap(), at).unwrap()
            )
            .unwrap()["record_type"],
            "AAAA"
        );
    }
}
