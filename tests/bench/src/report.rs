//! The report: `report.md` with the machine, the command, every measured number, the
//! benchmark's targets (met or not) and how each number was made.

use std::fmt::Write as _;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::attack::{AttackResult, Phase};
use crate::ceiling::Sent;
use crate::cpu;
use crate::fairness::{FairRun, FairnessResult};
use crate::imports::ImportResult;
use crate::logs::{pct, LogStats};
use crate::queue::QueueResult;
use crate::scanner::{Latencies, CLASSES};
use crate::scenario::{PoolResult, PublicationRun, SizeResult};
use crate::sweep::{self, SweepResult};
use crate::Opts;

pub struct Results {
    pub started: DateTime<Utc>,
    pub finished: DateTime<Utc>,
    pub sizes: Vec<SizeResult>,
    pub pools: Vec<PoolResult>,
    pub attack: Option<AttackResult>,
    pub imports: Vec<ImportResult>,
    pub queue: Option<QueueResult>,
    pub sweep: Option<SweepResult>,
    pub fairness: Option<FairnessResult>,
}

/// (p50, p95, p99, max) in ms of a microsecond histogram.
pub fn quantiles(h: &Histogram<u64>) -> [f64; 4] {
    let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    [q(0.50), q(0.95), q(0.99), h.max() as f64 / 1000.0]
}

pub struct Machine {
    pub cpus: usize,
    pub mem_gib: f64,
    pub cpu_model: String,
}

/// A `/proc/meminfo` value in KiB (e.g. `MemTotal`), 0 if unreadable.
pub fn meminfo_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .strip_prefix(':')
                    .map(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })?
        })
        .unwrap_or(0)
}

pub fn machine() -> Machine {
    let mem_kib = meminfo_kib("MemTotal") as f64;
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into());
    Machine {
        // With the CPUs split this process runs on part of them; the machine has them all.
        cpus: crate::cpus::split()
            .map(|s| s.allowed.len())
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(0),
        mem_gib: mem_kib / 1024.0 / 1024.0,
        cpu_model,
    }
}

/// How a ceiling's time was taken, when it is the mean of runs before and after.
fn runs(sent: &Sent) -> String {
    match sent.runs.as_slice() {
        [before, after] => {
            format!(" (the mean of a run before scanstore's publication, {before:.2} s, and one after, {after:.2} s)")
        }
        _ => String::new(),
    }
}

/// The ratios of all publication runs of a size, when it had more than one.
fn runs_of(s: &SizeResult) -> String {
    if s.publications.len() < 2 {
        return String::new();
    }
    let mut all: Vec<f64> = s.publications.iter().map(PublicationRun::ratio).collect();
    all.sort_by(f64::total_cmp);
    let all: Vec<String> = all.iter().map(|r| format!("{r:.2}")).collect();
    format!(
        " (median of {} publications: {})",
        s.publications.len(),
        all.join(", ")
    )
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**missed**"
    }
}

/// The benchmark's targets as (target, measured, met).
pub fn targets(r: &Results) -> Vec<(String, String, Option<bool>)> {
    let mut t = Vec::new();
    for s in &r.sizes {
        let Some(run) = s.publication() else {
            continue;
        };
        let c = run.ratio();
        t.push((
            format!("publication ≥ 0.8 × ceiling ({} endpoints)", s.size),
            format!("{c:.2} ×{}", runs_of(s)),
            Some(c >= 0.8),
        ));
        match &s.peer {
            Ok(p) => {
                let x = ratio(s.publish_eps(), p.endpoints_per_s());
                t.push((
                    format!("publication ≥ 2 × Python peer ({} endpoints)", s.size),
                    format!("{x:.2} ×"),
                    Some(x >= 2.0),
                ));
            }
            Err(e) => t.push((
                format!("publication ≥ 2 × Python peer ({} endpoints)", s.size),
                format!("not measured: {e}"),
                None,
            )),
        }
    }
    let final_p99 = |s: &SizeResult| quantiles(&s.upload.latencies.0["final"])[2];
    let finals = |s: &SizeResult| s.upload.latencies.0["final"].len();
    match (r.sizes.first(), r.sizes.last()) {
        (Some(a), Some(b)) if r.sizes.len() > 1 => {
            let x = ratio(final_p99(b), final_p99(a));
            // One final per scanner and size: say when "p99" is just the slowest of a few.
            let few = finals(a).min(finals(b)) < 100;
            t.push((
                format!("final p99 at {} ≤ 1.5 × at {}", b.size, a.size),
                format!(
                    "{:.1} ms vs {:.1} ms = {x:.2} × ({} and {} finals{})",
                    final_p99(b),
                    final_p99(a),
                    finals(b),
                    finals(a),
                    if few {
                        "; with so few, p99 is the slowest one"
                    } else {
                        ""
                    }
                ),
                Some(x <= 1.5),
            ));
        }
        _ => t.push((
            "final p99 at 1 M ≤ 1.5 × at 10 k".into(),
            "not measured (one size in this run)".into(),
            None,
        )),
    }
    // Linear cost: the largest size against the one before it.
    if let [.., a, b] = r.sizes.as_slice() {
        if let (Some(pa), Some(pb)) = (a.publication(), b.publication()) {
            let x = ratio(pb.endpoints_per_s(), pa.endpoints_per_s());
            t.push((
                format!("publication throughput at {} ≥ 0.9 × at {}", b.size, a.size),
                format!("{x:.2} ×"),
                Some(x >= 0.9),
            ));
        }
        if let (Some(ra), Some(rb)) = (
            a.rss_upload_kib.max(a.rss_publish_kib),
            b.rss_upload_kib.max(b.rss_publish_kib),
        ) {
            let x = ratio(rb as f64, ra as f64);
            t.push((
                format!(
                    "scanstore peak RSS at {} ≤ 1.5 × at {} (size runs)",
                    b.size, a.size
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
    if let Some(s) = &r.sweep {
        t.extend(sweep::targets(s));
    }
    // scanstore's own check on every ES request, over every scanstore log of the run.
    let held_elsewhere: usize = r
        .sizes
        .iter()
        .map(|s| {
            s.upload_logs.es_requests_with_connection_held
                + s.publish_logs.es_requests_with_connection_held
        })
        .chain(r.sweep.iter().flat_map(|s| {
            s.points.iter().map(|p| {
                p.logs.es_requests_with_connection_held
                    + p.paced
                        .as_ref()
                        .map_or(0, |x| x.logs.es_requests_with_connection_held)
            })
        }))
        .sum();
    for p in &r.pools {
        match p.latency_ms {
            Some(l) => {
                let l = l as f64;
                let held = p.logs.es_requests_with_connection_held + held_elsewhere;
                let n = p.logs.holds_at_least(l);
                let systematic = p.logs.stages_with_median_hold_at_least(l);
                let long: Vec<String> = p
                    .logs
                    .long_holds_by_stage(l)
                    .iter()
                    .map(|(s, n)| format!("{s} {n}"))
                    .collect();
                let (measured, met) = if held > 0 {
                    (format!("{held} ES requests went out from a thread holding a pooled connection (`ElasticsearchRequestWithConnectionHeld`)"), Some(false))
                } else if !systematic.is_empty() {
                    (format!("median hold ≥ {l} ms in stage(s) {}: connections are held across ES I/O", systematic.join(", ")), Some(false))
                } else if n == 0 {
                    (format!("0 ES requests sent by a thread holding a connection (checked on every request, every scenario), and 0 checkouts held ≥ {l} ms while every ES request took ≥ {l} ms; longest hold {:.1} ms", p.logs.max_hold_outside_migrate()), Some(true))
                } else {
                    (format!("0 ES requests sent by a thread holding a connection (checked on every request, every scenario); the {n} checkouts held ≥ {l} ms ({}) waited on PostgreSQL or the CPU, not on ES; every stage's median hold stays below {l} ms", long.join(", ")), Some(true))
                };
                t.push((
                    format!(
                        "zero connection hold during ES I/O (pool_size {})",
                        p.pool_size
                    ),
                    measured,
                    met,
                ));
            }
            None => t.push((
                "zero connection hold during ES I/O".into(),
                "not measured (real ES: no latency injection)".into(),
                None,
            )),
        }
    }
    if let (Some(q), Some(last)) = (&r.queue, r.queue.as_ref().and_then(|q| q.steps.last())) {
        let ratios = q.ratios();
        let worst = ratios.iter().map(|r| r.1).fold(0.0, f64::max);
        t.push((
            format!(
                "queue p99 at {} processed outbox rows and {} receipts ≤ 1.5 × empty",
                last.history, last.receipts
            ),
            format!(
                "{} (median p99 of {} runs each)",
                ratios
                    .iter()
                    .map(|(name, x)| format!("{name} {x:.2} ×"))
                    .collect::<Vec<_>>()
                    .join(", "),
                q.runs
            ),
            Some(worst <= 1.5),
        ));
    }
    if let Some(f) = &r.fairness {
        t.push(fairness_target(f));
    }
    if let (Some(p16), Some(p1)) = (
        r.pools.iter().find(|p| p.pool_size == 16),
        r.pools.iter().find(|p| p.pool_size == 1),
    ) {
        let x = ratio(p1.upload_eps(), p16.upload_eps());
        t.push((
            "pool_size 1 / pool_size 16 upload throughput ≥ 0.9".into(),
            format!("{x:.2}"),
            Some(x >= 0.9),
        ));
    }
    t
}

/// The fair-and-fresh target, judged on the configured publishers' run: met when the
/// slowest small execution was ready within 5 s and every one of them while the big one
/// was still publishing (one that was not proves nothing).
fn fairness_target(f: &FairnessResult) -> (String, String, Option<bool>) {
    let name = "1 k execution ready ≤ 5 s p99 while a 1 M publishes".to_string();
    let Some(run) = f.runs.first() else {
        return (name, "not measured".into(), None);
    };
    let mut measured = format!(
        "{:.2} s p99 of {} with {}, {} of them during the backlog",
        run.ready_p99(),
        run.samples.len(),
        workers(run.workers),
        run.during()
    );
    if let Some(one) = f.runs.get(1) {
        let _ = write!(
            measured,
            "; {:.2} s with 1 worker ({} during)",
            one.ready_p99(),
            one.during()
        );
    }
    if f.backlog != 1_000_000 || f.endpoints != 1000 {
        let _ = write!(
            measured,
            " (measured with {} executions of {} endpoints while {} publish)",
            run.samples.len(),
            f.endpoints,
            f.backlog
        );
    }
    let met = run.ready_p99() <= 5.0 && run.during() == run.samples.len();
    (name, measured, Some(met))
}

fn latency_table(out: &mut String, l: &Latencies, server: &LogStats) {
    let _ = writeln!(out, "| class | requests | p50 ms | p95 ms | p99 ms | max ms | server p99 ms |\n|---|---:|---:|---:|---:|---:|---:|");
    for c in CLASSES {
        let h = &l.0[c];
        let [p50, p95, p99, max] = quantiles(h);
        let sp99 = server
            .server_upload_ms
            .get(c)
            .map(|v| pct(v, 99.0))
            .unwrap_or(0.0);
        let _ = writeln!(
            out,
            "| {c} | {} | {p50:.1} | {p95:.1} | {p99:.1} | {max:.1} | {sp99:.1} |",
            h.len()
        );
    }
}

/// The final uploads' stages, slowest first: where a final's time goes at this size.
fn final_stage_table(out: &mut String, s: &LogStats) {
    if s.final_stage_ms.is_empty() {
        return;
    }
    let mut rows: Vec<(&String, usize, f64, f64)> = s
        .final_stage_ms
        .iter()
        .map(|(st, v)| (st, v.len(), pct(v, 50.0), pct(v, 100.0)))
        .collect();
    rows.sort_by(|a, b| b.3.total_cmp(&a.3));
    let _ = writeln!(out, "
Final uploads by stage (server side, `ScanWriteStageCompleted` with `class=final`, each run of a stage; slowest 8):

| stage | runs | p50 ms | max ms |
|---|---:|---:|---:|");
    for (st, n, p50, max) in rows.iter().take(8) {
        let _ = writeln!(out, "| {st} | {n} | {p50:.1} | {max:.1} |");
    }
}

/// Where the machine's CPU went in each phase: the ceiling has the emulator alone on the
/// cores that publication shares with scanstore and PostgreSQL.
/// The close runs: a scoped execution that saw nothing closes every published endpoint.
fn close_section(o: &mut String, r: &Results) {
    if r.sizes.iter().all(|s| s.close.is_none()) {
        return;
    }
    let _ = writeln!(o, "\n## Close run\n\nAfter the (last) publication, a succeeded execution of a task scoped to every published address and port that saw none of them closes them all (two merges each), from its first claim to its completion, against the same merges sent as raw `_bulk` into indices holding the same documents (once, after it, with scanstore's indices dropped).\n\n| endpoints | closed | seconds | endpoints/s | ceiling endpoints/s | ratio |\n|---:|---:|---:|---:|---:|---:|");
    for s in &r.sizes {
        match &s.close {
            Some(Ok(c)) => {
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.2} | {:.0} | {:.0} | {:.2} |",
                    s.size,
                    c.closed,
                    c.seconds,
                    c.endpoints_per_s(),
                    c.ceiling.endpoints_per_s(),
                    c.ratio()
                );
            }
            Some(Err(e)) => {
                let _ = writeln!(o, "| {} | failed: {e} | | | | |", s.size);
            }
            None => {}
        }
    }
}

fn cpu_section(o: &mut String, r: &Results, cpus: usize) {
    let _ = writeln!(o, "\n## CPU per phase (first round)\n");
    let _ = writeln!(o, "CPU seconds of each local process over the phase's wall time, read from `/proc` every 50 ms and interpolated at the phase's start and end (the kernel counts in 10 ms ticks; a phase of a few tenths of a second is good to a few hundredths of a second per process); a ceiling phase is the mean of its runs; busy = all CPU over wall × {cpus} CPUs. \"—\": not on this machine (a real cluster, a remote database).\n");
    let mut head = String::from("| endpoints | phase | wall s |");
    for name in cpu::ROLE_NAMES {
        head.push_str(&format!(" {name} |"));
    }
    let _ = writeln!(
        o,
        "{head} total | busy |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for s in &r.sizes {
        for (phase, u) in s.cpu.named() {
            let roles: String = u
                .roles
                .iter()
                .map(|c| c.map_or(" — |".to_string(), |c| format!(" {c:.2} |")))
                .collect();
            let _ = writeln!(
                o,
                "| {} | {phase} | {:.2} |{roles} {:.2} | {:.0} % |",
                s.size,
                u.wall,
                u.total(),
                100.0 * u.total() / (u.wall * cpus.max(1) as f64).max(1e-9)
            );
        }
    }
    for s in &r.sizes {
        if let Some((c, p)) = &s.cpu.publication {
            let _ = writeln!(o, "\n- {}: publication used {:.2} CPU s ({:.2} of them outside the emulator) where the ceiling used {:.2} for the same writes: ceiling CPU / publication CPU = {:.2}, throughput ratio {:.2}",
                s.size, p.total(), p.total() - p.roles[cpu::Role::Emulator as usize].unwrap_or(0.0), c.total(),
                ratio(c.total(), p.total()), s.publications.first().map_or(0.0, PublicationRun::ratio));
        }
    }
}

fn dist(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    format!(
        "{:.0} / {:.0} / {:.0} / {:.0}",
        pct(v, 50.0),
        pct(v, 95.0),
        pct(v, 99.0),
        pct(v, 100.0)
    )
}

fn pool_table(out: &mut String, name: &str, s: &LogStats) {
    let waits = s.all_waits();
    let _ = writeln!(out, "\n**{name}** — pool wait over all checkouts: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} checkouts, {} pool timeouts)\n",
        pct(&waits, 50.0), pct(&waits, 99.0), pct(&waits, 100.0), waits.len(), s.pool_timeouts);
    let _ = writeln!(out, "| stage | checkouts | wait p99 ms | hold p50 ms | hold p99 ms | hold max ms |\n|---|---:|---:|---:|---:|---:|");
    for (stage, holds) in &s.hold_ms {
        let w = s.wait_ms.get(stage).map(|v| pct(v, 99.0)).unwrap_or(0.0);
        let _ = writeln!(
            out,
            "| {stage} | {} | {w:.3} | {:.3} | {:.3} | {:.3} |",
            holds.len(),
            pct(holds, 50.0),
            pct(holds, 99.0),
            pct(holds, 100.0)
        );
    }
}

pub fn write(opts: &Opts, r: &Results, pngs: &[PathBuf]) -> Result<PathBuf, String> {
    let m = machine();
    let mut o = String::new();
    let cmd: Vec<String> = std::env::args().collect();
    let debug = opts.scanstore_bin.to_string_lossy().contains("/debug/");
    let _ = writeln!(o, "# scanstore benchmark report\n");
    let _ = writeln!(
        o,
        "- run: {} → {} ({:.0} s)",
        r.started.format("%Y-%m-%d %H:%M:%S UTC"),
        r.finished.format("%H:%M:%S UTC"),
        (r.finished - r.started).num_milliseconds() as f64 / 1000.0
    );
    let _ = writeln!(
        o,
        "- machine: {} CPUs (`nproc`), {:.1} GiB memory, {}",
        m.cpus, m.mem_gib, m.cpu_model
    );
    let _ = writeln!(o, "- command: `{}`", cmd.join(" "));
    let _ = writeln!(
        o,
        "- transport: {}",
        if opts.tls {
            "TLS everywhere (`--tls`): scanners to scanstore over HTTPS, scanstore and the bench to the emulator over HTTPS with an API key"
        } else {
            "plain HTTP on loopback"
        }
    );
    let _ = writeln!(
        o,
        "- binaries: `{}`{}; ES: {}",
        opts.scanstore_bin.display(),
        if debug {
            " (**debug build: numbers are not representative**)"
        } else {
            ""
        },
        opts.es_url
            .as_deref()
            .map(|u| format!("`{u}`"))
            .unwrap_or_else(|| format!("a fresh `scanstore-es-emulator` per scenario, a size run's touching {} KiB of heap per endpoint before it listens (at most the memory available less 6 GiB and 5 KiB per endpoint for the Python peer), as Elasticsearch pre-touches its heap", opts.emulator_pretouch_kib_per_endpoint))
    );
    if let Some(split) = crate::cpus::split() {
        let _ = writeln!(o, "- **CPUs split** (`--emulator-cpus`): the emulator on CPU {}, the bench, scanstore and PostgreSQL on CPU {}, as when Elasticsearch has machines of its own; every ceiling measures the emulator on its CPUs alone, and \"ratio the CPU allows\" is that of the side that runs out first, each spending its own CPUs", split.emulator.list(), split.rest.list());
    }
    let _ = writeln!(o, "- size runs: {} scanners (half `port_scan`, half `mixed` with DNS records in main batches and a DNS sidecar batch every {} main batches), {} endpoints per batch, the first and every {}th confirmed main batch re-sent; scanstore `pool_size` {}, `bulk_max_concurrency` {}, `bulk_batch_size` {}, `projection.page_size` {}, `projection.workers` {}, `projection.nice` {}",
        opts.scanners, opts.dns_every, opts.batch, opts.retry_every, opts.pool_size, opts.bulk_concurrency, opts.bulk_batch_size, opts.page_size, opts.workers, opts.projection_nice);
    if !opts.no_publication {
        let _ = writeln!(o, "- the publication ceiling is sent twice, right before scanstore's publication and right after it; its throughput is the mean of the two runs' times (each run's time is in the notes under the table)");
    }
    if !opts.no_publication && opts.short_publication_runs.max(opts.publication_runs) > 1 {
        let _ = writeln!(o, "- a size whose first publication lasted under {:.0} s is published {} times in all, one under {:.0} s {} times: each time fresh executions of that size (new endpoints) are uploaded with publication off (one of the size's upload rounds) and published between two runs of their own ceiling; the table and the targets take the run with the median ratio to its ceiling, and every run is listed under the table",
            crate::scenario::SHORT_PUBLICATION_S, opts.short_publication_runs,
            crate::scenario::NOISY_PUBLICATION_S, opts.publication_runs);
    }
    let rounds: Vec<String> = opts
        .sizes
        .iter()
        .filter(|&&size| opts.upload_rounds(size) > 1)
        .map(|&size| {
            let n = opts.upload_rounds(size);
            format!("{n} at {size} ({} finals)", n * opts.scanners)
        })
        .collect();
    if !rounds.is_empty() {
        let _ = writeln!(o, "- upload rounds per size, one final per scanner and round: {} (`--finals`, from 1 M up `--large-finals`): after the first round and its publication, more sets of executions of the same size were uploaded (publication off; a repeated publication's upload is one of them while they last), each into fresh indices (scanstore's indices are deleted before a round and installed again by its scanstore, so every round meets the store as the first did); latency tables and server-side stages count every round, throughput and memory are the first round's", rounds.join(", "));
    }
    if opts.quick {
        let _ = writeln!(o, "- **quick mode**: 10 k endpoints only, small pool comparison; this checks the tool, not the product's limits");
    }
    let _ = writeln!(o, "\n## Targets\n\n| target | measured | |\n|---|---|---|");
    for (name, measured, ok) in targets(r) {
        let _ = writeln!(
            o,
            "| {name} | {measured} | {} |",
            ok.map(yes).unwrap_or("not measured")
        );
    }

    let _ = writeln!(o, "\n## Throughput against the ceiling and the peer\n");
    let _ = writeln!(o, "| endpoints | upload endpoints/s | ceiling (upload docs) | ratio | publication endpoints/s | ceiling (asset merges) | ratio | Python peer | ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in &r.sizes {
        let (peer, pr) = match &s.peer {
            Ok(p) => (
                format!("{:.0}", p.endpoints_per_s()),
                format!("{:.2}", ratio(s.publish_eps(), p.endpoints_per_s())),
            ),
            Err(e) => (format!("— ({e})"), "—".into()),
        };
        let publication = match s.publication() {
            Some(run) => format!(
                "{:.0} | {:.0} | {:.2}",
                run.endpoints_per_s(),
                run.ceiling.endpoints_per_s(),
                run.ratio()
            ),
            None => "skipped | — | —".to_string(),
        };
        let _ = writeln!(
            o,
            "| {} | {:.0} | {:.0} | {:.2} | {publication} | {peer} | {pr} |",
            s.size,
            s.upload_eps(),
            s.ceiling_upload.endpoints_per_s(),
            ratio(s.upload_eps(), s.ceiling_upload.endpoints_per_s()),
        );
    }
    for s in &r.sizes {
        let _ = write!(o, "\n- {}: upload {} endpoints ({} observations, {} requests) in {:.2} s; ceiling upload {} ops in {} requests, {:.1} MB, {:.2} s",
            s.size, s.upload.endpoints, s.upload.observations, s.upload.requests, s.upload.wall.as_secs_f64(),
            s.ceiling_upload.ops, s.ceiling_upload.requests, s.ceiling_upload.bytes as f64 / 1e6, s.ceiling_upload.seconds());
        if let Some(run) = s.publication() {
            let _ = write!(o, "; publication{} {} endpoints in {:.2} s from the first claim ({:.2} s with process start and warm-up; the first run read {} pages); ceiling publication {} ops in {} requests, {:.1} MB, {:.2} s{}",
                if s.publications.len() > 1 { " (the median run)" } else { "" },
                run.published, run.seconds, run.wall_seconds, s.publish_logs.pages,
                run.ceiling.ops, run.ceiling.requests, run.ceiling.bytes as f64 / 1e6, run.ceiling.seconds(), runs(&run.ceiling));
        }
        if let Ok(p) = &s.peer {
            let _ = write!(
                o,
                "; peer (elasticsearch-py {}) {} ops in {:.2} s",
                p.client, p.ops, p.seconds
            );
        }
        let _ = writeln!(o);
        if s.publications.len() > 1 {
            let all: Vec<String> = s
                .publications
                .iter()
                .map(|p| {
                    format!(
                        "{:.2} s vs {:.2} s = {:.2}",
                        p.seconds,
                        p.ceiling.seconds(),
                        p.ratio()
                    )
                })
                .collect();
            let _ = writeln!(o, "  - every publication of {} endpoints (publication vs its ceiling, in the order run): {}", s.size, all.join("; "));
        }
    }

    close_section(&mut o, r);
    cpu_section(&mut o, r, m.cpus);

    let _ = writeln!(o, "\n## Upload latency per class (client side)\n");
    for s in &r.sizes {
        let _ = writeln!(
            o,
            "\n### {} endpoints ({} scanners, {} endpoints per execution)\n",
            s.size, s.scanners, s.execution_endpoints
        );
        latency_table(&mut o, &s.upload.latencies, &s.upload_logs);
        final_stage_table(&mut o, &s.upload_logs);
    }

    let _ = writeln!(o, "\n## Memory\n\n| endpoints | scanstore peak RSS (VmHWM), upload phase | publication phase |\n|---:|---:|---:|");
    for s in &r.sizes {
        let f = |k: Option<u64>| {
            k.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
                .unwrap_or("—".into())
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            s.size,
            f(s.rss_upload_kib),
            f(s.rss_publish_kib)
        );
    }

    let _ = writeln!(o, "\n## ES bulk request sizes (from `ElasticsearchBulkCompleted`)\n\np50 / p95 / p99 / max\n\n| endpoints | caller | requests | bytes | operations |\n|---:|---|---:|---|---|");
    for s in &r.sizes {
        let _ = writeln!(
            o,
            "| {} | upload | {} | {} | {} |",
            s.size,
            s.upload_logs.upload_bulk_bytes.len(),
            dist(&s.upload_logs.upload_bulk_bytes),
            dist(&s.upload_logs.upload_bulk_ops)
        );
        let _ = writeln!(
            o,
            "| {} | publication | {} | {} | {} |",
            s.size,
            s.publish_logs.publish_bulk_bytes.len(),
            dist(&s.publish_logs.publish_bulk_bytes),
            dist(&s.publish_logs.publish_bulk_ops)
        );
    }

    let _ = writeln!(
        o,
        "\n## Connection pool: wait and hold (from `ScanWriteConnectionAcquired/Released`)"
    );
    for s in &r.sizes {
        pool_table(
            &mut o,
            &format!("{} endpoints, upload phase", s.size),
            &s.upload_logs,
        );
        pool_table(
            &mut o,
            &format!("{} endpoints, publication phase", s.size),
            &s.publish_logs,
        );
    }

    if !r.pools.is_empty() {
        let _ = writeln!(o, "\n## pool_size 1 vs 16 with slow ES\n");
        let _ = writeln!(o, "{} scanners × {} endpoints (batches of {}), publishers on, ES latency {} on every request, `bulk_max_concurrency` {}.\n",
            opts.pool_scanners, opts.pool_endpoints, opts.pool_batch,
            r.pools[0].latency_ms.map(|l| format!("{l} ms")).unwrap_or("not injected (real ES)".into()), (opts.pool_scanners * 2).min(64));
        let _ = writeln!(o, "| pool_size | upload endpoints/s | publication endpoints/s | batch p99 ms | final p99 ms | pool wait p99 ms | holds ≥ ES latency | longest hold ms | 503s |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for p in &r.pools {
            let l = p.latency_ms.unwrap_or(0) as f64;
            let _ = writeln!(
                o,
                "| {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.3} | {} | {:.1} | {} |",
                p.pool_size,
                p.upload_eps(),
                p.publish_eps(),
                quantiles(&p.upload.latencies.0["normal"])[2],
                quantiles(&p.upload.latencies.0["final"])[2],
                pct(&p.logs.all_waits(), 99.0),
                if l > 0.0 {
                    p.logs.holds_at_least(l).to_string()
                } else {
                    "—".into()
                },
                p.logs.max_hold_outside_migrate(),
                p.upload.retried_503
            );
        }
        let _ = writeln!(o, "\n### Heartbeat timeliness while ES is slowed\n\n| pool_size | period | renewals | gap p50 ms | gap p99 ms | max gap ms | max lateness ms | leases lost |\n|---:|---:|---:|---:|---:|---:|---:|---:|");
        for p in &r.pools {
            let g = &p.logs.heartbeat_gap_ms;
            let period = p.heartbeat_seconds as f64 * 1000.0;
            let late = if g.is_empty() {
                0.0
            } else {
                pct(g, 100.0) - period
            };
            let _ = writeln!(
                o,
                "| {} | {} s | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                p.pool_size,
                p.heartbeat_seconds,
                p.logs.renewals,
                pct(g, 50.0),
                pct(g, 99.0),
                pct(g, 100.0),
                late,
                p.logs.lease_lost
            );
        }
        for p in &r.pools {
            pool_table(&mut o, &format!("pool_size {}", p.pool_size), &p.logs);
        }
    }

    if let Some(a) = &r.attack {
        attack_section(&mut o, opts, a);
    }
    imports_section(&mut o, &r.imports);
    if let Some(q) = &r.queue {
        queue_section(&mut o, q);
    }
    if let Some(s) = &r.sweep {
        sweep::section(&mut o, opts, s);
    }
    if let Some(f) = &r.fairness {
        fairness_section(&mut o, opts, f);
    }

    if !pngs.is_empty() {
        let _ = writeln!(o, "\n## Plots\n");
        for p in pngs {
            let n = p
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let _ = writeln!(o, "![{n}]({n})");
        }
    }
    o.push_str(METHOD);
    let path = opts.out.join("report.md");
    std::fs::write(&path, o).map_err(|e| format!("{}: {e}", path.display()))?;
    let json = opts.out.join("summary.json");
    let text = serde_json::to_string_pretty(&summary(r)).map_err(|e| e.to_string())?;
    std::fs::write(&json, text).map_err(|e| format!("{}: {e}", json.display()))?;
    Ok(path)
}

fn queue_section(o: &mut String, q: &QueueResult) {
    let _ = writeln!(
        o,
        "\n## Queue at scale\n\n{} due outbox rows throughout; history added step by step: finished executions of one task, each with a processed outbox row and {} confirmed receipts (written in SQL on two sessions, then `VACUUM ANALYZE`). Each statement is called {} times per run through scanstore's own functions (claim then release; checkpoints of one claimed row; the sampler's backlog query), `scripts/backlog.sql`'s summary {} times as its text; {} runs per step, the four statements in turn. ms p50 / p99 of the run with the median p99, the runs' p99 range in brackets.\n\n| processed rows | receipts | fill s | claim | checkpoint | backlog | backlog summary |\n|---:|---:|---:|---:|---:|---:|---:|",
        q.due,
        10,
        q.samples,
        crate::queue::summary_samples(q.samples),
        q.runs
    );
    let cell =
        |x: [f64; 4], (lo, hi): (f64, f64)| format!("{:.2} / {:.2} ({lo:.2}–{hi:.2})", x[0], x[2]);
    for s in &q.steps {
        let r = s.p99_range;
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {} | {} | {} | {} |",
            s.history,
            s.receipts,
            s.fill_seconds,
            cell(s.claim, r[0]),
            cell(s.checkpoint, r[1]),
            cell(s.backlog, r[2]),
            cell(s.admin_summary, r[3])
        );
    }
    let (p, secs) = &q.prune;
    let _ = writeln!(
        o,
        "\nRetention (`execution_days`) then pruned the oldest tenth of that history (the rate at that size, in a tenth of the time): {} executions, {} receipts, {} upload streams and {} outbox rows in {:.0} s ({:.0} receipts/s), in transactions of 1000 rows.\n\nPlans at the largest step (the write path's on the execution that holds the newest receipt, a final's on the task of all that history):\n",
        p.executions,
        p.receipts,
        p.upload_streams,
        p.outbox_rows,
        secs,
        p.receipts as f64 / secs.max(1e-3)
    );
    for (name, plan) in &q.plans {
        let _ = writeln!(o, "{name}:\n```\n{plan}\n```");
    }
}

fn workers(n: usize) -> String {
    format!("{n} worker{}", if n == 1 { "" } else { "s" })
}

fn fairness_section(o: &mut String, opts: &Opts, f: &FairnessResult) {
    let _ = writeln!(
        o,
        "\n## Fair and fresh under a backlog\n\nOn a fresh stack of its own per run (database, emulator, scanstore), one execution of {} endpoints is uploaded with publication off; then scanstore starts with publishers (`projection.nice` {}, `page_size` {}, `pages_per_tick` {}) and publishes it. Once its first checkpoint is written and one more tick's worth, its pace gives the rest of its publication, divided into {} + 5 slots: every slot a scanner thread uploads one small execution of {} endpoints (batches of {}, then its final) and, from the final's answer, reads `GET /api/v1/tasks/{{id}}/executions` as the owner every 25 ms until the execution's `projection_status` is `ready` (*ready*); *processed* is the same from the final's answer to its outbox row's `processed_at`. A small execution counts as *during the backlog* when it was read as ready before the big one's `processed_at`; *big one left* is the time from its final's answer to that `processed_at`, what it would at least have waited behind a publisher that kept the big one's row to the end. With 1 publisher, the small ones get in only because the big one's row is given back after every {} pages (`available_at = now()`: it queues behind every row that became due meanwhile); each of the big one's claims but its last ended in such a yield. p99 is nearest-rank: of 20, the slowest. Seconds.\n\n| `projection.workers` | small executions | spaced s | ready p50 / p99 / max | processed p50 / p99 / max | during the backlog | big one left at their finals, p50 / max | big: pages / claims / publication s |\n|---:|---:|---:|---|---|---:|---|---|",
        f.backlog, opts.projection_nice, f.page_size, f.pages_per_tick, opts.fairness_executions, f.endpoints, opts.batch, f.pages_per_tick
    );
    let cell = |q: [f64; 3]| format!("{:.2} / {:.2} / {:.2}", q[0], q[1], q[2]);
    for r in &f.runs {
        let _ = writeln!(
            o,
            "| {} | {} | {:.2} | {} | {} | {} of {} | {:.1} / {:.1} | {} / {} / {:.1} |",
            r.workers,
            r.samples.len(),
            r.interval_s,
            cell(r.quantiles(|s| s.ready_s)),
            cell(r.quantiles(|s| s.processed_s)),
            r.during(),
            r.samples.len(),
            r.quantiles(|s| s.big_left_s)[0],
            r.quantiles(|s| s.big_left_s)[2],
            r.big_pages,
            r.big_claims,
            r.big_seconds
        );
    }
    for r in &f.runs {
        let all: Vec<String> = r
            .samples
            .iter()
            .map(|s| format!("{:.1}: {:.2}", s.at_s, s.ready_s))
            .collect();
        let _ = writeln!(
            o,
            "\n- {}, each small execution as (s into the big publication when its final was answered: s to ready): {}",
            workers(r.workers),
            all.join(", ")
        );
    }
}

fn fairness_json(r: &FairRun) -> Value {
    json!({
        "workers": r.workers,
        "interval_s": r.interval_s,
        "ready_s": r.quantiles(|s| s.ready_s),
        "processed_s": r.quantiles(|s| s.processed_s),
        "big_left_s": r.quantiles(|s| s.big_left_s),
        "during_backlog": r.during(),
        "samples": r.samples.len(),
        "big_pages": r.big_pages,
        "big_claims": r.big_claims,
        "big_seconds": r.big_seconds,
    })
}

/// Every class's latencies in one histogram.
fn all_batches(l: &Latencies) -> Histogram<u64> {
    let mut all = Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
    for h in l.0.values() {
        let _ = all.add(h);
    }
    all
}

fn attack_section(o: &mut String, opts: &Opts, a: &AttackResult) {
    let _ = writeln!(o, "\n## Front door under attack\n");
    let _ = writeln!(o, "One `scanstore serve` with the default front-door limits; {} scanners upload {} endpoints each (batches of {}) twice: first with nobody else connected, then while {} hostile connections of the kinds below are held open (a client whose connection the server closes connects again a second later).\n",
        opts.attack_scanners, opts.attack_endpoints, opts.pool_batch, a.connections);
    let _ = writeln!(o, "| phase | hostile connections | upload endpoints/s | batch p50 ms | batch p99 ms | final p99 ms | every request p99 ms | 503s retried | scanstore peak RSS MiB | peak threads | CPU s: scanstore / emulator / PostgreSQL / bench |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (name, hostile, p) in [
        ("quiet", 0, &a.quiet),
        ("attacked", a.connections, &a.attacked),
    ] {
        let _ = writeln!(o, "{}", phase_row(name, hostile, p));
    }
    let _ = writeln!(o, "\n| hostile client | connections made | answers (status × count) | closed without an answer |\n|---|---:|---|---:|");
    for (kind, s) in &a.kinds {
        let answers: Vec<String> = s
            .answers
            .iter()
            .map(|(k, n)| format!("{k} × {n}"))
            .collect();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            kind.name(),
            s.connections,
            if answers.is_empty() {
                "—".into()
            } else {
                answers.join(", ")
            },
            s.closed_silently
        );
    }
}

fn phase_row(name: &str, hostile: usize, p: &Phase) -> String {
    let u = &p.upload;
    let eps = u.endpoints as f64 / u.wall.as_secs_f64().max(1e-9);
    let normal = quantiles(&u.latencies.0["normal"]);
    let cpu: Vec<String> = p
        .cpu
        .roles
        .iter()
        .map(|r| r.map_or("—".into(), |s| format!("{s:.1}")))
        .collect();
    format!(
        "| {name} | {hostile} | {eps:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {:.0} | {} | {} |",
        normal[0],
        normal[2],
        quantiles(&u.latencies.0["final"])[2],
        quantiles(&all_batches(&u.latencies))[2],
        u.retried_503,
        p.peak_rss_kib as f64 / 1024.0,
        p.peak_threads,
        cpu.join(" / ")
    )
}

/// The headline numbers, machine-readable (the quick-mode test reads them).
fn imports_section(o: &mut String, imports: &[ImportResult]) {
    if imports.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n## Scanner output imports\n");
    let _ = writeln!(o, "`scanstore-client import --execution ID FILE` of a generated file, timed from start to exit, beside the raw upload of the same observations in the same batches of 1000 by one sequential sender (no parsing, no journal); each run on a fresh stack of its own (database, emulator, scanstore without publishers). The nmap file carries a quarter of the masscan file's ports, each with service, CPE and script output. Peak memory and CPU are the client process's (`wait4`).\n");
    let _ = writeln!(o, "| format | ports | file MiB | client s | ports/s | raw upload s | ports/s | ratio | client CPU s | client peak RSS MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for i in imports {
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} | {:.2} | {:.1} | {:.1} |",
            i.format,
            i.ports,
            i.file_bytes as f64 / 1048576.0,
            i.client_seconds,
            i.ports_per_s(),
            i.raw_seconds,
            i.raw_ports_per_s(),
            ratio(i.ports_per_s(), i.raw_ports_per_s()),
            i.client_cpu_seconds,
            i.client_peak_rss_kib as f64 / 1024.0
        );
    }
}

pub fn summary(r: &Results) -> Value {
    let lat = |l: &Latencies| -> Value {
        CLASSES
            .iter()
            .map(|c| {
                let h = &l.0[c];
                let [p50, p95, p99, max] = quantiles(h);
                (c.to_string(), json!({"count": h.len(), "p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "max_ms": max}))
            })
            .collect::<serde_json::Map<String, Value>>()
            .into()
    };
    json!({
        "sizes": r.sizes.iter().map(|s| json!({
            "endpoints": s.size,
            "upload_endpoints_per_s": s.upload_eps(),
            "publication_endpoints_per_s": s.publish_eps(),
            "ceiling_upload_endpoints_per_s": s.ceiling_upload.endpoints_per_s(),
            "ceiling_publication_endpoints_per_s": s.publication().map(|p| p.ceiling.endpoints_per_s()),
            "ceiling_publication_runs_seconds": s.publication().map(|p| p.ceiling.runs.clone()),
            "publication_runs": s.publications.iter().map(|p| json!({
                "seconds": p.seconds,
                "ceiling_seconds": p.ceiling.seconds(),
                "ratio": p.ratio(),
                // Unix seconds, to cut a whole-machine profile (`perf -k CLOCK_REALTIME`).
                "span": [p.span.0, p.span.1],
                "ceiling_spans": p.ceiling.spans.iter().map(|&(a, b)| [a, b]).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "peer_endpoints_per_s": s.peer.as_ref().ok().map(|p| p.endpoints_per_s()),
            "published": s.publication().map_or(0, |p| p.published),
            "close_endpoints_per_s": s.close.as_ref().and_then(|c| c.as_ref().ok()).map(|c| c.endpoints_per_s()),
            "close_ceiling_endpoints_per_s": s.close.as_ref().and_then(|c| c.as_ref().ok()).map(|c| c.ceiling.endpoints_per_s()),
            "latency": lat(&s.upload.latencies),
            "peak_rss_kib": s.rss_upload_kib.max(s.rss_publish_kib),
            "upload_max_hold_ms": s.upload_logs.max_hold_outside_migrate(),
            "cpu_seconds": s.cpu.named().into_iter().map(|(phase, u)| json!({
                "phase": phase,
                "wall_s": u.wall,
                "roles": cpu::ROLE_NAMES.iter().zip(u.roles).map(|(n, c)| (n.to_string(), json!(c))).collect::<serde_json::Map<String, Value>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "pools": r.pools.iter().map(|p| json!({
            "pool_size": p.pool_size,
            "es_latency_ms": p.latency_ms,
            "upload_endpoints_per_s": p.upload_eps(),
            "publication_endpoints_per_s": p.publish_eps(),
            "holds_at_least_es_latency": p.latency_ms.map(|l| p.logs.holds_at_least(l as f64)),
            "stages_with_median_hold_at_least_es_latency": p.latency_ms.map(|l| p.logs.stages_with_median_hold_at_least(l as f64)),
            "max_hold_ms": p.logs.max_hold_outside_migrate(),
            "es_requests_with_connection_held": p.logs.es_requests_with_connection_held,
            "pool_wait_p99_ms": pct(&p.logs.all_waits(), 99.0),
            "heartbeat_renewals": p.logs.renewals,
            "heartbeat_max_gap_ms": pct(&p.logs.heartbeat_gap_ms, 100.0),
        })).collect::<Vec<_>>(),
        "attack": r.attack.as_ref().map(|a| {
            let phase = |p: &Phase| json!({
                "endpoints": p.upload.endpoints,
                "p99_ms": quantiles(&all_batches(&p.upload.latencies))[2],
                "retried_503": p.upload.retried_503,
                "peak_rss_kib": p.peak_rss_kib,
                "peak_threads": p.peak_threads,
            });
            json!({
                "connections": a.connections,
                "quiet": phase(&a.quiet),
                "attacked": phase(&a.attacked),
                "hostile_connections_made": a.kinds.iter().map(|(_, s)| s.connections).sum::<u64>(),
            })
        }),
        "imports": r.imports.iter().map(|i| json!({
            "format": i.format,
            "ports": i.ports,
            "file_bytes": i.file_bytes,
            "client_seconds": i.client_seconds,
            "client_ports_per_s": i.ports_per_s(),
            "raw_seconds": i.raw_seconds,
            "raw_ports_per_s": i.raw_ports_per_s(),
            "client_cpu_seconds": i.client_cpu_seconds,
            "client_peak_rss_kib": i.client_peak_rss_kib,
        })).collect::<Vec<_>>(),
        "queue": r.queue.as_ref().map(|q| json!({
            "due": q.due,
            "steps": q.steps.iter().map(|s| json!({
                "processed_rows": s.history,
                "receipts": s.receipts,
                "claim_ms": s.claim,
                "checkpoint_ms": s.checkpoint,
                "backlog_ms": s.backlog,
                "backlog_summary_ms": s.admin_summary,
            })).collect::<Vec<_>>(),
            "p99_ratio_to_empty": q.ratios().into_iter().map(|(n, x)| (n.to_string(), json!(x))).collect::<serde_json::Map<_, _>>(),
            "pruned_receipts": q.prune.0.receipts,
            "prune_seconds": q.prune.1,
        })),
        "sweep": r.sweep.as_ref().map(|s| s.points.iter().map(|p| json!({
            "endpoints": p.size,
            "scanners": p.scanners,
            "upload_endpoints_per_s": p.endpoints_per_s().0,
            "ceiling_endpoints_per_s": p.ceiling_per_s().0,
            "ratio": p.ratio(),
            "rounds": p.rounds.iter().map(|r| json!({"endpoints_per_s": r.endpoints_per_s(), "ceiling_endpoints_per_s": r.ceiling.endpoints_per_s()})).collect::<Vec<_>>(),
            "scanstore_cpu_us_per_endpoint": p.cpu_us(cpu::Role::Scanstore, false),
            "postgres_cpu_us_per_endpoint": p.cpu_us(cpu::Role::Postgres, false),
            "ceiling_client_cpu_us_per_endpoint": p.cpu_us(cpu::Role::Bench, true),
            "postgres_statements_per_request": p.statements_per_request(),
            "machine_cpu_us_per_endpoint": p.machine_us(false),
            "ceiling_machine_cpu_us_per_endpoint": p.machine_us(true),
            "cores_busy": p.cores(false),
            "machine_cores_busy": p.machine_cores(false),
            "ceiling_machine_cores_busy": p.machine_cores(true),
            "emulator_store_lock_share": p.lock_share(false),
            "ceiling_emulator_store_lock_share": p.lock_share(true),
            "es_in_flight_us_per_operation": p.in_flight_us_per_op().0,
            "ceiling_es_in_flight_us_per_operation": p.in_flight_us_per_op().1,
            "latency": lat(&p.latencies),
            "es_requests_with_connection_held": p.logs.es_requests_with_connection_held,
            "pool_wait_p99_ms": pct(&p.logs.all_waits(), 99.0),
            "peak_rss_kib": p.rss_kib,
            "paced": p.paced.as_ref().map(|x| json!({
                "offered_endpoints_per_s": x.per_s,
                "endpoints_per_s": x.endpoints_per_s,
                "latency": lat(&x.latencies),
                "es_requests_with_connection_held": x.logs.es_requests_with_connection_held,
            })),
        })).collect::<Vec<_>>()),
        "fairness": r.fairness.as_ref().map(|f| json!({
            "backlog": f.backlog,
            "endpoints": f.endpoints,
            "page_size": f.page_size,
            "pages_per_tick": f.pages_per_tick,
            // p50, p99, max
            "runs": f.runs.iter().map(fairness_json).collect::<Vec<_>>(),
        })),
        "targets": targets(r).into_iter().map(|(t, m, ok)| json!({"target": t, "measured": m, "met": ok})).collect::<Vec<_>>(),
    })
}

const METHOD: &str = "
## How the numbers are made

- **Latency** is client-side: each simulated scanner thread times its own POST (request
  written, answer read) into an HDR histogram per class: `normal` (main batch, endpoints
  only), `final`, `confirmed_retry` (the same body re-sent after it was confirmed; must
  answer `saved: 0`), `dns` (a mixed main batch carrying DNS records, or a DNS sidecar
  batch). `server p99` is scanstore's own `ScanResultUpload duration_us` for comparison.
  Every final is a full batch: where the batch size does not divide an execution, its
  first batch is the short one, so the finals of 10 k and 1 M compare like with like.
- **Upload throughput** = endpoints uploaded / wall time of all scanners, with publication
  switched off (`projection.workers = 0`), so uploads are measured alone.
- **Publication throughput** = endpoints published (`sum(processed_endpoints)`) / (last
  `processed_at` − the publisher's first `ScanProjectionClaimed`, millisecond log time): a
  running publisher's, as the ceiling has no process to start. The backlog is held back
  (`available_at` = infinity) while the publishing scanstore starts and warms up — one
  execution of three pages per worker is uploaded through it and published, so its
  database sessions, prepared statements, connections to ES and heap are those of a
  publisher that has run before — then made due; its idle workers find it at their next
  poll and ring each other. It includes reading each page back from the execution
  projection. The time from just before the publishing scanstore was started is given too
  (with process start and warm-up). A publication under 2 s (10 k endpoints last about
  0.2 s) is repeated with fresh executions, each between two runs of its own ceiling, and
  the run with the median ratio is reported: single 10 k ratios of the same code spread
  over ±0.1.
- **`projection.nice`**: scanstore, the ES emulator and PostgreSQL share this machine's
  cores, the single-machine deployment for which README's deployment notes raise the
  publisher threads' nice value, so that background publication runs on the CPU the
  others leave idle instead of preempting them. The size runs time uploads with
  publication off; the pool comparison publishes while it uploads, so its heartbeat gaps
  are those of niced threads. The header above gives the value used;
  `--projection-nice 0` measures the publisher at the process's own priority.
- **Ceiling**: the same documents, built by scanstore's own code (`upload::facts::build`,
  `projection::page::operations`) under a separate index prefix, split with the same
  operation/byte limits, sent as raw `_bulk` requests by `bulk_max_concurrency` client
  threads straight to the same ES target (bodies pre-built, not timed), checking only the
  `errors` flag, then one `_refresh` of the indices written (timed: scanstore's finals and
  publication also end with their documents visible). Measured in the same run: the upload ceiling before scanstore's uploads,
  the publication ceiling right after them, so that each meets the ES target holding the
  same data as the scanstore phase it is compared with; each deleted afterwards.
- **Peer**: `tests/python/peer_bulk.py`, the official `elasticsearch` client's
  `helpers.streaming_bulk` (one client, as the helper works) with `chunk_size` =
  `bulk_batch_size` and `max_chunk_bytes` = `elasticsearch.bulk_max_bytes`, loading the same
  asset-merge operations (parsed before the clock starts) into the same ES target.
- **CPU per phase**: a thread of the bench reads user + system time from
  `/proc/<pid>/stat` every 50 ms for the emulator, each scanstore process, the PostgreSQL
  server (the postmaster with its live backends and those it has reaped) and the bench
  itself; a phase's CPU is the difference between its start and end, interpolated between
  samples. The ceiling has the emulator and the bench's client threads on the machine's
  cores; publication shares them with scanstore and PostgreSQL, so where the emulator is
  CPU-bound the throughput ratio follows the ratio of CPU spent.
- **Connection hold during ES I/O**: scanstore checks it itself: every checkout is recorded
  for its thread, and the ES client logs `ElasticsearchRequestWithConnectionHeld` (and counts
  `es_requests_with_connection_held`) for any request that would leave a thread holding one.
  The report counts those events over every scanstore log of the run; one is a miss. (The
  check sees the sending thread; scanstore's helper threads that send ES requests are
  started by threads that hold no connection.) As a second, independent view: a checkout
  that spans an ES request is held at least as long as that request, and in the pool runs
  every ES request is slowed to the injected latency, so the count of checkouts held at
  least that long (outside start-up migration) bounds the number that could have spanned ES
  I/O. A long hold can also come from waiting on PostgreSQL or the CPU; a stage whose
  *median* hold reaches the ES latency — what a code path holding its connection across ES
  I/O would show on every checkout — is a miss too.
- **Heartbeat gaps** are the times between a claim (`ScanProjectionClaimed`) and its first
  `ScanProjectionLeaseRenewed`, and between consecutive renewals of the same claim, from the
  log's millisecond timestamps. Lateness = largest gap − configured period.
- **Peak RSS** is `VmHWM` of the scanstore process, read from `/proc` just before it stops.
";
