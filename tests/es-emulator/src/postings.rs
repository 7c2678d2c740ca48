//! Postings: every indexed version of an index's documents by *document number* (write
//! order, as Lucene numbers documents), an inverted index of `keyword` values over them, and
//! which numbers search sees. `term`/`terms` filters (and `bool` clauses that must hold)
//! find their candidates without scanning the whole index.
//!
//! As in a real index, a document is inverted when it is written — while it is still in
//! the cache — and a refresh only changes which numbers are searchable: marking a number
//! costs the same whether the index holds ten thousand documents or ten million.
//! (Inverting at refresh time cost 1.5–9 µs per document at 1 M, cold documents and
//! million-entry tables, and the final upload's refresh paid it for everything written
//! since the last one.) A term's list only ever grows at its end, so it stays sorted; it
//! may hold numbers that are not searchable (yet, or any more), which readers skip. When
//! most numbers are dead the index renumbers — the emulator's stand-in for segment merges.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde_json::Value;

use crate::chunked::Chunked;
use crate::doc_map::DocMap;
use crate::extract::FieldRef;
use crate::extract::{any_value, to_key};
use crate::index_view::IndexView;
use crate::mapping::{Field, Mapping, Ty};
use crate::points::Points;
use crate::query_exec::Compiled;
use crate::sharded::Sharded;
use crate::store::DocVersion;
use crate::values::Key;

/// A document number: the position of an indexed version in [`Searchable`]. 32 bits: the
/// table holds at most twice the live versions (plus slack) between renumberings, and four
/// billion live documents would not fit in memory anyway.
pub type DocNo = u32;

/// An indexed version and its id.
#[derive(Debug)]
pub struct Published {
    pub id: Arc<str>,
    pub doc: Arc<DocVersion>,
}

/// The numbers of the versions holding one term, ascending (searchable or not).
#[derive(Debug, Default)]
pub struct DocList {
    docs: Chunked<DocNo>,
}

/// value → document numbers (Fx hashing: every written document looks up every term;
/// sharded: a field with a value per document has a term per document).
pub type Terms = Sharded<String, DocList>;

/// Dead numbers tolerated before the index renumbers, beyond as many as are live.
const RENUMBER_SLACK: usize = 1 << 16;

/// The indexed versions of an index by number, which of them search sees, and the
/// postings of every keyword field.
#[derive(Debug, Default)]
pub struct Searchable {
    /// number → version, pending or searchable; `None` once superseded or deleted.
    by_docno: Chunked<Option<Published>>,
    /// Bit per number: searchable.
    visible: Vec<u64>,
    dead: usize,
    /// field name (as queried, e.g. `name.keyword`) → its terms.
    fields: FxHashMap<String, Terms>,
    /// field name (as sorted on) → its addresses in order, for the `ip` fields a walk has
    /// asked for (see `points`).
    points: FxHashMap<String, Points>,
}

impl Searchable {
    /// The searchable version numbered `d`.
    pub fn get(&self, d: DocNo) -> Option<&Published> {
        if !self.searchable(d) {
            return None;
        }
        self.by_docno.get(d as usize).and_then(Option::as_ref)
    }

    /// Every searchable version, in number order.
    pub fn iter(&self) -> impl Iterator<Item = &Published> {
        self.by_docno
            .iter()
            .enumerate()
            .filter(|(d, _)| self.searchable(*d as DocNo))
            .filter_map(|(_, p)| p.as_ref())
    }

    /// How many numbers there are (what a walk over every version reads).
    pub fn numbers(&self) -> usize {
        self.by_docno.len()
    }

    fn searchable(&self, d: DocNo) -> bool {
        let d = d as usize;
        self.visible
            .get(d / 64)
            .is_some_and(|word| word & (1 << (d % 64)) != 0)
    }

    fn set_searchable(&mut self, d: DocNo, on: bool) {
        set_bit(&mut self.visible, d, on);
    }

    /// Numbers and inverts a written version (not searchable until [`Self::publish`]).
    pub fn index(
        &mut self,
        keywords: &KeywordFields,
        id: &Arc<str>,
        doc: &Arc<DocVersion>,
    ) -> DocNo {
        let d = self.by_docno.len() as DocNo;
        self.by_docno.push(Some(Published {
            id: id.clone(),
            doc: doc.clone(),
        }));
        let fields = &mut self.fields;
        keywords.each_term(&doc.source, &mut |i, term| {
            if let Some(terms) = fields.get_mut(&keywords.fields[i].0) {
                append(terms, term, d);
            }
        });
        for points in self.points.values_mut() {
            points.add(&doc.source, d);
        }
        d
    }

    /// Builds the points of `ip` field `name` (resolved as `field`) over every indexed
    /// version, unless they exist.
    pub fn ensure_points(&mut self, name: &str, field: &FieldRef) {
        if self
            .points
            .get(name)
            .map_or(true, |p| p.field().path != field.path)
        {
            let built = Points::build(field.clone(), &self.by_docno);
            self.points.insert(name.to_owned(), built);
        }
    }

    /// The points of field `name`, if built.
    pub fn points(&self, name: &str) -> Option<&Points> {
        self.points.get(name)
    }

    /// Drops a version that will never be searchable (overwritten before a refresh).
    pub fn discard(&mut self, d: DocNo) {
        if let Some(entry) = self.by_docno.get_mut(d as usize) {
            if entry.take().is_some() {
                self.dead += 1;
            }
        }
    }

    /// Makes `new` searchable in place of `old`: what a refresh does per document.
    pub fn publish(&mut self, old: Option<DocNo>, new: Option<DocNo>) {
        if let Some(old) = old {
            self.set_searchable(old, false);
            self.discard(old);
        }
        if let Some(new) = new {
            self.set_searchable(new, true);
        }
    }

    /// Renumbers the live versions densely once most numbers are dead (updates and deletes
    /// retire numbers; a real index reclaims them in segment merges), updating each slot.
    pub fn renumber_if_sparse(&mut self, slots: &mut DocMap) {
        let live = self.by_docno.len() - self.dead;
        if self.dead <= live + RENUMBER_SLACK {
            return;
        }
        let mut remap = vec![DocNo::MAX; self.by_docno.len()];
        let mut dense = Chunked::default();
        let mut visible = Vec::with_capacity(live / 64 + 1);
        for (d, entry) in std::mem::take(&mut self.by_docno).into_iter().enumerate() {
            let Some(entry) = entry else { continue };
            let (old, n) = (d as DocNo, dense.len() as DocNo);
            remap[d] = n;
            if self.searchable(old) {
                set_bit(&mut visible, n, true);
            }
            if let Some(slot) = slots.get_mut(&entry.id) {
                if slot.pending == Some(old) {
                    slot.pending = Some(n);
                } else if slot.searchable == Some(old) {
                    slot.searchable = Some(n);
                }
            }
            dense.push(Some(entry));
        }
        for terms in self.fields.values_mut() {
            for list in terms.values_mut() {
                let mut kept = Chunked::default();
                for d in std::mem::take(&mut list.docs) {
                    let n = remap[d as usize];
                    if n != DocNo::MAX {
                        kept.push(n);
                    }
                }
                list.docs = kept;
            }
            terms.retain(|_, list| list.docs.len() > 0);
        }
        for points in self.points.values_mut() {
            points.renumber(&remap);
        }
        self.by_docno = dense;
        self.visible = visible;
        self.dead = 0;
    }

    /// Builds postings for the keyword fields that have none yet (all of them for a new
    /// index; a field new to the mapping) over the indexed versions.
    pub fn ensure(&mut self, keywords: &KeywordFields) {
        for (name, field) in &keywords.fields {
            if self.fields.contains_key(name) {
                continue;
            }
            let mut terms = Terms::default();
            for (d, entry) in self.by_docno.iter().enumerate() {
                let Some(entry) = entry else { continue };
                each_term(field, &entry.doc.source, &mut |t| {
                    append(&mut terms, t, d as DocNo)
                });
            }
            self.fields.insert(name.clone(), terms);
        }
    }
}

fn set_bit(bits: &mut Vec<u64>, d: DocNo, on: bool) {
    let d = d as usize;
    if bits.len() <= d / 64 {
        bits.resize(d / 64 + 1, 0);
    }
    if on {
        bits[d / 64] |= 1 << (d % 64);
    } else {
        bits[d / 64] &= !(1 << (d % 64));
    }
}

/// Pushes `d` (the newest number, so the list stays sorted; a repeated value adds nothing).
fn append(terms: &mut Terms, term: &str, d: DocNo) {
    match terms.get_mut(term) {
        Some(list) => {
            if list.docs.last() != Some(&d) {
                list.docs.push(d);
            }
        }
        None => {
            let mut docs = Chunked::default();
            docs.push(d);
            terms.insert(term.to_owned(), DocList { docs });
        }
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
            out.push((full.clone(), FieldRef::new(full.clone(), f)));
        }
        for (sub, sf) in &f.fields {
            if sf.ty == Ty::Keyword {
                out.push((format!("{full}.{sub}"), FieldRef::new(full.clone(), sf)));
            }
        }
        walk(&f.props, &full, out);
    }
}

/// Every keyword field of a mapping, multi-fields included.
fn keyword_fields(m: &Mapping) -> Vec<(String, FieldRef)> {
    let mut out = Vec::new();
    walk(&m.props, "", &mut out);
    out
}

/// The keyword fields of a mapping, and which of them each `_source` path feeds (a field
/// and its `.keyword` multi-field read the same path).
#[derive(Debug)]
pub struct KeywordFields {
    fields: Vec<(String, FieldRef)>,
    by_path: FxHashMap<String, Vec<usize>>,
}

impl KeywordFields {
    pub fn of(m: &Mapping) -> KeywordFields {
        let fields = keyword_fields(m);
        let mut by_path: FxHashMap<String, Vec<usize>> = FxHashMap::default();
        for (i, (_, f)) in fields.iter().enumerate() {
            by_path.entry(f.path.clone()).or_default().push(i);
        }
        KeywordFields { fields, by_path }
    }

    /// Calls `f` with (field index, term) for every keyword term of `src` in one walk of the
    /// document — the same terms as [`each_term`] per field, without looking each field's
    /// path up in the document (every write does this).
    fn each_term(&self, src: &Value, f: &mut dyn FnMut(usize, &str)) {
        let mut path = String::new();
        self.walk_source(src, &mut path, f);
    }

    fn walk_source(&self, v: &Value, path: &mut String, f: &mut dyn FnMut(usize, &str)) {
        match v {
            Value::Object(map) => {
                for (key, item) in map {
                    // `{"a": {"b": x}}`, `{"a.b": x}` and `{"a": [{"b": x}]}` all reach `a.b`.
                    let len = path.len();
                    if len > 0 {
                        path.push('.');
                    }
                    path.push_str(key);
                    self.walk_source(item, path, f);
                    path.truncate(len);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| self.walk_source(i, path, f)),
            Value::Null => {}
            scalar => {
                if let Some(fields) = self.by_path.get(path.as_str()) {
                    for &i in fields {
                        with_term(&self.fields[i].1, scalar, &mut |t| f(i, t));
                    }
                }
            }
        }
    }
}

/// Calls `f` with each keyword term of `src` for field `field` (a repeated value may come
/// twice). No allocation for strings.
fn each_term(field: &FieldRef, src: &Value, f: &mut dyn FnMut(&str)) {
    any_value(src, &field.path, &mut |v| {
        with_term(field, v, f);
        false
    });
}

/// Calls `f` with the keyword term of scalar `v`, unless `ignore_above` leaves it out.
fn with_term(field: &FieldRef, v: &Value, f: &mut dyn FnMut(&str)) {
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
        _ => return,
    };
    if field
        .ignore_above
        .map_or(true, |limit| term.chars().count() <= limit)
    {
        f(term);
    }
}

/// The documents a clause admits, borrowed from the postings where possible: a keyword
/// `term` or `terms` is the union of its terms' lists, never copied.
enum View<'a> {
    Lists(Vec<&'a DocList>),
    /// Ascending, distinct, searchable.
    Docs(Vec<DocNo>),
}

impl<'a> View<'a> {
    /// An upper bound of the searchable documents, to pick the cheapest to walk.
    fn len(&self) -> usize {
        match self {
            View::Lists(lists) => lists.iter().map(|l| l.docs.len()).sum(),
            View::Docs(docs) => docs.len(),
        }
    }

    fn contains(&self, d: DocNo) -> bool {
        match self {
            View::Lists(lists) => lists.iter().any(|l| l.docs.contains_sorted(&d)),
            View::Docs(docs) => docs.binary_search(&d).is_ok(),
        }
    }

    /// The searchable documents, ascending and distinct.
    fn into_docs(self, s: &Searchable) -> Vec<DocNo> {
        match self {
            View::Docs(docs) => docs,
            View::Lists(lists) => {
                let mut out: Vec<DocNo> = lists
                    .iter()
                    .flat_map(|l| l.docs.iter().copied())
                    .filter(|&d| s.searchable(d))
                    .collect();
                if lists.len() > 1 {
                    out.sort_unstable();
                    out.dedup();
                }
                out
            }
        }
    }
}

fn view<'a>(c: &Compiled, idx: &IndexView<'a>) -> Option<View<'a>> {
    match c {
        Compiled::Nothing => Some(View::Docs(Vec::new())),
        Compiled::Ids(ids) => {
            let mut docs: Vec<DocNo> = ids
                .iter()
                .filter_map(|i| idx.docs.get(i.as_str()))
                .filter_map(|slot| slot.searchable)
                .collect();
            docs.sort_unstable();
            docs.dedup();
            Some(View::Docs(docs))
        }
        Compiled::Keys {
            name,
            field,
            keys,
            cidrs,
        } if field.ty == Ty::Keyword && cidrs.is_empty() => {
            let terms = idx.searchable.fields.get(name)?;
            let mut lists = Vec::with_capacity(keys.len());
            for k in keys {
                let key = match k {
                    Key::Str(s) => s.clone(),
                    other => match to_key(Ty::Keyword, &other.to_json()).ok().flatten()? {
                        Key::Str(s) => s,
                        _ => String::new(),
                    },
                };
                lists.extend(terms.get(&key));
            }
            Some(View::Lists(lists))
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
            let mut views = views;
            let walked = views.swap_remove(smallest);
            let mut docs = walked.into_docs(idx.searchable);
            docs.retain(|&d| views.iter().all(|v| v.contains(d)));
            Some(View::Docs(docs))
        }
        _ => None,
    }
}

/// At most how many documents [`candidates`] would offer for `c` (what matching `c` would
/// check), without making the list; `None` when every document would be checked.
pub fn estimate(c: &Compiled, idx: &IndexView<'_>) -> Option<usize> {
    match c {
        // As `view` walks a `bool`'s smallest required clause.
        Compiled::Bool { must, filter, .. } => must
            .iter()
            .chain(filter.iter())
            .filter_map(|clause| estimate(clause, idx))
            .min(),
        other => view(other, idx).map(|v| v.len()),
    }
}

/// Searchable documents that can match `c` (a superset of the matches), ascending, or `None`
/// when every document must be checked.
pub fn candidates(c: &Compiled, idx: &IndexView<'_>) -> Option<Vec<DocNo>> {
    Some(view(c, idx)?.into_docs(idx.searchable))
}

/// How many documents match `c` when the postings answer it exactly (keyword terms and
/// `bool`s of them); one term is a walk of its list, as a real index counts a term's
/// postings against its live docs.
pub fn exact_count(c: &Compiled, idx: &IndexView<'_>) -> Option<usize> {
    exact_score(c)?;
    let s = idx.searchable;
    Some(match view(c, idx)? {
        View::Lists(lists) if lists.len() == 1 => {
            lists[0].docs.iter().filter(|&&d| s.searchable(d)).count()
        }
        // A document with several of the terms is counted once.
        other => other.into_docs(idx.searchable).len(),
    })
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

    /// A store with index `e`, whose one field `e` is a keyword.
    fn keyword_index() -> Store {
        let mut store = Store::default();
        let body = json!({"mappings": {"properties": {"e": {"type": "keyword"}}}});
        assert!(store.create_index("e", Some(&body)).is_ok());
        store
    }

    /// The ids of the candidates, sorted.
    fn sorted(idx: &crate::store::Index, docs: Option<Vec<DocNo>>) -> Vec<String> {
        let mut v: Vec<String> = docs
            .unwrap_or_default()
            .into_iter()
            .filter_map(|d| idx.searchable.get(d).map(|p| p.id.to_string()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn one_walk_of_a_document_finds_the_terms_each_field_path_finds() {
        let body = json!({"mappings": {"properties": {
            "k": {"type": "keyword", "ignore_above": 5},
            "t": {"type": "text", "fields": {"raw": {"type": "keyword"}}},
            "o": {"properties": {"a": {"type": "keyword"}, "deep": {"properties": {"z": {"type": "keyword"}}}}},
            "n": {"type": "long"}
        }}});
        let mut store = Store::default();
        let Ok(idx) = store.create_index("w", Some(&body)) else {
            panic!("index")
        };
        let keywords = KeywordFields::of(&idx.mapping);
        let docs = [
            json!({"k": "short", "t": "Some Text", "o": {"a": "x", "deep": {"z": 7}}, "n": 3}),
            json!({"k": ["toolong", "ok", null, ["nest"]], "o.a": true, "o": [{"a": "y"}, {"a": ["z", "y"]}]}),
            json!({"o.deep.z": "dotted", "o": {"deep.z": "half", "other": {"a": "no"}}, "t": 12.5}),
            json!({"k": {"not": "a scalar"}, "unmapped": "u", "o": null}),
        ];
        for doc in &docs {
            let mut walked = Vec::new();
            keywords.each_term(doc, &mut |i, t| {
                walked.push((keywords.fields[i].0.clone(), t.to_owned()))
            });
            let mut per_field = Vec::new();
            for (name, f) in &keywords.fields {
                each_term(f, doc, &mut |t| {
                    per_field.push((name.clone(), t.to_owned()))
                });
            }
            walked.sort();
            per_field.sort();
            assert_eq!(walked, per_field, "{doc}");
        }
        let mut first = Vec::new();
        keywords.each_term(&docs[0], &mut |i, t| {
            first.push(format!("{}={t}", keywords.fields[i].0))
        });
        first.sort();
        assert_eq!(first, ["k=short", "o.a=x", "o.deep.z=7", "t.raw=Some Text"]);
    }

    #[test]
    fn updates_and_deletes_retire_numbers_until_the_index_renumbers() {
        let mut store = keyword_index();
        let Some(idx) = store.indices.get_mut("e") else {
            panic!("index")
        };
        let count = |q: Value, idx: &crate::store::Index| {
            exact_count(&compiled(q, &idx.mapping), &IndexView::of(idx))
        };
        let docs = 1000;
        // Enough rounds of updates that the dead numbers pass the live ones plus the slack.
        let rounds = (RENUMBER_SLACK + docs) / docs + 2;
        for round in 0..rounds {
            for i in 0..docs {
                // The value moves between two terms, and repeats within the document.
                let e = if (i + round) % 2 == 0 { "even" } else { "odd" };
                let version = round as i64 + 1;
                idx.put(&i.to_string(), Some(json!({"e": [e, e]})), version, None);
            }
            idx.refresh();
            assert_eq!(count(json!({"term": {"e": "even"}}), idx), Some(docs / 2));
            assert_eq!(
                count(json!({"terms": {"e": ["even", "odd"]}}), idx),
                Some(docs)
            );
            let lists = &idx.searchable.fields["e"];
            assert!(
                lists.iter().all(|(_, l)| l
                    .docs
                    .iter()
                    .zip(l.docs.iter().skip(1))
                    .all(|(a, b)| a < b)),
                "each list ascending, each number once"
            );
        }
        assert!(
            idx.searchable.by_docno.len() <= 2 * docs + RENUMBER_SLACK,
            "the index renumbered: {} numbers for {docs} documents",
            idx.searchable.by_docno.len()
        );
        // Every slot still names its own version.
        for (id, slot) in idx.docs.iter() {
            let published = slot
                .searchable
                .and_then(|d| idx.searchable.get(d))
                .map(|p| p.id.clone());
            assert_eq!(published.as_deref(), Some(&**id));
        }
        let even = compiled(json!({"term": {"e": "even"}}), &idx.mapping);
        let expected: Vec<String> = {
            let mut v: Vec<String> = (0..docs)
                .filter(|i| (i + rounds - 1) % 2 == 0)
                .map(|i| i.to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            sorted(idx, candidates(&even, &IndexView::of(idx))),
            expected
        );
        // Deletes retire numbers too.
        for i in 0..docs {
            idx.put(&i.to_string(), None, rounds as i64 + 1, None);
        }
        idx.refresh();
        assert_eq!(count(json!({"term": {"e": "even"}}), idx), Some(0));
        assert_eq!(idx.searchable.iter().count(), 0);
    }

    #[test]
    fn a_written_version_is_inverted_at_once_and_searchable_only_after_a_refresh() {
        let mut store = keyword_index();
        let Some(idx) = store.indices.get_mut("e") else {
            panic!("index")
        };
        let term = |v: &str, idx: &crate::store::Index| {
            let c = compiled(json!({"term": {"e": v}}), &idx.mapping);
            (
                sorted(idx, candidates(&c, &IndexView::of(idx))),
                exact_count(&c, &IndexView::of(idx)),
            )
        };
        idx.put("a", Some(json!({"e": "x"})), 1, None);
        idx.refresh();
        assert_eq!(term("x", idx), (vec!["a".to_owned()], Some(1)));
        // Written, overwritten and deleted before the next refresh: search still sees the
        // refreshed state, though every write is already in the postings.
        idx.put("a", Some(json!({"e": "y"})), 2, None);
        idx.put("a", Some(json!({"e": "z"})), 3, None);
        idx.put("b", Some(json!({"e": "y"})), 1, None);
        idx.put("c", Some(json!({"e": "x"})), 1, None);
        idx.put("c", None, 2, None);
        assert_eq!(term("x", idx), (vec!["a".to_owned()], Some(1)));
        assert_eq!(term("y", idx), (vec![], Some(0)));
        assert!(
            idx.searchable.fields["e"]["y"].docs.len() == 2,
            "inverted at write"
        );
        idx.refresh();
        assert_eq!(term("x", idx), (vec![], Some(0)));
        assert_eq!(term("y", idx), (vec!["b".to_owned()], Some(1)));
        assert_eq!(term("z", idx), (vec!["a".to_owned()], Some(1)));
        assert_eq!(idx.searchable.iter().count(), 2);
        // A field new to the mapping gets postings over every indexed version at once.
        assert!(idx.check_doc("d", &json!({"e": "x", "f": "new"})).is_ok());
        idx.put("d", Some(json!({"e": "x", "f": "new"})), 1, None);
        idx.refresh();
        // A dynamic string is `text` with a `keyword` multi-field, as in ES.
        let f = compiled(json!({"term": {"f.keyword": "new"}}), &idx.mapping);
        assert_eq!(exact_count(&f, &IndexView::of(idx)), Some(1));
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
            assert!(idx.check_doc("1", &src).is_ok());
            idx.put(&i.to_string(), Some(src), 1, None);
        }
        let term = compiled(json!({"term": {"e": "e1"}}), &idx.mapping);
        assert_eq!(
            candidates(&term, &IndexView::of(idx)).map(|s| s.len()),
            Some(0),
            "written, not refreshed yet"
        );
        idx.refresh();
        assert_eq!(
            sorted(idx, candidates(&term, &IndexView::of(idx))),
            ["1", "4", "7"]
        );
        // Later refreshes keep them current; unrefreshed writes are not visible.
        idx.put("10", Some(json!({"e": "e1"})), 1, None);
        idx.put("4", None, 2, None);
        assert_eq!(
            sorted(idx, candidates(&term, &IndexView::of(idx))),
            ["1", "4", "7"]
        );
        idx.refresh();
        assert_eq!(
            sorted(idx, candidates(&term, &IndexView::of(idx))),
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
            sorted(idx, candidates(&term, &IndexView::of(idx))),
            ["10", "11", "7"]
        );
        assert_eq!(count(json!({"term": {"e": "e2"}}), idx), Some(5));
    }
}
