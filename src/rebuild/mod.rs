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

mod commands;
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
use crate::es::alias::{self, AssetIndices};
use crate::es::EsError;
use crate::telemetry::Line;

pub use commands::{catch_up, drop_index, parse_version, rebuild, status, switch_back, Outcome};
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
    /// Close runs, by the closing execution.
    closes: HashSet<Uuid>,
}

/// Publishes into `target` every publishable execution and tag change of the window
/// (`None`: all history) that this run has not published yet: executions first, in
/// outbox order, then close runs and tag changes (they touch existing documents only).
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
    let closes: Vec<_> = source::close_runs(&app.db, window)?
        .into_iter()
        .filter(|r| !ledger.closes.contains(&r.execution_id))
        .collect();
    let tags: Vec<_> = source::tag_changes(&app.db, window)?
        .into_iter()
        .filter(|r| !ledger.tags.contains(&r.outbox_id))
        .collect();
    let items = rows.len() + closes.len() + tags.len();
    if items == 0 {
        return Ok(0);
    }
    let mut progress = Progress::new(step, items as u64);
    for row in &rows {
        let n = publish::execution(app, target, row)?;
        ledger.executions.insert(row.execution_id);
        progress.item(n);
    }
    for row in &closes {
        let n = publish::close_run(app, target, row)?;
        ledger.closes.insert(row.execution_id);
        progress.item(n);
    }
    for row in &tags {
        let n = publish::tag_change(app, target, row)?;
        ledger.tags.insert(row.outbox_id);
        progress.item(n);
    }
    progress.finish();
    Ok(items)
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
/// Refused when a task or asset deletion was queued since the window began: `to` may
/// have been given the deleted observations before the deletion, which only `from` had
/// taken out (nothing replays a deletion into another version); a new run skips them.
fn switch(
    app: &App,
    from: &AssetIndices,
    to: &AssetIndices,
    ledger: &mut Ledger,
    window: Option<DateTime<Utc>>,
) -> Result<(), RebuildError> {
    let prefix = &app.config.elasticsearch.index_prefix;
    if let Some(row) = window
        .map(|at| source::deletion_since(&app.db, at))
        .transpose()?
        .flatten()
    {
        return Err(RebuildError::Refused(format!(
            "a deletion was queued while this ran (outbox row {row}): v{} may still hold what \
             it deleted; nothing was switched, run the command again",
            to.version
        )));
    }
    alias::switch(&app.es, prefix, from, to)?;
    Line::new("AssetAliasesSwitched")
        .field("from", format!("v{}", from.version))
        .field("to", format!("v{}", to.version))
        .info();
    catch_up_round(app, to, ledger, window, "after-switch")?;
    publish::refresh(app, to)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
