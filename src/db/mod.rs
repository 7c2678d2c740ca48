//! PostgreSQL access: the r2d2 pool, the checkout guard that makes every connection's wait
//! and hold visible per write stage, and the scoped short transactions (`in_tx`,
//! `in_spanned_tx`, `read_tx`) every statement runs in.
//!
//! Rule of the house: a connection is checked out only for one short transaction and is back
//! in the pool before any Elasticsearch I/O. The guard logs `ScanWriteConnectionAcquired`
//! on checkout and `ScanWriteConnectionReleased` on drop, so the rule is auditable from logs.

pub mod error;
pub mod migrate;
pub mod session;
pub mod tls;

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use r2d2_postgres::PostgresConnectionManager;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::DatabaseConfig;
use crate::telemetry::context;
use crate::telemetry::events::{ConnectionAcquired, ConnectionReleased, ConnectionTimedOut};
use crate::telemetry::span::UploadSpan;

pub use error::DbError;
use session::Manager;
pub use session::{Queries, Tx};
use tls::DbUrl;

/// What a connection is checked out for; logged with every acquire and release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Scanner authentication and execution lookup.
    Auth,
    /// Write path transaction A: identity, continuity, pending receipt.
    Reserve,
    /// Write path transaction B: confirm, final bookkeeping.
    Confirm,
    /// Scanner claiming its next queued execution.
    ClaimExecution,
    /// Scanner heartbeat, fail and listing of its executions.
    Lifecycle,
    /// The sweep of lapsed execution leases.
    LeaseSweep,
    /// Projection: claiming an outbox row.
    OutboxClaim,
    /// Projection: reading the claimed execution's context.
    Context,
    /// Projection: renewing a lease.
    Renew,
    /// Projection: saving a page's cursor, releasing or completing a claim.
    Checkpoint,
    /// Projection: recording an error and its backoff.
    OutboxError,
    /// Owner-side reads.
    Read,
    /// Readiness probe.
    Health,
    /// The periodic sampler (backlog, slow SQL) and `/metrics`.
    Sample,
    /// Schema migration at start-up.
    Migrate,
    /// `scanstore rebuild-assets`: reading what to re-publish and whether publication settled.
    Rebuild,
    /// Retention: what is due, and removing it in bounded batches.
    Retention,
    /// Projection: deleting a deleted task's rows in short steps.
    Purge,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Auth => "auth",
            Stage::Reserve => "reserve",
            Stage::Confirm => "confirm",
            Stage::ClaimExecution => "claim_execution",
            Stage::Lifecycle => "lifecycle",
            Stage::LeaseSweep => "lease_sweep",
            Stage::OutboxClaim => "claim",
            Stage::Context => "context",
            Stage::Renew => "renew",
            Stage::Checkpoint => "checkpoint",
            Stage::OutboxError => "outbox_error",
            Stage::Read => "read",
            Stage::Health => "health",
            Stage::Sample => "sample",
            Stage::Migrate => "migrate",
            Stage::Rebuild => "rebuild",
            Stage::Retention => "retention",
            Stage::Purge => "purge",
        }
    }
}

/// The connection pool. Cheap to clone (r2d2 pools are reference counted).
#[derive(Clone)]
pub struct Db {
    pool: r2d2::Pool<Manager>,
    timeout: Duration,
    /// How to open a connection outside the pool ([`Db::dedicated`]).
    direct: Arc<(postgres::Config, MakeRustlsConnect)>,
}

impl Db {
    /// Builds the pool without waiting for a connection: start-up reports an unreachable
    /// database through the migration step, which is the first to check one out. r2d2 opens
    /// `pool_size` connections in the background and keeps them (its default `min_idle`), so
    /// the first claims and requests after a start, or after a quiet spell, wait for a free
    /// connection rather than for a new backend.
    pub fn new(cfg: &DatabaseConfig) -> Result<Db, DbError> {
        let url = DbUrl::parse(&cfg.url, cfg.ca_file.as_deref()).map_err(DbError::Config)?;
        let tls = url.connector().map_err(DbError::Config)?;
        let direct = Arc::new((url.config.clone(), tls.clone()));
        let manager = Manager(PostgresConnectionManager::new(url.config, tls));
        let pool = r2d2::Pool::builder()
            .max_size(cfg.pool_size)
            .connection_timeout(cfg.pool_timeout)
            .build_unchecked(manager);
        Ok(Db {
            pool,
            timeout: cfg.pool_timeout,
            direct,
        })
    }

    /// A connection of its own, outside the pool, for a session-level advisory lock that a
    /// long run holds across its Elasticsearch I/O: a pooled one would be kept from
    /// requests and publishers all that time. Closed when dropped (which releases the lock).
    pub fn dedicated(&self) -> Result<postgres::Client, DbError> {
        let (config, tls) = &*self.direct;
        Ok(config.connect(tls.clone())?)
    }

    /// Checks a connection out for `stage`, waiting at most the pool timeout.
    pub fn checkout(&self, stage: Stage) -> Result<Conn, DbError> {
        let started = Instant::now();
        match self.pool.get_timeout(self.timeout) {
            Ok(inner) => {
                let wait = started.elapsed();
                ConnectionAcquired {
                    stage: stage.as_str(),
                    wait,
                }
                .emit();
                context::connection_checked_out(stage.as_str());
                Ok(Conn {
                    inner,
                    stage,
                    wait,
                    acquired: Instant::now(),
                    _this_thread: PhantomData,
                })
            }
            Err(e) => {
                let waited = started.elapsed();
                ConnectionTimedOut {
                    stage: stage.as_str(),
                    wait: waited,
                }
                .emit();
                // "timed out waiting for connection[: <the last connect error>]"
                let cause = e
                    .to_string()
                    .split_once(": ")
                    .map(|(_, cause)| cause.to_string());
                Err(DbError::PoolTimeout {
                    stage: stage.as_str(),
                    waited,
                    cause,
                })
            }
        }
    }

    /// Runs `f` in one short transaction on a freshly checked-out connection and returns
    /// the connection before returning: commit on `Ok`, rollback (by drop) on `Err`.
    pub fn in_tx<T, E>(
        &self,
        stage: Stage,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<DbError>,
    {
        self.scoped(stage, false, f, |tx| tx.commit())
    }

    /// As [`Db::in_tx`], with the commit timed as `commit_stage` of the write path's span:
    /// how the write path runs its two transactions.
    pub fn in_spanned_tx<T, E>(
        &self,
        stage: Stage,
        span: &UploadSpan,
        commit_stage: &'static str,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<DbError>,
    {
        self.scoped(stage, false, f, |tx| {
            span.stage(commit_stage, || tx.commit())
        })
    }

    /// Runs `f` in one short read-only transaction (reads see one snapshot and can write
    /// nothing), on the session's cached statements.
    pub fn read_tx<T, E>(
        &self,
        stage: Stage,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<DbError>,
    {
        self.scoped(stage, true, f, |tx| tx.commit())
    }

    fn scoped<T, E>(
        &self,
        stage: Stage,
        read_only: bool,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, E>,
        commit: impl FnOnce(Tx<'_>) -> Result<(), postgres::Error>,
    ) -> Result<T, E>
    where
        E: From<DbError>,
    {
        let mut conn = self.checkout(stage)?;
        let mut tx = conn.inner.transaction(read_only).map_err(DbError::from)?;
        let out = f(&mut tx)?;
        commit(tx).map_err(DbError::from)?;
        Ok(out)
    }

    /// Pool occupancy, for metrics and readiness.
    pub fn state(&self) -> r2d2::State {
        self.pool.state()
    }
}

/// A checked-out connection. Dropping it returns it to the pool and logs the hold time.
pub struct Conn {
    inner: r2d2::PooledConnection<Manager>,
    stage: Stage,
    wait: Duration,
    acquired: Instant,
    /// Not `Send`: the checkout is recorded for this thread (see `context::held_connection`).
    _this_thread: PhantomData<*const ()>,
}

impl Conn {
    /// The session's client itself, for what the named-statement cache cannot run: the
    /// migration files' multi-statement scripts.
    fn client(&mut self) -> &mut postgres::Client {
        &mut self.inner.client
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.inner.returned_now();
        context::connection_returned(self.stage.as_str());
        ConnectionReleased {
            stage: self.stage.as_str(),
            wait: self.wait,
            hold: self.acquired.elapsed(),
        }
        .emit();
    }
}
