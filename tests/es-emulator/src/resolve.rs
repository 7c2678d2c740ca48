//! Index expressions: comma lists, wildcards, exclusions, `_all`, aliases, the
//! `ignore_unavailable` / `allow_no_indices` options, and write-alias resolution.

use std::collections::BTreeSet;

use crate::error::EsError;
use crate::http::Req;
use crate::store::{glob_match, Store};

#[derive(Debug, Clone, Copy)]
pub struct IndicesOptions {
    pub ignore_unavailable: bool,
    pub allow_no_indices: bool,
}

impl IndicesOptions {
    pub fn from_req(req: &Req) -> Result<IndicesOptions, EsError> {
        IndicesOptions::from_req_or(req, true)
    }

    /// As [`IndicesOptions::from_req`], for an API whose `allow_no_indices` defaults to
    /// `allow_no_indices` (false for `PUT _mapping`).
    pub fn from_req_or(req: &Req, allow_no_indices: bool) -> Result<IndicesOptions, EsError> {
        Ok(IndicesOptions {
            ignore_unavailable: req.flag("ignore_unavailable")?.unwrap_or(false),
            allow_no_indices: req.flag("allow_no_indices")?.unwrap_or(allow_no_indices),
        })
    }
}

/// Resolves a read target to concrete index names (sorted, deduplicated).
pub fn resolve_read(
    store: &Store,
    expr: &str,
    opts: IndicesOptions,
) -> Result<Vec<String>, EsError> {
    let mut out = BTreeSet::new();
    let parts: Vec<&str> = expr
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let all = parts.is_empty() || parts == ["_all"];
    if all {
        out.extend(store.indices.keys().cloned());
    }
    for part in if all { Vec::new() } else { parts } {
        if let Some(excl) = part.strip_prefix('-') {
            out.retain(|name| !glob_match(excl, name));
            continue;
        }
        if part.contains('*') || part == "_all" {
            let pattern = if part == "_all" { "*" } else { part };
            let before = out.len();
            for (name, idx) in &store.indices {
                if glob_match(pattern, name) || idx.aliases.keys().any(|a| glob_match(pattern, a)) {
                    out.insert(name.clone());
                }
            }
            if out.len() == before && !opts.allow_no_indices {
                return Err(EsError::index_not_found(part));
            }
            continue;
        }
        if store.indices.contains_key(part) {
            out.insert(part.to_owned());
            continue;
        }
        let aliased: Vec<String> = store
            .indices
            .values()
            .filter(|i| i.aliases.contains_key(part))
            .map(|i| i.name.clone())
            .collect();
        if !aliased.is_empty() {
            out.extend(aliased);
        } else if !opts.ignore_unavailable {
            return Err(EsError::index_not_found(part));
        }
    }
    if out.is_empty() && !opts.allow_no_indices {
        return Err(EsError::index_not_found(if expr.is_empty() {
            "_all"
        } else {
            expr
        }));
    }
    Ok(out.into_iter().collect())
}

/// Where a write to `name` goes.
pub enum WriteTarget {
    Index(String),
    /// No index or alias of that name: auto-create it.
    Missing,
}

pub fn resolve_write(
    store: &Store,
    name: &str,
    require_alias: bool,
) -> Result<WriteTarget, EsError> {
    if store.indices.contains_key(name) {
        if require_alias {
            return Err(EsError::new(404, "index_not_found_exception", format!("no such index [{name}] and [require_alias] request flag is [true] and [{name}] is not an alias"))
                .on_index(name, "_na_"));
        }
        return Ok(WriteTarget::Index(name.to_owned()));
    }
    let members: Vec<(&String, Option<bool>)> = store
        .indices
        .values()
        .filter_map(|i| i.aliases.get(name).map(|a| (&i.name, a.is_write_index)))
        .collect();
    if members.is_empty() {
        if require_alias {
            return Err(EsError::new(404, "index_not_found_exception", format!("no such index [{name}] and [require_alias] request flag is [true] and [{name}] is not an alias"))
                .on_index(name, "_na_"));
        }
        return Ok(WriteTarget::Missing);
    }
    if let Some((idx, _)) = members.iter().find(|(_, w)| *w == Some(true)) {
        return Ok(WriteTarget::Index((*idx).clone()));
    }
    if members.len() == 1 && members[0].1 != Some(false) {
        return Ok(WriteTarget::Index(members[0].0.clone()));
    }
    Err(EsError::bad_request(format!(
        "no write index is defined for alias [{name}]. The write index may be explicitly disabled using is_write_index=false or the alias points to multiple indices without one being designated as a write index"
    )))
}

/// The routing of a write to `name` that went to `index`: an alias's `index_routing` is
/// used, and a different routing given with the write is refused, as Elasticsearch does.
pub fn write_routing(
    store: &Store,
    name: &str,
    index: &str,
    routing: Option<String>,
) -> Result<Option<String>, EsError> {
    let alias = store
        .indices
        .get(index)
        .and_then(|i| i.aliases.get(name))
        .and_then(|a| a.extra.get("index_routing"))
        .map(|r| match r {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    match (alias, routing) {
        (Some(a), Some(r)) if a != r => Err(EsError::bad_request(format!(
            "Alias [{name}] has index routing associated with it [{a}], and was provided with routing value [{r}], rejecting operation"
        ))),
        (Some(a), _) => Ok(Some(a)),
        (None, r) => Ok(r),
    }
}

/// Refuses an index delete (`DELETE /{index}`, `remove_index`) naming an alias: Elasticsearch
/// deletes indices by their own names only.
pub fn refuse_alias_delete<'a>(
    store: &Store,
    mut names: impl Iterator<Item = &'a str>,
) -> Result<(), EsError> {
    match names.find(|n| !n.contains('*') && !store.indices.contains_key(*n) && store.alias_exists(n)) {
        None => Ok(()),
        Some(a) => Err(EsError::bad_request(format!(
            "The provided expression [{a}] matches an alias, specify the corresponding concrete indices instead."
        ))),
    }
}
