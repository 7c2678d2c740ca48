//! A publication worker's claim loop: `tick()` claims one outbox row (an execution, a tag
//! change, a close run, a deletion or a task's deletion), has its [`Pipeline`] publish up
//! to `projection.pages_per_tick` pages, and either yields the row, or refreshes the asset
//! indices once (and purges a deleted task) and completes it; a failure is recorded with
//! its backoff. The loop around it survives panics and idles between empty claims.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::es::alias::{self};
use crate::es::error::ErrorClass;
use crate::es::index::{self, Indices};
use crate::es::retry::Backoff;
use crate::telemetry::events::ms;
use crate::telemetry::metrics;
use crate::telemetry::Line;

use super::close::CloseRun;
use super::heartbeat::Heartbeat;
use super::outbox::{self, OutboxClaim, Work};
use super::pipeline::{Operations, Pages, Pipeline};
use super::{page, ProjectionError};
use crate::forget::ForgetRun;
use crate::retention::assets::ExpireRun;
use crate::tombstones::DeleteRun;

/// Wait between claims when nothing is due and no one rings (see [`super::wake`]).
pub const IDLE_WAIT: Duration = Duration::from_millis(250);

/// Backoff of a failed row: transient errors grow from 1 s to the cap; permanent ones go
/// straight to the cap, so they never hot-loop but are never dropped either.
pub const OUTBOX_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    cap: Duration::from_secs(300),
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TickOutcome {
    /// Nothing was due.
    Idle,
    /// Published `pages` pages and gave the row back for others' turn.
    Yielded { pages: usize },
    /// Published the rest, refreshed and completed the row.
    Completed { pages: usize },
    /// The lease was lost; nothing more was sent.
    LeaseLost,
    /// The attempt failed and was recorded with its backoff.
    Failed { class: ErrorClass },
}

pub struct Worker {
    app: Arc<App>,
    pipeline: Pipeline,
}

impl Worker {
    pub fn new(app: Arc<App>) -> Worker {
        Worker {
            pipeline: Pipeline::new(app.clone()),
            app,
        }
    }

    /// One claim → pages → checkpoint round.
    pub fn tick(&self) -> Result<TickOutcome, ProjectionError> {
        let cfg = &self.app.config.projection;
        let Some(claim) = outbox::claim(&self.app.db, cfg.lease)? else {
            return Ok(TickOutcome::Idle);
        };
        Line::new("ScanProjectionClaimed")
            .field("outbox_id", claim.id)
            .field("work", &claim.work)
            .field(
                "phase",
                if claim.refreshing {
                    "refreshing"
                } else {
                    "publishing"
                },
            )
            .field("processed_endpoints", claim.processed_endpoints)
            .field("attempts", claim.attempts)
            .info();
        let heartbeat =
            Heartbeat::start(self.app.db.clone(), claim.clone(), cfg.heartbeat, cfg.lease);
        let result = self.publish(&claim, &heartbeat);
        heartbeat.stop();
        match result {
            Ok(outcome) => Ok(outcome),
            Err(ProjectionError::LeaseLost) => {
                metrics::get().projection_lease_losses.inc();
                Ok(TickOutcome::LeaseLost)
            }
            Err(e) => self.record(&claim, &e),
        }
    }

    fn publish(
        &self,
        claim: &OutboxClaim,
        heartbeat: &Heartbeat,
    ) -> Result<TickOutcome, ProjectionError> {
        let app = &self.app;
        let prefix = &app.config.elasticsearch.index_prefix;
        app.ensure_indices()?;
        // Publication writes where the aliases point now, resolved once per tick: after a
        // rebuild switches them, the next tick writes the new version (the rebuild
        // catches up with whatever a tick that began before the switch wrote to the old).
        let targets = alias::current(&app.es, prefix)?;
        let (mut close, mut delete, mut expire, mut forget) = (None, None, None, None);
        let (source, filter) = match &claim.work {
            Work::Execution(id) => (
                index::execution_endpoints(prefix),
                Some(page::execution_filter(*id)),
            ),
            Work::Tags(scope) => (
                targets.user.clone(),
                page::tag_scope_filter(claim.owner_id, scope),
            ),
            Work::Close(id) => {
                close = CloseRun::load(&app.db, *id)?;
                let filter = close.as_ref().map(|run| run.filter(claim.owner_id));
                (targets.user.clone(), filter)
            }
            Work::Delete(id) => {
                delete = DeleteRun::load(&app.db, *id)?;
                let filter = delete.as_ref().map(|run| run.filter(claim.owner_id));
                (targets.user.clone(), filter)
            }
            Work::Expire(before) => {
                let run = expire.insert(ExpireRun::new(*before));
                (targets.user.clone(), Some(run.filter(claim.owner_id)))
            }
            Work::Forget(task) => {
                forget = ForgetRun::load(&app.db, *task, claim.owner_id)?;
                let source = forget.as_ref().map(|run| run.source(prefix, &targets));
                (
                    source.unwrap_or_default(),
                    forget.as_ref().map(ForgetRun::filter),
                )
            }
        };
        // A close, delete or forget row whose execution, tombstone or task has nothing to
        // apply has no pages, and neither has a tag change of a domain.
        let ops = match &claim.work {
            Work::Execution(_) => Some(Operations::Execution),
            Work::Tags(_) => Some(Operations::Tags),
            Work::Close(_) => close.as_ref().map(Operations::Close),
            Work::Delete(_) => delete.as_ref().map(Operations::Delete),
            Work::Expire(_) => expire.as_ref().map(Operations::Expire),
            Work::Forget(_) => forget.as_ref().map(Operations::Forget),
        };
        let mut pages = 0;
        if let (false, Some(filter), Some(ops)) = (claim.refreshing, filter, ops) {
            match self
                .pipeline
                .publish(claim, heartbeat, &targets, &source, filter, &ops)?
            {
                Pages::Yielded(n) => return Ok(TickOutcome::Yielded { pages: n }),
                Pages::Done(n) => pages = n,
            }
        }
        if !claim.refreshing {
            outbox::enter_refreshing(&app.db, claim)?;
        }
        // Every page is written: make them visible once, then finish. A failure here is
        // retried later in phase `refreshing`, which re-sends no page.
        app.es
            .refresh(&Indices::of(&[&targets.global, &targets.user]))?;
        // A deleted task's documents and rows go only now that the views no longer hold
        // its observations; repeated in full after a failure or a crash (idempotent).
        if let Some(run) = &forget {
            run.purge(app, heartbeat)?;
        }
        heartbeat.stop();
        outbox::complete(&app.db, claim)?;
        Line::new("ScanProjectionCompleted")
            .field("outbox_id", claim.id)
            .field("work", &claim.work)
            .field("pages", pages)
            .info();
        Ok(TickOutcome::Completed { pages })
    }

    fn record(
        &self,
        claim: &OutboxClaim,
        error: &ProjectionError,
    ) -> Result<TickOutcome, ProjectionError> {
        let class = error.class();
        let backoff = match class {
            ErrorClass::Transient => OUTBOX_BACKOFF.delay_random(claim.attempts as u32 + 1),
            ErrorClass::Permanent => OUTBOX_BACKOFF.cap,
        };
        let message: String = error.to_string().chars().take(1000).collect();
        match outbox::record_error(&self.app.db, claim, &message, class.as_str(), backoff) {
            Ok(attempts) => {
                Line::new("ScanProjectionOutboxError")
                    .field("outbox_id", claim.id)
                    .field("work", &claim.work)
                    .field("class", class.as_str())
                    .field("attempts", attempts)
                    .field("backoff_ms", ms(backoff))
                    .field("error", &message)
                    .warn();
                Ok(TickOutcome::Failed { class })
            }
            Err(ProjectionError::LeaseLost) => Ok(TickOutcome::LeaseLost),
            Err(e) => Err(e),
        }
    }
}

/// The worker thread's loop: ticks until `stop`, idling when nothing is due until rung or
/// the poll interval has passed. A worker that finds work after idling rings the others:
/// executions finish in bursts, and each idle worker would otherwise find its share only at
/// its own next poll. A panic in a tick is logged and the loop goes on (the claimed row
/// recovers by lease expiry).
pub fn run(worker: &Worker, stop: &AtomicBool) {
    let wake = &worker.app.projection_wake;
    let poll = worker.app.config.projection.poll_interval;
    // Starting counts as coming back from idle.
    let mut was_idle = true;
    loop {
        // The generation first, then `stop`: a stop that rang after this read ends the
        // wait below; one that rang before it is seen here (the ring's lock orders them).
        let seen = wake.generation();
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| worker.tick()));
        let idle = match outcome {
            Ok(Ok(TickOutcome::Idle)) => true,
            Ok(Ok(_)) => false,
            Ok(Err(e)) => {
                Line::new("ScanProjectionTickFailed")
                    .field("error", e)
                    .warn();
                true
            }
            Err(_) => {
                Line::new("ScanProjectionTickPanicked").warn();
                true
            }
        };
        if idle {
            wake.wait(seen, poll);
        } else if was_idle {
            wake.ring();
        }
        was_idle = idle;
    }
}
