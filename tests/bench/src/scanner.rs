//! Simulated scanners: one thread per scanner POSTs its execution's batches in order,
//! their bodies built before the clock starts (as the ceiling's `_bulk` bodies are),
//! re-sends every `retry_every`-th confirmed batch (a confirmed retry, which must answer
//! `saved: 0`), and times every request on the client side into an HDR histogram per
//! class: normal batch, final, confirmed retry, DNS/mixed.

use std::collections::BTreeMap;
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde_json::Value;
use uuid::Uuid;

use crate::workload::{Batch, ExecutionPlan};

pub const CLASSES: [&str; 4] = ["normal", "final", "confirmed_retry", "dns"];

pub fn agent() -> ureq::Agent {
    let mut config = ureq::Agent::config_builder();
    if let Some(ca) = crate::stack::ca_file() {
        // Checked when the CA was made or given; a CA that cannot be read fails the first
        // request.
        if let Ok(roots) = scanstore::es::access::ca_roots(&ca) {
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
    }
    config
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .max_idle_connections_per_host(256)
        .build()
        .into()
}

/// Microsecond histograms, one per class.
#[derive(Clone)]
pub struct Latencies(pub BTreeMap<&'static str, Histogram<u64>>);

impl Latencies {
    pub fn new() -> Latencies {
        Latencies(
            CLASSES
                .iter()
                .map(|c| {
                    (
                        *c,
                        Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds"),
                    )
                })
                .collect(),
        )
    }

    fn record(&mut self, class: &'static str, d: Duration) {
        let us = (d.as_micros() as u64).max(1);
        if let Some(h) = self.0.get_mut(class) {
            h.saturating_record(us);
        }
    }

    pub fn merge(&mut self, other: &Latencies) {
        for (k, h) in &other.0 {
            if let Some(mine) = self.0.get_mut(k) {
                let _ = mine.add(h);
            }
        }
    }
}

/// One scanner's work: its token, its execution and what to upload.
pub struct Job {
    pub token: String,
    pub execution_id: Uuid,
    pub plan: ExecutionPlan,
}

#[derive(Clone)]
pub struct UploadOutcome {
    pub latencies: Latencies,
    pub wall: Duration,
    pub endpoints: usize,
    pub observations: usize,
    pub requests: usize,
    /// 503 answers (pool timeout) that were retried after `Retry-After`.
    pub retried_503: usize,
    /// When the clock started and when the last scanner finished (seconds since the Unix
    /// epoch), for the CPU of the upload itself, without the building of its bodies.
    pub span: (f64, f64),
}

fn class_of(b: &Batch) -> &'static str {
    if b.is_final {
        "final"
    } else if b.dns > 0 {
        "dns"
    } else {
        "normal"
    }
}

/// POSTs one body until it is not a 503; returns (status, saved, client latency of the
/// answered attempt, 503s seen).
pub fn post(
    agent: &ureq::Agent,
    url: &str,
    token: &str,
    body: &[u8],
) -> Result<(u64, Duration, usize), String> {
    let mut busy = 0;
    loop {
        let started = Instant::now();
        let mut resp = agent
            .post(url)
            .header("Authorization", &format!("Bearer {token}"))
            .header("Content-Type", "application/json")
            .send(body)
            .map_err(|e| format!("POST {url}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let took = started.elapsed();
        match status {
            200 => {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                return Ok((v["saved"].as_u64().unwrap_or(u64::MAX), took, busy));
            }
            503 if busy < 20 => {
                busy += 1;
                std::thread::sleep(Duration::from_secs(2));
            }
            _ => {
                return Err(format!(
                    "POST {url}: {status} {}",
                    &text[..text.len().min(300)]
                ))
            }
        }
    }
}

/// When the scanners start: every one has built all its batches (so that building bodies,
/// which a real scanner does on its own machine, takes nothing from the server's answers,
/// as the ceiling's client sends bodies built before its clock), then the clock starts for
/// all: as an instant, and as seconds since the Unix epoch for the CPU sampler.
struct Start {
    built: Barrier,
    at: OnceLock<(Instant, f64)>,
}

impl Start {
    fn new(scanners: usize) -> Start {
        Start {
            built: Barrier::new(scanners),
            at: OnceLock::new(),
        }
    }

    fn wait(&self) -> Instant {
        self.built.wait();
        self.at
            .get_or_init(|| (Instant::now(), crate::cpu::now()))
            .0
    }
}

/// `pace`: this scanner's endpoints per second and how long after the start its schedule
/// begins (main batch k is due k batch intervals later, sent at once when late), or none
/// for as fast as answers come.
fn upload(
    base: &str,
    job: &Job,
    retry_every: usize,
    bar: &ProgressBar,
    pace: Option<(f64, Duration)>,
    start: &Start,
) -> Result<UploadOutcome, String> {
    let agent = agent();
    let url = format!(
        "{base}/api/v1/scanner/executions/{}/batches",
        job.execution_id
    );
    let mut out = UploadOutcome {
        latencies: Latencies::new(),
        wall: Duration::ZERO,
        endpoints: 0,
        observations: 0,
        requests: 0,
        retried_503: 0,
        span: (0.0, 0.0),
    };
    let batches: Vec<Batch> = job.plan.batches(Uuid::new_v4()).collect();
    let started = start.wait();
    let mut mains = 0u32;
    for b in batches {
        // Main batch k is due k batch intervals after this scanner's start, whatever its
        // size: timed by endpoints sent, the short first batch would bring every scanner's
        // second one forward, and with few batches each the crowd's starts and finals would
        // overlap at twice the offered load. Side batches go with the main one before them.
        if let (Some((rate, lag)), "main") = (pace, b.stream) {
            let due = started
                + lag
                + Duration::from_secs_f64(mains as f64 * job.plan.batch as f64 / rate);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            mains += 1;
        }
        let (saved, took, busy) = post(&agent, &url, &job.token, &b.body)?;
        out.retried_503 += busy;
        out.requests += 1;
        if saved != (b.endpoints + b.dns) as u64 {
            return Err(format!(
                "batch {} {}: saved {saved}, sent {}",
                b.stream,
                b.index,
                b.endpoints + b.dns
            ));
        }
        out.latencies.record(class_of(&b), took);
        out.endpoints += b.endpoints;
        out.observations += b.endpoints + b.dns;
        bar.inc(b.endpoints as u64);
        // The first batch and every `retry_every`-th after it, so small executions retry too.
        if retry_every > 0
            && b.stream == "main"
            && !b.is_final
            && b.index as usize % retry_every == 0
        {
            let (saved, took, busy) = post(&agent, &url, &job.token, &b.body)?;
            out.retried_503 += busy;
            out.requests += 1;
            if saved != 0 {
                return Err(format!(
                    "confirmed retry of batch {} saved {saved}, not 0",
                    b.index
                ));
            }
            out.latencies.record("confirmed_retry", took);
        }
    }
    Ok(out)
}

/// Runs every job on its own thread at once, each as fast as its answers come, and merges
/// the outcomes.
pub fn run(
    base: &str,
    jobs: Vec<Job>,
    retry_every: usize,
    bar: &ProgressBar,
) -> Result<UploadOutcome, String> {
    run_paced(base, jobs, retry_every, bar, None)
}

/// [`run`], the scanners together offering `per_s` endpoints per second when given (an
/// even share each), as scanners that find ports at their own pace do: the load is then
/// the same whatever their number, and latency shows what their concurrency costs.
pub fn run_paced(
    base: &str,
    jobs: Vec<Job>,
    retry_every: usize,
    bar: &ProgressBar,
    per_s: Option<f64>,
) -> Result<UploadOutcome, String> {
    let start = Start::new(jobs.len());
    let n = jobs.len().max(1) as f64;
    let results: Vec<Result<UploadOutcome, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                // Schedules staggered over one batch interval, not all at once.
                let pace = per_s.map(|r| {
                    let share = r / n;
                    let lag = i as f64 / n * job.plan.batch as f64 / share;
                    (share, Duration::from_secs_f64(lag))
                });
                let start = &start;
                s.spawn(move || upload(base, job, retry_every, bar, pace, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("scanner thread panicked".into()))
            })
            .collect()
    });
    let started = start.at.get();
    let mut total = UploadOutcome {
        latencies: Latencies::new(),
        wall: started.map_or(Duration::ZERO, |t| t.0.elapsed()),
        endpoints: 0,
        observations: 0,
        requests: 0,
        retried_503: 0,
        span: (started.map_or(0.0, |t| t.1), crate::cpu::now()),
    };
    for r in results {
        let r = r?;
        total.latencies.merge(&r.latencies);
        total.endpoints += r.endpoints;
        total.observations += r.observations;
        total.requests += r.requests;
        total.retried_503 += r.retried_503;
    }
    Ok(total)
}
