//! The benchmark tool itself: `scanstore-bench --quick` runs end to end against
//! a throwaway setup — databases in the test cluster, a fresh emulator and `scanstore
//! serve` processes from this build — and writes a report whose numbers are sane.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::db;

/// `scanstore-bench` with this build's binaries, on the test cluster and a fresh emulator
/// (or the real cluster of `STORAGE_TEST_ES_URL`, returned), writing to `out`.
fn bench(out: &Path) -> (Command, Option<String>) {
    let mut cmd = Command::new(crate::support::tools::bin("scanstore-bench"));
    cmd.arg("--scanstore-bin")
        .arg(env!("CARGO_BIN_EXE_scanstore"))
        .arg("--emulator-bin")
        .arg(crate::support::tools::bin("scanstore-es-emulator"))
        .arg("--peer-script")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/peer_bulk.py"
        ))
        .arg("--out")
        .arg(out)
        .env("STORAGE_TEST_DATABASE_URL", db::admin_url())
        .env_remove("SCANSTORE_DATABASE_URL")
        .env_remove("SCANSTORE_ES_URL");
    let real = std::env::var("STORAGE_TEST_ES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if let Some(url) = &real {
        cmd.arg("--es-url").arg(url);
        let access = crate::support::secure::suite_access();
        if let Some(key) = &access.api_key {
            cmd.env("SCANSTORE_ES_API_KEY", key);
        }
        if let Some(ca) = &access.ca_file {
            cmd.arg("--es-ca-file").arg(ca);
        }
    }
    // Its indices and templates under the run's root, for the cleanup of a shared cluster.
    cmd.arg("--prefix-root")
        .arg(format!("{}bench", crate::support::emulator::es_root()));
    (cmd, real)
}

/// Asserts that the bench ran to the end, showing its output where it did not.
fn succeeded(run: &std::process::Output) {
    assert!(
        run.status.success(),
        "scanstore-bench failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("scanstore-bench-{}", uuid::Uuid::new_v4().simple()))
}

#[test]
#[ignore = "needs PostgreSQL"]
fn quick_mode_writes_a_sane_report() {
    let out = out_dir();
    let (mut cmd, real) = bench(&out);
    cmd.arg("--quick")
        .args(["--scanners", "4", "--finals", "8"])
        // A debug build publishes slowly: a smaller backlog and fewer small executions.
        .args(["--fairness-backlog", "8000", "--fairness-executions", "8"]);
    let started = std::time::Instant::now();
    succeeded(&cmd.output().expect("run scanstore-bench"));
    eprintln!("scanstore-bench --quick took {:?}", started.elapsed());

    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md written");
    assert!(
        report.contains("## Targets") && report.contains("## Upload latency per class"),
        "{report}"
    );
    assert!(report.contains("2 at 10000 (8 finals)"), "{report}");
    // The publisher runs niced, as on a machine it shares with ES and PostgreSQL, and the
    // report says so.
    assert!(report.contains("`projection.nice` 19"), "{report}");
    let publisher = std::fs::read_to_string(out.join("logs/size10000-publish.toml"))
        .expect("the publishing scanstore's config");
    assert!(publisher.contains("nice = 19\n"), "{publisher}");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary.json"))
            .expect("json");
    let size = &summary["sizes"][0];
    assert_eq!(size["endpoints"], 10_000, "{summary:#}");
    // The figures scripts/test-real-es.sh puts under its table (a debug build's: they tell
    // the cluster from the emulator, not what a release build reaches).
    let rate = |key: &str| size[key].as_f64().unwrap_or(0.0).round();
    println!(
        "BENCH upload {} endpoints/s (raw _bulk ceiling {}), publication {} endpoints/s (ceiling {})",
        rate("upload_endpoints_per_s"),
        rate("ceiling_upload_endpoints_per_s"),
        rate("publication_endpoints_per_s"),
        rate("ceiling_publication_endpoints_per_s")
    );
    assert_eq!(size["published"], 10_000, "{summary:#}");
    for key in [
        "upload_endpoints_per_s",
        "publication_endpoints_per_s",
        "ceiling_upload_endpoints_per_s",
        "ceiling_publication_endpoints_per_s",
    ] {
        assert!(
            size[key].as_f64().unwrap_or(0.0) > 0.0,
            "{key}: {summary:#}"
        );
    }
    // The publication ceiling ran before and after the publication; its rate is their mean.
    let runs: Vec<f64> = size["ceiling_publication_runs_seconds"]
        .as_array()
        .expect("ceiling runs")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert_eq!(runs.len(), 2, "{summary:#}");
    let mean = 10_000.0 / ((runs[0] + runs[1]) / 2.0);
    let rate = size["ceiling_publication_endpoints_per_s"]
        .as_f64()
        .unwrap();
    assert!((rate - mean).abs() < 1e-6 * mean, "{rate} vs {mean}");
    // A publication under 10 s is repeated: quick mode publishes three times in all (fresh
    // executions each time) and reports the run with the median ratio to its ceiling. (A
    // slow debug build may take longer than that: then there is one run.) The repeats'
    // uploads are the size's upload rounds, no more finals than asked for (below).
    let publications = size["publication_runs"]
        .as_array()
        .expect("publication_runs");
    let first_seconds = publications[0]["seconds"].as_f64().unwrap_or(0.0);
    let expected = if first_seconds < 10.0 { 3 } else { 1 };
    assert_eq!(publications.len(), expected, "{summary:#}");
    let mut sorted: Vec<f64> = publications
        .iter()
        .map(|r| r["ratio"].as_f64().unwrap_or(0.0))
        .collect();
    sorted.sort_by(f64::total_cmp);
    let reported = size["publication_endpoints_per_s"].as_f64().unwrap() / rate;
    let median = sorted[(sorted.len() - 1) / 2];
    assert!((reported - median).abs() < 1e-9, "{reported} vs {sorted:?}");
    // The front door: both phases uploaded everything (quick mode: 8 scanners × 500),
    // hostile clients connected while the second ran, and the report shows both.
    let attack = &summary["attack"];
    assert_eq!(attack["connections"], 70, "{summary:#}");
    for phase in ["quiet", "attacked"] {
        assert_eq!(attack[phase]["endpoints"], 4000, "{phase}: {summary:#}");
        assert!(attack[phase]["peak_threads"].as_u64().unwrap_or(0) > 0);
        assert!(attack[phase]["peak_rss_kib"].as_u64().unwrap_or(0) > 0);
    }
    assert!(attack["hostile_connections_made"].as_u64().unwrap_or(0) >= 70);
    assert!(report.contains("## Front door under attack"), "{report}");
    // The import scenario: both formats through the client, beside their raw upload.
    let imports = summary["imports"].as_array().expect("imports");
    assert_eq!(imports.len(), 2, "{summary:#}");
    assert_eq!(imports[0]["ports"], 20_000, "{summary:#}");
    assert_eq!(imports[1]["ports"], 5_000, "{summary:#}");
    for i in imports {
        for key in [
            "client_ports_per_s",
            "raw_ports_per_s",
            "client_cpu_seconds",
        ] {
            assert!(i[key].as_f64().unwrap_or(0.0) > 0.0, "{key}: {summary:#}");
        }
        assert!(
            i["client_peak_rss_kib"].as_u64().unwrap_or(0) > 1024,
            "{summary:#}"
        );
    }
    assert!(report.contains("## Scanner output imports"), "{report}");
    // The queue at scale: every step timed, the oldest tenth of the history pruned (quick
    // mode: 2 000 of 20 000 executions, ten receipts each).
    let queue = &summary["queue"];
    assert_eq!(
        queue["steps"].as_array().map(Vec::len),
        Some(3),
        "{summary:#}"
    );
    assert_eq!(queue["pruned_receipts"], 20_000, "{summary:#}");
    assert!(report.contains("## Queue at scale"), "{report}");
    // Scanners at once: each count flat out beside its ceiling, then paced to the same load.
    assert!(report.contains("## Scanners at once"), "{report}");
    let sweep = summary["sweep"].as_array().expect("sweep");
    let counts: Vec<u64> = sweep
        .iter()
        .filter_map(|p| p["scanners"].as_u64())
        .collect();
    assert_eq!(counts, [4, 16], "{summary:#}");
    for p in sweep {
        let n = p["scanners"].as_u64().unwrap_or(0);
        for key in [
            "upload_endpoints_per_s",
            "ceiling_endpoints_per_s",
            "scanstore_cpu_us_per_endpoint",
        ] {
            assert!(p[key].as_f64().unwrap_or(0.0) > 0.0, "{key}: {p}");
        }
        assert_eq!(p["latency"]["final"]["count"], n, "{p}");
        assert_eq!(p["es_requests_with_connection_held"], 0, "{p}");
        // Counted by pg_stat_statements, which the test cluster preloads: a normal batch is a
        // dozen round trips, a confirmed retry a few, a final a few dozen.
        let statements = p["postgres_statements_per_request"].as_f64().unwrap_or(0.0);
        assert!((2.0..40.0).contains(&statements), "{p}");
        let paced = &p["paced"];
        assert_eq!(paced["latency"]["final"]["count"], n, "{p}");
        let (offered, reached) = (
            paced["offered_endpoints_per_s"].as_f64().unwrap_or(0.0),
            paced["endpoints_per_s"].as_f64().unwrap_or(0.0),
        );
        // The schedule holds: flat out, the fewest scanners reached twice the offered load;
        // paced, a scanner's main batch k goes k batch intervals after its own start, so the
        // crowd never runs ahead of the offered load (the short first batches and the
        // staggered starts leave it behind).
        assert!(
            offered > 0.0 && reached > 0.0 && reached <= offered * 1.1,
            "{p}"
        );
    }

    // Fair and fresh under a backlog: with 4 publishers, then 1, every small execution was
    // timed to ready while 8 pages of the big one were published (how many of them came
    // before its end is the product's figure, not the tool's: not asserted on a debug build).
    let fairness = &summary["fairness"];
    assert_eq!(fairness["backlog"], 8_000, "{summary:#}");
    let runs = fairness["runs"].as_array().expect("fairness runs");
    let workers: Vec<_> = runs.iter().map(|r| r["workers"].as_u64()).collect();
    assert_eq!(workers, [Some(4), Some(1)], "{summary:#}");
    for r in runs {
        assert_eq!(r["samples"], 8, "{r}");
        assert_eq!(r["big_pages"], 8, "{r}");
        let ready = &r["ready_s"];
        assert!(ready[0].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        assert!(ready[0].as_f64() <= ready[1].as_f64(), "{r}");
    }
    assert!(
        report.contains("## Fair and fresh under a backlog"),
        "{report}"
    );
    // CPU per phase: the emulator (when it is ours) worked in every phase; scanstore only in
    // its own, not in the ceiling's.
    let phases = size["cpu_seconds"].as_array().expect("cpu_seconds");
    let names: Vec<&str> = phases.iter().filter_map(|p| p["phase"].as_str()).collect();
    assert_eq!(
        names,
        [
            "ceiling upload",
            "upload",
            "ceiling publication",
            "publication"
        ],
        "{summary:#}"
    );
    let cpu = |phase: &str, role: &str| {
        phases.iter().find(|p| p["phase"] == phase).expect("phase")["roles"][role].as_f64()
    };
    if real.is_none() {
        for phase in &names {
            assert!(
                cpu(phase, "ES emulator").unwrap_or(0.0) > 0.0,
                "{phase}: {summary:#}"
            );
        }
    }
    assert!(
        cpu("upload", "scanstore").unwrap_or(0.0) > 0.0,
        "{summary:#}"
    );
    // Idle, scanstore's threads still wake now and then (publishers polling, the sampler,
    // the lease sweep): at most 2 % of a core over the ceiling's phase, however long the
    // phase lasts on a busy machine, plus one 10 ms tick (the kernel's CPU resolution).
    let wall = phases
        .iter()
        .find(|p| p["phase"] == "ceiling upload")
        .expect("phase")["wall_s"]
        .as_f64()
        .unwrap_or(1.0);
    assert!(
        cpu("ceiling upload", "scanstore").unwrap_or(1.0) < 0.02 * wall.max(1.0) + 0.01,
        "{summary:#}"
    );
    // One final per scanner and round: the extra round's latencies are counted too.
    assert_eq!(size["latency"]["final"]["count"], 8, "{summary:#}");
    for class in ["normal", "final", "confirmed_retry", "dns"] {
        let l = &size["latency"][class];
        assert!(
            l["count"].as_u64().unwrap_or(0) > 0,
            "no {class} requests: {summary:#}"
        );
        let (p50, p99, max) = (
            l["p50_ms"].as_f64().unwrap(),
            l["p99_ms"].as_f64().unwrap(),
            l["max_ms"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{class}: {l}");
    }
    assert!(
        size["peak_rss_kib"].as_u64().unwrap_or(0) > 0,
        "{summary:#}"
    );
    let pools = summary["pools"].as_array().expect("pools");
    assert_eq!(pools.len(), 2, "{summary:#}");
    for p in pools {
        assert!(
            p["upload_endpoints_per_s"].as_f64().unwrap_or(0.0) > 0.0,
            "{p}"
        );
        if real.is_none() {
            // Every ES request was slowed to the injected latency; a code path that held its
            // connection across ES I/O would put the median hold of its stage above it. (Single
            // long holds can come from a loaded machine, so they are reported, not asserted.)
            assert_eq!(
                p["stages_with_median_hold_at_least_es_latency"],
                serde_json::json!([]),
                "{p}"
            );
            eprintln!(
                "pool_size {}: {} checkouts held ≥ ES latency",
                p["pool_size"], p["holds_at_least_es_latency"]
            );
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The CPUs a process may run on, from `Cpus_allowed_list` in its status (`0-1,3`).
fn cpus_allowed(pid: u32) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?);
    }
    Some(cpus)
}

/// The processes whose parent is `parent` and whose command name starts with `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                return false;
            };
            let ppid = stat[close + 1..].split_whitespace().nth(1);
            stat[open + 1..close].starts_with(name) && ppid == Some(&parent.to_string())
        })
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL on this machine"]
fn the_cpu_split_puts_the_emulator_apart_and_gives_postgresql_its_cpus_back() {
    let out = out_dir();
    let (mut cmd, real) = bench(&out);
    let allowed = cpus_allowed(std::process::id()).expect("this process's CPUs");
    if allowed.len() < 2 || real.is_some() {
        // There is nothing to split on one CPU, and no emulator to pin against a real cluster.
        eprintln!(
            "skipped: {} CPUs, real cluster: {}",
            allowed.len(),
            real.is_some()
        );
        return;
    }
    let mut pg = postgres::Client::connect(&db::admin_url(), postgres::NoTls).expect("connect");
    let dir: String = pg
        .query_one("SELECT current_setting('data_directory')", &[])
        .expect("data_directory")
        .get(0);
    let pid_file =
        std::fs::read_to_string(format!("{dir}/postmaster.pid")).expect("postmaster.pid");
    let postmaster: u32 = pid_file
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .expect("pid");
    let before = cpus_allowed(postmaster).expect("the postmaster's CPUs");
    let emulator_cpu = allowed[0];
    let rest: Vec<usize> = allowed[1..].to_vec();

    // Only a small sweep: one round of 2 scanners at 2 000 endpoints.
    cmd.args([
        "--no-sizes",
        "--no-queue",
        "--no-fairness",
        "--no-imports",
        "--no-pool",
    ])
    .args([
        "--attack-connections",
        "0",
        "--no-peer",
        "--sweep-pace",
        "0",
    ])
    .args(["--sweep-sizes", "2000", "--sweep-scanners", "2"])
    .args(["--sweep-rounds", "1", "--sweep-large-rounds", "1"])
    .args(["--emulator-cpus", &emulator_cpu.to_string()])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run scanstore-bench");
    let (mut emulators, mut bench_cpus, mut postmaster_cpus) = (Vec::new(), Vec::new(), Vec::new());
    while child.try_wait().expect("wait").is_none() {
        for pid in children_named(child.id(), "scanstore-es") {
            emulators.extend(cpus_allowed(pid));
        }
        bench_cpus.extend(cpus_allowed(child.id()));
        postmaster_cpus.extend(cpus_allowed(postmaster));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    succeeded(&child.wait_with_output().expect("bench output"));
    assert!(!emulators.is_empty(), "no emulator seen");
    assert!(
        emulators.iter().all(|c| *c == vec![emulator_cpu]),
        "{emulators:?}"
    );
    // Once pinned, the bench (and so the scanstore processes it starts) and PostgreSQL run
    // on the rest; before that they may be seen on every CPU.
    assert_eq!(bench_cpus.last(), Some(&rest), "{bench_cpus:?}");
    assert!(postmaster_cpus.contains(&rest), "{postmaster_cpus:?}");
    assert_eq!(
        cpus_allowed(postmaster),
        Some(before),
        "PostgreSQL keeps the split"
    );
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(report.contains("**CPUs split**"), "{report}");
    let _ = std::fs::remove_dir_all(&out);
}
