//! The import scenario: scanner output files through `scanstore-client import` — a masscan
//! `-oL` file of `--import-ports` open ports and an nmap XML file of a quarter of them
//! (with services, CPEs and script output) — timed beside the
//! raw upload of the same observations in the same batches by one sequential sender (what
//! the client's parsing, journal and fitting cost on top), with the client's peak memory
//! and CPU from the kernel's accounting of the child.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::stack::{self, Database, ServeCfg};
use crate::{factory, scanner, scenario, workload, Opts};

/// Observations per batch, the client's default.
const BATCH: usize = 1000;
/// Open ports per host in the nmap file.
const NMAP_PORTS_PER_HOST: usize = 10;

pub struct ImportResult {
    pub format: &'static str,
    pub ports: usize,
    pub file_bytes: u64,
    pub client_seconds: f64,
    pub client_cpu_seconds: f64,
    pub client_peak_rss_kib: u64,
    pub raw_seconds: f64,
}

impl ImportResult {
    pub fn ports_per_s(&self) -> f64 {
        self.ports as f64 / self.client_seconds.max(1e-9)
    }

    pub fn raw_ports_per_s(&self) -> f64 {
        self.ports as f64 / self.raw_seconds.max(1e-9)
    }
}

/// The i-th port of the files: ten ports per address from 10.0.0.1 up.
fn address(i: usize, per_host: usize) -> (String, u16) {
    let a = i / per_host + 1;
    let ip = format!("10.{}.{}.{}", (a >> 16) & 255, (a >> 8) & 255, a & 255);
    (ip, 8000 + (i % per_host) as u16)
}

/// The observation the client makes of port `i` of the file of `format`.
fn observation(format: &str, i: usize, at: &DateTime<Utc>) -> Value {
    let observed_at = at.to_rfc3339_opts(SecondsFormat::Millis, true);
    let (ip, port) = address(i, NMAP_PORTS_PER_HOST);
    match format {
        "nmap-xml" => json!({"type": "endpoint", "ip": ip, "port": port, "transport": "tcp",
            "service": "http", "product": "nginx", "version": "1.24.0",
            "cpe": ["cpe:/a:igor_sysoev:nginx:1.24.0"], "confidence": 10,
            "scripts": [{"id": "http-server-header", "output": "nginx/1.24.0"}],
            "observed_at": observed_at}),
        _ => json!({"type": "endpoint", "ip": ip, "port": port, "transport": "tcp",
            "observed_at": observed_at}),
    }
}

/// Writes the file of `format` with `ports` open ports observed at `at`.
fn write_file(format: &str, path: &Path, ports: usize, at: &DateTime<Utc>) -> Result<u64, String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = BufWriter::new(f);
    let t = at.timestamp();
    let mut out = |s: &str| w.write_all(s.as_bytes());
    let mut line = String::new();
    let written: std::io::Result<()> = (|| {
        if format == "masscan-list" {
            out("#masscan\n")?;
            for i in 0..ports {
                let (ip, port) = address(i, NMAP_PORTS_PER_HOST);
                line.clear();
                let _ = writeln!(line, "open tcp {port} {ip} {t}");
                out(&line)?;
            }
            return out("# end\n");
        }
        out(&format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE nmaprun>\n\
             <nmaprun scanner=\"nmap\" args=\"nmap -sV 10.0.0.0/8\" start=\"{t}\" version=\"7.93\" xmloutputversion=\"1.05\">\n"
        ))?;
        for h in 0..ports.div_ceil(NMAP_PORTS_PER_HOST) {
            let (ip, _) = address(h * NMAP_PORTS_PER_HOST, NMAP_PORTS_PER_HOST);
            line.clear();
            let _ = write!(
                line,
                "<host starttime=\"{t}\" endtime=\"{t}\"><status state=\"up\" reason=\"syn-ack\" reason_ttl=\"64\"/>\n\
                 <address addr=\"{ip}\" addrtype=\"ipv4\"/>\n<hostnames>\n</hostnames>\n<ports>\
                 <extraports state=\"closed\" count=\"990\"><extrareasons reason=\"reset\" count=\"990\"/></extraports>\n"
            );
            for i in h * NMAP_PORTS_PER_HOST..((h + 1) * NMAP_PORTS_PER_HOST).min(ports) {
                let (_, port) = address(i, NMAP_PORTS_PER_HOST);
                let _ = writeln!(
                    line,
                    "<port protocol=\"tcp\" portid=\"{port}\"><state state=\"open\" reason=\"syn-ack\" reason_ttl=\"64\"/>\
                     <service name=\"http\" product=\"nginx\" version=\"1.24.0\" method=\"probed\" conf=\"10\">\
                     <cpe>cpe:/a:igor_sysoev:nginx:1.24.0</cpe></service>\
                     <script id=\"http-server-header\" output=\"nginx/1.24.0\"/></port>"
                );
            }
            line.push_str("</ports>\n<times srtt=\"50\" rttvar=\"10\" to=\"100000\"/>\n</host>\n");
            out(&line)?;
        }
        out("<runstats><finished time=\"0\" exit=\"success\"/></runstats>\n</nmaprun>\n")
    })();
    written
        .and_then(|_| w.flush())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs the client and waits for it with `wait4`: (wall seconds, CPU seconds, peak RSS KiB).
/// The peak is its VmHWM, sampled while it runs: `wait4`'s `ru_maxrss` keeps the resident
/// set of the process it was spawned from (the bench's, recorded at `exec`), not the
/// client's own.
fn run_client(mut cmd: Command) -> Result<(f64, f64, u64), String> {
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("scanstore-client: {e}"))?;
    let pid = child.id() as libc::pid_t;
    let done = AtomicBool::new(false);
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let (waited, peak_kib) = std::thread::scope(|s| {
        let watch = s.spawn(|| {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(stack::vm_hwm_kib(child.id()).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        // SAFETY: waits for our own child, with valid pointers to locals.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        done.store(true, Ordering::Relaxed);
        (waited, watch.join().unwrap_or(0))
    });
    let wall = started.elapsed().as_secs_f64();
    if waited != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("scanstore-client failed (wait status {status})"));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((wall, secs(usage.ru_utime) + secs(usage.ru_stime), peak_kib))
}

/// The same observations as the file, in the client's batches, sent one by one.
fn raw_upload(
    base: &str,
    token: &str,
    execution: Uuid,
    format: &str,
    ports: usize,
    at: &DateTime<Utc>,
) -> Result<f64, String> {
    let agent = scanner::agent();
    let url = format!("{base}/api/v1/scanner/executions/{execution}/batches");
    let upload = Uuid::new_v4();
    let started = Instant::now();
    let batches = ports.div_ceil(BATCH);
    for b in 0..batches {
        let obs: Vec<Value> = (b * BATCH..((b + 1) * BATCH).min(ports))
            .map(|i| observation(format, i, at))
            .collect();
        let body = workload::body(upload, "main", b as u32, b + 1 == batches, &obs);
        scanner::post(&agent, &url, token, &body)?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// A fresh stack — database, ES target, scanstore without publishers — with a scanner and
/// a running execution; `f` gets the server URL, the scanner token and the execution.
fn on_fresh_stack<T>(
    opts: &Opts,
    dir: &Path,
    name: &str,
    f: impl FnOnce(&str, &str, Uuid) -> Result<T, String>,
) -> Result<T, String> {
    let db = Database::open(opts)?;
    let (_emulator, es_url) = scenario::es_target(opts, dir, name, 0)?;
    let cfg = ServeCfg {
        pool_size: opts.pool_size,
        workers: 0,
        worker_threads: 8,
        bulk_max_concurrency: opts.bulk_concurrency,
        lease_seconds: 60,
        heartbeat_seconds: 10,
        nice: 0,
    };
    let mut server = stack::scanstore(opts, &db, &es_url, &scenario::prefix(), &cfg, dir, name)?;
    let mut c = db.connect()?;
    let owner = factory::owner(&mut c)?;
    let s = factory::scanner(&mut c)?;
    let e = factory::execution(&mut c, owner, s.id, "port_scan")?;
    let out = f(&server.url, &s.token, e.execution_id);
    server.stop();
    out
}

/// Each format's file through the client, then the same observations raw, each on a
/// stack of its own (an emulator holding both would need twice the memory).
pub fn run(opts: &Opts, dir: &Path) -> Result<Vec<ImportResult>, String> {
    let client_bin = opts.scanstore_bin.with_file_name("scanstore-client");
    let at = Utc::now() - chrono::Duration::hours(1);
    let mut results = Vec::new();
    let all = opts.import_ports.unwrap_or(1_000_000);
    // nmap's documents are several times masscan's: a quarter of the ports keeps the
    // emulator's memory within the machine's.
    for (format, ports) in [("masscan-list", all), ("nmap-xml", all.div_ceil(4))] {
        let ext = if format == "nmap-xml" { "xml" } else { "txt" };
        let file = dir.join(format!("import-{format}.{ext}"));
        let file_bytes = write_file(format, &file, ports, &at)?;
        eprintln!(
            "== import {format}: {ports} ports, {} MiB",
            file_bytes >> 20
        );
        let (client_seconds, client_cpu_seconds, client_peak_rss_kib) = on_fresh_stack(
            opts,
            dir,
            &format!("import-{ext}"),
            |url, token, execution| {
                let mut cmd = Command::new(&client_bin);
                cmd.env("SCANSTORE_URL", url)
                    .env("SCANSTORE_SCANNER_TOKEN", token)
                    .env("SCANSTORE_JOURNAL_DIR", dir.join("journals"))
                    .env("RUST_LOG", "warn")
                    .args(["--quiet", "import", "--format", format, "--execution"])
                    .arg(execution.to_string())
                    .arg(&file);
                if let Some(tls) = stack::tls() {
                    cmd.env("SCANSTORE_CA_FILE", &tls.ca);
                }
                run_client(cmd)
            },
        )?;
        let raw_seconds =
            on_fresh_stack(opts, dir, &format!("raw-{ext}"), |url, token, execution| {
                raw_upload(url, token, execution, format, ports, &at)
            })?;
        let _ = std::fs::remove_file(&file);
        results.push(ImportResult {
            format,
            ports,
            file_bytes,
            client_seconds,
            client_cpu_seconds,
            client_peak_rss_kib,
            raw_seconds,
        });
    }
    Ok(results)
}
