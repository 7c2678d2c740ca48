//! One page of a task deletion: the asset documents of the page's endpoints rebuilt from
//! the remaining sources, as a rebuild would build them — each endpoint's global document
//! and the task owner's document deleted, then, in the same ordered write, every remaining
//! publishable observation of it merged (all owners' into the global document, the owner's
//! not erased by a tombstone into the owner's), the owner's current tags, and the first
//! close run (in outbox order) that a rebuild would apply to each owner's copy.
//!
//! Sources are read before the write, so a publication of another execution that lands
//! between that read and the delete would be lost; therefore the sources are read again
//! after the write, and the page is written again until two reads agree. Whatever lands
//! before a delete was readable before it landed (publication reads what it merges), so it
//! is in the read that follows; whatever lands after the delete merges itself.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::sources::{self, Key, Observation};
use super::ForgetRun;
use crate::app::App;
use crate::db::Stage;
use crate::es::alias::AssetIndices;
use crate::es::bulk::{BulkOp, ScriptedUpserts};
use crate::es::{index, painless, EsError};
use crate::ports::Transport;
use crate::projection::page::{self, Doc, Source};
use crate::projection::ProjectionError;
use crate::tags::{self, Tags};
use crate::tombstones;

/// Writes of one page before it counts as moving too fast: the row backs off and retries.
const ROUNDS: usize = 5;

/// An owner's copy of an endpoint as its observations leave it before any close run: what
/// decides whether a close run applies (close.rs: it exists, it is open, it was last seen
/// before the close, and the closing execution did not observe it).
#[derive(Default)]
struct Copy {
    /// Newest time and state under the merge's order; open when that state is `""`.
    newest: (String, String),
    last_seen: Option<String>,
    /// Executions that observed the endpoint, erased observations included (a close run's
    /// own observations are looked up by id, whatever a tombstone says).
    seen_by: BTreeSet<Uuid>,
    exists: bool,
}

impl Copy {
    fn add(&mut self, o: &Observation, erased: bool) {
        self.seen_by.extend(o.execution_id);
        if erased {
            return;
        }
        self.exists = true;
        self.newest = self
            .newest
            .clone()
            .max((o.observed_at.clone(), o.state.clone()));
        if o.state.is_empty() && self.last_seen.as_ref().map_or(true, |l| *l < o.observed_at) {
            self.last_seen = Some(o.observed_at.clone());
        }
    }

    /// When a close run could still apply: an open copy, with its last sighting.
    fn closable(&self) -> Option<&str> {
        (self.exists && self.newest.1.is_empty())
            .then_some(self.last_seen.as_deref())
            .flatten()
    }
}

/// The endpoints of a page, once each, in page order.
pub fn keys(docs: &[Doc<'_>]) -> Vec<Key> {
    let mut seen = BTreeSet::new();
    page::endpoints(docs)
        .into_iter()
        .map(|(ip, transport, port)| (ip.into_owned(), transport.into_owned(), port))
        .filter(|k| seen.insert(k.clone()))
        .collect()
}

impl ForgetRun {
    /// Rebuilds the documents of `keys` in `targets`, writing with `send` (in order, waited
    /// for); returns the number of endpoints.
    pub fn recompute(
        &self,
        app: &App,
        targets: &AssetIndices,
        keys: &[Key],
        send: impl Fn(Vec<BulkOp>) -> Result<(), ProjectionError>,
    ) -> Result<usize, ProjectionError> {
        let mut ops = self.plan(app, targets, keys)?;
        for _ in 0..ROUNDS {
            send(ops.clone())?;
            let again = self.plan(app, targets, keys)?;
            let same = again.len() == ops.len()
                && again.iter().zip(&ops).all(|(a, b)| a.ndjson == b.ndjson);
            if same {
                return Ok(keys.len());
            }
            ops = again;
        }
        Err(ProjectionError::Unsettled(format!(
            "the sources of {} endpoints changed during each of {ROUNDS} writes",
            keys.len()
        )))
    }

    /// The writes that rebuild the documents of `keys` from the sources as they are now.
    fn plan(
        &self,
        app: &App,
        targets: &AssetIndices,
        keys: &[Key],
    ) -> Result<Vec<BulkOp>, ProjectionError> {
        let prefix = &app.config.elasticsearch.index_prefix;
        let found = sources::observations(&app.es, prefix, self.task_id, keys)?;
        let mut conn = app.db.checkout(Stage::Context)?;
        let executions: Vec<Uuid> = found
            .iter()
            .filter_map(|o| o.execution_id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let owners = sources::publishable(&mut conn, &executions)?;
        let mut groups: BTreeMap<Uuid, Vec<&Observation>> = BTreeMap::new();
        for o in &found {
            if let Some(owner) = o.execution_id.and_then(|e| owners.get(&e)) {
                groups.entry(*owner).or_default().push(o);
            }
        }

        let mut ops = Vec::new();
        for (ip, transport, port) in keys {
            let global = index::global_asset_id(ip, transport, *port);
            ops.push(BulkOp::delete(
                &targets.user,
                &index::user_asset_id(self.owner_id, &global),
            ));
            ops.push(BulkOp::delete(&targets.global, &global));
        }
        let mut copies: BTreeMap<(Uuid, Key), Copy> = BTreeMap::new();
        for (owner, observations) in &groups {
            let docs = observations
                .iter()
                .map(|o| {
                    Ok(Doc {
                        id: Cow::Borrowed(o.id.as_str()),
                        source: Source::parse(&o.text)?,
                    })
                })
                .collect::<Result<Vec<Doc>, serde_json::Error>>()
                .map_err(|e| EsError::BadResponse(format!("unreadable observation: {e}")))?;
            let erased = tombstones::covering(&mut conn, *owner, &page::endpoints(&docs))?;
            let mine = *owner == self.owner_id;
            let tags = match mine {
                true => tags::lookup(&mut conn, *owner, &page::addresses(&docs), &[])?,
                false => Tags::default(),
            };
            let mut merges = page::execution_operations(targets, *owner, &docs, &tags, &erased);
            // Only the task's owner's copy changes; another owner's keeps what it has.
            if !mine {
                merges.retain(|op| *op.index == *targets.global);
            }
            ops.extend(merges);
            for (i, o) in observations.iter().enumerate() {
                let gone =
                    tombstones::erased(&o.observed_at, erased.get(i).and_then(Option::as_deref));
                copies
                    .entry((*owner, o.key.clone()))
                    .or_default()
                    .add(o, gone);
            }
        }
        ops.extend(self.closes(&mut conn, targets, &copies)?);
        Ok(ops)
    }

    /// The `closed` observations a rebuild's close runs add to each copy (and to the global
    /// document), the first applicable run per copy, as a closed copy takes no other.
    fn closes(
        &self,
        conn: &mut impl crate::db::Queries,
        targets: &AssetIndices,
        copies: &BTreeMap<(Uuid, Key), Copy>,
    ) -> Result<Vec<BulkOp>, ProjectionError> {
        // (copy's owner and endpoint, copy, its last sighting as stored and as a time)
        let closable: Vec<_> = copies
            .iter()
            .filter_map(|(k, c)| {
                // An address the database cannot read names no target.
                k.1 .0.parse::<std::net::IpAddr>().ok()?;
                let last = c.closable()?;
                let at = DateTime::parse_from_rfc3339(last).ok()?.with_timezone(&Utc);
                Some((k, c, last, at))
            })
            .collect();
        let wanted: Vec<_> = closable
            .iter()
            .map(|((owner, (ip, _, _)), _, _, at)| (*owner, ip.as_str(), *at))
            .collect();
        let runs = sources::close_runs(conn, &wanted)?;
        let global = ScriptedUpserts::new(&targets.global, painless::ASSET_MERGE_ID);
        let user = ScriptedUpserts::new(&targets.user, painless::ASSET_MERGE_ID);
        let mut ops = Vec::new();
        for ((key, copy, last, _), runs) in closable.iter().zip(runs) {
            let (owner, (ip, transport, port)) = key;
            let Some(run) = runs.into_iter().find(|r| {
                let scoped = Transport::from_name(transport)
                    .zip(r.scope.as_ref())
                    .is_some_and(|(t, s)| s.covers(t, *port));
                scoped && *last < r.at.as_str() && !copy.seen_by.contains(&r.execution_id)
            }) else {
                continue;
            };
            // As close.rs writes it: the state at the run's time, by its execution.
            let mut obs = json!({
                "ip": ip, "port": port, "transport": transport, "state": "closed",
                "observed_at": run.at, "execution_id": run.execution_id.to_string(),
            });
            let id = index::global_asset_id(ip, transport, *port);
            let params = |obs: &serde_json::Value| serde_json::to_vec(&json!({ "obs": obs }));
            let encoded = params(&obs).map_err(|e| EsError::Refused(e.to_string()))?;
            if *owner == self.owner_id {
                obs["owner_id"] = json!(owner.to_string());
                let mine = params(&obs).map_err(|e| EsError::Refused(e.to_string()))?;
                ops.push(user.op(index::user_asset_id(*owner, &id), &mine));
            }
            ops.push(global.op(id, &encoded));
        }
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(at: &str, state: &str, execution: u128) -> Observation {
        Observation {
            id: String::new(),
            text: String::new(),
            key: ("10.0.0.1".into(), "tcp".into(), 22),
            execution_id: Some(Uuid::from_u128(execution)),
            observed_at: at.into(),
            state: state.into(),
        }
    }

    #[test]
    fn a_copy_is_closable_when_its_newest_state_is_open() {
        let mut c = Copy::default();
        assert_eq!(c.closable(), None, "no copy");
        c.add(&obs("2026-01-02T00:00:00.000Z", "", 1), false);
        c.add(&obs("2026-01-01T00:00:00.000Z", "closed", 2), false);
        assert_eq!(c.closable(), Some("2026-01-02T00:00:00.000Z"));
        // Closed at the same time as the last sighting: closed wins the tie.
        c.add(&obs("2026-01-02T00:00:00.000Z", "closed", 3), false);
        assert_eq!(c.closable(), None);
        // An erased observation decides nothing but still counts as seen.
        let mut c = Copy::default();
        c.add(&obs("2026-01-03T00:00:00.000Z", "", 4), true);
        assert_eq!(c.closable(), None);
        assert!(c.seen_by.contains(&Uuid::from_u128(4)));
    }
}
