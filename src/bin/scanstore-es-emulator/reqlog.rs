//! The request log: one entry per non-control request, queryable by tests through
//! `GET /_emulator/requests`.

use serde::Serialize;
use serde_json::{json, Value};

use crate::store::glob_match;

#[derive(Debug, Clone, Serialize)]
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
    pub fn query(&self, method: Option<&str>, path: Option<&str>) -> Value {
        let hits: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| method.map_or(true, |m| m.eq_ignore_ascii_case(&e.method)))
            .filter(|e| path.map_or(true, |p| glob_match(p, &e.path)))
            .collect();
        json!({
            "count": hits.len(),
            "max_request_line_bytes": hits.iter().map(|e| e.request_line_bytes).max().unwrap_or(0),
            "total_body_bytes": hits.iter().map(|e| e.body_bytes).sum::<u64>(),
            "requests": hits,
        })
    }
}
