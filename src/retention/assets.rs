//! Stale assets (`retention.asset_days`): an owner's asset documents not seen since a
//! limit are deleted, each with a tombstone at the time it was last seen, so that no replay
//! or rebuild of what was observed until then brings it back (a newer observation does).
//! A retention run queues one outbox row of kind `expire` per owner; a publisher runs it
//! page by page, leased and checkpointed, like a deletion.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};
use crate::es::alias::AssetIndices;
use crate::es::bulk::BulkOp;
use crate::es::index::Indices;
use crate::es::{EsClient, EsError};
use crate::projection::ProjectionError;
use crate::upload::facts::es_time;

// One waiting age limit per owner (scan_projection_outbox_expire_key): a run moves a
// waiting row's limit on instead of queueing another behind it.
const ENQUEUE: &str = "
    INSERT INTO scan_projection_outbox (kind, owner_id, expire_before)
    SELECT 'expire', id, $1 FROM owners
    ON CONFLICT (owner_id) WHERE kind = 'expire' AND processed_at IS NULL
    DO UPDATE SET expire_before = EXCLUDED.expire_before
          WHERE scan_projection_outbox.expire_before < EXCLUDED.expire_before";

// One tombstone per stale endpoint of a page, at the time it was last seen; none where
// the owner already has one as late (a page replayed after a crash). The lookup is by the
// GiST index on target (asset_tombstones_target_idx), which serves `=` as well.
const TOMBSTONES: &str = "
    INSERT INTO asset_tombstones (owner_id, target, port, transport, deleted_at)
    SELECT $1, a.ip::inet::cidr, a.port, a.transport, a.at::timestamptz
      FROM unnest($2::text[], $3::int[], $4::text[], $5::text[]) AS a(ip, port, transport, at)
     WHERE NOT EXISTS (SELECT 1 FROM asset_tombstones t
                        WHERE t.target = a.ip::inet::cidr AND t.owner_id = $1
                          AND t.port = a.port AND t.transport = a.transport
                          AND t.deleted_at >= a.at::timestamptz)";

/// Queues an age-limit run for every owner: their assets last seen before `before` go.
/// Returns the rows queued or moved on.
pub fn enqueue(db: &Db, before: DateTime<Utc>) -> Result<u64, DbError> {
    db.in_tx(Stage::Retention, |tx| Ok(tx.execute(ENQUEUE, &[&before])?))
}

/// The query of asset documents last seen (in any state) before `before`, as documents
/// store times; `owner` narrows it to one owner's.
fn stale(before: &str, owner: Option<Uuid>) -> Vec<Value> {
    let mut filter = vec![
        json!({ "range": { "last_seen": { "lt": before } } }),
        json!({ "bool": { "must_not": [
            { "range": { "state_observed_at": { "gte": before } } }
        ] } }),
    ];
    if let Some(owner) = owner {
        filter.insert(0, json!({ "term": { "owner_id": owner.to_string() } }));
    }
    filter
}

/// How many owners' asset documents are last seen before `before` (a dry run's count).
pub fn count(es: &EsClient, user_view: &str, before: DateTime<Utc>) -> Result<u64, EsError> {
    let query = json!({ "query": { "bool": { "filter": stale(&es_time(&before), None) } } });
    let r = es.count(&Indices::one(user_view), &query)?;
    Ok(r["count"].as_u64().unwrap_or(0))
}

/// An age-limit run: one owner's documents last seen before a time.
pub struct ExpireRun {
    /// The limit, as documents store times.
    before: String,
}

/// A page document still stale when looked up again, with the version it was read at.
struct Stale {
    index: String,
    id: String,
    seq_no: i64,
    primary_term: i64,
    ip: String,
    port: i32,
    transport: String,
    /// When it was last seen in any state: its tombstone's time.
    last: String,
}

impl ExpireRun {
    pub fn new(before: DateTime<Utc>) -> ExpireRun {
        ExpireRun {
            before: es_time(&before),
        }
    }

    /// The owner's documents the run deletes.
    pub fn filter(&self, owner_id: Uuid) -> Value {
        Value::Array(stale(&self.before, Some(owner_id)))
    }

    /// Tombstones for the page's documents that are still stale, then their deletes, each
    /// conditional on the version just read: a document merged in the meantime (a rescan)
    /// is kept. Returns the deletes and how many documents they cover.
    pub fn operations(
        &self,
        es: &EsClient,
        db: &Db,
        targets: &AssetIndices,
        owner_id: Uuid,
        ids: &[Cow<'_, str>],
    ) -> Result<(Vec<BulkOp>, usize), ProjectionError> {
        let stale = self.lookup(es, targets, ids)?;
        if stale.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let ips: Vec<&str> = stale.iter().map(|s| s.ip.as_str()).collect();
        let ports: Vec<i32> = stale.iter().map(|s| s.port).collect();
        let transports: Vec<&str> = stale.iter().map(|s| s.transport.as_str()).collect();
        let times: Vec<&str> = stale.iter().map(|s| s.last.as_str()).collect();
        // The tombstones are committed before any delete is sent: a crash in between
        // leaves documents that the replayed page deletes.
        db.in_tx(Stage::Context, |tx| {
            tx.execute(TOMBSTONES, &[&owner_id, &ips, &ports, &transports, &times])
                .map_err(ProjectionError::from)
        })?;
        let ops = stale
            .iter()
            .map(|s| BulkOp::delete_if_unchanged(&s.index, &s.id, s.seq_no, s.primary_term))
            .collect();
        Ok((ops, stale.len()))
    }

    /// The page's documents as they are now, with their versions; those no longer stale
    /// (merged since the page was read) are left out.
    fn lookup(
        &self,
        es: &EsClient,
        targets: &AssetIndices,
        ids: &[Cow<'_, str>],
    ) -> Result<Vec<Stale>, EsError> {
        let body = json!({
            "size": ids.len(),
            "query": { "bool": {
                "filter": [ { "ids": { "values": ids } } ],
                "must": stale(&self.before, None)
            } },
            "_source": ["ip", "port", "transport", "last_seen", "state_observed_at"],
            "seq_no_primary_term": true,
            "track_total_hits": false,
        });
        let found = es.search(&Indices::one(&targets.user), &body)?;
        let text = |v: &Value| v.as_str().map(str::to_string);
        Ok(found["hits"]["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| {
                let src = &h["_source"];
                let last_seen = text(&src["last_seen"]).unwrap_or_default();
                let state_at = text(&src["state_observed_at"]).unwrap_or_default();
                Some(Stale {
                    index: text(&h["_index"])?,
                    id: text(&h["_id"])?,
                    seq_no: h["_seq_no"].as_i64()?,
                    primary_term: h["_primary_term"].as_i64()?,
                    ip: text(&src["ip"])?,
                    port: i32::try_from(src["port"].as_i64()?).ok()?,
                    transport: text(&src["transport"])?,
                    last: last_seen.max(state_at),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_takes_the_owners_documents_last_seen_in_any_state_before_the_limit() {
        let at: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().unwrap();
        let f = ExpireRun::new(at).filter(Uuid::from_u128(1)).to_string();
        for part in [
            r#"{"term":{"owner_id":"00000000-0000-0000-0000-000000000001"}}"#,
            r#"{"range":{"last_seen":{"lt":"2026-12-01T00:00:00.000Z"}}}"#,
            r#"{"must_not":[{"range":{"state_observed_at":{"gte":"2026-12-01T00:00:00.000Z"}}}]}"#,
        ] {
            assert!(f.contains(part), "{part} not in {f}");
        }
    }
}
