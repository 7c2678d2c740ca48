//! Cutting observations into batches within the claim's limits and sending them in order
//! under one upload identity. A batch's body is built once, its checksum over the exact
//! bytes of its observations array; with a journal, each batch is recorded before it is
//! sent, and a batch re-made on resume must match what was recorded.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use chrono::{Duration as ChronoDuration, Utc};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::api::{Limits, Server};
use crate::error::Error;
use crate::formats::Unit;
use crate::journal::{Journal, Planned, Position};
use crate::observation::{Observation, Time};
use crate::progress::{Counts, Progress};

/// Room kept in a body for everything around the observations array.
const ENVELOPE: usize = 512;

pub struct Uploader<'a> {
    server: &'a Server,
    execution: Uuid,
    upload_id: Uuid,
    limits: Limits,
    journal: Option<&'a mut Journal>,
    progress: &'a Progress,
    index: u32,
    /// The observations array being built: `[` and the observations so far.
    array: Vec<u8>,
    count: usize,
    /// Where the pending batch's first observation is in the input.
    start: Position,
    /// When the oldest pending observation was added.
    since: Option<Instant>,
    /// The earliest and latest observation time of the pending batch.
    span: Option<(Time, Time)>,
    last_host: Option<IpAddr>,
    pub counts: Counts,
}

impl<'a> Uploader<'a> {
    /// An uploader that sends batch `index` next, starting at `start` in the input.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        server: &'a Server,
        execution: Uuid,
        upload_id: Uuid,
        limits: Limits,
        journal: Option<&'a mut Journal>,
        progress: &'a Progress,
        index: u32,
        start: Position,
    ) -> Uploader<'a> {
        Uploader {
            server,
            execution,
            upload_id,
            limits,
            journal,
            progress,
            index,
            array: Vec::with_capacity(64 * 1024),
            count: 0,
            start,
            since: None,
            span: None,
            last_host: None,
            counts: Counts::default(),
        }
    }

    /// Adds the observations of `unit` (of input `file`) after its first `skip`, sending a
    /// batch whenever the next observation would not fit.
    pub fn push(&mut self, unit: &Unit, file: usize, skip: usize) -> Result<(), Error> {
        if unit.host.is_some() && unit.host != self.last_host {
            self.counts.hosts += 1;
            self.last_host = unit.host;
        }
        for (k, o) in unit.observations.iter().enumerate().skip(skip) {
            let bytes = serde_json::to_vec(o).map_err(|e| Error::Input(e.to_string()))?;
            if ENVELOPE + 2 + bytes.len() > self.limits.max_body_bytes {
                return Err(Error::Input(format!(
                    "an observation of {} bytes does not fit in a request of {} bytes",
                    bytes.len(),
                    self.limits.max_body_bytes
                )));
            }
            let here = Position {
                file,
                offset: unit.offset,
                skip: k,
            };
            let full = self.count + 1 > self.limits.max_observations
                || ENVELOPE + self.array.len() + 1 + bytes.len() + 1 > self.limits.max_body_bytes;
            if full {
                self.send(false, here)?;
            }
            if self.count == 0 {
                self.start = here;
                self.array.clear();
                self.array.push(b'[');
                self.since = Some(Instant::now());
            } else {
                self.array.push(b',');
            }
            self.array.extend_from_slice(&bytes);
            self.count += 1;
            let at = *o.observed_at();
            self.span = Some(match self.span {
                None => (at, at),
                Some((a, b)) => (a.min(at), b.max(at)),
            });
            match o {
                Observation::Endpoint { .. } => self.counts.ports += 1,
                Observation::Dns { .. } => self.counts.records += 1,
                // Counted as the unit's host.
                Observation::Host { .. } => {}
            }
        }
        Ok(())
    }

    /// Sends the pending observations when the oldest has waited `age`: results appear
    /// while a slow scan runs. Only for uploads without a journal, whose batch boundaries
    /// need not be made again.
    pub fn flush_older_than(&mut self, age: Duration, next: Position) -> Result<(), Error> {
        if self.count > 0 && self.since.is_some_and(|t| t.elapsed() >= age) {
            self.send(false, next)?;
        }
        Ok(())
    }

    /// Sends what is pending (possibly nothing) as the final batch; `end` is where the
    /// input ended.
    pub fn finish(mut self, end: Position) -> Result<Counts, Error> {
        if self.count == 0 {
            self.start = end;
        }
        self.send(true, end)?;
        Ok(self.counts)
    }

    /// Refuses a batch the server would refuse as `out_of_window`, saying why and what to
    /// change, before anything of it is sent.
    fn check_window(&self) -> Result<(), Error> {
        let (Some((earliest, latest)), Some(age), Some(skew)) = (
            self.span,
            self.limits.max_observation_age_seconds,
            self.limits.max_clock_skew_seconds,
        ) else {
            return Ok(());
        };
        let now = Utc::now();
        if earliest.0 < now - ChronoDuration::seconds(age) {
            return Err(Error::Input(format!(
                "an observation of {} is older than the server keeps ({} days, the claim's \
                 max_observation_age_seconds); raise upload.max_observation_age_days to import it",
                earliest.0.format("%Y-%m-%d %H:%M:%S UTC"),
                age / 86_400
            )));
        }
        if latest.0 > now + ChronoDuration::seconds(skew) {
            return Err(Error::Input(format!(
                "an observation of {} lies in the future beyond the server's clock skew ({skew} s); \
                 check the scanner's clock",
                latest.0.format("%Y-%m-%d %H:%M:%S UTC")
            )));
        }
        Ok(())
    }

    /// Sends the pending observations as batch `self.index`; `end` is where the next
    /// batch starts.
    fn send(&mut self, is_final: bool, end: Position) -> Result<(), Error> {
        if self.count == 0 {
            self.array.clear();
            self.array.push(b'[');
        }
        self.array.push(b']');
        let checksum = format!("sha256:{}", hex::encode(Sha256::digest(&self.array)));
        let planned = Planned {
            index: self.index,
            start: self.start,
            end,
            count: self.count,
            is_final,
            checksum,
        };
        let known = self
            .journal
            .as_deref()
            .is_some_and(|j| j.planned.contains_key(&planned.index));
        // A batch sent before is answered as it was however its times have aged; only a
        // new one must lie in the window the claim gave.
        if !known {
            self.check_window()?;
        }
        if let Some(journal) = self.journal.as_deref_mut() {
            match journal.planned.get(&planned.index) {
                None => journal.plan(planned.clone())?,
                Some(p) if *p == planned => {}
                Some(_) => {
                    return Err(Error::Journal(format!(
                        "batch {} read from the input now differs from the one sent before the \
                         interruption: the input changed. Remove {} to import it anew",
                        planned.index,
                        journal.path().display()
                    )))
                }
            }
        }
        let mut body = Vec::with_capacity(self.array.len() + ENVELOPE);
        body.extend_from_slice(
            format!(
                r#"{{"protocol_version":{},"upload_id":"{}","stream":"main","batch_index":{},"is_final":{},"checksum":"{}","observations":"#,
                scanstore::upload::batch::PROTOCOL_VERSION,
                self.upload_id,
                planned.index,
                is_final,
                planned.checksum
            )
            .as_bytes(),
        );
        body.extend_from_slice(&self.array);
        body.push(b'}');
        let saved = self.server.send_batch(self.execution, &body)?;
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.confirm(planned.index, saved)?;
        }
        self.counts.batches += 1;
        self.counts.saved += saved;
        self.index += 1;
        self.count = 0;
        self.since = None;
        self.span = None;
        self.progress.update(None, &self.counts);
        Ok(())
    }
}
