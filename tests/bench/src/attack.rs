//! The front-door scenario: scanners upload twice against one `scanstore serve`, first on
//! a quiet front door, then while hundreds of hostile clients hold connections of every
//! kind the server must withstand (idle, trickled heads, promised bodies never sent,
//! upgrades, unauthenticated 16 MiB bodies, oversized heads, ambiguous framing). Measures
//! scanner latency in both phases and scanstore's peak memory and thread count.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::cpu::{Role, Sampler, Usage};
use crate::scanner::{self, UploadOutcome};
use crate::scenario::{bar, es_target, jobs, prefix, watch_postgres};
use crate::stack::{self, Database, ServeCfg};
use crate::{factory, Opts};

/// The hostile clients, one kind per connection in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Connects and sends nothing.
    Idle,
    /// Sends a head one byte a second, never ending it.
    TrickledHead,
    /// Promises a small body after `100 Continue` and never sends it.
    ExpectContinue,
    /// Asks to upgrade and keeps the connection open.
    Upgrade,
    /// Declares a 16 MiB batch without a token, sends 64 KiB of it and stalls.
    UnauthenticatedBody,
    /// A header line longer than the head limit.
    OversizedHead,
    /// `Content-Length: abc` with a second request behind it.
    AmbiguousFraming,
}

pub const KINDS: [Kind; 7] = [
    Kind::Idle,
    Kind::TrickledHead,
    Kind::ExpectContinue,
    Kind::Upgrade,
    Kind::UnauthenticatedBody,
    Kind::OversizedHead,
    Kind::AmbiguousFraming,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Idle => "idle connection",
            Kind::TrickledHead => "head trickled 1 byte/s",
            Kind::ExpectContinue => "Expect: 100-continue, body never sent",
            Kind::Upgrade => "Connection: upgrade, left open",
            Kind::UnauthenticatedBody => "16 MiB body without a token, stalled",
            Kind::OversizedHead => "64 KiB header line",
            Kind::AmbiguousFraming => "Content-Length: abc + smuggled request",
        }
    }

    /// What the client sends on connecting.
    fn opening(self, batches: &str) -> Vec<u8> {
        match self {
            Kind::Idle => Vec::new(),
            Kind::TrickledHead => b"GET /healthz HTTP/1.1\r\nX-Slow: ".to_vec(),
            Kind::ExpectContinue => format!("POST {batches} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n").into_bytes(),
            Kind::Upgrade => b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n".to_vec(),
            Kind::UnauthenticatedBody => {
                let mut r = format!("POST {batches} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 16777216\r\n\r\n").into_bytes();
                r.resize(r.len() + 64 * 1024, b' ');
                r
            }
            Kind::OversizedHead => {
                let mut r = b"GET /healthz HTTP/1.1\r\nX-Long: ".to_vec();
                r.resize(64 * 1024, b'a');
                r
            }
            Kind::AmbiguousFraming => format!("POST {batches} HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes(),
        }
    }
}

/// What the hostile clients of one kind saw.
#[derive(Default, Clone)]
pub struct KindStats {
    pub connections: u64,
    /// Final status of each answered connection.
    pub answers: BTreeMap<u16, u64>,
    /// Connections the server closed without an answer.
    pub closed_silently: u64,
}

/// One upload phase.
pub struct Phase {
    pub upload: UploadOutcome,
    pub peak_rss_kib: u64,
    pub peak_threads: u64,
    /// CPU seconds per process over the phase (the bench's are the scanners' and the
    /// hostile clients').
    pub cpu: Usage,
}

pub struct AttackResult {
    pub connections: usize,
    pub quiet: Phase,
    pub attacked: Phase,
    pub kinds: Vec<(Kind, KindStats)>,
}

/// The scenario: a quiet upload phase, then the same upload under `connections` hostile
/// connections.
pub fn run(
    opts: &Opts,
    connections: usize,
    dir: &Path,
    sampler: &Sampler,
) -> Result<AttackResult, String> {
    let name = "attack";
    let db = Database::open(opts)?;
    let (emulator, es_url) = es_target(opts, dir, name, 0)?;
    if let Some(e) = &emulator {
        sampler.watch(Role::Emulator, e.pid());
    }
    let cfg = ServeCfg {
        pool_size: opts.pool_size,
        workers: opts.workers,
        worker_threads: 16,
        bulk_max_concurrency: opts.bulk_concurrency,
        lease_seconds: 120,
        heartbeat_seconds: 20,
        nice: 0,
    };
    let mut server = stack::scanstore(opts, &db, &es_url, &prefix(), &cfg, dir, name)?;
    sampler.watch(Role::Scanstore, server.pid());
    let mut c = db.connect()?;
    watch_postgres(&mut c, sampler);
    let owner = factory::owner(&mut c)?;
    let n = opts.attack_scanners;
    let total = n * opts.attack_endpoints;
    let mut phase = |label: &str, offset: usize| -> Result<Phase, String> {
        let jobs = jobs(
            &mut c,
            owner,
            (n, total, offset),
            opts.pool_batch,
            opts.dns_every,
        )?;
        let watch = Watch::start(server.pid());
        let b = bar(total as u64, label);
        let upload = scanner::run(&server.url, jobs, opts.retry_every, &b);
        b.finish_and_clear();
        let (peak_rss_kib, peak_threads) = watch.stop();
        let upload = upload?;
        Ok(Phase {
            cpu: sampler.usage(upload.span.0, upload.span.1),
            upload,
            peak_rss_kib,
            peak_threads,
        })
    };
    let quiet = phase("front door quiet", 0)?;
    let batches = format!("/api/v1/scanner/executions/{}/batches", Uuid::new_v4());
    let attack = Attack::start(&server.url, &batches, connections);
    // Let every hostile connection be made before the scanners start.
    std::thread::sleep(Duration::from_secs(2));
    let attacked = phase("front door attacked", total);
    let kinds = attack.stop();
    server.stop();
    Ok(AttackResult {
        connections,
        quiet,
        attacked: attacked?,
        kinds,
    })
}

/// The hostile clients: one thread per connection, each reconnecting when the server
/// closes it, until stopped.
struct Attack {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<(Kind, KindStats)>>,
}

impl Attack {
    fn start(base: &str, batches: &str, connections: usize) -> Attack {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = base
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .to_string();
        let threads = (0..connections)
            .map(|i| {
                let kind = KINDS[i % KINDS.len()];
                let (stop, addr, opening) = (stop.clone(), addr.clone(), kind.opening(batches));
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || (kind, hold(&addr, kind, &opening, &stop)))
                    .expect("attacker thread")
            })
            .collect();
        Attack { stop, threads }
    }

    /// Stops the clients and sums what each kind saw.
    fn stop(self) -> Vec<(Kind, KindStats)> {
        self.stop.store(true, Ordering::SeqCst);
        let mut by_kind: BTreeMap<Kind, KindStats> = BTreeMap::new();
        for t in self.threads {
            if let Ok((kind, s)) = t.join() {
                let sum = by_kind.entry(kind).or_default();
                sum.connections += s.connections;
                sum.closed_silently += s.closed_silently;
                for (status, n) in s.answers {
                    *sum.answers.entry(status).or_default() += n;
                }
            }
        }
        by_kind.into_iter().collect()
    }
}

/// How long a hostile client waits before it connects again: each holds a connection as
/// much as it can, without turning into a flood of requests.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// One hostile connection at a time, again and again.
fn hold(addr: &str, kind: Kind, opening: &[u8], stop: &AtomicBool) -> KindStats {
    let mut stats = KindStats::default();
    let mut first_connection = true;
    while !stop.load(Ordering::SeqCst) {
        if !std::mem::take(&mut first_connection) {
            std::thread::sleep(RECONNECT_PAUSE);
        }
        let Ok(mut s) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        stats.connections += 1;
        let _ = s.set_read_timeout(Some(Duration::from_millis(250)));
        let _ = s.write_all(opening);
        let mut answer = Vec::new();
        let mut last_trickle = Instant::now();
        let mut buf = [0u8; 4096];
        let ended = loop {
            if stop.load(Ordering::SeqCst) {
                break false;
            }
            if kind == Kind::TrickledHead && last_trickle.elapsed() >= Duration::from_secs(1) {
                let _ = s.write_all(b"a");
                last_trickle = Instant::now();
            }
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) if answer.len() < 4096 => answer.extend_from_slice(&buf[..n]),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break true,
            }
        };
        if ended {
            match last_status(&answer) {
                Some(status) => *stats.answers.entry(status).or_default() += 1,
                None => stats.closed_silently += 1,
            }
        }
    }
    stats
}

/// The status of the last answer in a connection's output (a `100 Continue` may come
/// first).
fn last_status(output: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(output);
    let at = text.rfind("HTTP/1.1 ")?;
    text.get(at + 9..at + 12)?.parse().ok()
}

/// Samples a process's resident memory and thread count until stopped; keeps the peaks.
struct Watch {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<(u64, u64)>>,
    thread: std::thread::JoinHandle<()>,
}

impl Watch {
    fn start(pid: u32) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new((0, 0)));
        let (s, p) = (stop.clone(), peaks.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let (rss, threads) = (status_field(pid, "VmRSS:"), status_field(pid, "Threads:"));
                if let Ok(mut peaks) = p.lock() {
                    peaks.0 = peaks.0.max(rss);
                    peaks.1 = peaks.1.max(threads);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Watch {
            stop,
            peaks,
            thread,
        }
    }

    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        self.peaks.lock().map(|p| *p).unwrap_or_default()
    }
}

/// A number of /proc/PID/status (0 when unreadable).
fn status_field(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
