//! `_source` filtering (`_source: false | "f" | ["a.*"] | {includes, excludes}` and the
//! `_source`, `_source_includes`, `_source_excludes` URL parameters).

use std::borrow::Cow;

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::store::{glob_match, DocVersion};

#[derive(Debug, Clone, Default)]
pub struct SourceFilter {
    pub enabled: bool,
    includes: Vec<Include>,
    excludes: Vec<String>,
}

/// An include pattern, classified once: it is matched against every field of every hit.
#[derive(Debug, Clone)]
struct Include {
    pattern: String,
    /// For a pattern with `*`: the pattern with `.*` appended, which selects what is under
    /// a matching object. `None` for a literal field path.
    under: Option<String>,
    /// A literal top-level field name (no `*`, no `.`): pickable from a source's text.
    top_level: bool,
}

impl Include {
    fn new(pattern: &str) -> Include {
        Include {
            pattern: pattern.to_owned(),
            under: pattern.contains('*').then(|| format!("{pattern}.*")),
            top_level: !pattern.contains(['*', '.']),
        }
    }

    /// Whether this pattern selects `path`: the field itself or anything under it. The
    /// common literal pattern is two slice comparisons.
    fn selects(&self, path: &str) -> bool {
        match &self.under {
            Some(under) => glob_match(&self.pattern, path) || glob_match(under, path),
            None => self.pattern == path || is_under(path, &self.pattern),
        }
    }
}

fn list(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => s.split(',').map(str::to_owned).collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn patterns<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<Include> {
    items.into_iter().map(Include::new).collect()
}

/// Whether `child` is a dotted descendant of `parent` (`a.b` of `a`). The separator is
/// checked first: it rules out most pairs without comparing the prefix.
fn is_under(child: &str, parent: &str) -> bool {
    child.as_bytes().get(parent.len()) == Some(&b'.') && child.starts_with(parent)
}

impl SourceFilter {
    pub fn all() -> SourceFilter {
        SourceFilter {
            enabled: true,
            ..SourceFilter::default()
        }
    }

    pub fn from_body(v: Option<&Value>) -> SourceFilter {
        match v {
            None | Some(Value::Bool(true)) => SourceFilter::all(),
            Some(Value::Bool(false)) => SourceFilter::default(),
            Some(Value::Object(o)) => SourceFilter {
                enabled: true,
                includes: patterns(
                    o.get("includes")
                        .or_else(|| o.get("include"))
                        .map(list)
                        .unwrap_or_default()
                        .iter()
                        .map(String::as_str),
                ),
                excludes: o
                    .get("excludes")
                    .or_else(|| o.get("exclude"))
                    .map(list)
                    .unwrap_or_default(),
            },
            Some(other) => SourceFilter {
                enabled: true,
                includes: patterns(list(other).iter().map(String::as_str)),
                excludes: Vec::new(),
            },
        }
    }

    /// Applies URL parameters on top of a body filter.
    pub fn with_params(
        mut self,
        source: Option<&str>,
        includes: Option<&str>,
        excludes: Option<&str>,
    ) -> SourceFilter {
        match source {
            Some("false") => self.enabled = false,
            Some("true") | Some("") => self.enabled = true,
            Some(fields) => {
                self.enabled = true;
                self.includes = patterns(fields.split(','));
            }
            None => {}
        }
        if let Some(i) = includes {
            self.enabled = true;
            self.includes = patterns(i.split(','));
        }
        if let Some(e) = excludes {
            self.excludes = e.split(',').map(str::to_owned).collect();
        }
        self
    }

    /// The filtered source as a copy (`None` when `_source` is off).
    pub fn apply(&self, src: &Value) -> Option<Value> {
        self.view(src)
            .map(|v| serde_json::to_value(v).unwrap_or(Value::Null))
    }

    /// The filtered source as a view that serialises straight from `src` (`None` when
    /// `_source` is off): a page of hits is written without a filtered copy of each.
    pub fn view<'a>(&'a self, src: &'a Value) -> Option<Filtered<'a>> {
        self.enabled.then_some(Filtered {
            filter: self,
            value: src,
            path: Cow::Borrowed(""),
        })
    }

    /// A document's filtered source, from the text it was sent as where that can be copied:
    /// whole without a filter, or its top-level fields picked when every include names
    /// one (no dots or wildcards) and nothing is excluded. That is ES's stored source, in
    /// the order it was sent, and costs a scan of the text instead of a walk of the tree.
    pub fn view_doc<'a>(&'a self, doc: &'a DocVersion) -> Option<SourceView<'a>> {
        if !self.enabled {
            return None;
        }
        let picks_fields = self.excludes.is_empty() && self.includes.iter().all(|i| i.top_level);
        Some(match &doc.raw {
            Some(raw) if self.includes.is_empty() && self.excludes.is_empty() => {
                SourceView::Sent(raw)
            }
            Some(raw) if picks_fields => SourceView::Picked { filter: self, raw },
            _ => SourceView::Tree(Filtered {
                filter: self,
                value: &doc.source,
                path: Cow::Borrowed(""),
            }),
        })
    }

    fn keep(&self, path: &str, is_object: bool) -> (bool, bool) {
        if self.excludes.iter().any(|e| glob_match(e, path)) {
            return (false, false);
        }
        if self.includes.is_empty() || self.includes.iter().any(|i| i.selects(path)) {
            return (true, false);
        }
        // An object whose descendants may match an include is walked into.
        let partial = is_object
            && self
                .includes
                .iter()
                .any(|i| is_under(&i.pattern, path) || i.pattern.starts_with('*'));
        (false, partial)
    }
}

/// A value (at `path`) as a [`SourceFilter`] shows it.
pub struct Filtered<'a> {
    filter: &'a SourceFilter,
    value: &'a Value,
    path: Cow<'a, str>,
}

/// What an object shows of one of its fields.
enum Shown<'a> {
    Whole(&'a Value),
    Part(Filtered<'a>),
}

impl<'a> Filtered<'a> {
    /// How field `key` with value `child` of this object is shown, if at all.
    fn field(&self, key: &'a str, child: &'a Value) -> Option<Shown<'a>> {
        let f = self.filter;
        let path: Cow<'a, str> = if self.path.is_empty() {
            Cow::Borrowed(key)
        } else {
            Cow::Owned(format!("{}.{key}", self.path))
        };
        let nested = child.is_object() || child.is_array();
        let (whole, partial) = f.keep(&path, nested);
        if whole && (f.excludes.is_empty() || !nested) {
            return Some(Shown::Whole(child));
        }
        if !whole && !partial {
            return None;
        }
        let part = Filtered {
            filter: f,
            value: child,
            path,
        };
        // A walked-into object left with nothing is dropped, unless it was asked for whole
        // (or was empty to begin with).
        let emptied = matches!(child, Value::Object(m) if !m.is_empty()) && part.shows_nothing();
        (whole || !emptied).then_some(Shown::Part(part))
    }

    fn shows_nothing(&self) -> bool {
        match self.value {
            Value::Object(map) => map.iter().all(|(k, c)| self.field(k, c).is_none()),
            _ => false,
        }
    }
}

impl Serialize for Filtered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let f = self.filter;
        if f.includes.is_empty() && f.excludes.is_empty() {
            return self.value.serialize(s);
        }
        match self.value {
            Value::Object(map) => {
                let mut out = s.serialize_map(None)?;
                for (k, child) in map {
                    match self.field(k, child) {
                        Some(Shown::Whole(v)) => out.serialize_entry(k, v)?,
                        Some(Shown::Part(part)) => out.serialize_entry(k, &part)?,
                        None => {}
                    }
                }
                out.end()
            }
            // Array items are filtered at the array's own path.
            Value::Array(items) => s.collect_seq(items.iter().map(|item| Filtered {
                filter: f,
                value: item,
                path: Cow::Borrowed(&self.path),
            })),
            other => other.serialize(s),
        }
    }
}

/// A hit's `_source` as [`SourceFilter::view_doc`] shows it.
pub enum SourceView<'a> {
    Tree(Filtered<'a>),
    /// The source as sent.
    Sent(&'a RawValue),
    /// The top-level fields of the source as sent that `filter`'s includes name.
    Picked {
        filter: &'a SourceFilter,
        raw: &'a RawValue,
    },
}

impl Serialize for SourceView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SourceView::Tree(f) => f.serialize(s),
            SourceView::Sent(raw) => raw.serialize(s),
            SourceView::Picked { filter, raw } => {
                let mut d = serde_json::Deserializer::from_str(raw.get());
                let fields = d
                    .deserialize_map(TopLevel(filter))
                    .map_err(serde::ser::Error::custom)?;
                let mut out = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    out.serialize_entry(&k, v)?;
                }
                out.end()
            }
        }
    }
}

/// Reads a source object's top-level fields that a filter includes, as sent.
struct TopLevel<'f>(&'f SourceFilter);

/// An object key, borrowed unless it has escapes.
#[derive(serde::Deserialize)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

impl<'de, 'f> Visitor<'de> for TopLevel<'f> {
    type Value = Vec<(Cow<'de, str>, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a source object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut fields = Vec::with_capacity(self.0.includes.len());
        while let Some(Key(key)) = map.next_key()? {
            if self.0.includes.iter().any(|i| i.selects(&key)) {
                let value: &'de RawValue = map.next_value()?;
                fields.push((key, value));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn includes_and_excludes() {
        let src = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": 4});
        let f = SourceFilter::from_body(Some(&json!(["a", "b.c"])));
        assert_eq!(f.apply(&src), Some(json!({"a": 1, "b": {"c": 2}})));
        let f = SourceFilter::from_body(Some(&json!({"excludes": ["b"]})));
        assert_eq!(f.apply(&src), Some(json!({"a": 1, "e": 4})));
        assert_eq!(
            SourceFilter::from_body(Some(&json!(false))).apply(&src),
            None
        );
        let f = SourceFilter::from_body(Some(&json!("b.*")));
        assert_eq!(f.apply(&src), Some(json!({"b": {"c": 2, "d": 3}})));
        let f = SourceFilter::from_body(Some(&json!(["b"])));
        assert_eq!(f.apply(&src), Some(json!({"b": {"c": 2, "d": 3}})));
        let f = SourceFilter::from_body(Some(&json!(["b.d", "bb"])));
        assert_eq!(f.apply(&src), Some(json!({"b": {"d": 3}})));
        let f = SourceFilter::from_body(Some(&json!(["*.c"])));
        assert_eq!(f.apply(&src), Some(json!({"b": {"c": 2}})));
    }

    #[test]
    fn a_source_as_sent_is_copied_or_its_fields_picked() {
        let (source, raw) =
            crate::bulk_parse::as_sent(br#" {"z": 1.50, "a": {"b": 2}, "m": "x\"y"} "#).unwrap();
        let doc = DocVersion {
            source,
            raw,
            version: 1,
            seq_no: 0,
            write_no: 0,
            shard: 0,
            routing: None,
        };
        let shown = |spec: Option<Value>| {
            let filter = SourceFilter::from_body(spec.as_ref());
            serde_json::to_string(&filter.view_doc(&doc)).unwrap()
        };
        // Unfiltered: the text as sent, its order and number formatting kept.
        assert_eq!(shown(None), r#"{"z": 1.50, "a": {"b": 2}, "m": "x\"y"}"#);
        // Top-level fields named: picked from it, in the order sent.
        assert_eq!(
            shown(Some(json!(["m", "z", "q"]))),
            r#"{"z":1.50,"m":"x\"y"}"#
        );
        assert_eq!(shown(Some(json!(["a"]))), r#"{"a":{"b": 2}}"#);
        // Paths, wildcards and excludes filter the tree, as for a source an update made.
        assert_eq!(shown(Some(json!(["a.b"]))), r#"{"a":{"b":2}}"#);
        assert_eq!(shown(Some(json!(["m*"]))), r#"{"m":"x\"y"}"#);
        assert_eq!(
            shown(Some(json!({"excludes": ["a"]}))),
            r#"{"m":"x\"y","z":1.5}"#
        );
        assert_eq!(shown(Some(json!(false))), "null");
    }

    #[test]
    fn arrays_empty_objects_and_excludes_under_includes() {
        let src = json!({"a": [{"x": 1, "y": 2}, {"x": 3}], "b": {"c": 2, "d": 3}, "e": {}});
        let f = |spec: Value| SourceFilter::from_body(Some(&spec)).apply(&src);
        // Array items are filtered at the array's path.
        assert_eq!(f(json!(["a.x"])), Some(json!({"a": [{"x": 1}, {"x": 3}]})));
        assert_eq!(
            f(json!({"excludes": ["b.c", "a.y"]})),
            Some(json!({"a": [{"x": 1}, {"x": 3}], "b": {"d": 3}, "e": {}}))
        );
        assert_eq!(
            f(json!({"includes": ["b"], "excludes": ["b.c"]})),
            Some(json!({"b": {"d": 3}}))
        );
        // An object walked into and left empty is dropped; one asked for whole is kept.
        assert_eq!(f(json!(["b.z"])), Some(json!({})));
        assert_eq!(f(json!(["e"])), Some(json!({"e": {}})));
        // The view a search writes is the same as the copy.
        let filter = SourceFilter::from_body(Some(&json!(["a.x", "b.d"])));
        assert_eq!(
            serde_json::to_value(filter.view(&src)).unwrap(),
            json!({"a": [{"x": 1}, {"x": 3}], "b": {"d": 3}})
        );
    }
}
