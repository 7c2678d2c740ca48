//! `_bulk`: the NDJSON parser (ES's per-line rules and messages), item execution under one
//! store lock, per-item faults, response corruption, and `refresh=true|wait_for`.

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::app::{lock, App};
use crate::bulk_parse::{parse, Parsed};
use crate::docs::{apply, OpKind, WriteErr};
use crate::error::EsError;
use crate::faults::corrupt;
use crate::http::{HandlerResult, Reply, Req};
use crate::source_filter::SourceFilter;

/// Items applied per hold of the store lock (a 1000-item scripted bulk holds it ~20 ms in
/// all; a slice about a millisecond).
const ITEMS_PER_LOCK: usize = 64;

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
    let url_source = (req.param("_source").is_some() || req.param("_source_includes").is_some())
        .then(|| {
            SourceFilter::default().with_params(
                req.param("_source"),
                req.param("_source_includes"),
                req.param("_source_excludes"),
            )
        });
    let mut items: Vec<Vec<u8>> = Vec::with_capacity(parsed.len());
    let mut errors = false;
    let mut touched: Vec<String> = Vec::new();
    let mut parsed = parsed.into_iter().peekable();
    // The store lock is taken per slice of items, not for the whole request: a search
    // waiting for it gets in between (on a real node, reads never wait for a bulk).
    while parsed.peek().is_some() {
        let mut store = app.lock_store();
        let mut faults = lock(&app.faults);
        let check_items = faults.has_item_faults();
        for p in parsed.by_ref().take(ITEMS_PER_LOCK) {
            // An update's `_source` fetch applies to its own item only.
            let (kind, res, fetch) = match p {
                Parsed::Bad {
                    kind,
                    index,
                    id,
                    error,
                } => (kind, Err(WriteErr { index, id, error }), None),
                Parsed::Op(op) => {
                    let fetch = match (&op.fetch_source, &url_source) {
                        (Some(spec), _) if op.kind == OpKind::Update => {
                            Some(SourceFilter::from_body(Some(spec)))
                        }
                        (None, Some(f)) if op.kind == OpKind::Update => Some(f.clone()),
                        _ => None,
                    };
                    let injected = if check_items {
                        op.id.as_deref().and_then(|id| faults.item_failure(id))
                    } else {
                        None
                    };
                    let kind = op.kind;
                    let res = match injected {
                        Some(error) => Err(WriteErr {
                            index: op.index.clone(),
                            id: op.id.clone().unwrap_or_default(),
                            error,
                        }),
                        None => apply(&mut store, op).map_err(|e| *e),
                    };
                    (kind, res, fetch)
                }
            };
            let mut item = Vec::with_capacity(256);
            item.extend_from_slice(b"{\"");
            item.extend_from_slice(kind.name().as_bytes());
            item.extend_from_slice(b"\":");
            match res {
                Ok(ok) => {
                    if touched.last() != Some(&ok.index) && !touched.contains(&ok.index) {
                        touched.push(ok.index.clone());
                    }
                    let get = fetch.and_then(|f| {
                        let doc = store.indices.get(&ok.index)?.docs.get(ok.id.as_str())?.latest.clone()?;
                        Some(json!({"_seq_no": doc.seq_no, "_primary_term": 1, "found": true, "_source": f.apply(&doc.source)?}))
                    });
                    ok.write_item(&mut item, forced && ok.result != "noop", get.as_ref());
                }
                Err(e) => {
                    errors = true;
                    let _ =
                        serde_json::to_writer(&mut item, &error_item(&e.index, &e.id, &e.error));
                }
            }
            item.push(b'}');
            items.push(item);
        }
        drop(faults);
        drop(store);
        // The lock was just released: give a waiting request the chance to take it.
        if app.store_wanted() {
            std::thread::yield_now();
        }
    }
    let corruption = lock(&app.faults).corruption();
    if forced || wait_for {
        let mut store = app.lock_store();
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
                        .map(|i| (n.clone(), i.queued))
                })
                .collect();
            drop(store);
            app.wait_for_refresh(&gens);
        }
    }
    if let Some(mode) = corruption {
        let mut values: Vec<Value> = items
            .iter()
            .filter_map(|i| serde_json::from_slice(i).ok())
            .collect();
        corrupt(&mut values, mode);
        items = values
            .iter()
            .map(|v| serde_json::to_vec(v).unwrap_or_default())
            .collect();
    }
    let took = started.elapsed().as_millis() as u64;
    let mut body = Vec::with_capacity(items.iter().map(Vec::len).sum::<usize>() + items.len() + 64);
    body.extend_from_slice(format!("{{\"errors\":{errors},\"took\":{took},\"items\":[").as_bytes());
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    Ok(Reply {
        status: 200,
        body,
        json: true,
        close: false,
    })
}
