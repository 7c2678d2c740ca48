//! An import's local journal: which execution and upload it sends to, and every batch it
//! planned (where in the input the batch starts, its checksum) and had confirmed. Appended
//! and flushed to disk line by line, so that a re-run after a crash sends the same batches
//! under the same identity and the server answers `saved: 0` for what it has.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::Error;
use crate::formats::Format;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub execution_id: Uuid,
    pub upload_id: Uuid,
    /// Whether the client claimed the execution (rather than being given it).
    pub claimed: bool,
    pub format: Format,
    pub inputs: Vec<InputFile>,
    pub max_observations: usize,
    pub max_body_bytes: usize,
    /// The claim's observation window: seconds back and ahead of now.
    #[serde(default)]
    pub window: Option<(i64, i64)>,
    /// The execution's lease, for the heartbeat period.
    pub lease_seconds: u64,
    /// Where in the input this upload starts: past what an earlier, lost upload into the
    /// same execution had confirmed.
    pub start: Position,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: PathBuf,
    pub size: u64,
}

/// Where a batch's first observation is: input file, the offset of its unit, and how many
/// of that unit's observations belong to the batch before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub file: usize,
    pub offset: u64,
    pub skip: usize,
}

impl Position {
    pub const START: Position = Position {
        file: 0,
        offset: 0,
        skip: 0,
    };
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    pub index: u32,
    pub start: Position,
    /// Where the next batch starts.
    pub end: Position,
    pub count: usize,
    pub is_final: bool,
    pub checksum: String,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
enum Entry {
    Start(Header),
    Batch(Planned),
    Confirmed { index: u32, saved: u64 },
    Done,
}

pub struct Journal {
    path: PathBuf,
    file: File,
    pub header: Header,
    /// Every planned batch by index.
    pub planned: BTreeMap<u32, Planned>,
    /// Batches the server answered, with what it saved.
    pub confirmed: BTreeMap<u32, u64>,
    pub done: bool,
}

/// The journal file of an import: one per server, format, execution choice and inputs.
pub fn path_for(
    dir: &Path,
    server: &str,
    format: Format,
    execution: Option<Uuid>,
    inputs: &[PathBuf],
) -> PathBuf {
    let mut h = Sha256::new();
    h.update(server.as_bytes());
    h.update(format!("\n{format:?}\n{execution:?}").as_bytes());
    for p in inputs {
        h.update(b"\n");
        h.update(p.as_os_str().as_encoded_bytes());
    }
    dir.join(format!(
        "import-{}.journal",
        &hex::encode(h.finalize())[..24]
    ))
}

fn io(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Journal(format!("{}: {e}", path.display()))
}

impl Journal {
    /// The journal at `path`, or `None` when there is none.
    pub fn open(path: &Path) -> Result<Option<Journal>, Error> {
        let mut bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path, e)),
        };
        // Every entry is written whole with its line end: text after the last one is a
        // torn entry, whose batch was never sent. It is cut off so that appends start on
        // a line of their own.
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            bytes.truncate(whole);
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(whole as u64))
                .map_err(|e| io(path, e))?;
        }
        let lines: Vec<&str> = std::str::from_utf8(&bytes)
            .map_err(|e| io(path, e))?
            .lines()
            .collect();
        let mut entries = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let e = serde_json::from_str::<Entry>(line)
                .map_err(|e| io(path, format!("line {}: {e}", i + 1)))?;
            entries.push(e);
        }
        let mut entries = entries.into_iter();
        let Some(Entry::Start(header)) = entries.next() else {
            return Err(io(path, "does not start with an import header"));
        };
        let mut journal = Journal {
            path: path.to_path_buf(),
            file: OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| io(path, e))?,
            header,
            planned: BTreeMap::new(),
            confirmed: BTreeMap::new(),
            done: false,
        };
        for e in entries {
            match e {
                Entry::Start(_) => return Err(io(path, "two import headers")),
                Entry::Batch(p) => {
                    journal.planned.insert(p.index, p);
                }
                Entry::Confirmed { index, saved } => {
                    journal.confirmed.insert(index, saved);
                }
                Entry::Done => journal.done = true,
            }
        }
        Ok(Some(journal))
    }

    /// A new journal at `path` (replacing any), starting with `header`.
    pub fn create(path: &Path, header: Header) -> Result<Journal, Error> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let file = File::create(path).map_err(|e| io(path, e))?;
        let mut journal = Journal {
            path: path.to_path_buf(),
            file,
            header: header.clone(),
            planned: BTreeMap::new(),
            confirmed: BTreeMap::new(),
            done: false,
        };
        journal.append(&Entry::Start(header))?;
        Ok(journal)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a batch before it is first sent.
    pub fn plan(&mut self, p: Planned) -> Result<(), Error> {
        self.append(&Entry::Batch(p.clone()))?;
        self.planned.insert(p.index, p);
        Ok(())
    }

    pub fn confirm(&mut self, index: u32, saved: u64) -> Result<(), Error> {
        self.append(&Entry::Confirmed { index, saved })?;
        self.confirmed.insert(index, saved);
        Ok(())
    }

    pub fn finish(&mut self) -> Result<(), Error> {
        self.append(&Entry::Done)?;
        self.done = true;
        Ok(())
    }

    /// The first batch not confirmed: where a resumed import starts sending.
    pub fn resume_at(&self) -> Option<&Planned> {
        self.planned
            .values()
            .find(|p| !self.confirmed.contains_key(&p.index))
    }

    /// Where sending goes on: the first batch not confirmed, or the one after the last
    /// planned batch (index and input position); `None` when the final is confirmed.
    pub fn resume_point(&self) -> Option<(u32, Position)> {
        if let Some(p) = self.resume_at() {
            return Some((p.index, p.start));
        }
        match self.planned.values().next_back() {
            None => Some((0, self.header.start)),
            Some(last) if last.is_final => None,
            Some(last) => Some((last.index + 1, last.end)),
        }
    }

    fn append(&mut self, e: &Entry) -> Result<(), Error> {
        let mut line = serde_json::to_vec(e).map_err(|err| io(&self.path, err))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(|err| io(&self.path, err))?;
        // On disk before the batch it names is sent or counted as confirmed.
        self.file.sync_data().map_err(|err| io(&self.path, err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            execution_id: Uuid::new_v4(),
            upload_id: Uuid::new_v4(),
            claimed: true,
            format: Format::MasscanList,
            inputs: vec![InputFile {
                path: "/tmp/scan.txt".into(),
                size: 10,
            }],
            max_observations: 1000,
            max_body_bytes: 1 << 20,
            window: None,
            lease_seconds: 600,
            start: Position::START,
        }
    }

    fn planned(index: u32) -> Planned {
        Planned {
            index,
            start: Position {
                file: 0,
                offset: u64::from(index) * 100,
                skip: 0,
            },
            end: Position {
                file: 0,
                offset: u64::from(index + 1) * 100,
                skip: 0,
            },
            count: 3,
            is_final: false,
            checksum: format!("sha256:{index}"),
        }
    }

    #[test]
    fn a_reopened_journal_resumes_at_the_first_unconfirmed_batch() {
        let dir = std::env::temp_dir().join(format!("journal-{}", Uuid::new_v4()));
        let path = dir.join("j");
        let mut j = Journal::create(&path, header()).unwrap();
        j.plan(planned(0)).unwrap();
        j.confirm(0, 3).unwrap();
        j.plan(planned(1)).unwrap();
        drop(j);
        // A crash while appending: half a line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(br#"{"entry":"confirmed","ind"#)
            .unwrap();
        let mut j = Journal::open(&path).unwrap().unwrap();
        assert_eq!(j.resume_at(), Some(&planned(1)));
        assert_eq!(j.resume_point(), Some((1, planned(1).start)));
        j.confirm(1, 0).unwrap();
        // Confirmed, the next batch not planned yet: it starts where batch 1 ended.
        assert_eq!(j.resume_point(), Some((2, planned(1).end)));
        let mut last = planned(2);
        last.is_final = true;
        j.plan(last).unwrap();
        j.confirm(2, 3).unwrap();
        assert_eq!(j.resume_point(), None);
        j.finish().unwrap();
        let j = Journal::open(&path).unwrap().unwrap();
        assert!(j.done && j.resume_at().is_none());
        assert_eq!(j.confirmed.get(&1), Some(&0));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
