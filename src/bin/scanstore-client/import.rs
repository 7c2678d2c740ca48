//! `scanstore-client import`: scanner output files into one execution, exactly once. The
//! journal names the execution, the upload and every batch, so a re-run after a crash
//! goes on where the confirmed batches end and re-sends the one in flight unchanged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use uuid::Uuid;

use crate::api::{Limits, Server};
use crate::batches::Uploader;
use crate::error::Error;
use crate::formats::{self, Format};
use crate::journal::{self, Header, InputFile, Journal, Position};
use crate::lease::Heartbeat;
use crate::progress::{Counts, Progress};

pub struct ImportArgs {
    pub format: Format,
    pub execution: Option<Uuid>,
    pub files: Vec<PathBuf>,
    pub journal_dir: PathBuf,
    pub batch_size: usize,
    pub max_body_bytes: usize,
    pub quiet: bool,
}

/// The lease assumed for an execution the client did not claim (and so whose lease it was
/// not told); the server's default is longer, so heartbeats come early rather than late.
const GIVEN_EXECUTION_LEASE: Duration = Duration::from_secs(180);

/// Refusals that mean the execution was taken from us while the client was away: its lease
/// lapsed, so it was queued again (or failed) and its upload abandoned.
const LOST_CODES: [&str; 3] = ["upload_abandoned", "execution_not_running", "forbidden"];

pub fn run(server: &Server, server_url: &str, args: &ImportArgs) -> Result<(), Error> {
    let mut inputs = Vec::with_capacity(args.files.len());
    for f in &args.files {
        let path =
            std::fs::canonicalize(f).map_err(|e| Error::Usage(format!("{}: {e}", f.display())))?;
        let size = std::fs::metadata(&path)
            .map_err(|e| Error::Usage(format!("{}: {e}", f.display())))?
            .len();
        inputs.push(InputFile { path, size });
    }
    let paths: Vec<PathBuf> = inputs.iter().map(|i| i.path.clone()).collect();
    let path = journal::path_for(
        &args.journal_dir,
        server_url,
        args.format,
        args.execution,
        &paths,
    );
    if let Some(mut j) = Journal::open(&path)? {
        if j.done {
            println!(
                "already imported into execution {} (journal {})",
                j.header.execution_id,
                path.display()
            );
            return Ok(());
        }
        if j.header.inputs != inputs {
            return Err(Error::Journal(format!(
                "the input files changed since the interrupted import; remove {} to import them anew",
                path.display()
            )));
        }
        log::info!(
            "resuming the import into execution {} (journal {})",
            j.header.execution_id,
            path.display()
        );
        let lost = match send(server, &mut j, args.quiet) {
            Err(e) if j.header.claimed && e.code().is_some_and(|c| LOST_CODES.contains(&c)) => e,
            other => return other,
        };
        log::warn!(
            "execution {} was lost while the import was interrupted ({lost}); claiming again",
            j.header.execution_id
        );
        // The server kept the lost upload's confirmed batches: when the same execution
        // comes back, a new upload takes over where they end.
        let confirmed_to = j.resume_point().map(|(_, at)| at);
        let (execution_id, limits, lease) = claim(server, args)?;
        let start = match confirmed_to {
            Some(at) if execution_id == j.header.execution_id => at,
            _ => Position::START,
        };
        return fresh(
            server,
            &path,
            args,
            inputs,
            (execution_id, limits, lease),
            start,
        );
    }
    let taken = match args.execution {
        Some(id) => (
            id,
            Limits {
                max_observations: args.batch_size,
                max_body_bytes: args.max_body_bytes,
                max_observation_age_seconds: None,
                max_clock_skew_seconds: None,
            },
            GIVEN_EXECUTION_LEASE,
        ),
        None => claim(server, args)?,
    };
    fresh(server, &path, args, inputs, taken, Position::START)
}

/// The next execution queued for this scanner, its limits (within `--batch-size`) and lease.
fn claim(server: &Server, args: &ImportArgs) -> Result<(Uuid, Limits, Duration), Error> {
    let claim = server.claim()?.ok_or_else(|| {
        Error::Usage("no execution is queued for this scanner: create a task for it first".into())
    })?;
    Ok((
        claim.execution_id,
        Limits {
            max_observations: claim.limits.max_observations.min(args.batch_size),
            ..claim.limits
        },
        Duration::from_secs(claim.lease_seconds),
    ))
}

/// A new upload into `execution`, from `start` in the input, under a new journal.
fn fresh(
    server: &Server,
    path: &Path,
    args: &ImportArgs,
    inputs: Vec<InputFile>,
    (execution_id, limits, lease): (Uuid, Limits, Duration),
    start: Position,
) -> Result<(), Error> {
    let header = Header {
        execution_id,
        upload_id: Uuid::new_v4(),
        claimed: args.execution.is_none(),
        format: args.format,
        inputs,
        max_observations: limits.max_observations,
        max_body_bytes: limits.max_body_bytes,
        window: limits
            .max_observation_age_seconds
            .zip(limits.max_clock_skew_seconds),
        lease_seconds: lease.as_secs(),
        start,
    };
    let mut j = Journal::create(path, header)?;
    send(server, &mut j, args.quiet)
}

/// Sends every batch the journal does not have confirmed, then the final.
fn send(server: &Server, journal: &mut Journal, quiet: bool) -> Result<(), Error> {
    let h = journal.header.clone();
    let Some((index, start)) = journal.resume_point() else {
        journal.finish()?;
        return summary(&h, Counts::default());
    };
    let total: u64 = h.inputs.iter().map(|i| i.size).sum();
    let before: u64 = h.inputs[..start.file].iter().map(|i| i.size).sum();
    let progress = Progress::new(Some(total), quiet);
    let heartbeat = Heartbeat::start(server, h.execution_id, Duration::from_secs(h.lease_seconds));
    let limits = Limits {
        max_observations: h.max_observations,
        max_body_bytes: h.max_body_bytes,
        max_observation_age_seconds: h.window.map(|w| w.0),
        max_clock_skew_seconds: h.window.map(|w| w.1),
    };
    let mut up = Uploader::new(
        server,
        h.execution_id,
        h.upload_id,
        limits,
        Some(journal),
        &progress,
        index,
        start,
    );
    let mut end = start;
    let mut done_before = before;
    for (file, input) in h.inputs.iter().enumerate().skip(start.file) {
        let (offset, mut skip) = if file == start.file {
            (start.offset, start.skip)
        } else {
            (0, 0)
        };
        let mut source = formats::open(h.format, &input.path, offset)?;
        while let Some(unit) = source.next_unit()? {
            up.push(&unit, file, skip)?;
            skip = 0;
            progress.update(Some(done_before + source.position()), &up.counts);
            if let Some(why) = heartbeat.lost() {
                return Err(Error::Lost(why));
            }
        }
        end = Position {
            file,
            offset: source.position(),
            skip: 0,
        };
        done_before += input.size;
    }
    let counts = up.finish(end)?;
    drop(heartbeat);
    progress.finish();
    journal.finish()?;
    summary(&h, counts)
}

fn summary(h: &Header, c: Counts) -> Result<(), Error> {
    println!(
        "execution {}: {} hosts, {} ports, {} DNS records in {} batches; {} observations saved now",
        h.execution_id, c.hosts, c.ports, c.records, c.batches, c.saved
    );
    Ok(())
}
