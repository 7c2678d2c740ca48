//! A close run (outbox kind `close`): the owner's open assets inside a succeeded
//! execution's targets × port scope, last seen before the execution started and not seen
//! by it, each closed by a merge of a `closed` observation at the execution's start.
//!
//! The merge's rules make this safe in any order: a close at `t` loses to any observation
//! newer than `t`, and merging it again changes nothing. Domain targets close nothing (the
//! addresses a name resolves to change between scans), and neither does a task without a
//! port scope (it never gets a close row).

use std::borrow::Cow;
use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};
use crate::es::alias::AssetIndices;
use crate::es::bulk::{BulkOp, ScriptedUpserts};
use crate::es::index::{self, Indices};
use crate::es::{painless, EsClient, EsError};
use crate::ports::PortScope;
use crate::tombstones::Endpoint;
use crate::upload::facts::es_time;

use super::page::Doc;

// What a close run needs of its execution: when it started (a succeeded execution was
// claimed, so started_at is set; created_at only guards a hand-made row), its task's port
// scope and its address targets. By primary keys and task_targets' (task_id, …) key.
const CLOSE_CONTEXT: &str = "
    SELECT coalesce(e.started_at, e.created_at), t.ports,
           coalesce(array_agg(tt.value ORDER BY tt.value)
                    FILTER (WHERE tt.kind IN ('ip', 'cidr')), '{}')
      FROM executions e
      JOIN tasks t ON t.id = e.task_id
      LEFT JOIN task_targets tt ON tt.task_id = t.id
     WHERE e.id = $1
     GROUP BY e.started_at, e.created_at, t.ports";

/// The execution a close run closes for, as the database describes it.
pub struct CloseRun {
    pub execution_id: Uuid,
    /// The time of the close: the execution's start, as documents store times.
    at: String,
    /// Address targets (`ip` or `cidr`), as ES `term` queries on an `ip` field take them.
    targets: Vec<String>,
    scope: PortScope,
}

impl CloseRun {
    /// A run of `execution_id`, started at `started`, over address `targets` and `scope`.
    pub fn new(
        execution_id: Uuid,
        started: DateTime<Utc>,
        targets: Vec<String>,
        scope: PortScope,
    ) -> CloseRun {
        CloseRun {
            execution_id,
            at: es_time(&started),
            targets,
            scope,
        }
    }

    /// Reads the run's execution; `None` when there is nothing it could close (no port
    /// scope, no address target, or the execution is gone).
    pub fn load(db: &Db, execution_id: Uuid) -> Result<Option<CloseRun>, DbError> {
        let mut conn = db.checkout(Stage::Context)?;
        let Some(r) = conn.query_opt(CLOSE_CONTEXT, &[&execution_id])? else {
            return Ok(None);
        };
        let started: DateTime<Utc> = r.get(0);
        let targets: Vec<String> = r.get(2);
        // The table's CHECK has validated the scope; one it still refuses closes nothing.
        let scope = r
            .get::<_, Option<String>>(1)
            .and_then(|s| PortScope::parse(&s).ok());
        Ok(scope
            .filter(|_| !targets.is_empty())
            .map(|scope| CloseRun::new(execution_id, started, targets, scope)))
    }

    /// The owner's asset documents the run may close: open, in scope, last seen before
    /// the execution started.
    pub fn filter(&self, owner_id: Uuid) -> Value {
        let targets: Vec<Value> = self
            .targets
            .iter()
            .map(|t| json!({ "term": { "ip": t } }))
            .collect();
        let ports: Vec<Value> = self
            .scope
            .0
            .iter()
            .map(|r| {
                json!({ "bool": { "filter": [
                    { "term": { "transport": r.transport.as_str() } },
                    { "range": { "port": { "gte": r.first, "lte": r.last } } }
                ] } })
            })
            .collect();
        json!([
            { "term": { "owner_id": owner_id.to_string() } },
            { "range": { "last_seen": { "lt": self.at } } },
            { "bool": { "should": targets, "minimum_should_match": 1 } },
            { "bool": { "should": ports, "minimum_should_match": 1 } },
            { "bool": { "must_not": [ { "exists": { "field": "state" } } ] } }
        ])
    }

    /// The page's documents that the execution saw (in any state), by their
    /// execution-projection ids: they are not closed by its run.
    fn seen(
        &self,
        es: &EsClient,
        prefix: &str,
        docs: &[Doc<'_>],
    ) -> Result<HashSet<String>, EsError> {
        let ids: Vec<String> = docs
            .iter()
            .map(|d| {
                let (ip, transport, port) = d.source.endpoint_key();
                index::execution_endpoint_id(self.execution_id, &ip, &transport, port)
            })
            .collect();
        existing(es, &index::execution_endpoints(prefix), &ids)
    }

    /// Merges of a `closed` observation into both copies of each document of the page
    /// that the execution did not see; returns them with how many endpoints they close.
    pub fn operations(
        &self,
        es: &EsClient,
        prefix: &str,
        targets: &AssetIndices,
        owner_id: Uuid,
        docs: &[Doc<'_>],
    ) -> Result<(Vec<BulkOp>, usize), EsError> {
        let seen = self.seen(es, prefix, docs)?;
        let unseen: Vec<&Doc> = docs
            .iter()
            .filter(|d| {
                let (ip, transport, port) = d.source.endpoint_key();
                !seen.contains(&index::execution_endpoint_id(
                    self.execution_id,
                    &ip,
                    &transport,
                    port,
                ))
            })
            .collect();
        Ok((self.closes(targets, owner_id, &unseen)?, unseen.len()))
    }

    /// Merges of a `closed` observation into both copies of each of `docs` (owner's view
    /// documents).
    pub fn closes(
        &self,
        targets: &AssetIndices,
        owner_id: Uuid,
        docs: &[&Doc<'_>],
    ) -> Result<Vec<BulkOp>, EsError> {
        let endpoints: Vec<_> = docs
            .iter()
            .map(|d| (d.source.endpoint_key(), d.id.clone()))
            .collect();
        Closing {
            execution_id: self.execution_id,
            at: &self.at,
        }
        .ops(targets, owner_id, &endpoints)
    }
}

/// One close run's merge: a `closed` observation by `execution_id` at `at` (the
/// execution's start, as documents store times).
pub struct Closing<'a> {
    pub execution_id: Uuid,
    pub at: &'a str,
}

impl Closing<'_> {
    /// The merges of the close into both copies of each endpoint, given with the id of the
    /// owner's document.
    pub fn ops(
        &self,
        targets: &AssetIndices,
        owner_id: Uuid,
        endpoints: &[(Endpoint<'_>, Cow<'_, str>)],
    ) -> Result<Vec<BulkOp>, EsError> {
        let global = ScriptedUpserts::new(&targets.global, painless::ASSET_MERGE_ID);
        let user = ScriptedUpserts::new(&targets.user, painless::ASSET_MERGE_ID);
        let mut ops = Vec::with_capacity(endpoints.len() * 2);
        for ((ip, transport, port), user_id) in endpoints {
            let mut obs = json!({
                "ip": ip, "port": port, "transport": transport, "state": "closed",
                "observed_at": self.at, "execution_id": self.execution_id.to_string(),
            });
            let params = |obs: &Value| serde_json::to_vec(&json!({ "obs": obs }));
            let global_params = params(&obs).map_err(|e| EsError::Refused(e.to_string()))?;
            ops.push(global.op(index::global_asset_id(ip, transport, *port), &global_params));
            obs["owner_id"] = json!(owner_id.to_string());
            let user_params = params(&obs).map_err(|e| EsError::Refused(e.to_string()))?;
            ops.push(user.op(user_id.to_string(), &user_params));
        }
        Ok(ops)
    }
}

/// Which of `ids` name a document of `index` (searchable: the execution projection is
/// refreshed when its execution finishes), asked a few thousand at a time.
pub fn existing(es: &EsClient, index: &str, ids: &[String]) -> Result<HashSet<String>, EsError> {
    let mut found = HashSet::new();
    for chunk in ids.chunks(IDS_PER_SEARCH) {
        let body = json!({
            "size": chunk.len(),
            "query": { "ids": { "values": chunk } },
            "_source": false,
            "track_total_hits": false,
        });
        let hits = es.search(&Indices::one(index), &body)?;
        found.extend(
            hits["hits"]["hits"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h["_id"].as_str().map(str::to_string)),
        );
    }
    Ok(found)
}

/// Ids per `ids` search: well within a search's 10 000-hit window.
const IDS_PER_SEARCH: usize = 5000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_names_the_owner_targets_scope_and_start() {
        let run = CloseRun {
            execution_id: Uuid::nil(),
            at: "2026-12-01T00:00:00.000Z".into(),
            targets: vec!["10.0.0.0/24".into(), "192.0.2.7".into()],
            scope: PortScope::parse("22,U:53-54").unwrap(),
        };
        let f = run.filter(Uuid::from_u128(1)).to_string();
        for part in [
            r#"{"term":{"ip":"10.0.0.0/24"}}"#,
            r#"{"term":{"ip":"192.0.2.7"}}"#,
            r#"{"term":{"transport":"udp"}},{"range":{"port":{"gte":53,"lte":54}}}"#,
            r#"{"range":{"last_seen":{"lt":"2026-12-01T00:00:00.000Z"}}}"#,
            r#"{"exists":{"field":"state"}}"#,
        ] {
            assert!(f.contains(part), "{part} not in {f}");
        }
    }
}
