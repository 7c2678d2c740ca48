//! The request log: one entry per non-control request, queryable by tests through
//! `GET /_emulator/requests`.

use serde::{Deserialize, Serialize};

use crate::store::glob_match;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub query: String,
    /// `METHOD SP request-target SP HTTP/1.1`, without CRLF, in bytes.
    pub request_line_bytes: usize,
    pub body_bytes: u64,
    pub status: u16,
}

/// The answer of `GET /_emulator/requests`: the matching entries and their totals.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub count: usize,
    pub max_request_line_bytes: usize,
    pub total_body_bytes: u64,
    pub requests: Vec<Entry>,
}

#[derive(Debug, Default)]
pub struct RequestLog {
    entries: Vec<Entry>,
    next: u64,
}

/// Entries beyond this are dropped oldest-first (benchmarks must not grow memory forever).
const MAX_ENTRIES: usize = 100_000;

impl RequestLog {
    pub fn push(&mut self, mut e: Entry) {
        e.seq = self.next;
        self.next += 1;
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.drain(..MAX_ENTRIES / 10);
        }
        self.entries.push(e);
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Entries matching an optional method and path glob, plus a summary.
    pub fn query(&self, method: Option<&str>, path: Option<&str>) -> Summary {
        let hits: Vec<Entry> = self
            .entries
            .iter()
            .filter(|e| method.map_or(true, |m| m.eq_ignore_ascii_case(&e.method)))
            .filter(|e| path.map_or(true, |p| glob_match(p, &e.path)))
            .cloned()
            .collect();
        Summary {
            count: hits.len(),
            max_request_line_bytes: hits.iter().map(|e| e.request_line_bytes).max().unwrap_or(0),
            total_body_bytes: hits.iter().map(|e| e.body_bytes).sum(),
            requests: hits,
        }
    }
}
