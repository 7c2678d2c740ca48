//! `scanstore-client`, the reference scanner client: parses the command line, runs
//! `import` or `run`, and is the one place where errors become messages and exit codes.
//! The server and token come from the environment, never from the command line.

mod agent;
mod api;
mod batches;
mod error;
mod formats;
mod import;
mod journal;
mod lease;
mod observation;
mod progress;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use uuid::Uuid;

use error::Error;
use formats::Format;

#[derive(Parser)]
#[command(
    name = "scanstore-client",
    version,
    about = "Send scanner output to scanstore: import files, or run nmap for claimed executions",
    after_help = "Environment: SCANSTORE_URL (the server), SCANSTORE_SCANNER_TOKEN (unless \
                  --token-file), SCANSTORE_CA_FILE (a CA to trust for https://)."
)]
struct Cli {
    /// A file holding the scanner token (instead of SCANSTORE_SCANNER_TOKEN).
    #[arg(long, value_name = "FILE", global = true)]
    token_file: Option<PathBuf>,
    /// A PEM CA to verify the server's certificate with (or SCANSTORE_CA_FILE).
    #[arg(long, value_name = "FILE", global = true)]
    ca_file: Option<PathBuf>,
    /// How long one request is retried through transient failures before giving up.
    #[arg(long, value_name = "SECONDS", default_value_t = 900, global = true,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    retry_for: u64,
    /// Most observations per batch (the claim's limit applies when lower).
    #[arg(long, value_name = "N", default_value_t = 1000, global = true,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    batch_size: u64,
    /// No progress bar.
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import scanner output files into one execution: the next one queued for this
    /// scanner, or the one given. Resumable: a re-run after an interruption goes on
    /// where it stopped, and a re-run after success changes nothing.
    Import {
        #[arg(long, value_enum)]
        format: Format,
        /// Send to this running execution instead of claiming one.
        #[arg(long, value_name = "ID")]
        execution: Option<Uuid>,
        /// Where import journals are kept (default: $XDG_STATE_HOME/scanstore-client).
        #[arg(long, value_name = "DIR", env = "SCANSTORE_JOURNAL_DIR")]
        journal_dir: Option<PathBuf>,
        /// Largest request body, for --execution (a claim says the server's).
        #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024,
              value_parser = clap::value_parser!(u64).range(4096..=1024 * 1024 * 1024))]
        max_body_bytes: u64,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// The agent: claim an execution, run the scanner on its targets with `-oX -`, stream
    /// the results, end the execution; then the next one.
    Run {
        /// Claim one execution (or none) and exit.
        #[arg(long)]
        once: bool,
        /// Wait between claims when nothing is queued.
        #[arg(long, value_name = "SECONDS", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        poll_seconds: u64,
        /// Longest time a result waits before it is sent in a partial batch.
        #[arg(long, value_name = "SECONDS", default_value_t = 5,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        flush_seconds: u64,
        /// More scanner arguments, whitespace-separated.
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        scanner_args: Option<String>,
        /// The scanner and its arguments: `-- nmap -sV`.
        #[arg(last = true, required = true, value_name = "SCANNER")]
        program: Vec<String>,
    },
}

/// `$XDG_STATE_HOME/scanstore-client`, or `~/.local/state/scanstore-client`.
fn default_journal_dir() -> Result<PathBuf, Error> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .ok_or_else(|| Error::Usage("no journal directory: pass --journal-dir".into()))?;
    Ok(state.join("scanstore-client"))
}

fn run(cli: Cli) -> Result<(), Error> {
    let server = api::Server::from_env(
        cli.token_file.as_deref(),
        cli.ca_file.as_deref(),
        Duration::from_secs(cli.retry_for),
    )?;
    let batch_size = cli.batch_size as usize;
    match cli.command {
        Command::Import {
            format,
            execution,
            journal_dir,
            max_body_bytes,
            files,
        } => {
            let url = std::env::var("SCANSTORE_URL").unwrap_or_default();
            let args = import::ImportArgs {
                format,
                execution,
                files,
                journal_dir: journal_dir.map_or_else(default_journal_dir, Ok)?,
                batch_size,
                max_body_bytes: max_body_bytes as usize,
                quiet: cli.quiet,
            };
            import::run(&server, &url, &args)
        }
        Command::Run {
            once,
            poll_seconds,
            flush_seconds,
            scanner_args,
            program,
        } => agent::run(
            &server,
            &agent::RunArgs {
                program,
                scanner_args,
                once,
                poll: Duration::from_secs(poll_seconds),
                batch_size,
                flush_after: Duration::from_secs(flush_seconds),
                quiet: cli.quiet,
            },
        ),
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_secs()
        .init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scanstore-client: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
