//! `PUT /{targets}/_settings`: the dynamic settings of live indices. The replica count
//! and the refresh interval act as on a cluster (`null` restores the default); the
//! settings fixed at creation (shards, routing shards, codec, analysis, sorting) are
//! refused on an open index with Elasticsearch's message (`MetadataUpdateSettingsService`:
//! "Can't update non dynamic settings [...] for open indices [...]"); any other key is
//! stored and echoed, as at creation. All indices are checked before any changes.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::app::App;
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::resolve::{resolve_read, IndicesOptions};
use crate::settings::parse_interval;

/// Settings only an index's creation sets (prefixes match whole groups).
const STATIC: &[&str] = &[
    "index.number_of_shards",
    "index.number_of_routing_shards",
    "index.routing_partition_size",
    "index.codec",
    "index.sort.",
    "index.analysis.",
];

/// Flattens like `settings::flatten_settings`, keeping `null` (a reset) apart from text.
fn flatten(v: &Value, prefix: &str, out: &mut Map<String, Value>) {
    for (k, val) in v.as_object().into_iter().flatten() {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match val {
            Value::Object(_) => flatten(val, &key, out),
            other => {
                let key = if key.starts_with("index.") {
                    key
                } else {
                    format!("index.{key}")
                };
                let v = match other {
                    Value::Null => Value::Null,
                    Value::String(s) => json!(s),
                    v => json!(v.to_string()),
                };
                out.insert(key, v);
            }
        }
    }
}

/// A parsed dynamic setting: `None` restores the default.
enum Change {
    Replicas(Option<u64>),
    Refresh(Option<Option<Duration>>),
    Other(String, Value),
}

fn parse(key: &str, v: &Value) -> Result<Change, EsError> {
    let text = v.as_str();
    Ok(match key {
        "index.number_of_replicas" => Change::Replicas(match text {
            None => None,
            Some(t) => Some(t.parse::<u64>().map_err(|_| {
                EsError::bad_request(format!(
                    "Failed to parse value [{t}] for setting [index.number_of_replicas] must be >= 0"
                ))
            })?),
        }),
        "index.refresh_interval" => Change::Refresh(text.map(parse_interval).transpose()?),
        _ => Change::Other(key.to_owned(), v.clone()),
    })
}

pub fn put(app: &App, req: &Req, expr: &str) -> HandlerResult {
    // UpdateSettingsRequest's default options: a missing name or an empty wildcard is 404.
    let opts = IndicesOptions::from_req_or(req, false)?;
    let body = req.json_body()?.unwrap_or(Value::Null);
    // A body wrapped in `settings` is unwrapped (RestUpdateSettingsAction).
    let body = match body.get("settings") {
        Some(inner) if body.as_object().is_some_and(|o| o.len() == 1) => inner.clone(),
        _ => body,
    };
    let mut flat = Map::new();
    flatten(&body, "", &mut flat);
    if flat.is_empty() {
        return Err(EsError::new(
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: no settings to update;",
        ));
    }
    let changes: Vec<Change> = flat
        .iter()
        .map(|(k, v)| parse(k, v))
        .collect::<Result<_, _>>()?;
    let fixed: Vec<&str> = flat
        .keys()
        .map(String::as_str)
        .filter(|k| {
            STATIC
                .iter()
                .any(|s| k == s || (s.ends_with('.') && k.starts_with(s)))
        })
        .collect();
    let mut store = app.lock_store();
    let names = resolve_read(&store, expr, opts)?;
    if !fixed.is_empty() {
        let open: Vec<String> = names
            .iter()
            .filter_map(|n| store.indices.get(n))
            .map(|i| format!("[{}/{}]", i.name, i.uuid))
            .collect();
        return Err(EsError::bad_request(format!(
            "Can't update non dynamic settings [[{}]] for open indices [{}]",
            fixed.join(", "),
            open.join(", ")
        )));
    }
    for n in &names {
        let Some(idx) = store.indices.get_mut(n) else {
            continue;
        };
        for change in &changes {
            match change {
                Change::Replicas(r) => idx.replicas = r.unwrap_or(1),
                Change::Refresh(r) => {
                    idx.refresh_interval = r.unwrap_or(Some(Duration::from_secs(1)));
                    match flat.get("index.refresh_interval") {
                        Some(Value::Null) | None => idx.settings.remove("index.refresh_interval"),
                        Some(v) => idx
                            .settings
                            .insert("index.refresh_interval".into(), v.clone()),
                    };
                }
                Change::Other(k, Value::Null) => {
                    idx.settings.remove(k);
                }
                Change::Other(k, v) => {
                    idx.settings.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Ok(Reply::ok(&json!({"acknowledged": true})))
}
