//! Cluster and index administration: `GET /`, cluster health, create/delete/exists/get
//! index, mappings and settings, `_refresh`, index templates, aliases and stored scripts.

use serde_json::{json, Map, Value};

use crate::app::{lock, App};
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::resolve::{resolve_read, IndicesOptions};
use crate::store::{glob_match, StoredScript, Template};

/// `PUT /{index}`. One node holds only primaries, so `wait_for_active_shards` above one
/// copy is never met: the reply is the one ES gives when its wait times out (created, and
/// `shards_acknowledged: false`), sent at once.
pub fn create(app: &App, req: &Req, name: &str) -> HandlerResult {
    let wanted = req.param("wait_for_active_shards");
    let parse_err = |v: &str| EsError::bad_request(format!("cannot parse ActiveShardCount[{v}]"));
    if let Some(v) = wanted.filter(|v| !matches!(*v, "all" | "default")) {
        v.parse::<u32>().map_err(|_| parse_err(v))?;
    }
    let body = req.json_body()?;
    let mut store = app.lock_store();
    let idx = store.create_index(name, body.as_ref())?;
    let copies = match wanted {
        Some("all") => idx.replicas + 1,
        Some(n) => n.parse::<u64>().unwrap_or(1),
        None => 1,
    };
    Ok(Reply::ok(
        &json!({"acknowledged": true, "shards_acknowledged": copies <= 1, "index": name}),
    ))
}

/// `PUT /{indices}/_mapping`: adds fields to every index the expression names (aliases
/// and wildcards included); a field that exists keeps its type or the whole update is
/// refused, on every index alike. As in Elasticsearch, a wildcard that matches nothing is
/// 404 unless `allow_no_indices=true`.
pub fn put_mapping(app: &App, req: &Req, expr: &str) -> HandlerResult {
    let opts = IndicesOptions::from_req_or(req, false)?;
    let body = req.json_body()?.ok_or_else(|| {
        EsError::new(
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: mapping source is missing;",
        )
    })?;
    let update = crate::mapping::Mapping::parse(&body)?;
    let mut store = app.lock_store();
    let names = resolve_read(&store, expr, opts)?;
    for n in &names {
        if let Some(i) = store.indices.get(n) {
            i.mapping.clone().add_fields(&update, i.next_write_no)?;
        }
    }
    for n in &names {
        if let Some(i) = store.indices.get_mut(n) {
            let next = i.next_write_no;
            i.mapping.add_fields(&update, next)?;
        }
    }
    Ok(Reply::ok(&json!({"acknowledged": true})))
}

/// `DELETE /{indices}`: concrete names only, as Elasticsearch 8's default
/// `action.destructive_requires_name: true` demands — no wildcard, `_all` or alias.
pub fn delete(app: &App, req: &Req, expr: &str) -> HandlerResult {
    let opts = IndicesOptions::from_req(req)?;
    if expr
        .split(',')
        .any(|part| part.contains('*') || part == "_all" || part.starts_with('-'))
    {
        return Err(EsError::new(
            400,
            "illegal_argument_exception",
            "Wildcard expressions or all indices are not allowed",
        ));
    }
    let mut store = app.lock_store();
    crate::resolve::refuse_alias_delete(&store, expr.split(','))?;
    let names = resolve_read(&store, expr, opts)?;
    let removed: Vec<_> = names
        .iter()
        .filter_map(|n| store.indices.remove(n))
        .collect();
    drop(store);
    // Cached sorted hits hold their documents: a deleted index's would stay in memory
    // until evicted (up to 4 M hits). All entries go, a live index's too: a walk over
    // one re-sorts once at its next page.
    let ranked = crate::app::lock(&app.ranked).take_all();
    // Freed after the store is unlocked: dropping a million-document index took 1.5–2.4 s,
    // and every other request waited for it.
    drop(removed);
    drop(ranked);
    Ok(Reply::ok(&json!({"acknowledged": true})))
}

pub fn exists(app: &App, req: &Req, expr: &str) -> HandlerResult {
    let store = app.lock_store();
    let opts = IndicesOptions {
        ignore_unavailable: false,
        allow_no_indices: req.flag("allow_no_indices")?.unwrap_or(false),
    };
    Ok(Reply::empty(if resolve_read(&store, expr, opts).is_ok() {
        200
    } else {
        404
    }))
}

/// `GET /{index}`, `/{index}/_mapping`, `/{index}/_settings`, `/{index}/_alias`.
pub fn get(app: &App, req: &Req, expr: &str, what: Option<&str>) -> HandlerResult {
    let opts = IndicesOptions::from_req(req)?;
    let store = app.lock_store();
    let names = resolve_read(&store, expr, opts)?;
    let mut out = Map::new();
    for n in names {
        let Some(i) = store.indices.get(&n) else {
            continue;
        };
        let aliases: Map<String, Value> = i
            .aliases
            .iter()
            .map(|(a, m)| (a.clone(), alias_json(m)))
            .collect();
        let v = match what {
            Some("_mapping") => json!({"mappings": i.mapping.to_json()}),
            Some("_settings") => json!({"settings": i.settings_json()}),
            _ => {
                json!({"aliases": aliases, "mappings": i.mapping.to_json(), "settings": i.settings_json()})
            }
        };
        out.insert(n, v);
    }
    Ok(Reply::ok(&Value::Object(out)))
}

fn alias_json(m: &crate::store::AliasMeta) -> Value {
    let mut o = m.extra.clone();
    if let Some(w) = m.is_write_index {
        o.insert("is_write_index".into(), json!(w));
    }
    Value::Object(o)
}

pub fn refresh(app: &App, req: &Req, expr: &str) -> HandlerResult {
    let opts = IndicesOptions::from_req(req)?;
    let fail = lock(&app.faults).refresh_failure();
    // In one go, unlike the periodic refresh: its caller waits for all of it anyway.
    let mut store = app.lock_store();
    let names = resolve_read(&store, expr, opts)?;
    let (mut total, mut ok) = (0, 0);
    let mut failures = Vec::new();
    for n in &names {
        let Some(i) = store.indices.get_mut(n) else {
            continue;
        };
        total += i.shards * (1 + i.replicas);
        if fail {
            for shard in 0..i.shards {
                failures.push(json!({"shard": shard, "index": n, "status": "INTERNAL_SERVER_ERROR",
                    "reason": {"type": "refresh_failed_engine_exception", "reason": "injected refresh failure"}}));
            }
        } else {
            i.refresh();
            ok += i.shards;
        }
    }
    drop(store);
    app.refreshed.notify_all();
    let mut shards = json!({"total": total, "successful": ok, "failed": failures.len()});
    if !failures.is_empty() {
        shards["failures"] = json!(failures);
    }
    let status = if fail && !names.is_empty() { 500 } else { 200 };
    Ok(Reply::json(status, &json!({"_shards": shards})))
}

pub fn put_template(app: &App, req: &Req, name: &str) -> HandlerResult {
    let body = req.json_body()?.unwrap_or(json!({}));
    let patterns: Vec<String> = match body.get("index_patterns") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => {
            return Err(EsError::new(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: index patterns are missing;",
            ))
        }
    };
    let priority = body.get("priority").and_then(Value::as_i64).unwrap_or(0);
    if let Some(t) = body.get("template") {
        if let Some(m) = t.get("mappings") {
            crate::mapping::Mapping::parse(m)?;
        }
    }
    let mut store = app.lock_store();
    if req.flag("create")?.unwrap_or(false) && store.templates.contains_key(name) {
        return Err(EsError::bad_request(format!(
            "index template [{name}] already exists"
        )));
    }
    for (other, t) in &store.templates {
        let overlap = t.patterns.iter().any(|a| {
            patterns
                .iter()
                .any(|b| glob_match(a, b) || glob_match(b, a))
        });
        if other != name && t.priority == priority && overlap {
            return Err(EsError::bad_request(format!(
                "index template [{name}] has index patterns {patterns:?} matching patterns from existing templates [{other}] with patterns ({other} => {:?}) that have the same priority [{priority}], multiple index templates may not match during index creation, please use a different priority",
                t.patterns
            )));
        }
    }
    store.templates.insert(
        name.to_owned(),
        Template {
            patterns,
            priority,
            body,
        },
    );
    Ok(Reply::ok(&json!({"acknowledged": true})))
}

pub fn get_template(app: &App, name: Option<&str>) -> HandlerResult {
    let store = app.lock_store();
    let list: Vec<Value> = store
        .templates
        .iter()
        .filter(|(n, _)| name.map_or(true, |p| glob_match(p, n)))
        .map(|(n, t)| {
            let mut body = t.body.clone();
            body["index_patterns"] = json!(t.patterns);
            if let Some(Value::Object(aliases)) =
                body.get("template").and_then(|t| t.get("aliases")).cloned()
            {
                let normalized: Map<String, Value> = aliases
                    .iter()
                    .map(|(a, m)| {
                        let meta = crate::store::parse_alias_meta(m);
                        let mut o = meta.extra;
                        if let Some(w) = meta.is_write_index {
                            o.insert("is_write_index".into(), json!(w));
                        }
                        (a.clone(), Value::Object(o))
                    })
                    .collect();
                body["template"]["aliases"] = Value::Object(normalized);
            }
            if let Some(s) = body
                .get("template")
                .and_then(|t| t.get("settings"))
                .cloned()
            {
                let mut flat = Map::new();
                crate::settings::flatten_settings(&s, "", &mut flat);
                let mut index = Map::new();
                for (k, v) in flat {
                    index.insert(k.trim_start_matches("index.").to_owned(), v);
                }
                body["template"]["settings"] = json!({"index": index});
            }
            json!({"name": n, "index_template": body})
        })
        .collect();
    if list.is_empty() && name.is_some_and(|n| !n.contains('*')) {
        return Err(EsError::new(
            404,
            "resource_not_found_exception",
            format!("index template matching [{}] not found", name.unwrap_or("")),
        ));
    }
    Ok(Reply::ok(&json!({"index_templates": list})))
}

pub fn delete_template(app: &App, name: &str) -> HandlerResult {
    let mut store = app.lock_store();
    let before = store.templates.len();
    store.templates.retain(|n, _| !glob_match(name, n));
    if before == store.templates.len() {
        return Err(EsError::new(
            404,
            "resource_not_found_exception",
            format!("index_template [{name}] missing"),
        ));
    }
    Ok(Reply::ok(&json!({"acknowledged": true})))
}

/// Painless contexts a stored script may name (Elasticsearch's `_script_context`, those a
/// stored script can be compiled for).
const SCRIPT_CONTEXTS: &[&str] = &[
    "update",
    "score",
    "filter",
    "field",
    "aggs",
    "aggs_combine",
    "aggs_init",
    "aggs_map",
    "aggs_reduce",
    "bucket_aggregation",
    "bucket_selector",
    "ingest",
    "processor_conditional",
    "number_sort",
    "string_sort",
    "terms_set",
    "similarity",
    "similarity_weight",
    "template",
    "painless_test",
    "update_by_query",
    "reindex",
    "search",
];

/// `PUT _scripts/{id}[/{context}]`. Without a context any source is stored, as
/// Elasticsearch does. With one, Elasticsearch compiles it now and refuses it with 400
/// `script_exception` (`compile error`); the emulator compiles only the sources it has a
/// native twin for, in that twin's context, and refuses every other the same way.
pub fn put_script(app: &App, req: &Req, id: &str, context: Option<&str>) -> HandlerResult {
    let body = req.json_body()?.unwrap_or(json!({}));
    let Some(script) = body.get("script") else {
        return Err(EsError::parsing(
            "unable to parse stored script: [script] is missing",
        ));
    };
    let Some(lang) = script.get("lang").and_then(Value::as_str) else {
        return Err(EsError::new(
            400,
            "illegal_argument_exception",
            "must specify lang for stored script",
        ));
    };
    let Some(source) = script.get("source").and_then(|s| {
        s.as_str()
            .map(str::to_owned)
            .or_else(|| s.is_object().then(|| s.to_string()))
    }) else {
        return Err(EsError::new(
            400,
            "illegal_argument_exception",
            "must specify source for stored script",
        ));
    };
    let native = crate::painless::native_for_source(&source);
    if let Some(context) = context {
        if !SCRIPT_CONTEXTS.contains(&context) {
            return Err(EsError::new(
                400,
                "illegal_argument_exception",
                format!("script context [{context}] not supported"),
            ));
        }
        if lang != "painless" || !native.is_some_and(|n| n.context == context) {
            return Err(EsError::new(400, "script_exception", "compile error")
                .with("lang", lang)
                .caused_by(EsError::new(
                    400,
                    "illegal_argument_exception",
                    format!(
                        "the emulator compiles only the scripts it has a native twin for \
                         (in that twin's context), not this one for context [{context}]"
                    ),
                )));
        }
    }
    app.lock_store().scripts.insert(
        id.to_owned(),
        StoredScript {
            lang: lang.to_owned(),
            native,
            source,
        },
    );
    Ok(Reply::ok(&json!({"acknowledged": true})))
}

pub fn get_script(app: &App, id: &str) -> HandlerResult {
    let store = app.lock_store();
    Ok(match store.scripts.get(id) {
        Some(s) => Reply::ok(
            &json!({"_id": id, "found": true, "script": {"lang": s.lang, "source": s.source}}),
        ),
        None => Reply::json(404, &json!({"_id": id, "found": false})),
    })
}

pub fn delete_script(app: &App, id: &str) -> HandlerResult {
    match app.lock_store().scripts.remove(id) {
        Some(_) => Ok(Reply::ok(&json!({"acknowledged": true}))),
        None => Err(EsError::new(
            404,
            "resource_not_found_exception",
            format!("stored script [{id}] does not exist"),
        )),
    }
}
