//! The `update` operation: partial-doc merge with noop detection, `upsert`,
//! `doc_as_upsert`, and scripts (stored by id or inline) run through their native twins,
//! with `ctx.op` handling (`noop`/`none`, `delete`, `create` for scripted upserts).

use serde_json::{Map, Value};

use crate::painless::{self, ScriptCtx};

use crate::docs::{check_cas, delete_doc, ok, OpKind, WriteOk, WriteOp};
use crate::error::EsError;
use crate::store::Index;

/// Recursive partial-document merge; returns whether anything changed.
fn merge(dst: &mut Map<String, Value>, patch: &Map<String, Value>) -> bool {
    let mut changed = false;
    for (k, v) in patch {
        match (dst.get_mut(k), v) {
            (Some(Value::Object(d)), Value::Object(p)) => changed |= merge(d, p),
            (Some(existing), _) if existing == v => {}
            _ => {
                dst.insert(k.clone(), v.clone());
                changed = true;
            }
        }
    }
    changed
}

const UPDATE_FIELDS: [&str; 8] = [
    "doc",
    "upsert",
    "doc_as_upsert",
    "script",
    "scripted_upsert",
    "detect_noop",
    "_source",
    "lang",
];

pub fn update_doc(
    index: &mut Index,
    op: &WriteOp,
    body: Option<Value>,
    id: &str,
    scripts: &std::collections::BTreeMap<String, crate::store::StoredScript>,
) -> Result<WriteOk, EsError> {
    if op.version.is_some() {
        return Err(EsError::new(400, "action_request_validation_exception", "Validation Failed: 1: Update requests do not support versioning. Please use `if_seq_no` and `if_primary_term` instead;"));
    }
    let empty = Map::new();
    let payload = body.as_ref().and_then(Value::as_object).unwrap_or(&empty);
    if let Some(bad) = payload
        .keys()
        .find(|k| !UPDATE_FIELDS.contains(&k.as_str()))
    {
        let hint = if bad.starts_with('d') {
            " did you mean [doc]?"
        } else {
            ""
        };
        return Err(EsError::new(
            400,
            "x_content_parse_exception",
            format!("[1:2] [UpdateRequest] unknown field [{bad}]{hint}"),
        ));
    }
    let current = index.docs.get(id).and_then(|s| s.latest.clone());
    if current.is_some() {
        check_cas(index, op, id)?;
    } else if op.if_seq_no.is_some() {
        return Err(EsError::new(
            404,
            "document_missing_exception",
            format!("[{id}]: document missing"),
        )
        .with("shard", "0"));
    }
    let flag = |k: &str, default: bool| payload.get(k).and_then(Value::as_bool).unwrap_or(default);
    let script = payload.get("script");
    let (new_source, created) = match (&current, script) {
        (Some(doc), Some(script)) => {
            let mut ctx = ScriptCtx {
                op: "index".into(),
                source: doc.source.as_object().cloned().unwrap_or_default(),
            };
            run_script(script, scripts, &mut ctx)?;
            match ctx.op.as_str() {
                "index" => (Value::Object(ctx.source), false),
                "delete" => {
                    return delete_doc(
                        index,
                        &WriteOp {
                            kind: OpKind::Delete,
                            ..op.clone()
                        },
                        id,
                    )
                }
                _ => return Ok(ok(index, id, doc.version, doc.seq_no, "noop")),
            }
        }
        (Some(doc), None) => {
            let Some(Value::Object(patch)) = payload.get("doc") else {
                return Err(EsError::new(
                    400,
                    "action_request_validation_exception",
                    "Validation Failed: 1: script or doc is missing;",
                ));
            };
            let mut merged = doc.source.as_object().cloned().unwrap_or_default();
            if !merge(&mut merged, patch) && flag("detect_noop", true) {
                return Ok(ok(index, id, doc.version, doc.seq_no, "noop"));
            }
            (Value::Object(merged), false)
        }
        (None, Some(script)) if flag("scripted_upsert", false) => {
            let upsert = payload
                .get("upsert")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut ctx = ScriptCtx {
                op: "create".into(),
                source: upsert,
            };
            run_script(script, scripts, &mut ctx)?;
            if ctx.op != "create" {
                return Ok(ok(index, id, 0, -2, "noop"));
            }
            (Value::Object(ctx.source), true)
        }
        (None, _) => match (payload.get("upsert"), payload.get("doc")) {
            (Some(up), _) => (up.clone(), true),
            (None, Some(doc)) if flag("doc_as_upsert", false) => (doc.clone(), true),
            _ => {
                return Err(EsError::new(
                    404,
                    "document_missing_exception",
                    format!("[{id}]: document missing"),
                )
                .with("shard", "0"))
            }
        },
    };
    index.check_doc(id, &new_source)?;
    let version = index.docs.get(id).map_or(0, |s| s.version) + 1;
    let (version, seq_no) = index.put(id, Some(new_source), version, op.routing.clone());
    Ok(ok(
        index,
        id,
        version,
        seq_no,
        if created { "created" } else { "updated" },
    ))
}

fn script_error(reason: String, script: &str) -> EsError {
    EsError::new(400, "script_exception", reason)
        .with("script", script)
        .with("lang", "painless")
}

fn run_script(
    spec: &Value,
    stored: &std::collections::BTreeMap<String, crate::store::StoredScript>,
    ctx: &mut ScriptCtx,
) -> Result<(), EsError> {
    let (source, label, params, cached) = match spec {
        Value::String(s) => (s.clone(), s.clone(), Map::new(), None),
        Value::Object(o) => {
            let params = o
                .get("params")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            match (
                o.get("id").and_then(Value::as_str),
                o.get("source").and_then(Value::as_str),
            ) {
                (Some(id), _) => match stored.get(id) {
                    Some(s) => (String::new(), id.to_owned(), params, Some(s.native)),
                    None => {
                        return Err(EsError::bad_request("failed to execute script").caused_by(
                            EsError::new(
                                404,
                                "resource_not_found_exception",
                                format!("unable to find script [{id}] in cluster state"),
                            ),
                        ))
                    }
                },
                (None, Some(src)) => (src.to_owned(), src.to_owned(), params, None),
                _ => return Err(EsError::parsing(
                    "must specify either [source] for an inline script or [id] for a stored script",
                )),
            }
        }
        _ => return Err(EsError::parsing("script must be a string or an object")),
    };
    let native = match cached {
        Some(native) => native,
        None => painless::native_for_source(&source),
    };
    let Some(native) = native else {
        let source = match stored.get(&label) {
            Some(s) if cached.is_some() => s.source.clone(),
            _ => source,
        };
        return Err(script_error(
            format!(
                "the ES emulator cannot run Painless: no native implementation is registered for this script source (sha256 {}); only scanstore's own scripts run here, their Painless text is proven on a real cluster (STORAGE_TEST_ES_URL)",
                painless::source_sha256(&source)
            ),
            &label,
        ));
    };
    native
        .run(ctx, &params)
        .map_err(|e| script_error(format!("runtime error: {e}"), &label))
}
