//! Retiring tombstones (`retention.tombstone_days`): the execution results an old tombstone
//! covers — the owner's observations of its address or network (or endpoint) made at or
//! before the deletion — are marked `erased`, which keeps them out of the owner's view in
//! publication and rebuild from then on; once the marks are visible, the rows go. No
//! upload can bring another observation that old (the configuration keeps tombstones
//! longer than `upload.max_observation_age_days`), so nothing is left for a row to stop.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::app::App;
use crate::db::{Db, DbError, Queries, Stage};
use crate::es::bulk::BulkOp;
use crate::es::index::{self, Indices};
use crate::es::EsError;
use crate::projection::worker::OUTBOX_BACKOFF;
use crate::upload::facts::es_time;

use super::RetentionError;

// Tombstones made before $1 whose deletion run (if any) is done, oldest first. By
// asset_tombstones_deleted_idx.
macro_rules! due {
    ($select:literal, $tail:literal) => {
        concat!(
            "SELECT ",
            $select,
            " FROM asset_tombstones t
              WHERE t.deleted_at < $1
                AND NOT EXISTS (SELECT 1 FROM scan_projection_outbox o
                                 WHERE o.tombstone_id = t.id AND o.processed_at IS NULL) ",
            $tail
        )
    };
}
const DUE: &str = due!(
    "t.id, t.owner_id, t.target::text, t.port, t.transport, t.deleted_at",
    "ORDER BY t.deleted_at, t.id LIMIT $2"
);
const DUE_COUNT: &str = due!("count(*)", "");
// By primary key; the deletion rows they had, processed, go with them (ON DELETE CASCADE).
const RETIRE: &str = "DELETE FROM asset_tombstones WHERE id = ANY($1)";

/// Attempts per bulk request of marks (a failed run is simply run again).
const ATTEMPTS: u32 = 3;

struct Tombstone {
    id: i64,
    owner_id: Uuid,
    target: String,
    endpoint: Option<(i32, String)>,
    deleted_at: DateTime<Utc>,
}

/// What retiring did: tombstones retired, execution results marked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retired {
    pub tombstones: u64,
    pub marked: u64,
}

/// Retires the tombstones made before `before`, `batch` at a time, until `stop`.
pub fn retire(
    app: &App,
    before: DateTime<Utc>,
    batch: usize,
    stop: &AtomicBool,
    retired: &mut Retired,
) -> Result<(), RetentionError> {
    let projection = index::execution_endpoints(&app.config.elasticsearch.index_prefix);
    while !stop.load(Ordering::SeqCst) {
        let due = due(&app.db, before, batch)?;
        if due.is_empty() {
            break;
        }
        for t in &due {
            retired.marked += mark(app, &projection, t, batch)?;
        }
        // Publication and rebuild read the projection through searches: the marks must be
        // visible before the rows that did their work until now go.
        app.es.refresh(&Indices::one(&projection))?;
        let ids: Vec<i64> = due.iter().map(|t| t.id).collect();
        app.db.in_tx(Stage::Retention, |tx| {
            Ok::<_, DbError>(tx.execute(RETIRE, &[&ids])?)
        })?;
        retired.tombstones += ids.len() as u64;
    }
    Ok(())
}

/// How many tombstones [`retire`] would retire now.
pub fn count(db: &Db, before: DateTime<Utc>) -> Result<u64, DbError> {
    let mut conn = db.checkout(Stage::Retention)?;
    Ok(conn.query_one(DUE_COUNT, &[&before])?.get::<_, i64>(0) as u64)
}

fn due(db: &Db, before: DateTime<Utc>, batch: usize) -> Result<Vec<Tombstone>, DbError> {
    let mut conn = db.checkout(Stage::Retention)?;
    Ok(conn
        .query(DUE, &[&before, &(batch as i64)])?
        .iter()
        .map(|r| Tombstone {
            id: r.get(0),
            owner_id: r.get(1),
            target: r.get(2),
            endpoint: r.get::<_, Option<i32>>(3).zip(r.get(4)),
            deleted_at: r.get(5),
        })
        .collect())
}

/// The query of the execution results `t` covers that are not marked yet.
fn covered(t: &Tombstone) -> Value {
    let mut filter = vec![
        json!({ "term": { "owner_id": t.owner_id.to_string() } }),
        json!({ "term": { "ip": t.target } }),
        json!({ "range": { "observed_at": { "lte": es_time(&t.deleted_at) } } }),
    ];
    if let Some((port, transport)) = &t.endpoint {
        filter.push(json!({ "term": { "port": port } }));
        filter.push(json!({ "term": { "transport": transport } }));
    }
    json!({ "bool": {
        "filter": filter,
        "must_not": [ { "term": { "erased": true } } ]
    } })
}

/// Marks what `t` covers, page by page in a stable order; returns how many were marked.
fn mark(app: &App, projection: &str, t: &Tombstone, batch: usize) -> Result<u64, EsError> {
    let trace_id = format!("retention-tombstone-{}", t.id);
    let writer = app.writer(ATTEMPTS, OUTBOX_BACKOFF, &trace_id);
    let mut body = json!({
        "size": batch,
        "query": covered(t),
        "sort": [ {"execution_id": "asc"}, {"ip": "asc"}, {"port": "asc"}, {"transport": "asc"} ],
        "_source": false,
        "track_total_hits": false,
    });
    let mut marked = 0;
    loop {
        let found = app.es.search(&Indices::one(projection), &body)?;
        let hits = found["hits"]["hits"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ops: Vec<BulkOp> = hits
            .iter()
            .filter_map(|h| {
                let (index, id) = (h["_index"].as_str()?, h["_id"].as_str()?);
                Some(BulkOp::partial_update(
                    index,
                    id,
                    &json!({ "erased": true }),
                ))
            })
            .collect();
        writer.write(&ops)?;
        marked += ops.len() as u64;
        match hits.last() {
            Some(last) if hits.len() == batch => body["search_after"] = last["sort"].clone(),
            _ => return Ok(marked),
        }
    }
}
