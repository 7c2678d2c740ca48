//! Bulk operations as NDJSON: building one operation's lines, and splitting a list of
//! operations into requests by operation count and by the actual encoded bytes.

use std::ops::Range;

use serde::Serialize;
use serde_json::{Map, Value};

use super::error::EsError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Index,
    Update,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Index => "index",
            OpKind::Update => "update",
        }
    }
}

/// One encoded operation: its action line and source line, each ending in `\n`.
#[derive(Debug, Clone)]
pub struct BulkOp {
    pub kind: OpKind,
    pub index: String,
    pub id: String,
    pub ndjson: Vec<u8>,
}

/// An action line's metadata (field order as ES writes it back).
#[derive(Serialize)]
struct Meta<'a> {
    #[serde(rename = "_id")]
    id: &'a str,
    #[serde(rename = "_index")]
    index: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_on_conflict: Option<u32>,
}

#[derive(Serialize)]
struct Script<'a, P> {
    id: &'a str,
    params: P,
}

#[derive(Serialize)]
struct ScriptedUpsert<'a, P> {
    script: Script<'a, P>,
    scripted_upsert: bool,
    upsert: Map<String, Value>,
}

#[derive(Serialize)]
struct PartialDoc<'a, D> {
    doc: &'a D,
}

/// Concurrent merges of one document (two executions publishing the same asset) conflict
/// on its version; ES re-runs the script this many times before failing the item.
const RETRY_ON_CONFLICT: u32 = 3;

impl BulkOp {
    /// Serialises straight from borrowed data: publication encodes two operations per
    /// endpoint, so no intermediate `Value` tree is built.
    fn encode(
        kind: OpKind,
        index: &str,
        id: &str,
        retry_on_conflict: Option<u32>,
        source: &impl Serialize,
    ) -> BulkOp {
        let meta = Meta {
            id,
            index,
            retry_on_conflict,
        };
        let mut ndjson = Vec::with_capacity(256);
        ndjson.extend_from_slice(b"{\"");
        ndjson.extend_from_slice(kind.as_str().as_bytes());
        ndjson.extend_from_slice(b"\":");
        // Serialising these types into memory cannot fail: no maps with non-string keys.
        let _ = serde_json::to_writer(&mut ndjson, &meta);
        ndjson.extend_from_slice(b"}\n");
        let _ = serde_json::to_writer(&mut ndjson, source);
        ndjson.push(b'\n');
        BulkOp {
            kind,
            index: index.to_string(),
            id: id.to_string(),
            ndjson,
        }
    }

    /// Whole-document write: a retry overwrites with the same content.
    pub fn index(index: &str, id: &str, source: &impl Serialize) -> BulkOp {
        BulkOp::encode(OpKind::Index, index, id, None, source)
    }

    /// A scripted upsert through a stored script (the script decides create or merge).
    pub fn scripted_upsert(
        index: &str,
        id: &str,
        script_id: &str,
        params: impl Serialize,
    ) -> BulkOp {
        let body = ScriptedUpsert {
            script: Script {
                id: script_id,
                params,
            },
            scripted_upsert: true,
            upsert: Map::new(),
        };
        BulkOp::encode(OpKind::Update, index, id, Some(RETRY_ON_CONFLICT), &body)
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

    pub fn len(&self) -> usize {
        self.ndjson.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ndjson.is_empty()
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

/// The request body of `ops`.
pub fn body(ops: &[BulkOp]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ops.iter().map(BulkOp::len).sum());
    for op in ops {
        out.extend_from_slice(&op.ndjson);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(id: usize, filler: usize) -> BulkOp {
        BulkOp::index("i", &id.to_string(), &json!({ "f": "x".repeat(filler) }))
    }

    #[test]
    fn golden_ndjson() {
        let o = BulkOp::index("idx", "a1", &json!({"ip": "203.0.113.7", "port": 443}));
        assert_eq!(
            String::from_utf8(o.ndjson.clone()).unwrap(),
            "{\"index\":{\"_id\":\"a1\",\"_index\":\"idx\"}}\n{\"ip\":\"203.0.113.7\",\"port\":443}\n"
        );
        let u = BulkOp::scripted_upsert("a", "b", "s", json!({"obs": {}}));
        let text = String::from_utf8(u.ndjson).unwrap();
        assert!(text.starts_with(
            "{\"update\":{\"_id\":\"b\",\"_index\":\"a\",\"retry_on_conflict\":3}}\n"
        ));
        assert!(text.ends_with("\"upsert\":{}}\n"));
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
