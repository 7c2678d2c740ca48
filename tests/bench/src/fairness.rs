//! Fair and fresh under a backlog: on a fresh stack, one big execution is uploaded with
//! publication off and then published, and while it is, small executions finish one after
//! another, each timed from its final's answer to the moment the read API says
//! `projection_status: ready` — once with the configured publishers and once with a single
//! one, which only the yield between a row's ticks lets them past.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use indicatif::ProgressBar;
use postgres::Client;
use serde_json::Value;
use uuid::Uuid;

use crate::logs;
use crate::scanner::{self, Job};
use crate::scenario::{bar, es_target, jobs, prefix, pretouch_mib, seconds as secs};
use crate::stack::{self, Database, ServeCfg, PAGES_PER_TICK};
use crate::{factory, Opts};

/// The small executions' endpoints start here: far from the big one's (from 0) and from a
/// warm-up's (40 M), so none merges into another's documents.
const SMALL_FIRST: usize = 30_000_000;
/// How often a waiting client reads its execution's status.
const POLL: Duration = Duration::from_millis(25);
/// The rest of the big publication, estimated from its pace so far, is split into this
/// many more slots than there are small executions left: their own turns slow the big one
/// down, and the last of them must still finish while it publishes.
const SPARE_SLOTS: usize = 5;
/// A small execution not ready after this long fails the run.
const READY_TIMEOUT: Duration = Duration::from_secs(600);

/// One small execution.
pub struct Sample {
    /// Seconds from the big one's first claim to this one's final answer.
    pub at_s: f64,
    /// Final answered → its status first read as `ready` (client side, through the API).
    pub ready_s: f64,
    /// Final answered → its outbox row's `processed_at` (server side).
    pub processed_s: f64,
    /// The big one had not finished when this one was read as ready.
    pub during_backlog: bool,
    /// Final answered → the big one's `processed_at`: at least what this one would have
    /// waited behind a publisher that kept the big one's row to the end.
    pub big_left_s: f64,
}

/// One run of the scenario at a number of publishers.
pub struct FairRun {
    pub workers: usize,
    pub samples: Vec<Sample>,
    /// Mean seconds between two small executions' starts.
    pub interval_s: f64,
    /// The big one's pages, claims (one per tick: each but the last ends in a yield) and
    /// seconds from its first claim to its `processed_at`.
    pub big_pages: usize,
    pub big_claims: usize,
    pub big_seconds: f64,
}

/// Nearest-rank percentile `p` (0–100) of `v`; with 20 values p99 is the largest.
fn rank(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((p / 100.0 * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1));
    s.get(i - 1).copied().unwrap_or(0.0)
}

impl FairRun {
    /// p50, p99 and max of `f` over the small executions.
    pub fn quantiles(&self, f: fn(&Sample) -> f64) -> [f64; 3] {
        let v: Vec<f64> = self.samples.iter().map(f).collect();
        [rank(&v, 50.0), rank(&v, 99.0), rank(&v, 100.0)]
    }

    /// Ready p99 (client side).
    pub fn ready_p99(&self) -> f64 {
        self.quantiles(|s| s.ready_s)[1]
    }

    /// Small executions ready while the big one was still publishing.
    pub fn during(&self) -> usize {
        self.samples.iter().filter(|s| s.during_backlog).count()
    }
}

pub struct FairnessResult {
    pub backlog: usize,
    pub endpoints: usize,
    pub page_size: usize,
    pub pages_per_tick: usize,
    /// The configured publishers' run first, then the single publisher's.
    pub runs: Vec<FairRun>,
}

pub fn run(opts: &Opts, dir: &Path) -> Result<FairnessResult, String> {
    let backlog = opts.fairness_backlog.unwrap_or(1_000_000);
    let mut runs = Vec::new();
    let mut workers = vec![opts.workers.max(1)];
    if workers[0] != 1 {
        workers.push(1);
    }
    for w in workers {
        eprintln!(
            "== fair and fresh: {} executions of {} endpoints while {backlog} publish, projection.workers {w}",
            opts.fairness_executions, opts.fairness_endpoints
        );
        let r = run_once(opts, backlog, w, dir)?;
        eprintln!(
            "   ready p50 / p99 / max {:.2} / {:.2} / {:.2} s, {} of {} during the backlog",
            r.quantiles(|s| s.ready_s)[0],
            r.ready_p99(),
            r.quantiles(|s| s.ready_s)[2],
            r.during(),
            r.samples.len()
        );
        runs.push(r);
    }
    Ok(FairnessResult {
        backlog,
        endpoints: opts.fairness_endpoints,
        page_size: opts.page_size,
        pages_per_tick: PAGES_PER_TICK,
        runs,
    })
}

// The big one's progress: endpoints checkpointed, and when it was done.
const PROGRESS: &str = "
    SELECT processed_endpoints, processed_at FROM scan_projection_outbox WHERE execution_id = $1";

fn progress(c: &mut Client, execution: Uuid) -> Result<(i64, Option<DateTime<Utc>>), String> {
    match c
        .query_opt(PROGRESS, &[&execution])
        .map_err(|e| format!("outbox progress: {e}"))?
    {
        Some(r) => Ok((r.get(0), r.get(1))),
        None => Ok((0, None)),
    }
}

/// Polls the big one's row until `done(processed, finished)` or `timeout`; returns the
/// last reading and when it was made.
fn wait_for(
    c: &mut Client,
    execution: Uuid,
    timeout: Duration,
    done: impl Fn(i64, bool) -> bool,
) -> Result<(i64, Option<DateTime<Utc>>, Instant), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let (p, at) = progress(c, execution)?;
        if done(p, at.is_some()) || Instant::now() > deadline {
            return Ok((p, at, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_once(opts: &Opts, backlog: usize, workers: usize, dir: &Path) -> Result<FairRun, String> {
    let name = format!("fairness-w{workers}");
    let n = opts.fairness_executions;
    let db = Database::open(opts)?;
    let (_emulator, es_url) = es_target(opts, dir, &name, pretouch_mib(opts, backlog))?;
    let prefix = prefix();
    let mut cfg = ServeCfg {
        pool_size: opts.pool_size,
        workers: 0,
        // Each small execution's scanner and its status reader.
        worker_threads: (2 * n + 8).max(16),
        bulk_max_concurrency: opts.bulk_concurrency,
        lease_seconds: 120,
        heartbeat_seconds: 20,
        nice: 0,
    };
    let label = format!("{name}-upload");
    let mut up = stack::scanstore(opts, &db, &es_url, &prefix, &cfg, dir, &label)?;
    let mut c = db.connect()?;
    let (owner, token) = factory::owner_with_token(&mut c)?;
    let one = |c: &mut Client, size: usize, first: usize| -> Result<Job, String> {
        let mut j = jobs(c, owner, (1, size, first), opts.batch, opts.dns_every)?;
        j.pop().ok_or_else(|| "no job".to_string())
    };
    let big = one(&mut c, backlog, 0)?;
    let big_id = big.execution_id;
    let small = (0..n)
        .map(|i| {
            one(
                &mut c,
                opts.fairness_endpoints,
                SMALL_FIRST + i * opts.fairness_endpoints,
            )
        })
        .collect::<Result<Vec<Job>, String>>()?;
    let b = bar(backlog as u64, &format!("upload {backlog} (backlog)"));
    scanner::run(&up.url, vec![big], 0, &b)?;
    b.finish_and_clear();
    up.stop();

    // Publication: the big one is due at once. Once it is under way (its first
    // checkpoint and a tick more), the small ones finish one after another; before each,
    // the rest of the big one at its pace so far is split into a slot per small one left
    // plus SPARE_SLOTS, and the next starts a slot later. (Its pace is re-read every time:
    // the first ticks of a publication are slower than the rest, and a fixed interval
    // would either crowd the small ones at its start or leave the last ones after its end.)
    cfg.workers = workers;
    let label = format!("{name}-publish");
    let mut publisher = stack::scanstore(opts, &db, &es_url, &prefix, &cfg, dir, &label)?;
    let timeout = Duration::from_secs(opts.publish_timeout);
    let (p1, _, t1) = wait_for(&mut c, big_id, timeout, |p, done| p > 0 || done)?;
    // A tick's worth more before the first one, so that there is a pace to read.
    let tick = (PAGES_PER_TICK * opts.page_size) as i64;
    wait_for(&mut c, big_id, Duration::from_secs(5), |p, done| {
        p >= p1 + tick || done
    })?;
    let tasks: Vec<Uuid> = small
        .iter()
        .map(|j| {
            c.query_one(
                "SELECT task_id FROM executions WHERE id = $1",
                &[&j.execution_id],
            )
            .map(|r| r.get(0))
            .map_err(|e| format!("task of execution: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let url = publisher.url.clone();
    let started = Instant::now();
    let slot = |c: &mut Client, left_to_start: usize| -> Result<Duration, String> {
        let (p, done) = progress(c, big_id)?;
        if done.is_some() {
            return Ok(Duration::ZERO);
        }
        let rate = (p - p1).max(1) as f64 / t1.elapsed().as_secs_f64().max(1e-3);
        let rest = backlog.saturating_sub(p as usize) as f64 / rate;
        Ok(Duration::from_secs_f64(
            rest / (left_to_start + SPARE_SLOTS) as f64,
        ))
    };
    let finished: Vec<Result<Finished, String>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, (job, task)) in small.into_iter().zip(&tasks).enumerate() {
            if i > 0 {
                // Pacing only: a failed read starts the next one at once (the wait for the
                // big one's end below reports a database that is gone).
                std::thread::sleep(slot(&mut c, n - i).unwrap_or_default());
            }
            let (url, token) = (&url, &token);
            handles.push(s.spawn(move || finish_and_wait(url, token, job, *task)));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("small execution thread panicked".into()))
            })
            .collect()
    });
    let spaced = started.elapsed().as_secs_f64() / n.saturating_sub(1).max(1) as f64;
    let (_, big_done, _) = wait_for(&mut c, big_id, timeout, |_, done| done)?;
    publisher.stop();
    let big_done = big_done.ok_or("the big execution was not published in time")?;
    let finished = finished.into_iter().collect::<Result<Vec<_>, _>>()?;

    let work = format!("execution:{big_id}");
    let events: Vec<logs::Event> = logs::read(&stack::log_path(dir, &label))
        .into_iter()
        .filter(|e| e.get("work") == Some(work.as_str()))
        .collect();
    let of_big = |name: &str| events.iter().filter(|e| e.name == name).count();
    let first_claim = events
        .iter()
        .find(|e| e.name == "ScanProjectionClaimed")
        .map(|e| e.at)
        .ok_or("the big execution's claim is not in the log")?;
    let mut samples = Vec::new();
    for f in finished {
        let (_, processed) = progress(&mut c, f.execution)?;
        let processed = processed.ok_or("a small execution ready without processed_at")?;
        samples.push(Sample {
            at_s: secs(first_claim, f.final_at),
            ready_s: f.ready_s,
            processed_s: secs(f.final_at, processed),
            during_backlog: f.ready_at < big_done,
            big_left_s: secs(f.final_at, big_done),
        });
    }
    Ok(FairRun {
        workers,
        samples,
        interval_s: spaced,
        big_pages: of_big("ScanProjectionPageCompleted"),
        big_claims: of_big("ScanProjectionClaimed"),
        big_seconds: secs(first_claim, big_done),
    })
}

/// A small execution finished and read back as ready.
struct Finished {
    execution: Uuid,
    /// When its final was answered.
    final_at: DateTime<Utc>,
    /// When its status was first read as `ready`.
    ready_at: DateTime<Utc>,
    ready_s: f64,
}

/// Uploads `job`'s batches and final as its scanner does, then reads its task's executions
/// as the owner's client would, every [`POLL`], until its `projection_status` is `ready`.
fn finish_and_wait(url: &str, token: &str, job: Job, task: Uuid) -> Result<Finished, String> {
    let execution = job.execution_id;
    scanner::run(url, vec![job], 0, &ProgressBar::hidden())?;
    let (answered, final_at) = (Instant::now(), Utc::now());
    let agent = scanner::agent();
    let status_url = format!("{url}/api/v1/tasks/{task}/executions");
    loop {
        let mut r = agent
            .get(&status_url)
            .header("Authorization", &format!("Bearer {token}"))
            .call()
            .map_err(|e| format!("GET {status_url}: {e}"))?;
        let text = r.body_mut().read_to_string().unwrap_or_default();
        if r.status() != 200 {
            return Err(format!("GET {status_url}: {} {text}", r.status()));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{status_url}: {e}"))?;
        let ready = v["executions"].as_array().is_some_and(|all| {
            all.iter().any(|e| {
                e["id"].as_str() == Some(&execution.to_string())
                    && e["projection_status"] == "ready"
            })
        });
        if ready {
            return Ok(Finished {
                execution,
                final_at,
                ready_at: Utc::now(),
                ready_s: answered.elapsed().as_secs_f64(),
            });
        }
        if answered.elapsed() > READY_TIMEOUT {
            return Err(format!(
                "execution {execution} not ready after {READY_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::rank;

    #[test]
    fn p99_of_twenty_is_the_slowest_and_p50_the_tenth() {
        let v: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        assert_eq!(rank(&v, 99.0), 20.0);
        assert_eq!(rank(&v, 50.0), 10.0);
        assert_eq!(rank(&[], 99.0), 0.0);
    }
}
