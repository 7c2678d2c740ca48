//! Index set-up at start-up, idempotent: the facts index template (monthly indices are
//! created by the first bulk that needs them) and the execution endpoint index, both with
//! strict mappings so a field scanstore does not know about is refused, never guessed.

use serde_json::{json, Value};

use super::client::EsClient;
use super::error::EsError;
use super::index;

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
