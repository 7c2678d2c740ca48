//! `scanstore-es-emulator`: the emulator's command line (see `lib.rs` and README.md).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use scanstore::http::tls::TlsFiles;
use scanstore_es_emulator::app::Limits;
use scanstore_es_emulator::{bench, congestion, start};

/// The bulk path allocates and frees a JSON tree per document; mimalloc handles that churn
/// far better than glibc malloc (see README.md for the measured numbers).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "scanstore-es-emulator",
    about = "Elasticsearch protocol emulator for scanstore tests"
)]
struct Cli {
    /// Loopback address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:9200")]
    listen: SocketAddr,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Allow sorting on `_id` unless the cluster setting `indices.id_field_data.enabled` says
    /// otherwise (ES 8 defaults to false and rejects `_id` sorts).
    #[arg(long)]
    id_field_data: bool,
    /// `http.max_content_length` in bytes.
    #[arg(long, default_value_t = 100 * 1024 * 1024)]
    max_content_length: u64,
    /// MiB of heap to touch before listening, so that the store grows into memory the OS
    /// has already backed instead of faulting it in under the store lock (0: none).
    #[arg(long, default_value_t = 0)]
    pretouch_mib: usize,
    /// Require this API key (the encoded form, as `Authorization: ApiKey …`) on every
    /// request, as a cluster with security on does; others get 401 `security_exception`.
    #[arg(long, conflicts_with = "basic_auth")]
    api_key: Option<String>,
    /// Require `USER:PASS` as HTTP basic authentication on every request.
    #[arg(long)]
    basic_auth: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (with `--tls-key`), as Elasticsearch 8
    /// does by default.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// TCP congestion control of the emulator's connections (`system`: the host's default).
    /// On loopback, BBR now and then paces a large answer out over 60–75 ms (see
    /// `congestion.rs`).
    #[arg(long, default_value = congestion::DEFAULT)]
    tcp_congestion: String,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measures bulk ingest through an in-process server.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    // The store is long-lived and re-allocates what each bulk frees: never purge.
    scanstore::allocator::setup(None);
    let cli = Cli::parse();
    if let Some(Command::Bench(args)) = cli.command {
        return match bench::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    scanstore_es_emulator::memory::pretouch(cli.pretouch_mib);
    let limits = Limits {
        max_content_length: cli.max_content_length,
        ..Limits::default()
    };
    let authorization = match (&cli.api_key, &cli.basic_auth) {
        (Some(key), _) => Some(format!("ApiKey {key}")),
        (None, Some(pair)) => {
            use base64::Engine;
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            Some(format!("Basic {encoded}"))
        }
        (None, None) => None,
    };
    let tls = match (cli.tls_cert, cli.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let running = match start(
        cli.listen,
        cli.threads,
        limits,
        cli.id_field_data,
        authorization,
        tls.as_ref(),
        &cli.tcp_congestion,
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let scheme = if tls.is_some() { "https" } else { "http" };
    if writeln!(out, "listening on {scheme}://{}", running.addr)
        .and_then(|_| out.flush())
        .is_err()
    {
        return ExitCode::FAILURE;
    }
    drop(out);
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    /// Minor page faults of the calling thread so far.
    fn thread_faults() -> i64 {
        // SAFETY: getrusage only writes the struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage.ru_minflt
        }
    }

    /// Set in the child process that measures alone.
    const ALONE: &str = "SCANSTORE_TEST_PRETOUCH_ALONE";

    /// Runs on this binary's allocator (mimalloc), as the emulator does, in a child process
    /// of this test binary running only this test: other tests' threads allocating at the
    /// same time take pre-touched pages from mimalloc's shared arena (5 878 faults with 8
    /// test threads), which measures the neighbours, not the pre-touch.
    #[test]
    fn pretouched_heap_is_reused_without_page_faults() {
        if std::env::var_os(ALONE).is_none() {
            let exe = std::env::current_exe().expect("test binary path");
            let name = "tests::pretouched_heap_is_reused_without_page_faults";
            let out = std::process::Command::new(exe)
                .args(["--exact", name, "--test-threads=1", "--nocapture"])
                .env(ALONE, "1")
                .output()
                .expect("run the test binary");
            let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "alone:\n{text}");
            assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
            return;
        }
        scanstore::allocator::setup(None);
        // 64 MiB of 1 KiB strings, the size of a document's parts: 16 384 fresh pages.
        let fill = || -> Vec<String> { (0..64 * 1024).map(|i| format!("{i:01000}")).collect() };
        scanstore_es_emulator::memory::pretouch(256);
        let before = thread_faults();
        let kept = fill();
        let faults = thread_faults() - before;
        assert_eq!(kept.len(), 64 * 1024);
        // Without the pre-touch this faults once per page (checked: about 16 400).
        assert!(
            faults < 2048,
            "{faults} page faults filling pre-touched memory"
        );
    }
}
