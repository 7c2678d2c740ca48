//! `_bulk`: the NDJSON parser (ES's per-line rules and messages), item execution under one
//! store lock, per-item faults, response corruption, and `refresh=true|wait_for`.

use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::app::{lock, App};
use crate::bulk_parse::{parse, Parsed};
use crate::docs::{apply, ItemFields, OpKind, WriteErr};
use crate::error::EsError;
use crate::faults::corrupt;
use crate::filter_path::{Decision, FilterPath};
use crate::http::{HandlerResult, Reply, Req};
use crate::source_filter::SourceFilter;

/// Items applied per hold of the store lock (a 1000-item scripted bulk holds it ~20 ms in
/// all; a slice about a millisecond).
const ITEMS_PER_LOCK: usize = 64;

/// How a `filter_path` shapes the answer.
enum Filtering {
    /// Everything written.
    Off,
    /// Decided field by field as items are written (a kind's fields in the order of
    /// [`OpKind`]), so that a filtered answer costs less to write, as on a real node.
    Items {
        kinds: [ItemFields; 4],
        took: bool,
        errors: bool,
        /// The `items` array even when no item is left in it.
        items_always: bool,
    },
    /// A field kept only in part (`items.*._shards.total`): the written answer filtered.
    Whole(FilterPath),
}

/// Objects among the item fields, which a per-field choice cannot keep in part.
const OBJECT_FIELDS: [&str; 3] = ["_shards", "get", "error"];

impl Filtering {
    fn of(filter: Option<FilterPath>) -> Filtering {
        let Some(filter) = filter else {
            return Filtering::Off;
        };
        let scalar = |path: &[&str]| match filter.decide(path) {
            Decision::Keep => true,
            Decision::Drop => false,
            Decision::Descend { leaf } => leaf,
        };
        let kind = |kind: OpKind| {
            ItemFields::pick(
                |field| match filter.decide(&["items", kind.name(), field]) {
                    Decision::Keep => Some(true),
                    Decision::Drop => Some(false),
                    Decision::Descend { .. } if OBJECT_FIELDS.contains(&field) => None,
                    Decision::Descend { leaf } => Some(leaf),
                },
            )
        };
        let kinds = [
            OpKind::Index,
            OpKind::Create,
            OpKind::Update,
            OpKind::Delete,
        ]
        .map(kind);
        match kinds {
            [Some(i), Some(c), Some(u), Some(d)] => Filtering::Items {
                kinds: [i, c, u, d],
                took: scalar(&["took"]),
                errors: scalar(&["errors"]),
                items_always: scalar(&["items"]),
            },
            _ => Filtering::Whole(filter),
        }
    }

    fn fields(&self, kind: OpKind) -> Option<&ItemFields> {
        match self {
            Filtering::Items { kinds, .. } => Some(&kinds[kind as usize]),
            _ => None,
        }
    }
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
    let url_source = (req.param("_source").is_some() || req.param("_source_includes").is_some())
        .then(|| {
            SourceFilter::default().with_params(
                req.param("_source"),
                req.param("_source_includes"),
                req.param("_source_excludes"),
            )
        });
    let filtering = Filtering::of(req.param("filter_path").map(FilterPath::parse));
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
            let fields = filtering.fields(kind);
            let mut item = Vec::with_capacity(256);
            item.extend_from_slice(b"{\"");
            item.extend_from_slice(kind.name().as_bytes());
            item.extend_from_slice(b"\":");
            let written = match res {
                Ok(ok) => {
                    if touched.last() != Some(&ok.index) && !touched.contains(&ok.index) {
                        touched.push(ok.index.clone());
                    }
                    let get = fetch.and_then(|f| {
                        let doc = store.indices.get(&ok.index)?.docs.get(ok.id.as_str())?.latest.clone()?;
                        Some(json!({"_seq_no": doc.seq_no, "_primary_term": 1, "found": true, "_source": f.apply(&doc.source)?}))
                    });
                    let forced = forced && ok.result != "noop";
                    match fields {
                        Some(fields) => ok.write_picked(&mut item, forced, get.as_ref(), fields),
                        None => {
                            ok.write_item(&mut item, forced, get.as_ref());
                            true
                        }
                    }
                }
                Err(e) => {
                    errors = true;
                    let mut answer = error_item(&e.index, &e.id, &e.error);
                    if let Some(fields) = fields {
                        answer.retain(|field, _| fields.keeps(field));
                    }
                    let _ = serde_json::to_writer(&mut item, &answer);
                    !answer.is_empty()
                }
            };
            if written {
                item.push(b'}');
                items.push(item);
            }
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
    let (with_took, with_errors, with_items) = match &filtering {
        Filtering::Items {
            took,
            errors,
            items_always,
            ..
        } => (*took, *errors, *items_always || !items.is_empty()),
        _ => (true, true, true),
    };
    let mut heads = Vec::new();
    if with_errors {
        heads.push(format!("\"errors\":{errors}"));
    }
    if with_took {
        heads.push(format!("\"took\":{took}"));
    }
    if with_items {
        heads.push("\"items\":[".to_owned());
    }
    let mut body = Vec::with_capacity(items.iter().map(Vec::len).sum::<usize>() + items.len() + 64);
    body.push(b'{');
    body.extend_from_slice(heads.join(",").as_bytes());
    if with_items {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.push(b']');
    }
    body.push(b'}');
    if let Filtering::Whole(filter) = &filtering {
        body = filter.apply_to_body(body);
    }
    Ok(Reply {
        status: 200,
        body,
        json: true,
        close: false,
    })
}
