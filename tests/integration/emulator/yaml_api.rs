//! The REST API table of the YAML runner: `do:` API name → HTTP method and path, following
//! the vendored `rest-api-spec/api/*.json` (and, for the specs not vendored, the ES docs).

use serde_json::{Map, Value};

/// (name, methods, path templates) — templates with more parts are preferred when all
/// their parts are given.
const APIS: &[(&str, &[&str], &[&str])] = &[
    ("info", &["GET"], &["/"]),
    (
        "cluster.health",
        &["GET"],
        &["/_cluster/health/{index}", "/_cluster/health"],
    ),
    ("bulk", &["POST", "PUT"], &["/{index}/_bulk", "/_bulk"]),
    ("count", &["POST", "GET"], &["/{index}/_count", "/_count"]),
    (
        "search",
        &["POST", "GET"],
        &["/{index}/_search", "/_search"],
    ),
    (
        "index",
        &["PUT", "POST"],
        &["/{index}/_doc/{id}", "/{index}/_doc"],
    ),
    ("create", &["PUT", "POST"], &["/{index}/_create/{id}"]),
    ("get", &["GET"], &["/{index}/_doc/{id}"]),
    ("delete", &["DELETE"], &["/{index}/_doc/{id}"]),
    ("update", &["POST"], &["/{index}/_update/{id}"]),
    ("indices.create", &["PUT"], &["/{index}"]),
    ("indices.delete", &["DELETE"], &["/{index}"]),
    ("indices.exists", &["HEAD"], &["/{index}"]),
    ("indices.get", &["GET"], &["/{index}"]),
    (
        "indices.get_mapping",
        &["GET"],
        &["/{index}/_mapping", "/_mapping"],
    ),
    (
        "indices.get_settings",
        &["GET"],
        &["/{index}/_settings", "/_settings"],
    ),
    (
        "indices.refresh",
        &["POST", "GET"],
        &["/{index}/_refresh", "/_refresh"],
    ),
    (
        "indices.put_index_template",
        &["PUT", "POST"],
        &["/_index_template/{name}"],
    ),
    (
        "indices.get_index_template",
        &["GET"],
        &["/_index_template/{name}", "/_index_template"],
    ),
    (
        "indices.delete_index_template",
        &["DELETE"],
        &["/_index_template/{name}"],
    ),
    (
        "indices.analyze",
        &["POST", "GET"],
        &["/{index}/_analyze", "/_analyze"],
    ),
    ("indices.update_aliases", &["POST"], &["/_aliases"]),
    (
        "indices.put_alias",
        &["PUT", "POST"],
        &["/{index}/_alias/{name}"],
    ),
    (
        "indices.get_alias",
        &["GET"],
        &[
            "/{index}/_alias/{name}",
            "/_alias/{name}",
            "/{index}/_alias",
            "/_alias",
        ],
    ),
    (
        "indices.exists_alias",
        &["HEAD"],
        &["/{index}/_alias/{name}", "/_alias/{name}"],
    ),
    (
        "put_script",
        &["PUT", "POST"],
        &["/_scripts/{id}/{context}", "/_scripts/{id}"],
    ),
    ("get_script", &["GET"], &["/_scripts/{id}"]),
    ("delete_script", &["DELETE"], &["/_scripts/{id}"]),
];

/// A resolved request.
pub struct Call {
    pub method: String,
    pub path_and_query: String,
    /// Statuses the step tolerates (`ignore: 404`).
    pub ignore: Vec<u16>,
}

pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~,*".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn param_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => Some(
            a.iter()
                .filter_map(param_text)
                .collect::<Vec<_>>()
                .join(","),
        ),
        other => Some(other.to_string()),
    }
}

/// Builds the call for `api` with `args` (params and path parts; `body` excluded).
pub fn resolve(api: &str, args: &Map<String, Value>, has_body: bool) -> Result<Call, String> {
    let (_, methods, templates) = APIS
        .iter()
        .find(|(n, _, _)| *n == api)
        .ok_or_else(|| format!("API [{api}] not in the runner's table"))?;
    let given = |part: &str| {
        args.get(part)
            .and_then(param_text)
            .filter(|s| !s.is_empty())
    };
    let template = templates
        .iter()
        .find(|t| {
            t.split('/')
                .filter(|s| s.starts_with('{'))
                .all(|p| given(p.trim_matches(|c| c == '{' || c == '}')).is_some())
        })
        .ok_or_else(|| format!("no path of [{api}] fits the given parts"))?;
    let mut used = Vec::new();
    let path: Vec<String> = template
        .split('/')
        .map(
            |seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(part) => {
                    used.push(part.to_owned());
                    given(part).map(|v| encode(&v)).unwrap_or_default()
                }
                None => seg.to_owned(),
            },
        )
        .collect();
    let mut path = path.join("/");
    if path.is_empty() {
        path = "/".into();
    }
    // A path part given empty (`index: []`) selects the shorter path; it is no parameter.
    let is_part = |k: &str| templates.iter().any(|t| t.contains(&format!("{{{k}}}")));
    let mut ignore = Vec::new();
    let mut query = Vec::new();
    for (k, v) in args {
        if used.contains(k) || k == "body" || is_part(k) {
            continue;
        }
        if k == "ignore" {
            match v {
                Value::Array(a) => {
                    ignore.extend(a.iter().filter_map(Value::as_u64).map(|n| n as u16))
                }
                other => ignore.extend(other.as_u64().map(|n| n as u16)),
            }
            continue;
        }
        if let Some(text) = param_text(v) {
            query.push(format!("{}={}", encode(k), encode(&text)));
        }
    }
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    let method = if has_body {
        methods.iter().find(|m| **m != "GET").unwrap_or(&methods[0])
    } else {
        &methods[0]
    };
    Ok(Call {
        method: (*method).to_owned(),
        path_and_query: path,
        ignore,
    })
}
