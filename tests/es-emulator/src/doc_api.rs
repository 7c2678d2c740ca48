//! Single-document APIs: index, create, update, delete and realtime get.

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::app::App;
use crate::docs::{apply, parse_version_type, OpKind, WriteOp};
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::resolve::{resolve_read, IndicesOptions};
use crate::source_filter::SourceFilter;

fn param_i64(req: &Req, key: &str) -> Result<Option<i64>, EsError> {
    req.param(key)
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| EsError::bad_request(format!("Failed to parse [{key}] value [{v}]")))
        })
        .transpose()
}

pub fn write(app: &App, req: &Req, kind: OpKind, index: &str, id: Option<&str>) -> HandlerResult {
    let refresh = req.param("refresh");
    let forced = matches!(refresh, Some("") | Some("true"));
    let kind = if kind == OpKind::Index && req.param("op_type") == Some("create") {
        OpKind::Create
    } else {
        kind
    };
    let body = match kind {
        OpKind::Delete => None,
        _ => Some(req.json_body()?.ok_or_else(|| {
            EsError::new(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: source is missing;",
            )
        })?),
    };
    // A whole document keeps the text it was sent as, as from `_bulk`.
    let raw = match kind {
        OpKind::Index | OpKind::Create => serde_json::from_slice::<&RawValue>(&req.body)
            .ok()
            .map(|r| r.to_owned()),
        OpKind::Update | OpKind::Delete => None,
    };
    let op = WriteOp {
        kind,
        index: index.to_owned(),
        id: id.map(str::to_owned),
        body,
        raw,
        version: param_i64(req, "version")?,
        version_type: parse_version_type(req.param("version_type"))?,
        if_seq_no: param_i64(req, "if_seq_no")?,
        if_primary_term: param_i64(req, "if_primary_term")?,
        require_alias: req.flag("require_alias")?.unwrap_or(false),
        fetch_source: None,
        routing: req.param("routing").map(str::to_owned),
    };
    let mut store = app.lock_store();
    let res = apply(&mut store, op).map_err(|e| e.error)?;
    let mut m = res.to_json();
    if forced && res.result != "noop" {
        if let Some(i) = store.indices.get_mut(&res.index) {
            i.refresh();
        }
        m.insert("forced_refresh".into(), json!(true));
        app.refreshed.notify_all();
    }
    if kind == OpKind::Update {
        let filter = SourceFilter::default().with_params(
            req.param("_source"),
            req.param("_source_includes"),
            req.param("_source_excludes"),
        );
        let latest = store
            .indices
            .get(&res.index)
            .and_then(|i| i.docs.get(res.id.as_str()))
            .and_then(|s| s.latest.clone());
        if let Some(src) = latest.as_ref().and_then(|d| filter.apply(&d.source)) {
            m.insert(
                "get".into(),
                json!({"_seq_no": res.seq_no, "_primary_term": 1, "found": true, "_source": src}),
            );
        }
    }
    let gens: Vec<(String, u64)> = match store.indices.get(&res.index) {
        Some(i) if refresh == Some("wait_for") && res.result != "noop" && !i.dirty.is_empty() => {
            vec![(res.index.clone(), i.queued)]
        }
        _ => Vec::new(),
    };
    drop(store);
    app.wait_for_refresh(&gens);
    Ok(Reply::json(res.status, &Value::Object(m)))
}

pub fn get(app: &App, req: &Req, index: &str, id: &str, source_only: bool) -> HandlerResult {
    let realtime = req.flag("realtime")?.unwrap_or(true);
    let mut store = app.lock_store();
    let names = resolve_read(
        &store,
        index,
        IndicesOptions {
            ignore_unavailable: false,
            allow_no_indices: true,
        },
    )?;
    let [name] = names.as_slice() else {
        return Err(EsError::bad_request(format!("alias [{index}] has more than one index associated with it, can't execute a single index op")));
    };
    let Some(idx) = store.indices.get_mut(name) else {
        return Err(EsError::index_not_found(index));
    };
    if req.flag("refresh")?.unwrap_or(false) {
        idx.refresh();
    }
    let slot = idx.docs.get(id);
    let doc = if realtime {
        slot.and_then(|s| s.latest.clone())
    } else {
        slot.and_then(|s| s.searchable)
            .and_then(|d| idx.searchable.get(d))
            .map(|p| p.doc.clone())
    };
    let Some(doc) = doc else {
        if source_only {
            return Err(EsError::new(
                404,
                "resource_not_found_exception",
                format!("Document not found [{name}]/[{id}]"),
            ));
        }
        return Ok(Reply::json(
            404,
            &json!({"_index": name, "_id": id, "found": false}),
        ));
    };
    if let Some(v) = param_i64(req, "version")? {
        // Reads demand the exact version whatever the version type (VersionType#isVersionConflictForReads).
        parse_version_type(req.param("version_type"))?;
        let conflict = doc.version != v;
        if conflict {
            return Err(EsError::version_conflict(
                id,
                format!(
                    "current version [{}] is different than the one provided [{v}]",
                    doc.version
                ),
                name,
                &idx.uuid,
            ));
        }
    }
    let filter = SourceFilter::all().with_params(
        req.param("_source"),
        req.param("_source_includes"),
        req.param("_source_excludes"),
    );
    if source_only {
        return Ok(Reply::ok(&filter.apply(&doc.source).unwrap_or(json!({}))));
    }
    let mut m = serde_json::Map::new();
    m.insert("_index".into(), json!(name));
    m.insert("_id".into(), json!(id));
    m.insert("_version".into(), json!(doc.version));
    m.insert("_seq_no".into(), json!(doc.seq_no));
    m.insert("_primary_term".into(), json!(1));
    if let Some(r) = &doc.routing {
        m.insert("_routing".into(), json!(r));
    }
    m.insert("found".into(), json!(true));
    if let Some(src) = filter.apply(&doc.source) {
        m.insert("_source".into(), src);
    }
    Ok(Reply::ok(&Value::Object(m)))
}
