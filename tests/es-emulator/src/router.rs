//! Maps method + path to a handler and the URL parameters it implements. Transport-free:
//! `route(&App, &Req)` needs no socket.

use serde_json::json;

use crate::app::App;
use crate::docs::OpKind;
use crate::error::EsError;
use crate::filter_path::FilterPath;
use crate::http::{HandlerResult, Reply, Req};
use crate::{
    aliases, analysis, bulk, cluster, doc_api, faults, indices, params, search, settings_update,
};

// The URL parameters each API implements; any other is refused before its handler runs,
// so a refused request changes nothing.
const NONE: &[&str] = &[];
const TARGETS: &[&str] = &["ignore_unavailable", "allow_no_indices"];
const HEALTH: &[&str] = &["wait_for_status", "timeout"];
const BULK: &[&str] = &[
    "refresh",
    "require_alias",
    "_source",
    "_source_includes",
    "_source_excludes",
];
const SEARCH: &[&str] = &[
    "ignore_unavailable",
    "allow_no_indices",
    "size",
    "from",
    "rest_total_hits_as_int",
    "track_total_hits",
    "_source",
    "_source_includes",
    "_source_excludes",
];
const CREATE_INDEX: &[&str] = &["wait_for_active_shards"];
const PUT_TEMPLATE: &[&str] = &["create"];
const EXISTS: &[&str] = &["allow_no_indices"];
const INDEX_DOC: &[&str] = &[
    "refresh",
    "op_type",
    "version",
    "version_type",
    "if_seq_no",
    "if_primary_term",
    "require_alias",
    "routing",
];
// `retry_on_conflict` is honoured by construction: an update runs under the store lock,
// so it never meets a concurrent write and never needs a retry.
const UPDATE_DOC: &[&str] = &[
    "refresh",
    "if_seq_no",
    "if_primary_term",
    "require_alias",
    "routing",
    "retry_on_conflict",
    "_source",
    "_source_includes",
    "_source_excludes",
];
const DELETE_DOC: &[&str] = &[
    "refresh",
    "version",
    "version_type",
    "if_seq_no",
    "if_primary_term",
    "routing",
];
const GET_DOC: &[&str] = &[
    "realtime",
    "refresh",
    "version",
    "version_type",
    "_source",
    "_source_includes",
    "_source_excludes",
];

type Handler<'a> = Box<dyn FnOnce() -> HandlerResult + 'a>;

fn to<'a>(
    allowed: &'static [&'static str],
    f: impl FnOnce() -> HandlerResult + 'a,
) -> Option<(&'static [&'static str], Handler<'a>)> {
    Some((allowed, Box::new(f)))
}

pub fn route(app: &App, req: &Req) -> HandlerResult {
    if req.segments.first().is_some_and(|s| s == "_emulator") {
        return faults::control(app, req);
    }
    let segs: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let found = dispatch(app, req, &segs);
    match found {
        Some((allowed, handler)) => {
            params::check(req, allowed)?;
            let reply = handler()?;
            // `_bulk` filters its items as it writes them.
            match req.param("filter_path") {
                Some(filter)
                    if reply.json
                        && reply.status < 400
                        && !matches!(segs[..], ["_bulk"] | [_, "_bulk"]) =>
                {
                    let body = FilterPath::parse(filter).apply_to_body(reply.body);
                    Ok(Reply { body, ..reply })
                }
                _ => Ok(reply),
            }
        }
        None => Ok(Reply::json(
            400,
            &json!({"error": format!("no handler found for uri [{}] and method [{}]", req.path, req.method), "status": 400}),
        )),
    }
}

/// The handler for a method and path, with the URL parameters it implements.
fn dispatch<'a>(
    app: &'a App,
    req: &'a Req,
    segs: &'a [&'a str],
) -> Option<(&'static [&'static str], Handler<'a>)> {
    let m = req.method.as_str();
    let read = matches!(m, "GET" | "POST");
    let write = matches!(m, "PUT" | "POST");
    match (m, segs) {
        ("GET" | "HEAD", []) => to(NONE, cluster::info),
        ("PUT", ["_cluster", "settings"]) => to(NONE, || cluster::put_settings(app, req)),
        ("GET", ["_cluster", "settings"]) => to(NONE, || cluster::get_settings(app)),
        ("GET", ["_cluster", "health"]) | ("GET", ["_cluster", "health", _]) => {
            to(HEALTH, || cluster::health(app, req))
        }
        (_, ["_bulk"]) if write => to(BULK, || bulk::handle(app, req, None)),
        (_, [i, "_bulk"]) if write => to(BULK, move || bulk::handle(app, req, Some(i))),
        (_, ["_refresh"]) if read => to(TARGETS, || indices::refresh(app, req, "")),
        (_, [i, "_refresh"]) if read => to(TARGETS, move || indices::refresh(app, req, i)),
        (_, ["_count"]) if read => to(TARGETS, || search::count(app, req, "")),
        (_, [i, "_count"]) if read => to(TARGETS, move || search::count(app, req, i)),
        (_, ["_analyze"]) if read => to(NONE, || analysis::analyze(app, req, None)),
        (_, [i, "_analyze"]) if read => to(NONE, move || analysis::analyze(app, req, Some(i))),
        (_, ["_search"]) if read => to(SEARCH, || search::search(app, req, "")),
        (_, [i, "_search"]) if read => to(SEARCH, move || search::search(app, req, i)),
        ("GET", ["_index_template"]) => to(NONE, || indices::get_template(app, None)),
        ("GET", ["_index_template", n]) => to(NONE, move || indices::get_template(app, Some(n))),
        ("HEAD", ["_index_template", n]) => to(NONE, move || {
            Ok(Reply::empty(
                indices::get_template(app, Some(n)).map_or(404, |_| 200),
            ))
        }),
        (_, ["_index_template", n]) if write => {
            to(PUT_TEMPLATE, move || indices::put_template(app, req, n))
        }
        ("DELETE", ["_index_template", n]) => to(NONE, move || indices::delete_template(app, n)),
        ("POST", ["_aliases"]) => to(NONE, || aliases::update(app, req)),
        ("GET" | "HEAD", ["_alias"]) => to(TARGETS, || aliases::get(app, req, None, None)),
        ("GET" | "HEAD", ["_alias", n]) => {
            to(TARGETS, move || aliases::get(app, req, None, Some(n)))
        }
        ("GET" | "HEAD", [i, "_alias"]) => {
            to(TARGETS, move || aliases::get(app, req, Some(i), None))
        }
        ("GET" | "HEAD", [i, "_alias", n]) => {
            to(TARGETS, move || aliases::get(app, req, Some(i), Some(n)))
        }
        (_, [i, "_alias" | "_aliases", n]) if write => {
            to(NONE, move || aliases::put(app, req, i, n))
        }
        (_, ["_scripts", id]) if write => to(NONE, move || indices::put_script(app, req, id, None)),
        (_, ["_scripts", id, context]) if write => to(NONE, move || {
            indices::put_script(app, req, id, Some(context))
        }),
        ("GET", ["_scripts", id]) => to(NONE, move || indices::get_script(app, id)),
        ("DELETE", ["_scripts", id]) => to(NONE, move || indices::delete_script(app, id)),
        (_, [i, "_doc", id]) if write => to(INDEX_DOC, move || {
            doc_api::write(app, req, OpKind::Index, i, Some(id))
        }),
        ("POST", [i, "_doc"]) => to(INDEX_DOC, move || {
            doc_api::write(app, req, OpKind::Index, i, None)
        }),
        (_, [i, "_create", id]) if write => to(INDEX_DOC, move || {
            doc_api::write(app, req, OpKind::Create, i, Some(id))
        }),
        ("POST", [i, "_update", id]) => to(UPDATE_DOC, move || {
            doc_api::write(app, req, OpKind::Update, i, Some(id))
        }),
        ("DELETE", [i, "_doc", id]) => to(DELETE_DOC, move || {
            doc_api::write(app, req, OpKind::Delete, i, Some(id))
        }),
        ("GET", [i, "_doc", id]) => to(GET_DOC, move || doc_api::get(app, req, i, id, false)),
        ("HEAD", [i, "_doc", id]) => to(GET_DOC, move || {
            Ok(Reply::empty(
                doc_api::get(app, req, i, id, false).map_or(404, |r| r.status),
            ))
        }),
        ("GET", [i, "_source", id]) => to(GET_DOC, move || doc_api::get(app, req, i, id, true)),
        ("GET", [i, what @ ("_mapping" | "_settings")]) => {
            to(TARGETS, move || indices::get(app, req, i, Some(what)))
        }
        ("PUT" | "POST", [i, "_mapping"]) => to(TARGETS, move || indices::put_mapping(app, req, i)),
        ("PUT", ["_settings"]) => to(TARGETS, || settings_update::put(app, req, "_all")),
        ("PUT", [i, "_settings"]) => to(TARGETS, move || settings_update::put(app, req, i)),
        ("PUT", [i]) => to(CREATE_INDEX, move || indices::create(app, req, i)),
        ("DELETE", [i]) => to(TARGETS, move || indices::delete(app, req, i)),
        ("HEAD", [i]) => to(EXISTS, move || indices::exists(app, req, i)),
        ("GET", [i]) => to(TARGETS, move || indices::get(app, req, i, None)),
        _ => None,
    }
}

/// A handler that panicked: reported as ES reports an unexpected exception.
pub fn panic_reply(what: &str) -> Reply {
    Reply::error(&EsError::new(
        500,
        "exception",
        format!("emulator handler panicked: {what}"),
    ))
}
