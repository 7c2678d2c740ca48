//! `GET /api/v1/assets` and `GET /api/v1/search`: the current asset projection. An owner
//! reads its own view (`<prefix>-assets-user` filtered on its `owner_id`); an admin may ask
//! for `scope=global` (`<prefix>-assets-global`), anyone else gets 403 for it.
//!
//! Both list in address order, sorted on the document's unique key (ip, port, transport;
//! within one owner's view and in the global view each endpoint is one document), and
//! page with `search_after`; each request fetches one document more than the page to know
//! whether there is a next page. Search adds a text `match` over service, product and
//! banner to the same filters. The first page carries the exact total.

use chrono::SecondsFormat;
use serde_json::{json, Value};

use crate::upload::details::with_detail_fields;

use super::error::ReadError;
use super::{endpoint_json, params, search, with_owner, SEARCH_TIMEOUT};
use crate::app::App;
use crate::es::index;
use crate::es::EsError;
use crate::http::request::{Reply, Req};
use crate::upload::batch::domain;
use crate::upload::details::PortState;

pub const DEFAULT_SIZE: usize = 50;
pub const MAX_SIZE: usize = 200;

const FIELDS: [&str; 23] = with_detail_fields![
    "ip", "port", "transport", "status", "closed_at", "closed_by", "first_seen", "last_seen",
    "state_observed_at", "service", "product", "version", "banner";
    "service_observed_at", "execution_id", "tags"
];

/// Which assets a read lists by status (`status=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Open,
    Closed,
    All,
}

/// `status` and `closed_since`: `open` unless asked otherwise, or unless a `state` or
/// `closed_since` is asked for (they name closed assets themselves). A closed asset is one
/// with a state (open is stored as none); its `state_observed_at` is when it closed, also
/// on documents merged before `closed_at` was stored.
fn status_filters(req: &Req, out: &mut Vec<Value>) -> Result<(), ReadError> {
    let since = match req.query_param("closed_since") {
        Some(s) => Some(params::time("closed_since", s.trim())?),
        None => None,
    };
    let status = match params::text(req, "status")?.as_deref() {
        Some("open") => Status::Open,
        Some("closed") => Status::Closed,
        Some("all") => Status::All,
        Some(other) => {
            return Err(ReadError::invalid(
                "bad_parameter",
                format!("status must be open, closed or all, got {other:?}"),
            ))
        }
        None if since.is_some() => Status::Closed,
        None if req.query_param("state").is_some() => Status::All,
        None => Status::Open,
    };
    if let Some(t) = since {
        if status == Status::Open {
            return Err(ReadError::invalid(
                "bad_parameter",
                "closed_since lists closed assets; it cannot go with status=open",
            ));
        }
        let t = t.to_rfc3339_opts(SecondsFormat::Millis, true);
        out.push(json!({"exists": {"field": "state"}}));
        out.push(json!({"range": {"state_observed_at": {"gte": t}}}));
    }
    match status {
        Status::Open => out.push(json!({"bool": {"must_not": [{"exists": {"field": "state"}}]}})),
        Status::Closed => out.push(json!({"exists": {"field": "state"}})),
        Status::All => {}
    }
    Ok(())
}

/// The filters shared by assets and search, as ES filter clauses.
pub fn filters(req: &Req) -> Result<Vec<Value>, ReadError> {
    let mut out = Vec::new();
    if let Some(ip) = req.query_param("ip") {
        out.push(json!({"term": {"ip": params::ip_or_cidr(ip.trim())?}}));
    }
    if let Some(p) = req.query_param("port") {
        out.push(json!({"term": {"port": params::port(p.trim())?}}));
    }
    if let Some(t) = params::text(req, "transport")? {
        let t = t.to_ascii_lowercase();
        if !matches!(t.as_str(), "tcp" | "udp" | "sctp") {
            return Err(ReadError::invalid(
                "bad_transport",
                "transport must be tcp, udp or sctp",
            ));
        }
        out.push(json!({"term": {"transport": t}}));
    }
    for key in ["service", "product", "version"] {
        if let Some(v) = params::text(req, key)? {
            out.push(json!({"term": {key: v}}));
        }
    }
    if let Some(s) = params::text(req, "state")? {
        out.push(state_filter(&s)?);
    }
    if let Some(c) = params::text(req, "cpe")? {
        // A CPE or the start of one: `cpe:/a:openbsd:openssh` finds every version.
        out.push(json!({"prefix": {"cpe": c.to_ascii_lowercase()}}));
    }
    if let Some(h) = params::text(req, "hostname")? {
        let name = domain(&h).map_err(|m| ReadError::invalid("bad_parameter", m))?;
        out.push(json!({"term": {"hostnames.name": name}}));
    }
    if let Some(t) = params::text(req, "tag")? {
        out.push(json!({"term": {"tags": t}}));
    }
    status_filters(req, &mut out)?;
    if let Some(s) = req.query_param("seen_since") {
        let t = params::time("seen_since", s.trim())?;
        out.push(json!({"range": {"last_seen": {"gte": t.to_rfc3339_opts(SecondsFormat::Millis, true)}}}));
    }
    Ok(out)
}

/// The filter of a port state; open is stored as no state at all.
fn state_filter(s: &str) -> Result<Value, ReadError> {
    match PortState::parse(s) {
        Some(PortState::Open) => {
            Ok(json!({"bool": {"must_not": [{"exists": {"field": "state"}}]}}))
        }
        Some(_) => Ok(json!({"term": {"state": s}})),
        None => Err(ReadError::invalid(
            "bad_parameter",
            format!("state must be {}", PortState::NAMES),
        )),
    }
}

/// `GET /api/v1/assets`
pub fn assets(app: &App, req: &Req) -> Result<Reply, ReadError> {
    run(app, req, None)
}

/// `GET /api/v1/search?q=`
pub fn search_assets(app: &App, req: &Req) -> Result<Reply, ReadError> {
    let q = params::text(req, "q")?
        .ok_or_else(|| ReadError::invalid("bad_parameter", "q (the text to search) is required"))?;
    // Every word of `q` in one field: `openssh ubuntu` finds the banners with both.
    // The `.words` fields hold runs of letters (see `es::setup`), so `openssh` finds
    // `OpenSSH_8.9p1`; the fields themselves keep versions and names whole.
    let all = |field: String| json!({"match": {field: {"query": q, "operator": "and"}}});
    let words = crate::es::setup::WORDS;
    let text = json!({"bool": {"should": [
        {"match": {"service": q}},
        {"match": {"product": q}},
        all("banner".into()),
        all(format!("banner.{words}")),
        all("scripts.output".into()),
        all(format!("scripts.output.{words}")),
    ], "minimum_should_match": 1}});
    run(app, req, Some(text))
}

fn run(app: &App, req: &Req, text: Option<Value>) -> Result<Reply, ReadError> {
    let size = params::size(req, DEFAULT_SIZE, MAX_SIZE)?;
    let global = match req.query_param("scope") {
        None | Some("owner") => false,
        Some("global") => true,
        Some(other) => {
            return Err(ReadError::invalid(
                "bad_scope",
                format!("scope must be owner or global, got {other:?}"),
            ))
        }
    };
    let mut filter = filters(req)?;
    let after = params::cursor(req, if global { "global" } else { "assets" }, 3)?;
    let owner = with_owner(app, req, |_, owner| Ok(owner))?;
    let prefix = &app.config.elasticsearch.index_prefix;
    let idx = if global {
        if !owner.is_admin {
            return Err(ReadError::Forbidden(
                "the global asset view is for admin owners".into(),
            ));
        }
        index::assets_global_alias(prefix)
    } else {
        filter.push(json!({"term": {"owner_id": owner.id.to_string()}}));
        index::assets_user_alias(prefix)
    };
    let mut query = json!({"bool": {"filter": filter}});
    if let Some(t) = text {
        query["bool"]["must"] = json!([t]);
    }
    let first = after.is_none();
    let mut body = json!({
        "size": size + 1, "timeout": SEARCH_TIMEOUT, "track_total_hits": first,
        "_source": FIELDS, "query": query,
        "sort": [{"ip": "asc"}, {"port": "asc"}, {"transport": "asc"}],
    });
    if let Some(a) = after {
        body["search_after"] = Value::Array(a);
    }
    let page = search(app, &idx, &body)?;
    let hits = page["hits"]["hits"]
        .as_array()
        .ok_or_else(|| ReadError::Es(EsError::BadResponse("missing hits".into())))?;
    let more = hits.len() > size;
    let shown = &hits[..hits.len().min(size)];
    let assets: Vec<Value> = shown
        .iter()
        .map(|h| endpoint_json(&h["_source"], &FIELDS))
        .collect();
    let next = match (more, shown.last()) {
        (true, Some(h)) => {
            let sort = h["sort"].as_array().cloned().unwrap_or_default();
            Some(params::encode_cursor(
                if global { "global" } else { "assets" },
                &sort,
            ))
        }
        _ => None,
    };
    let total = if first {
        page["hits"]["total"].clone()
    } else {
        Value::Null
    };
    Ok(Reply::ok(json!({
        "scope": if global { "global" } else { "owner" },
        "assets": assets, "total": total, "next": next,
    })))
}
