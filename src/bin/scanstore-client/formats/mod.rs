//! Scanner output formats, read incrementally as units — an nmap `<host>`, a masscan or
//! naabu line — each with the byte offset it starts at, so that memory stays bounded
//! whatever the input's size and an interrupted import re-reads from a unit's start.

mod lines;
mod masscan;
mod naabu;
mod nmap;

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::net::IpAddr;
use std::path::Path;

use crate::error::Error;
use crate::observation::Observation;

pub use nmap::NmapXml;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `nmap -oX`: hosts, open ports and their services.
    NmapXml,
    /// `masscan -oJ` (and `--output-format ndjson`): one record per line.
    MasscanJson,
    /// `masscan -oL`: `open tcp 80 192.0.2.1 1764410400` and `banner …` lines.
    MasscanList,
    /// `naabu -json`: one JSON object per line.
    NaabuJsonl,
}

/// What one unit of input reports.
#[derive(Debug)]
pub struct Unit {
    /// Where the unit starts in its input: a resumed import re-reads from here.
    pub offset: u64,
    /// The host it is about, for the progress count of hosts.
    pub host: Option<IpAddr>,
    pub observations: Vec<Observation>,
}

/// A reader of units, in input order.
pub trait Source {
    /// The next unit, or `None` at the end of the input.
    fn next_unit(&mut self) -> Result<Option<Unit>, Error>;
    /// Bytes read so far (for the progress bar).
    fn position(&self) -> u64;
}

/// A source over the file at `path`, starting at the unit that begins at `offset`.
pub fn open(format: Format, path: &Path, offset: u64) -> Result<Box<dyn Source>, Error> {
    let name = path.display().to_string();
    let file = |at: u64| -> Result<Box<dyn BufRead + Send>, Error> {
        let mut f = File::open(path).map_err(|e| Error::Input(format!("{name}: {e}")))?;
        f.seek(SeekFrom::Start(at))
            .map_err(|e| Error::Input(format!("{name}: {e}")))?;
        Ok(Box::new(BufReader::with_capacity(256 * 1024, f)))
    };
    Ok(match format {
        Format::NmapXml => Box::new(NmapXml::resume(&name, file(0)?, file(offset)?, offset)?),
        Format::MasscanJson => {
            lines::Lines::boxed(name.clone(), file(offset)?, offset, masscan::json_line)
        }
        Format::MasscanList => {
            lines::Lines::boxed(name.clone(), file(offset)?, offset, masscan::list_line)
        }
        Format::NaabuJsonl => lines::Lines::boxed(name.clone(), file(offset)?, offset, naabu::line),
    })
}
