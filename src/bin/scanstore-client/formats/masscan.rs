//! masscan's `-oJ` and `-oL` output (out-json.c, out-text.c in masscan's source): a status
//! record per open (or, with `--show closed`, closed) port, and banner records that name
//! the protocol masscan recognised.

use std::net::IpAddr;

use serde::Deserialize;

use super::Unit;
use scanstore::upload::details::PortState;

use crate::observation::{endpoint, Service, Time, Transport};

/// What a masscan banner record says, by the protocol name masscan gives it.
enum Banner<'a> {
    /// The port speaks this protocol; the text is what it said.
    Service(&'a str),
    /// Text about the port (an HTML title or page) without naming its protocol.
    Text,
    /// A certificate or other blob: not a banner.
    Skip,
}

fn banner_kind(app: &str) -> Banner<'_> {
    match app {
        "title" | "html" => Banner::Text,
        "X509" | "X509CA" | "" | "unknown" => Banner::Skip,
        name => Banner::Service(name),
    }
}

/// What a record says of a port: its state (a status record), or a banner.
enum Said<'a> {
    State(PortState),
    Banner { app: &'a str, text: &'a str },
}

fn record(ip: IpAddr, port: u16, transport: Transport, at: Time, said: Said<'_>) -> Option<Unit> {
    let service = match said {
        Said::State(state) => Service {
            state: Some(state),
            ..Service::default()
        },
        Said::Banner { app, text } => match banner_kind(app) {
            Banner::Skip => return None,
            Banner::Text => Service {
                banner: Some(text),
                ..Service::default()
            },
            Banner::Service(name) => Service {
                name: Some(name),
                banner: Some(text),
                ..Service::default()
            },
        },
    };
    Some(Unit {
        offset: 0,
        host: Some(ip),
        observations: vec![endpoint(ip, port, transport, service, at)],
    })
}

fn port(n: u64) -> Result<u16, String> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("port {n} is not in 1..=65535"))
}

#[derive(Deserialize)]
struct JsonRecord {
    ip: String,
    timestamp: String,
    ports: Vec<JsonPort>,
}

#[derive(Deserialize)]
struct JsonPort {
    port: u64,
    proto: String,
    status: Option<String>,
    service: Option<JsonService>,
}

#[derive(Deserialize)]
struct JsonService {
    name: String,
    banner: String,
}

/// One `-oJ` line: `[`, `]`, a bare `,`, or a record with a leading or trailing comma
/// (masscan prepends one; older versions appended it).
pub fn json_line(line: &str) -> Result<Option<Unit>, String> {
    let text = line
        .trim()
        .trim_start_matches(',')
        .trim_end_matches(',')
        .trim();
    if text.is_empty() || text == "[" || text == "]" {
        return Ok(None);
    }
    let r: JsonRecord =
        serde_json::from_str(text).map_err(|e| format!("not a masscan record: {e}"))?;
    let ip: IpAddr =
        r.ip.parse()
            .map_err(|_| format!("ip {:?} is not an address", r.ip))?;
    let at = Time::from_epoch(&r.timestamp)
        .ok_or_else(|| format!("timestamp {:?} is not seconds since 1970", r.timestamp))?;
    let Some(p) = r.ports.first() else {
        return Ok(None);
    };
    let Some(transport) = Transport::parse(&p.proto) else {
        return Ok(None);
    };
    let port = port(p.port)?;
    Ok(
        match (&p.service, p.status.as_deref().and_then(PortState::parse)) {
            (Some(s), _) => record(
                ip,
                port,
                transport,
                at,
                Said::Banner {
                    app: &s.name,
                    text: &s.banner,
                },
            ),
            (None, Some(state)) => record(ip, port, transport, at, Said::State(state)),
            (None, None) => None,
        },
    )
}

/// One `-oL` line: `open tcp 80 192.0.2.1 1764410400`,
/// `banner tcp 80 192.0.2.1 1764410400 http HTTP/1.0 200 OK…`, or a `#` comment.
pub fn list_line(line: &str) -> Result<Option<Unit>, String> {
    if line.trim().is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut fields = line.splitn(7, ' ');
    let mut next = |what: &str| {
        fields
            .next()
            .filter(|f| !f.is_empty())
            .ok_or_else(|| format!("no {what}: not a masscan -oL line"))
    };
    let kind = next("status")?;
    let proto = next("protocol")?;
    let port_text = next("port")?;
    let ip_text = next("address")?;
    let at_text = next("timestamp")?;
    let Some(transport) = Transport::parse(proto) else {
        return Ok(None);
    };
    let port = port(
        port_text
            .parse()
            .map_err(|_| format!("port {port_text:?} is not a number"))?,
    )?;
    let ip: IpAddr = ip_text
        .parse()
        .map_err(|_| format!("address {ip_text:?} is not an IP address"))?;
    let at = Time::from_epoch(at_text)
        .ok_or_else(|| format!("timestamp {at_text:?} is not seconds since 1970"))?;
    Ok(match kind {
        "banner" => {
            let app = next("protocol name")?;
            let text = fields.next().unwrap_or("");
            record(ip, port, transport, at, Said::Banner { app, text })
        }
        // `open`, and `closed` with `--show closed`.
        status => {
            PortState::parse(status).and_then(|s| record(ip, port, transport, at, Said::State(s)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Observation;

    fn one(u: Option<Unit>) -> serde_json::Value {
        let u = u.expect("a unit");
        assert_eq!(u.observations.len(), 1);
        serde_json::to_value(&u.observations[0]).unwrap()
    }

    #[test]
    fn json_status_and_banner_records() {
        let open = r#"{   "ip": "192.0.2.7",   "timestamp": "1764410400", "ports": [ {"port": 443, "proto": "tcp", "status": "open", "reason": "syn-ack", "ttl": 54} ] }"#;
        let v = one(json_line(open).unwrap());
        assert_eq!(v["ip"], "192.0.2.7");
        assert_eq!(v["port"], 443);
        assert_eq!(v["observed_at"], "2025-11-29T10:00:00.000Z");
        assert!(v.get("service").is_none());
        let banner = r#",{   "ip": "192.0.2.7",   "timestamp": "1764410401", "ports": [ {"port": 22, "proto": "tcp", "service": {"name": "ssh", "banner": "SSH-2.0-OpenSSH_8.9p1"} } ] }"#;
        let v = one(json_line(banner).unwrap());
        assert_eq!(
            (v["service"].as_str(), v["banner"].as_str()),
            (Some("ssh"), Some("SSH-2.0-OpenSSH_8.9p1"))
        );
        for nothing in ["[", "]", ",", ""] {
            assert!(json_line(nothing).unwrap().is_none(), "{nothing}");
        }
        let closed = r#"{"ip": "192.0.2.7", "timestamp": "1764410400", "ports": [{"port": 1, "proto": "tcp", "status": "closed"}]}"#;
        assert_eq!(one(json_line(closed).unwrap())["state"], "closed");
        let cert = r#"{"ip": "192.0.2.7", "timestamp": "1", "ports": [{"port": 443, "proto": "tcp", "service": {"name": "X509", "banner": "MIIB"}}]}"#;
        assert!(json_line(cert).unwrap().is_none());
        assert!(json_line(r#"{"ip": "nope", "timestamp": "1", "ports": []}"#).is_err());
    }

    #[test]
    fn list_status_and_banner_lines() {
        let v = one(list_line("open udp 53 2001:db8::5 1764410400").unwrap());
        assert_eq!(
            (v["transport"].as_str(), v["ip"].as_str()),
            (Some("udp"), Some("2001:db8::5"))
        );
        let v = one(list_line(
            "banner tcp 80 192.0.2.1 1764410400 http HTTP/1.0 200 OK\\x0d\\x0aServer: nginx",
        )
        .unwrap());
        assert_eq!(v["service"], "http");
        assert_eq!(v["banner"], "HTTP/1.0 200 OK\\x0d\\x0aServer: nginx");
        let v = one(list_line("banner tcp 80 192.0.2.1 1764410400 title Welcome").unwrap());
        assert!(v.get("service").is_none());
        assert_eq!(
            one(list_line("closed tcp 81 192.0.2.1 1764410400").unwrap())["state"],
            "closed"
        );
        assert!(one(list_line("open tcp 81 192.0.2.1 1764410400").unwrap())
            .get("state")
            .is_none());
        assert!(list_line("#masscan").unwrap().is_none());
        assert!(list_line("# end").unwrap().is_none());
        assert!(list_line("open icmp 0 192.0.2.1 1764410400")
            .unwrap()
            .is_none());
        assert!(list_line("open tcp 70000 192.0.2.1 1764410400").is_err());
        assert!(list_line("open tcp 80").is_err());
        assert!(matches!(
            list_line("open tcp 80 192.0.2.1 1764410400")
                .unwrap()
                .unwrap()
                .observations[0],
            Observation::Endpoint { port: 80, .. }
        ));
    }
}
