//! Index set-up at start-up, idempotent: the facts index template (monthly indices are
//! created by the first bulk that needs them), the execution endpoint index, the versioned
//! current-asset indices with their aliases, and the stored merge script. Mappings are
//! strict, so a field scanstore does not know about is refused, never guessed.

use serde_json::{json, Value};

use super::client::EsClient;
use super::error::EsError;
use super::index;
use super::painless;

/// A strict mapping of the endpoint fields every document kind shares, plus `extra`
/// fields given as (name, type) pairs.
fn strict_mapping(extra: &[(&str, &str)]) -> Value {
    let shared = [
        ("ip", "ip"),
        ("port", "integer"),
        ("transport", "keyword"),
        ("service", "keyword"),
        ("product", "keyword"),
        ("version", "keyword"),
        ("banner", "text"),
        ("execution_id", "keyword"),
        ("owner_id", "keyword"),
        ("tags", "keyword"),
    ];
    let properties: serde_json::Map<String, Value> = shared
        .iter()
        .chain(extra)
        .map(|(name, kind)| (name.to_string(), json!({ "type": kind })))
        .collect();
    json!({ "dynamic": "strict", "properties": properties })
}

/// Mapping of a raw fact (an endpoint or a DNS record, one document per observation).
pub fn facts_mapping() -> Value {
    strict_mapping(&[
        ("type", "keyword"),
        ("task_id", "keyword"),
        ("scanner_id", "keyword"),
        ("upload_id", "keyword"),
        ("stream", "keyword"),
        ("batch_index", "integer"),
        ("name", "keyword"),
        ("record_type", "keyword"),
        ("value", "keyword"),
        ("observed_at", "date"),
    ])
}

/// Mapping of the execution endpoint projection (one document per endpoint per execution).
pub fn execution_endpoints_mapping() -> Value {
    strict_mapping(&[("task_id", "keyword"), ("observed_at", "date")])
}

/// Mapping of a current-asset document (global and per-owner views alike).
pub fn assets_mapping() -> Value {
    strict_mapping(&[
        ("first_seen", "date"),
        ("last_seen", "date"),
        ("service_observed_at", "date"),
    ])
}

/// The version a fresh install creates behind the asset aliases (a rebuild adds the next).
pub const ASSETS_VERSION: u32 = 1;

/// The Painless context the merge script runs in: an update (`scripted_upsert`).
const MERGE_CONTEXT: &str = "update";

/// Installs templates and indices; safe to run on every start and from several instances.
pub fn install(es: &EsClient, prefix: &str) -> Result<(), EsError> {
    let template = json!({
        "index_patterns": [index::facts_pattern(prefix)],
        "priority": 200,
        "template": {
            "settings": {"number_of_shards": 1},
            "mappings": facts_mapping()
        }
    });
    es.json(
        "PUT",
        &format!("/_index_template/{}", index::facts_template(prefix)),
        &template,
    )?
    .ok()?;
    create_index(
        es,
        &index::execution_endpoints(prefix),
        &json!({ "settings": {"number_of_shards": 1}, "mappings": execution_endpoints_mapping() }),
    )?;
    for alias in [
        index::assets_global_alias(prefix),
        index::assets_user_alias(prefix),
    ] {
        // An existing alias may point at a rebuilt version, and v1 may have been dropped
        // on purpose: a restart must neither move the alias back nor re-create v1.
        if alias_exists(es, &alias)? {
            continue;
        }
        let physical = index::versioned(&alias, ASSETS_VERSION);
        create_assets_index(es, &physical)?;
        let actions = json!({ "actions": [ { "add": { "index": physical, "alias": alias } } ] });
        es.json("POST", "/_aliases", &actions)?.ok()?;
    }
    // Stored with its context, so that the cluster compiles it now: a script the
    // cluster refuses fails the installation (and `/readyz`) instead of the first
    // publication's items.
    es.json(
        "PUT",
        &format!("/_scripts/{}/{MERGE_CONTEXT}", painless::ASSET_MERGE_ID),
        &json!({ "script": { "lang": "painless", "source": painless::ASSET_MERGE_SOURCE } }),
    )?
    .ok()?;
    Ok(())
}

fn alias_exists(es: &EsClient, alias: &str) -> Result<bool, EsError> {
    let r = es.request(
        "GET",
        &format!("/_alias/{}", index::encode_path(alias)),
        None,
    )?;
    match r.status {
        200 => Ok(true),
        404 => Ok(false),
        _ => r.ok().map(|_| true),
    }
}

/// Creates a physical current-asset index (a version behind the aliases) unless it exists.
pub fn create_assets_index(es: &EsClient, name: &str) -> Result<(), EsError> {
    create_index(
        es,
        name,
        &json!({ "settings": {"number_of_shards": 1}, "mappings": assets_mapping() }),
    )
}

/// Creates an index unless it exists already.
pub fn create_index(es: &EsClient, name: &str, body: &Value) -> Result<(), EsError> {
    let r = es.json("PUT", &format!("/{}", index::encode_path(name)), body)?;
    let exists = r.status == 400 && r.body["error"]["type"] == "resource_already_exists_exception";
    if exists {
        return Ok(());
    }
    r.ok().map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_are_strict_and_complete() {
        let f = facts_mapping();
        assert_eq!(f["dynamic"], "strict");
        assert_eq!(f["properties"].as_object().unwrap().len(), 20);
        assert_eq!(f["properties"]["ip"]["type"], "ip");
        assert_eq!(f["properties"]["batch_index"]["type"], "integer");
        assert_eq!(
            execution_endpoints_mapping()["properties"]
                .as_object()
                .unwrap()
                .len(),
            12
        );
        let a = assets_mapping();
        assert_eq!(a["properties"].as_object().unwrap().len(), 13);
        assert_eq!(a["properties"]["first_seen"]["type"], "date");
        assert_eq!(a["properties"]["banner"]["type"], "text");
    }
}
