//! Line-per-record formats: a line is a unit, read with a bounded buffer.

use std::io::BufRead;

use super::{Source, Unit};
use crate::error::Error;

/// Longest line read; masscan's longest banner line is far shorter.
const MAX_LINE: usize = 1024 * 1024;

/// Parses one line (no line end) into a unit's host and observations; `None` for a line
/// that reports nothing (a comment, a closed port, a JSON array bracket).
pub type ParseLine = fn(&str) -> Result<Option<Unit>, String>;

pub struct Lines {
    name: String,
    input: Box<dyn BufRead + Send>,
    offset: u64,
    parse: ParseLine,
    buf: Vec<u8>,
}

impl Lines {
    pub fn boxed(
        name: String,
        input: Box<dyn BufRead + Send>,
        offset: u64,
        parse: ParseLine,
    ) -> Box<dyn Source> {
        Box::new(Lines {
            name,
            input,
            offset,
            parse,
            buf: Vec::new(),
        })
    }

    /// The next line, without its end; `None` at the end of the input.
    fn read_line(&mut self) -> Result<Option<u64>, Error> {
        self.buf.clear();
        let start = self.offset;
        let mut limited = std::io::Read::take(&mut *self.input, MAX_LINE as u64 + 1);
        let n = limited
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| Error::Input(format!("{}: {e}", self.name)))?;
        if n == 0 {
            return Ok(None);
        }
        if self.buf.len() > MAX_LINE {
            return Err(Error::Input(format!(
                "{}: a line at byte {start} is longer than {MAX_LINE} bytes",
                self.name
            )));
        }
        self.offset += n as u64;
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        Ok(Some(start))
    }
}

impl Source for Lines {
    fn next_unit(&mut self) -> Result<Option<Unit>, Error> {
        while let Some(start) = self.read_line()? {
            let line = String::from_utf8_lossy(&self.buf);
            match (self.parse)(&line) {
                Ok(Some(mut unit)) => {
                    unit.offset = start;
                    return Ok(Some(unit));
                }
                Ok(None) => {}
                Err(m) => return Err(Error::Input(format!("{}: byte {start}: {m}", self.name))),
            }
        }
        Ok(None)
    }

    fn position(&self) -> u64 {
        self.offset
    }
}
