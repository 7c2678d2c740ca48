//! Index set-up at start-up, idempotent: the facts index template (monthly indices are
//! created by the first bulk that needs them), the execution endpoint index, the versioned
//! current-asset indices with their aliases, each family with its configured shape (see
//! `shape`), and the stored merge script. Mappings are strict, so a field scanstore does
//! not know about is refused, never guessed.

use serde_json::{json, Value};

use super::client::EsClient;
use super::error::EsError;
use super::painless;
use super::{index, shape};
use crate::config::{IndexShape, IndexShapes};

fn typed(kind: &str) -> Value {
    json!({ "type": kind })
}

/// An object field (an array of objects, as `hostnames` or `scripts`) of `fields`.
fn object(fields: &[(&str, Value)]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|(name, v)| (name.to_string(), v.clone()))
        .collect();
    json!({ "properties": properties })
}

/// Free text (a banner, a script's output), searchable two ways with analyzers every
/// Elasticsearch and OpenSearch has built in: the field itself with `standard`, which keeps
/// `2.4.41` and `example.com` whole, and `.words` with `simple`, the runs of letters, so
/// that `openssh` finds `SSH-2.0-OpenSSH_8.9p1`, which `standard` keeps as one token
/// `openssh_8.9p1`.
fn searchable_text() -> Value {
    json!({ "type": "text", "fields": { WORDS: { "type": "text", "analyzer": "simple" } } })
}

/// The multi-field of `searchable_text` that holds the runs of letters.
pub const WORDS: &str = "words";

/// A strict mapping of the endpoint fields every document kind shares, plus `extra`
/// fields given as (name, type) pairs. The service details (state to scripts) came with
/// protocol 2's optional fields; [`install`] adds them to indices made before.
fn strict_mapping(extra: &[(&str, Value)]) -> Value {
    let shared = [
        ("ip", typed("ip")),
        ("port", typed("integer")),
        ("transport", typed("keyword")),
        ("service", typed("keyword")),
        ("product", typed("keyword")),
        ("version", typed("keyword")),
        ("banner", searchable_text()),
        ("state", typed("keyword")),
        (
            "hostnames",
            object(&[("name", typed("keyword")), ("source", typed("keyword"))]),
        ),
        ("cpe", typed("keyword")),
        ("extra_info", typed("keyword")),
        ("tunnel", typed("keyword")),
        ("confidence", typed("integer")),
        (
            "scripts",
            object(&[("id", typed("keyword")), ("output", searchable_text())]),
        ),
        // The last tie-break between observations of one endpoint at one time.
        ("details_digest", typed("keyword")),
        ("execution_id", typed("keyword")),
        ("owner_id", typed("keyword")),
        ("tags", typed("keyword")),
    ];
    let properties: serde_json::Map<String, Value> = shared
        .into_iter()
        .chain(extra.iter().cloned())
        .map(|(name, v)| (name.to_string(), v))
        .collect();
    json!({ "dynamic": "strict", "properties": properties })
}

/// Mapping of a raw fact (an endpoint, a host or a DNS record, one document per
/// observation).
pub fn facts_mapping() -> Value {
    strict_mapping(&[
        ("type", typed("keyword")),
        ("task_id", typed("keyword")),
        ("scanner_id", typed("keyword")),
        ("upload_id", typed("keyword")),
        ("stream", typed("keyword")),
        ("batch_index", typed("integer")),
        ("name", typed("keyword")),
        ("record_type", typed("keyword")),
        ("value", typed("keyword")),
        (
            "os",
            object(&[("name", typed("keyword")), ("accuracy", typed("integer"))]),
        ),
        ("observed_at", typed("date")),
    ])
}

/// Mapping of the execution endpoint projection (one document per endpoint per execution).
pub fn execution_endpoints_mapping() -> Value {
    strict_mapping(&[
        ("task_id", typed("keyword")),
        ("observed_at", typed("date")),
        // Set when retention retires the owner's tombstone that covers this observation:
        // from then on the mark keeps it out of the owner's view (see `tombstones`).
        ("erased", typed("boolean")),
    ])
}

/// Mapping of a current-asset document (global and per-owner views alike).
pub fn assets_mapping() -> Value {
    strict_mapping(&[
        ("first_seen", typed("date")),
        ("last_seen", typed("date")),
        ("service_observed_at", typed("date")),
        ("state_observed_at", typed("date")),
        ("status", typed("keyword")),
        ("closed_at", typed("date")),
        ("closed_by", typed("keyword")),
    ])
}

/// The version a fresh install creates behind the asset aliases (a rebuild adds the next).
pub const ASSETS_VERSION: u32 = 1;

/// The Painless context the merge script runs in: an update (`scripted_upsert`).
const MERGE_CONTEXT: &str = "update";

/// Installs templates and indices, and brings the live indices' replicas and refresh
/// interval to `shapes`; safe to run on every start and from several instances.
pub fn install(es: &EsClient, prefix: &str, shapes: &IndexShapes) -> Result<(), EsError> {
    // Put again at every start: the next monthly index takes a changed shape.
    let template = json!({
        "index_patterns": [index::facts_pattern(prefix)],
        "priority": 200,
        "template": {
            "settings": shape::settings(&shapes.facts),
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
        &json!({
            "settings": shape::settings(&shapes.execution_endpoints),
            "mappings": execution_endpoints_mapping()
        }),
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
        create_assets_index(es, &physical, &shapes.assets)?;
        let actions = json!({ "actions": [ { "add": { "index": physical, "alias": alias } } ] });
        es.json("POST", "/_aliases", &actions)?.ok()?;
    }
    // Indices made by an earlier release gain the fields added since (mappings only ever
    // gain fields, which Elasticsearch allows on a live index). The monthly fact indices
    // are named one by one: a PUT _mapping whose wildcard matches nothing is refused.
    let facts = es.request(
        "GET",
        &format!(
            "/{}/_mapping",
            index::encode_path(&index::facts_pattern(prefix))
        ),
        None,
    )?;
    let facts = facts.ok()?;
    let mut targets: Vec<(String, Value)> = facts
        .body
        .as_object()
        .map(|m| m.keys().map(|k| (k.clone(), facts_mapping())).collect())
        .unwrap_or_default();
    targets.push((
        index::execution_endpoints(prefix),
        execution_endpoints_mapping(),
    ));
    for alias in [
        index::assets_global_alias(prefix),
        index::assets_user_alias(prefix),
    ] {
        targets.push((alias, assets_mapping()));
    }
    for (target, mapping) in targets {
        es.json(
            "PUT",
            &format!("/{}/_mapping", index::encode_path(&target)),
            &mapping,
        )?
        .ok()?;
    }
    shape::align(es, prefix, shapes)?;
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
pub fn create_assets_index(es: &EsClient, name: &str, shape: &IndexShape) -> Result<(), EsError> {
    create_index(
        es,
        name,
        &json!({ "settings": shape::settings(shape), "mappings": assets_mapping() }),
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
        assert_eq!(f["properties"].as_object().unwrap().len(), 29);
        assert_eq!(
            f["properties"]["hostnames"]["properties"]["name"]["type"],
            "keyword"
        );
        assert_eq!(f["properties"]["ip"]["type"], "ip");
        assert_eq!(f["properties"]["batch_index"]["type"], "integer");
        assert_eq!(
            execution_endpoints_mapping()["properties"]
                .as_object()
                .unwrap()
                .len(),
            21
        );
        let a = assets_mapping();
        assert_eq!(a["properties"].as_object().unwrap().len(), 25);
        assert_eq!(a["properties"]["closed_at"]["type"], "date");
        assert_eq!(a["properties"]["first_seen"]["type"], "date");
        assert_eq!(a["properties"]["banner"]["type"], "text");
        assert_eq!(
            a["properties"]["banner"]["fields"][WORDS]["analyzer"],
            "simple"
        );
        assert_eq!(
            a["properties"]["scripts"]["properties"]["output"]["fields"][WORDS]["type"],
            "text"
        );
    }
}
