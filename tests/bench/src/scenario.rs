//! The scenarios. A size run: ceiling and peer first (their own index prefixes, deleted
//! afterwards), then scanstore with publication off while the scanners upload, then
//! scanstore restarted with publishers to drain the backlog, then any extra upload rounds
//! (more latency samples of the same size, each into indices as empty as the first
//! round's). A pool run: 16 scanners
//! against ES slowed on every request, publishers on, at a given `pool_size`.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use postgres::Client;
use uuid::Uuid;

use crate::ceiling::{self, Sent};
use crate::closing::{self, CloseResult};
use crate::cpu::{self, Role, Sampler, Usage};
use crate::logs::{self, LogStats};
use crate::peer::{self, PeerResult};
use crate::scanner::{self, Job, UploadOutcome};
use crate::stack::{self, Database, Proc, ServeCfg};
use crate::workload::{self, ExecutionPlan};
use crate::{factory, report, Opts};
use scanstore::es::{index, setup};

/// A publication shorter than this is repeated (`--short-publication-runs`): one run of a
/// few tenths of a second is at the mercy of the machine's moment.
pub const SHORT_PUBLICATION_S: f64 = 2.0;
/// One shorter than this is repeated too (`--publication-runs`): a run of a few seconds
/// still moves by several hundredths with the machine's drift.
pub const NOISY_PUBLICATION_S: f64 = 10.0;

/// One publication of a size's backlog between two runs of its ceiling.
pub struct PublicationRun {
    pub published: i64,
    /// From the publisher's first claim to the last `processed_at`.
    pub seconds: f64,
    /// The same from just before the publishing scanstore was started (start-up included).
    pub wall_seconds: f64,
    /// The publication ceiling of the same documents, sent right before and right after.
    pub ceiling: Sent,
    /// First claim → last `processed_at` (seconds since the Unix epoch), for its CPU.
    pub span: (f64, f64),
}

impl PublicationRun {
    pub fn endpoints_per_s(&self) -> f64 {
        self.published as f64 / self.seconds.max(1e-9)
    }

    /// Publication throughput over its ceiling's.
    pub fn ratio(&self) -> f64 {
        self.endpoints_per_s() / self.ceiling.endpoints_per_s().max(1e-9)
    }
}

pub struct SizeResult {
    pub size: usize,
    pub scanners: usize,
    pub execution_endpoints: usize,
    pub upload: UploadOutcome,
    pub upload_logs: LogStats,
    /// The first round's publication, then any repeats of a short one.
    pub publications: Vec<PublicationRun>,
    /// The first publication's logs.
    pub publish_logs: LogStats,
    pub ceiling_upload: Sent,
    pub peer: Result<PeerResult, String>,
    pub rss_upload_kib: Option<u64>,
    pub rss_publish_kib: Option<u64>,
    pub cpu: PhaseCpu,
    /// The close run over the first round's published endpoints; none when skipped.
    pub close: Option<Result<CloseResult, String>>,
}

/// CPU of the first round's phases.
pub struct PhaseCpu {
    pub ceiling_upload: Usage,
    pub upload: Usage,
    /// The publication ceiling's (mean of its runs) and the publication's; none with
    /// `--no-publication`.
    pub publication: Option<(Usage, Usage)>,
}

impl PhaseCpu {
    /// Every phase measured, named, in the report's order.
    pub fn named(&self) -> Vec<(&'static str, &Usage)> {
        let mut all = vec![
            ("ceiling upload", &self.ceiling_upload),
            ("upload", &self.upload),
        ];
        if let Some((ceiling, publication)) = &self.publication {
            all.push(("ceiling publication", ceiling));
            all.push(("publication", publication));
        }
        all
    }
}

impl SizeResult {
    pub fn upload_eps(&self) -> f64 {
        self.upload.endpoints as f64 / self.upload.wall.as_secs_f64().max(1e-9)
    }

    /// The publication with the median ratio to its ceiling (the lower middle of an even
    /// number), the one the report's table and targets use.
    pub fn publication(&self) -> Option<&PublicationRun> {
        let mut runs: Vec<&PublicationRun> = self.publications.iter().collect();
        runs.sort_by(|a, b| a.ratio().total_cmp(&b.ratio()));
        runs.get(runs.len().saturating_sub(1) / 2).copied()
    }

    pub fn publish_eps(&self) -> f64 {
        self.publication()
            .map_or(0.0, PublicationRun::endpoints_per_s)
    }
}

pub struct PoolResult {
    pub pool_size: u32,
    pub latency_ms: Option<u64>,
    pub heartbeat_seconds: u64,
    pub upload: UploadOutcome,
    pub published: i64,
    pub publish_seconds: f64,
    pub logs: LogStats,
}

impl PoolResult {
    pub fn upload_eps(&self) -> f64 {
        self.upload.endpoints as f64 / self.upload.wall.as_secs_f64().max(1e-9)
    }

    pub fn publish_eps(&self) -> f64 {
        self.published as f64 / self.publish_seconds.max(1e-9)
    }
}

/// Seconds from `from` to `to`.
pub fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().unwrap_or(0) as f64 / 1e6
}

pub fn bar(len: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template("{prefix:>22} [{elapsed_precise}] {wide_bar} {pos}/{len} endpoints ({per_sec}, eta {eta})")
            .expect("template"),
    );
    b.set_prefix(what.to_string());
    b
}

/// The ES target: `--es-url`, or a fresh emulator that pre-touches `pretouch_mib` of heap.
pub fn es_target(
    opts: &Opts,
    dir: &Path,
    name: &str,
    pretouch_mib: usize,
) -> Result<(Option<Proc>, String), String> {
    match &opts.es_url {
        Some(u) => Ok((None, u.trim_end_matches('/').to_string())),
        None => {
            let log = stack::log_path(dir, &format!("{name}-emulator"));
            let p = stack::emulator(opts, &log, pretouch_mib)?;
            let u = p.url.clone();
            Ok((Some(p), u))
        }
    }
}

/// What a size run's emulator pre-touches: `--emulator-pretouch-kib-per-endpoint`, leaving
/// room for everything else beside it — 6 GiB (the bench's ceiling bodies alone are 2 GB
/// at 1 M) plus the Python peer's 5 KiB per endpoint (4.2 GB at 1 M; one run that left it
/// out was OOM-killed).
pub fn pretouch_mib(opts: &Opts, size: usize) -> usize {
    let wanted = size * opts.emulator_pretouch_kib_per_endpoint / 1024;
    let peer_kib = if opts.no_peer { 0 } else { size as u64 * 5 };
    let spare = report::meminfo_kib("MemAvailable").saturating_sub((6 << 20) + peer_kib) / 1024;
    wanted.min(usize::try_from(spare).unwrap_or(usize::MAX))
}

/// scanstore's HTTP `worker_threads` for `scanners` concurrent scanners: two each, so that a
/// scanner's request never waits for a thread (at least 16).
pub fn http_threads(scanners: usize) -> usize {
    (scanners * 2).max(16)
}

/// A fresh index prefix: `--prefix-root` and random hex.
pub fn prefix() -> String {
    let root = PREFIX_ROOT.get().map_or("bench", String::as_str);
    format!("{root}{}", &Uuid::new_v4().simple().to_string()[..8])
}

/// `--prefix-root`, set once at start.
pub static PREFIX_ROOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// How a round's endpoints are shared among its scanners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Split {
    /// The same endpoints each.
    Endpoints,
    /// The same observations each, about: a `mixed` scanner's endpoints shrink by its DNS
    /// records and sidecar batches.
    Observations,
}

/// Scanner rows and one running execution each; `size` endpoints split evenly over `n`
/// scanners, numbered from `offset`.
pub fn jobs(
    c: &mut Client,
    owner: Uuid,
    round: (usize, usize, usize),
    batch: usize,
    dns_every: usize,
) -> Result<Vec<Job>, String> {
    jobs_split(c, owner, round, batch, dns_every, Split::Endpoints)
}

/// As `jobs`, the endpoints shared as `split` says; every other scanner is `mixed`.
pub fn jobs_split(
    c: &mut Client,
    owner: Uuid,
    (n, size, offset): (usize, usize, usize),
    batch: usize,
    dns_every: usize,
    split: Split,
) -> Result<Vec<Job>, String> {
    let mixed = |i: usize| i % 2 == 1;
    let shares = shares(n, size, |i| match (split, mixed(i)) {
        (Split::Observations, true) => workload::mixed_observations_per_endpoint(batch, dns_every),
        _ => 1.0,
    });
    let mut first = offset;
    (0..n)
        .zip(shares)
        .map(|(i, endpoints)| {
            let mixed = mixed(i);
            let s = factory::scanner(c)?;
            let e = factory::execution(c, owner, s.id, if mixed { "mixed" } else { "port_scan" })?;
            let plan = ExecutionPlan {
                first,
                endpoints,
                batch,
                mixed,
                dns_every,
            };
            first += endpoints;
            Ok(Job {
                token: s.token,
                execution_id: e.execution_id,
                plan,
            })
        })
        .collect()
}

/// `size` endpoints over `n` scanners, scanner `i` getting a share inversely proportional
/// to `weight(i)` (what it sends per endpoint, to a thousandth); the last takes the
/// rounding's remainder. Equal weights give `size / n` each.
fn shares(n: usize, size: usize, weight: impl Fn(usize) -> f64) -> Vec<usize> {
    let units: Vec<usize> = (0..n)
        .map(|i| (1000.0 / weight(i)).round() as usize)
        .collect();
    let total = units.iter().sum::<usize>().max(1);
    let mut out: Vec<usize> = units.iter().map(|u| size * u / total).collect();
    let given: usize = out.iter().sum();
    if let Some(last) = out.last_mut() {
        *last += size - given;
    }
    out
}

fn db_now(c: &mut Client) -> Result<DateTime<Utc>, String> {
    c.query_one("SELECT now()", &[])
        .map(|r| r.get(0))
        .map_err(|e| e.to_string())
}

/// Waits until every execution outbox row of `owner` is processed (with `--database-url` the
/// database may hold a deployment's rows too); returns (endpoints published since `t0`, the
/// last `processed_at`).
fn wait_published(
    c: &mut Client,
    owner: Uuid,
    t0: DateTime<Utc>,
    expected: u64,
    timeout: Duration,
    what: &str,
) -> Result<(i64, DateTime<Utc>), String> {
    let b = bar(expected, what);
    let deadline = Instant::now() + timeout;
    loop {
        let r = c
            .query_one(
                "SELECT count(*) FILTER (WHERE processed_at IS NULL),
                        coalesce(sum(processed_endpoints) FILTER (WHERE processed_at IS NULL OR processed_at >= $1), 0)::bigint,
                        max(processed_at), count(*)
                   FROM scan_projection_outbox WHERE kind = 'execution' AND owner_id = $2",
                &[&t0, &owner],
            )
            .map_err(|e| e.to_string())?;
        let (pending, done, last, rows): (i64, i64, Option<DateTime<Utc>>, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        b.set_position(done.max(0) as u64);
        if rows > 0 && pending == 0 {
            b.finish_and_clear();
            return Ok((done, last.unwrap_or(t0)));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "publication not done after {timeout:?}: {pending} of {rows} rows pending"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn size_run(
    opts: &Opts,
    size: usize,
    dir: &Path,
    sampler: &Sampler,
) -> Result<SizeResult, String> {
    let name = format!("size{size}");
    let db = Database::open(opts)?;
    let (emulator, es_url) = es_target(opts, dir, &name, pretouch_mib(opts, size))?;
    if let Some(e) = &emulator {
        sampler.watch(Role::Emulator, e.pid());
    }
    let prefix = prefix();
    let mut cfg = ServeCfg {
        pool_size: opts.pool_size,
        workers: 0,
        worker_threads: http_threads(opts.scanners),
        bulk_max_concurrency: opts.bulk_concurrency,
        lease_seconds: 120,
        heartbeat_seconds: 20,
        nice: 0,
    };
    let mut up = stack::scanstore(
        opts,
        &db,
        &es_url,
        &prefix,
        &cfg,
        dir,
        &format!("{name}-upload"),
    )?;
    sampler.watch(Role::Scanstore, up.pid());
    let mut c = db.connect()?;
    watch_postgres(&mut c, sampler);
    let owner = factory::owner(&mut c)?;
    // A round's executions: one per scanner, `size` endpoints between them, from `offset`.
    let new_jobs = |c: &mut Client, offset: usize| {
        jobs(
            c,
            owner,
            (opts.scanners, size, offset),
            opts.batch,
            opts.dns_every,
        )
    };
    let first = new_jobs(&mut c, 0)?;

    // The ceiling: the same documents, raw, into indices of their own.
    let cp = format!("{prefix}-ceiling");
    let ceiling_upload = ceiling::upload(&es_url, &cp, owner, &first, opts)?;
    // Built now (the upload consumes the jobs), sent after the uploads: the publication
    // ceiling then meets the emulator holding what scanstore's publication meets.
    let publication_requests = |jobs: &[Job]| {
        ceiling::publication_requests(
            &cp,
            owner,
            jobs,
            opts.page_size,
            opts.bulk_batch_size,
            opts.bulk_max_bytes,
        )
    };
    let publish_reqs = if opts.no_publication {
        ceiling::Requests::default()
    } else {
        publication_requests(&first)?
    };

    // The peer: the same asset operations through the Python client.
    let peer = if opts.no_peer || opts.no_publication {
        Err("skipped".to_string())
    } else {
        let pp = format!("{prefix}-peer");
        ceiling::install(&es_url, &pp)?;
        let reqs = ceiling::publication_requests(
            &pp,
            owner,
            &first,
            opts.page_size,
            opts.bulk_batch_size,
            opts.bulk_max_bytes,
        )?;
        let file = dir.join(format!("{name}-peer.ndjson"));
        let r = peer::run(
            &opts.python,
            &opts.peer_script,
            &es_url,
            &reqs,
            opts.bulk_batch_size,
            opts.bulk_max_bytes,
            &file,
        );
        ceiling::delete(&es_url, &pp, &reqs.indices);
        r
    };

    // Uploads, with publication off so that both are measured alone.
    let b = bar(size as u64, &format!("upload {size}"));
    // What the first round's publication requests are built from, to build them again for
    // the close run's ceiling (the upload consumes the jobs).
    let first_plans: Vec<Job> = first
        .iter()
        .map(|j| Job {
            token: String::new(),
            execution_id: j.execution_id,
            plan: j.plan.clone(),
        })
        .collect();
    let mut upload = scanner::run(&up.url, first, opts.retry_every, &b)?;
    let upload_span = upload.span;
    b.finish_and_clear();
    let rss_upload_kib = up.peak_rss_kib();
    up.stop();
    let mut upload_events = logs::read(&stack::log_path(dir, &format!("{name}-upload")));

    // Publication of the backlog; a short one again (fresh executions of the same size,
    // new endpoints) until there are `short_publication_runs` (`publication_runs`). A
    // repeat's upload is one of the size's upload rounds while they last.
    let ctx = PublishCtx {
        opts,
        db: &db,
        es_url: &es_url,
        prefix: &prefix,
        cp: &cp,
        owner,
        dir,
        sampler,
    };
    let mut publications: Vec<PublicationRun> = Vec::new();
    let mut close = None;
    let (mut publish_logs, mut rss_publish_kib) = (LogStats::default(), None);
    if !opts.no_publication {
        cfg.workers = opts.workers;
        let label = format!("{name}-publish");
        let (run, logs, rss) =
            publication_run(&ctx, &mut c, &cfg, &publish_reqs, size, (1, &label))?;
        (publish_logs, rss_publish_kib) = (logs, rss);
        let repeats = if run.seconds < SHORT_PUBLICATION_S {
            opts.short_publication_runs
        } else if run.seconds < NOISY_PUBLICATION_S {
            opts.publication_runs
        } else {
            1
        };
        publications.push(run);
        for n in 2..=repeats {
            // Each repeat meets the store as the first run did, and as every ceiling run
            // does (into indices of its own): published into the earlier runs' documents
            // as well, the twelfth 10 k run merged into 110 k asset documents per index,
            // outgrew the emulator's pre-touched heap and took half again as long.
            drop_indices(&es_url, &prefix)?;
            let jobs = new_jobs(&mut c, (n - 1) * size)?;
            let reqs = publication_requests(&jobs)?;
            cfg.workers = 0;
            let label = format!("{name}-upload-run{n}");
            let mut more = stack::scanstore(opts, &db, &es_url, &prefix, &cfg, dir, &label)?;
            let b = bar(size as u64, &format!("upload {size}, run {n}"));
            let outcome = scanner::run(&more.url, jobs, opts.retry_every, &b)?;
            b.finish_and_clear();
            more.stop();
            if n <= opts.upload_rounds(size) {
                upload.latencies.merge(&outcome.latencies);
                upload_events.extend(logs::read(&stack::log_path(dir, &label)));
            }
            cfg.workers = opts.workers;
            let label = format!("{name}-publish-run{n}");
            publications.push(publication_run(&ctx, &mut c, &cfg, &reqs, size, (n, &label))?.0);
        }
        // After every publication run: the close run closes observations published after
        // it too (all of them made an hour before the run started), which would turn the
        // repeated runs into close runs of their own. The first run's requests are built
        // again for its ceiling: held through the close beside a 1 M run's emulator, they
        // were more memory than the machine has.
        drop(publish_reqs);
        if !opts.no_close_run {
            let label = format!("{name}-close");
            let drop_live = || {
                let _ = drop_indices(&es_url, &prefix);
            };
            close = Some(closing::run(
                &ctx,
                &mut c,
                &cfg,
                size,
                || publication_requests(&first_plans),
                (&label, drop_live),
            ));
        }
    }
    // More latency samples: each round is another set of executions of this size, uploaded
    // with publication off into fresh indices, as the repeated publications' uploads were.
    cfg.workers = 0;
    for round in publications.len().max(1) + 1..=opts.upload_rounds(size) {
        drop_indices(&es_url, &prefix)?;
        let label = format!("{name}-upload-round{round}");
        let mut more = stack::scanstore(opts, &db, &es_url, &prefix, &cfg, dir, &label)?;
        let round_jobs = new_jobs(&mut c, 0)?;
        let b = bar(size as u64, &format!("upload {size}, round {round}"));
        let outcome = scanner::run(&more.url, round_jobs, opts.retry_every, &b)?;
        b.finish_and_clear();
        more.stop();
        upload.latencies.merge(&outcome.latencies);
        upload_events.extend(logs::read(&stack::log_path(dir, &label)));
    }
    let upload_logs = LogStats::from_events(&upload_events);
    let cpu = PhaseCpu {
        ceiling_upload: usage(sampler, &ceiling_upload.spans),
        upload: usage(sampler, &[upload_span]),
        publication: publications.first().map(|first| {
            (
                usage(sampler, &first.ceiling.spans),
                usage(sampler, &[first.span]),
            )
        }),
    };
    Ok(SizeResult {
        size,
        scanners: opts.scanners,
        execution_endpoints: size / opts.scanners.max(1),
        upload,
        upload_logs,
        publications,
        publish_logs,
        ceiling_upload,
        peer,
        rss_upload_kib,
        rss_publish_kib,
        cpu,
        close,
    })
}

/// Deletes what scanstore wrote under the bench's `prefix` (the facts month, the execution
/// projection, the asset versions); the next scanstore installs them afresh. An extra round
/// then meets the store as the first round did: uploaded into the earlier rounds' documents
/// as well, a "1 M" round wrote into 2–3 M documents and took most of the slowest finals.
pub fn drop_indices(es_url: &str, prefix: &str) -> Result<(), String> {
    let month: DateTime<Utc> = workload::observed_at()
        .parse()
        .map_err(|e| format!("observation time: {e}"))?;
    let version = |alias: String| index::versioned(&alias, setup::ASSETS_VERSION);
    let written = [
        index::facts_index(prefix, &month),
        version(index::assets_global_alias(prefix)),
        version(index::assets_user_alias(prefix)),
    ];
    ceiling::delete(es_url, prefix, &written);
    Ok(())
}

// Only the bench owner's rows: with `--database-url` the database may be a deployment's.
const HOLD_BACKLOG: &str = "
    UPDATE scan_projection_outbox SET available_at = 'infinity'
     WHERE kind = 'execution' AND processed_at IS NULL AND owner_id = $1";
const RELEASE_BACKLOG: &str = "
    UPDATE scan_projection_outbox SET available_at = now()
     WHERE kind = 'execution' AND processed_at IS NULL AND owner_id = $1
       AND available_at = 'infinity'";

/// What a publication run (and the close run after it) needs of its size run.
pub struct PublishCtx<'a> {
    pub opts: &'a Opts,
    pub db: &'a Database,
    pub es_url: &'a str,
    pub prefix: &'a str,
    /// The ceiling's index prefix.
    pub cp: &'a str,
    /// The bench's owner: its executions' rows are the backlog.
    pub owner: Uuid,
    pub dir: &'a Path,
    pub sampler: &'a Sampler,
}

/// The publication ceiling, a publishing scanstore draining the backlog, and the ceiling
/// again: a short run on a VM drifts (the same ceiling varied ±20 % between runs), so the
/// ratio compares with the mean of one run before and one after. Returns the run, the
/// publisher's log statistics and its peak RSS.
fn publication_run(
    x: &PublishCtx,
    c: &mut Client,
    cfg: &ServeCfg,
    reqs: &ceiling::Requests,
    size: usize,
    (run, label): (usize, &str),
) -> Result<(PublicationRun, LogStats, Option<u64>), String> {
    let ceiling_once = || -> Result<Sent, String> {
        ceiling::install(x.es_url, x.cp)?;
        let sent = ceiling::send(x.es_url, reqs, x.opts.bulk_concurrency)?;
        ceiling::delete(x.es_url, x.cp, &reqs.indices);
        Ok(sent)
    };
    let before = ceiling_once()?;
    // The backlog is held back until the publisher is up and warm, then made due:
    // publication is timed as a running publisher's, not as a process start whose first
    // claims race its own start-up, open its database sessions and grow its heap.
    let hold = |c: &mut Client, sql: &str| {
        c.execute(sql, &[&x.owner])
            .map_err(|e| format!("outbox backlog: {e}"))
    };
    hold(c, HOLD_BACKLOG)?;
    let started_at = db_now(c)?;
    let started = stack::scanstore(x.opts, x.db, x.es_url, x.prefix, cfg, x.dir, label);
    let warm = started
        .as_ref()
        .map_err(String::clone)
        .and_then(|p| warm_up(x, c, &p.url, run));
    // Released whether or not the publisher started and warmed: nothing stays held back.
    let t0 = db_now(c);
    let released = hold(c, RELEASE_BACKLOG);
    let mut publisher = started?;
    let warmed = warm?;
    let t0 = t0?;
    released?;
    x.sampler.watch(Role::Scanstore, publisher.pid());
    let (published, last) = wait_published(
        c,
        x.owner,
        t0,
        size as u64,
        Duration::from_secs(x.opts.publish_timeout),
        &format!("publish {size}"),
    )?;
    let rss = publisher.peak_rss_kib();
    publisher.stop();
    // The backlog's events: from its first claim on (the warm-up's rows come before).
    let mut events = logs::read(&stack::log_path(x.dir, label));
    let first = events.iter().position(|e| {
        e.name == "ScanProjectionClaimed"
            && !e.get("work").is_some_and(|w| warmed.iter().any(|x| x == w))
    });
    events.drain(..first.unwrap_or(events.len()));
    // The ceiling pays no process start, so throughput counts from the first claim.
    let first_claim = events.first().map_or(t0, |e| e.at);
    if published != size as i64 {
        return Err(format!("published {published} endpoints, expected {size}"));
    }
    let after = ceiling_once()?;
    let run = PublicationRun {
        published,
        seconds: seconds(first_claim, last),
        wall_seconds: seconds(started_at, last),
        ceiling: Sent::bracket(before, after),
        span: (unix(first_claim), unix(last)),
    };
    Ok((run, LogStats::from_events(&events), rss))
}

/// Endpoints of one warm-up execution beyond this index: far above any size run's, so a
/// warm-up never merges into the documents a timed publication writes.
pub const WARM_UP_FIRST: usize = 40_000_000;

/// Pages of each warm-up execution: one read ahead and two in flight, as a worker's
/// pipeline holds them (README "Publication"), so the publisher's heap has grown to what a
/// timed publication needs (one page each left a 10 k publication faulting in ~10 ms).
const WARM_UP_PAGES: usize = 3;

/// Warms a started publisher as a running one is warm: uploads one execution of
/// [`WARM_UP_PAGES`] pages per worker through it and waits until its workers have
/// published them; `run` (the size's publication run) gives each warm-up endpoints of its
/// own. Returns the warm-up rows' `work`, as their events name it.
fn warm_up(x: &PublishCtx, c: &mut Client, url: &str, run: usize) -> Result<Vec<String>, String> {
    let (workers, page) = (x.opts.workers.max(1), x.opts.page_size.max(1));
    let endpoints = workers * page * WARM_UP_PAGES;
    let first = WARM_UP_FIRST + run * endpoints;
    let warm = jobs(
        c,
        x.owner,
        (workers, endpoints, first),
        x.opts.batch,
        x.opts.dns_every,
    )?;
    let ids: Vec<Uuid> = warm.iter().map(|j| j.execution_id).collect();
    let hidden = ProgressBar::hidden();
    scanner::run(url, warm, 0, &hidden)?;
    let deadline = Instant::now() + Duration::from_secs(x.opts.publish_timeout);
    loop {
        let pending: i64 = c
            .query_one(
                "SELECT count(*) FROM scan_projection_outbox
                  WHERE kind = 'execution' AND execution_id = ANY($1) AND processed_at IS NULL",
                &[&ids],
            )
            .map_err(|e| format!("warm-up: {e}"))?
            .get(0);
        if pending == 0 {
            return Ok(ids.iter().map(|id| format!("execution:{id}")).collect());
        }
        if Instant::now() > deadline {
            return Err(format!("warm-up not published: {pending} rows pending"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The mean CPU of the runs of one phase.
pub fn usage(sampler: &Sampler, spans: &[(f64, f64)]) -> Usage {
    let all: Vec<Usage> = spans.iter().map(|&(a, b)| sampler.usage(a, b)).collect();
    Usage::mean(&all)
}

/// Watches the PostgreSQL server when it runs here (not when it is remote).
pub fn watch_postgres(c: &mut Client, sampler: &Sampler) {
    let backend = c
        .query_one("SELECT pg_backend_pid()", &[])
        .ok()
        .and_then(|r| u32::try_from(r.get::<_, i32>(0)).ok());
    if let Some(pm) = backend.and_then(cpu::postmaster) {
        sampler.watch(Role::Postgres, pm);
    }
}

fn unix(t: DateTime<Utc>) -> f64 {
    t.timestamp_micros() as f64 / 1e6
}

pub fn pool_run(opts: &Opts, pool_size: u32, dir: &Path) -> Result<PoolResult, String> {
    let name = format!("pool{pool_size}");
    let db = Database::open(opts)?;
    let (emulator, es_url) = es_target(opts, dir, &name, 0)?;
    let cfg = ServeCfg {
        pool_size,
        workers: opts.workers,
        worker_threads: opts.pool_scanners * 2,
        bulk_max_concurrency: (opts.pool_scanners * 2).min(64),
        lease_seconds: 10,
        heartbeat_seconds: 1,
        nice: 0,
    };
    let mut server = stack::scanstore(opts, &db, &es_url, &prefix(), &cfg, dir, &name)?;
    let mut c = db.connect()?;
    let owner = factory::owner(&mut c)?;
    let n = opts.pool_scanners;
    let total = n * opts.pool_endpoints;
    let jobs = jobs(
        &mut c,
        owner,
        (n, total, 0),
        opts.pool_batch,
        opts.dns_every,
    )?;
    let latency_ms = if emulator.is_some() {
        let fault = serde_json::json!({"kind": "latency", "path": "*", "ms": opts.es_latency_ms});
        let r = scanner::agent()
            .post(format!("{es_url}/_emulator/faults"))
            .header("Content-Type", "application/json")
            .send(fault.to_string().as_bytes())
            .map_err(|e| format!("inject latency: {e}"))?;
        if r.status() != 200 {
            return Err(format!("inject latency: {}", r.status()));
        }
        Some(opts.es_latency_ms)
    } else {
        None
    };
    let t0 = db_now(&mut c)?;
    let b = bar(total as u64, &format!("pool_size {pool_size}"));
    let upload = scanner::run(&server.url, jobs, opts.retry_every, &b)?;
    b.finish_and_clear();
    let (published, last) = wait_published(
        &mut c,
        owner,
        t0,
        total as u64,
        Duration::from_secs(opts.publish_timeout),
        &format!("publish pool {pool_size}"),
    )?;
    let publish_seconds = seconds(t0, last);
    server.stop();
    let logs = LogStats::from_events(&logs::read(&stack::log_path(dir, &name)));
    Ok(PoolResult {
        pool_size,
        latency_ms,
        heartbeat_seconds: cfg.heartbeat_seconds,
        upload,
        published,
        publish_seconds,
        logs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_share_as_before() {
        assert_eq!(shares(3, 100, |_| 1.0), vec![33, 33, 34]);
        assert_eq!(shares(16, 100_000, |_| 1.0), vec![6250; 16]);
    }

    #[test]
    fn an_observation_split_gives_every_scanner_about_as_much_to_send() {
        let (n, size, batch, dns_every) = (16, 100_000, 1000, 3);
        let weight = |i: usize| match i % 2 {
            1 => workload::mixed_observations_per_endpoint(batch, dns_every),
            _ => 1.0,
        };
        let split = shares(n, size, weight);
        assert_eq!(split.iter().sum::<usize>(), size);
        let mut first = 0;
        let sent: Vec<usize> = split
            .iter()
            .enumerate()
            .map(|(i, &endpoints)| {
                let plan = ExecutionPlan {
                    first,
                    endpoints,
                    batch,
                    mixed: i % 2 == 1,
                    dns_every,
                };
                first += endpoints;
                plan.batches(Uuid::nil()).map(|b| b.endpoints + b.dns).sum()
            })
            .collect();
        let (least, most) = (sent.iter().min().unwrap(), sent.iter().max().unwrap());
        assert!(split[1] < split[0], "{split:?}");
        assert!(*most as f64 / *least as f64 <= 1.02, "{sent:?}");
    }
}
