//! The queue at scale: claim, checkpoint and the backlog queries timed on a database whose
//! outbox holds only due rows, then again after history is added — processed outbox rows
//! of finished executions, ten upload receipts each — step by step; the p99 of each
//! against the empty database's, the plans of the hot statements at the largest step, and
//! how fast retention prunes the oldest of that history. PostgreSQL only: no Elasticsearch,
//! no server.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use postgres::Client;
use uuid::Uuid;

use scanstore::db::Db;
use scanstore::projection::outbox;
use scanstore::retention::records::{self, Pruned};
use scanstore::upload::{confirm, freshness, reserve};

use crate::report::quantiles;
use crate::stack::Database;
use crate::Opts;

/// One step's timings, (p50, p95, p99, max) in ms.
pub struct Step {
    /// Processed outbox rows (= finished executions) of history.
    pub history: usize,
    pub receipts: usize,
    /// Seconds the step's history took to write (and analyse).
    pub fill_seconds: f64,
    pub claim: [f64; 4],
    pub checkpoint: [f64; 4],
    /// The sampler's (and `/readyz`'s) backlog query.
    pub backlog: [f64; 4],
    /// `scripts/backlog.sql`'s summary.
    pub admin_summary: [f64; 4],
    /// The lowest and highest p99 of the runs, per statement in the order above; each
    /// statement's quantiles are its run with the median p99.
    pub p99_range: [(f64, f64); 4],
}

pub struct QueueResult {
    pub due: usize,
    pub samples: usize,
    pub runs: usize,
    pub steps: Vec<Step>,
    /// (statement, EXPLAIN (ANALYZE, BUFFERS) text) at the largest step.
    pub plans: Vec<(String, String)>,
    /// What retention pruned of the largest step's history, and in how many seconds.
    pub prune: (Pruned, f64),
}

impl QueueResult {
    /// p99 at the largest step over the empty database's, per statement.
    pub fn ratios(&self) -> Vec<(&'static str, f64)> {
        let (Some(first), Some(last)) = (self.steps.first(), self.steps.last()) else {
            return Vec::new();
        };
        let r = |a: [f64; 4], b: [f64; 4]| b[2] / a[2].max(1e-3);
        vec![
            ("claim", r(first.claim, last.claim)),
            ("checkpoint", r(first.checkpoint, last.checkpoint)),
            ("backlog", r(first.backlog, last.backlog)),
            ("admin summary", r(first.admin_summary, last.admin_summary)),
        ]
    }
}

/// Receipts each history execution has (a 10 000-endpoint scan in batches of 1 000).
const RECEIPTS_PER_EXECUTION: i32 = 10;
/// History executions written per transaction.
const FILL_CHUNK: i64 = 50_000;

// Due rows: succeeded executions whose publication waits (what the claim must find).
const SEED_DUE: &str = "
    WITH e AS (
        INSERT INTO executions (task_id, scanner_id, status, started_at, finished_at)
        SELECT $1, $2, 'succeeded', now(), now() FROM generate_series(1, $3::bigint)
        RETURNING id)
    INSERT INTO scan_projection_outbox (kind, execution_id, owner_id, available_at)
    SELECT 'execution', id, $4, now() - interval '1 minute' FROM e";

// History: executions finished a month ago, published, each with one upload stream of
// RECEIPTS_PER_EXECUTION confirmed receipts, a millisecond apart from $6 on. Written with
// triggers and foreign-key checks off (session_replication_role = replica), so the stream
// rows are written as the triggers would have left them.
const FILL_HISTORY: &str = "
    WITH e AS (
        INSERT INTO executions (task_id, scanner_id, status, observation_count, endpoint_count,
                                created_at, started_at, finished_at)
        SELECT $1, $2, 'succeeded', $5 * 1000, $5 * 1000, t, t, t + interval '10 minutes'
          FROM (SELECT $6::timestamptz + g * interval '1 ms' AS t
                  FROM generate_series(1, $3::bigint) g) s
        RETURNING id, finished_at),
    o AS (
        INSERT INTO scan_projection_outbox (kind, execution_id, owner_id, created_at,
                                            available_at, processed_at, processed_endpoints)
        SELECT 'execution', id, $4, finished_at, finished_at, finished_at + interval '1 minute',
               $5 * 1000
          FROM e),
    s AS (
        INSERT INTO scan_upload_stream (execution_id, upload_id, batch_count, confirmed_count,
                                        min_batch, max_batch, final_count, final_batch,
                                        confirmed_observations)
        SELECT id, md5(id::text)::uuid, $5, $5, 0, $5 - 1, 1, $5 - 1, $5 * 1000 FROM e)
    INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, is_final,
                                      checksum, observation_count, endpoint_count, status,
                                      storage_references, created_at, confirmed_at,
                                      dns_answers_recorded)
    SELECT e.id, md5(e.id::text)::uuid, 'main', b, b = $5 - 1, md5(e.id::text || b), 1000, 1000,
           'confirmed', ARRAY['bench-facts-2026.11'], e.finished_at, e.finished_at, true
      FROM e CROSS JOIN generate_series(0, $5 - 1) b";

pub fn run(opts: &Opts) -> Result<QueueResult, String> {
    let database = Database::open(opts)?;
    let db = database.migrated(2)?;
    let mut c = database.connect()?;
    let owner = crate::factory::owner(&mut c)?;
    let scanner = crate::factory::scanner(&mut c)?;
    let task: Uuid = c
        .query_one(
            "INSERT INTO tasks (owner_id, kind, status, executions_total)
             VALUES ($1, 'port_scan', 'running', 1) RETURNING id",
            &[&owner],
        )
        .map_err(|e| format!("task: {e}"))?
        .get(0);
    let due = opts.queue_due as i64;
    c.execute(SEED_DUE, &[&task, &scanner.id, &due, &owner])
        .map_err(|e| format!("due rows: {e}"))?;
    let admin_summary = admin_summary()?;
    let mut steps = Vec::new();
    let mut history = 0usize;
    let month_ago = chrono::Utc::now() - chrono::Duration::days(30);
    for target in std::iter::once(0).chain(opts.queue_history.iter().copied()) {
        let started = Instant::now();
        if target > history {
            eprintln!("   queue: history {history} -> {target} executions");
            let ids = (task, scanner.id, owner);
            fill(&database, ids, month_ago, history as i64, target as i64)?;
            history = target;
        }
        c.batch_execute("VACUUM ANALYZE")
            .map_err(|e| format!("vacuum: {e}"))?;
        let fill_seconds = started.elapsed().as_secs_f64();
        steps.push(measure(
            &db,
            &mut c,
            &admin_summary,
            (opts.queue_samples, opts.queue_runs),
            history,
            fill_seconds,
        )?);
    }
    let plans = plans(&mut c, &admin_summary)?;
    // The oldest tenth: the rate is retention's at that table size, in a tenth of the time
    // all of it would take.
    let before: chrono::DateTime<chrono::Utc> = c
        .query_one(PRUNE_BEFORE, &[&(history as i64 / 10)])
        .map_err(|e| format!("prune cut-off: {e}"))?
        .get(0);
    let started = Instant::now();
    let mut pruned = Pruned::default();
    records::prune(&db, before, 1000, &AtomicBool::new(false), &mut pruned)
        .map_err(|e| format!("prune: {e}"))?;
    Ok(QueueResult {
        due: opts.queue_due,
        samples: opts.queue_samples,
        runs: opts.queue_runs,
        steps,
        plans,
        prune: (pruned, started.elapsed().as_secs_f64()),
    })
}

// The finish time before which the oldest $1 history executions finished (the due rows
// finished now, after all of them).
const PRUNE_BEFORE: &str = "
    SELECT finished_at FROM executions WHERE finished_at IS NOT NULL
     ORDER BY finished_at, id OFFSET $1 LIMIT 1";

/// Adds history executions `from..to` (their times `from` ms after `month_ago` on), in
/// chunks over two sessions: PostgreSQL writes on both cores, for a fill that is the
/// queue scenario's longest step.
fn fill(
    database: &Database,
    (task, scanner, owner): (Uuid, Uuid, Uuid),
    month_ago: chrono::DateTime<chrono::Utc>,
    from: i64,
    to: i64,
) -> Result<(), String> {
    let chunks: Vec<(i64, i64)> = (from..to)
        .step_by(FILL_CHUNK as usize)
        .map(|start| (start, (to - start).min(FILL_CHUNK)))
        .collect();
    let write = |mine: Vec<(i64, i64)>| -> Result<(), String> {
        let mut c = database.connect()?;
        for (start, n) in mine {
            let first = month_ago + chrono::Duration::milliseconds(start);
            let mut tx = c.transaction().map_err(|e| e.to_string())?;
            tx.batch_execute("SET LOCAL session_replication_role = replica")
                .map_err(|e| e.to_string())?;
            tx.execute(
                FILL_HISTORY,
                &[&task, &scanner, &n, &owner, &RECEIPTS_PER_EXECUTION, &first],
            )
            .map_err(|e| format!("history: {e}"))?;
            tx.commit().map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let halves: [Vec<(i64, i64)>; 2] = [
        chunks.iter().copied().step_by(2).collect(),
        chunks.iter().copied().skip(1).step_by(2).collect(),
    ];
    std::thread::scope(|s| {
        let writers: Vec<_> = halves.map(|h| s.spawn(move || write(h))).into();
        writers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err("history: a writer panicked".into()))
        })
    })
}

/// `scripts/backlog.sql`'s summary statement: the file after its last psql meta-command.
fn admin_summary() -> Result<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/backlog.sql");
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let start = text
        .rfind("\\pset format unaligned")
        .and_then(|i| text[i..].find('\n').map(|n| i + n + 1))
        .ok_or("backlog.sql: no summary after \\pset format unaligned")?;
    Ok(text[start..].to_string())
}

fn timed(samples: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<[f64; 4], String> {
    let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for _ in 0..samples {
        let t = Instant::now();
        f()?;
        let _ = h.record(t.elapsed().as_micros() as u64);
    }
    Ok(quantiles(&h))
}

/// The run with the median p99 of `runs` (the lower middle of an even number), with the
/// lowest and highest p99.
fn median_run(mut runs: Vec<[f64; 4]>) -> ([f64; 4], (f64, f64)) {
    runs.sort_by(|a, b| a[2].total_cmp(&b[2]));
    let range = match (runs.first(), runs.last()) {
        (Some(lo), Some(hi)) => (lo[2], hi[2]),
        _ => (0.0, 0.0),
    };
    (
        runs.get(runs.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or_default(),
        range,
    )
}

/// Calls of `scripts/backlog.sql`'s summary per run: a quarter of the others' (at least
/// 100). It is what an operator runs by hand, and the slowest of the four.
pub fn summary_samples(samples: usize) -> usize {
    (samples / 4).max(100).min(samples)
}

fn measure(
    db: &Db,
    c: &mut Client,
    admin_summary: &str,
    (samples, runs): (usize, usize),
    history: usize,
    fill_seconds: f64,
) -> Result<Step, String> {
    let lease = Duration::from_secs(60);
    let e = |e: scanstore::projection::ProjectionError| e.to_string();
    let mut all: [Vec<[f64; 4]>; 4] = Default::default();
    // Runs interleaved, each statement in turn: a moment of the machine's drift falls on
    // all four alike.
    for _ in 0..runs.max(1) {
        // Each claim takes the oldest due row, and its release makes the row due last: the
        // next claim takes another.
        all[0].push(timed(samples, || {
            let claimed = outbox::claim(db, lease).map_err(e)?.ok_or("nothing due")?;
            outbox::release(db, &claimed).map_err(e)
        })?);
        let claimed = outbox::claim(db, lease).map_err(e)?.ok_or("nothing due")?;
        let mut page = 0;
        all[1].push(timed(samples, || {
            page += 1;
            outbox::checkpoint(
                db,
                &claimed,
                &format!("[\"10.0.0.{page}\",{page},\"tcp\"]"),
                1,
            )
            .map_err(e)
        })?);
        outbox::release(db, &claimed).map_err(e)?;
        all[2].push(timed(samples, || {
            scanstore::telemetry::sampler::backlog_now(db)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })?);
        all[3].push(timed(summary_samples(samples), || {
            c.simple_query(admin_summary)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })?);
    }
    let receipts: i64 = c
        .query_one("SELECT count(*) FROM scan_upload_receipts", &[])
        .map_err(|e| e.to_string())?
        .get(0);
    let [claim, checkpoint, backlog, admin] = all.map(median_run);
    Ok(Step {
        history,
        receipts: receipts as usize,
        fill_seconds,
        p99_range: [claim.1, checkpoint.1, backlog.1, admin.1],
        claim: claim.0,
        checkpoint: checkpoint.0,
        backlog: backlog.0,
        admin_summary: admin.0,
    })
}

/// The hot statements' plans as they run (the claim inside a transaction rolled back).
fn plans(c: &mut Client, admin_summary: &str) -> Result<Vec<(String, String)>, String> {
    let explain = |c: &mut Client,
                   sql: &str,
                   params: &[&(dyn postgres::types::ToSql + Sync)]|
     -> Result<String, String> {
        let mut tx = c.transaction().map_err(|e| e.to_string())?;
        let rows = tx
            .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), params)
            .map_err(|e| format!("explain: {e}"))?;
        tx.rollback().map_err(|e| e.to_string())?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n"))
    };
    let token = Uuid::new_v4();
    let id: i64 = c
        .query_one(
            "SELECT min(id) FROM scan_projection_outbox WHERE processed_at IS NULL",
            &[],
        )
        .map_err(|e| e.to_string())?
        .get(0);
    let before = chrono::Utc::now() - chrono::Duration::days(1);
    // A history execution's receipt, for the write path's statements on the full table.
    let (receipt, execution, upload): (i64, Uuid, Uuid) = c
        .query_one(
            "SELECT id, execution_id, upload_id FROM scan_upload_receipts
              ORDER BY id DESC LIMIT 1",
            &[],
        )
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .map_err(|e| e.to_string())?;
    let refs = vec!["bench-facts".to_string()];
    // Every history execution belongs to one task: what a final of it asks.
    let task: Uuid = c
        .query_one(
            "SELECT task_id FROM executions WHERE id = $1",
            &[&execution],
        )
        .map_err(|e| e.to_string())?
        .get(0);
    Ok(vec![
        (
            "claim".into(),
            explain(c, outbox::OUTBOX_CLAIM, &[&token, &60.0f64])?,
        ),
        (
            "checkpoint".into(),
            explain(c, outbox::OUTBOX_CHECKPOINT, &[&id, &token, &"[]", &1i64])?,
        ),
        (
            "backlog (sampler)".into(),
            explain(c, scanstore::telemetry::sampler::BACKLOG, &[])?,
        ),
        (
            "backlog summary (scripts/backlog.sql)".into(),
            explain(c, admin_summary, &[])?,
        ),
        (
            "upload: a batch's identity and its execution's streams".into(),
            explain(
                c,
                reserve::IDENTITY_AND_STREAMS,
                &[&execution, &upload, &"main", &0i32],
            )?,
        ),
        (
            "upload: a new batch's receipt (and lease)".into(),
            explain(
                c,
                reserve::INSERT_RECEIPT,
                &[
                    &execution,
                    &upload,
                    &"main",
                    &RECEIPTS_PER_EXECUTION,
                    &false,
                    &"sha256:bench",
                    &1000i32,
                    &1000i32,
                    &0i32,
                    &refs,
                    &60.0f64,
                ],
            )?,
        ),
        (
            "upload: the confirm (and abandon check)".into(),
            explain(c, confirm::CONFIRM_RECEIPT, &[&receipt])?,
        ),
        (
            "final: is the task settled (its executions not succeeded)".into(),
            explain(c, freshness::TASK_SETTLED, &[&task])?,
        ),
        (
            "final: the task's scan time (newest start of a succeeded execution)".into(),
            explain(c, freshness::SCAN_TIME, &[&task])?,
        ),
        (
            "retention: the next executions to prune".into(),
            explain(
                c,
                records::CANDIDATES,
                &[
                    &before,
                    &1000i64,
                    &chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
                    &Uuid::nil(),
                ],
            )?,
        ),
    ])
}
