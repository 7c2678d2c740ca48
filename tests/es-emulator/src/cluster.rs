//! Cluster-level APIs: `GET /` (info), `GET /_cluster/health`, and `GET|PUT
//! /_cluster/settings` (persistent/transient; `indices.id_field_data.enabled` is honoured).

use serde_json::{json, Map, Value};

use crate::app::App;
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};

/// The one cluster setting the emulator acts on: may `_id` be sorted/aggregated on?
/// ES 8 defaults it to false (`_id` sort fails); OpenSearch and ES 7 allow it.
pub const ID_FIELD_DATA: &str = "indices.id_field_data.enabled";

#[derive(Debug, Default)]
pub struct ClusterSettings {
    pub persistent: Map<String, Value>,
    pub transient: Map<String, Value>,
}

impl ClusterSettings {
    /// The effective value of a setting (transient wins over persistent).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.transient.get(key).or_else(|| self.persistent.get(key))
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut Map<String, Value>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

pub fn put_settings(app: &App, req: &Req) -> HandlerResult {
    let body = req.json_body()?.unwrap_or_else(|| json!({}));
    let mut store = app.lock_store();
    let mut echo = json!({"acknowledged": true, "persistent": {}, "transient": {}});
    for scope in ["persistent", "transient"] {
        let mut flat = Map::new();
        if let Some(v) = body.get(scope) {
            flatten("", v, &mut flat);
        }
        if let Some(v) = flat.get(ID_FIELD_DATA) {
            if !matches!(v, Value::Bool(_) | Value::Null)
                && !matches!(v.as_str(), Some("true" | "false"))
            {
                return Err(EsError::bad_request(format!(
                    "Failed to parse value [{v}] as only [true] or [false] are allowed."
                )));
            }
        }
        let target = if scope == "persistent" {
            &mut store.cluster.persistent
        } else {
            &mut store.cluster.transient
        };
        for (k, v) in &flat {
            if v.is_null() {
                target.remove(k);
            } else {
                target.insert(k.clone(), v.clone());
            }
        }
        echo[scope] = Value::Object(flat);
    }
    Ok(Reply::ok(&echo))
}

pub fn get_settings(app: &App) -> HandlerResult {
    let store = app.lock_store();
    Ok(Reply::ok(
        &json!({"persistent": store.cluster.persistent, "transient": store.cluster.transient}),
    ))
}

pub fn info() -> HandlerResult {
    Ok(Reply::ok(&json!({
        "name": "scanstore-es-emulator",
        "cluster_name": "scanstore-emulator",
        "cluster_uuid": "emulator-cluster-uuid",
        "version": {
            "number": "8.15.0",
            "build_flavor": "default",
            "build_type": "emulator",
            "build_hash": "emulator",
            "build_date": "2026-01-01T00:00:00.000Z",
            "build_snapshot": false,
            "lucene_version": "9.11.1",
            "minimum_wire_compatibility_version": "7.17.0",
            "minimum_index_compatibility_version": "7.0.0"
        },
        "tagline": "You Know, for Search"
    })))
}

/// `GET /_cluster/health`. `wait_for_status` is answered at once: on one node nothing
/// changes while ES would wait (replicas stay unassigned), so a status short of the one
/// wanted is the 408 `timed_out: true` ES sends when its `timeout` runs out.
pub fn health(app: &App, req: &Req) -> HandlerResult {
    let rank = |s: &str| match s {
        "red" => Ok(0),
        "yellow" => Ok(1),
        "green" => Ok(2),
        other => Err(EsError::bad_request(format!(
            "unknown cluster health status [{other}]"
        ))),
    };
    let wanted = req.param("wait_for_status").map(rank).transpose()?;
    let store = app.lock_store();
    let primaries: u64 = store.indices.values().map(|i| i.shards).sum();
    let unassigned: u64 = store.indices.values().map(|i| i.shards * i.replicas).sum();
    let status = if unassigned > 0 { "yellow" } else { "green" };
    let timed_out = wanted.is_some_and(|w| rank(status).is_ok_and(|s| s < w));
    Ok(Reply::json(
        if timed_out { 408 } else { 200 },
        &json!({
            "cluster_name": "scanstore-emulator", "status": status, "timed_out": timed_out,
            "number_of_nodes": 1, "number_of_data_nodes": 1,
            "active_primary_shards": primaries, "active_shards": primaries,
            "relocating_shards": 0, "initializing_shards": 0, "unassigned_shards": unassigned,
            "delayed_unassigned_shards": 0, "number_of_pending_tasks": 0, "number_of_in_flight_fetch": 0,
            "task_max_waiting_in_queue_millis": 0,
            "active_shards_percent_as_number": if primaries + unassigned == 0 { 100.0 } else { 100.0 * primaries as f64 / (primaries + unassigned) as f64 }
        }),
    ))
}
