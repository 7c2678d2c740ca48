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
}

fn main() -> ExitCode {
    telemetry::init_logger();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config } => serve(&config),
        Command::Migrate { config } => migrate(&config),
        Command::CheckConfig { file } => Config::load(&file)
            .map(|_| println!("{}: ok", file.display()))
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
    let running = scanstore::app::start(config).map_err(|e| e.to_string())?;
    println!("scanstore listening on http://{}", running.addr());
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Line::new("ShutdownRequested").info();
    if !running.shutdown() {
        Line::new("ShutdownGraceExceeded").warn();
    }
    Ok(())
}
