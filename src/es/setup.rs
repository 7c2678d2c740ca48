//! Index set-up at start-up, idempotent: the facts index template (monthly indices are
//! created by the first bulk that needs them), the execution endpoint index, the versioned
//! current-asset indices with their aliases, and the stored merge script. Mappings are
//! strict, so a field scanstore does not know about is refused, never guessed.

use serde_json::{json, Value};

use super::client::EsClient;
use super::error::EsError;
use super::index;
use super::painless;

/// Mapping of a raw fact (an endpoint or a DNS record, one document per observation).
pub fn facts_mapping() -> Value {
    json!({
        "dynamic": "strict",
        "properties": {
            "type": {"type": "keyword"},
            "execution_id": {"type": "keyword"},
            "task_id": {"type": "keyword"},
            "owner_id": {"type": "keyword"},
            "scanner_id": {"type": "keyword"},
            "upload_id": {"type": "keyword"},
            "stream": {"type": "keyword"},
            "batch_index": {"type": "integer"},
            "ip": {"type": "ip"},
            "port": {"type": "integer"},
            "transport": {"type": "keyword"},
            "service": {"type": "keyword"},
            "product": {"type": "keyword"},
            "version": {"type": "keyword"},
            "banner": {"type": "text"},
            "name": {"type": "keyword"},
            "record_type": {"type": "keyword"},
            "value": {"type": "keyword"},
            "observed_at": {"type": "date"},
            "tags": {"type": "keyword"}
        }
    })
}

/// Mapping of the execution endpoint projection (one document per endpoint per execution).
pub fn execution_endpoints_mapping() -> Value {
    json!({
        "dynamic": "strict",
        "properties": {
            "execution_id": {"type": "keyword"},
            "task_id": {"type": "keyword"},
            "owner_id": {"type": "keyword"},
            "ip": {"type": "ip"},
            "port": {"type": "integer"},
            "transport": {"type": "keyword"},
            "service": {"type": "keyword"},
            "product": {"type": "keyword"},
            "version": {"type": "keyword"},
            "banner": {"type": "text"},
            "observed_at": {"type": "date"},
            "tags": {"type": "keyword"}
        }
    })
}

/// Mapping of a current-asset document (global and per-owner views alike).
pub fn assets_mapping() -> Value {
    json!({
        "dynamic": "strict",
        "properties": {
            "ip": {"type": "ip"},
            "port": {"type": "integer"},
            "transport": {"type": "keyword"},
            "owner_id": {"type": "keyword"},
            "first_seen": {"type": "date"},
            "last_seen": {"type": "date"},
            "service": {"type": "keyword"},
            "product": {"type": "keyword"},
            "version": {"type": "keyword"},
            "banner": {"type": "text"},
            "service_observed_at": {"type": "date"},
            "execution_id": {"type": "keyword"},
            "tags": {"type": "keyword"}
        }
    })
}

/// The version a fresh install creates behind the asset aliases (a rebuild adds the next).
pub const ASSETS_VERSION: u32 = 1;

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
    es.json(
        "PUT",
        &format!("/_scripts/{}", painless::ASSET_MERGE_ID),
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
