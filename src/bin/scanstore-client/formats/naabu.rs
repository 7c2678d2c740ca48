//! naabu's `-json` output (runner/output.go in naabu's source): one object per open port,
//! `host` set when the port was found through a name rather than an address.

use std::net::IpAddr;

use serde::Deserialize;

use super::Unit;
use crate::observation::{address_record, endpoint, Service, Time, Transport};

#[derive(Deserialize)]
struct Record {
    host: Option<String>,
    ip: String,
    port: u64,
    #[serde(default = "tcp")]
    protocol: String,
    /// The port answered TLS.
    #[serde(default)]
    tls: bool,
    timestamp: String,
}

fn tcp() -> String {
    "tcp".into()
}

pub fn line(line: &str) -> Result<Option<Unit>, String> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let r: Record = serde_json::from_str(line).map_err(|e| format!("not a naabu record: {e}"))?;
    let ip: IpAddr =
        r.ip.parse()
            .map_err(|_| format!("ip {:?} is not an address", r.ip))?;
    let at = Time::from_rfc3339(&r.timestamp)
        .ok_or_else(|| format!("timestamp {:?} is not an RFC 3339 time", r.timestamp))?;
    let port = u16::try_from(r.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port {} is not in 1..=65535", r.port))?;
    let Some(transport) = Transport::parse(&r.protocol) else {
        return Ok(None);
    };
    // The name naabu resolved comes first: it is what puts the address in a domain
    // target's scope.
    let mut observations: Vec<_> = r
        .host
        .as_deref()
        .and_then(|h| address_record(h, ip, at))
        .into_iter()
        .collect();
    let service = Service {
        tunnel: r.tls.then_some("ssl"),
        ..Service::default()
    };
    observations.push(endpoint(ip, port, transport, service, at));
    Ok(Some(Unit {
        offset: 0,
        host: Some(ip),
        observations,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_with_a_name_carries_its_address_record() {
        let u = line(r#"{"host":"www.example.com","ip":"192.0.2.9","timestamp":"2025-11-29T10:00:00.123456789Z","port":8443,"protocol":"tcp","tls":true}"#)
            .unwrap()
            .unwrap();
        let v: Vec<serde_json::Value> = u
            .observations
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect();
        assert_eq!(v[0]["type"], "dns");
        assert_eq!(v[0]["value"], "192.0.2.9");
        assert_eq!(v[1]["port"], 8443);
        assert_eq!(v[1]["observed_at"], "2025-11-29T10:00:00.123Z");
        assert_eq!(v[1]["tunnel"], "ssl");
        let bare = line(r#"{"ip":"192.0.2.9","timestamp":"2025-11-29T10:00:00Z","port":22,"protocol":"tcp","tls":false}"#).unwrap().unwrap();
        assert_eq!(bare.observations.len(), 1);
        assert!(line(r#"{"ip":"192.0.2.9","timestamp":"yesterday","port":22}"#).is_err());
        assert!(line(r#"{"ip":"192.0.2.9","timestamp":"2025-11-29T10:00:00Z","port":0}"#).is_err());
    }
}
