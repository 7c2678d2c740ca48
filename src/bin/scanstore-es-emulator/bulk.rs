//! `_bulk`: the NDJSON parser (ES's per-line rules and messages), item execution under one
//! store lock, per-item faults, response corruption, and `refresh=true|wait_for`.

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::app::{lock, App};
use crate::docs::{apply, parse_version_type, OpKind, WriteErr, WriteOp};
use crate::error::EsError;
use crate::faults::corrupt;
use crate::http::{HandlerResult, Reply, Req};

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
    let mut out = Vec::new();
    while let Some((n, line)) = lines.next() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
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
        let mut op = WriteOp {
            kind,
            index,
            id,
            body: None,
            version: get_i64("version"),
            version_type: parse_version_type(get_str("version_type").as_deref())?,
            if_seq_no: get_i64("if_seq_no"),
            if_primary_term: get_i64("if_primary_term"),
            require_alias: meta
                .get("require_alias")
                .and_then(Value::as_bool)
                .unwrap_or(req_require_alias),
        };
        if kind == OpKind::Update && (op.version.is_some() || meta.contains_key("version_type")) {
            return Err(EsError::bad_request("Update requests do not support versioning. Please use `if_seq_no` and `if_primary_term` instead"));
        }
        if kind != OpKind::Delete {
            let Some((_, source)) = lines.next().filter(|(_, l)| !l.is_empty()) else {
                return Err(EsError::bad_request(format!(
                    "Malformed action/metadata line [{n}], missing source line"
                )));
            };
            match serde_json::from_slice::<Value>(source) {
                Ok(v @ Value::Object(_)) => op.body = Some(v),
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

fn error_item(index: &str, id: &str, e: &EsError) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("_index".into(), json!(index));
    m.insert("_id".into(), json!(id));
    m.insert("status".into(), json!(e.status));
    m.insert("error".into(), e.to_json());
    m
}

pub fn handle(app: &App, req: &Req, default_index: Option<&str>) -> HandlerResult {
    let started = Instant::now();
    let refresh = req.param("refresh");
    let forced = matches!(refresh, Some("") | Some("true"));
    let wait_for = refresh == Some("wait_for");
    if let Some(r) = refresh.filter(|r| !matches!(*r, "" | "true" | "false" | "wait_for")) {
        return Err(EsError::bad_request(format!(
            "Unknown value for refresh: [{r}]."
        )));
    }
    let parsed = parse(
        &req.body,
        default_index,
        req.flag("require_alias")?.unwrap_or(false),
    )?;
    let mut items = Vec::with_capacity(parsed.len());
    let mut errors = false;
    let mut touched: Vec<String> = Vec::new();
    let corruption;
    {
        let mut store = lock(&app.store);
        let mut faults = lock(&app.faults);
        for p in parsed {
            let (kind, res) = match p {
                Parsed::Bad {
                    kind,
                    index,
                    id,
                    error,
                } => (kind, Err(WriteErr { index, id, error })),
                Parsed::Op(op) => {
                    let injected = op.id.as_deref().and_then(|id| faults.item_failure(id));
                    match injected {
                        Some(error) => (
                            op.kind,
                            Err(WriteErr {
                                index: op.index.clone(),
                                id: op.id.clone().unwrap_or_default(),
                                error,
                            }),
                        ),
                        None => (op.kind, apply(&mut store, &op)),
                    }
                }
            };
            let body = match res {
                Ok(ok) => {
                    if !touched.contains(&ok.index) {
                        touched.push(ok.index.clone());
                    }
                    let mut m = ok.to_json();
                    m.insert("status".into(), json!(ok.status));
                    if forced && ok.result != "noop" {
                        m.insert("forced_refresh".into(), json!(true));
                    }
                    m
                }
                Err(e) => {
                    errors = true;
                    error_item(&e.index, &e.id, &e.error)
                }
            };
            let mut item = Map::new();
            item.insert(kind.name().into(), Value::Object(body));
            items.push(Value::Object(item));
        }
        corruption = faults.corruption();
        drop(faults);
        if forced {
            for name in &touched {
                if let Some(idx) = store.indices.get_mut(name) {
                    idx.refresh();
                }
            }
            app.refreshed.notify_all();
        }
        if wait_for {
            let gens: Vec<(String, u64)> = touched
                .iter()
                .filter_map(|n| {
                    store
                        .indices
                        .get(n)
                        .filter(|i| !i.dirty.is_empty())
                        .map(|i| (n.clone(), i.refresh_gen))
                })
                .collect();
            drop(store);
            app.wait_for_refresh(&gens);
        }
    }
    if let Some(mode) = corruption {
        corrupt(&mut items, mode);
    }
    let took = started.elapsed().as_millis() as u64;
    Ok(Reply::ok(
        &json!({"errors": errors, "took": took, "items": items}),
    ))
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
