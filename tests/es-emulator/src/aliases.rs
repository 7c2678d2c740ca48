//! Aliases: atomic `POST /_aliases` (add / remove with `must_exist` / remove_index),
//! `PUT /{index}/_alias/{name}`, and `GET|HEAD /_alias/{name}`.

use serde_json::{json, Map, Value};

use crate::app::App;
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::resolve::{resolve_read, IndicesOptions};
use crate::store::{glob_match, parse_alias_meta, AliasMeta, Store};

enum Action {
    Add {
        indices: Vec<String>,
        alias: String,
        meta: AliasMeta,
    },
    Remove {
        indices: Vec<String>,
        aliases: Vec<String>,
    },
    RemoveIndex {
        indices: Vec<String>,
    },
}

fn names(obj: &Map<String, Value>, one: &str, many: &str) -> Result<Vec<String>, EsError> {
    let mut out = Vec::new();
    if let Some(v) = obj.get(one).and_then(Value::as_str) {
        out.push(v.to_owned());
    }
    match obj.get(many) {
        Some(Value::Array(a)) if a.is_empty() => {
            return Err(EsError::bad_request(format!("[{many}] can't be empty")))
        }
        Some(Value::Array(a)) => out.extend(a.iter().filter_map(|v| v.as_str().map(str::to_owned))),
        Some(Value::String(s)) => out.push(s.clone()),
        _ => {}
    }
    Ok(out)
}

const STRICT: IndicesOptions = IndicesOptions {
    ignore_unavailable: false,
    allow_no_indices: false,
};

fn plan(store: &Store, actions: &[Value]) -> Result<Vec<Action>, EsError> {
    let mut out = Vec::new();
    for a in actions {
        let Some((kind, body)) = a.as_object().and_then(|o| o.iter().next()) else {
            return Err(EsError::parsing(
                "[aliases] action must be an object with one key",
            ));
        };
        let Some(body) = body.as_object() else {
            return Err(EsError::parsing("alias action body must be an object"));
        };
        let index_exprs = names(body, "index", "indices")?;
        if index_exprs.is_empty() {
            return Err(EsError::new(
                400,
                "action_request_validation_exception",
                "Validation Failed: 1: One of [index] or [indices] is required;",
            ));
        }
        let mut indices = Vec::new();
        for e in &index_exprs {
            indices.extend(resolve_read(store, e, STRICT)?);
        }
        match kind.as_str() {
            "add" => {
                if body.contains_key("must_exist") {
                    return Err(EsError::bad_request(
                        "[must_exist] is unsupported for [add]",
                    ));
                }
                for alias in names(body, "alias", "aliases")? {
                    if store.indices.contains_key(&alias) {
                        return Err(EsError::new(400, "invalid_alias_name_exception", format!("Invalid alias name [{alias}]: an index or data stream exists with the same name as the alias")));
                    }
                    let mut meta = parse_alias_meta(&Value::Object(body.clone()));
                    for k in ["index", "indices", "alias", "aliases"] {
                        meta.extra.remove(k);
                    }
                    out.push(Action::Add {
                        indices: indices.clone(),
                        alias,
                        meta,
                    });
                }
            }
            "remove" => {
                let wanted = names(body, "alias", "aliases")?;
                let must_exist = body.get("must_exist").and_then(Value::as_bool);
                let mut found = Vec::new();
                for pattern in &wanted {
                    for i in &indices {
                        if let Some(idx) = store.indices.get(i) {
                            found.extend(
                                idx.aliases
                                    .keys()
                                    .filter(|a| glob_match(pattern, a))
                                    .cloned(),
                            );
                        }
                    }
                }
                if found.is_empty() && must_exist != Some(false) {
                    let list = wanted.join(",");
                    return Err(EsError::new(
                        404,
                        "aliases_not_found_exception",
                        format!("aliases [{list}] missing"),
                    )
                    .with("resource.type", "aliases")
                    .with("resource.id", list));
                }
                out.push(Action::Remove {
                    indices,
                    aliases: wanted,
                });
            }
            "remove_index" => {
                // Deleting an index takes its name, never an alias, as a DELETE does.
                crate::resolve::refuse_alias_delete(store, index_exprs.iter().map(String::as_str))?;
                out.push(Action::RemoveIndex { indices })
            }
            other => return Err(EsError::parsing(format!("Unknown alias action [{other}]"))),
        }
    }
    Ok(out)
}

pub fn update(app: &App, req: &Req) -> HandlerResult {
    let body = req.json_body()?.unwrap_or(json!({}));
    let Some(actions) = body.get("actions").and_then(Value::as_array) else {
        return Err(EsError::new(
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: No action specified;",
        ));
    };
    let mut store = app.lock_store();
    // Validate everything first, then apply: the change is atomic.
    for action in plan(&store, actions)? {
        match action {
            Action::Add {
                indices,
                alias,
                meta,
            } => {
                for i in indices {
                    if let Some(idx) = store.indices.get_mut(&i) {
                        idx.aliases.insert(alias.clone(), meta.clone());
                    }
                }
            }
            Action::Remove { indices, aliases } => {
                for i in indices {
                    if let Some(idx) = store.indices.get_mut(&i) {
                        idx.aliases
                            .retain(|a, _| !aliases.iter().any(|p| glob_match(p, a)));
                    }
                }
            }
            Action::RemoveIndex { indices } => {
                for i in indices {
                    store.indices.remove(&i);
                }
            }
        }
    }
    Ok(Reply::ok(&json!({"acknowledged": true})))
}

pub fn put(app: &App, req: &Req, index: &str, alias: &str) -> HandlerResult {
    let body = req.json_body()?.unwrap_or(json!({}));
    let mut action = body.as_object().cloned().unwrap_or_default();
    action.insert("index".into(), json!(index));
    action.insert("alias".into(), json!(alias));
    let fake = Req {
        body: serde_json::to_vec(&json!({"actions": [{"add": action}]})).unwrap_or_default(),
        ..req.clone()
    };
    update(app, &fake)
}

/// Whether alias names `patterns` select `alias`, read in order as Elasticsearch reads
/// them: `_all` and `*` select every alias, `-name` after a wildcard removes what it
/// matches (before any wildcard it is a plain name).
fn selects(patterns: &[&str], alias: &str) -> bool {
    let mut selected = false;
    let mut wildcard = false;
    for p in patterns {
        match p.strip_prefix('-').filter(|_| wildcard) {
            Some(excluded) => selected &= !glob_match(excluded, alias),
            None => {
                let all = *p == "_all";
                wildcard |= all || p.contains('*');
                selected |= all || glob_match(p, alias);
            }
        }
    }
    selected
}

/// The plain alias names among `patterns`: those a reply must find or call missing.
fn names_asked<'a>(patterns: &'a [&'a str]) -> impl Iterator<Item = &'a str> + 'a {
    patterns.iter().enumerate().filter_map(move |(i, p)| {
        let excluded = p.starts_with('-')
            && patterns[..i]
                .iter()
                .any(|q| *q == "_all" || q.contains('*'));
        (*p != "_all" && !p.contains('*') && !excluded).then_some(*p)
    })
}

/// `GET|HEAD /_alias/{name}` and `/{index}/_alias/{name}`.
pub fn get(app: &App, req: &Req, index: Option<&str>, name: Option<&str>) -> HandlerResult {
    let store = app.lock_store();
    let indices = resolve_read(
        &store,
        index.unwrap_or("_all"),
        IndicesOptions::from_req(req)?,
    )?;
    let patterns: Vec<&str> = name.map(|n| n.split(',').collect()).unwrap_or_default();
    let mut out = Map::new();
    let mut seen = Vec::new();
    for i in indices {
        let Some(idx) = store.indices.get(&i) else {
            continue;
        };
        let mut aliases = Map::new();
        for (a, meta) in &idx.aliases {
            if patterns.is_empty() || selects(&patterns, a) {
                let mut o = meta.extra.clone();
                if let Some(w) = meta.is_write_index {
                    o.insert("is_write_index".into(), json!(w));
                }
                aliases.insert(a.clone(), Value::Object(o));
                seen.push(a.clone());
            }
        }
        if !aliases.is_empty() || name.is_none() {
            out.insert(i, json!({"aliases": aliases}));
        }
    }
    let missing: Vec<&str> = names_asked(&patterns)
        .filter(|p| !seen.iter().any(|s| s == *p))
        .collect();
    if req.method == "HEAD" {
        return Ok(Reply::empty(
            if missing.is_empty() && (name.is_none() || !seen.is_empty()) {
                200
            } else {
                404
            },
        ));
    }
    if !missing.is_empty() {
        let word = if missing.len() == 1 {
            "alias"
        } else {
            "aliases"
        };
        let mut body = Value::Object(out);
        body["error"] = json!(format!("{word} [{}] missing", missing.join(",")));
        body["status"] = json!(404);
        return Ok(Reply::json(404, &body));
    }
    Ok(Reply::ok(&Value::Object(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_and_exclusions_select_as_elasticsearch() {
        assert!(selects(&["_all"], "a"));
        assert!(selects(&["a*", "-ab"], "ac"));
        assert!(!selects(&["a*", "-ab"], "ab"));
        assert!(!selects(&["-ab"], "ab"), "before a wildcard, -ab is a name");
        assert_eq!(
            names_asked(&["_all", "x*", "-xy", "z"]).collect::<Vec<_>>(),
            ["z"]
        );
        assert_eq!(names_asked(&["-q"]).collect::<Vec<_>>(), ["-q"]);
    }
}
