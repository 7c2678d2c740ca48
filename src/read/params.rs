//! Query parameters of the read API, validated into typed values with clear 400s, and
//! the opaque paging cursors (hex of a small JSON array, tagged with what it pages, so a
//! cursor of one listing is refused by another).

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::error::ReadError;
use crate::http::request::Req;

/// Longest free-text or keyword parameter accepted.
pub const MAX_TEXT: usize = 200;

/// `size` within `1..=max`, `default` when absent.
pub fn size(req: &Req, default: usize, max: usize) -> Result<usize, ReadError> {
    let Some(raw) = req.query_param("size") else {
        return Ok(default);
    };
    match raw.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(ReadError::invalid(
            "bad_size",
            format!("size must be an integer from 1 to {max}, got {raw:?}"),
        )),
    }
}

/// A path id: anything that is not a UUID cannot name a row, so it is simply not found.
pub fn path_id(raw: &str) -> Result<Uuid, ReadError> {
    Uuid::parse_str(raw).map_err(|_| ReadError::NotFound)
}

/// An optional UUID query parameter (400 when malformed).
pub fn uuid_param(req: &Req, key: &str) -> Result<Option<Uuid>, ReadError> {
    req.query_param(key)
        .map(|raw| {
            Uuid::parse_str(raw)
                .map_err(|_| ReadError::invalid("bad_parameter", format!("{key} must be a UUID")))
        })
        .transpose()
}

/// Encodes a cursor: `kind` plus the position values.
pub fn encode_cursor(kind: &str, values: &[Value]) -> String {
    let mut all = vec![Value::String(kind.to_string())];
    all.extend_from_slice(values);
    hex::encode(Value::Array(all).to_string())
}

/// Decodes the `after` parameter of a `kind` listing into exactly `arity` values.
pub fn cursor(req: &Req, kind: &str, arity: usize) -> Result<Option<Vec<Value>>, ReadError> {
    let Some(raw) = req.query_param("after") else {
        return Ok(None);
    };
    let bad = || ReadError::invalid("bad_cursor", "after is not a cursor of this listing");
    let bytes = hex::decode(raw).map_err(|_| bad())?;
    let Ok(Value::Array(mut values)) = serde_json::from_slice::<Value>(&bytes) else {
        return Err(bad());
    };
    if values.len() != arity + 1 || values[0] != Value::String(kind.to_string()) {
        return Err(bad());
    }
    values.remove(0);
    Ok(Some(values))
}

/// An IP address or CIDR block, canonical text (`10.0.0.0/8`, `2001:db8::1`).
pub fn ip_or_cidr(raw: &str) -> Result<String, ReadError> {
    let bad = || {
        ReadError::invalid(
            "bad_ip",
            format!("ip must be an IP address or a CIDR block, got {raw:?}"),
        )
    };
    match raw.split_once('/') {
        None => raw
            .parse::<IpAddr>()
            .map(|a| a.to_string())
            .map_err(|_| bad()),
        Some((addr, prefix)) => {
            let addr: IpAddr = addr.parse().map_err(|_| bad())?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            match prefix.parse::<u8>() {
                Ok(p) if p <= max && prefix.chars().all(|c| c.is_ascii_digit()) => {
                    Ok(format!("{addr}/{p}"))
                }
                _ => Err(bad()),
            }
        }
    }
}

/// A port number 1..=65535.
pub fn port(raw: &str) -> Result<u16, ReadError> {
    match raw.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(ReadError::invalid(
            "bad_port",
            format!("port must be an integer from 1 to 65535, got {raw:?}"),
        )),
    }
}

/// An RFC 3339 time.
pub fn time(key: &str, raw: &str) -> Result<DateTime<Utc>, ReadError> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ReadError::invalid(
                "bad_time",
                format!("{key} must be an RFC 3339 time such as 2026-11-29T10:00:00Z"),
            )
        })
}

/// A non-empty text parameter of at most [`MAX_TEXT`] characters, if present.
pub fn text(req: &Req, key: &str) -> Result<Option<String>, ReadError> {
    let Some(raw) = req.query_param(key) else {
        return Ok(None);
    };
    let raw = raw.trim();
    if raw.is_empty() || raw.chars().count() > MAX_TEXT {
        return Err(ReadError::invalid(
            "bad_parameter",
            format!("{key} must be 1 to {MAX_TEXT} characters"),
        ));
    }
    Ok(Some(raw.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(q: &str) -> Req {
        Req::new("GET", &format!("/x?{q}"), vec![], vec![])
    }

    #[test]
    fn size_edges() {
        assert_eq!(size(&req(""), 50, 200).unwrap(), 50);
        assert_eq!(size(&req("size=1"), 50, 200).unwrap(), 1);
        assert_eq!(size(&req("size=200"), 50, 200).unwrap(), 200);
        for bad in ["size=0", "size=201", "size=-1", "size=x", "size="] {
            assert_eq!(
                size(&req(bad), 50, 200).unwrap_err().to_string(),
                format!(
                    "size must be an integer from 1 to 200, got {:?}",
                    bad.trim_start_matches("size=")
                )
            );
        }
    }

    #[test]
    fn cursors_round_trip_and_are_tagged() {
        let c = encode_cursor("tasks", &[json!(5), json!("a")]);
        let r = req(&format!("after={c}"));
        assert_eq!(
            cursor(&r, "tasks", 2).unwrap().unwrap(),
            vec![json!(5), json!("a")]
        );
        assert!(cursor(&r, "assets", 2).is_err());
        assert!(cursor(&r, "tasks", 3).is_err());
        assert!(cursor(&req("after=zz"), "tasks", 2).is_err());
        assert!(cursor(&req("after=00"), "tasks", 2).is_err());
        assert!(cursor(&req(""), "tasks", 2).unwrap().is_none());
    }

    #[test]
    fn ip_and_cidr() {
        assert_eq!(ip_or_cidr("10.0.0.1").unwrap(), "10.0.0.1");
        assert_eq!(ip_or_cidr("10.0.0.0/8").unwrap(), "10.0.0.0/8");
        assert_eq!(ip_or_cidr("2001:db8::/32").unwrap(), "2001:db8::/32");
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "x",
            "10.0.0.1/",
            "10.0.0.1/+8",
            "::/129",
        ] {
            assert!(ip_or_cidr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ports_and_times() {
        assert_eq!(port("1").unwrap(), 1);
        assert_eq!(port("65535").unwrap(), 65535);
        assert!(port("0").is_err());
        assert!(port("65536").is_err());
        assert!(time("seen_since", "2026-11-29T10:00:00Z").is_ok());
        assert!(time("seen_since", "yesterday").is_err());
    }
}
