//! One publication page: read up to `page_size` endpoints of an execution from the
//! execution projection in a stable order, resuming after a cursor, and turn each into
//! two idempotent merge updates (the global and the owner's asset document).

use serde_json::{json, Value};
use uuid::Uuid;

use crate::es::bulk::BulkOp;
use crate::es::{index, painless, setup, EsClient, EsError};

/// Endpoints of one page and the cursor after its last one.
pub struct Page {
    pub endpoints: Vec<Value>,
    /// `search_after` values of the last endpoint, as JSON text (the outbox `cursor`).
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

/// Reads the page after `cursor`. The sort (ip, port, transport) is unique per endpoint
/// of one execution, so pages neither overlap nor skip.
pub fn read(
    es: &EsClient,
    prefix: &str,
    execution_id: Uuid,
    cursor: Option<&str>,
    size: usize,
) -> Result<Page, EsError> {
    let mut query = json!({
        "size": size,
        "query": { "term": { "execution_id": execution_id.to_string() } },
        "sort": [ {"ip": "asc"}, {"port": "asc"}, {"transport": "asc"} ],
        "track_total_hits": false,
        "_source": FIELDS,
    });
    if let Some(c) = cursor {
        let after: Value = serde_json::from_str(c)
            .map_err(|e| EsError::Refused(format!("unreadable cursor {c:?}: {e}")))?;
        query["search_after"] = after;
    }
    let path = format!(
        "/{}/_search",
        index::encode_path(&index::execution_endpoints(prefix))
    );
    let r = es.json("POST", &path, &query)?.ok()?;
    if r.body["timed_out"].as_bool() == Some(true)
        || r.body["_shards"]["failed"].as_u64().unwrap_or(0) > 0
    {
        return Err(EsError::BadResponse(
            "partial search result (timed out or failed shards)".into(),
        ));
    }
    let hits = r.body["hits"]["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let cursor = hits.last().map(|h| h["sort"].to_string());
    let endpoints = hits.into_iter().map(|mut h| h["_source"].take()).collect();
    Ok(Page { endpoints, cursor })
}

/// Two merge updates per endpoint, with deterministic ids, into the current physical
/// asset indices (written directly so that every item's `_index` can be verified).
pub fn operations(prefix: &str, owner_id: Uuid, endpoints: &[Value]) -> Vec<BulkOp> {
    let global = index::versioned(&index::assets_global_alias(prefix), setup::ASSETS_VERSION);
    let user = index::versioned(&index::assets_user_alias(prefix), setup::ASSETS_VERSION);
    let mut ops = Vec::with_capacity(endpoints.len() * 2);
    for e in endpoints {
        let ip = e["ip"].as_str().unwrap_or_default();
        let transport = e["transport"].as_str().unwrap_or_default();
        let port = e["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0);
        let mut obs = json!({});
        for f in FIELDS {
            if !e[f].is_null() {
                obs[f] = e[f].clone();
            }
        }
        ops.push(BulkOp::scripted_upsert(
            &global,
            &index::global_asset_id(ip, transport, port),
            painless::ASSET_MERGE_ID,
            json!({ "obs": obs.clone() }),
        ));
        obs["owner_id"] = json!(owner_id.to_string());
        ops.push(BulkOp::scripted_upsert(
            &user,
            &index::user_asset_id(owner_id, ip, transport, port),
            painless::ASSET_MERGE_ID,
            json!({ "obs": obs }),
        ));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_updates_per_endpoint_with_deterministic_ids() {
        let owner = Uuid::from_u128(7);
        let e = json!({"ip": "203.0.113.7", "port": 443, "transport": "tcp", "service": "https",
                       "observed_at": "2026-11-29T10:00:00.000Z", "execution_id": "x"});
        let ops = operations("s", owner, &[e]);
        assert_eq!(ops.len(), 2);
        assert_eq!(
            (ops[0].index.as_str(), ops[0].id.as_str()),
            ("s-assets-global-v1", "203.0.113.7-tcp-443")
        );
        assert_eq!(ops[1].index, "s-assets-user-v1");
        assert_eq!(ops[1].id, format!("{}-203.0.113.7-tcp-443", owner.simple()));
        let text = String::from_utf8(ops[1].ndjson.clone()).unwrap();
        assert!(
            text.contains("\"owner_id\":\"00000000000000000000000000000007\"")
                || text.contains(&owner.to_string())
        );
        assert!(!String::from_utf8(ops[0].ndjson.clone())
            .unwrap()
            .contains("owner_id"));
    }
}
