//! `scanstore-client run`: the agent. It claims an execution, runs the scanner (nmap) on
//! its targets with XML on standard output, streams the hosts into batches while the scan
//! runs, heartbeats the lease, and ends the execution: a final batch when the scanner
//! succeeds, a failure with the scanner's reason when it does not.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use uuid::Uuid;

use crate::api::{Claim, Limits, Server};
use crate::batches::Uploader;
use crate::error::Error;
use crate::formats::{NmapXml, Source};
use crate::journal::Position;
use crate::lease::Heartbeat;
use crate::progress::Progress;

pub struct RunArgs {
    /// The scanner program and its fixed arguments.
    pub program: Vec<String>,
    /// More arguments, as one whitespace-separated string (a systemd unit's convenience).
    pub scanner_args: Option<String>,
    pub once: bool,
    pub poll: Duration,
    pub batch_size: usize,
    /// Longest time an observation waits for its batch to fill.
    pub flush_after: Duration,
    pub quiet: bool,
}

/// Lines of the scanner's standard error kept for a failure reason.
const STDERR_LINES: usize = 8;

pub fn run(server: &Server, args: &RunArgs) -> Result<(), Error> {
    loop {
        match server.claim()? {
            Some(claim) => scan(server, args, &claim)?,
            None if args.once => {
                println!("nothing queued for this scanner");
                return Ok(());
            }
            None => std::thread::sleep(args.poll),
        }
        if args.once {
            return Ok(());
        }
    }
}

/// The scanner's command line for a claim: its own arguments, `-oX -`, the task's ports
/// and targets.
fn command_line(args: &RunArgs, claim: &Claim) -> Result<Vec<String>, String> {
    let mut line: Vec<String> = args.program.clone();
    line.extend(
        args.scanner_args
            .iter()
            .flat_map(|s| s.split_whitespace())
            .map(String::from),
    );
    line.extend(["-oX".into(), "-".into()]);
    if let Some(ports) = &claim.ports {
        line.extend(["-p".into(), ports.clone()]);
    }
    for t in &claim.targets {
        // Targets are addresses, networks and names; one that looks like an option is
        // never handed to the scanner.
        if t.value.starts_with('-') || t.value.is_empty() {
            return Err(format!(
                "target {:?} is not an address, network or name",
                t.value
            ));
        }
        line.push(t.value.clone());
    }
    Ok(line)
}

/// One claimed execution from start to end. Errors that end the agent (the server
/// unreachable) are returned; what ends only this execution is reported to the server.
fn scan(server: &Server, args: &RunArgs, claim: &Claim) -> Result<(), Error> {
    let execution = claim.execution_id;
    log::info!("claimed execution {execution}");
    let line = match command_line(args, claim) {
        Ok(l) => l,
        Err(why) => return report_failure(server, execution, &why),
    };
    let mut child = match Command::new(&line[0])
        .args(&line[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return report_failure(server, execution, &format!("cannot start {}: {e}", line[0]))
        }
    };
    let stderr = keep_stderr(&mut child);
    let heartbeat = Heartbeat::start(server, execution, Duration::from_secs(claim.lease_seconds));
    let progress = Progress::new(None, args.quiet);
    let outcome = stream(server, args, claim, &mut child, &heartbeat, &progress);
    if outcome.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    drop(heartbeat);
    progress.finish();
    let tail = stderr
        .map(|t| Vec::from(t.join().unwrap_or_default()).join(" | "))
        .unwrap_or_default();
    match (outcome, status) {
        (Ok(pending), Ok(s)) if s.success() => match pending.finish(Position::START) {
            Ok(counts) => {
                println!(
                    "execution {execution}: {} hosts, {} ports in {} batches",
                    counts.hosts, counts.ports, counts.batches
                );
                Ok(())
            }
            Err(e) => give_up(server, execution, e),
        },
        (Ok(_), Ok(s)) => {
            log::warn!("execution {execution} failed: {} exited with {s}", line[0]);
            report_failure(
                server,
                execution,
                &format!("{} exited with {s}: {tail}", line[0]),
            )
        }
        (Ok(_), Err(e)) => {
            report_failure(server, execution, &format!("waiting for {}: {e}", line[0]))
        }
        (Err(e), _) => give_up(server, execution, e),
    }
}

/// Ends the execution after `e`. The agent itself stops only when the server cannot be
/// reached; anything else ends this execution, and the agent claims the next.
fn give_up(server: &Server, execution: Uuid, e: Error) -> Result<(), Error> {
    match e {
        Error::Unavailable(_) => Err(e),
        Error::Lost(why) => {
            log::warn!("{why}; the scan was stopped");
            Ok(())
        }
        e => {
            log::warn!("execution {execution} failed: {e}");
            report_failure(server, execution, &e.to_string())
        }
    }
}

/// Fails the execution with `reason`; a refusal (it is no longer ours) is only logged.
fn report_failure(server: &Server, execution: Uuid, reason: &str) -> Result<(), Error> {
    match server.fail(execution, reason) {
        Err(e @ Error::Unavailable(_)) => Err(e),
        Err(e) => {
            log::warn!("execution {execution} could not be failed: {e}");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// Reads the scanner's XML as it comes, sending batches; the uploader with what is left
/// for the final batch.
fn stream<'a>(
    server: &'a Server,
    args: &RunArgs,
    claim: &Claim,
    child: &mut Child,
    heartbeat: &Heartbeat,
    progress: &'a Progress,
) -> Result<Uploader<'a>, Error> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Scanner("no standard output".into()))?;
    let mut source = NmapXml::new("nmap output", Box::new(BufReader::new(stdout)));
    let limits = Limits {
        max_observations: claim.limits.max_observations.min(args.batch_size),
        ..claim.limits
    };
    let mut up = Uploader::new(
        server,
        claim.execution_id,
        Uuid::new_v4(),
        limits,
        None,
        progress,
        0,
        Position::START,
    );
    while let Some(unit) = source.next_unit()? {
        up.push(&unit, 0, 0)?;
        up.flush_older_than(args.flush_after, Position::START)?;
        if let Some(why) = heartbeat.lost() {
            return Err(Error::Lost(why));
        }
    }
    Ok(up)
}

/// A thread reading the scanner's standard error to its end, which returns the last
/// lines (each cut to 200 characters).
fn keep_stderr(child: &mut Child) -> Option<JoinHandle<VecDeque<String>>> {
    let err = child.stderr.take()?;
    std::thread::Builder::new()
        .name("scanner-stderr".into())
        .spawn(move || {
            let mut tail = VecDeque::with_capacity(STDERR_LINES);
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tail.len() == STDERR_LINES {
                    tail.pop_front();
                }
                tail.push_back(line.chars().take(200).collect::<String>());
            }
            tail
        })
        .ok()
}
