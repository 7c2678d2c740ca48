//! A publication worker: `tick()` claims one outbox row (an execution, or a tag change),
//! publishes up to `projection_pages_per_tick` pages (each verified, then checkpointed),
//! and either yields the row, or refreshes the asset indices once and completes it. The loop around it
//! survives panics (recorded as errors) and idles between empty claims.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::app::App;
use crate::db::Stage;
use crate::es::bulk::BulkOp;
use crate::es::error::{ErrorClass, EsError};
use crate::es::retry::Backoff;
use crate::es::writer::{WritePolicy, Writer};
use crate::es::{alias, index};
use crate::tags;
use crate::telemetry::events::ms;
use crate::telemetry::metrics;
use crate::telemetry::Line;

use super::heartbeat::Heartbeat;
use super::outbox::{self, Claim, Work};
use super::{page, ProjectionError};

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
    /// The page read ahead when this worker last yielded a row: the next claim of that row
    /// at that cursor starts from it instead of reading it again.
    carried: Mutex<Option<Carried>>,
}

struct Carried {
    outbox_id: i64,
    /// The cursor the page was read after (the row's checkpoint when it was yielded).
    cursor: String,
    fetched: page::Fetched,
}

impl Worker {
    pub fn new(app: Arc<App>) -> Worker {
        Worker {
            app,
            carried: Mutex::new(None),
        }
    }

    /// The carried page, if it continues `claim` where it stands (any other claim of the
    /// row in between moved its cursor, or left it where this page still follows it).
    fn take_carried(&self, claim: &Claim) -> Option<page::Fetched> {
        let carried = self.carried.lock().ok()?.take()?;
        (carried.outbox_id == claim.id
            && !claim.refreshing
            && claim.cursor.as_deref() == Some(carried.cursor.as_str()))
        .then_some(carried.fetched)
    }

    fn carry(&self, claim: &Claim, cursor: Option<String>, fetched: Option<page::Fetched>) {
        if let (Some(cursor), Some(fetched), Ok(mut slot)) = (cursor, fetched, self.carried.lock())
        {
            *slot = Some(Carried {
                outbox_id: claim.id,
                cursor,
                fetched,
            });
        }
    }

    /// One claim → pages → checkpoint round.
    pub fn tick(&self) -> Result<TickOutcome, ProjectionError> {
        let es_cfg = &self.app.config.elasticsearch;
        let Some(claim) = outbox::claim(&self.app.db, es_cfg.projection_lease)? else {
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
        let heartbeat = Heartbeat::start(
            self.app.db.clone(),
            claim.clone(),
            es_cfg.projection_heartbeat,
            es_cfg.projection_lease,
        );
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
        claim: &Claim,
        heartbeat: &Heartbeat,
    ) -> Result<TickOutcome, ProjectionError> {
        let app = &self.app;
        let cfg = &app.config.elasticsearch;
        let prefix = &cfg.index_prefix;
        app.ensure_indices()?;
        // Publication writes where the aliases point now, resolved once per tick: after a
        // rebuild switches them, the next tick writes the new version (the rebuild
        // catches up with whatever a tick that began before the switch wrote to the old).
        let targets = alias::current(&app.es, prefix)?;
        let trace_id = format!("outbox-{}", claim.id);
        let writer = Writer {
            es: &app.es,
            limiter: &app.limiter,
            policy: WritePolicy {
                max_ops: cfg.bulk_batch_size,
                max_bytes: cfg.projection_bulk_max_bytes,
                attempts: 1,
                backoff: OUTBOX_BACKOFF,
            },
            cancel: Some(heartbeat.cancel()),
            trace_id: &trace_id,
        };
        let (source, filter) = match &claim.work {
            Work::Execution(id) => (
                index::execution_endpoints(prefix),
                Some(page::execution_filter(*id)),
            ),
            Work::Tags(scope) => (
                targets.user.clone(),
                page::tag_scope_filter(claim.owner_id, scope),
            ),
        };
        let mut pages = 0;
        if let (false, Some(filter)) = (claim.refreshing, filter) {
            let mut cursor = claim.cursor.clone();
            let mut processed = claim.processed_endpoints;
            let mut prefetched = self.take_carried(claim);
            loop {
                if heartbeat.is_lost() {
                    return Err(ProjectionError::LeaseLost);
                }
                if pages == cfg.projection_pages_per_tick {
                    heartbeat.stop();
                    outbox::release(&app.db, claim)?;
                    self.carry(claim, cursor, prefetched);
                    return Ok(TickOutcome::Yielded { pages });
                }
                let started = Instant::now();
                let fetched = match prefetched.take() {
                    Some(fetched) => fetched,
                    None => page::read(
                        &app.es,
                        &source,
                        filter.clone(),
                        cursor.as_deref(),
                        cfg.projection_page_size,
                    )?,
                };
                let page = fetched.page()?;
                let Some(next) = page.cursor.clone() else {
                    break;
                };
                let tags = {
                    let mut conn = app.db.checkout(Stage::Context)?;
                    tags::lookup(
                        &mut *conn,
                        claim.owner_id,
                        &page::addresses(&page.docs),
                        &[],
                    )?
                };
                let ops = match &claim.work {
                    Work::Execution(_) => {
                        page::execution_operations(&targets, claim.owner_id, &page.docs, &tags)
                    }
                    Work::Tags(_) => page::retag_operations(&targets, &page.docs, &tags),
                };
                // An execution's next page is read while this one is written: its source,
                // the execution projection, is not what publication writes, and the cursor
                // of the next read is already known. A failed read-ahead is simply redone
                // (and reported) at the top of the loop. After the tick's last page it is
                // carried to this worker's next claim, which is usually the same row again
                // (a page read wasted when it is not). Tag pages read the index they write,
                // so they stay strictly one after the other.
                let read_ahead = matches!(claim.work, Work::Execution(_))
                    && page.docs.len() == cfg.projection_page_size;
                let read_next = read_ahead.then_some(|| {
                    page::read(
                        &app.es,
                        &source,
                        filter.clone(),
                        Some(&next),
                        cfg.projection_page_size,
                    )
                });
                prefetched = write_page(&writer, &ops, !tags.is_empty(), read_next)?;
                if heartbeat.is_lost() {
                    return Err(ProjectionError::LeaseLost);
                }
                let n = page.docs.len() as i64;
                outbox::checkpoint(&app.db, claim, &next, n)?;
                processed += n;
                pages += 1;
                metrics::get()
                    .projection_endpoints_published
                    .inc_by(n as u64);
                cursor = Some(next);
                Line::new("ScanProjectionPageCompleted")
                    .field("outbox_id", claim.id)
                    .field("work", &claim.work)
                    .field("endpoints", n)
                    .field("processed_endpoints", processed)
                    .field("duration_ms", ms(started.elapsed()))
                    .info();
                if page.docs.len() < cfg.projection_page_size {
                    break;
                }
            }
        }
        if !claim.refreshing {
            outbox::enter_refreshing(&app.db, claim)?;
        }
        // Every page is written: make them visible once, then finish. A failure here is
        // retried later in phase `refreshing`, which re-sends no page.
        let indices = [targets.global.as_str(), targets.user.as_str()];
        let path = format!("/{}/_refresh", index::encode_path(&indices.join(",")));
        app.es.request("POST", &path, None)?.ok()?;
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
        claim: &Claim,
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

/// Writes a page's operations while `read_next` (if any) reads the following page; returns
/// that page when it was read. Without tags every operation merges a distinct document, so
/// the page's requests go out together; a tag update must follow the merge that may create
/// its document, so a tagged page (`in_order`) keeps its requests in order.
fn write_page(
    writer: &Writer,
    ops: &[BulkOp],
    in_order: bool,
    read_next: Option<impl FnOnce() -> Result<page::Fetched, EsError> + Send>,
) -> Result<Option<page::Fetched>, EsError> {
    std::thread::scope(|s| {
        let ahead = read_next.map(|read| s.spawn(read));
        if in_order {
            writer.write(ops)?;
        } else {
            writer.write_concurrently(ops)?;
        }
        Ok(ahead.and_then(|h| h.join().ok()).and_then(Result::ok))
    })
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
