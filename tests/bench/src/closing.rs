//! The close run: right after a size's (last) publication, a succeeded execution of a task
//! scoped to the size's addresses and ports that saw none of them closes every published
//! endpoint. Timed from its first claim to its completion, against the raw `_bulk` of the
//! same merges, sent once afterwards into ceiling indices that first receive the same
//! published documents (untimed) while scanstore's are dropped: holding both copies of a
//! 1 M run at once is more than the emulator's memory on the benchmark machine.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use postgres::Client;
use uuid::Uuid;

use scanstore::ports::PortScope;
use scanstore::projection::close::CloseRun;

use crate::ceiling::{self, Requests, Sent};
use crate::logs;
use crate::scenario::PublishCtx;
use crate::stack::{self, ServeCfg};

/// The close run's targets: the addresses of every size run (10.0.0.0 up, three ports
/// each), and not the warm-up executions' (from 10.203.x.x, see `scenario::WARM_UP_FIRST`).
const TARGET: &str = "10.0.0.0/9";
const PORTS: &str = "T:22,80,443";

pub struct CloseResult {
    pub closed: i64,
    /// From the run's first claim to its `processed_at`.
    pub seconds: f64,
    /// The same merges sent raw.
    pub ceiling: Sent,
}

impl CloseResult {
    pub fn endpoints_per_s(&self) -> f64 {
        self.closed as f64 / self.seconds.max(1e-9)
    }

    pub fn ratio(&self) -> f64 {
        self.endpoints_per_s() / self.ceiling.endpoints_per_s().max(1e-9)
    }
}

// The closing execution: a succeeded one of a new task of the owner, scoped to TARGET ×
// PORTS, run by one of the owner's scanners.
const SCOPED_EXECUTION: &str = "
    WITH task AS (
        INSERT INTO tasks (owner_id, kind, status, ports, executions_total, executions_succeeded)
        VALUES ($1, 'port_scan', 'succeeded', $3, 1, 1) RETURNING id),
    target AS (
        INSERT INTO task_targets (task_id, kind, value) SELECT id, 'cidr', $2 FROM task)
    INSERT INTO executions (task_id, scanner_id, status, started_at, finished_at)
    SELECT task.id,
           (SELECT e.scanner_id FROM executions e JOIN tasks t ON t.id = e.task_id
             WHERE t.owner_id = $1 AND e.scanner_id IS NOT NULL LIMIT 1),
           'succeeded', now(), now()
      FROM task
    RETURNING id, started_at";

// Held back until the publisher is up, as the publication's backlog is.
const QUEUE_HELD: &str = "
    INSERT INTO scan_projection_outbox (kind, owner_id, closing_execution_id, available_at)
    VALUES ('close', $1, $2, 'infinity')";
const RELEASE: &str = "
    UPDATE scan_projection_outbox SET available_at = now() WHERE closing_execution_id = $1";
const PROGRESS: &str = "
    SELECT processed_at, processed_endpoints
      FROM scan_projection_outbox WHERE closing_execution_id = $1";

/// Runs the close, then `drop_live` (scanstore's indices go, so that the ceiling meets
/// the store as the close met it), then the ceiling over the documents of `publish_reqs`.
/// Each set of requests is built only when it is sent: beside a 1 M run's emulator the
/// bench has room for one at a time.
pub fn run(
    x: &PublishCtx,
    c: &mut Client,
    cfg: &ServeCfg,
    size: usize,
    publish_reqs: impl FnOnce() -> Result<Requests, String>,
    (label, drop_live): (&str, impl FnOnce()),
) -> Result<CloseResult, String> {
    let sql = |e: postgres::Error| format!("close run: {e}");
    let r = c
        .query_one(SCOPED_EXECUTION, &[&x.owner, &TARGET, &PORTS])
        .map_err(sql)?;
    let (execution, started): (Uuid, DateTime<Utc>) = (r.get(0), r.get(1));
    let scope = PortScope::parse(PORTS).map_err(|e| e.to_string())?;
    let run = CloseRun::new(execution, started, vec![TARGET.into()], scope);
    c.execute(QUEUE_HELD, &[&x.owner, &execution])
        .map_err(sql)?;
    let mut publisher = stack::scanstore(x.opts, x.db, x.es_url, x.prefix, cfg, x.dir, label)?;
    c.execute(RELEASE, &[&execution]).map_err(sql)?;
    let deadline = Instant::now() + Duration::from_secs(x.opts.publish_timeout);
    let (done, closed) = loop {
        let r = c.query_one(PROGRESS, &[&execution]).map_err(sql)?;
        if let Some(done) = r.get::<_, Option<DateTime<Utc>>>(0) {
            break (done, r.get::<_, i64>(1));
        }
        if Instant::now() > deadline {
            publisher.stop();
            return Err(format!(
                "close run not done after {}s",
                x.opts.publish_timeout
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    publisher.stop();
    let work = format!("close:{execution}");
    let first_claim = logs::read(&stack::log_path(x.dir, label))
        .into_iter()
        .find(|e| e.name == "ScanProjectionClaimed" && e.get("work") == Some(work.as_str()))
        .map(|e| e.at)
        .ok_or("the close run's claim is not in the log")?;
    if closed != size as i64 {
        return Err(format!("closed {closed} endpoints, expected {size}"));
    }
    drop_live();
    ceiling::install(x.es_url, x.cp)?;
    let published = publish_reqs()?;
    ceiling::send(x.es_url, &published, x.opts.bulk_concurrency)?;
    let indices = published.indices.clone();
    drop(published);
    let limits = (
        x.opts.page_size,
        x.opts.bulk_batch_size,
        x.opts.bulk_max_bytes,
    );
    let reqs = ceiling::close_requests(x.cp, x.owner, size, &run, limits)?;
    let sent = ceiling::send(x.es_url, &reqs, x.opts.bulk_concurrency);
    ceiling::delete(x.es_url, x.cp, &indices);
    Ok(CloseResult {
        closed,
        seconds: (done - first_claim).num_milliseconds() as f64 / 1000.0,
        ceiling: sent?,
    })
}
