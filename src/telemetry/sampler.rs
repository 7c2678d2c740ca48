//! The periodic sampler: the outbox backlog (size, oldest age) and the slowest statements
//! from `pg_stat_statements`, into log lines and metrics. Slow-SQL monitoring reports
//! "unavailable" only for the three causes that mean it cannot work here — the extension
//! is missing, the role lacks permission, the library is not preloaded — each named; any
//! other failure (a pool timeout, a broken connection) is a sampling failure, reported
//! separately.

use std::time::Duration;

use postgres::error::SqlState;

use super::metrics::{self, QueryLabels};
use super::Line;
use crate::db::{Db, DbError, Queries, Stage};
use crate::periodic::{Periodic, Schedule};

// Bounded by the backlog itself: the partial claim index holds only unprocessed rows and
// carries created_at, so this is an index-only scan; it visits a row's heap page only where
// the visibility map does not mark it all-visible (claims and releases clear the mark).
pub const BACKLOG: &str = "
    SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
      FROM scan_projection_outbox WHERE processed_at IS NULL";

// The slowest statements of this database by mean time. Query text is normalised by the
// extension (constants replaced by $n), so no value from a request reaches the log.
const SLOW_STATEMENTS: &str = "
    SELECT queryid::text, calls, mean_exec_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 160)
      FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
     ORDER BY mean_exec_time DESC
     LIMIT 5";

// Whether the view exists and the library is loaded, asked first: querying a missing view
// or an unloaded library makes PostgreSQL log an ERROR with the statement every sample.
const SLOW_STATEMENTS_READY: &str = "
    SELECT to_regclass('pg_stat_statements') IS NOT NULL,
           'pg_stat_statements' = ANY (string_to_array(
               replace(current_setting('shared_preload_libraries'), ' ', ''), ','))";

/// Why slow-SQL monitoring cannot work here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    ExtensionMissing,
    PermissionDenied,
    NotLoaded,
}

impl Unavailable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unavailable::ExtensionMissing => "extension_missing",
            Unavailable::PermissionDenied => "permission_denied",
            Unavailable::NotLoaded => "not_loaded",
        }
    }
}

#[derive(Debug)]
pub enum SlowSql {
    /// (queryid, calls, mean ms, rows, normalised text) of the slowest statements.
    Sampled(Vec<(String, i64, f64, i64, String)>),
    Unavailable(Unavailable),
    /// Sampling failed for another reason; says nothing about availability.
    Failed(DbError),
}

pub struct Sample {
    pub backlog: Result<(i64, f64), DbError>,
    pub slow_sql: SlowSql,
}

/// The three "unavailable" causes, by SQLSTATE; everything else is a failure.
pub fn classify(e: &DbError) -> Option<Unavailable> {
    let code = e.sql_state()?;
    if *code == SqlState::UNDEFINED_TABLE {
        Some(Unavailable::ExtensionMissing)
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        Some(Unavailable::PermissionDenied)
    } else if *code == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE {
        Some(Unavailable::NotLoaded)
    } else {
        None
    }
}

/// The backlog right now: (unprocessed rows, age of the oldest in seconds).
pub fn backlog_now(db: &Db) -> Result<(i64, f64), DbError> {
    let mut conn = db.checkout(Stage::Sample)?;
    let row = conn.query_one(BACKLOG, &[])?;
    Ok((row.get(0), row.get(1)))
}

fn slow_sql(db: &Db) -> SlowSql {
    let rows = db.checkout(Stage::Sample).and_then(|mut conn| {
        let ready = conn.query_one(SLOW_STATEMENTS_READY, &[])?;
        match (ready.get::<_, bool>(0), ready.get::<_, bool>(1)) {
            (false, _) => Ok(Err(Unavailable::ExtensionMissing)),
            (true, false) => Ok(Err(Unavailable::NotLoaded)),
            (true, true) => Ok(Ok(conn.query(SLOW_STATEMENTS, &[])?)),
        }
    });
    match rows {
        Ok(Ok(rows)) => SlowSql::Sampled(
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
                .collect(),
        ),
        Ok(Err(why)) => SlowSql::Unavailable(why),
        Err(e) => match classify(&e) {
            Some(why) => SlowSql::Unavailable(why),
            None => SlowSql::Failed(e),
        },
    }
}

/// Samples once, logs and records metrics; returns what it saw (tests).
pub fn sample_once(db: &Db) -> Sample {
    let m = metrics::get();
    let sample = Sample {
        backlog: backlog_now(db),
        slow_sql: slow_sql(db),
    };
    match &sample.backlog {
        Ok((rows, age)) => {
            m.outbox_backlog.set(*rows);
            m.outbox_oldest_age_seconds.set(*age);
            Line::new("OutboxBacklogSampled")
                .field("rows", rows)
                .field("oldest_age_s", format!("{age:.1}"))
                .info();
        }
        Err(e) => {
            m.sampling_failures.inc();
            Line::new("SamplingFailed")
                .field("what", "outbox_backlog")
                .field("error", e)
                .warn();
        }
    }
    match &sample.slow_sql {
        SlowSql::Sampled(statements) => {
            m.slow_sql_available.set(1);
            for (queryid, calls, mean, rows, text) in statements {
                let labels = QueryLabels {
                    queryid: queryid.clone(),
                };
                m.sql_mean_ms.get_or_create(&labels).set(*mean);
                m.sql_calls.get_or_create(&labels).set(*calls);
                Line::new("SlowSqlStatement")
                    .field("queryid", queryid)
                    .field("calls", calls)
                    .field("mean_ms", format!("{mean:.3}"))
                    .field("rows", rows)
                    .field("query", text)
                    .info();
            }
        }
        SlowSql::Unavailable(why) => {
            m.slow_sql_available.set(0);
            Line::new("SlowSqlUnavailable")
                .field("reason", why.as_str())
                .warn();
        }
        SlowSql::Failed(e) => {
            m.sampling_failures.inc();
            Line::new("SamplingFailed")
                .field("what", "slow_sql")
                .field("error", e)
                .warn();
        }
    }
    sample
}

/// The sampling thread: the backlog and the slow statements every `every`, the first at once.
pub fn start_sampler(db: Db, every: Duration) -> std::io::Result<Periodic> {
    let schedule = Schedule {
        name: "sampler",
        every,
        at_start: true,
        panicked: "SamplingPanicked",
    };
    Periodic::start(schedule, move |_| {
        sample_once(&db);
    })
}
