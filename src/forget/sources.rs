//! What recomputing some endpoints reads, exactly as a rebuild would find it: every
//! observation of them left in the execution projection (ES), which of those a rebuild
//! publishes and into which owner's view, and the close runs that may close them
//! (PostgreSQL). Each query is one statement; no connection is held across ES I/O.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::Queries;
use crate::es::index::{self, Indices};
use crate::es::{EsClient, EsError};
use crate::ports::PortScope;
use crate::upload::facts::es_time;

/// An endpoint: (ip, transport, port), as asset document ids name it.
pub type Key = (String, String, u16);

/// Endpoints per observation search: three term clauses each keep a query far below a
/// cluster's clause limit (1024 on Elasticsearch 7 and OpenSearch).
const ENDPOINTS_PER_SEARCH: usize = 100;
/// Observations per search response.
const OBSERVATIONS_PER_PAGE: usize = 1000;

/// One observation of the execution projection: its document id, its source as JSON text
/// (what a merge copies) and the fields a recompute decides on.
pub struct Observation {
    pub id: String,
    pub text: String,
    pub key: Key,
    pub execution_id: Option<Uuid>,
    /// As documents store times (RFC 3339, milliseconds), so strings compare in time order.
    pub observed_at: String,
    /// The observed state, `""` for open (as the merge reads a missing or `open` one).
    pub state: String,
}

impl Observation {
    fn of(hit: &Value) -> Option<Observation> {
        let source = &hit["_source"];
        let text = |f: &str| source[f].as_str().unwrap_or_default().to_string();
        let state = match source["state"].as_str() {
            None | Some("open") => String::new(),
            Some(s) => s.to_string(),
        };
        Some(Observation {
            id: hit["_id"].as_str()?.to_string(),
            text: source.to_string(),
            key: (
                text("ip"),
                text("transport"),
                source["port"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(0),
            ),
            execution_id: source["execution_id"].as_str().and_then(|e| e.parse().ok()),
            observed_at: text("observed_at"),
            state,
        })
    }
}

/// Whether a search answered in full (a partial answer would drop observations).
pub(super) fn complete(body: &Value) -> Result<(), EsError> {
    if body["timed_out"] == true || body["_shards"]["failed"].as_u64().unwrap_or(0) > 0 {
        return Err(EsError::BadResponse(
            "partial search result (timed out or failed shards)".into(),
        ));
    }
    Ok(())
}

/// Every observation of `keys` in the execution projection but those of `task_id`, in a
/// stable order (ip, port, transport, execution): a unique sort, so pages neither skip nor
/// repeat, and two reads of unchanged sources give the same list.
pub fn observations(
    es: &EsClient,
    prefix: &str,
    task_id: Uuid,
    keys: &[Key],
) -> Result<Vec<Observation>, EsError> {
    let indices = Indices::one(&index::execution_endpoints(prefix));
    let mut found = Vec::new();
    for chunk in keys.chunks(ENDPOINTS_PER_SEARCH) {
        let endpoints: Vec<Value> = chunk
            .iter()
            .map(|(ip, transport, port)| {
                json!({ "bool": { "filter": [
                    { "term": { "ip": ip } },
                    { "term": { "port": port } },
                    { "term": { "transport": transport } }
                ] } })
            })
            .collect();
        let mut body = json!({
            "size": OBSERVATIONS_PER_PAGE,
            "query": { "bool": {
                "filter": [ { "bool": { "should": endpoints, "minimum_should_match": 1 } } ],
                "must_not": [ { "term": { "task_id": task_id.to_string() } } ]
            } },
            "sort": [ {"ip": "asc"}, {"port": "asc"}, {"transport": "asc"}, {"execution_id": "asc"} ],
            "track_total_hits": false,
        });
        loop {
            let page = es.search(&indices, &body)?;
            complete(&page)?;
            let hits = page["hits"]["hits"].as_array().cloned().unwrap_or_default();
            found.extend(hits.iter().filter_map(Observation::of));
            match hits.last() {
                Some(last) if hits.len() == OBSERVATIONS_PER_PAGE => {
                    body["search_after"] = last["sort"].clone();
                }
                _ => break,
            }
        }
    }
    Ok(found)
}

// Of the executions named, those a rebuild publishes (rebuild::source's
// PUBLISHABLE_EXECUTIONS: an execution row, or records pruned by retention after it was
// published; a succeeded execution, a task not being deleted), with the owner whose views
// they feed. By primary keys and the outbox's
// execution_id key.
const PUBLISHABLE: &str = "
    SELECT e.id, t.owner_id
      FROM executions e
      JOIN tasks t ON t.id = e.task_id AND t.deleted_at IS NULL
     WHERE e.id = ANY($1) AND e.status = 'succeeded'
       AND (EXISTS (SELECT 1 FROM scan_projection_outbox o
                     WHERE o.execution_id = e.id AND o.kind = 'execution')
            OR (e.pruned_at IS NOT NULL AND t.kind <> 'dns'))";

/// Of `executions`, those a rebuild publishes, each with its owner.
pub fn publishable(
    conn: &mut impl Queries,
    executions: &[Uuid],
) -> Result<HashMap<Uuid, Uuid>, postgres::Error> {
    Ok(conn
        .query(PUBLISHABLE, &[&executions])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

// The close runs a rebuild replays (rebuild::source's CLOSE_RUNS) that may close each
// wanted (owner, address, last seen): by the owner's scoped tasks not being deleted whose
// IP or CIDR targets hold the address, started after the last sighting (at the
// millisecond, as documents store times); in outbox order, which is the order a rebuild
// replays them in. Through the owner's tasks (tasks_owner_created_idx), the executions'
// and targets' task keys and the outbox's closing_execution_id key.
const CLOSE_CANDIDATES: &str = "
    SELECT a.i, e.id, coalesce(e.started_at, e.created_at), t.ports
      FROM unnest($1::uuid[], $2::text[], $3::timestamptz[])
           WITH ORDINALITY AS a(owner_id, ip, last_seen, i)
      JOIN tasks t ON t.owner_id = a.owner_id AND t.ports IS NOT NULL AND t.deleted_at IS NULL
      JOIN executions e ON e.task_id = t.id
      JOIN scan_projection_outbox o ON o.closing_execution_id = e.id
     WHERE date_trunc('milliseconds', coalesce(e.started_at, e.created_at)) > a.last_seen
       AND EXISTS (SELECT 1 FROM task_targets tt
                    WHERE tt.task_id = t.id AND tt.kind IN ('ip', 'cidr')
                      AND tt.value::inet >>= a.ip::inet)
     ORDER BY a.i, o.id";

/// A close run as a recompute replays it.
pub struct CloseRun {
    pub execution_id: Uuid,
    /// The close's time, the execution's start as documents store times.
    pub at: String,
    /// `None` when the scope cannot be read (the table's CHECK makes that impossible; such
    /// a run closes nothing, as the close run itself does).
    pub scope: Option<PortScope>,
}

/// For each wanted (owner, address, last seen), the close runs that may close it, in the
/// order a rebuild replays them.
pub fn close_runs(
    conn: &mut impl Queries,
    wanted: &[(Uuid, &str, DateTime<Utc>)],
) -> Result<Vec<Vec<CloseRun>>, postgres::Error> {
    let mut runs: Vec<Vec<CloseRun>> = wanted.iter().map(|_| Vec::new()).collect();
    if wanted.is_empty() {
        return Ok(runs);
    }
    let owners: Vec<Uuid> = wanted.iter().map(|w| w.0).collect();
    let ips: Vec<&str> = wanted.iter().map(|w| w.1).collect();
    let seen: Vec<DateTime<Utc>> = wanted.iter().map(|w| w.2).collect();
    for r in conn.query(CLOSE_CANDIDATES, &[&owners, &ips, &seen])? {
        let i: i64 = r.get(0);
        let Some(slot) = usize::try_from(i - 1).ok().and_then(|i| runs.get_mut(i)) else {
            continue;
        };
        slot.push(CloseRun {
            execution_id: r.get(1),
            at: es_time(&r.get::<_, DateTime<Utc>>(2)),
            scope: r
                .get::<_, Option<String>>(3)
                .and_then(|s| PortScope::parse(&s).ok()),
        });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_is_read_as_the_merge_reads_it() {
        let hit = json!({"_id": "x", "_source": {"ip": "10.0.0.1", "port": 22, "transport": "tcp",
            "state": "open", "observed_at": "2026-12-01T00:00:00.000Z",
            "execution_id": Uuid::from_u128(3).to_string()}});
        let o = Observation::of(&hit).unwrap();
        assert_eq!(o.key, ("10.0.0.1".into(), "tcp".into(), 22));
        assert_eq!(
            (o.state.as_str(), o.execution_id),
            ("", Some(Uuid::from_u128(3)))
        );
        let closed =
            json!({"_id": "y", "_source": {"ip": "10.0.0.1", "port": 70000, "state": "closed"}});
        let o = Observation::of(&closed).unwrap();
        assert_eq!(
            (o.key.2, o.state.as_str(), o.observed_at.as_str()),
            (0, "closed", "")
        );
        assert!(Observation::of(&json!({"_source": {}})).is_none());
    }
}
