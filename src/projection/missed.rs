//! The close runs an execution's page missed: a close run touches only the documents that
//! exist when it passes them, so an observation it would have closed — older than its
//! execution's start, in its targets and scope, not seen by it — that is published after
//! it (a late upload of an earlier scan, or a page published once the run's cursor had
//! passed its address) would stay open, while `rebuild-assets`, which replays close runs
//! after every execution, closes it. So each page of an execution looks up, for every
//! endpoint it observed open, the owner's close runs (done or not) that could have closed
//! it, and merges the close that replaying them would make.
//!
//! Replayed in order (`rebuild::source::close_runs`: outbox order), the first run that
//! finds the owner's document open and last seen before its start closes it and the
//! others then skip it; so the page merges the first run, in that order, that started
//! after the document (as the page leaves it) was last seen and did not see the endpoint,
//! and only if that document is open. A page of observations newer than every close run
//! of its owner costs one indexed query that returns nothing.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::{DbError, Queries};
use crate::es::alias::AssetIndices;
use crate::es::bulk::BulkOp;
use crate::es::index::{self, Indices};
use crate::es::{EsClient, EsError};
use crate::ports::{PortScope, Transport};
use crate::upload::facts::es_time;

use super::close::{self, Closing};
use super::page::{self, Doc};

// For each address observed open ($3, observed at $4), the owner's close runs whose
// execution started after the observation and whose address targets contain it, in
// outbox order. A close row is created when its execution's publication completes, after
// the execution started, so only rows created after the page's earliest observation ($2)
// can qualify: by scan_projection_outbox_close_owner_idx, then primary keys. A deleted
// task's close runs are being taken back by its deletion run, and rebuilds skip them.
const MISSED: &str = "
    SELECT a.i, o.closing_execution_id, coalesce(e.started_at, e.created_at), t.ports
      FROM scan_projection_outbox o
      JOIN executions e ON e.id = o.closing_execution_id
      JOIN tasks t ON t.id = e.task_id AND t.deleted_at IS NULL
      JOIN unnest($3::inet[], $4::timestamptz[]) WITH ORDINALITY AS a(ip, observed_at, i)
        ON coalesce(e.started_at, e.created_at) > a.observed_at
     WHERE o.owner_id = $1 AND o.kind = 'close' AND o.created_at > $2
       AND t.ports IS NOT NULL
       AND EXISTS (SELECT 1 FROM task_targets tt
                    WHERE tt.task_id = t.id AND tt.kind IN ('ip', 'cidr')
                      AND CASE WHEN tt.kind IN ('ip', 'cidr')
                               THEN tt.value::inet >>= a.ip END)
     ORDER BY a.i, o.id";

/// A close run an observation may have missed.
struct Run {
    execution_id: Uuid,
    /// Its execution's start, as documents store times.
    at: String,
}

/// One endpoint of the page observed open before some of its owner's close runs started.
struct Endpoint {
    /// Its document's place in the page.
    doc: usize,
    /// As documents store times.
    observed_at: String,
    /// Those close runs whose scope holds the port, in outbox order.
    runs: Vec<Run>,
}

/// The close runs each endpoint of a page may have missed.
#[derive(Default)]
pub struct Missed {
    endpoints: Vec<Endpoint>,
}

impl Missed {
    /// Looks up the close runs of `owner_id` that each open observation of `docs` predates
    /// (`deleted` as for [`page::execution_operations`]: an observation erased from the
    /// owner's copy closes nothing). No query when the page has no open observation.
    pub fn lookup(
        conn: &mut impl Queries,
        owner_id: Uuid,
        docs: &[Doc<'_>],
        deleted: &[Option<String>],
    ) -> Result<Missed, DbError> {
        let mut asked = Vec::new();
        for (i, at) in page::open_observed_at(docs, deleted)
            .into_iter()
            .enumerate()
        {
            let Some(at) = at else { continue };
            let (ip, _, _) = docs[i].source.endpoint_key();
            // A document's address and time were checked on upload; one that does not
            // parse names no endpoint a close run could have reached.
            if let (Ok(ip), Ok(t)) = (ip.parse::<IpAddr>(), DateTime::parse_from_rfc3339(&at)) {
                asked.push((i, ip, t.with_timezone(&Utc), at.into_owned()));
            }
        }
        let Some(earliest) = asked.iter().map(|a| a.2).min() else {
            return Ok(Missed::default());
        };
        let ips: Vec<IpAddr> = asked.iter().map(|a| a.1).collect();
        let times: Vec<DateTime<Utc>> = asked.iter().map(|a| a.2).collect();
        let rows = conn.query(MISSED, &[&owner_id, &earliest, &ips, &times])?;
        let mut scopes: HashMap<Uuid, Option<PortScope>> = HashMap::new();
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for r in rows {
            let n: i64 = r.get(0);
            let Some((doc, _, _, observed_at)) =
                usize::try_from(n - 1).ok().and_then(|n| asked.get(n))
            else {
                continue;
            };
            let execution_id: Uuid = r.get(1);
            // The table's CHECK has validated the scope; one it still refuses closes nothing.
            let scope = scopes.entry(execution_id).or_insert_with(|| {
                r.get::<_, Option<String>>(3)
                    .and_then(|s| PortScope::parse(&s).ok())
            });
            let (_, transport, port) = docs[*doc].source.endpoint_key();
            let covered = Transport::from_name(&transport)
                .zip(scope.as_ref())
                .is_some_and(|(t, scope)| scope.covers(t, port));
            if !covered {
                continue;
            }
            let run = Run {
                execution_id,
                at: es_time(&r.get::<_, DateTime<Utc>>(2)),
            };
            match endpoints.last_mut() {
                Some(e) if e.doc == *doc => e.runs.push(run),
                _ => endpoints.push(Endpoint {
                    doc: *doc,
                    observed_at: observed_at.clone(),
                    runs: vec![run],
                }),
            }
        }
        Ok(Missed { endpoints })
    }

    /// The close merges replaying the runs would make to the page's endpoints in `targets`
    /// (send them after the page's own merges, in order). Reads Elasticsearch: hold no
    /// database connection.
    pub fn operations(
        &self,
        es: &EsClient,
        prefix: &str,
        targets: &AssetIndices,
        owner_id: Uuid,
        docs: &[Doc<'_>],
    ) -> Result<Vec<BulkOp>, EsError> {
        if self.endpoints.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<_> = self
            .endpoints
            .iter()
            .map(|e| docs[e.doc].source.endpoint_key())
            .collect();
        let user_ids: Vec<String> = keys
            .iter()
            .map(|(ip, transport, port)| {
                index::user_asset_id(owner_id, &index::global_asset_id(ip, transport, *port))
            })
            .collect();
        let current = owner_documents(es, &targets.user, &user_ids)?;
        // Per endpoint, the runs that would find its document open and last seen before
        // they started, in order; the first of them that did not see it closes it.
        let mut candidates: Vec<_> = self
            .endpoints
            .iter()
            .zip(&user_ids)
            .map(|(e, user_id)| {
                let (open, last_seen) = with_observation(current.get(user_id), &e.observed_at);
                let runs = e.runs.iter().filter(|r| open && r.at.as_str() > last_seen);
                runs.collect::<Vec<_>>().into_iter()
            })
            .collect();
        let exec_index = index::execution_endpoints(prefix);
        let seen_id = |i: usize, run: &Run| {
            let (ip, transport, port) = &keys[i];
            index::execution_endpoint_id(run.execution_id, ip, transport, *port)
        };
        let mut ops = Vec::new();
        // One lookup of the execution projection per round, for each endpoint's next run:
        // the first is usually one that did not see it.
        loop {
            let asked: Vec<(usize, &Run)> = candidates
                .iter_mut()
                .enumerate()
                .filter_map(|(i, runs)| runs.next().map(|run| (i, run)))
                .collect();
            if asked.is_empty() {
                break;
            }
            let ids: Vec<String> = asked.iter().map(|(i, run)| seen_id(*i, run)).collect();
            let seen = close::existing(es, &exec_index, &ids)?;
            for ((i, run), id) in asked.into_iter().zip(ids) {
                if seen.contains(&id) {
                    continue;
                }
                // Closed: no later run is asked for it.
                candidates[i] = Vec::new().into_iter();
                let closing = Closing {
                    execution_id: run.execution_id,
                    at: &run.at,
                };
                let endpoint = (keys[i].clone(), Cow::Borrowed(user_ids[i].as_str()));
                ops.extend(closing.ops(targets, owner_id, &[endpoint])?);
            }
        }
        Ok(ops)
    }
}

/// The owner's documents of `ids` in `index` as they stand (the state fields and
/// `last_seen`), after a refresh: a rebuild writes its version without refreshing it, and
/// a document written but not yet visible would be read as absent.
fn owner_documents(
    es: &EsClient,
    index: &str,
    ids: &[String],
) -> Result<HashMap<String, Value>, EsError> {
    es.refresh(&Indices::one(index))?;
    let body = json!({
        "size": ids.len(),
        "query": { "ids": { "values": ids } },
        "_source": ["state", "state_observed_at", "last_seen"],
        "track_total_hits": false,
    });
    let found = es.search(&Indices::one(index), &body)?;
    Ok(found["hits"]["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| Some((h["_id"].as_str()?.to_string(), h["_source"].clone())))
        .collect())
}

/// Whether the owner's document `current` (if any) is open once an open observation made
/// at `observed_at` is merged into it, and when it was then last seen: the merge script's
/// rules (the newest state wins, a tie goes to the closed one; open observations move
/// `last_seen`), with times as documents store them, which compare in time order.
fn with_observation<'a>(current: Option<&'a Value>, observed_at: &'a str) -> (bool, &'a str) {
    let Some(doc) = current else {
        return (true, observed_at);
    };
    let text = |field: &str| doc.get(field).and_then(Value::as_str);
    let state_seen = text("state_observed_at")
        .or_else(|| text("last_seen"))
        .unwrap_or("");
    let open = text("state").is_none() || observed_at > state_seen;
    let last_seen = text("last_seen")
        .filter(|seen| *seen > observed_at)
        .unwrap_or(observed_at);
    (open, last_seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_leaves_the_document_open_and_last_seen_as_the_merge_does() {
        let t = |h: u8| format!("2026-12-01T{h:02}:00:00.000Z");
        // No document yet: the observation alone.
        assert_eq!(with_observation(None, &t(10)), (true, t(10).as_str()));
        // Open and seen later: still open, last seen later.
        let open = json!({"last_seen": t(12), "state_observed_at": t(12)});
        assert_eq!(
            with_observation(Some(&open), &t(10)),
            (true, t(12).as_str())
        );
        // Closed at 11 (by a close run or a scanner): an older observation leaves it closed,
        // a newer one opens it; a tie goes to the closed state.
        let closed = json!({"last_seen": t(9), "state": "closed", "state_observed_at": t(11)});
        assert!(!with_observation(Some(&closed), &t(10)).0);
        assert!(!with_observation(Some(&closed), &t(11)).0);
        assert_eq!(
            with_observation(Some(&closed), &t(12)),
            (true, t(12).as_str())
        );
        // A document from before states were stored: its state was seen with last_seen.
        let legacy = json!({"last_seen": t(9), "state": "filtered"});
        assert!(with_observation(Some(&legacy), &t(10)).0);
        assert!(!with_observation(Some(&legacy), &t(8)).0);
    }
}
