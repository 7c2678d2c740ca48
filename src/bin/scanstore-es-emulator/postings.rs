//! Postings: an inverted index of `keyword` values over the *searchable* documents of an
//! index, so `term`/`terms` filters (and `bool` clauses that must hold) find their candidate
//! documents without scanning the whole index. Like a real index, every keyword field is
//! indexed at ingest: each refresh adds its documents' terms, so the first term query on a
//! large index costs no more than the next (a lazily built index made the first count of a
//! 100 k-document index take 150 ms, the benchmark's slowest final).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::{FxBuildHasher, FxHashMap};
use serde_json::Value;

use crate::extract::FieldRef;
use crate::extract::{any_value, source_values, to_key};
use crate::index_view::IndexView;
use crate::mapping::{Field, Mapping, Ty};
use crate::query_exec::Compiled;
use crate::store::DocVersion;
use crate::values::Key;

/// field name (as queried, e.g. `name.keyword`) → value → ids.
pub type Postings = HashMap<String, Terms>;

/// value → ids (Fx hashing: refreshes insert every keyword term of every document).
pub type Terms = FxHashMap<String, IdSet>;

/// The hash an [`IdSet`] files an id under.
pub fn id_hash(id: &str) -> u64 {
    FxBuildHasher.hash_one(id)
}

/// A set of document ids that keeps each id's hash beside it. A refresh adds every new
/// document to one set per keyword field, and the sets of a value shared by a whole
/// execution (its id, `type`, `transport`) reach a million ids: growing such a set must
/// not re-read a million strings, nor must a probe follow an id pointer to reject it.
#[derive(Debug, Default)]
pub struct IdSet(HashTable<(u64, Arc<str>)>);

impl IdSet {
    fn insert(&mut self, hash: u64, id: &Arc<str>) {
        if let Entry::Vacant(slot) =
            self.0
                .entry(hash, |(h, k)| *h == hash && **k == **id, |(h, _)| *h)
        {
            slot.insert((hash, id.clone()));
        }
    }

    fn remove(&mut self, hash: u64, id: &str) {
        if let Ok(found) = self.0.find_entry(hash, |(h, k)| *h == hash && &**k == id) {
            found.remove();
        }
    }

    pub fn contains(&self, id: &str) -> bool {
        let hash = id_hash(id);
        self.0
            .find(hash, |(h, k)| *h == hash && &**k == id)
            .is_some()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().map(|(_, id)| id)
    }
}

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

/// Calls `f` with each keyword term of `src` for field `field` (a repeated value may come
/// twice: adding to or removing from a set is idempotent). No allocation for strings.
fn each_term(field: &FieldRef, src: &Value, f: &mut dyn FnMut(&str)) {
    any_value(src, &field.path, &mut |v| {
        let owned;
        let term = match v {
            Value::String(s) => s.as_str(),
            Value::Number(n) => {
                owned = n.to_string();
                owned.as_str()
            }
            Value::Bool(b) => {
                if *b {
                    "true"
                } else {
                    "false"
                }
            }
            _ => return false,
        };
        if field
            .ignore_above
            .map_or(true, |limit| term.chars().count() <= limit)
        {
            f(term);
        }
        false
    });
}

/// The distinct keyword terms of a document for one field.
fn values(field: &FieldRef, src: &Value) -> Vec<String> {
    let mut out = Vec::new();
    each_term(field, src, &mut |t| out.push(t.to_owned()));
    out.sort();
    out.dedup();
    out
}

fn add(terms: &mut Terms, term: &str, hash: u64, id: &Arc<str>) {
    match terms.get_mut(term) {
        Some(ids) => ids.insert(hash, id),
        None => {
            let mut ids = IdSet::default();
            ids.insert(hash, id);
            terms.insert(term.to_owned(), ids);
        }
    }
}

fn remove(terms: &mut Terms, term: &str, hash: u64, id: &Arc<str>) {
    if let Some(ids) = terms.get_mut(term) {
        ids.remove(hash, id);
        if ids.is_empty() {
            terms.remove(term);
        }
    }
}

/// Moves `id` from the terms of `old` to the terms of `new`.
pub fn update(
    p: &mut Postings,
    fields: &[(String, FieldRef)],
    id: &Arc<str>,
    old: Option<&DocVersion>,
    new: Option<&DocVersion>,
) {
    let hash = id_hash(id);
    for (name, f) in fields {
        if !p.contains_key(name) {
            p.insert(name.clone(), Terms::default());
        }
        let Some(terms) = p.get_mut(name) else {
            continue;
        };
        match (old, new) {
            // A new document (most of a refresh): straight inserts, nothing to compare.
            (None, Some(new)) => each_term(f, &new.source, &mut |t| add(terms, t, hash, id)),
            (Some(old), None) => each_term(f, &old.source, &mut |t| remove(terms, t, hash, id)),
            (Some(old), Some(new)) => {
                // An update (an asset merge) rarely changes a keyword field: compare the raw
                // values first, without building any term.
                let (mut raw_old, mut raw_new) = (Vec::new(), Vec::new());
                source_values(&old.source, &f.path, &mut raw_old);
                source_values(&new.source, &f.path, &mut raw_new);
                if raw_old == raw_new {
                    continue;
                }
                let (before, after) = (values(f, &old.source), values(f, &new.source));
                if before == after {
                    continue;
                }
                for v in before.iter().filter(|v| !after.contains(v)) {
                    remove(terms, v, hash, id);
                }
                for v in after.iter().filter(|v| !before.contains(v)) {
                    add(terms, v, hash, id);
                }
            }
            (None, None) => {}
        }
    }
}

/// The ids a clause admits, borrowed from the postings where possible: a keyword `term`
/// or `terms` is the union of its terms' id sets, never copied.
enum View<'a> {
    Terms(Vec<&'a IdSet>),
    Ids(HashSet<&'a str>),
}

impl<'a> View<'a> {
    /// An upper bound of the ids (exact for one term), to pick the cheapest to walk.
    fn len(&self) -> usize {
        match self {
            View::Terms(sets) => sets.iter().map(|s| s.len()).sum(),
            View::Ids(ids) => ids.len(),
        }
    }

    fn contains(&self, id: &str) -> bool {
        match self {
            View::Terms(sets) => sets.iter().any(|s| s.contains(id)),
            View::Ids(ids) => ids.contains(id),
        }
    }

    fn for_each(&self, f: &mut dyn FnMut(&'a str)) {
        match self {
            View::Terms(sets) => {
                for set in sets {
                    set.iter().for_each(|i| f(i));
                }
            }
            View::Ids(ids) => ids.iter().for_each(|i| f(i)),
        }
    }
}

fn view<'a>(c: &Compiled, idx: &IndexView<'a>) -> Option<View<'a>> {
    match c {
        Compiled::Nothing => Some(View::Ids(HashSet::new())),
        Compiled::Ids(ids) => Some(View::Ids(
            ids.iter()
                .filter_map(|i| idx.docs.get_key_value(i.as_str()).map(|(k, _)| k.as_ref()))
                .collect(),
        )),
        Compiled::Keys {
            name,
            field,
            keys,
            cidrs,
        } if field.ty == Ty::Keyword && cidrs.is_empty() => {
            let terms = idx.postings.get(name)?;
            let mut sets = Vec::with_capacity(keys.len());
            for k in keys {
                let key = match k {
                    Key::Str(s) => s.clone(),
                    other => match to_key(Ty::Keyword, &other.to_json()).ok().flatten()? {
                        Key::Str(s) => s,
                        _ => String::new(),
                    },
                };
                sets.extend(terms.get(&key));
            }
            Some(View::Terms(sets))
        }
        Compiled::Bool { must, filter, .. } => {
            let views: Vec<View<'a>> = must
                .iter()
                .chain(filter.iter())
                .filter_map(|clause| view(clause, idx))
                .collect();
            // Walk the smallest clause and keep what every other clause admits: a page of
            // one execution's DNS answers costs its own size, not the index's.
            let smallest = (0..views.len()).min_by_key(|&i| views[i].len())?;
            let mut out = HashSet::new();
            views[smallest].for_each(&mut |id| {
                if views
                    .iter()
                    .enumerate()
                    .all(|(i, v)| i == smallest || v.contains(id))
                {
                    out.insert(id);
                }
            });
            Some(View::Ids(out))
        }
        _ => None,
    }
}

/// Ids that can match `c` (a superset of the matches), or `None` when every document must
/// be checked.
pub fn candidates<'a>(c: &Compiled, idx: &IndexView<'a>) -> Option<HashSet<&'a str>> {
    match view(c, idx)? {
        View::Ids(ids) => Some(ids),
        View::Terms(sets) => {
            let mut out = HashSet::with_capacity(sets.iter().map(|s| s.len()).sum());
            sets.iter().flat_map(|s| s.iter()).for_each(|i| {
                out.insert(i.as_ref());
            });
            Some(out)
        }
    }
}

/// How many documents match `c` when the postings answer it exactly (keyword terms and
/// `bool`s of them); one term is its postings size, as a real index answers `_count`.
pub fn exact_count(c: &Compiled, idx: &IndexView<'_>) -> Option<usize> {
    exact_score(c)?;
    Some(match view(c, idx)? {
        View::Terms(sets) if sets.len() == 1 => sets[0].len(),
        // A document with several of the terms is counted once.
        View::Terms(sets) => sets
            .iter()
            .flat_map(|s| s.iter())
            .collect::<HashSet<_>>()
            .len(),
        View::Ids(ids) => ids.len(),
    })
}

/// Builds postings for `name` over the searchable documents, if it has none yet (a field
/// new to the mapping, at the refresh that first sees it).
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
    let mut terms = Terms::default();
    for (id, slot) in &idx.docs {
        let Some(doc) = &slot.visible else { continue };
        let hash = id_hash(id);
        each_term(&field, &doc.source, &mut |t| add(&mut terms, t, hash, id));
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
    fn an_id_set_keeps_each_id_once_through_growth_and_removal() {
        let ids: Vec<Arc<str>> = (0..10_000).map(|i| Arc::from(format!("doc-{i}"))).collect();
        let mut set = IdSet::default();
        for id in ids.iter().chain(&ids) {
            set.insert(id_hash(id), id);
        }
        assert_eq!(set.len(), ids.len(), "a second insert adds nothing");
        for id in ids.iter().step_by(2) {
            set.remove(id_hash(id), id);
        }
        set.remove(id_hash("doc-absent"), "doc-absent");
        assert_eq!(set.len(), ids.len() / 2);
        assert!(set.contains("doc-1") && !set.contains("doc-0") && !set.contains("doc-absent"));
        let mut left: Vec<&str> = set.iter().map(|id| &**id).collect();
        left.sort_unstable();
        left.dedup();
        assert_eq!(left.len(), ids.len() / 2);
    }

    #[test]
    fn refreshes_keep_postings_of_every_keyword_field() {
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
        let term = compiled(json!({"term": {"e": "e1"}}), &idx.mapping);
        assert_eq!(
            candidates(&term, &IndexView::of(idx)).map(|s| s.len()),
            None,
            "nothing refreshed yet"
        );
        idx.refresh();
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
        assert_eq!(exact_count(&m, &IndexView::of(idx)), None);
        // Counts straight from the postings: one term, several terms (a document holding
        // two of them counted once), and a bool intersection walked from its smallest side.
        idx.put("11", Some(json!({"e": ["e1", "e2"]})), 1, None);
        idx.refresh();
        let count = |q: Value, idx: &crate::store::Index| {
            exact_count(&compiled(q, &idx.mapping), &IndexView::of(idx))
        };
        assert_eq!(count(json!({"term": {"e": "e1"}}), idx), Some(4));
        assert_eq!(count(json!({"terms": {"e": ["e1", "e2"]}}), idx), Some(7));
        assert_eq!(
            count(
                json!({"bool": {"filter": [{"terms": {"e": ["e1", "e2"]}}, {"term": {"e": "e2"}}]}}),
                idx
            ),
            Some(4)
        );
        assert_eq!(count(json!({"term": {"e": "nothing"}}), idx), Some(0));
        // Updates: an unchanged keyword keeps its postings, a changed one moves.
        idx.put("7", Some(json!({"e": "e1", "t": "changed text"})), 2, None);
        idx.put("1", Some(json!({"e": "e2"})), 2, None);
        idx.refresh();
        assert_eq!(
            sorted(candidates(&term, &IndexView::of(idx))),
            ["10", "11", "7"]
        );
        assert_eq!(count(json!({"term": {"e": "e2"}}), idx), Some(5));
    }
}
