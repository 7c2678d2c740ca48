//! One publication page: read up to `page_size` documents in a stable order, resuming
//! after a cursor, and turn them into idempotent updates. For an execution, each endpoint
//! of its execution projection becomes two merge updates (the global and the owner's asset
//! document) plus, where the owner has tags for the address, the owner document's tags.
//! For a tags row, each of the owner's asset documents in scope gets its current tags.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::es::alias::AssetIndices;
use crate::es::bulk::BulkOp;
use crate::es::{index, painless, EsClient, EsError};
use crate::tags::Tags;

/// Documents of one page and the cursor after the last one.
pub struct Page {
    pub docs: Vec<(String, Value)>,
    /// `search_after` values of the last document, as JSON text (the outbox `cursor`).
    pub cursor: Option<String>,
}

/// The fields an asset merge needs from an execution-projection document.
const FIELDS: [&str; 9] = [
    "ip",
    "port",
    "transport",
    "service",
    "product",
    "version",
    "banner",
    "observed_at",
    "execution_id",
];

/// The parts of a search response a page reads (parsed typed: a page is a large body).
#[derive(Deserialize)]
struct SearchResponse {
    timed_out: Option<bool>,
    #[serde(rename = "_shards", default)]
    shards: Shards,
    #[serde(default)]
    hits: Hits,
}

#[derive(Deserialize, Default)]
struct Shards {
    failed: Option<u64>,
}

#[derive(Deserialize, Default)]
struct Hits {
    #[serde(default)]
    hits: Vec<SearchHit>,
}

#[derive(Deserialize)]
struct SearchHit {
    #[serde(rename = "_id", default)]
    id: String,
    #[serde(rename = "_source", default)]
    source: Value,
    #[serde(default)]
    sort: Value,
}

/// Reads the page of `index` matching `filter` after `cursor`. The sort (ip, port,
/// transport) is unique per endpoint of one execution and per asset of one owner, so
/// pages neither overlap nor skip.
pub fn read(
    es: &EsClient,
    index_name: &str,
    filter: Value,
    cursor: Option<&str>,
    size: usize,
) -> Result<Page, EsError> {
    let mut query = json!({
        "size": size,
        "query": { "bool": { "filter": filter } },
        "sort": [ {"ip": "asc"}, {"port": "asc"}, {"transport": "asc"} ],
        "track_total_hits": false,
        "_source": FIELDS,
    });
    if let Some(c) = cursor {
        let after: Value = serde_json::from_str(c)
            .map_err(|e| EsError::Refused(format!("unreadable cursor {c:?}: {e}")))?;
        query["search_after"] = after;
    }
    let path = format!("/{}/_search", index::encode_path(index_name));
    let body = serde_json::to_vec(&query).map_err(|e| EsError::Refused(e.to_string()))?;
    let raw = es
        .send("POST", &path, Some(("application/json", &body)))?
        .ok()?;
    let r: SearchResponse = serde_json::from_slice(&raw.bytes)
        .map_err(|e| EsError::BadResponse(format!("unreadable search response: {e}")))?;
    if r.timed_out == Some(true) || r.shards.failed.unwrap_or(0) > 0 {
        return Err(EsError::BadResponse(
            "partial search result (timed out or failed shards)".into(),
        ));
    }
    let cursor = r.hits.hits.last().map(|h| h.sort.to_string());
    let docs = r.hits.hits.into_iter().map(|h| (h.id, h.source)).collect();
    Ok(Page { docs, cursor })
}

/// The execution's endpoints in its projection.
pub fn execution_filter(execution_id: Uuid) -> Value {
    json!([ { "term": { "execution_id": execution_id.to_string() } } ])
}

/// The owner's asset documents within a tag scope (`ip` or `cidr`; a domain tag touches
/// no asset document, so it has no filter).
pub fn tag_scope_filter(owner_id: Uuid, scope: &Value) -> Option<Value> {
    match scope["kind"].as_str() {
        Some("ip") | Some("cidr") => Some(json!([
            { "term": { "owner_id": owner_id.to_string() } },
            { "term": { "ip": scope["key"].as_str().unwrap_or_default() } }
        ])),
        _ => None,
    }
}

fn endpoint_key(doc: &Value) -> (&str, &str, u16) {
    (
        doc["ip"].as_str().unwrap_or_default(),
        doc["transport"].as_str().unwrap_or_default(),
        doc["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0),
    )
}

/// The addresses of a page, for the tag lookup.
pub fn addresses(docs: &[(String, Value)]) -> Vec<&str> {
    docs.iter().map(|(_, d)| endpoint_key(d).0).collect()
}

/// The asset-merge script's `params.obs`: the [`FIELDS`] the projection document has, plus
/// the owner on the owner's copy. Serialised from the page's documents without copying them.
struct Observation<'a> {
    doc: &'a Value,
    owner_id: Option<&'a str>,
}

impl Serialize for Observation<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for f in FIELDS {
            let v = &self.doc[f];
            if !v.is_null() {
                map.serialize_entry(f, v)?;
            }
        }
        if let Some(owner) = self.owner_id {
            map.serialize_entry("owner_id", owner)?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct MergeParams<'a> {
    obs: Observation<'a>,
}

/// Merge updates into physical asset indices (`targets`: where the aliases point, or a
/// rebuild's new version; written directly so that every item's `_index` can be
/// verified), with deterministic ids.
pub fn execution_operations(
    targets: &AssetIndices,
    owner_id: Uuid,
    docs: &[(String, Value)],
    tags: &Tags,
) -> Vec<BulkOp> {
    let (global, user) = (&targets.global, &targets.user);
    let mut ops = Vec::with_capacity(docs.len() * 2);
    let owner = owner_id.to_string();
    for (_, e) in docs {
        let (ip, transport, port) = endpoint_key(e);
        ops.push(BulkOp::scripted_upsert(
            global,
            &index::global_asset_id(ip, transport, port),
            painless::ASSET_MERGE_ID,
            MergeParams {
                obs: Observation {
                    doc: e,
                    owner_id: None,
                },
            },
        ));
        let user_id = index::user_asset_id(owner_id, ip, transport, port);
        ops.push(BulkOp::scripted_upsert(
            user,
            &user_id,
            painless::ASSET_MERGE_ID,
            MergeParams {
                obs: Observation {
                    doc: e,
                    owner_id: Some(&owner),
                },
            },
        ));
        let tags = tags.for_ip(ip);
        if !tags.is_empty() {
            // Applied after the merge in the same request; the tags row of a later change
            // corrects it, so only current tags are ever written.
            ops.push(BulkOp::partial_update(
                user,
                &user_id,
                &json!({ "tags": tags }),
            ));
        }
    }
    ops
}

/// The current tags of each owner document of the page (an empty list clears them).
pub fn retag_operations(
    targets: &AssetIndices,
    docs: &[(String, Value)],
    tags: &Tags,
) -> Vec<BulkOp> {
    docs.iter()
        .map(|(id, d)| {
            BulkOp::partial_update(
                &targets.user,
                id,
                &json!({ "tags": tags.for_ip(endpoint_key(d).0) }),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_updates_per_untagged_endpoint_with_deterministic_ids() {
        let owner = Uuid::from_u128(7);
        let e = json!({"ip": "203.0.113.7", "port": 443, "transport": "tcp", "service": "https",
                       "observed_at": "2026-11-29T10:00:00.000Z", "execution_id": "x"});
        let ops = execution_operations(
            &AssetIndices::version("s", 1),
            owner,
            &[("d".into(), e)],
            &Tags::default(),
        );
        assert_eq!(ops.len(), 2);
        assert_eq!(
            (ops[0].index.as_str(), ops[0].id.as_str()),
            ("s-assets-global-v1", "203.0.113.7-tcp-443")
        );
        assert_eq!(ops[1].index, "s-assets-user-v1");
        assert_eq!(ops[1].id, format!("{}-203.0.113.7-tcp-443", owner.simple()));
        let user = String::from_utf8(ops[1].ndjson.clone()).unwrap();
        assert!(user.contains(&owner.to_string()));
        assert!(!String::from_utf8(ops[0].ndjson.clone())
            .unwrap()
            .contains("owner_id"));
    }

    #[test]
    fn tag_scopes() {
        let o = Uuid::nil();
        assert!(tag_scope_filter(o, &json!({"kind": "cidr", "key": "10.0.0.0/8"})).is_some());
        assert!(tag_scope_filter(o, &json!({"kind": "domain", "key": "a.example"})).is_none());
    }
}
