//! Index settings: flattening `{"index": {...}}` and dotted keys to `index.*` strings,
//! nesting them back for GET, `refresh_interval` time values, and index-name rules.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::error::EsError;

pub fn setting<'a>(s: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    s.get(key).or_else(|| s.get(&format!("index.{key}")))
}

/// Flattens `{"index": {"number_of_shards": 1}}` and dotted keys into `index.*` keys.
pub fn flatten_settings(v: &Value, prefix: &str, out: &mut Map<String, Value>) {
    if let Some(obj) = v.as_object() {
        for (k, val) in obj {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if val.is_object() {
                flatten_settings(val, &key, out);
            } else {
                let key = if key.starts_with("index.") {
                    key
                } else {
                    format!("index.{key}")
                };
                let as_str = match val {
                    Value::String(s) => json!(s),
                    other => json!(other.to_string()),
                };
                out.insert(key, as_str);
            }
        }
    }
}

pub fn parse_interval(v: &str) -> Result<Option<Duration>, EsError> {
    if v == "-1" {
        return Ok(None);
    }
    let (num, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = num.parse().map_err(|_| {
        EsError::bad_request(format!(
            "failed to parse setting [index.refresh_interval] with value [{v}] as a time value"
        ))
    })?;
    let ms = match unit {
        "ms" => n,
        "s" | "" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(EsError::bad_request(format!("failed to parse setting [index.refresh_interval] with value [{v}] as a time value: unit is missing or unrecognized"))),
    };
    Ok(Some(Duration::from_millis(ms)))
}

pub fn validate_index_name(name: &str) -> Result<(), EsError> {
    let invalid = |why: &str| {
        EsError::new(
            400,
            "invalid_index_name_exception",
            format!("Invalid index name [{name}], {why}"),
        )
        .on_index(name, "_na_")
    };
    if name.is_empty() || name.len() > 255 {
        return Err(invalid("index name is too long or empty"));
    }
    if name.chars().any(|c| c.is_uppercase()) {
        return Err(invalid("must be lowercase"));
    }
    if name.starts_with(['-', '_', '+']) {
        return Err(invalid("must not start with '_', '-', or '+'"));
    }
    if name == "." || name == ".." {
        return Err(invalid("must not be '.' or '..'"));
    }
    if name.contains(['\\', '/', '*', '?', '"', '<', '>', '|', ' ', ',', '#', ':']) {
        return Err(invalid(
            "must not contain the following characters [ , \", *, \\, <, |, ,, >, /, ?]",
        ));
    }
    Ok(())
}

pub fn insert_dotted(map: &mut Map<String, Value>, key: &str, v: Value) {
    match key.split_once('.') {
        None => {
            map.insert(key.to_owned(), v);
        }
        Some((head, rest)) => {
            let entry = map.entry(head.to_owned()).or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            if let Some(inner) = entry.as_object_mut() {
                insert_dotted(inner, rest, v);
            }
        }
    }
}
