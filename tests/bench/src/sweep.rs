//! Scanners at once: at each `--sweep-sizes` size, the same uploads made by 4, 16 and 64
//! concurrent scanners (`--sweep-scanners`), each round beside its own raw-bulk ceiling of
//! the very same documents, with the latency per class, the connection pool's behaviour and
//! what the uploads cost the machine's CPU per endpoint.

use std::path::Path;

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use postgres::Client;

use crate::ceiling::{self, Sent};
use crate::cpu::{Role, Sampler, Usage};
use crate::logs::{self, pct, LogStats};
use crate::report::quantiles;
use crate::scanner::{self, Job, Latencies, UploadOutcome};
use crate::scenario::{self, bar, watch_postgres, Split};
use crate::stack::{self, Database, ServeCfg};
use crate::{factory, Opts};

/// One round at one scanner count: the ceiling, then scanstore's upload of the same
/// documents (fresh executions, fresh indices).
pub struct Round {
    pub ceiling: Sent,
    pub ceiling_cpu: Usage,
    pub endpoints: usize,
    pub seconds: f64,
    pub cpu: Usage,
    /// Requests the scanners sent (batches, confirmed retries, DNS sidecars).
    pub requests: usize,
    /// Statements this database ran during the upload (`pg_stat_statements`), when the
    /// extension can be read.
    pub statements: Option<i64>,
    /// Seconds the emulator's store lock was held during the upload (`None`: a real cluster).
    pub lock_held: Option<f64>,
}

impl Round {
    pub fn endpoints_per_s(&self) -> f64 {
        self.endpoints as f64 / self.seconds.max(1e-9)
    }

    pub fn ratio(&self) -> f64 {
        self.endpoints_per_s() / self.ceiling.endpoints_per_s().max(1e-9)
    }

    /// PostgreSQL statements (each one round trip) per request.
    pub fn statements_per_request(&self) -> Option<f64> {
        self.statements
            .map(|n| n as f64 / self.requests.max(1) as f64)
    }
}

/// Every round of one (size, scanners) point.
pub struct Point {
    pub size: usize,
    pub scanners: usize,
    pub rounds: Vec<Round>,
    /// Every round's requests.
    pub latencies: Latencies,
    /// Every round's scanstore log.
    pub logs: LogStats,
    /// The highest of the rounds' scanstore peak RSS.
    pub rss_kib: Option<u64>,
    /// The paced uploads (`paced_rounds`); none with `--sweep-pace 0`.
    pub paced: Option<Paced>,
    /// The ceiling's client threads, as many as scanstore's bulk permits.
    pub ceiling_threads: usize,
}

/// Uploads paced to the same offered load at every scanner count.
pub struct Paced {
    /// Offered, endpoints per second in all.
    pub per_s: f64,
    /// Reached (the median round's).
    pub endpoints_per_s: f64,
    pub latencies: Latencies,
    pub logs: LogStats,
}

impl Paced {
    pub fn p99(&self, class: &str) -> (f64, u64) {
        p99_of(&self.latencies, class)
    }
}

/// (p99 ms, requests) of a latency class.
fn p99_of(l: &Latencies, class: &str) -> (f64, u64) {
    let h: &Histogram<u64> = &l.0[class];
    (quantiles(h)[2], h.len())
}

/// The median of `f` over the rounds, where every round has it.
fn median_where_all(rounds: &[Round], f: impl Fn(&Round) -> Option<f64>) -> Option<f64> {
    rounds
        .iter()
        .all(|r| f(r).is_some())
        .then(|| median_of(rounds, |r| f(r).unwrap_or(0.0)).0)
}

/// The median of `f` over the rounds, with its range.
fn median_of(rounds: &[Round], f: impl Fn(&Round) -> f64) -> (f64, f64, f64) {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    match (v.first(), v.last()) {
        (Some(&lo), Some(&hi)) => (v[(v.len() - 1) / 2], lo, hi),
        _ => (0.0, 0.0, 0.0),
    }
}

impl Point {
    /// Upload throughput over its ceiling's: the median round's, with the range.
    pub fn ratio(&self) -> (f64, f64, f64) {
        median_of(&self.rounds, Round::ratio)
    }

    pub fn endpoints_per_s(&self) -> (f64, f64, f64) {
        median_of(&self.rounds, Round::endpoints_per_s)
    }

    pub fn ceiling_per_s(&self) -> (f64, f64, f64) {
        median_of(&self.rounds, |r| r.ceiling.endpoints_per_s())
    }

    /// CPU µs per endpoint of `role` in the upload (`ceiling`: in the ceiling's run), the
    /// median round's.
    pub fn cpu_us(&self, role: Role, ceiling: bool) -> Option<f64> {
        median_where_all(&self.rounds, |r| {
            let u = if ceiling { &r.ceiling_cpu } else { &r.cpu };
            u.roles[role as usize].map(|s| s * 1e6 / r.endpoints.max(1) as f64)
        })
    }

    /// The whole machine's CPU (every watched process) per endpoint, µs, in the upload
    /// (`ceiling`: in the ceiling's run), the median round's.
    pub fn machine_us(&self, ceiling: bool) -> f64 {
        median_of(&self.rounds, |r| {
            let u = if ceiling { &r.ceiling_cpu } else { &r.cpu };
            u.total() * 1e6 / r.endpoints.max(1) as f64
        })
        .0
    }

    /// The ratio the machine's CPU allows: `cpus` cores spent at the upload's CPU per
    /// endpoint, over the ceiling's throughput. Where the upload keeps the cores busy, no
    /// saving outside scanstore's share brings the ratio past it. With the CPUs split
    /// (`--emulator-cpus`) each side spends its own cores, and the side that runs out first
    /// bounds the upload.
    pub fn cpu_bound_ratio(&self, cpus: usize) -> f64 {
        let machine = self.machine_us(false).max(1e-9);
        let per_s = match crate::cpus::split() {
            Some(split) => {
                let emulator = self.cpu_us(Role::Emulator, false).unwrap_or(0.0);
                let rest = split.rest.len() as f64 * 1e6 / (machine - emulator).max(1e-9);
                rest.min(split.emulator.len() as f64 * 1e6 / emulator.max(1e-9))
            }
            None => cpus as f64 * 1e6 / machine,
        };
        per_s / self.ceiling_per_s().0.max(1e-9)
    }

    /// The share of the wall time the emulator's store lock was held, in the upload
    /// (`ceiling`: in the ceiling's runs), the median round's.
    pub fn lock_share(&self, ceiling: bool) -> Option<f64> {
        median_where_all(&self.rounds, |r| match ceiling {
            true => r.ceiling.lock_share(),
            false => r.lock_held.map(|held| held / r.seconds.max(1e-9)),
        })
    }

    /// How long the emulator's store lock was held per endpoint written, µs, in the upload
    /// (`ceiling`: in the ceiling's runs), the median round's. Beside the emulator's CPU per
    /// endpoint it says whether the lock was held longer for the same work.
    pub fn lock_us_per_endpoint(&self, ceiling: bool) -> Option<f64> {
        median_where_all(&self.rounds, |r| match ceiling {
            true => r.ceiling.lock_held.map(|held| {
                held * 1e6 / (r.ceiling.runs.len().max(1) * r.ceiling.endpoints.max(1)) as f64
            }),
            false => r
                .lock_held
                .map(|held| held * 1e6 / r.endpoints.max(1) as f64),
        })
    }

    /// Bulk request time per operation carried, µs: scanstore's (`ElasticsearchBulkCompleted`,
    /// every round) and the ceiling's (its client threads × its wall time, the median
    /// round's). With as many requests in flight on both sides, the throughput ratio follows
    /// theirs, less the time either side has fewer in flight.
    pub fn in_flight_us_per_op(&self) -> (f64, f64) {
        let threads = self.ceiling_threads;
        let ops: f64 = self.logs.upload_bulk_ops.iter().sum();
        let upload = self.logs.bulk_request_ms.iter().sum::<f64>() * 1e3 / ops.max(1.0);
        let ceiling = median_of(&self.rounds, |r| {
            threads as f64 * r.ceiling.seconds() * 1e6 / r.ceiling.ops.max(1) as f64
        });
        (upload, ceiling.0)
    }

    /// Cores the whole machine kept busy (`/proc/stat`), the median round's.
    pub fn machine_cores(&self, ceiling: bool) -> Option<f64> {
        median_where_all(&self.rounds, |r| {
            let u = if ceiling { &r.ceiling_cpu } else { &r.cpu };
            u.machine.map(|m| m / u.wall.max(1e-9))
        })
    }

    /// Cores busy (every watched process), the median round's.
    pub fn cores(&self, ceiling: bool) -> f64 {
        median_of(&self.rounds, |r| {
            let u = if ceiling { &r.ceiling_cpu } else { &r.cpu };
            u.total() / u.wall.max(1e-9)
        })
        .0
    }

    /// PostgreSQL statements per request, the median round's.
    pub fn statements_per_request(&self) -> Option<f64> {
        median_where_all(&self.rounds, Round::statements_per_request)
    }

    /// (p99 ms, requests) of a latency class over every round.
    pub fn p99(&self, class: &str) -> (f64, u64) {
        p99_of(&self.latencies, class)
    }
}

pub struct SweepResult {
    pub points: Vec<Point>,
}

impl SweepResult {
    pub fn at(&self, size: usize, scanners: usize) -> Option<&Point> {
        self.points
            .iter()
            .find(|p| p.size == size && p.scanners == scanners)
    }

    pub fn sizes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.points.iter().map(|p| p.size).collect();
        v.dedup();
        v
    }
}

/// Most endpoints of a round's small-batch warm-up: a hundred batches, ten or more per
/// pooled session, plan every statement as well as the thousand a tenth of 1 M sends.
const WARM_UP_SMALL: usize = 10_000;

/// The scanner count at which the upload target is judged.
pub const TARGET_SCANNERS: usize = 16;

/// Rounds per point: `--sweep-rounds`; from 1 M up (the sweep's longest rounds, so they are
/// had fewer) `--sweep-large-rounds` at the target's scanner count, `--sweep-large-side-rounds`
/// at the others.
fn rounds(opts: &Opts, size: usize, scanners: usize) -> usize {
    match (crate::is_large(size), scanners == TARGET_SCANNERS) {
        (true, true) => opts.sweep_large_rounds.max(1),
        (true, false) => opts.sweep_large_side_rounds.max(1),
        (false, _) => opts.sweep_rounds.unwrap_or(1).max(1),
    }
}

/// Paced rounds per point: enough for `--finals` finals (one per scanner and round), so that
/// the final p99 the latency target compares across scanner counts is a p99 at the fewest
/// scanners too, not their slowest final; below 1 M at least as many as flat out. From
/// 1 M up, whose rounds are long, at most `--sweep-paced-large-rounds` at the fewest and the
/// most scanners, the two counts the latency target compares, and
/// `--sweep-large-side-rounds` at those between, reported beside them. A quick run keeps
/// its one round.
fn paced_rounds(opts: &Opts, size: usize, scanners: usize) -> usize {
    let rounds = rounds(opts, size, scanners);
    let for_finals = opts.finals().div_ceil(scanners.max(1));
    let counts = &opts.sweep_scanners;
    let compared = [counts.iter().min(), counts.iter().max()].contains(&Some(&scanners));
    if crate::is_large(size) {
        match compared {
            true => for_finals.clamp(1, opts.sweep_paced_large_rounds.max(1)),
            false => opts.sweep_large_side_rounds.max(1),
        }
    } else if !opts.quick {
        rounds.max(for_finals)
    } else {
        rounds
    }
}

/// Every size of the sweep, each on a fresh emulator and database.
pub fn run(opts: &Opts, dir: &Path, sampler: &Sampler) -> Result<SweepResult, String> {
    let mut points = Vec::new();
    for &size in &opts.sweep_sizes {
        eprintln!(
            "== scanners at once, {size} endpoints: {:?} scanners",
            opts.sweep_scanners
        );
        points.extend(size_sweep(opts, size, dir, sampler)?);
    }
    Ok(SweepResult { points })
}

/// What every upload of one size's sweep shares.
struct Ctx<'a> {
    opts: &'a Opts,
    db: &'a Database,
    es_url: &'a str,
    prefix: &'a str,
    dir: &'a Path,
    sampler: &'a Sampler,
}

/// What one upload by a fresh scanstore into freshly installed indices gave.
struct Upload {
    outcome: UploadOutcome,
    events: Vec<logs::Event>,
    rss_kib: Option<u64>,
    cpu: Usage,
    statements: Option<i64>,
    lock_held: Option<f64>,
}

// Every statement this database has run, as `pg_stat_statements` counts them (BEGIN and
// COMMIT included); read before and after an upload, the difference is what it ran.
const STATEMENTS: &str = "
    SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
     WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// Statements run so far, when the extension is loaded and installed here.
fn statements(c: &mut Client) -> Option<i64> {
    c.query_one(STATEMENTS, &[]).ok().map(|r| r.get(0))
}

/// The warm-up uploads of one round, one after the other.
type Warm = Vec<Vec<Job>>;

/// Uploads `jobs` through a fresh scanstore into freshly installed indices (every upload
/// meets the store as the first does), optionally paced (`per_s` endpoints/s in all). The
/// scanstore is first warmed by `warm` (each uploaded flat out, untimed), as the publication's
/// publisher is: the ceiling has no process to start, and a deployed scanstore has long
/// since opened its database sessions, planned its statements and grown its heap.
fn upload(
    x: &Ctx,
    c: &mut Client,
    (warm, jobs): (Warm, Vec<Job>),
    label: &str,
    per_s: Option<f64>,
) -> Result<Upload, String> {
    let size: usize = jobs.iter().map(|j| j.plan.endpoints).sum();
    let cfg = ServeCfg {
        pool_size: x.opts.pool_size,
        workers: 0,
        worker_threads: scenario::http_threads(jobs.len()),
        bulk_max_concurrency: x.opts.bulk_concurrency,
        lease_seconds: 120,
        heartbeat_seconds: 20,
        nice: x.opts.sweep_nice,
    };
    scenario::drop_indices(x.es_url, x.prefix)?;
    let mut up = stack::scanstore(x.opts, x.db, x.es_url, x.prefix, &cfg, x.dir, label)?;
    x.sampler.watch(Role::Scanstore, up.pid());
    for w in warm {
        scanner::run(&up.url, w, 0, &ProgressBar::hidden())?;
    }
    let b = bar(size as u64, label);
    let before = statements(c);
    let held = stack::store_lock_held(x.es_url);
    let outcome = scanner::run_paced(&up.url, jobs, x.opts.retry_every, &b, per_s)?;
    let lock_held = held
        .zip(stack::store_lock_held(x.es_url))
        .map(|(before, after)| after - before);
    let span = outcome.span;
    // Less this reading's own statement.
    let ran = statements(c)
        .zip(before)
        .map(|(after, before)| after - before - 1);
    b.finish_and_clear();
    let rss_kib = up.peak_rss_kib();
    up.stop();
    // The timed upload's events: the warm-up's were logged before its clock started.
    let mut events = logs::read(&stack::log_path(x.dir, label));
    events.retain(|e| e.at.timestamp_micros() as f64 / 1e6 >= span.0);
    Ok(Upload {
        outcome,
        events,
        rss_kib,
        cpu: x.sampler.usage(span.0, span.1),
        statements: ran,
        lock_held,
    })
}

fn size_sweep(
    opts: &Opts,
    size: usize,
    dir: &Path,
    sampler: &Sampler,
) -> Result<Vec<Point>, String> {
    let db = Database::open(opts)?;
    let name = format!("sweep{size}");
    let (emulator, es_url) =
        scenario::es_target(opts, dir, &name, scenario::pretouch_mib(opts, size))?;
    if let Some(e) = &emulator {
        sampler.watch(Role::Emulator, e.pid());
    }
    let prefix = scenario::prefix();
    let cp = format!("{prefix}-ceiling");
    db.migrated(1)?;
    let mut c = db.connect()?;
    // For the statement counts, in a database of the bench's own (not a deployment's given
    // by `--database-url`); where the library is not preloaded, they are left out.
    let mut counter = db.connect()?;
    if opts.database_url.is_none() {
        let _ = counter.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    }
    watch_postgres(&mut c, sampler);
    let owner = factory::owner(&mut c)?;
    let x = Ctx {
        opts,
        db: &db,
        es_url: &es_url,
        prefix: &prefix,
        dir,
        sampler,
    };
    // Each round's timed executions, beside the two warm-ups' (endpoints of their own): a
    // tenth of the size (at most WARM_UP_SMALL) in batches a tenth as large, so that every
    // pooled session has planned every statement, then one batch per scanner as large as
    // the round's largest (a full one, or the whole execution where that is smaller), so
    // that the heap has grown to what as many batches at once need.
    let mut new_jobs = |n: usize| -> Result<(Warm, Vec<Job>), String> {
        let small = (
            n,
            (size / 10).min(WARM_UP_SMALL).max(n),
            scenario::WARM_UP_FIRST,
        );
        let full = (
            n,
            (n * opts.batch).min(size),
            scenario::WARM_UP_FIRST + size,
        );
        let warm = [(small, (opts.batch / 10).max(1)), (full, opts.batch)]
            .into_iter()
            .map(|(w, batch)| scenario::jobs(&mut c, owner, w, batch, opts.dns_every))
            .collect::<Result<_, _>>()?;
        let timed = scenario::jobs_split(
            &mut c,
            owner,
            (n, size, 0),
            opts.batch,
            opts.dns_every,
            opts.sweep_split,
        )?;
        Ok((warm, timed))
    };
    let mut points = Vec::new();
    for &n in &opts.sweep_scanners {
        let mut point = Point {
            size,
            scanners: n,
            rounds: Vec::new(),
            latencies: Latencies::new(),
            logs: LogStats::default(),
            rss_kib: None,
            paced: None,
            ceiling_threads: opts.bulk_concurrency,
        };
        let mut events = Vec::new();
        for round in 1..=rounds(opts, size, n) {
            let (warm, jobs) = new_jobs(n)?;
            let sent = ceiling::upload(&es_url, &cp, owner, &jobs, opts)?;
            let ceiling_cpu = scenario::usage(sampler, &sent.spans);
            let label = format!("{name}-{n}scanners-round{round}");
            let u = upload(&x, &mut counter, (warm, jobs), &label, None)?;
            point.rss_kib = point.rss_kib.max(u.rss_kib);
            events.extend(u.events);
            point.latencies.merge(&u.outcome.latencies);
            point.rounds.push(Round {
                ceiling: sent,
                ceiling_cpu,
                endpoints: u.outcome.endpoints,
                seconds: u.outcome.wall.as_secs_f64(),
                cpu: u.cpu,
                requests: u.outcome.requests,
                statements: u.statements,
                lock_held: u.lock_held,
            });
        }
        point.logs = LogStats::from_events(&events);
        points.push(point);
    }
    // Paced: the same offered load whatever the number of scanners, a share of what the
    // fewest scanners reached flat out.
    let fewest = points
        .iter()
        .min_by_key(|p| p.scanners)
        .map(|p| p.endpoints_per_s().0);
    if let Some(flat_out) = fewest.filter(|_| opts.sweep_pace > 0.0) {
        let rate = flat_out * opts.sweep_pace;
        for p in &mut points {
            let (mut latencies, mut events, mut reached) =
                (Latencies::new(), Vec::new(), Vec::new());
            for round in 1..=paced_rounds(opts, size, p.scanners) {
                let jobs = new_jobs(p.scanners)?;
                let label = format!("{name}-{}scanners-paced{round}", p.scanners);
                let u = upload(&x, &mut counter, jobs, &label, Some(rate))?;
                reached.push(u.outcome.endpoints as f64 / u.outcome.wall.as_secs_f64().max(1e-9));
                latencies.merge(&u.outcome.latencies);
                events.extend(u.events);
            }
            reached.sort_by(f64::total_cmp);
            p.paced = Some(Paced {
                per_s: rate,
                endpoints_per_s: reached[(reached.len() - 1) / 2],
                latencies,
                logs: LogStats::from_events(&events),
            });
        }
    }
    scenario::drop_indices(&es_url, &prefix)?;
    Ok(points)
}

fn fmt_range((m, lo, hi): (f64, f64, f64), digits: usize) -> String {
    format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})")
}

fn cores(v: Option<f64>) -> String {
    v.map_or("–".into(), |c| format!("{c:.2}"))
}

fn share(v: Option<f64>) -> String {
    v.map_or("–".into(), |s| format!("{:.0} %", s * 100.0))
}

fn us(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.1}"))
}

/// The report's section.
pub fn section(o: &mut String, opts: &Opts, s: &SweepResult) {
    use std::fmt::Write as _;
    let cpus = crate::report::machine().cpus;
    let _ = writeln!(
        o,
        "\n## Scanners at once\n\nAt each size, the same uploads by {:?} concurrent scanners (each one execution, half `port_scan`, half `mixed`; {}), `pool_size` {} throughout and HTTP `worker_threads` twice the scanners (at least 16), scanstore at nice {} (`--sweep-nice`: a unit's `Nice=` beside Elasticsearch, README \"Deployment\"). A round is the ceiling (the very documents as raw `_bulk`, {} client threads) then scanstore's upload of fresh executions into freshly installed indices by a fresh scanstore, warmed first as the publication's publisher is (untimed: the same scanners upload a tenth of the size, at most {WARM_UP_SMALL} endpoints, in batches a tenth as large, so that every pooled session has planned every statement, then one batch each as large as the round's largest, so that its heap has grown; the ceiling has no process to start, and a deployed scanstore has long since paid both), every scanner's batch bodies built before the clock starts as the ceiling's are; rounds per point: {} below 1 M, from 1 M {} at {TARGET_SCANNERS} scanners (the target's) and {} at the others (`--sweep-rounds`, `--sweep-large-rounds`, `--sweep-large-side-rounds`). Throughput and CPU are the median round's (range in brackets); latencies count every round's requests. CPU is µs per endpoint read from `/proc`: scanstore's and PostgreSQL's during the upload, the ceiling client's (the bench's threads sending `_bulk`) during the ceiling; the emulator's during each. *Machine* µs per endpoint is every watched process's CPU (emulator, scanstore, PostgreSQL, the bench: the simulated scanners sending in the upload, the `_bulk` client in the ceiling) over the endpoints; *the ratio the CPU allows* is the machine's {} cores spent at the upload's machine µs per endpoint, over the ceiling's throughput: where the upload keeps every core busy, it is the most any upload on this machine could reach against that ceiling, and only cutting CPU anywhere in the upload's path (scanstore's, PostgreSQL's, the emulator's work for it, the scanners') moves it. *Whole machine* cores busy is every CPU's busy time from `/proc/stat` (every process, the kernel's threads, interrupts) over the wall time: where it stays under the CPU count, neither run was bound by the CPU alone. *Emulator store lock held* is the share of the wall time the emulator's single store lock, under which it applies every write, was held (`GET /_emulator/store`, read before and after each run; a real cluster has none, –): a run that keeps it held all the time is bound by it. *Store lock µs held per endpoint* is that time over the endpoints written: where the emulator spends the same CPU per endpoint on both sides but holds its lock longer in the upload, its lock holder waited for a core. *ES bulk permit wait* is how long scanstore's bulk requests waited for one of the `bulk_max_concurrency` permits (`ElasticsearchBulkCompleted`, every round): where it is long, the permits were never idle and as many requests were in flight as the ceiling's client threads keep. *ES µs in flight per operation* is then what the ratio follows, less the time either side has fewer requests in flight (a round's start and end, the ceiling's final refresh): scanstore's bulk requests' time on the wire over the operations they carried, against the ceiling's threads × its wall time over its operations. PostgreSQL statements per request: what `pg_stat_statements` counted in the bench's database during the upload (BEGIN and COMMIT included, each a round trip; the sampler's few beside them) over the requests sent (batches, confirmed retries, DNS sidecar batches).\n",
        opts.sweep_scanners,
        match opts.sweep_split {
            Split::Endpoints => "size ÷ scanners endpoints each (`--sweep-split endpoints`)",
            Split::Observations =>
                "a `mixed` execution fewer endpoints than a `port_scan` one, by its DNS records and sidecar batches, so that every scanner sends about as many observations (`--sweep-split observations`)",
        },
        opts.pool_size,
        opts.sweep_nice,
        opts.bulk_concurrency,
        opts.sweep_rounds.unwrap_or(1),
        opts.sweep_large_rounds,
        opts.sweep_large_side_rounds,
        cpus
    );
    let _ = writeln!(o, "| endpoints | scanners | upload endpoints/s | ceiling endpoints/s | ratio | cores busy, upload / ceiling | whole machine cores busy, upload / ceiling | emulator store lock held, upload / ceiling | store lock µs held per endpoint, upload / ceiling | machine µs/endpoint, upload / ceiling | ratio the CPU allows | scanstore µs/endpoint | PostgreSQL µs/endpoint | ceiling client µs/endpoint | emulator µs/endpoint, upload / ceiling | ES bulk permit wait p50 ms | ES µs in flight per operation, upload / ceiling | normal p99 ms | final p99 ms (finals) | PostgreSQL statements per request | pool wait p99 ms | ES requests sent holding a connection | peak RSS MiB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for p in &s.points {
        let (normal, _) = p.p99("normal");
        let (fin, finals) = p.p99("final");
        let in_flight = p.in_flight_us_per_op();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.2} / {:.2} | {} / {} | {} / {} | {} / {} | {:.1} / {:.1} | {:.2} | {} | {} | {} | {} / {} | {:.1} | {:.1} / {:.1} | {normal:.1} | {fin:.1} ({finals}) | {} | {:.1} | {} | {} |",
            p.size,
            p.scanners,
            fmt_range(p.endpoints_per_s(), 0),
            fmt_range(p.ceiling_per_s(), 0),
            fmt_range(p.ratio(), 2),
            p.cores(false),
            p.cores(true),
            cores(p.machine_cores(false)),
            cores(p.machine_cores(true)),
            share(p.lock_share(false)),
            share(p.lock_share(true)),
            us(p.lock_us_per_endpoint(false)),
            us(p.lock_us_per_endpoint(true)),
            p.machine_us(false),
            p.machine_us(true),
            p.cpu_bound_ratio(cpus),
            us(p.cpu_us(Role::Scanstore, false)),
            us(p.cpu_us(Role::Postgres, false)),
            us(p.cpu_us(Role::Bench, true)),
            us(p.cpu_us(Role::Emulator, false)),
            us(p.cpu_us(Role::Emulator, true)),
            pct(&p.logs.bulk_queue_wait_ms, 50.0),
            in_flight.0,
            in_flight.1,
            us(p.statements_per_request()),
            pct(&p.logs.all_waits(), 99.0),
            p.logs.es_requests_with_connection_held,
            p.rss_kib.map_or("–".into(), |k| format!("{:.0}", k as f64 / 1024.0)),
        );
    }
    paced_table(o, s);
}

/// The paced uploads' table, when measured.
fn paced_table(o: &mut String, s: &SweepResult) {
    use std::fmt::Write as _;
    if s.points.iter().all(|p| p.paced.is_none()) {
        return;
    }
    let _ = writeln!(o, "\nPaced: as many rounds again per scanner count (below 1 M at least as many as `--finals` finals need at that count, so that the final p99s compared are p99s at every count; from 1 M up as many, at most `--sweep-paced-large-rounds`, at the fewest and the most scanners, the counts the latency target compares, and `--sweep-large-side-rounds` at those between), the scanners together offering the same load whatever their number (`--sweep-pace` of what the fewest reached flat out, an even share each: a scanner's main batch k is due k batch intervals after its own start, whatever the batch's size, and the starts are staggered over one interval, so the crowd's batches arrive evenly; every scanner builds its batches before the clock starts), as scanners that find ports at their own pace do. Flat out, a closed loop of n scanners on a saturated machine waits n times as long per request whatever the server does; paced, latency shows what concurrency itself costs, the server-side column how much of it is spent inside scanstore (from its `ScanResultUpload` events), the ES bulk columns how much of that waited for one of the `bulk_max_concurrency` permits and how long the requests themselves took (`ElasticsearchBulkCompleted`), the pool column for a pooled connection. The latency targets use these. Where an execution is not a whole number of batches its first batch is the short one, so with few batches per execution (100 k among 64 scanners: 562 + a final of 1 000) the normal batches are smaller than at 4 scanners; the finals are full batches at every count.\n\n| endpoints | scanners | offered endpoints/s | reached | normal p50 / p99 ms | final p50 / p99 ms (finals) | server-side p99 ms, normal / final | ES bulk p99 ms, permit wait / request | pool wait p99 ms | ES requests sent holding a connection |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for p in &s.points {
        let Some(x) = &p.paced else { continue };
        let q = |c: &str| quantiles(&x.latencies.0[c]);
        let (n, f) = (q("normal"), q("final"));
        // scanstore's own time (`ScanResultUpload`): what of the client's is spent inside.
        let server = |c: &str| x.logs.server_upload_ms.get(c).map_or(0.0, |v| pct(v, 99.0));
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {:.0} | {:.1} / {:.1} | {:.1} / {:.1} ({}) | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {} |",
            p.size,
            p.scanners,
            x.per_s,
            x.endpoints_per_s,
            n[0],
            n[2],
            f[0],
            f[2],
            x.latencies.0["final"].len(),
            server("normal"),
            server("final"),
            pct(&x.logs.bulk_queue_wait_ms, 99.0),
            pct(&x.logs.bulk_request_ms, 99.0),
            pct(&x.logs.all_waits(), 99.0),
            x.logs.es_requests_with_connection_held,
        );
    }
}

/// The targets the sweep decides: upload ≥ 0.8 × ceiling at TARGET_SCANNERS, p99 at the most
/// scanners ≤ 2 × at the fewest, and upload throughput growing linearly with size.
pub fn targets(s: &SweepResult) -> Vec<(String, String, Option<bool>)> {
    let mut t = Vec::new();
    let cpus = crate::report::machine().cpus;
    let sizes = s.sizes();
    for &size in &sizes {
        if let Some(p) = s.at(size, TARGET_SCANNERS) {
            let (m, lo, hi) = p.ratio();
            let in_flight = p.in_flight_us_per_op();
            t.push((
                format!("upload ≥ 0.8 × ceiling ({size} endpoints, {TARGET_SCANNERS} scanners)"),
                format!(
                    "{m:.2} × (median of {} rounds, {lo:.2}–{hi:.2}); scanstore {} µs CPU per endpoint, the ceiling client {}; the machine's CPU allows {:.2} × ({:.2} cores busy uploading, {} of the whole machine's); the emulator's store lock held {} of the upload's wall time, {} of the ceiling's; bulk permits waited for {:.0} ms (p50), ES µs in flight per operation {:.1} against the ceiling's {:.1}",
                    p.rounds.len(),
                    us(p.cpu_us(Role::Scanstore, false)),
                    us(p.cpu_us(Role::Bench, true)),
                    p.cpu_bound_ratio(cpus),
                    p.cores(false),
                    cores(p.machine_cores(false)),
                    share(p.lock_share(false)),
                    share(p.lock_share(true)),
                    pct(&p.logs.bulk_queue_wait_ms, 50.0),
                    in_flight.0,
                    in_flight.1,
                ),
                Some(m >= 0.8),
            ));
        }
        let here = || s.points.iter().filter(|p| p.size == size);
        let fewest = here().min_by_key(|p| p.scanners);
        let most = here().max_by_key(|p| p.scanners);
        if let (Some(a), Some(b)) = (fewest, most) {
            if b.scanners > a.scanners {
                for class in ["normal", "final"] {
                    t.push(p99_target(class, size, a, b));
                }
            }
        }
    }
    if let (Some(&small), Some(&large)) = (sizes.first(), sizes.last()) {
        if large > small {
            if let (Some(a), Some(b)) = (s.at(small, TARGET_SCANNERS), s.at(large, TARGET_SCANNERS))
            {
                let x = b.endpoints_per_s().0 / a.endpoints_per_s().0.max(1e-9);
                t.push((
                    format!("upload throughput at {large} ≥ 0.9 × at {small} ({TARGET_SCANNERS} scanners)"),
                    format!("{x:.2} ×"),
                    Some(x >= 0.9),
                ));
                if let (Some(ra), Some(rb)) = (a.rss_kib, b.rss_kib) {
                    let x = rb as f64 / ra.max(1) as f64;
                    t.push((
                        format!(
                            "scanstore peak RSS uploading {large} ≤ 1.5 × {small} ({TARGET_SCANNERS} scanners)"
                        ),
                        format!(
                            "{:.0} MiB vs {:.0} MiB = {x:.2} ×",
                            rb as f64 / 1024.0,
                            ra as f64 / 1024.0
                        ),
                        Some(x <= 1.5),
                    ));
                }
            }
        }
    }
    t
}

/// p99 of `class` at the most scanners (`b`) against the fewest (`a`): paced when measured
/// so (the same offered load), flat out otherwise.
fn p99_target(class: &str, size: usize, a: &Point, b: &Point) -> (String, String, Option<bool>) {
    let (((pa, na), (pb, nb)), how) = match (&a.paced, &b.paced) {
        (Some(x), Some(y)) => (
            (x.p99(class), y.p99(class)),
            format!("paced to {:.0} endpoints/s in all", x.per_s),
        ),
        _ => ((a.p99(class), b.p99(class)), "flat out".to_string()),
    };
    let name = format!(
        "{class} p99 at {} scanners ≤ 2 × at {} ({size} endpoints, pool_size unchanged)",
        b.scanners, a.scanners
    );
    if na.min(nb) == 0 {
        let why = format!(
            "not measured: {nb} and {na} {class} requests (an execution of one batch sends only a final)"
        );
        return (name, why, None);
    }
    let x = pb / pa.max(1e-9);
    let few = if na.min(nb) < 100 {
        "; under 100, p99 is the slowest"
    } else {
        ""
    };
    (
        name,
        format!("{pb:.1} ms vs {pa:.1} ms = {x:.2} × ({how}; {nb} and {na} requests{few})"),
        Some(x <= 2.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn opts(args: &[&str]) -> Opts {
        Opts::parse_from(
            ["scanstore-bench", "--sweep-scanners", "4,16,64"]
                .iter()
                .chain(args),
        )
    }

    #[test]
    fn paced_rounds_give_the_compared_counts_their_finals_within_the_large_cap() {
        let o = opts(&["--sweep-rounds", "5"]);
        // Below 1 M: enough for 100 finals, and at least the flat-out rounds.
        assert_eq!(paced_rounds(&o, 100_000, 4), 25);
        assert_eq!(paced_rounds(&o, 100_000, 16), 7);
        assert_eq!(paced_rounds(&o, 100_000, 64), 5);
        // From 1 M: the fewest and the most capped by --sweep-paced-large-rounds (5), the
        // count between them given the side rounds.
        assert_eq!(paced_rounds(&o, 1_000_000, 4), 5);
        assert_eq!(paced_rounds(&o, 1_000_000, 64), 2);
        assert_eq!(paced_rounds(&o, 1_000_000, 16), 1);
        let o = opts(&[
            "--sweep-paced-large-rounds",
            "30",
            "--sweep-large-side-rounds",
            "2",
        ]);
        assert_eq!(paced_rounds(&o, 1_000_000, 4), 25);
        assert_eq!(paced_rounds(&o, 1_000_000, 16), 2);
    }
}
