//! A publication worker: `tick()` claims one outbox row (an execution, or a tag change),
//! publishes up to `projection.pages_per_tick` pages (each verified, then checkpointed),
//! and either yields the row, or refreshes the asset indices once and completes it. The loop around it
//! survives panics (recorded as errors) and idles between empty claims.

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::Value;

use crate::app::App;
use crate::db::Stage;
use crate::es::alias::{self, AssetIndices};
use crate::es::bulk::BulkOp;
use crate::es::error::{ErrorClass, EsError};
use crate::es::index::{self, Indices};
use crate::es::retry::Backoff;
use crate::es::senders::{Pending, Senders};
use crate::es::writer::{WritePolicy, WriteReport, Writer};
use crate::es::EsClient;
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
    /// Send the bulk requests of this worker's pages in flight.
    senders: Senders,
}

/// A worker's sender threads: two pages in flight, each request of an untagged page sent
/// on its own (more requests than threads wait their turn).
fn sender_threads(cfg: &crate::config::Config) -> usize {
    let bulk_ops = cfg.elasticsearch.bulk_batch_size.max(1);
    let per_page = (2 * cfg.projection.page_size).div_ceil(bulk_ops);
    (2 * per_page).clamp(1, 16)
}

struct Carried {
    outbox_id: i64,
    /// The cursor the page was read after (the row's checkpoint when it was yielded).
    cursor: String,
    fetched: page::Fetched,
}

/// Where a row's pages come from: `filter` over `index`, `size` documents a page.
struct PageSource<'a> {
    es: &'a EsClient,
    index: &'a str,
    filter: Value,
    size: usize,
}

impl PageSource<'_> {
    /// The page after `cursor` (from the start without one).
    fn read(&self, cursor: Option<&str>) -> Result<page::Fetched, EsError> {
        page::read(self.es, self.index, self.filter.clone(), cursor, self.size)
    }
}

/// What a tick's page writes need on the sender threads.
struct Sending {
    app: Arc<App>,
    policy: WritePolicy,
    /// The heartbeat's: a lost lease aborts their waits at once.
    cancel: Receiver<()>,
    trace_id: String,
}

impl Sending {
    fn writer(&self) -> Writer<'_> {
        Writer {
            es: &self.app.es,
            limiter: &self.app.limiter,
            policy: self.policy,
            cancel: Some(&self.cancel),
            trace_id: &self.trace_id,
        }
    }
}

/// The requests of one page being sent, and its operations: held here as well, so that the
/// worker that built them frees them once every request has ended (mimalloc defers a free
/// from another thread, and collecting those cost the publisher ~0.3 ms per page).
struct Writes {
    requests: Vec<Pending<Result<WriteReport, EsError>>>,
    ops: Arc<Vec<BulkOp>>,
}

/// Waits for every request of a page; the first failure once all have ended.
fn written(writes: Writes) -> Result<WriteReport, EsError> {
    let mut report = WriteReport::default();
    let mut first = Ok(());
    for write in writes.requests {
        let result = write
            .wait()
            .unwrap_or_else(|| Err(EsError::Transport("bulk sender panicked".into())));
        match result {
            Ok(r) => report.add(&r),
            Err(e) if first.is_ok() => first = Err(e),
            Err(_) => {}
        }
    }
    // The senders' shares were dropped before their results came.
    drop(writes.ops);
    first.map(|()| report)
}

/// What one tick's pages share.
struct Run<'a> {
    claim: &'a Claim,
    heartbeat: &'a Heartbeat,
    targets: &'a AssetIndices,
    sending: &'a Arc<Sending>,
    source: &'a PageSource<'a>,
    /// The row's `processed_endpoints` as of the last checkpoint.
    processed: Cell<i64>,
}

/// How a tick's pages ended.
enum Pages {
    /// The row has no page left after these.
    Done(usize),
    /// The tick's share was sent and the row given back.
    Yielded(usize),
}

/// A page whose write is under way; settled (waited for, then checkpointed) in order.
struct InFlight {
    writes: Writes,
    /// The cursor after the page's last document.
    next: String,
    endpoints: i64,
    /// When the page's read began.
    started: Instant,
}

impl Worker {
    pub fn new(app: Arc<App>) -> Worker {
        let senders = Senders::start("projection-send", sender_threads(&app.config));
        Worker {
            app,
            carried: Mutex::new(None),
            senders,
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
        let sending = Arc::new(Sending {
            app: app.clone(),
            policy: WritePolicy {
                max_ops: cfg.bulk_batch_size,
                max_bytes: app.config.elasticsearch.bulk_max_bytes,
                attempts: 1,
                backoff: OUTBOX_BACKOFF,
            },
            cancel: heartbeat.cancel().clone(),
            trace_id: format!("outbox-{}", claim.id),
        });
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
            let source = PageSource {
                es: &app.es,
                index: &source,
                filter,
                size: app.config.projection.page_size,
            };
            let run = Run {
                claim,
                heartbeat,
                targets: &targets,
                sending: &sending,
                source: &source,
                processed: Cell::new(claim.processed_endpoints),
            };
            let mut in_flight = VecDeque::new();
            let outcome = self.pages(&run, &mut in_flight);
            // Only a failed tick leaves pages here: their writes are waited for but not
            // checkpointed, since a cursor saved past a page that failed would skip it;
            // the next claim replays them.
            for page in in_flight {
                let _ = written(page.writes);
            }
            let outcome = outcome?;
            match outcome {
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
        heartbeat.stop();
        outbox::complete(&app.db, claim)?;
        Line::new("ScanProjectionCompleted")
            .field("outbox_id", claim.id)
            .field("work", &claim.work)
            .field("pages", pages)
            .info();
        Ok(TickOutcome::Completed { pages })
    }

    /// Publishes pages until the row has none left (`Done`) or the tick's share is sent
    /// (`Yielded`: settled, released, and the next page carried). An execution's pages
    /// merge distinct documents, and what they read (the execution projection) is not
    /// what they write, so the next page is read, built and sent while the previous one is
    /// still being written: at most two pages in flight, settled in order, so each worker
    /// keeps the cluster busy through its own reads, builds and checkpoints. A tags row's
    /// pages read the index they write: each is settled before the next is read.
    fn pages(
        &self,
        run: &Run,
        in_flight: &mut VecDeque<InFlight>,
    ) -> Result<Pages, ProjectionError> {
        let claim = run.claim;
        let overlap = matches!(claim.work, Work::Execution(_));
        let keep = usize::from(overlap);
        let per_tick = self.app.config.projection.pages_per_tick;
        let mut cursor = claim.cursor.clone();
        let mut carried = self.take_carried(claim);
        let mut pages = 0;
        loop {
            if run.heartbeat.is_lost() {
                return Err(ProjectionError::LeaseLost);
            }
            if pages == per_tick {
                // The tick's pages are sent. An execution reads the next page while the last
                // write finishes, for this worker's next claim (usually this row again; a
                // read wasted when it is not); a failed read only loses that.
                let ahead = overlap
                    .then(|| run.source.read(cursor.as_deref()).ok())
                    .flatten();
                self.settle_all(run, in_flight)?;
                self.release(run, cursor, ahead)?;
                return Ok(Pages::Yielded(pages));
            }
            let started = Instant::now();
            let fetched = match carried.take() {
                Some(fetched) => fetched,
                None => match run.source.read(cursor.as_deref()) {
                    Ok(fetched) => fetched,
                    // Read while a page was being written: settle that page and read again
                    // in line, at no cost to the row (a failure now is the row's error).
                    Err(_) if !in_flight.is_empty() => {
                        self.settle_all(run, in_flight)?;
                        run.source.read(cursor.as_deref())?
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            let page = fetched.page()?;
            let Some(next) = page.cursor.clone() else {
                break;
            };
            let tags = {
                let mut conn = self.app.db.checkout(Stage::Context)?;
                tags::lookup(&mut conn, claim.owner_id, &page::addresses(&page.docs), &[])?
            };
            let ops = match &claim.work {
                Work::Execution(_) => {
                    page::execution_operations(run.targets, claim.owner_id, &page.docs, &tags)
                }
                Work::Tags(_) => page::retag_operations(run.targets, &page.docs, &tags),
            };
            let endpoints = page.docs.len();
            if run.heartbeat.is_lost() {
                return Err(ProjectionError::LeaseLost);
            }
            // Without tags every operation merges a distinct document, so the page's
            // requests go out together; a tag update must follow the merge that may create
            // its document, so a tagged page keeps its requests in order.
            let writes = self.submit(run.sending, ops, !tags.is_empty())?;
            in_flight.push_back(InFlight {
                writes,
                next: next.clone(),
                endpoints: endpoints as i64,
                started,
            });
            pages += 1;
            while in_flight.len() > keep {
                if let Some(page) = in_flight.pop_front() {
                    self.settle(run, page)?;
                }
            }
            cursor = Some(next);
            if endpoints < self.app.config.projection.page_size {
                break;
            }
        }
        self.settle_all(run, in_flight)?;
        Ok(Pages::Done(pages))
    }

    /// Hands a page's operations to the sender threads: each request on its own, or, when
    /// `in_order`, all of them one after the other as one job.
    fn submit(
        &self,
        sending: &Arc<Sending>,
        ops: Vec<BulkOp>,
        in_order: bool,
    ) -> Result<Writes, EsError> {
        let ops = Arc::new(ops);
        let requests = if in_order {
            let (sending, ops) = (sending.clone(), ops.clone());
            vec![self.senders.submit(move || sending.writer().write(&ops))]
        } else {
            let ranges = sending.writer().requests(&ops)?;
            ranges
                .into_iter()
                .map(|range| {
                    let (sending, ops, queued) = (sending.clone(), ops.clone(), Instant::now());
                    self.senders
                        .submit(move || sending.writer().send(&ops[range], queued.elapsed()))
                })
                .collect()
        };
        Ok(Writes { requests, ops })
    }

    /// Gives the row back for others' turn (due now), carrying `fetched`, the page after
    /// `cursor`, to this worker's next claim.
    fn release(
        &self,
        run: &Run,
        cursor: Option<String>,
        fetched: Option<page::Fetched>,
    ) -> Result<(), ProjectionError> {
        run.heartbeat.stop();
        outbox::release(&self.app.db, run.claim)?;
        self.carry(run.claim, cursor, fetched);
        Ok(())
    }

    /// Waits for a page's write, then saves the cursor after it: verified pages only, in
    /// order, and only while the lease holds.
    fn settle(&self, run: &Run, page: InFlight) -> Result<(), ProjectionError> {
        written(page.writes)?;
        if run.heartbeat.is_lost() {
            return Err(ProjectionError::LeaseLost);
        }
        let claim = run.claim;
        outbox::checkpoint(&self.app.db, claim, &page.next, page.endpoints)?;
        let processed = run.processed.get() + page.endpoints;
        run.processed.set(processed);
        metrics::get()
            .projection_endpoints_published
            .inc_by(page.endpoints as u64);
        Line::new("ScanProjectionPageCompleted")
            .field("outbox_id", claim.id)
            .field("work", &claim.work)
            .field("endpoints", page.endpoints)
            .field("processed_endpoints", processed)
            .field("duration_ms", ms(page.started.elapsed()))
            .info();
        Ok(())
    }

    /// Settles every page in flight, oldest first; after a failure the rest are still
    /// waited for (their checkpoints would no longer follow on), and the first error is
    /// returned.
    fn settle_all(
        &self,
        run: &Run,
        in_flight: &mut VecDeque<InFlight>,
    ) -> Result<(), ProjectionError> {
        let mut first = Ok(());
        while let Some(page) = in_flight.pop_front() {
            if first.is_ok() {
                first = self.settle(run, page);
            } else {
                let _ = written(page.writes);
            }
        }
        first
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
