//! Postings: an inverted index of `keyword` values over the *searchable* documents of an
//! index, so `term`/`terms` filters (and `bool` clauses that must hold) find their candidate
//! documents without scanning the whole index. A field gets postings the first time a term
//! query uses it (one scan); from then on each refresh keeps them current. Fields never
//! queried by term cost nothing at ingest.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::extract::FieldRef;
use crate::extract::{source_values, to_key};
use crate::index_view::IndexView;
use crate::mapping::{Field, Mapping, Ty};
use crate::query_exec::Compiled;
use crate::store::DocVersion;
use crate::values::Key;

/// field name (as queried, e.g. `name.keyword`) → value → ids.
pub type Postings = HashMap<String, HashMap<String, HashSet<Arc<str>>>>;

fn walk(props: &BTreeMap<String, Field>, prefix: &str, out: &mut Vec<(String, FieldRef)>) {
    for (name, f) in props {
        let full = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        if f.ty == Ty::Keyword {
            out.push((
                full.clone(),
                FieldRef {
                    path: full.clone(),
                    ty: Ty::Keyword,
                    ignore_above: f.ignore_above,
                },
            ));
        }
        for (sub, sf) in &f.fields {
            if sf.ty == Ty::Keyword {
                out.push((
                    format!("{full}.{sub}"),
                    FieldRef {
                        path: full.clone(),
                        ty: Ty::Keyword,
                        ignore_above: sf.ignore_above,
                    },
                ));
            }
        }
        walk(&f.props, &full, out);
    }
}

/// Every keyword field of a mapping, multi-fields included.
pub fn keyword_fields(m: &Mapping) -> Vec<(String, FieldRef)> {
    let mut out = Vec::new();
    walk(&m.props, "", &mut out);
    out
}

/// The keyword terms of a document for one field, borrowed from `_source` where possible.
fn values<'v>(f: &FieldRef, src: &'v Value) -> Vec<Cow<'v, str>> {
    let mut raw = Vec::new();
    source_values(src, &f.path, &mut raw);
    let mut out: Vec<Cow<'v, str>> = raw
        .into_iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(Cow::Borrowed(s.as_str())),
            Value::Number(n) => Some(Cow::Owned(n.to_string())),
            Value::Bool(b) => Some(Cow::Owned(b.to_string())),
            _ => None,
        })
        .filter(|s| {
            f.ignore_above
                .map_or(true, |limit| s.chars().count() <= limit)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Moves `id` from the terms of `old` to the terms of `new`.
pub fn update(
    p: &mut Postings,
    fields: &[(String, FieldRef)],
    id: &Arc<str>,
    old: Option<&DocVersion>,
    new: Option<&DocVersion>,
) {
    for (name, f) in fields {
        let before = old.map(|d| values(f, &d.source)).unwrap_or_default();
        let after = new.map(|d| values(f, &d.source)).unwrap_or_default();
        if before == after {
            continue;
        }
        if !p.contains_key(name) {
            p.insert(name.clone(), HashMap::new());
        }
        let Some(terms) = p.get_mut(name) else {
            continue;
        };
        for v in before.iter().filter(|v| !after.contains(v)) {
            if let Some(ids) = terms.get_mut(v.as_ref()) {
                ids.remove(id);
                if ids.is_empty() {
                    terms.remove(v.as_ref());
                }
            }
        }
        for v in after.iter().filter(|v| !before.contains(v)) {
            match terms.get_mut(v.as_ref()) {
                Some(ids) => {
                    ids.insert(id.clone());
                }
                None => {
                    terms.insert(v.to_string(), HashSet::from([id.clone()]));
                }
            }
        }
    }
}

/// Ids that can match `c` (a superset of the matches), or `None` when every document must
/// be checked.
pub fn candidates<'a>(c: &Compiled, idx: &IndexView<'a>) -> Option<HashSet<&'a str>> {
    match c {
        Compiled::Nothing => Some(HashSet::new()),
        Compiled::Ids(ids) => Some(
            ids.iter()
                .filter_map(|i| idx.docs.get_key_value(i.as_str()).map(|(k, _)| k.as_ref()))
                .collect(),
        ),
        Compiled::Keys {
            name,
            field,
            keys,
            cidrs,
        } if field.ty == Ty::Keyword && cidrs.is_empty() => {
            let terms = idx.postings.get(name)?;
            let mut out = HashSet::new();
            for k in keys {
                let key =
                    match k {
                        Key::Str(s) => s.clone(),
                        other => to_key(Ty::Keyword, &other.to_json())
                            .ok()
                            .flatten()
                            .map(|k| match k {
                                Key::Str(s) => s,
                                _ => String::new(),
                            })?,
                    };
                if let Some(ids) = terms.get(&key) {
                    out.extend(ids.iter().map(|i| i.as_ref()));
                }
            }
            Some(out)
        }
        Compiled::Bool { must, filter, .. } => {
            let mut acc: Option<HashSet<&'a str>> = None;
            for clause in must.iter().chain(filter.iter()) {
                if let Some(set) = candidates(clause, idx) {
                    acc = Some(match acc {
                        None => set,
                        Some(prev) => prev.intersection(&set).copied().collect(),
                    });
                }
            }
            acc
        }
        _ => None,
    }
}

/// Keyword fields whose postings `candidates` would consult for `c`.
pub fn wanted(c: &Compiled, out: &mut Vec<String>) {
    match c {
        Compiled::Keys {
            name, field, cidrs, ..
        } if field.ty == Ty::Keyword && cidrs.is_empty() => out.push(name.clone()),
        Compiled::Bool { must, filter, .. } => must
            .iter()
            .chain(filter.iter())
            .for_each(|x| wanted(x, out)),
        _ => {}
    }
}

/// Builds postings for `name` over the searchable documents, if it has none yet.
pub fn ensure(idx: &mut crate::store::Index, name: &str) {
    if idx.postings.contains_key(name) {
        return;
    }
    let Some((_, field)) = keyword_fields(&idx.mapping)
        .into_iter()
        .find(|(n, _)| n == name)
    else {
        return;
    };
    let mut terms: HashMap<String, HashSet<Arc<str>>> = HashMap::new();
    for (id, slot) in &idx.docs {
        let Some(doc) = &slot.visible else { continue };
        for v in values(&field, &doc.source) {
            match terms.get_mut(v.as_ref()) {
                Some(ids) => {
                    ids.insert(id.clone());
                }
                None => {
                    terms.insert(v.to_string(), HashSet::from([id.clone()]));
                }
            }
        }
    }
    idx.postings.insert(name.to_owned(), terms);
}

/// The score of every candidate when the candidates are exactly the matches (keyword
/// terms, and `bool`s made only of such clauses in `must`/`filter`); `None` otherwise.
pub fn exact_score(c: &Compiled) -> Option<f32> {
    match c {
        Compiled::Nothing => Some(0.0),
        Compiled::Keys { field, cidrs, .. } if field.ty == Ty::Keyword && cidrs.is_empty() => {
            Some(1.0)
        }
        Compiled::Bool {
            must,
            filter,
            should,
            must_not,
            ..
        } if should.is_empty()
            && must_not.is_empty()
            && !(must.is_empty() && filter.is_empty()) =>
        {
            let mut total = 0.0;
            for m in must {
                total += exact_score(m)?;
            }
            for f in filter {
                exact_score(f)?;
            }
            Some(total)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{parse, Query};
    use crate::query_exec::compile;
    use crate::store::Store;
    use serde_json::json;

    fn compiled(q: Value, m: &Mapping) -> Compiled {
        let q = parse(&q).unwrap_or(Query::MatchNone);
        compile(&q, m).unwrap_or(Compiled::Nothing)
    }

    fn sorted(set: Option<HashSet<&str>>) -> Vec<String> {
        let mut v: Vec<String> = set
            .unwrap_or_default()
            .into_iter()
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn postings_are_built_on_first_use_and_kept_by_refresh() {
        let mut store = Store::default();
        let body =
            json!({"mappings": {"properties": {"e": {"type": "keyword"}, "t": {"type": "text"}}}});
        let Ok(idx) = store.create_index("p", Some(&body)) else {
            panic!("index")
        };
        for i in 0..10 {
            let src = json!({"e": format!("e{}", i % 3), "t": "x"});
            assert!(idx.mapping.index_doc("1", &src).is_ok());
            idx.put(&i.to_string(), Some(src), 1, None);
        }
        idx.refresh();
        let term = compiled(json!({"term": {"e": "e1"}}), &idx.mapping);
        assert!(
            candidates(&term, &IndexView::of(idx)).is_none(),
            "no postings before first use"
        );
        let mut fields = Vec::new();
        wanted(&term, &mut fields);
        assert_eq!(fields, vec!["e".to_owned()]);
        ensure(idx, "e");
        assert_eq!(
            sorted(candidates(&term, &IndexView::of(idx))),
            ["1", "4", "7"]
        );
        // Later refreshes keep them current; unrefreshed writes are not visible.
        idx.put("10", Some(json!({"e": "e1"})), 1, None);
        idx.put("4", None, 2, None);
        assert_eq!(
            sorted(candidates(&term, &IndexView::of(idx))),
            ["1", "4", "7"]
        );
        idx.refresh();
        assert_eq!(
            sorted(candidates(&term, &IndexView::of(idx))),
            ["1", "10", "7"]
        );
        let b = compiled(
            json!({"bool": {"filter": [{"term": {"e": "e1"}}], "should": [{"match": {"t": "x"}}]}}),
            &idx.mapping,
        );
        assert_eq!(
            candidates(&b, &IndexView::of(idx)).map(|s| s.len()),
            Some(3)
        );
        assert_eq!(
            exact_score(&b),
            None,
            "a should clause needs a per-document check"
        );
        let m = compiled(json!({"match": {"t": "x"}}), &idx.mapping);
        assert!(candidates(&m, &IndexView::of(idx)).is_none());
    }
}
