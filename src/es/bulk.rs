//! Bulk operations as NDJSON: building one operation's lines, splitting a list of
//! operations into requests by operation count and by the actual encoded bytes, and a
//! request's body read straight from its operations.

use std::cell::RefCell;
use std::io::{self, Read};
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;

use super::error::EsError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Index,
    Update,
    Delete,
    /// A delete conditional on the document's `_seq_no` and `_primary_term`: one changed
    /// since it was read is kept (answered 409, which is no failure).
    DeleteIfUnchanged,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Index => "index",
            OpKind::Update => "update",
            OpKind::Delete | OpKind::DeleteIfUnchanged => "delete",
        }
    }
}

/// One encoded operation: its action line and source line, each ending in `\n`.
#[derive(Debug, Clone)]
pub struct BulkOp {
    pub kind: OpKind,
    /// Shared by the operations built for one index (a page builds thousands).
    pub index: Arc<str>,
    pub id: String,
    pub ndjson: Vec<u8>,
}

/// An action line, encoded around its document id: `{"<kind>":{"_id":`, the id, then
/// `,"_index":…` (and `,"retry_on_conflict":N`) `}}` and the line break — the field order
/// ES writes back. Operations into one index share everything but the id.
struct ActionLine {
    kind: OpKind,
    after_id: Vec<u8>,
}

impl ActionLine {
    fn new(kind: OpKind, index: &str, retry_on_conflict: Option<u32>) -> ActionLine {
        let mut after_id = b",\"_index\":".to_vec();
        // Serialising a string into memory cannot fail.
        let _ = serde_json::to_writer(&mut after_id, index);
        if let Some(n) = retry_on_conflict {
            after_id.extend_from_slice(format!(",\"retry_on_conflict\":{n}").as_bytes());
        }
        after_id.extend_from_slice(b"}}\n");
        ActionLine { kind, after_id }
    }

    /// Bytes of the line for an id without escapes.
    fn len(&self, id: &str) -> usize {
        self.kind.as_str().len() + 13 + id.len() + self.after_id.len()
    }

    /// Appends the line of document `id`.
    fn write(&self, out: &mut Vec<u8>, id: &str) {
        out.extend_from_slice(b"{\"");
        out.extend_from_slice(self.kind.as_str().as_bytes());
        out.extend_from_slice(b"\":{\"_id\":");
        let _ = serde_json::to_writer(&mut *out, id);
        out.extend_from_slice(&self.after_id);
    }
}

#[derive(Serialize)]
struct PartialDoc<'a, D> {
    doc: &'a D,
}

/// Concurrent merges of one document (two executions publishing the same asset) conflict
/// on its version; ES re-runs the script this many times before failing the item.
const RETRY_ON_CONFLICT: u32 = 3;

impl BulkOp {
    /// Serialises straight from borrowed data: no intermediate `Value` tree.
    fn encode(
        kind: OpKind,
        index: &str,
        id: &str,
        retry_on_conflict: Option<u32>,
        source: &impl Serialize,
    ) -> BulkOp {
        let mut ndjson = Vec::with_capacity(256);
        ActionLine::new(kind, index, retry_on_conflict).write(&mut ndjson, id);
        // Serialising these types into memory cannot fail: no maps with non-string keys.
        let _ = serde_json::to_writer(&mut ndjson, source);
        ndjson.push(b'\n');
        BulkOp {
            kind,
            index: Arc::from(index),
            id: id.to_string(),
            ndjson,
        }
    }

    /// A partial document update; ES reports `noop` when nothing changes.
    pub fn partial_update(index: &str, id: &str, doc: &impl Serialize) -> BulkOp {
        BulkOp::encode(
            OpKind::Update,
            index,
            id,
            Some(RETRY_ON_CONFLICT),
            &PartialDoc { doc },
        )
    }

    /// Removes a document; one that is not there (or whose index is not) is no failure.
    pub fn delete(index: &str, id: &str) -> BulkOp {
        let mut ndjson = Vec::with_capacity(128);
        ActionLine::new(OpKind::Delete, index, None).write(&mut ndjson, id);
        BulkOp {
            kind: OpKind::Delete,
            index: Arc::from(index),
            id: id.to_string(),
            ndjson,
        }
    }

    /// Removes a document unless it changed since it was read at (`seq_no`, `primary_term`).
    pub fn delete_if_unchanged(index: &str, id: &str, seq_no: i64, primary_term: i64) -> BulkOp {
        let action = serde_json::json!({ "delete": {
            "_id": id, "_index": index, "if_seq_no": seq_no, "if_primary_term": primary_term
        } });
        let mut ndjson = action.to_string().into_bytes();
        ndjson.push(b'\n');
        BulkOp {
            kind: OpKind::DeleteIfUnchanged,
            index: Arc::from(index),
            id: id.to_string(),
            ndjson,
        }
    }

    pub fn len(&self) -> usize {
        self.ndjson.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ndjson.is_empty()
    }
}

/// Scripted upserts into one index through one stored script (the script decides create or
/// merge). Everything but the document id and the script's params is the same for every
/// operation, so it is encoded once: publication writes two such operations per endpoint,
/// and encoding each whole through serde took a quarter of the publisher's CPU (3.3 ms per
/// page of 1000 endpoints; 1.0 ms so).
pub struct ScriptedUpserts {
    index: Arc<str>,
    action: ActionLine,
    /// `{"script":{"id":…,"params":`
    script_head: Vec<u8>,
}

const UPSERT_TAIL: &[u8] = b"},\"scripted_upsert\":true,\"upsert\":{}}\n";

impl ScriptedUpserts {
    pub fn new(index: &str, script_id: &str) -> ScriptedUpserts {
        let mut script_head = b"{\"script\":{\"id\":".to_vec();
        let _ = serde_json::to_writer(&mut script_head, script_id);
        script_head.extend_from_slice(b",\"params\":");
        ScriptedUpserts {
            index: Arc::from(index),
            action: ActionLine::new(OpKind::Update, index, Some(RETRY_ON_CONFLICT)),
            script_head,
        }
    }

    /// The upsert of document `id` with the script's `params` (one encoded JSON object).
    pub fn op(&self, id: String, params: &[u8]) -> BulkOp {
        // Sized for an id without escapes, so the buffer is allocated once.
        let mut ndjson = Vec::with_capacity(
            self.action.len(&id) + self.script_head.len() + params.len() + UPSERT_TAIL.len(),
        );
        self.action.write(&mut ndjson, &id);
        ndjson.extend_from_slice(&self.script_head);
        ndjson.extend_from_slice(params);
        ndjson.extend_from_slice(UPSERT_TAIL);
        BulkOp {
            kind: OpKind::Update,
            index: self.index.clone(),
            id,
            ndjson,
        }
    }
}

/// Whole-document writes into one index (a retry overwrites with the same content): the
/// action line is encoded once, and each operation's lines are written by its caller into
/// one scratch buffer, then copied into a buffer of exactly their size.
pub struct IndexWrites {
    index: Arc<str>,
    action: ActionLine,
    /// A batch builds thousands of operations, held until ES has answered: sized exactly,
    /// they take half the memory a buffer with room for any document would, and stay in
    /// the allocator's small size classes (fewer fresh pages to fault in).
    scratch: RefCell<Vec<u8>>,
}

impl IndexWrites {
    pub fn new(index: &str) -> IndexWrites {
        IndexWrites {
            index: Arc::from(index),
            action: ActionLine::new(OpKind::Index, index, None),
            scratch: RefCell::new(Vec::with_capacity(4096)),
        }
    }

    /// The write of document `id`, whose source `write_source` appends (one JSON object).
    pub fn op(&self, id: String, write_source: impl FnOnce(&mut Vec<u8>)) -> BulkOp {
        let mut scratch = self.scratch.borrow_mut();
        scratch.clear();
        self.action.write(&mut scratch, &id);
        write_source(&mut scratch);
        scratch.push(b'\n');
        BulkOp {
            kind: OpKind::Index,
            index: self.index.clone(),
            id,
            ndjson: scratch.as_slice().to_vec(),
        }
    }
}

/// Splits `ops` into consecutive request ranges of at most `max_ops` operations and at
/// most `max_bytes` encoded bytes. One operation larger than `max_bytes` is an error:
/// data is never truncated to fit.
pub fn split(
    ops: &[BulkOp],
    max_ops: usize,
    max_bytes: usize,
) -> Result<Vec<Range<usize>>, EsError> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, op) in ops.iter().enumerate() {
        if op.len() > max_bytes {
            return Err(EsError::Refused(format!(
                "operation {} ({} bytes) exceeds the bulk byte limit of {max_bytes}",
                op.id,
                op.len()
            )));
        }
        if i > start && (i - start == max_ops || bytes + op.len() > max_bytes) {
            ranges.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += op.len();
    }
    if start < ops.len() {
        ranges.push(start..ops.len());
    }
    Ok(ranges)
}

/// The request body of `ops` in one buffer, as a raw client would send it (the writer
/// streams it instead, see [`BodyReader`]).
pub fn body(ops: &[BulkOp]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body_len(ops));
    for op in ops {
        out.extend_from_slice(&op.ndjson);
    }
    out
}

/// The bytes of a request of `ops`.
pub fn body_len(ops: &[BulkOp]) -> usize {
    ops.iter().map(BulkOp::len).sum()
}

/// A request's body read from its operations' own buffers, so that sending it copies each
/// byte once, into the HTTP client's buffer, instead of first into one request-sized
/// buffer (5 MiB at the default byte limit, fresh memory for every request).
pub struct BodyReader<'a> {
    ops: &'a [BulkOp],
    /// Bytes of `ops[0]` already read.
    offset: usize,
}

impl<'a> BodyReader<'a> {
    pub fn new(ops: &'a [BulkOp]) -> BodyReader<'a> {
        BodyReader { ops, offset: 0 }
    }
}

impl Read for BodyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            let Some((op, rest)) = self.ops.split_first() else {
                break;
            };
            let left = &op.ndjson[self.offset..];
            let take = left.len().min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&left[..take]);
            n += take;
            self.offset += take;
            if self.offset == op.ndjson.len() {
                (self.ops, self.offset) = (rest, 0);
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// The whole-document write of `source` as document `id` of `index`.
    pub(crate) fn index_op(index: &str, id: &str, source: &Value) -> BulkOp {
        IndexWrites::new(index).op(id.to_string(), |out| {
            serde_json::to_writer(out, source).unwrap()
        })
    }

    fn op(id: usize, filler: usize) -> BulkOp {
        index_op("i", &id.to_string(), &json!({ "f": "x".repeat(filler) }))
    }

    #[test]
    fn the_body_reader_reads_what_body_builds() {
        let ops: Vec<BulkOp> = (0..50).map(|i| op(i, i * 7)).collect();
        for chunk in [1, 3, 64, 1 << 20] {
            let mut reader = BodyReader::new(&ops);
            let (mut read, mut buf) = (Vec::new(), vec![0u8; chunk]);
            loop {
                let n = reader.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                read.extend_from_slice(&buf[..n]);
            }
            assert_eq!(read, body(&ops), "chunk {chunk}");
            assert_eq!(read.len(), body_len(&ops));
        }
        assert_eq!(BodyReader::new(&[]).read(&mut [0u8; 8]).unwrap(), 0);
    }

    #[test]
    fn index_writes_hold_exactly_their_lines() {
        let writes = IndexWrites::new("i");
        for (n, filler) in [(0, 3000), (1, 10), (2, 700)].into_iter().enumerate() {
            let o = writes.op(n.to_string(), |out| {
                serde_json::to_writer(out, &json!({ "f": "x".repeat(filler.1) })).unwrap()
            });
            assert_eq!(o.ndjson.capacity(), o.ndjson.len());
            let text = String::from_utf8(o.ndjson).unwrap();
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(lines[0]["index"]["_id"], json!(n.to_string()));
            assert_eq!(lines[1]["f"].as_str().map(str::len), Some(filler.1));
        }
    }

    #[test]
    fn golden_ndjson() {
        let o = index_op("idx", "a1", &json!({"ip": "203.0.113.7", "port": 443}));
        assert_eq!(
            String::from_utf8(o.ndjson.clone()).unwrap(),
            "{\"index\":{\"_id\":\"a1\",\"_index\":\"idx\"}}\n{\"ip\":\"203.0.113.7\",\"port\":443}\n"
        );
        let u = ScriptedUpserts::new("a", "s").op("b".into(), b"{\"obs\":{}}");
        assert_eq!(
            String::from_utf8(u.ndjson.clone()).unwrap(),
            "{\"update\":{\"_id\":\"b\",\"_index\":\"a\",\"retry_on_conflict\":3}}\n\
             {\"script\":{\"id\":\"s\",\"params\":{\"obs\":{}}},\"scripted_upsert\":true,\"upsert\":{}}\n"
        );
        assert_eq!(
            (u.kind, &*u.index, u.id.as_str()),
            (OpKind::Update, "a", "b")
        );
        assert_eq!(u.ndjson.len(), u.ndjson.capacity(), "sized up front");
    }

    #[test]
    fn upsert_names_are_escaped_and_lines_parse() {
        let u = ScriptedUpserts::new("i\"x", "s\\1").op("a\"b\n".into(), b"{}");
        let text = String::from_utf8(u.ndjson).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                json!({"update": {"_id": "a\"b\n", "_index": "i\"x", "retry_on_conflict": 3}}),
                json!({"script": {"id": "s\\1", "params": {}}, "scripted_upsert": true, "upsert": {}})
            ]
        );
    }

    #[test]
    fn split_by_count() {
        let ops: Vec<_> = (0..5).map(|i| op(i, 1)).collect();
        assert_eq!(split(&ops, 2, 1 << 20).unwrap(), vec![0..2, 2..4, 4..5]);
    }

    #[test]
    fn split_by_actual_bytes() {
        let ops: Vec<_> = (0..4).map(|i| op(i, 100)).collect();
        let one = ops[0].len();
        let ranges = split(&ops, 100, one * 2).unwrap();
        assert_eq!(ranges, vec![0..2, 2..4]);
        for r in &ranges {
            assert!(body(&ops[r.clone()]).len() <= one * 2);
        }
        assert_eq!(split(&ops, 100, one * 2 - 1).unwrap().len(), 4);
    }

    #[test]
    fn oversized_single_operation_is_refused_not_truncated() {
        let ops = vec![op(0, 10), op(1, 5000)];
        let err = split(&ops, 100, 1000).unwrap_err();
        assert!(matches!(err, EsError::Refused(_)));
    }

    #[test]
    fn empty_input_no_requests() {
        assert!(split(&[], 10, 100).unwrap().is_empty());
    }
}
