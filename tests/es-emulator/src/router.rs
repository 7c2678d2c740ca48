//! Maps method + path to a handler. Transport-free: `route(&App, &Req)` needs no socket.

use serde_json::json;

use crate::app::App;
use crate::docs::OpKind;
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::{aliases, analysis, bulk, cluster, doc_api, faults, indices, search};

pub fn route(app: &App, req: &Req) -> HandlerResult {
    let segs: Vec<&str> = req.segments.iter().map(String::as_str).collect();
    let m = req.method.as_str();
    let read = matches!(m, "GET" | "POST");
    let write = matches!(m, "PUT" | "POST");
    match (m, segs.as_slice()) {
        (_, ["_emulator", ..]) => faults::control(app, req),
        ("GET" | "HEAD", []) => cluster::info(),
        ("PUT", ["_cluster", "settings"]) => cluster::put_settings(app, req),
        ("GET", ["_cluster", "settings"]) => cluster::get_settings(app),
        ("GET", ["_cluster", "health"]) | ("GET", ["_cluster", "health", _]) => {
            cluster::health(app)
        }
        (_, ["_bulk"]) if write => bulk::handle(app, req, None),
        (_, [i, "_bulk"]) if write => bulk::handle(app, req, Some(i)),
        (_, ["_refresh"]) if read => indices::refresh(app, req, ""),
        (_, [i, "_refresh"]) if read => indices::refresh(app, req, i),
        (_, ["_count"]) if read => search::count(app, req, ""),
        (_, [i, "_count"]) if read => search::count(app, req, i),
        (_, ["_analyze"]) if read => analysis::analyze(app, req, None),
        (_, [i, "_analyze"]) if read => analysis::analyze(app, req, Some(i)),
        (_, ["_search"]) if read => search::search(app, req, ""),
        (_, [i, "_search"]) if read => search::search(app, req, i),
        ("GET", ["_index_template"]) => indices::get_template(app, None),
        ("GET", ["_index_template", n]) => indices::get_template(app, Some(n)),
        ("HEAD", ["_index_template", n]) => Ok(Reply::empty(
            indices::get_template(app, Some(n)).map_or(404, |_| 200),
        )),
        (_, ["_index_template", n]) if write => indices::put_template(app, req, n),
        ("DELETE", ["_index_template", n]) => indices::delete_template(app, n),
        ("POST", ["_aliases"]) => aliases::update(app, req),
        ("GET" | "HEAD", ["_alias"]) => aliases::get(app, req, None, None),
        ("GET" | "HEAD", ["_alias", n]) => aliases::get(app, req, None, Some(n)),
        ("GET" | "HEAD", [i, "_alias"]) => aliases::get(app, req, Some(i), None),
        ("GET" | "HEAD", [i, "_alias", n]) => aliases::get(app, req, Some(i), Some(n)),
        (_, [i, "_alias" | "_aliases", n]) if write => aliases::put(app, req, i, n),
        (_, ["_scripts", id]) if write => indices::put_script(app, req, id, None),
        (_, ["_scripts", id, context]) if write => indices::put_script(app, req, id, Some(context)),
        ("GET", ["_scripts", id]) => indices::get_script(app, id),
        ("DELETE", ["_scripts", id]) => indices::delete_script(app, id),
        (_, [i, "_doc", id]) if write => doc_api::write(app, req, OpKind::Index, i, Some(id)),
        ("POST", [i, "_doc"]) => doc_api::write(app, req, OpKind::Index, i, None),
        (_, [i, "_create", id]) if write => doc_api::write(app, req, OpKind::Create, i, Some(id)),
        ("POST", [i, "_update", id]) => doc_api::write(app, req, OpKind::Update, i, Some(id)),
        ("DELETE", [i, "_doc", id]) => doc_api::write(app, req, OpKind::Delete, i, Some(id)),
        ("GET", [i, "_doc", id]) => doc_api::get(app, req, i, id, false),
        ("HEAD", [i, "_doc", id]) => Ok(Reply::empty(
            doc_api::get(app, req, i, id, false).map_or(404, |r| r.status),
        )),
        ("GET", [i, "_source", id]) => doc_api::get(app, req, i, id, true),
        ("GET", [i, what @ ("_mapping" | "_settings")]) => indices::get(app, req, i, Some(what)),
        ("PUT" | "POST", [i, "_mapping"]) => indices::put_mapping(app, req, i),
        ("PUT", [i]) => indices::create(app, req, i),
        ("DELETE", [i]) => indices::delete(app, req, i),
        ("HEAD", [i]) => indices::exists(app, req, i),
        ("GET", [i]) => indices::get(app, req, i, None),
        _ => Ok(Reply::json(
            400,
            &json!({"error": format!("no handler found for uri [{}] and method [{}]", req.path, req.method), "status": 400}),
        )),
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
