//! Retention: what ages out — monthly facts indices, owners' stale assets, finished
//! executions' upload records, old tombstones — removed by a run that one instance at a time performs
//! (a session-level advisory lock on a connection of its own, so no pooled connection is
//! held across its Elasticsearch I/O) and records in `retention_runs`, whose latest rows
//! tell every instance's daily run when the next one is due.

pub mod assets;
mod daily;
mod facts;
pub mod records;
mod tombstones;

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::app::App;
use crate::db::DbError;
use crate::es::{index, EsError};
use crate::telemetry::events::ms;
use crate::telemetry::metrics::{self, RetentionLabels};
use crate::telemetry::Line;

pub use daily::start as start_daily;
pub use records::Pruned;
pub use tombstones::Retired;

/// Advisory-lock key of retention runs ("retentio" read as bytes; the migration's is
/// "scanstor", so the two never meet).
const LOCK_KEY: i64 = 0x7265_7465_6e74_696f;

const RUN_STARTED: &str = "INSERT INTO retention_runs DEFAULT VALUES RETURNING id, started_at";
const RUN_FINISHED: &str = "
    UPDATE retention_runs SET finished_at = now(), outcome = $2, removed = $3 WHERE id = $1";

/// What a run removed or queued for removal — or, in a dry run, would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Facts indices dropped, by name.
    pub facts_indices: Vec<String>,
    /// Owners' asset documents last seen before the age limit: the `expire` rows queued
    /// delete them (each with a tombstone) as publishers take the rows up.
    pub stale_assets: u64,
    /// `expire` rows queued or moved on (one per owner; none in a dry run).
    pub expire_runs: u64,
    pub pruned: Pruned,
    /// Tombstones retired, and the execution results marked for them (a dry run counts
    /// the tombstones only).
    pub retired: Retired,
}

impl Report {
    /// `key=value` lines, as the command line prints them.
    pub fn lines(&self) -> Vec<String> {
        vec![
            format!("facts_indices={}", self.facts_indices.join(",")),
            format!("stale_assets={}", self.stale_assets),
            format!("expire_runs={}", self.expire_runs),
            format!("executions_pruned={}", self.pruned.executions),
            format!("receipts={}", self.pruned.receipts),
            format!("upload_streams={}", self.pruned.upload_streams),
            format!("outbox_rows={}", self.pruned.outbox_rows),
            format!("tombstones_retired={}", self.retired.tombstones),
            format!("results_marked={}", self.retired.marked),
        ]
    }

    /// The counts by kind, as `retention_runs.removed` and the metrics name them.
    fn counts(&self) -> [(&'static str, u64); 9] {
        [
            ("facts_indices", self.facts_indices.len() as u64),
            ("stale_assets", self.stale_assets),
            ("expire_runs", self.expire_runs),
            ("executions", self.pruned.executions),
            ("receipts", self.pruned.receipts),
            ("upload_streams", self.pruned.upload_streams),
            ("outbox_rows", self.pruned.outbox_rows),
            ("tombstones_retired", self.retired.tombstones),
            ("results_marked", self.retired.marked),
        ]
    }

    fn json(&self) -> Value {
        let mut v: serde_json::Map<String, Value> = self
            .counts()
            .iter()
            .map(|(k, n)| (k.to_string(), json!(n)))
            .collect();
        v.insert("facts_index_names".into(), json!(self.facts_indices));
        Value::Object(v)
    }
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    Ran(Report),
    /// Another instance holds the run's lock: nothing was done.
    Busy,
}

#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Es(#[from] EsError),
}

impl From<postgres::Error> for RetentionError {
    fn from(e: postgres::Error) -> Self {
        RetentionError::Db(DbError::from(e))
    }
}

/// Whether the configuration ages anything out.
pub fn configured(app: &App) -> bool {
    let r = &app.config.retention;
    r.facts_months.is_some()
        || r.asset_age.is_some()
        || r.execution_age.is_some()
        || r.tombstone_age.is_some()
}

/// Runs retention once, unless another instance is running it (`Busy`); `stop` ends it
/// between batches (what was removed until then is reported and recorded). Every failure
/// is logged (`RetentionRunFailed`) before it is returned.
pub fn run(app: &App, stop: &AtomicBool) -> Result<Outcome, RetentionError> {
    let m = metrics::get();
    let label = |what: &str| RetentionLabels { what: what.into() };
    let (mut lock, id, now) = match begin(app) {
        Ok(Some(begun)) => begun,
        Ok(None) => {
            m.retention_runs.get_or_create(&label("busy")).inc();
            Line::new("RetentionRunBusy").info();
            return Ok(Outcome::Busy);
        }
        Err(e) => {
            m.retention_runs.get_or_create(&label("failed")).inc();
            Line::new("RetentionRunFailed").field("error", &e).warn();
            return Err(e);
        }
    };
    let started = Instant::now();
    Line::new("RetentionRunStarted").field("run_id", id).info();
    let mut report = Report::default();
    let mut result = steps(app, now, stop, &mut report);
    let outcome = if result.is_ok() {
        "completed"
    } else {
        "failed"
    };
    // Recorded on the locked session, before it closes and releases the lock.
    if let Err(e) = lock.execute(RUN_FINISHED, &[&id, &outcome, &report.json()]) {
        result = result.and(Err(e.into()));
    }
    for (what, n) in report.counts() {
        m.retention_removed.get_or_create(&label(what)).inc_by(n);
    }
    let outcome = if result.is_ok() {
        "completed"
    } else {
        "failed"
    };
    m.retention_runs.get_or_create(&label(outcome)).inc();
    let mut line = Line::new(match result {
        Ok(()) => "RetentionRunCompleted",
        Err(_) => "RetentionRunFailed",
    })
    .field("run_id", id)
    .field("duration_ms", ms(started.elapsed()));
    for (what, n) in report.counts() {
        line = line.field(what, n);
    }
    match result {
        Ok(()) => {
            m.retention_last_completed.set(Utc::now().timestamp());
            line.info();
            Ok(Outcome::Ran(report))
        }
        Err(e) => {
            line.field("error", &e).warn();
            Err(e)
        }
    }
}

/// The run's lock on a connection of its own and its `retention_runs` row (id, database
/// time), or `None` when another session holds the lock.
fn begin(app: &App) -> Result<Option<(postgres::Client, i64, DateTime<Utc>)>, RetentionError> {
    let mut lock = app.db.dedicated()?;
    let locked: bool = lock
        .query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK_KEY])?
        .get(0);
    if !locked {
        return Ok(None);
    }
    let row = lock.query_one(RUN_STARTED, &[])?;
    Ok(Some((lock, row.get(0), row.get(1))))
}

/// What a run would remove now; removes nothing and takes no lock.
pub fn plan(app: &App) -> Result<Report, RetentionError> {
    let cfg = &app.config.retention;
    let now = crate::rebuild::source::now(&app.db)?;
    let prefix = &app.config.elasticsearch.index_prefix;
    let mut report = Report::default();
    if let Some(months) = cfg.facts_months {
        report.facts_indices = facts::expired(&app.es, prefix, months, now)?;
    }
    if let Some(age) = cfg.asset_age {
        app.ensure_indices()?;
        let user = index::assets_user_alias(prefix);
        report.stale_assets = assets::count(&app.es, &user, now - age)?;
    }
    if let Some(age) = cfg.execution_age {
        report.pruned = records::plan(&app.db, now - age)?;
    }
    if let Some(age) = cfg.tombstone_age {
        report.retired.tombstones = tombstones::count(&app.db, now - age)?;
    }
    Ok(report)
}

/// The run's steps, each only if configured, counting into `report` as they go.
fn steps(
    app: &App,
    now: DateTime<Utc>,
    stop: &AtomicBool,
    report: &mut Report,
) -> Result<(), RetentionError> {
    let cfg = &app.config.retention;
    let prefix = &app.config.elasticsearch.index_prefix;
    if let Some(months) = cfg.facts_months {
        for name in facts::expired(&app.es, prefix, months, now)? {
            facts::drop(&app.es, &name)?;
            report.facts_indices.push(name);
        }
    }
    if let Some(age) = cfg.asset_age {
        app.ensure_indices()?;
        let user = index::assets_user_alias(prefix);
        report.stale_assets = assets::count(&app.es, &user, now - age)?;
        report.expire_runs = assets::enqueue(&app.db, now - age)?;
        app.projection_wake.ring();
    }
    if let Some(age) = cfg.execution_age {
        records::prune(&app.db, now - age, cfg.batch_size, stop, &mut report.pruned)?;
    }
    if let Some(age) = cfg.tombstone_age {
        tombstones::retire(app, now - age, cfg.batch_size, stop, &mut report.retired)?;
    }
    Ok(())
}
