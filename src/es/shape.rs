//! How scanstore's indices spread over a cluster: the settings a new index of each family
//! is created with (shards, replicas, the facts' refresh interval), and at start the
//! dynamic ones brought to the configured values on the live indices scanstore writes.
//! A primary shard count is fixed when an index is created (Elasticsearch refuses to
//! change it on an open index), so a live index keeping another count is only reported.

use chrono::{DateTime, Datelike, Months, Utc};
use serde_json::{json, Map, Value};

use super::client::EsClient;
use super::error::EsError;
use super::{alias, index};
use crate::config::{IndexShape, IndexShapes};
use crate::telemetry::Line;

/// The `settings` of a new index of a family.
pub fn settings(shape: &IndexShape) -> Value {
    let mut s = json!({
        "number_of_shards": shape.shards,
        "number_of_replicas": shape.replicas,
    });
    if let Some(every) = shape.refresh_interval {
        s["refresh_interval"] = json!(format!("{}ms", every.as_millis()));
    }
    s
}

/// Which family a live index belongs to, and whether scanstore still writes it.
fn family<'a>(
    prefix: &str,
    name: &str,
    shapes: &'a IndexShapes,
    now: DateTime<Utc>,
) -> Option<&'a IndexShape> {
    if name == index::execution_endpoints(prefix) {
        return Some(&shapes.execution_endpoints);
    }
    let assets = [
        index::assets_global_alias(prefix),
        index::assets_user_alias(prefix),
    ];
    if assets.iter().any(|a| alias::version_of(a, name).is_some()) {
        return Some(&shapes.assets);
    }
    // Uploads write this month's facts and, within the default observation window, the
    // previous month's; older months are no longer scanstore's to tune.
    let month = name.strip_prefix(&format!("{prefix}-facts-"))?;
    let oldest = now.checked_sub_months(Months::new(1)).unwrap_or(now);
    let oldest = format!("{:04}.{:02}", oldest.year(), oldest.month());
    (month.len() == 7 && *month >= *oldest).then_some(&shapes.facts)
}

/// Milliseconds of an Elasticsearch time value (`500ms`, `30s`, `1m`); `None` for `-1`
/// and anything else.
fn millis(v: &str) -> Option<u64> {
    let split = v.find(|c: char| !c.is_ascii_digit())?;
    let n: u64 = v[..split].parse().ok()?;
    let unit = match &v[split..] {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit)
}

/// The dynamic settings of a live index (its `settings.index` object) that differ from
/// `shape`: the replica count, and the refresh interval when one is configured (without
/// one, the index keeps whatever it has).
pub fn changes(live: &Value, shape: &IndexShape) -> Map<String, Value> {
    let mut out = Map::new();
    let replicas = live["number_of_replicas"]
        .as_str()
        .and_then(|r| r.parse::<u32>().ok());
    if replicas != Some(shape.replicas) {
        out.insert("number_of_replicas".into(), json!(shape.replicas));
    }
    if let Some(every) = shape.refresh_interval {
        let current = live["refresh_interval"].as_str().and_then(millis);
        if current != Some(every.as_millis() as u64) {
            out.insert(
                "refresh_interval".into(),
                json!(format!("{}ms", every.as_millis())),
            );
        }
    }
    out
}

/// Brings replicas and refresh interval of the live indices scanstore writes (the execution
/// endpoints, the asset versions behind the aliases, this and last month's facts) to the
/// configured values, one `PUT /{index}/_settings` per index that differs, and reports a
/// live index whose primary shard count differs from the configured one.
pub fn align(es: &EsClient, prefix: &str, shapes: &IndexShapes) -> Result<(), EsError> {
    let targets = [
        index::facts_pattern(prefix),
        index::execution_endpoints(prefix),
        index::assets_global_alias(prefix),
        index::assets_user_alias(prefix),
    ]
    .join(",");
    let live = es
        .request(
            "GET",
            &format!(
                "/{}/_settings?ignore_unavailable=true&allow_no_indices=true",
                index::encode_path(&targets)
            ),
            None,
        )?
        .ok()?;
    let now = Utc::now();
    for (name, body) in live.body.as_object().into_iter().flatten() {
        let Some(shape) = family(prefix, name, shapes, now) else {
            continue;
        };
        let settings = &body["settings"]["index"];
        let shards = settings["number_of_shards"].as_str().unwrap_or("?");
        if shards != shape.shards.to_string() {
            Line::new("IndexShardsKept")
                .field("index", name)
                .field("shards", shards)
                .field("configured", shape.shards)
                .info();
        }
        let changes = changes(settings, shape);
        if changes.is_empty() {
            continue;
        }
        let mut line = Line::new("IndexSettingsChanged").field("index", name);
        for (key, value) in &changes {
            let was = settings[key.as_str()].as_str().unwrap_or("default");
            line = line.field(
                key,
                format!(
                    "{was}->{}",
                    value.as_str().map_or(value.to_string(), str::to_owned)
                ),
            );
        }
        es.json(
            "PUT",
            &format!("/{}/_settings", index::encode_path(name)),
            &json!({ "index": changes }),
        )?
        .ok()?;
        line.info();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::time::Duration;

    fn shape(shards: u32, replicas: u32, refresh_ms: Option<u64>) -> IndexShape {
        IndexShape {
            shards,
            replicas,
            refresh_interval: refresh_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn new_indices_get_shards_replicas_and_a_refresh_interval_only_when_configured() {
        assert_eq!(
            settings(&shape(1, 1, None)),
            json!({"number_of_shards": 1, "number_of_replicas": 1})
        );
        assert_eq!(
            settings(&shape(3, 0, Some(30_000))),
            json!({"number_of_shards": 3, "number_of_replicas": 0, "refresh_interval": "30000ms"})
        );
    }

    #[test]
    fn only_differing_dynamic_settings_change() {
        let live =
            json!({"number_of_shards": "1", "number_of_replicas": "1", "refresh_interval": "30s"});
        assert!(changes(&live, &shape(3, 1, Some(30_000))).is_empty());
        assert!(
            changes(&live, &shape(1, 1, None)).is_empty(),
            "no interval configured: kept"
        );
        assert_eq!(
            Value::Object(changes(&live, &shape(1, 2, Some(1000)))),
            json!({"number_of_replicas": 2, "refresh_interval": "1000ms"})
        );
        // Unset (the cluster's default) or disabled is not the configured interval.
        for live in [
            json!({"number_of_replicas": "0"}),
            json!({"number_of_replicas": "0", "refresh_interval": "-1"}),
        ] {
            assert_eq!(
                Value::Object(changes(&live, &shape(1, 0, Some(5000)))),
                json!({"refresh_interval": "5000ms"})
            );
        }
    }

    #[test]
    fn time_values() {
        assert_eq!(millis("250ms"), Some(250));
        assert_eq!(millis("30s"), Some(30_000));
        assert_eq!(millis("2m"), Some(120_000));
        assert_eq!(millis("1h"), Some(3_600_000));
        assert_eq!(millis("1d"), Some(86_400_000));
        assert_eq!(
            (millis("-1"), millis("5"), millis("5x"), millis("")),
            (None, None, None, None)
        );
    }

    #[test]
    fn the_indices_scanstore_writes_are_aligned_older_facts_months_are_not() {
        let shapes = IndexShapes {
            facts: shape(2, 0, None),
            execution_endpoints: shape(3, 1, None),
            assets: shape(4, 2, None),
        };
        let now = Utc.with_ymd_and_hms(2026, 1, 15, 0, 0, 0).unwrap();
        let of = |name: &str| family("p", name, &shapes, now).map(|s| s.shards);
        assert_eq!(of("p-execution-endpoints"), Some(3));
        assert_eq!(of("p-assets-global-v1"), Some(4));
        assert_eq!(of("p-assets-user-v12"), Some(4));
        assert_eq!(of("p-facts-2026.01"), Some(2));
        assert_eq!(
            of("p-facts-2025.12"),
            Some(2),
            "last month, across the year"
        );
        assert_eq!(of("p-facts-2026.02"), Some(2), "a month ahead (clock skew)");
        assert_eq!(of("p-facts-2025.11"), None);
        assert_eq!(of("p-assets-global"), None);
        assert_eq!(of("q-execution-endpoints"), None);
    }
}
