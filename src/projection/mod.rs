//! Asset publication: dedicated worker threads turn each succeeded execution into the
//! current asset view through `scan_projection_outbox`.
//!
//! ```text
//!            final (tx B) inserts
//!                   │
//!                   ▼
//!   waiting ──claim (SKIP LOCKED, token + lease)──▶ leased/publishing ──page, verify,
//!     ▲  ▲                                           │     checkpoint cursor ─┐
//!     │  └──release after pages_per_tick (due now)───┤ ◀──────────────────────┘
//!     │                                              │ no more endpoints
//!     └──error: attempts+1, backoff into available_at│
//!                                                    ▼
//!                                       leased/refreshing ──refresh once──▶ done
//!                                                                          (processed_at)
//! ```
//!
//! Lease rules: renewal, checkpoint, release, retry and completion all match `claim_token`
//! *and* an unexpired `lease_expires_at` (database time); zero rows means the lease is lost,
//! and the worker sends nothing more. A heartbeat thread renews the lease independently of
//! page work. A crashed worker's row comes back when its lease expires. Pages are idempotent
//! merges, so a page replayed after a lost checkpoint — or a stale owner's late write —
//! leaves the documents as they would be anyway. Connections are checked out per statement
//! and never held across Elasticsearch I/O.

pub mod close;
pub mod heartbeat;
pub mod missed;
pub mod outbox;
pub mod page;
pub mod pipeline;
pub mod priority;
pub mod status;
pub mod wake;
pub mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::app::App;
use crate::db::DbError;
use crate::es::error::ErrorClass;
use crate::es::EsError;
use crate::telemetry::events::Line;

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error("lease lost")]
    LeaseLost,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Es(#[from] EsError),
    /// What a run reads kept changing under it (concurrent writes); it backs off and
    /// tries again.
    #[error("unsettled: {0}")]
    Unsettled(String),
}

impl From<postgres::Error> for ProjectionError {
    fn from(e: postgres::Error) -> Self {
        ProjectionError::Db(DbError::from(e))
    }
}

impl ProjectionError {
    /// Database trouble is transient; ES errors keep their own class.
    pub fn class(&self) -> ErrorClass {
        match self {
            ProjectionError::Es(e) => e.class(),
            ProjectionError::LeaseLost | ProjectionError::Db(_) | ProjectionError::Unsettled(_) => {
                ErrorClass::Transient
            }
        }
    }
}

/// The running worker threads.
pub struct Workers {
    app: Arc<App>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    pub fn start(app: &Arc<App>) -> std::io::Result<Workers> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let nice = app.config.projection.nice;
        for n in 0..app.config.projection.workers {
            let (app, stop) = (app.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("projection-{n}"))
                    .spawn(move || {
                        if let Err(e) = priority::lower_thread_priority(nice) {
                            Line::new("ScanProjectionPriorityUnchanged")
                                .field("nice", nice)
                                .field("error", e)
                                .warn();
                        }
                        worker::run(&worker::Worker::new(app), &stop)
                    })?,
            );
        }
        Ok(Workers {
            app: app.clone(),
            stop,
            threads,
        })
    }

    /// Stops after the current ticks (each bounded by `projection.pages_per_tick`).
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Idle workers are waiting to be rung: they stop now, not at their next poll.
        self.app.projection_wake.ring();
        for t in self.threads {
            let _ = t.join();
        }
    }
}
