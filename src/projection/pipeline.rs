//! A tick's page pipeline: pages read in order after the row's cursor, turned into merge
//! updates, sent on the worker's long-lived sender threads with at most two pages in
//! flight, and settled (verified, then checkpointed) in order; a yielded row's next page is
//! read ahead and carried to this worker's next claim of it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;

use crate::app::App;
use crate::db::Stage;
use crate::es::alias::AssetIndices;
use crate::es::error::EsError;
use crate::es::senders::{SendContext, Senders, Writes};
use crate::es::writer::WritePolicy;
use crate::es::EsClient;
use crate::tags;
use crate::telemetry::events::ms;
use crate::telemetry::metrics;
use crate::telemetry::Line;

use super::close::CloseRun;
use super::heartbeat::Heartbeat;
use super::missed::Missed;
use super::outbox::{self, OutboxClaim};
use super::worker::OUTBOX_BACKOFF;
use super::{page, ProjectionError};
use crate::forget::ForgetRun;
use crate::retention::assets::ExpireRun;
use crate::tombstones::{self, DeleteRun};

/// A worker's page pipeline: its sender threads and the page it carries between claims.
pub struct Pipeline {
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

/// What one tick's pages share.
struct Tick<'a> {
    claim: &'a OutboxClaim,
    heartbeat: &'a Heartbeat,
    targets: &'a AssetIndices,
    send_ctx: &'a Arc<SendContext>,
    source: &'a PageSource<'a>,
    /// What the row's pages become.
    ops: &'a Operations<'a>,
    /// The row's `processed_endpoints` as of the last checkpoint.
    processed: Cell<i64>,
}

/// What a row's pages become: merges of an execution's endpoints, the owner's current
/// tags, closes of what a scoped execution did not see, deletes of what a tombstone
/// covers, tombstones and deletes of what was last seen before an age limit, or the
/// documents a deleted task touched rebuilt without it.
pub enum Operations<'a> {
    Execution,
    Tags,
    Close(&'a CloseRun),
    Delete(&'a DeleteRun),
    Expire(&'a ExpireRun),
    Forget(&'a ForgetRun),
}

/// How a tick's pages ended.
pub enum Pages {
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

impl Pipeline {
    pub fn new(app: Arc<App>) -> Pipeline {
        let senders = Senders::start("projection-send", sender_threads(&app.config));
        Pipeline {
            app,
            carried: Mutex::new(None),
            senders,
        }
    }

    /// Publishes the claimed row's pages from `index` matching `filter` into `targets` as
    /// `ops`, up to the tick's share.
    pub fn publish(
        &self,
        claim: &OutboxClaim,
        heartbeat: &Heartbeat,
        targets: &AssetIndices,
        index: &str,
        filter: Value,
        ops: &Operations,
    ) -> Result<Pages, ProjectionError> {
        let app = &self.app;
        let cfg = &app.config.elasticsearch;
        let send_ctx = Arc::new(SendContext {
            es: app.es.clone(),
            limiter: app.limiter.clone(),
            policy: WritePolicy {
                max_ops: cfg.bulk_batch_size,
                max_bytes: cfg.bulk_max_bytes,
                attempts: 1,
                backoff: OUTBOX_BACKOFF,
            },
            cancel: Some(heartbeat.cancel().clone()),
            trace_id: format!("outbox-{}", claim.id),
        });
        let source = PageSource {
            es: &app.es,
            index,
            filter,
            size: app.config.projection.page_size,
        };
        let tick = Tick {
            claim,
            heartbeat,
            targets,
            send_ctx: &send_ctx,
            source: &source,
            ops,
            processed: Cell::new(claim.processed_endpoints),
        };
        let mut in_flight = VecDeque::new();
        let outcome = self.pages(&tick, &mut in_flight);
        // Only a failed tick leaves pages here: their writes are waited for but not
        // checkpointed, since a cursor saved past a page that failed would skip it; the
        // next claim replays them.
        for page in in_flight {
            let _ = page.writes.wait().result;
        }
        outcome
    }

    /// The carried page, if it continues `claim` where it stands (any other claim of the
    /// row in between moved its cursor, or left it where this page still follows it).
    fn take_carried(&self, claim: &OutboxClaim) -> Option<page::Fetched> {
        let carried = self.carried.lock().ok()?.take()?;
        (carried.outbox_id == claim.id
            && !claim.refreshing
            && claim.cursor.as_deref() == Some(carried.cursor.as_str()))
        .then_some(carried.fetched)
    }

    fn carry(&self, claim: &OutboxClaim, cursor: Option<String>, fetched: Option<page::Fetched>) {
        if let (Some(cursor), Some(fetched), Ok(mut slot)) = (cursor, fetched, self.carried.lock())
        {
            *slot = Some(Carried {
                outbox_id: claim.id,
                cursor,
                fetched,
            });
        }
    }

    /// Publishes pages until the row has none left (`Done`) or the tick's share is sent
    /// (`Yielded`: settled, released, and the next page carried). An execution's pages
    /// merge distinct documents, and what they read (the execution projection) is not
    /// what they write, so the next page is read, built and sent while the previous one is
    /// still being written: at most two pages in flight, settled in order, so each worker
    /// keeps the cluster busy through its own reads, builds and checkpoints. Close and
    /// delete rows' pages also overlap: each write only takes documents out of what the
    /// next page's filter matches, behind its cursor. A tags row's pages read the index
    /// they write and keep matching it: each is settled before the next is read.
    fn pages(
        &self,
        tick: &Tick,
        in_flight: &mut VecDeque<InFlight>,
    ) -> Result<Pages, ProjectionError> {
        let claim = tick.claim;
        // A forget page writes (and re-reads) synchronously while it is built.
        let overlap = !matches!(tick.ops, Operations::Tags | Operations::Forget(_));
        let keep = usize::from(overlap);
        let per_tick = self.app.config.projection.pages_per_tick;
        let mut cursor = claim.cursor.clone();
        let mut carried = self.take_carried(claim);
        let mut pages = 0;
        loop {
            if tick.heartbeat.is_lost() {
                return Err(ProjectionError::LeaseLost);
            }
            if pages == per_tick {
                // The tick's pages are sent. An execution reads the next page while the last
                // write finishes, for this worker's next claim (usually this row again; a
                // read wasted when it is not); a failed read only loses that.
                let ahead = overlap
                    .then(|| tick.source.read(cursor.as_deref()).ok())
                    .flatten();
                self.settle_all(tick, in_flight)?;
                self.release(tick, cursor, ahead)?;
                return Ok(Pages::Yielded(pages));
            }
            let started = Instant::now();
            let fetched = match carried.take() {
                Some(fetched) => fetched,
                None => match tick.source.read(cursor.as_deref()) {
                    Ok(fetched) => fetched,
                    // Read while a page was being written: settle that page and read again
                    // in line, at no cost to the row (a failure now is the row's error).
                    Err(_) if !in_flight.is_empty() => {
                        self.settle_all(tick, in_flight)?;
                        tick.source.read(cursor.as_deref())?
                    }
                    Err(e) => return Err(e.into()),
                },
            };
            let page = fetched.page()?;
            let Some(next) = page.cursor.clone() else {
                break;
            };
            let mut tags = tags::Tags::default();
            // Merges of the same document: a missed close follows its observation's merge.
            let mut closes_missed = false;
            let read = page.docs.len();
            let (ops, endpoints) = match tick.ops {
                Operations::Execution => {
                    let (deleted, missed) = {
                        let mut conn = self.app.db.checkout(Stage::Context)?;
                        let ips = page::addresses(&page.docs);
                        tags = tags::lookup(&mut conn, claim.owner_id, &ips, &[])?;
                        let deleted = tombstones::covering(
                            &mut conn,
                            claim.owner_id,
                            &page::endpoints(&page.docs),
                        )?;
                        let missed =
                            Missed::lookup(&mut conn, claim.owner_id, &page.docs, &deleted)?;
                        (deleted, missed)
                    };
                    let mut ops = page::execution_operations(
                        tick.targets,
                        claim.owner_id,
                        &page.docs,
                        &tags,
                        &deleted,
                    );
                    let closes = missed.operations(
                        &self.app.es,
                        &self.app.config.elasticsearch.index_prefix,
                        tick.targets,
                        claim.owner_id,
                        &page.docs,
                    )?;
                    closes_missed = !closes.is_empty();
                    ops.extend(closes);
                    (ops, read)
                }
                Operations::Tags => {
                    let mut conn = self.app.db.checkout(Stage::Context)?;
                    let ips = page::addresses(&page.docs);
                    tags = tags::lookup(&mut conn, claim.owner_id, &ips, &[])?;
                    (
                        page::retag_operations(tick.targets, &page.docs, &tags),
                        read,
                    )
                }
                Operations::Close(run) => run.operations(
                    &self.app.es,
                    &self.app.config.elasticsearch.index_prefix,
                    tick.targets,
                    claim.owner_id,
                    &page.docs,
                )?,
                Operations::Delete(run) => {
                    let ids: Vec<_> = page.docs.iter().map(|d| d.id.clone()).collect();
                    (run.operations(tick.targets, &ids), read)
                }
                Operations::Expire(run) => {
                    let ids: Vec<_> = page.docs.iter().map(|d| d.id.clone()).collect();
                    run.operations(
                        &self.app.es,
                        &self.app.db,
                        tick.targets,
                        claim.owner_id,
                        &ids,
                    )?
                }
                Operations::Forget(run) => {
                    // Written in order (each endpoint's deletes before its merges) and
                    // waited for: the run reads its sources again after each write.
                    let send = |ops| {
                        self.senders
                            .write(tick.send_ctx, ops, true)?
                            .wait()
                            .result?;
                        Ok(())
                    };
                    let keys = crate::forget::keys(&page.docs);
                    (
                        Vec::new(),
                        run.recompute(&self.app, tick.targets, &keys, send)?,
                    )
                }
            };
            if tick.heartbeat.is_lost() {
                return Err(ProjectionError::LeaseLost);
            }
            // Without tags every operation merges a distinct document, so the page's
            // requests go out together; a tag update must follow the merge that may create
            // its document, so a tagged page keeps its requests in order, and so does a
            // page with missed closes (two merges of one document at once would conflict).
            let in_order = !tags.is_empty() || closes_missed;
            let writes = self.senders.write(tick.send_ctx, ops, in_order)?;
            in_flight.push_back(InFlight {
                writes,
                next: next.clone(),
                endpoints: endpoints as i64,
                started,
            });
            pages += 1;
            while in_flight.len() > keep {
                if let Some(page) = in_flight.pop_front() {
                    self.settle(tick, page)?;
                }
            }
            cursor = Some(next);
            if read < self.app.config.projection.page_size {
                break;
            }
        }
        self.settle_all(tick, in_flight)?;
        Ok(Pages::Done(pages))
    }

    /// Gives the row back for others' turn (due now), carrying `fetched`, the page after
    /// `cursor`, to this worker's next claim.
    fn release(
        &self,
        tick: &Tick,
        cursor: Option<String>,
        fetched: Option<page::Fetched>,
    ) -> Result<(), ProjectionError> {
        tick.heartbeat.stop();
        outbox::release(&self.app.db, tick.claim)?;
        self.carry(tick.claim, cursor, fetched);
        Ok(())
    }

    /// Waits for a page's write, then saves the cursor after it: verified pages only, in
    /// order, and only while the lease holds.
    fn settle(&self, tick: &Tick, page: InFlight) -> Result<(), ProjectionError> {
        page.writes.wait().result?;
        if tick.heartbeat.is_lost() {
            return Err(ProjectionError::LeaseLost);
        }
        let claim = tick.claim;
        outbox::checkpoint(&self.app.db, claim, &page.next, page.endpoints)?;
        let processed = tick.processed.get() + page.endpoints;
        tick.processed.set(processed);
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
        tick: &Tick,
        in_flight: &mut VecDeque<InFlight>,
    ) -> Result<(), ProjectionError> {
        let mut first = Ok(());
        while let Some(page) = in_flight.pop_front() {
            if first.is_ok() {
                first = self.settle(tick, page);
            } else {
                let _ = page.writes.wait().result;
            }
        }
        first
    }
}
