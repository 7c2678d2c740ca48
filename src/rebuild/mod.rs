//! Rebuilding the current asset projection (seed 003, "重建查询副本"): a new versioned
//! pair of physical indices is filled from the source of truth while live publication goes
//! on, verified document by document against the version the aliases point at, and only
//! then made current by moving both aliases in one atomic `_aliases` request.
//!
//! ```text
//!   aliases ──▶ vN (live publication writes here: it resolves the aliases every tick)
//!   rebuild ──▶ vN+1: every succeeded execution with an outbox row, in outbox order,
//!               from the execution projection page by page (same merge, same ids)
//!   rounds:     publish what succeeded meanwhile, re-apply tag changes made meanwhile,
//!               wait until live publication has nothing pending, compare vN and vN+1
//!               document by document (a difference while new work raced: another round;
//!               a difference on a quiet system: PROJECTION_MISMATCH, nothing switched)
//!   switch:     one POST /_aliases (remove vN + add vN+1, both views), read back
//!   after:      publish into vN+1 whatever a tick that resolved vN before the switch
//!               may have written to vN only
//! ```
//!
//! Live publication never dual-writes: it writes only the version the aliases point at.
//! So after a switch the old version falls behind; `switch-back` compares it with the
//! current one and refuses (`PROJECTION_MISMATCH`) until `catch-up` has re-published into
//! it what it lacks. Old versions are deleted only by `drop`, never while aliased.
//! Everything written is an idempotent, order-independent merge, which is why
//! re-publishing an execution twice, or in another order than live publication did, gives
//! the same documents.

pub mod progress;
pub mod publish;
pub mod source;
pub mod verify;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::app::App;
use crate::db::DbError;
use crate::es::alias::{self, AssetIndices, View};
use crate::es::{index, setup, EsError};
use crate::telemetry::Line;

use progress::Progress;
use verify::Diff;

/// The error code a refused switch carries (seed 003).
pub const PROJECTION_MISMATCH: &str = "PROJECTION_MISMATCH";

#[derive(Debug, thiserror::Error)]
pub enum RebuildError {
    #[error(transparent)]
    Es(#[from] EsError),
    #[error(transparent)]
    Db(#[from] DbError),
    /// `other` differs from `reference`; nothing was switched.
    #[error("{PROJECTION_MISMATCH}: v{other} does not match v{reference} (where the aliases point): {}", .diff.summary())]
    Mismatch {
        reference: u32,
        other: u32,
        diff: Diff,
    },
    /// Live publication did not finish its pending rows in time, so no comparison can be fair.
    #[error("live publication still has {pending} pending outbox rows (oldest id {oldest}) after {waited_s} s; a comparison needs them published (are the publishers running? see scanstore-admin backlog)")]
    NotSettled {
        pending: i64,
        oldest: i64,
        waited_s: u64,
    },
    /// New work kept arriving between catching up and comparing.
    #[error("v{target} did not converge with v{reference} within {rounds} rounds while new work kept arriving; run it again at a quieter time")]
    NotConverged {
        reference: u32,
        target: u32,
        rounds: usize,
    },
    #[error("refused: {0}")]
    Refused(String),
}

impl From<postgres::Error> for RebuildError {
    fn from(e: postgres::Error) -> Self {
        RebuildError::Db(DbError::from(e))
    }
}

impl RebuildError {
    pub fn is_mismatch(&self) -> bool {
        matches!(self, RebuildError::Mismatch { .. })
    }
}

/// Bounds of the catch-up rounds.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Longest wait for live publication to finish its pending rows before a comparison.
    pub settle_timeout: Duration,
    /// Catch-up/compare rounds before giving up while new work keeps arriving.
    pub rounds: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            settle_timeout: Duration::from_secs(600),
            rounds: 10,
        }
    }
}

/// What has been published into the target version by this run.
#[derive(Debug, Default)]
struct Ledger {
    executions: HashSet<Uuid>,
    tags: HashSet<i64>,
}

/// Publishes into `target` every publishable execution and tag change of the window
/// (`None`: all history) that this run has not published yet: executions first, in
/// outbox order, then tag changes (they touch existing documents only).
fn catch_up_round(
    app: &App,
    target: &AssetIndices,
    ledger: &mut Ledger,
    window: Option<DateTime<Utc>>,
    step: &'static str,
) -> Result<usize, RebuildError> {
    let rows: Vec<_> = source::executions(&app.db, window)?
        .into_iter()
        .filter(|r| !ledger.executions.contains(&r.execution_id))
        .collect();
    let tags: Vec<_> = source::tag_changes(&app.db, window)?
        .into_iter()
        .filter(|r| !ledger.tags.contains(&r.outbox_id))
        .collect();
    if rows.is_empty() && tags.is_empty() {
        return Ok(0);
    }
    let mut progress = Progress::new(step, (rows.len() + tags.len()) as u64);
    for row in &rows {
        let n = publish::execution(app, target, row)?;
        ledger.executions.insert(row.execution_id);
        progress.item(n);
    }
    for row in &tags {
        let n = publish::tag_change(app, target, row)?;
        ledger.tags.insert(row.outbox_id);
        progress.item(n);
    }
    progress.finish();
    Ok(rows.len() + tags.len())
}

/// Waits until live publication owes nothing (every succeeded execution and tag change
/// processed), polling the outbox.
fn wait_settled(app: &App, timeout: Duration) -> Result<(), RebuildError> {
    let started = Instant::now();
    loop {
        let (pending, oldest) = source::unsettled(&app.db)?;
        if pending == 0 {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(RebuildError::NotSettled {
                pending,
                oldest: oldest.unwrap_or(0),
                waited_s: started.elapsed().as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Rounds of catch-up and comparison until `target` equals `live` document by document.
/// Returns the database time the successful comparison started at and the documents
/// it compared.
fn converge(
    app: &App,
    live: &AssetIndices,
    target: &AssetIndices,
    ledger: &mut Ledger,
    window: Option<DateTime<Utc>>,
    opts: Options,
) -> Result<(DateTime<Utc>, u64), RebuildError> {
    for round in 1..=opts.rounds {
        catch_up_round(app, target, ledger, window, "catch-up")?;
        wait_settled(app, opts.settle_timeout)?;
        // Whatever succeeded while we waited is published before comparing.
        if catch_up_round(app, target, ledger, window, "catch-up")? > 0 {
            continue;
        }
        let at = source::now(&app.db)?;
        publish::refresh(app, live)?;
        publish::refresh(app, target)?;
        let diff = verify::compare(&app.es, live, target)?;
        Line::new("RebuildCompared")
            .field("round", round)
            .field("reference", format!("v{}", live.version))
            .field("target", format!("v{}", target.version))
            .field("compared", diff.compared)
            .field("missing", diff.missing)
            .field("extra", diff.extra)
            .field("differing", diff.differing)
            .info();
        if diff.is_empty() {
            return Ok((at, diff.compared));
        }
        if !source::changed_since(&app.db, at)? {
            return Err(RebuildError::Mismatch {
                reference: live.version,
                other: target.version,
                diff,
            });
        }
    }
    Err(RebuildError::NotConverged {
        reference: live.version,
        target: target.version,
        rounds: opts.rounds,
    })
}

/// Moves both aliases from `from` to `to` (one request, read back), then publishes into
/// `to` what a tick that resolved `from` before the switch may have written there only.
fn switch(
    app: &App,
    from: &AssetIndices,
    to: &AssetIndices,
    ledger: &mut Ledger,
    window: Option<DateTime<Utc>>,
) -> Result<(), RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    alias::switch(&app.es, prefix, from, to)?;
    Line::new("AssetAliasesSwitched")
        .field("from", format!("v{}", from.version))
        .field("to", format!("v{}", to.version))
        .info();
    catch_up_round(app, to, ledger, window, "after-switch")?;
    publish::refresh(app, to)?;
    Ok(())
}

/// The outcome of a command, printed by the CLI as `key=value` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub current: u32,
    pub previous: Option<u32>,
    pub executions: usize,
    pub documents_compared: u64,
}

fn exists(app: &App, version: u32) -> Result<bool, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let existing = alias::existing(&app.es, prefix)?;
    Ok(existing.get(&version).is_some_and(|v| v.len() == 2))
}

/// `scanstore rebuild-assets`: builds the next version, verifies it, switches to it.
pub fn rebuild(app: &App, opts: Options) -> Result<Outcome, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    app.ensure_indices()?;
    let live = alias::current(&app.es, prefix)?;
    let next = alias::existing(&app.es, prefix)?
        .keys()
        .copied()
        .chain([live.version])
        .max()
        .unwrap_or(setup::ASSETS_VERSION)
        + 1;
    let target = AssetIndices::version(prefix, next);
    for view in View::BOTH {
        setup::create_assets_index(&app.es, target.of(view))?;
    }
    Line::new("RebuildStarted")
        .field("from", format!("v{}", live.version))
        .field("to", format!("v{next}"))
        .info();
    // Tag changes committed before the first page are in the tags every page looks up.
    let mut ledger = Ledger::default();
    let window = Some(source::now(&app.db)?);
    ledger.tags = source::tag_changes(&app.db, None)?
        .into_iter()
        .map(|r| r.outbox_id)
        .collect();
    catch_up_round(app, &target, &mut ledger, None, "publish")?;
    let (_, compared) = converge(app, &live, &target, &mut ledger, window, opts)?;
    // Anything processed since the rebuild began and not yet published here, as well as
    // anything still in flight, is caught up after the switch.
    switch(app, &live, &target, &mut ledger, window)?;
    Ok(Outcome {
        current: next,
        previous: Some(live.version),
        executions: ledger.executions.len(),
        documents_compared: compared,
    })
}

/// `scanstore rebuild-assets switch-back --to N`: moves the aliases to an existing older
/// version only if it equals the current one document by document.
pub fn switch_back(app: &App, version: u32, opts: Options) -> Result<Outcome, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let live = alias::current(&app.es, prefix)?;
    if version == live.version {
        return Err(RebuildError::Refused(format!(
            "the aliases already point at v{version}"
        )));
    }
    if !exists(app, version)? {
        return Err(RebuildError::Refused(format!(
            "v{version} does not exist (both asset indices are needed)"
        )));
    }
    let target = AssetIndices::version(prefix, version);
    wait_settled(app, opts.settle_timeout)?;
    let at = source::now(&app.db)?;
    publish::refresh(app, &live)?;
    publish::refresh(app, &target)?;
    let diff = verify::compare(&app.es, &live, &target)?;
    if !diff.is_empty() {
        return Err(RebuildError::Mismatch {
            reference: live.version,
            other: version,
            diff,
        });
    }
    let compared = diff.compared;
    switch(app, &live, &target, &mut Ledger::default(), Some(at))?;
    Ok(Outcome {
        current: version,
        previous: Some(live.version),
        executions: 0,
        documents_compared: compared,
    })
}

/// `scanstore rebuild-assets catch-up --to N [--since T]`: re-publishes into an older
/// version what it lacks (every execution and tag change live publication processed at or
/// after `since`, or the whole history), until it equals the current one.
pub fn catch_up(
    app: &App,
    version: u32,
    since: Option<DateTime<Utc>>,
    opts: Options,
) -> Result<Outcome, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let live = alias::current(&app.es, prefix)?;
    if version == live.version {
        return Err(RebuildError::Refused(format!(
            "v{version} is where the aliases point; live publication keeps it current"
        )));
    }
    if !exists(app, version)? {
        return Err(RebuildError::Refused(format!(
            "v{version} does not exist (both asset indices are needed)"
        )));
    }
    let target = AssetIndices::version(prefix, version);
    let mut ledger = Ledger::default();
    let window = Some(source::now(&app.db)?);
    catch_up_round(app, &target, &mut ledger, since, "catch-up")?;
    let (_, compared) = converge(app, &live, &target, &mut ledger, window, opts)?;
    Ok(Outcome {
        current: live.version,
        previous: None,
        executions: ledger.executions.len(),
        documents_compared: compared,
    })
}

/// `scanstore rebuild-assets drop --index NAME`: deletes one physical asset index of this
/// prefix that no alias points at.
pub fn drop_index(app: &App, name: &str) -> Result<(), RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let ours = View::BOTH
        .iter()
        .any(|v| alias::version_of(&v.alias(prefix), name).is_some());
    if !ours {
        return Err(RebuildError::Refused(format!(
            "{name} is not a versioned asset index of prefix {prefix}"
        )));
    }
    let existing = alias::existing(&app.es, prefix)?;
    let Some((_, aliases)) = existing.values().flatten().find(|(n, _)| n == name) else {
        return Err(RebuildError::Refused(format!("{name} does not exist")));
    };
    if !aliases.is_empty() {
        return Err(RebuildError::Refused(format!(
            "{name} is behind alias {}; switch the aliases away first",
            aliases.join(", ")
        )));
    }
    app.es
        .request("DELETE", &format!("/{}", index::encode_path(name)), None)?
        .ok()?;
    Line::new("AssetIndexDropped").field("index", name).info();
    Ok(())
}

/// `scanstore rebuild-assets status`: where the aliases point and which versions exist.
pub fn status(app: &App) -> Result<Vec<String>, RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    let mut lines = Vec::new();
    match alias::current(&app.es, prefix) {
        Ok(c) => lines.push(format!("current=v{}", c.version)),
        Err(e) => lines.push(format!("current=unknown ({e})")),
    }
    for (version, indices) in alias::existing(&app.es, prefix)? {
        for (name, aliases) in indices {
            lines.push(format!(
                "version=v{version} index={name} aliases={}",
                if aliases.is_empty() {
                    "-".to_string()
                } else {
                    aliases.join(",")
                }
            ));
        }
    }
    Ok(lines)
}

/// Reads `v3` or `3` as a version number.
pub fn parse_version(text: &str) -> Result<u32, String> {
    text.strip_prefix('v')
        .unwrap_or(text)
        .parse()
        .map_err(|_| format!("{text:?} is not a version (v1, v2, …)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_with_or_without_v() {
        assert_eq!(parse_version("v2"), Ok(2));
        assert_eq!(parse_version("7"), Ok(7));
        assert!(parse_version("vx").is_err());
    }

    #[test]
    fn a_mismatch_names_the_code_and_the_first_ids() {
        let mut diff = Diff {
            missing: 1,
            ..Diff::default()
        };
        diff.first
            .push("user:abc-10.0.0.1-tcp-443 (missing in x)".into());
        let e = RebuildError::Mismatch {
            reference: 2,
            other: 1,
            diff,
        };
        let text = e.to_string();
        assert!(
            text.starts_with("PROJECTION_MISMATCH: v1 does not match v2"),
            "{text}"
        );
        assert!(text.contains("user:abc-10.0.0.1-tcp-443"), "{text}");
    }
}
