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

pub mod heartbeat;
pub mod outbox;
pub mod page;
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
            ProjectionError::LeaseLost | ProjectionError::Db(_) => ErrorClass::Transient,
        }
    }
}

/// Adds `by` to the calling thread's nice value (capped at 19). On Linux the nice value
/// belongs to the thread, not the process, and threads it starts inherit it: a worker's
/// heartbeat and page-writing threads yield with it, while the HTTP threads keep the
/// process's priority. Raising a nice value needs no privilege.
pub fn lower_thread_priority(by: i32) -> std::io::Result<()> {
    if by == 0 {
        return Ok(());
    }
    let tid = thread_id();
    let now = thread_nice(tid)?;
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, (now + by).min(19)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's kernel id (what `setpriority(PRIO_PROCESS, …)` names on Linux).
pub fn thread_id() -> libc::id_t {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    libc::id_t::try_from(tid).unwrap_or(0)
}

/// The nice value of thread `tid`. `getpriority` answers -1 both for nice -1 and for an
/// error, so errno is cleared first and read after.
pub fn thread_nice(tid: libc::id_t) -> std::io::Result<i32> {
    // SAFETY: errno is thread-local; getpriority takes plain integers.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(nice)
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
                        if let Err(e) = lower_thread_priority(nice) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_is_lowered_for_the_thread_and_what_it_starts_not_its_parent() {
        let parent = thread_nice(thread_id()).unwrap();
        let (own, child) = std::thread::spawn(|| {
            lower_thread_priority(3).unwrap();
            let own = thread_nice(thread_id()).unwrap();
            let child = std::thread::spawn(|| thread_nice(thread_id()).unwrap())
                .join()
                .unwrap();
            (own, child)
        })
        .join()
        .unwrap();
        assert_eq!(own, (parent + 3).min(19));
        assert_eq!(
            child, own,
            "threads started by a worker inherit its nice value"
        );
        assert_eq!(thread_nice(thread_id()).unwrap(), parent);
    }

    #[test]
    fn priority_is_capped_at_19_and_zero_changes_nothing() {
        let (capped, same) = std::thread::spawn(|| {
            let before = thread_nice(thread_id()).unwrap();
            lower_thread_priority(0).unwrap();
            let same = thread_nice(thread_id()).unwrap() == before;
            lower_thread_priority(15).unwrap();
            lower_thread_priority(15).unwrap();
            (thread_nice(thread_id()).unwrap(), same)
        })
        .join()
        .unwrap();
        assert_eq!(capped, 19);
        assert!(same);
    }
}
