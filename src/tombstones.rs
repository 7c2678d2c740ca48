//! Asset tombstones (`asset_tombstones`, written by `scanstore-admin asset delete`): an
//! owner's deletions, the deletion run that removes the owner's documents they cover, and
//! the lookup with which publication and rebuild keep anything observed at or before a
//! deletion out of the owner's view (a newer observation brings the asset back).
//!
//! Tombstones apply to the owner's view only: the global view is the admins' aggregate of
//! everything observed, which an owner's deletion does not rewrite.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};
use crate::es::alias::AssetIndices;
use crate::es::bulk::BulkOp;
use crate::upload::facts::es_time;

// The latest deletion covering each endpoint of a page: the owner's tombstones whose
// target contains the address, for every endpoint or this one. By the owner index; an
// owner has few tombstones, and most have none.
const COVERING: &str = "
    SELECT a.i, max(t.deleted_at)
      FROM unnest($2::text[], $3::int[], $4::text[]) WITH ORDINALITY AS a(ip, port, transport, i)
      JOIN asset_tombstones t
        ON t.owner_id = $1 AND t.target >>= a.ip::inet
       AND (t.port IS NULL OR (t.port = a.port AND t.transport = a.transport))
     GROUP BY a.i";

// One tombstone, for its deletion run. By primary key.
const TOMBSTONE: &str = "
    SELECT target::text, port, transport, deleted_at FROM asset_tombstones WHERE id = $1";

/// One endpoint as a page names it: (ip, transport, port).
pub type Endpoint<'a> = (Cow<'a, str>, Cow<'a, str>, u16);

/// For each endpoint, the time (as documents store times) of the latest deletion of the
/// owner's copy that covers it, if any.
pub fn covering(
    conn: &mut impl Queries,
    owner_id: Uuid,
    endpoints: &[Endpoint<'_>],
) -> Result<Vec<Option<String>>, DbError> {
    let mut deleted = vec![None; endpoints.len()];
    let ips: Vec<&str> = endpoints.iter().map(|e| e.0.as_ref()).collect();
    let ports: Vec<i32> = endpoints.iter().map(|e| i32::from(e.2)).collect();
    let transports: Vec<&str> = endpoints.iter().map(|e| e.1.as_ref()).collect();
    for r in conn.query(COVERING, &[&owner_id, &ips, &ports, &transports])? {
        let i: i64 = r.get(0);
        let at: DateTime<Utc> = r.get(1);
        if let Some(slot) = usize::try_from(i - 1).ok().and_then(|i| deleted.get_mut(i)) {
            *slot = Some(es_time(&at));
        }
    }
    Ok(deleted)
}

/// Whether an observation made at `observed_at` is one a deletion at `deleted_at` removed
/// (times as documents store them, which compare in time order).
pub fn erased(observed_at: &str, deleted_at: Option<&str>) -> bool {
    deleted_at.is_some_and(|d| observed_at <= d)
}

/// A deletion run: the owner's documents a tombstone covers, deleted page by page.
pub struct DeleteRun {
    /// An address or network, as ES `term` queries on an `ip` field take it.
    target: String,
    endpoint: Option<(i32, String)>,
    /// When the deletion was made, as documents store times.
    at: String,
}

impl DeleteRun {
    /// Reads the run's tombstone; `None` when it is gone (its owner was deleted).
    pub fn load(db: &Db, tombstone_id: i64) -> Result<Option<DeleteRun>, DbError> {
        let mut conn = db.checkout(Stage::Context)?;
        let Some(r) = conn.query_opt(TOMBSTONE, &[&tombstone_id])? else {
            return Ok(None);
        };
        let port: Option<i32> = r.get(1);
        let transport: Option<String> = r.get(2);
        Ok(Some(DeleteRun {
            target: r.get(0),
            endpoint: port.zip(transport),
            at: es_time(&r.get::<_, DateTime<Utc>>(3)),
        }))
    }

    /// The owner's documents the tombstone covers that nothing newer than it was merged
    /// into (such a document holds an observation the deletion did not remove).
    pub fn filter(&self, owner_id: Uuid) -> Value {
        let mut filter = vec![
            json!({ "term": { "owner_id": owner_id.to_string() } }),
            json!({ "term": { "ip": self.target } }),
            json!({ "bool": { "must_not": [
                { "range": { "last_seen": { "gt": self.at } } },
                { "range": { "state_observed_at": { "gt": self.at } } }
            ] } }),
        ];
        if let Some((port, transport)) = &self.endpoint {
            filter.push(json!({ "term": { "port": port } }));
            filter.push(json!({ "term": { "transport": transport } }));
        }
        Value::Array(filter)
    }

    /// The deletes of a page's documents (by id) from the owner's view.
    pub fn operations(&self, targets: &AssetIndices, ids: &[Cow<'_, str>]) -> Vec<BulkOp> {
        ids.iter()
            .map(|id| BulkOp::delete(&targets.user, id))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_at_or_before_the_deletion_is_erased() {
        let d = Some("2026-12-01T00:00:00.000Z");
        assert!(erased("2026-11-30T23:59:59.999Z", d));
        assert!(erased("2026-12-01T00:00:00.000Z", d));
        assert!(!erased("2026-12-01T00:00:00.001Z", d));
        assert!(!erased("2026-11-30T00:00:00.000Z", None));
    }
}
