//! Typed field values: how `ip`, `date`, numeric and keyword values parse, order and print.

use std::cmp::Ordering;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use chrono::{DateTime, NaiveDate, NaiveTime, TimeZone, Timelike, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value;

/// A comparable indexed value (what doc values hold).
#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    Bool(bool),
    Long(i64),
    Double(f64),
    Str(String),
    /// IPv4 is stored IPv4-mapped, so both families share one 128-bit order (as ES does).
    Ip(u128),
    /// Epoch milliseconds.
    Date(i64),
}

impl Key {
    fn rank(&self) -> u8 {
        match self {
            Key::Bool(_) => 0,
            Key::Long(_) | Key::Double(_) | Key::Date(_) => 1,
            Key::Ip(_) => 2,
            Key::Str(_) => 3,
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            Key::Long(v) | Key::Date(v) => Some(*v as f64),
            Key::Double(v) => Some(*v),
            _ => None,
        }
    }

    /// The JSON form used in sort values, composite keys and terms buckets.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Numeric value for metric aggregations.
    pub fn numeric(&self) -> Option<f64> {
        match self {
            Key::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            other => other.as_f64(),
        }
    }
}

pub fn cmp_keys(a: &Key, b: &Key) -> Ordering {
    match (a, b) {
        (Key::Bool(x), Key::Bool(y)) => x.cmp(y),
        (Key::Long(x), Key::Long(y)) | (Key::Date(x), Key::Date(y)) => x.cmp(y),
        (Key::Str(x), Key::Str(y)) => x.cmp(y),
        (Key::Ip(x), Key::Ip(y)) => x.cmp(y),
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            _ => a.rank().cmp(&b.rank()),
        },
    }
}

pub fn parse_ip(s: &str) -> Option<u128> {
    match s.trim().parse::<IpAddr>().ok()? {
        IpAddr::V4(v4) => Some(u128::from(v4.to_ipv6_mapped())),
        IpAddr::V6(v6) => Some(u128::from(v6)),
    }
}

/// An address as ES writes it: IPv4-mapped addresses as IPv4, others as IPv6.
struct IpText(u128);

impl fmt::Display for IpText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => v4.fmt(f),
            None => v6.fmt(f),
        }
    }
}

/// A key as ES writes it in `sort` values and bucket keys: written straight into a reply,
/// with no JSON value of its own (a page of hits has three per hit).
impl Serialize for Key {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Key::Bool(b) => s.serialize_bool(*b),
            Key::Long(v) | Key::Date(v) => s.serialize_i64(*v),
            Key::Double(v) => s.serialize_f64(*v),
            Key::Str(v) => s.serialize_str(v),
            Key::Ip(v) => s.collect_str(&IpText(*v)),
        }
    }
}

/// A CIDR (`10.0.0.0/8`, `2001:db8::/32`) as an inclusive 128-bit range.
pub fn parse_cidr(s: &str) -> Option<(u128, u128)> {
    let (addr, len) = s.split_once('/')?;
    let len: u32 = len.parse().ok()?;
    let is_v4 = addr.parse::<std::net::Ipv4Addr>().is_ok();
    let base = parse_ip(addr)?;
    let bits = if is_v4 { len.checked_add(96)? } else { len };
    if bits > 128 || (is_v4 && len > 32) {
        return None;
    }
    let host_bits = 128 - bits;
    let mask = if host_bits == 128 {
        0
    } else {
        u128::MAX << host_bits
    };
    Some((base & mask, (base & mask) | !mask))
}

/// `strict_date_optional_time||epoch_millis`, the ES default date format.
pub fn parse_date(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => parse_date_str(s),
        _ => None,
    }
}

pub fn parse_date_str(s: &str) -> Option<i64> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && s.len() > 4 {
        return s.parse().ok();
    }
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        // chrono reads a leap second (`:60`); Elasticsearch's java.time parser refuses it.
        return (dt.nanosecond() < 1_000_000_000).then(|| dt.timestamp_millis());
    }
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let year: i32 = digits(parts.next()?, 4)?;
    let month: u32 = parts.next().map(|p| digits(p, 2)).unwrap_or(Some(1))?;
    let day: u32 = parts.next().map(|p| digits(p, 2)).unwrap_or(Some(1))?;
    if parts.next().is_some() {
        return None;
    }
    let d = NaiveDate::from_ymd_opt(year, month, day)?;
    let (t, offset_ms) = match time {
        None => (NaiveTime::MIN, 0),
        Some(t) => parse_time(t)?,
    };
    Some(Utc.from_utc_datetime(&d.and_time(t)).timestamp_millis() - offset_ms)
}

fn parse_time(t: &str) -> Option<(NaiveTime, i64)> {
    let (clock, offset_ms) = if let Some(c) = t.strip_suffix('Z') {
        (c, 0)
    } else if let Some(pos) = t.rfind(['+', '-']) {
        let (c, off) = t.split_at(pos);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let digits: String = off[1..].chars().filter(|c| c.is_ascii_digit()).collect();
        if digits.len() != 4 && digits.len() != 2 {
            return None;
        }
        let h: i64 = digits.get(0..2)?.parse().ok()?;
        let m: i64 = digits
            .get(2..4)
            .map(str::parse)
            .transpose()
            .ok()?
            .unwrap_or(0);
        (c, sign * (h * 3_600_000 + m * 60_000))
    } else {
        (t, 0)
    };
    let mut it = clock.split(':');
    let h: u32 = digits(it.next()?, 2)?;
    let m: u32 = it.next().map(|p| digits(p, 2)).unwrap_or(Some(0))?;
    let (s, nanos) = match it.next() {
        None => (0, 0),
        Some(sec) => {
            let (whole, frac) = sec.split_once(['.', ',']).unwrap_or((sec, ""));
            let mut f = frac.to_owned();
            if f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            while f.len() < 9 {
                f.push('0');
            }
            (digits(whole, 2)?, f.parse().ok()?)
        }
    };
    Some((NaiveTime::from_hms_nano_opt(h, m, s, nanos)?, offset_ms))
}

/// A field of exactly `n` ASCII digits, as the strict formats require (`2026-1-2` is not a
/// date to them).
fn digits<T: std::str::FromStr>(field: &str, n: usize) -> Option<T> {
    (field.len() == n && field.bytes().all(|b| b.is_ascii_digit()))
        .then(|| field.parse().ok())
        .flatten()
}

pub fn fmt_date(ms: i64) -> String {
    match Utc.timestamp_millis_opt(ms) {
        chrono::LocalResult::Single(dt) => dt.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        _ => ms.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse_in_es_default_format() {
        assert_eq!(parse_date_str("1970-01-01T00:00:01.000Z"), Some(1000));
        assert_eq!(parse_date_str("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_date_str("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_date_str("1234567890123"), Some(1_234_567_890_123));
        assert_eq!(parse_date_str("not a date"), None);
        assert_eq!(parse_date_str("2026-13-01"), None);
        // strict_date_optional_time: fixed-width fields, no leap second.
        assert_eq!(parse_date_str("1970-1-2"), None);
        assert_eq!(parse_date_str("1970-01-01T1:00:00Z"), None);
        assert_eq!(parse_date_str("2016-12-31T23:59:60Z"), None);
        assert_eq!(parse_date_str("2016-12-31T23:59:60"), None);
        assert_eq!(parse_date_str("1970-01-01T00:00"), Some(0));
        assert_eq!(parse_date_str("1970"), Some(0));
        assert_eq!(fmt_date(1000), "1970-01-01T00:00:01.000Z");
    }

    #[test]
    fn ips_order_and_cidrs() {
        let a = parse_ip("10.0.0.9").unwrap_or(0);
        let b = parse_ip("10.0.0.12").unwrap_or(0);
        assert!(a < b);
        assert_eq!(IpText(a).to_string(), "10.0.0.9");
        let (lo, hi) = parse_cidr("10.0.0.0/24").unwrap_or((1, 0));
        assert!(lo <= a && a <= hi);
        assert!(parse_cidr("10.0.0.0/33").is_none());
        assert!(parse_ip("10.0.0.256").is_none());
        assert_eq!(
            IpText(parse_ip("2001:db8::1").unwrap_or(0)).to_string(),
            "2001:db8::1"
        );
        assert_eq!(serde_json::to_value(Key::Ip(a)).unwrap(), "10.0.0.9");
        assert_eq!(Key::Double(f64::NAN).to_json(), Value::Null);
    }
}
