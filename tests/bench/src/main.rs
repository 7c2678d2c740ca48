//! `scanstore-bench`: the load tool. Starts (or is given) PostgreSQL, an ES
//! target and `scanstore serve`, drives simulated scanners, measures upload latency per
//! class, publication throughput, heartbeat timeliness, pool wait and hold, bulk sizes,
//! a raw-`_bulk` ceiling and the Python peer, how fresh small executions are while a big
//! one publishes, and writes `report.md` with PNG plots.

mod attack;
mod ceiling;
mod closing;
mod cpu;
mod cpus;
mod factory;
mod fairness;
mod imports;
mod logs;
mod peer;
mod plot;
mod queue;
mod report;
mod scanner;
mod scenario;
mod stack;
mod sweep;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "scanstore-bench",
    about = "Upload latency and publication throughput of scanstore against a raw-bulk ceiling and the Python peer"
)]
pub struct Opts {
    /// Small run for CI: 10 k endpoints only, a short pool comparison; well under 2 minutes.
    #[arg(long)]
    pub quick: bool,
    /// Endpoints per size run (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    pub sizes: Vec<usize>,
    /// Concurrent simulated scanners per size run; each uploads one execution of size/scanners endpoints.
    #[arg(long, default_value_t = 4)]
    pub scanners: usize,
    /// Endpoints per main-stream batch.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Re-send the first and every n-th confirmed main batch (a confirmed retry); 0 = never.
    #[arg(long, default_value_t = 5)]
    pub retry_every: usize,
    /// A DNS sidecar batch after every n-th main batch of a mixed execution.
    #[arg(long, default_value_t = 3)]
    pub dns_every: usize,
    /// Maintenance URL of a disposable PostgreSQL cluster: each scenario gets a fresh database.
    /// (default: $STORAGE_TEST_DATABASE_URL)
    #[arg(long)]
    pub admin_url: Option<String>,
    /// Use this database as is instead (a real deployment's; nothing is dropped).
    /// (default: $SCANSTORE_DATABASE_URL)
    #[arg(long)]
    pub database_url: Option<String>,
    /// A real Elasticsearch/OpenSearch URL instead of the emulator (no latency injection there).
    /// (default: $SCANSTORE_ES_URL)
    #[arg(long)]
    pub es_url: Option<String>,
    /// With `--es-url`: a file holding the cluster's API key (the encoded form
    /// Elasticsearch prints). (default: the key in $SCANSTORE_ES_API_KEY)
    #[arg(long)]
    pub es_api_key_file: Option<PathBuf>,
    /// With `--es-url`: the CA certificate (PEM) the cluster's HTTPS is verified against.
    #[arg(long)]
    pub es_ca_file: Option<PathBuf>,
    /// Start of every index prefix the bench makes, so that a run on a shared cluster can
    /// tell its indices from everyone else's.
    #[arg(long, default_value = "bench")]
    pub prefix_root: String,
    #[arg(long, default_value = "target/release/scanstore")]
    pub scanstore_bin: PathBuf,
    #[arg(long, default_value = "target/release/scanstore-es-emulator")]
    pub emulator_bin: PathBuf,
    #[arg(long, default_value_t = 8)]
    pub emulator_threads: usize,
    /// Run the emulator on these CPUs (`taskset -c` form: `0`, `0-1`) and the bench,
    /// scanstore and PostgreSQL (which must run on this machine) on the others, as when
    /// Elasticsearch has machines of its own; the ceilings then measure the emulator on
    /// those CPUs alone. (default: every process on every CPU)
    #[arg(long, value_parser = cpus::Cpus::parse)]
    pub emulator_cpus: Option<cpus::Cpus>,
    /// KiB of heap per endpoint that a size run's emulator touches before it listens (at
    /// most the memory available less 6 GiB and the Python peer's share; 0: none). Memory
    /// first touched costs a page fault, 1–3 s of kernel time per GiB on this VM, taken by
    /// whichever bulk grows the store, under its lock; Elasticsearch pre-touches its heap
    /// (`-XX:+AlwaysPreTouch`). A 1 M run's emulator grows to about 20 GiB.
    #[arg(long, default_value_t = 20)]
    pub emulator_pretouch_kib_per_endpoint: usize,
    /// Where report.md, the PNGs and the logs go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// scanstore `database.pool_size` of the size runs.
    #[arg(long, default_value_t = 8)]
    pub pool_size: u32,
    /// scanstore `projection.workers`.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// scanstore `projection.nice`. Here the publisher shares two cores with the emulator
    /// and PostgreSQL, the single-machine deployment for which README's deployment notes
    /// set it: the publisher's threads then run on the CPU the emulator's bulk writes leave
    /// idle instead of preempting them.
    #[arg(long, default_value_t = 19)]
    pub projection_nice: u32,
    /// scanstore `elasticsearch.bulk_max_concurrency` of the size runs (also the ceiling's client threads).
    #[arg(long, default_value_t = 4)]
    pub bulk_concurrency: usize,
    #[arg(long, default_value_t = 1000)]
    pub bulk_batch_size: usize,
    #[arg(long, default_value_t = 5 * 1024 * 1024)]
    pub bulk_max_bytes: usize,
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// Pool comparison: concurrent scanners.
    #[arg(long, default_value_t = 16)]
    pub pool_scanners: usize,
    /// Pool comparison: endpoints per scanner.
    #[arg(long, default_value_t = 5000)]
    pub pool_endpoints: usize,
    /// Pool comparison: endpoints per batch.
    #[arg(long, default_value_t = 500)]
    pub pool_batch: usize,
    /// Pool comparison: latency injected on every ES request (ms).
    #[arg(long, default_value_t = 200)]
    pub es_latency_ms: u64,
    /// Skip the pool comparison.
    #[arg(long)]
    pub no_pool: bool,
    /// Front door: hostile connections held while the scanners upload (0 = skip the
    /// scenario). [default: 500; with `--quick`, 70]
    #[arg(long)]
    pub attack_connections: Option<usize>,
    /// Front door: concurrent scanners.
    #[arg(long, default_value_t = 8)]
    pub attack_scanners: usize,
    /// Front door: endpoints per scanner and phase (in `--pool-batch` batches); enough for
    /// a phase to outlast the header timeout and its hostile clients' reconnections.
    #[arg(long, default_value_t = 40000)]
    pub attack_endpoints: usize,
    /// Python interpreter with the `elasticsearch` package, for the peer.
    #[arg(long, default_value = "python3")]
    pub python: String,
    #[arg(long, default_value = "tests/python/peer_bulk.py")]
    pub peer_script: PathBuf,
    /// Finals to time per size. Each upload round gives one final per scanner, so after
    /// the first round and its publication more rounds (fresh executions of the same size,
    /// publication off; a repeated publication's upload is one) follow until this many
    /// finals were timed; they add latency samples only, throughput and memory stay the
    /// first round's. Fewer than 100 finals make their
    /// "p99" the slowest one. Paced sweep points below 1 M also run enough rounds for as
    /// many finals at each scanner count. [default: 100; with `--quick`, one round]
    #[arg(long)]
    pub finals: Option<usize>,
    /// Finals to time at sizes from 1 M endpoints up, whose extra rounds are the size runs'
    /// longest (with fewer than 100, their "p99" is the slowest: of 40, about the 98th
    /// percentile). [default: 40; with `--quick`, one round]
    #[arg(long)]
    pub large_finals: Option<usize>,
    /// A size whose first publication lasts under 2 s is published this many times in all:
    /// each time fresh executions of the size (new endpoints) are uploaded with publication
    /// off, then published between two runs of their ceiling. The report takes the run with
    /// the median ratio to its ceiling and lists them all. On the benchmark's 2-CPU VM one
    /// 10 k run's ratio ranges 0.6–0.95 (the machine's speed drifts within seconds); the
    /// median of 11 moves by a few hundredths between runs, the median of 5 by twice that.
    #[arg(long, default_value_t = 11)]
    pub short_publication_runs: usize,
    /// A size whose first publication lasts 2 s or more but under 10 s is published this
    /// many times in all, as above: a run of a few seconds still moves by several
    /// hundredths with the machine's drift.
    #[arg(long, default_value_t = 5)]
    pub publication_runs: usize,
    /// Skip the Python peer.
    #[arg(long)]
    pub no_peer: bool,
    /// Security on: the emulator serves HTTPS and requires an API key, scanstore serves
    /// HTTPS, every client verifies against a CA made for the run (`scripts/dev-ca.sh`).
    /// Not with `--es-url`. (The front-door scenario's hostile connections then stall in
    /// the TLS handshake rather than in a request head.)
    #[arg(long, conflicts_with = "es_url")]
    pub tls: bool,
    /// Skip the close run (after each size's publication: a scoped execution that saw
    /// nothing closes every published endpoint).
    #[arg(long)]
    pub no_close_run: bool,
    /// Skip the publication phase and the publication ceiling (e.g. to measure uploads at
    /// 1 M endpoints when draining the backlog would take too long on this machine).
    #[arg(long)]
    pub no_publication: bool,
    /// Open ports of the masscan `-oL` file the import scenario sends through
    /// `scanstore-client`; its nmap XML file has a quarter of them. [default: 1000000; with
    /// `--quick`, 20000]
    #[arg(long)]
    pub import_ports: Option<usize>,
    /// Skip the import scenario.
    #[arg(long)]
    pub no_imports: bool,
    /// Queue at scale: processed outbox rows (finished executions, ten receipts each) of
    /// history at each step after the empty one (comma separated). [default:
    /// 100000,1000000; with `--quick`, 2000,20000]
    #[arg(long, value_delimiter = ',')]
    pub queue_history: Vec<usize>,
    /// Queue at scale: due outbox rows throughout.
    #[arg(long, default_value_t = 10_000)]
    pub queue_due: usize,
    /// Queue at scale: timed calls of each statement per step.
    #[arg(long, default_value_t = 2000)]
    pub queue_samples: usize,
    /// Scanners at once: sizes (endpoints, comma separated) at which the same uploads are
    /// made by each of `--sweep-scanners` concurrent scanners beside their ceiling.
    /// [default: 100000,1000000; with `--quick`, 10000]
    #[arg(long, value_delimiter = ',')]
    pub sweep_sizes: Vec<usize>,
    /// Scanners at once: concurrent scanner counts. [default: 4,16,64; with `--quick`, 4,16]
    #[arg(long, value_delimiter = ',')]
    pub sweep_scanners: Vec<usize>,
    /// Scanners at once: rounds (a ceiling run, then scanstore's upload) per scanner count
    /// below 1 M endpoints; throughput is the median round's. [default: 5; with `--quick`, 1]
    #[arg(long)]
    pub sweep_rounds: Option<usize>,
    /// Scanners at once: rounds at 16 scanners (the upload target's count) from 1 M
    /// endpoints up.
    #[arg(long, default_value_t = 5)]
    pub sweep_large_rounds: usize,
    /// Scanners at once: rounds at the other scanner counts from 1 M endpoints up, whose
    /// throughput is reported beside the target's, not judged; and paced rounds at the
    /// counts between the fewest and the most, whose latencies are reported beside the two
    /// the latency target compares.
    #[arg(long, default_value_t = 1)]
    pub sweep_large_side_rounds: usize,
    /// Scanners at once: most paced rounds at the fewest and the most scanners from 1 M
    /// endpoints up, where each round is long: as many as `--finals` finals need (one per
    /// scanner and round), at most this many.
    #[arg(long, default_value_t = 5)]
    pub sweep_paced_large_rounds: usize,
    /// Scanners at once: after the flat-out rounds, as many again per scanner count (and
    /// enough for `--finals` finals; from 1 M up see `--sweep-paced-large-rounds`) paced to
    /// this share of what the fewest scanners reached flat out (the same offered load at
    /// every count, so latency shows the cost of concurrency rather than of queueing behind
    /// a saturated machine); 0 skips it.
    #[arg(long, default_value_t = 0.5)]
    pub sweep_pace: f64,
    /// Scanners at once: scanstore's nice value, as the systemd unit's `Nice=` sets it where
    /// scanstore shares its machine with Elasticsearch (README "Deployment"): the emulator's
    /// bulk writes, which every upload waits for, are then not preempted by scanstore's
    /// threads, and scanstore runs on the CPU they leave. 0 runs it at the bench's priority.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=19))]
    pub sweep_nice: u32,
    /// Scanners at once: what every scanner gets the same share of. `endpoints`: a `mixed`
    /// scanner then sends more than a `port_scan` one (its DNS records and sidecar batches)
    /// and finishes later; `observations`: a `mixed` scanner gets fewer endpoints, so that
    /// every scanner sends about as much and all finish together.
    #[arg(long, value_enum, default_value_t = scenario::Split::Endpoints)]
    pub sweep_split: scenario::Split,
    /// Skip the scanners-at-once scenario.
    #[arg(long)]
    pub no_sweep: bool,
    /// Queue at scale: runs of `--queue-samples` calls per statement and step, interleaved;
    /// each statement's figures are its run with the median p99. [with `--quick`, 1]
    #[arg(long, default_value_t = 5)]
    pub queue_runs: usize,
    /// Skip the size runs (uploads, publication, the close run, their ceilings and peer).
    #[arg(long)]
    pub no_sizes: bool,
    /// Skip the queue-at-scale scenario.
    #[arg(long)]
    pub no_queue: bool,
    /// Fair and fresh under a backlog: endpoints of the big execution that is being
    /// published while the small ones finish. [default: 1000000; with `--quick`, 20000]
    #[arg(long)]
    pub fairness_backlog: Option<usize>,
    /// Fair and fresh under a backlog: small executions finished one after another, spaced
    /// over the big one's publication.
    #[arg(long, default_value_t = 20)]
    pub fairness_executions: usize,
    /// Fair and fresh under a backlog: endpoints of each small execution.
    #[arg(long, default_value_t = 1000)]
    pub fairness_endpoints: usize,
    /// Skip the fair-and-fresh scenario.
    #[arg(long)]
    pub no_fairness: bool,
    /// Give up waiting for publication after this many seconds (the emulator's page reads
    /// grow with the execution size, so a 1 M drain there takes hours).
    #[arg(long, default_value_t = 6 * 3600)]
    pub publish_timeout: u64,
}

/// Whether `size` is one of the large sizes (from 1 M endpoints up), whose rounds are the
/// run's longest and so are had fewer (`--large-finals`, `--sweep-large-rounds`, …).
pub fn is_large(size: usize) -> bool {
    size >= 1_000_000
}

impl Opts {
    /// Environment defaults, then the quick mode's sizes.
    fn resolve(&mut self) {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        self.admin_url = self
            .admin_url
            .take()
            .or_else(|| env("STORAGE_TEST_DATABASE_URL"));
        self.database_url = self
            .database_url
            .take()
            .or_else(|| env("SCANSTORE_DATABASE_URL"));
        self.es_url = self.es_url.take().or_else(|| env("SCANSTORE_ES_URL"));
        if self.quick {
            self.sizes = vec![10_000];
            self.batch = self.batch.min(500);
            self.pool_endpoints = 500;
            self.pool_batch = 250;
            self.short_publication_runs = self.short_publication_runs.min(3);
            self.publication_runs = self.publication_runs.min(3);
            self.attack_endpoints = self.attack_endpoints.min(500);
        }
        self.import_ports =
            Some(
                self.import_ports
                    .unwrap_or(if self.quick { 20_000 } else { 1_000_000 }),
            );
        if self.queue_history.is_empty() {
            self.queue_history = if self.quick {
                vec![2_000, 20_000]
            } else {
                vec![100_000, 1_000_000]
            };
        }
        if self.quick {
            self.queue_due = self.queue_due.min(1_000);
            self.queue_samples = self.queue_samples.min(500);
            self.queue_runs = self.queue_runs.min(1);
        }
        if self.sweep_sizes.is_empty() {
            self.sweep_sizes = if self.quick {
                vec![10_000]
            } else {
                vec![100_000, 1_000_000]
            };
        }
        if self.sweep_scanners.is_empty() {
            self.sweep_scanners = if self.quick {
                vec![4, 16]
            } else {
                vec![4, 16, 64]
            };
        }
        self.sweep_rounds = Some(self.sweep_rounds.unwrap_or(if self.quick { 1 } else { 5 }));
        self.fairness_backlog =
            Some(
                self.fairness_backlog
                    .unwrap_or(if self.quick { 20_000 } else { 1_000_000 }),
            );
        let hostile = if self.quick { 70 } else { 500 };
        self.attack_connections = Some(self.attack_connections.unwrap_or(hostile));
    }

    /// Finals to time below 1 M endpoints: `--finals`, by default 100, or one round's in
    /// quick mode.
    pub fn finals(&self) -> usize {
        self.finals
            .unwrap_or(if self.quick { self.scanners } else { 100 })
    }

    /// Finals to time at `size`: `--large-finals` from 1 M up (at most `finals`).
    pub fn finals_at(&self, size: usize) -> usize {
        match is_large(size) {
            true => self.large_finals.unwrap_or(40).min(self.finals()),
            false => self.finals(),
        }
    }

    /// Upload rounds at `size`: enough for its finals, one per scanner and round.
    pub fn upload_rounds(&self, size: usize) -> usize {
        self.finals_at(size).div_ceil(self.scanners.max(1)).max(1)
    }
}

fn main() -> ExitCode {
    let mut opts = Opts::parse();
    opts.resolve();
    let ran = run(&opts);
    cpus::undo();
    match ran {
        Ok(path) => {
            println!("report: {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scanstore-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Opts) -> Result<PathBuf, String> {
    for bin in [&opts.scanstore_bin, &opts.emulator_bin] {
        if !bin.exists() && (bin == &opts.scanstore_bin || opts.es_url.is_none()) {
            return Err(format!(
                "{} not found (build it, or pass --scanstore-bin/--emulator-bin)",
                bin.display()
            ));
        }
    }
    if opts.es_url.is_none() && (opts.es_api_key_file.is_some() || opts.es_ca_file.is_some()) {
        return Err("--es-api-key-file and --es-ca-file are for --es-url".into());
    }
    if opts.es_url.is_some() {
        let api_key = match &opts.es_api_key_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| format!("{}: {e}", f.display()))?
                    .trim()
                    .to_owned(),
            ),
            None => std::env::var("SCANSTORE_ES_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
        };
        stack::set_external(stack::External {
            api_key,
            ca: opts.es_ca_file.clone(),
        });
    }
    if let Some(emulator) = &opts.emulator_cpus {
        if opts.es_url.is_some() {
            return Err("--emulator-cpus is for the emulator, not --es-url".into());
        }
        let db = opts
            .database_url
            .as_ref()
            .or(opts.admin_url.as_ref())
            .ok_or("no database: give --admin-url or --database-url")?;
        cpus::apply(emulator, db)?;
    }
    let _ = scenario::PREFIX_ROOT.set(opts.prefix_root.clone());
    let logs = opts.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    if opts.tls {
        stack::enable_tls(&opts.out.join("tls"))?;
    }
    let started = chrono::Utc::now();
    // The pool comparison first, on a quiet machine: right after the 1 M scenario, whose
    // database and indices are being torn down, its runs lost seconds to stalls of the
    // whole process and PostgreSQL (0.77 and 1.35 came out of two full runs).
    let mut pools = Vec::new();
    if !opts.no_pool {
        for pool in [16, 1] {
            eprintln!(
                "== pool_size {pool}: {} scanners, ES latency {} ms",
                opts.pool_scanners, opts.es_latency_ms
            );
            pools.push(scenario::pool_run(opts, pool, &logs)?);
        }
    }
    let sampler = cpu::Sampler::start();
    let attack = match opts.attack_connections {
        Some(n) if n > 0 => {
            eprintln!(
                "== front door: {} scanners, {n} hostile connections",
                opts.attack_scanners
            );
            Some(attack::run(opts, n, &logs, &sampler)?)
        }
        _ => None,
    };
    let queue = if opts.no_queue {
        None
    } else {
        eprintln!("== queue at scale: {} due rows", opts.queue_due);
        Some(queue::run(opts)?)
    };
    let imports = if opts.no_imports {
        Vec::new()
    } else {
        imports::run(opts, &logs)?
    };
    let sweep = if opts.no_sweep {
        None
    } else {
        Some(sweep::run(opts, &logs, &sampler)?)
    };
    let fairness = if opts.no_fairness {
        None
    } else {
        Some(fairness::run(opts, &logs)?)
    };
    let mut sizes = Vec::new();
    for &size in opts.sizes.iter().filter(|_| !opts.no_sizes) {
        eprintln!("== size {size}: ceiling, peer, upload, publication");
        sizes.push(scenario::size_run(opts, size, &logs, &sampler)?);
    }
    drop(sampler);
    let results = report::Results {
        started,
        finished: chrono::Utc::now(),
        sizes,
        pools,
        attack,
        imports,
        queue,
        sweep,
        fairness,
    };
    let pngs = plot::all(&results, &opts.out);
    report::write(opts, &results, &pngs)
}
