//! The `_bulk` NDJSON parser: ES's per-line rules and messages (trailing newline, action
//! names, metadata keys, source lines), with a fast path for the common action line.

use serde_json::value::RawValue;
use serde_json::Value;

use crate::docs::{parse_version_type, OpKind, WriteOp};
use crate::error::EsError;

/// One parsed bulk line pair: an operation or an item-level parse failure.
pub enum Parsed {
    Op(WriteOp),
    Bad {
        kind: OpKind,
        index: String,
        id: String,
        error: EsError,
    },
}

const META_KEYS: [&str; 13] = [
    "_index",
    "_id",
    "routing",
    "op_type",
    "version",
    "version_type",
    "if_seq_no",
    "if_primary_term",
    "retry_on_conflict",
    "pipeline",
    "_source",
    "require_alias",
    "_type",
];

fn malformed(line: usize, what: String) -> EsError {
    EsError::bad_request(format!("Malformed action/metadata line [{line}], {what}"))
}

fn token_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "VALUE_STRING",
        Value::Number(_) => "VALUE_NUMBER",
        Value::Bool(_) => "VALUE_BOOLEAN",
        Value::Null => "VALUE_NULL",
        Value::Array(_) => "START_ARRAY",
        Value::Object(_) => "START_OBJECT",
    }
}

/// The common action line shape, parsed without building a JSON tree; anything else
/// (other keys, numeric ids, malformed lines) takes the slow path with ES's messages.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FastMeta {
    _index: Option<String>,
    _id: Option<String>,
    retry_on_conflict: Option<i64>,
    require_alias: Option<bool>,
    routing: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FastAction {
    index: Option<FastMeta>,
    create: Option<FastMeta>,
    update: Option<FastMeta>,
    delete: Option<FastMeta>,
}

fn fast_action(
    line: &[u8],
    default_index: Option<&str>,
    req_require_alias: bool,
) -> Option<WriteOp> {
    let a: FastAction = serde_json::from_slice(line).ok()?;
    let (kind, meta) = match (a.index, a.create, a.update, a.delete) {
        (Some(m), None, None, None) => (OpKind::Index, m),
        (None, Some(m), None, None) => (OpKind::Create, m),
        (None, None, Some(m), None) => (OpKind::Update, m),
        (None, None, None, Some(m)) => (OpKind::Delete, m),
        _ => return None,
    };
    let _ = meta.retry_on_conflict;
    Some(WriteOp {
        kind,
        index: meta._index.or_else(|| default_index.map(str::to_owned))?,
        id: meta._id,
        body: None,
        raw: None,
        version: None,
        version_type: crate::docs::VersionType::Internal,
        if_seq_no: None,
        if_primary_term: None,
        require_alias: meta.require_alias.unwrap_or(req_require_alias),
        fetch_source: None,
        routing: meta.routing,
    })
}

/// A document's source and the text it was sent as (kept for `_source`, see
/// [`crate::store::DocVersion::raw`]).
pub fn as_sent(text: &[u8]) -> serde_json::Result<(Value, Option<Box<RawValue>>)> {
    let raw: &RawValue = serde_json::from_slice(text)?;
    Ok((serde_json::from_str(raw.get())?, Some(raw.to_owned())))
}

/// Parses a bulk body. `default_index` comes from `/{index}/_bulk`.
pub fn parse(
    body: &[u8],
    default_index: Option<&str>,
    req_require_alias: bool,
) -> Result<Vec<Parsed>, EsError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(EsError::new(
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: no requests added;",
        ));
    }
    if body.last() != Some(&b'\n') {
        return Err(EsError::bad_request(
            "The bulk request must be terminated by a newline [\\n]",
        ));
    }
    let mut lines = body
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix(b"\r").unwrap_or(l)));
    // Pre-sized from the line count (index/create/update take two lines each).
    let mut out = Vec::with_capacity(body.iter().filter(|b| **b == b'\n').count() / 2 + 1);
    while let Some((n, line)) = lines.next() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let mut op = match fast_action(line, default_index, req_require_alias) {
            Some(op) => op,
            None => slow_action(n, line, default_index, req_require_alias)?,
        };
        let kind = op.kind;
        if kind != OpKind::Delete {
            let Some((_, source)) = lines.next().filter(|(_, l)| !l.is_empty()) else {
                return Err(EsError::bad_request(format!(
                    "Malformed action/metadata line [{n}], missing source line"
                )));
            };
            let parsed = if kind == OpKind::Update {
                serde_json::from_slice::<Value>(source).map(|v| (v, None))
            } else {
                as_sent(source)
            };
            match parsed {
                Ok((v @ Value::Object(_), raw)) => {
                    if kind == OpKind::Update {
                        if let Some(src) = v.get("_source") {
                            op.fetch_source = Some(src.clone());
                        }
                    }
                    op.body = Some(v);
                    op.raw = raw;
                }
                Ok(_) | Err(_) if kind == OpKind::Update => {
                    return Err(EsError::new(
                        400,
                        "x_content_parse_exception",
                        format!("[{}:1] failed to parse update request", n + 1),
                    ))
                }
                Ok(_) | Err(_) => {
                    out.push(Parsed::Bad {
                        kind,
                        index: op.index.clone(),
                        id: op.id.clone().unwrap_or_default(),
                        error: EsError::new(400, "mapper_parsing_exception", "failed to parse")
                            .caused_by(EsError::new(400, "not_x_content_exception", "Compressor detection can only be called on some xcontent bytes or compressed xcontent bytes")),
                    });
                    continue;
                }
            }
        }
        out.push(Parsed::Op(op));
    }
    Ok(out)
}

/// Parses one action line with ES's validation messages.
fn slow_action(
    n: usize,
    line: &[u8],
    default_index: Option<&str>,
    req_require_alias: bool,
) -> Result<WriteOp, EsError> {
    {
        let action: Value = serde_json::from_slice(line)
            .map_err(|e| malformed(n, format!("expected START_OBJECT but found [{e}]")))?;
        let Value::Object(action) = action else {
            return Err(malformed(
                n,
                format!("expected START_OBJECT but found [{}]", token_name(&action)),
            ));
        };
        let Some((name, meta)) = action.iter().next() else {
            return Err(malformed(
                n,
                "expected FIELD_NAME but found [END_OBJECT]".into(),
            ));
        };
        let mut kind = match name.as_str() {
            "index" => OpKind::Index,
            "create" => OpKind::Create,
            "update" => OpKind::Update,
            "delete" => OpKind::Delete,
            other => {
                return Err(malformed(
                    n,
                    format!("expected one of [create, delete, index, update] but found [{other}]"),
                ))
            }
        };
        let Some(meta) = meta.as_object() else {
            return Err(malformed(
                n,
                format!("expected START_OBJECT but found [{}]", token_name(meta)),
            ));
        };
        if let Some(bad) = meta.keys().find(|k| !META_KEYS.contains(&k.as_str())) {
            return Err(EsError::bad_request(format!(
                "Action/metadata line [{n}] contains an unknown parameter [{bad}]"
            )));
        }
        let get_str = |k: &str| {
            meta.get(k).map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            })
        };
        let get_i64 = |k: &str| {
            meta.get(k).and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
        };
        if kind == OpKind::Index && get_str("op_type").as_deref() == Some("create") {
            kind = OpKind::Create;
        }
        let index = match get_str("_index").or_else(|| default_index.map(str::to_owned)) {
            Some(i) => i,
            None => {
                return Err(EsError::new(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: index is missing;",
                ))
            }
        };
        let id = get_str("_id");
        let op = WriteOp {
            kind,
            index,
            id,
            body: None,
            raw: None,
            version: get_i64("version"),
            version_type: parse_version_type(get_str("version_type").as_deref())?,
            if_seq_no: get_i64("if_seq_no"),
            if_primary_term: get_i64("if_primary_term"),
            require_alias: meta
                .get("require_alias")
                .and_then(Value::as_bool)
                .unwrap_or(req_require_alias),
            fetch_source: meta.get("_source").cloned(),
            routing: get_str("routing"),
        };
        if kind == OpKind::Update && (op.version.is_some() || meta.contains_key("version_type")) {
            return Err(EsError::bad_request("Update requests do not support versioning. Please use `if_seq_no` and `if_primary_term` instead"));
        }
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> String {
        match parse(body.as_bytes(), Some("i"), false) {
            Err(e) => e.reason,
            Ok(_) => "ok".into(),
        }
    }

    #[test]
    fn parser_rules_match_es() {
        assert_eq!(
            err("{\"index\":{}}\n{}"),
            "The bulk request must be terminated by a newline [\\n]"
        );
        assert_eq!(
            err("{}\n"),
            "Malformed action/metadata line [1], expected FIELD_NAME but found [END_OBJECT]"
        );
        assert!(err("{\"foo\":{}}\n")
            .contains("expected one of [create, delete, index, update] but found [foo]"));
        assert!(err("{\"index\":{\"bad\":1}}\n{}\n").contains("unknown parameter [bad]"));
        assert_eq!(
            err("{\"delete\":{\"_id\":\"1\"}}\r\n\n{\"index\":{}}\n{\"a\":1}\n"),
            "ok"
        );
    }
}
