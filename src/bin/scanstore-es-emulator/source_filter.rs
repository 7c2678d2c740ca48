//! `_source` filtering (`_source: false | "f" | ["a.*"] | {includes, excludes}` and the
//! `_source`, `_source_includes`, `_source_excludes` URL parameters).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::store::glob_match;

#[derive(Debug, Clone, Default)]
pub struct SourceFilter {
    pub enabled: bool,
    pub includes: Vec<String>,
    pub excludes: Vec<String>,
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

/// Whether `child` is a dotted descendant of `parent` (`a.b` of `a`).
fn is_under(child: &str, parent: &str) -> bool {
    child.len() > parent.len()
        && child.starts_with(parent)
        && child.as_bytes()[parent.len()] == b'.'
}

/// Whether include pattern `pattern` selects `path`: the field itself or anything under it.
/// Runs for every field of every hit, so the common literal pattern allocates nothing.
fn includes(pattern: &str, path: &str) -> bool {
    if pattern.contains('*') {
        glob_match(pattern, path) || glob_match(&format!("{pattern}.*"), path)
    } else {
        pattern == path || is_under(path, pattern)
    }
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
                includes: o
                    .get("includes")
                    .or_else(|| o.get("include"))
                    .map(list)
                    .unwrap_or_default(),
                excludes: o
                    .get("excludes")
                    .or_else(|| o.get("exclude"))
                    .map(list)
                    .unwrap_or_default(),
            },
            Some(other) => SourceFilter {
                enabled: true,
                includes: list(other),
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
                self.includes = fields.split(',').map(str::to_owned).collect();
            }
            None => {}
        }
        if let Some(i) = includes {
            self.enabled = true;
            self.includes = i.split(',').map(str::to_owned).collect();
        }
        if let Some(e) = excludes {
            self.excludes = e.split(',').map(str::to_owned).collect();
        }
        self
    }

    pub fn apply(&self, src: &Value) -> Option<Value> {
        if !self.enabled {
            return None;
        }
        if self.includes.is_empty() && self.excludes.is_empty() {
            return Some(src.clone());
        }
        Some(self.filter(src, ""))
    }

    fn keep(&self, path: &str, is_object: bool) -> (bool, bool) {
        if self.excludes.iter().any(|e| glob_match(e, path)) {
            return (false, false);
        }
        if self.includes.is_empty() || self.includes.iter().any(|i| includes(i, path)) {
            return (true, false);
        }
        // An object whose descendants may match an include is walked into.
        let partial = is_object
            && self
                .includes
                .iter()
                .any(|i| is_under(i, path) || i.starts_with('*'));
        (false, partial)
    }

    fn filter(&self, v: &Value, prefix: &str) -> Value {
        match v {
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, child) in map {
                    let path: Cow<str> = if prefix.is_empty() {
                        Cow::Borrowed(k)
                    } else {
                        Cow::Owned(format!("{prefix}.{k}"))
                    };
                    let (whole, partial) = self.keep(&path, child.is_object() || child.is_array());
                    if whole && self.excludes.is_empty() {
                        out.insert(k.clone(), child.clone());
                    } else if whole || partial {
                        let f = self.filter(child, &path);
                        let empty = matches!(&f, Value::Object(m) if m.is_empty())
                            && !matches!(child, Value::Object(m) if m.is_empty());
                        if whole && !child.is_object() && !child.is_array() {
                            out.insert(k.clone(), child.clone());
                        } else if !empty || whole {
                            out.insert(k.clone(), f);
                        }
                    }
                }
                Value::Object(out)
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.filter(i, prefix)).collect())
            }
            other => other.clone(),
        }
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
}
