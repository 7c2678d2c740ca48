//! The `scanstore` command: parses the CLI, runs a subcommand, and is the one place where
//! errors become exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};

use scanstore::config::Config;
use scanstore::db::{self, Db};
use scanstore::telemetry::{self, Line};

/// Publication and uploads build and drop a JSON tree per document, which makes glibc
/// malloc/free a large part of the publisher's CPU; mimalloc keeps it small.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "scanstore",
    version,
    about = "Storage server of a network-scanning platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Migrate the schema, then serve the HTTP API and publish assets until SIGTERM/SIGINT.
    Serve {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Install or upgrade the database schema, then exit.
    Migrate {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
    /// Validate a configuration file and exit (0 when valid).
    CheckConfig {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Rebuild the current asset projection into the next version, verify it document by
    /// document against the current one, and switch both aliases to it atomically.
    /// Exit status 3 means PROJECTION_MISMATCH (nothing was switched).
    RebuildAssets {
        #[arg(long, value_name = "FILE", global = true)]
        config: Option<PathBuf>,
        /// Longest wait (seconds) for live publication to finish pending rows before a comparison.
        #[arg(long, value_name = "SECONDS", default_value_t = 600, global = true)]
        settle_timeout: u64,
        #[command(subcommand)]
        action: Option<RebuildAction>,
    },
    /// Remove what the `[retention]` settings age out.
    Retention {
        #[command(subcommand)]
        action: RetentionAction,
    },
}

#[derive(Subcommand)]
enum RetentionAction {
    /// Run retention once now (skipped, exit 0, while another instance runs it).
    Run {
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Show what a run would remove, and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum RebuildAction {
    /// Where the asset aliases point and which versions exist.
    Status,
    /// Switch the aliases back to an older version; refused with PROJECTION_MISMATCH
    /// unless it equals the current one document by document (see catch-up).
    SwitchBack {
        /// The version to switch to (v1 or 1).
        #[arg(long, value_name = "VERSION", value_parser = scanstore::rebuild::parse_version)]
        to: u32,
    },
    /// Re-publish into an older version what it lacks, then compare it with the current one.
    CatchUp {
        /// The version to bring up to date (v1 or 1).
        #[arg(long, value_name = "VERSION", value_parser = scanstore::rebuild::parse_version)]
        to: u32,
        /// Only what live publication processed at or after this time (RFC 3339, e.g. the
        /// time of the switch away from it); default: the whole history.
        #[arg(long, value_name = "TIME")]
        since: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Delete one old physical asset index (refused while an alias points at it).
    Drop {
        #[arg(long, value_name = "NAME")]
        index: String,
    },
}

/// Exit status of a refused switch (`PROJECTION_MISMATCH`).
const EXIT_MISMATCH: u8 = 3;

/// Memory a publisher page or an upload batch frees is reused by the next one; after this
/// long unused it goes back to the OS (mimalloc's default, 1 s, returned it between pages).
const KEEP_FREED_PAGES_MS: u32 = 10_000;

fn main() -> ExitCode {
    scanstore::allocator::setup(Some(KEEP_FREED_PAGES_MS));
    let cli = Cli::parse();
    // An interactive rebuild shows a progress bar; per-request events would bury it
    // (RUST_LOG=info brings them back). Elsewhere the journal gets every event.
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    match cli.command {
        Command::RebuildAssets { .. } if interactive => telemetry::init_logger_at("warn"),
        _ => telemetry::init_logger(),
    }
    let result = match cli.command {
        Command::RebuildAssets {
            config,
            settle_timeout,
            action,
        } => {
            return match rebuild_assets(config, settle_timeout, action) {
                Ok(()) => ExitCode::SUCCESS,
                Err((message, code)) => {
                    eprintln!("scanstore: {message}");
                    ExitCode::from(code)
                }
            }
        }
        Command::Serve { config } => serve(&config),
        Command::Migrate { config } => migrate(&config),
        Command::Retention {
            action: RetentionAction::Run { config, dry_run },
        } => retention_run(&config, dry_run),
        Command::CheckConfig { file } => Config::load(&file)
            .map(|c| {
                for (old, new) in &c.deprecated {
                    eprintln!("scanstore: warning: {old} is deprecated; use {new}");
                }
                println!("{}: ok", file.display())
            })
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("scanstore: {message}");
            ExitCode::FAILURE
        }
    }
}

fn rebuild_assets(
    config: Option<PathBuf>,
    settle_timeout: u64,
    action: Option<RebuildAction>,
) -> Result<(), (String, u8)> {
    use scanstore::rebuild::{self, Options, Outcome};
    let fail = |m: String| (m, 1);
    let path = config.ok_or_else(|| fail("rebuild-assets needs --config FILE".into()))?;
    let config = Config::load(&path).map_err(|e| fail(e.to_string()))?;
    let app = scanstore::app::App::new(config).map_err(|e| fail(e.to_string()))?;
    let opts = Options {
        settle_timeout: Duration::from_secs(settle_timeout),
        ..Options::default()
    };
    let print = |o: Outcome| {
        println!("current=v{}", o.current);
        if let Some(p) = o.previous {
            println!("previous=v{p}");
        }
        println!("executions_published={}", o.executions);
        println!("documents_compared={}", o.documents_compared);
    };
    let result = match action {
        None => rebuild::rebuild(&app, opts).map(print),
        Some(RebuildAction::Status) => rebuild::status(&app).map(|lines| {
            for l in lines {
                println!("{l}");
            }
        }),
        Some(RebuildAction::SwitchBack { to }) => rebuild::switch_back(&app, to, opts).map(print),
        Some(RebuildAction::CatchUp { to, since }) => {
            rebuild::catch_up(&app, to, since, opts).map(|o| {
                println!("caught_up=v{to}");
                print(o)
            })
        }
        Some(RebuildAction::Drop { index }) => {
            rebuild::drop_index(&app, &index).map(|()| println!("dropped={index}"))
        }
    };
    result.map_err(|e| {
        let code = if e.is_mismatch() { EXIT_MISMATCH } else { 1 };
        (e.to_string(), code)
    })
}

fn retention_run(path: &std::path::Path, dry_run: bool) -> Result<(), String> {
    use scanstore::retention::{self, Outcome};
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let app = scanstore::app::App::new(config).map_err(|e| e.to_string())?;
    if !retention::configured(&app) {
        println!("nothing ages out: set facts_months, asset_days or execution_days in [retention]");
        return Ok(());
    }
    let report = if dry_run {
        retention::plan(&app)
    } else {
        match retention::run(&app, &AtomicBool::new(false)) {
            Ok(Outcome::Ran(report)) => Ok(report),
            Ok(Outcome::Busy) => {
                println!("busy: another instance is running retention");
                return Ok(());
            }
            Err(e) => Err(e),
        }
    }
    .map_err(|e| e.to_string())?;
    println!("dry_run={dry_run}");
    for line in report.lines() {
        println!("{line}");
    }
    Ok(())
}

/// Readiness and stopping notices to systemd; a failure is logged, never fatal.
fn notify(state: &str) {
    if let Err(e) = scanstore::app::notify(state) {
        Line::new("SystemdNotifyFailed").field("error", e).warn();
    }
}

fn migrate(path: &std::path::Path) -> Result<(), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let db = Db::new(&config.database).map_err(|e| e.to_string())?;
    let outcome = db::migrate::run(&db).map_err(|e| e.to_string())?;
    println!("schema: {outcome:?}");
    Ok(())
}

fn serve(path: &std::path::Path) -> Result<(), String> {
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone()).map_err(|e| e.to_string())?;
    }
    // SIGHUP: re-read the TLS certificate, as daemons do for a renewed one.
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .map_err(|e| e.to_string())?;
    let running = scanstore::app::start(config).map_err(|e| e.to_string())?;
    println!("scanstore listening on {}", running.url());
    // Migrated and listening: tell systemd (Type=notify) that start-up is complete.
    notify(&format!(
        "READY=1\nSTATUS=listening on {}\nMAINPID={}",
        running.url(),
        std::process::id()
    ));
    while !stop.load(Ordering::SeqCst) {
        if reload.swap(false, Ordering::SeqCst) {
            running.reload_tls();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Line::new("ShutdownRequested").info();
    notify("STOPPING=1");
    if !running.shutdown() {
        Line::new("ShutdownGraceExceeded").warn();
    }
    Ok(())
}
