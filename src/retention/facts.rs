//! Facts retention: the monthly facts indices (`<prefix>-facts-YYYY.MM`) whose whole month
//! lies more than the configured number of months before the current one, dropped whole.
//! Facts are the raw record only: asset views and execution results are built from the
//! execution projection, so dropping them changes neither.

use chrono::{DateTime, Datelike, Utc};

use crate::es::{index, EsClient, EsError};

/// The facts indices older than `months` whole months before `now`'s month, oldest first.
pub fn expired(
    es: &EsClient,
    prefix: &str,
    months: u32,
    now: DateTime<Utc>,
) -> Result<Vec<String>, EsError> {
    let pattern = index::facts_pattern(prefix);
    let r = es.request(
        "GET",
        &format!(
            "/{}/_settings?allow_no_indices=true&ignore_unavailable=true",
            index::encode_path(&pattern)
        ),
        None,
    )?;
    if r.status == 404 {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = r
        .ok()?
        .body
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    names.retain(|name| is_expired(prefix, name, months, now));
    names.sort();
    Ok(names)
}

/// Drops one index; one already gone (dropped by hand meanwhile) is no failure.
pub fn drop(es: &EsClient, name: &str) -> Result<(), EsError> {
    let r = es.request("DELETE", &format!("/{}", index::encode_path(name)), None)?;
    if r.status != 404 {
        r.ok()?;
    }
    Ok(())
}

/// Whether `name` is a facts index of a month more than `months` whole months before
/// `now`'s month (with 1, in December: October and before).
fn is_expired(prefix: &str, name: &str, months: u32, now: DateTime<Utc>) -> bool {
    let current = month_number(now.year(), now.month());
    month_of(prefix, name).is_some_and(|(y, m)| month_number(y, m) < current - i64::from(months))
}

fn month_number(year: i32, month: u32) -> i64 {
    i64::from(year) * 12 + i64::from(month) - 1
}

/// (year, month) of a facts index name; `None` for any other name the pattern matches.
fn month_of(prefix: &str, name: &str) -> Option<(i32, u32)> {
    let suffix = name.strip_prefix(prefix)?.strip_prefix("-facts-")?;
    let (y, m) = suffix.split_once('.')?;
    if y.len() != 4 || m.len() != 2 {
        return None;
    }
    let (y, m): (i32, u32) = (y.parse().ok()?, m.parse().ok()?);
    (1..=12).contains(&m).then_some((y, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_months_and_other_names_do_not() {
        assert_eq!(month_of("ss", "ss-facts-2026.11"), Some((2026, 11)));
        assert_eq!(month_of("ss", "ss-facts-2026.13"), None);
        assert_eq!(month_of("ss", "ss-facts-2026.1"), None);
        assert_eq!(month_of("ss", "ss-facts-2026.11-restored"), None);
        assert_eq!(month_of("ss", "other-facts-2026.11"), None);
    }

    #[test]
    fn a_month_expires_once_it_is_more_than_n_whole_months_back() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let dec = at("2026-12-03T00:00:00Z");
        assert!(!is_expired("ss", "ss-facts-2026.12", 1, dec));
        assert!(!is_expired("ss", "ss-facts-2026.11", 1, dec));
        assert!(is_expired("ss", "ss-facts-2026.10", 1, dec));
        assert!(is_expired("ss", "ss-facts-2026.11", 0, dec));
        // Across a year boundary.
        let feb = at("2026-02-28T23:59:59Z");
        assert!(!is_expired("ss", "ss-facts-2026.01", 1, feb));
        assert!(is_expired("ss", "ss-facts-2025.12", 1, feb));
        assert!(!is_expired("ss", "ss-facts-2025.03", 12, feb));
        assert!(is_expired("ss", "ss-facts-2025.01", 12, feb));
        assert!(!is_expired("ss", "ss-facts-restored", 1, feb));
    }
}
