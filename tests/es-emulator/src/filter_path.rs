//! `filter_path`, the URL parameter every API takes: which fields of a successful JSON
//! answer are kept. Patterns are comma-separated dotted paths; a segment may be `*`, a
//! glob (`_s*`) or `**` (any number of levels); a leading `-` makes a pattern an exclusion,
//! applied before the inclusions. Arrays are transparent, and an object or array left with
//! nothing included goes with its key, as Elasticsearch writes only what matched. Error
//! answers are never filtered, as Elasticsearch builds them without the filter.

use serde_json::{Map, Value};

use crate::store::glob_match;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `**`: zero or more levels.
    AnyDepth,
    /// A field name, which may hold `*`.
    Name(String),
}

/// How far a pattern reaches at a path, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    /// Neither this path nor anything under it.
    Misses,
    /// Something under this path, perhaps.
    Below,
    /// This path and everything under it.
    Covers,
}

/// What becomes of the value at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Written whole.
    Keep,
    /// Left out.
    Drop,
    /// Decided field by field below; a scalar (or an emptied container) is kept only if
    /// `leaf` (included whole, with an exclusion reaching below it).
    Descend { leaf: bool },
}

#[derive(Debug, Clone, Default)]
pub struct FilterPath {
    includes: Vec<Vec<Segment>>,
    excludes: Vec<Vec<Segment>>,
}

impl FilterPath {
    /// Parses the parameter's value; empty patterns are ignored, as Elasticsearch does.
    pub fn parse(value: &str) -> FilterPath {
        let mut filter = FilterPath::default();
        for pattern in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (list, pattern) = match pattern.strip_prefix('-') {
                Some(rest) => (&mut filter.excludes, rest),
                None => (&mut filter.includes, pattern),
            };
            let segments: Vec<Segment> = pattern
                .split('.')
                .filter(|s| !s.is_empty())
                .map(|s| match s {
                    "**" => Segment::AnyDepth,
                    name => Segment::Name(name.to_owned()),
                })
                .collect();
            if !segments.is_empty() {
                list.push(segments);
            }
        }
        filter
    }

    /// What becomes of the value at `path` (its keys from the root; array positions are
    /// not part of a path).
    pub fn decide(&self, path: &[&str]) -> Decision {
        let excluded = strongest(&self.excludes, path);
        let included = if self.includes.is_empty() {
            Reach::Covers
        } else {
            strongest(&self.includes, path)
        };
        match (included, excluded) {
            (_, Reach::Covers) | (Reach::Misses, _) => Decision::Drop,
            (Reach::Covers, Reach::Misses) => Decision::Keep,
            (included, _) => Decision::Descend {
                leaf: included == Reach::Covers,
            },
        }
    }

    /// The filtered answer: `{}` when nothing matched.
    pub fn apply(&self, value: Value) -> Value {
        let mut path = Vec::new();
        self.filter(value, &mut path)
            .unwrap_or_else(|| Value::Object(Map::new()))
    }

    /// A JSON body filtered; one that does not parse is left as it is.
    pub fn apply_to_body(&self, body: Vec<u8>) -> Vec<u8> {
        match serde_json::from_slice(&body) {
            Ok(answer) => serde_json::to_vec(&self.apply(answer)).unwrap_or(body),
            Err(_) => body,
        }
    }

    fn filter(&self, value: Value, path: &mut Vec<String>) -> Option<Value> {
        let keys: Vec<&str> = path.iter().map(String::as_str).collect();
        let leaf = match self.decide(&keys) {
            Decision::Keep => return Some(value),
            Decision::Drop => return None,
            Decision::Descend { leaf } => leaf,
        };
        match value {
            Value::Object(map) => {
                let mut kept = Map::new();
                for (key, v) in map {
                    path.push(key);
                    let filtered = self.filter(v, path);
                    let key = path.pop().unwrap_or_default();
                    if let Some(v) = filtered {
                        kept.insert(key, v);
                    }
                }
                (leaf || !kept.is_empty()).then_some(Value::Object(kept))
            }
            Value::Array(items) => {
                let kept: Vec<Value> = items
                    .into_iter()
                    .filter_map(|item| self.filter_element(item, path, leaf))
                    .collect();
                (leaf || !kept.is_empty()).then_some(Value::Array(kept))
            }
            scalar => leaf.then_some(scalar),
        }
    }

    /// An array element: at its array's path, which was decided already.
    fn filter_element(&self, item: Value, path: &mut Vec<String>, leaf: bool) -> Option<Value> {
        match item {
            Value::Object(_) | Value::Array(_) => self.filter(item, path),
            scalar => leaf.then_some(scalar),
        }
    }
}

fn strongest(patterns: &[Vec<Segment>], path: &[&str]) -> Reach {
    patterns
        .iter()
        .map(|p| reach(p, path))
        .max()
        .unwrap_or(Reach::Misses)
}

fn reach(pattern: &[Segment], path: &[&str]) -> Reach {
    match pattern.split_first() {
        None => Reach::Covers,
        Some((Segment::AnyDepth, rest)) => {
            let here = reach(rest, path);
            match path.split_first() {
                _ if here == Reach::Covers => here,
                Some((_, deeper)) => here.max(reach(pattern, deeper)),
                None => Reach::Below,
            }
        }
        Some((Segment::Name(name), rest)) => match path.split_first() {
            None => Reach::Below,
            Some((key, deeper)) if glob_match(name, key) => reach(rest, deeper),
            Some(_) => Reach::Misses,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bulk_answer() -> Value {
        json!({"took": 3, "errors": true, "items": [
            {"index": {"_index": "a", "_id": "1", "_version": 1, "result": "created",
                "_shards": {"total": 2, "successful": 1, "failed": 0}, "_seq_no": 0,
                "_primary_term": 1, "status": 201}},
            {"index": {"_index": "a", "_id": "2", "status": 400,
                "error": {"type": "mapper_parsing_exception", "reason": "r"}}}
        ]})
    }

    fn filtered(filter: &str, v: Value) -> Value {
        FilterPath::parse(filter).apply(v)
    }

    #[test]
    fn item_fields_are_picked_through_the_array_and_the_operation() {
        assert_eq!(
            filtered("took,items.*._id,items.*.status", bulk_answer()),
            json!({"took": 3, "items": [
                {"index": {"_id": "1", "status": 201}},
                {"index": {"_id": "2", "status": 400}}
            ]})
        );
    }

    #[test]
    fn elements_and_containers_without_a_match_are_left_out() {
        assert_eq!(
            filtered("errors,items.*.error", bulk_answer()),
            json!({"errors": true, "items": [
                {"index": {"error": {"type": "mapper_parsing_exception", "reason": "r"}}}
            ]})
        );
        assert_eq!(
            filtered(
                "items.*.error",
                json!({"errors": false, "items": [{"index": {"_id": "1"}}]})
            ),
            json!({})
        );
    }

    #[test]
    fn any_depth_globs_and_exclusions() {
        assert_eq!(
            filtered("**.total", bulk_answer()),
            json!({"items": [{"index": {"_shards": {"total": 2}}}]})
        );
        assert_eq!(
            filtered("items.*._s*", bulk_answer()),
            json!({"items": [{"index": {
                "_shards": {"total": 2, "successful": 1, "failed": 0}, "_seq_no": 0
            }}]})
        );
        assert_eq!(
            filtered("-items,-took", bulk_answer()),
            json!({"errors": true})
        );
        assert_eq!(
            filtered("items.*._shards,-**.successful", bulk_answer()),
            json!({"items": [{"index": {"_shards": {"total": 2, "failed": 0}}}]})
        );
    }

    #[test]
    fn decisions_for_fixed_paths() {
        let f = FilterPath::parse("took,items.*._id,-items.*._id.x");
        assert_eq!(f.decide(&["took"]), Decision::Keep);
        assert_eq!(f.decide(&["errors"]), Decision::Drop);
        assert_eq!(f.decide(&["items"]), Decision::Descend { leaf: false });
        assert_eq!(
            f.decide(&["items", "index", "_id"]),
            Decision::Descend { leaf: true }
        );
        assert_eq!(f.decide(&["items", "index", "status"]), Decision::Drop);
        assert_eq!(FilterPath::parse("").decide(&["a"]), Decision::Keep);
    }
}
