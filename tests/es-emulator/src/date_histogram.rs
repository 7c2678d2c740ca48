//! `date_histogram` composite sources: fixed (`fixed_interval`, legacy `interval`) and
//! calendar (`calendar_interval`: minute … year) buckets, `offset`, fixed-offset
//! `time_zone`, and key formats (`strict_date`, `iso8601`/`strict_date_optional_time`, or
//! epoch millis). Named time zones (`Europe/Paris`) are not supported.

use chrono::{Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde_json::{json, Value};

use crate::error::EsError;
use crate::values::parse_date_str;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// The key formats the emulator prints: a day, epoch millis, or ISO 8601 date-time.
const FORMATS: [&str; 9] = [
    "strict_date",
    "date",
    "yyyy-MM-dd",
    "epoch_millis",
    "strict_date_optional_time",
    "date_optional_time",
    "strict_date_time",
    "date_time",
    "iso8601",
];

#[derive(Debug, Clone, Copy)]
enum Interval {
    Fixed(i64),
    Week,
    Month,
    Quarter,
    Year,
}

#[derive(Debug, Clone)]
pub struct DateHisto {
    interval: Interval,
    offset_ms: i64,
    tz_ms: i64,
    format: Option<String>,
}

fn time_value(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let n: i64 = s[..split].parse().ok()?;
    let unit = match &s[split..] {
        "ms" => 1,
        "s" => 1000,
        "m" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        _ => return None,
    };
    Some(if neg { -n * unit } else { n * unit })
}

fn calendar(s: &str) -> Option<Interval> {
    Some(match s {
        "1m" | "minute" => Interval::Fixed(MINUTE),
        "1h" | "hour" => Interval::Fixed(HOUR),
        "1d" | "day" => Interval::Fixed(DAY),
        "1w" | "week" => Interval::Week,
        "1M" | "month" => Interval::Month,
        "1q" | "quarter" => Interval::Quarter,
        "1y" | "year" => Interval::Year,
        _ => return None,
    })
}

fn tz(s: &str) -> Option<i64> {
    if s == "Z" || s == "UTC" || s == "Etc/UTC" {
        return Some(0);
    }
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let (h, m) = rest.split_once(':').unwrap_or((rest, "0"));
    Some(sign * (h.parse::<i64>().ok()? * HOUR + m.parse::<i64>().ok()? * MINUTE))
}

impl DateHisto {
    pub fn parse(def: &Value) -> Result<DateHisto, EsError> {
        let bad = |what: &str| EsError::bad_request(format!("[date_histogram] {what}"));
        let interval = match (
            def.get("calendar_interval"),
            def.get("fixed_interval"),
            def.get("interval"),
        ) {
            (Some(Value::String(c)), None, None) => {
                calendar(c).ok_or_else(|| bad(&format!("unknown calendar_interval [{c}]")))?
            }
            (None, Some(Value::String(f)), None) => Interval::Fixed(
                time_value(f)
                    .filter(|v| *v > 0)
                    .ok_or_else(|| bad(&format!("bad fixed_interval [{f}]")))?,
            ),
            (None, None, Some(Value::String(i))) => match calendar(i) {
                Some(c) => c,
                None => Interval::Fixed(
                    time_value(i)
                        .filter(|v| *v > 0)
                        .ok_or_else(|| bad(&format!("bad interval [{i}]")))?,
                ),
            },
            _ => {
                return Err(bad(
                    "requires exactly one of [calendar_interval], [fixed_interval]",
                ))
            }
        };
        let offset_ms = match def.get("offset") {
            None => 0,
            Some(Value::String(o)) => {
                time_value(o).ok_or_else(|| bad(&format!("bad offset [{o}]")))?
            }
            Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
            Some(other) => return Err(bad(&format!("bad offset [{other}]"))),
        };
        let tz_ms = match def.get("time_zone").and_then(Value::as_str) {
            None => 0,
            Some(z) => tz(z).ok_or_else(|| {
                bad(&format!(
                    "the emulator supports only fixed-offset time zones, got [{z}]"
                ))
            })?,
        };
        let format = def.get("format").and_then(Value::as_str).map(str::to_owned);
        if let Some(f) = format.as_deref().filter(|f| !FORMATS.contains(f)) {
            return Err(bad(&format!(
                "the emulator implements the formats {FORMATS:?}, not [{f}]"
            )));
        }
        Ok(DateHisto {
            interval,
            offset_ms,
            tz_ms,
            format,
        })
    }

    /// The bucket (as a UTC epoch-millis instant) that contains `ms`.
    pub fn round(&self, ms: i64) -> i64 {
        let local = ms + self.tz_ms - self.offset_ms;
        let start = match self.interval {
            Interval::Fixed(step) => local.div_euclid(step) * step,
            Interval::Week => {
                // 1970-01-01 was a Thursday; ISO weeks start on Monday.
                let day = local.div_euclid(DAY);
                ((day + 3).div_euclid(7) * 7 - 3) * DAY
            }
            Interval::Month | Interval::Quarter | Interval::Year => {
                let date = Utc
                    .timestamp_millis_opt(local.div_euclid(DAY) * DAY)
                    .single()
                    .map(|d| d.date_naive());
                let first = date.and_then(|d| match self.interval {
                    Interval::Month => NaiveDate::from_ymd_opt(d.year(), d.month(), 1),
                    Interval::Quarter => {
                        NaiveDate::from_ymd_opt(d.year(), (d.month0() / 3) * 3 + 1, 1)
                    }
                    _ => NaiveDate::from_ymd_opt(d.year(), 1, 1),
                });
                first
                    .and_then(|f| f.and_hms_opt(0, 0, 0))
                    .map_or(local, |dt| dt.and_utc().timestamp_millis())
            }
        };
        start + self.offset_ms - self.tz_ms
    }

    /// The bucket key as ES prints it: formatted in the time zone, or epoch millis.
    pub fn key_json(&self, key: i64) -> Value {
        let Some(format) = &self.format else {
            return json!(key);
        };
        let Some(local) = Utc
            .timestamp_millis_opt(key)
            .single()
            .map(|t| t + Duration::milliseconds(self.tz_ms))
        else {
            return json!(key);
        };
        let zone = if self.tz_ms == 0 {
            "Z".to_owned()
        } else {
            let m = self.tz_ms.abs() / MINUTE;
            format!(
                "{}{:02}:{:02}",
                if self.tz_ms < 0 { '-' } else { '+' },
                m / 60,
                m % 60
            )
        };
        match format.as_str() {
            "strict_date" | "date" | "yyyy-MM-dd" => json!(local.format("%Y-%m-%d").to_string()),
            "epoch_millis" => json!(key.to_string()),
            // The ISO formats of FORMATS.
            _ => json!(format!("{}{zone}", local.format("%Y-%m-%dT%H:%M:%S%.3f"))),
        }
    }

    /// An `after` value: a formatted key (read in the source's time zone) or epoch millis.
    pub fn parse_after(&self, v: &Value) -> Option<i64> {
        match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => {
                let has_zone = s.ends_with('Z')
                    || s.split_once('T')
                        .is_some_and(|(_, t)| t.contains(['+', '-']));
                let ms = parse_date_str(s)?;
                Some(if has_zone { ms } else { ms - self.tz_ms })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histo(v: Value) -> DateHisto {
        DateHisto::parse(&v).unwrap_or(DateHisto {
            interval: Interval::Fixed(1),
            offset_ms: 0,
            tz_ms: 0,
            format: None,
        })
    }

    fn ms(s: &str) -> i64 {
        parse_date_str(s).unwrap_or(i64::MIN)
    }

    #[test]
    fn calendar_days_with_offset_and_time_zone() {
        let h = histo(json!({"calendar_interval": "1d", "offset": "4h", "format": "iso8601"}));
        assert_eq!(
            h.key_json(h.round(ms("2017-10-20T03:08:45Z"))),
            json!("2017-10-19T04:00:00.000Z")
        );
        let h =
            histo(json!({"calendar_interval": "1d", "time_zone": "-02:00", "format": "iso8601"}));
        assert_eq!(
            h.key_json(h.round(ms("2017-10-22T01:00:00Z"))),
            json!("2017-10-21T00:00:00.000-02:00")
        );
        assert_eq!(
            h.parse_after(&json!("2017-10-20")),
            Some(h.round(ms("2017-10-20T05:00:00Z")))
        );
    }

    #[test]
    fn months_weeks_and_fixed() {
        let h = histo(json!({"calendar_interval": "month", "format": "strict_date"}));
        assert_eq!(
            h.key_json(h.round(ms("2026-11-29T10:00:00Z"))),
            json!("2026-11-01")
        );
        let h = histo(json!({"calendar_interval": "1w", "format": "strict_date"}));
        assert_eq!(
            h.key_json(h.round(ms("2026-11-29T10:00:00Z"))),
            json!("2026-11-23")
        );
        let h = histo(json!({"fixed_interval": "90m"}));
        assert_eq!(h.round(ms("1970-01-01T02:00:00Z")), 90 * MINUTE);
        assert!(DateHisto::parse(&json!({"calendar_interval": "2d"})).is_err());
        assert!(
            DateHisto::parse(&json!({"calendar_interval": "1d", "time_zone": "Europe/Paris"}))
                .is_err()
        );
    }
}
