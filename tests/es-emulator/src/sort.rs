//! Search sorting: parsing `sort`, per-hit sort keys (`_id`, `_score`, `_doc`, `_index`,
//! keyword/numeric/date/ip fields; min for asc, max for desc on multi-valued fields),
//! comparison with `missing` placement, `search_after` values and the `sort` JSON of hits.

use std::cmp::Ordering;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::Value;

use crate::error::EsError;
use crate::extract::{to_key, FieldRef};
use crate::mapping::{Mapping, Ty};
use crate::ranked::Hit;
use crate::values::{cmp_keys, parse_date, parse_ip, Key};

pub struct SortSpec {
    pub field: String,
    pub desc: bool,
    pub missing_first: bool,
}

pub fn parse_sort(v: Option<&Value>) -> Result<Vec<SortSpec>, EsError> {
    let items: Vec<Value> = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a.clone(),
        Some(other) => vec![other.clone()],
    };
    items
        .iter()
        .map(|item| {
            let (field, opts) = match item {
                Value::String(s) => (s.clone(), Value::Null),
                Value::Object(o) => match o.iter().next() {
                    Some((f, v)) => (f.clone(), v.clone()),
                    None => return Err(EsError::parsing("empty sort object")),
                },
                _ => return Err(EsError::parsing("malformed sort")),
            };
            let order = match &opts {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => {
                    crate::strict::fields(o, "field_sort", &["order", "missing"])?;
                    o.get("order").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            };
            if let Some(m) = opts
                .get("missing")
                .filter(|m| !matches!(m.as_str(), Some("_first" | "_last")))
            {
                return Err(EsError::bad_request(format!(
                    "[field_sort] the emulator implements [missing] as _first or _last only, got {m}"
                )));
            }
            let desc = order.as_deref().map_or(field == "_score", |o| o == "desc");
            let missing_first = opts.get("missing").and_then(Value::as_str) == Some("_first");
            Ok(SortSpec {
                field,
                desc,
                missing_first,
            })
        })
        .collect()
}

/// Sets every hit's sort keys. Each field is resolved once per index (the hits of one index
/// are contiguous and share its mapping), not once per hit: resolving allocated the path
/// for every hit and field, most of the time a first sorted page took.
pub fn set_sort_keys(specs: &[SortSpec], hits: &mut [Hit]) {
    let mut fields: Option<(Arc<Mapping>, Vec<Option<FieldRef>>)> = None;
    for h in hits {
        let current = match &fields {
            Some((mapping, refs)) if Arc::ptr_eq(mapping, &h.mapping) => refs,
            _ => {
                let refs = specs
                    .iter()
                    .map(|s| h.mapping.field_ref(&s.field))
                    .collect();
                &fields.insert((h.mapping.clone(), refs)).1
            }
        };
        h.sort = specs
            .iter()
            .zip(current)
            .map(|(s, f)| sort_key(s, f.as_ref(), h))
            .collect();
    }
}

fn sort_key(s: &SortSpec, field: Option<&FieldRef>, h: &Hit) -> Option<Key> {
    match s.field.as_str() {
        "_id" => Some(Key::Str(h.id.to_string())),
        "_index" => Some(Key::Str(h.index.to_string())),
        "_score" => Some(Key::Double(f64::from(h.score))),
        "_doc" => Some(Key::Long(h.doc.seq_no)),
        _ => extreme_key(field?, &h.doc.source, s.desc),
    }
}

/// The smallest (with `max`, the largest) key of a field in a document, as its sort key:
/// kept while visiting the values, as a first sorted page computes one for every match.
fn extreme_key(field: &FieldRef, src: &Value, max: bool) -> Option<Key> {
    let wanted = if max {
        Ordering::Greater
    } else {
        Ordering::Less
    };
    let mut best: Option<Key> = None;
    field.any(src, &mut |v| {
        if let Ok(Some(key)) = to_key(field.ty, v) {
            let better = match &best {
                Some(b) => cmp_keys(&key, b) == wanted,
                None => true,
            };
            if better {
                best = Some(key);
            }
        }
        false
    });
    best
}

pub fn cmp_sort(specs: &[SortSpec], a: &[Option<Key>], b: &[Option<Key>]) -> Ordering {
    for (s, (x, y)) in specs.iter().zip(a.iter().zip(b.iter())) {
        let o = match (x, y) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => {
                if s.missing_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (Some(_), None) => {
                if s.missing_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            (Some(x), Some(y)) => {
                if s.desc {
                    cmp_keys(y, x)
                } else {
                    cmp_keys(x, y)
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

pub fn after_value(v: &Value, ty: Option<Ty>) -> Option<Key> {
    match (v, ty) {
        (Value::Null, _) => None,
        (_, Some(Ty::Date)) => parse_date(v).map(Key::Date),
        (Value::String(s), Some(Ty::Ip)) => parse_ip(s).map(Key::Ip),
        (Value::String(s), _) => Some(Key::Str(s.clone())),
        (Value::Number(n), _) => n
            .as_i64()
            .map(Key::Long)
            .or_else(|| n.as_f64().map(Key::Double)),
        (Value::Bool(b), _) => Some(Key::Bool(*b)),
        _ => None,
    }
}

/// A hit's `sort` values as ES writes them (a missing value as the extreme of its order),
/// serialised from its keys.
pub struct SortValues<'a> {
    pub specs: &'a [SortSpec],
    pub keys: &'a [Option<Key>],
}

impl Serialize for SortValues<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.specs.len()))?;
        for (spec, key) in self.specs.iter().zip(self.keys) {
            match key {
                Some(k) => seq.serialize_element(k)?,
                None if spec.desc => seq.serialize_element(&i64::MIN)?,
                None => seq.serialize_element(&i64::MAX)?,
            }
        }
        seq.end()
    }
}
