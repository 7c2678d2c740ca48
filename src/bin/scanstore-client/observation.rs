//! What the client sends: endpoint and DNS observations in the server's wire form, fitted
//! to the server's limits (long text cut at a character boundary, names checked) so that a
//! batch is never refused for what a scanner wrote.

use std::net::IpAddr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use scanstore::upload::batch::{domain, MAX_BANNER, MAX_SHORT_TEXT};
use scanstore::upload::details::{
    is_cpe, is_word, Hostname, NameSource, OsGuess, PortState, Script, MAX_CONFIDENCE, MAX_LIST,
    MAX_OS_GUESSES, MAX_SCRIPT_ID, MAX_SCRIPT_OUTPUT, MAX_TUNNEL,
};

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
        #[serde(skip_serializing_if = "Option::is_none")]
        state: Option<PortState>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        hostnames: Vec<Hostname>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        cpe: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        extra_info: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tunnel: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        confidence: Option<u8>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        scripts: Vec<Script>,
        observed_at: Time,
    },
    Host {
        ip: IpAddr,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        os: Vec<OsGuess>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        hostnames: Vec<Hostname>,
        observed_at: Time,
    },
    Dns {
        name: String,
        record_type: &'static str,
        value: String,
        observed_at: Time,
    },
}

impl Observation {
    pub fn observed_at(&self) -> &Time {
        match self {
            Observation::Endpoint { observed_at, .. }
            | Observation::Host { observed_at, .. }
            | Observation::Dns { observed_at, .. } => observed_at,
        }
    }
}

/// An observation time in the strict form the server reads (`2026-11-29T10:00:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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

/// An endpoint with what a scanner knows of it and its service.
#[derive(Default)]
pub struct Service<'a> {
    pub name: Option<&'a str>,
    pub product: Option<&'a str>,
    pub version: Option<&'a str>,
    pub banner: Option<&'a str>,
    pub state: Option<PortState>,
    pub hostnames: &'a [Hostname],
    pub cpe: &'a [String],
    pub extra_info: Option<&'a str>,
    pub tunnel: Option<&'a str>,
    pub confidence: Option<u8>,
    pub scripts: &'a [Script],
}

/// A short lower-case word as the server takes it (a tunnel or script id), or `None`.
fn word(v: &str, max: usize) -> Option<String> {
    is_word(v, max).then(|| v.to_string())
}

/// Hostnames as the server takes them: DNS names only, no duplicates, at most
/// [`MAX_LIST`].
pub fn hostnames<'a>(names: impl IntoIterator<Item = (&'a str, NameSource)>) -> Vec<Hostname> {
    let mut out: Vec<Hostname> = Vec::new();
    for (name, source) in names {
        let Ok(name) = domain(name) else { continue };
        let h = Hostname { name, source };
        if out.len() < MAX_LIST && !out.contains(&h) {
            out.push(h);
        }
    }
    out
}

pub fn endpoint(
    ip: IpAddr,
    port: u16,
    transport: Transport,
    service: Service<'_>,
    at: Time,
) -> Observation {
    let cpe = service
        .cpe
        .iter()
        .map(|c| c.trim().to_string())
        .filter(|c| is_cpe(c))
        .take(MAX_LIST)
        .collect();
    let scripts = service
        .scripts
        .iter()
        .filter_map(|s| {
            Some(Script {
                id: word(&s.id, MAX_SCRIPT_ID)?,
                output: fitted(Some(&s.output), MAX_SCRIPT_OUTPUT).unwrap_or_default(),
            })
        })
        .take(MAX_LIST)
        .collect();
    Observation::Endpoint {
        ip: ip.to_canonical(),
        port,
        transport,
        service: fitted(service.name, MAX_SHORT_TEXT),
        product: fitted(service.product, MAX_SHORT_TEXT),
        version: fitted(service.version, MAX_SHORT_TEXT),
        banner: fitted(service.banner, MAX_BANNER),
        // Absent is open: an open port's observation reads as it always did.
        state: service.state.filter(|s| *s != PortState::Open),
        hostnames: service.hostnames.iter().take(MAX_LIST).cloned().collect(),
        cpe,
        extra_info: fitted(service.extra_info, MAX_SHORT_TEXT),
        tunnel: service.tunnel.and_then(|t| word(t, MAX_TUNNEL)),
        confidence: service.confidence.map(|c| c.min(MAX_CONFIDENCE)),
        scripts,
        observed_at: at,
    }
}

/// A host's OS guesses and names; `None` when it has neither.
pub fn host(ip: IpAddr, os: &[(String, u8)], names: &[Hostname], at: Time) -> Option<Observation> {
    let os: Vec<OsGuess> = os
        .iter()
        .filter_map(|(name, accuracy)| {
            Some(OsGuess {
                name: fitted(Some(name), MAX_SHORT_TEXT)?,
                accuracy: (*accuracy).min(100),
            })
        })
        .take(MAX_OS_GUESSES)
        .collect();
    (!os.is_empty() || !names.is_empty()).then(|| Observation::Host {
        ip: ip.to_canonical(),
        os,
        hostnames: names.to_vec(),
        observed_at: at,
    })
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
                state: Some(PortState::Open),
                cpe: &["cpe:/a:nginx:nginx:1.24.0".into(), "not a cpe".into()],
                ..Service::default()
            },
            at,
        );
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"type":"endpoint","ip":"192.0.2.1","port":443,"transport":"tcp","service":"https","cpe":["cpe:/a:nginx:nginx:1.24.0"],"observed_at":"2025-11-29T10:00:00.000Z"}"#
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
