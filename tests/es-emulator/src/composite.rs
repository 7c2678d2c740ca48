//! The `composite` aggregation: `terms` sources (order, `missing_bucket`, `missing_order`),
//! multi-valued documents in several buckets, `size`, `after`, and `after_key`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::aggs::{add_subs, agg_error, field_of, DocRef, FieldKeys, MAX_BUCKETS};
use crate::date_histogram::DateHisto;
use crate::error::EsError;
use crate::mapping::Ty;
use crate::values::{cmp_keys, parse_date, parse_ip, Key};

struct Source {
    name: String,
    field: String,
    desc: bool,
    missing_bucket: bool,
    missing_first: bool,
    /// `Some` for a `date_histogram` source, `None` for `terms`.
    histo: Option<DateHisto>,
}

impl Source {
    /// The source's keys of one document's values (date histograms round them).
    fn bucket_keys(&self, mut keys: Vec<Key>) -> Vec<Key> {
        if let Some(h) = &self.histo {
            keys = keys
                .into_iter()
                .filter_map(|k| match k {
                    Key::Date(ms) | Key::Long(ms) => Some(Key::Date(h.round(ms))),
                    _ => None,
                })
                .collect();
        }
        keys.sort_by(cmp_keys);
        keys.dedup_by(|a, b| cmp_keys(a, b).is_eq());
        keys
    }

    fn key_json(&self, k: &Key) -> Value {
        match (&self.histo, k) {
            (Some(h), Key::Date(ms)) => h.key_json(*ms),
            _ => k.to_json(),
        }
    }
}

/// One position of a composite key, ordered by its source's `order` and `missing_order`,
/// so a whole key (`Vec<Part>`) orders lexicographically as ES orders buckets.
#[derive(Debug, Clone)]
struct Part {
    key: Option<Key>,
    desc: bool,
    missing_first: bool,
}

impl Ord for Part {
    fn cmp(&self, other: &Part) -> Ordering {
        match (&self.key, &other.key) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) if self.missing_first => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) if self.missing_first => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) if self.desc => cmp_keys(y, x),
            (Some(x), Some(y)) => cmp_keys(x, y),
        }
    }
}

impl PartialOrd for Part {
    fn partial_cmp(&self, other: &Part) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Part {
    fn eq(&self, other: &Part) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Part {}

type CompositeKey = Vec<Part>;

fn part(s: &Source, key: Option<Key>) -> Part {
    Part {
        key,
        desc: s.desc,
        missing_first: s.missing_first,
    }
}

const COMPOSITE: &[&str] = &["sources", "size", "after"];
const TERMS_SOURCE: &[&str] = &["field", "order", "missing_bucket", "missing_order"];
const HISTO_SOURCE: &[&str] = &[
    "field",
    "order",
    "missing_bucket",
    "missing_order",
    "calendar_interval",
    "fixed_interval",
    "interval",
    "offset",
    "time_zone",
    "format",
];

fn opts(v: &Value) -> Result<&Map<String, Value>, EsError> {
    v.as_object()
        .ok_or_else(|| EsError::parsing("composite source must be an object"))
}

fn parse_sources(body: &Value) -> Result<Vec<Source>, EsError> {
    crate::strict::fields(opts(body)?, "composite", COMPOSITE)?;
    let Some(sources) = body.get("sources") else {
        return Err(EsError::new(
            400,
            "x_content_parse_exception",
            "[composite] Required [sources]",
        ));
    };
    let list = sources
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| agg_error("Composite [sources] cannot be null or empty"))?;
    let mut out: Vec<Source> = Vec::new();
    for s in list {
        let Some((name, def)) = s.as_object().and_then(|o| o.iter().next()) else {
            return Err(EsError::parsing("composite source must be an object"));
        };
        if let Some(kind) = def.as_object().and_then(|d| d.keys().nth(1)) {
            return Err(EsError::parsing(format!(
                "Found two value source types in [{name}]: [{}] and [{kind}]",
                def.as_object()
                    .and_then(|d| d.keys().next())
                    .map_or("", |k| k.as_str())
            )));
        }
        if out.iter().any(|o| &o.name == name) {
            return Err(agg_error(format!(
                "Composite source names must be unique, found duplicates: [{name}]"
            )));
        }
        let (terms, histo) = match (def.get("terms"), def.get("date_histogram")) {
            (Some(t), None) => {
                crate::strict::fields(opts(t)?, "terms", TERMS_SOURCE)?;
                (t, None)
            }
            (None, Some(h)) => {
                crate::strict::fields(opts(h)?, "date_histogram", HISTO_SOURCE)?;
                (h, Some(DateHisto::parse(h)?))
            }
            _ => {
                return Err(agg_error(format!(
                    "the emulator supports [terms] and [date_histogram] composite sources, source [{name}] is neither"
                )))
            }
        };
        let desc = terms.get("order").and_then(Value::as_str) == Some("desc");
        let missing_bucket = terms
            .get("missing_bucket")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let missing_first = match terms.get("missing_order").and_then(Value::as_str) {
            Some("first") => true,
            Some("last") => false,
            _ => !desc,
        };
        out.push(Source {
            name: name.clone(),
            field: field_of(terms, "terms")?,
            desc,
            missing_bucket,
            missing_first,
            histo,
        });
    }
    Ok(out)
}

/// A JSON value as a key of a field of type `ty` (an `after` key, a `missing` value).
pub(crate) fn typed_key(v: &Value, ty: Option<Ty>) -> Option<Key> {
    match (v, ty) {
        (Value::Null, _) => None,
        (_, Some(Ty::Date)) => parse_date(v).map(Key::Date),
        (Value::String(s), Some(Ty::Ip)) => parse_ip(s).map(Key::Ip),
        (Value::String(s), _) => Some(Key::Str(s.clone())),
        (Value::Number(n), Some(t))
            if t.is_numeric() && !matches!(t, Ty::Double | Ty::Float | Ty::HalfFloat) =>
        {
            n.as_i64().map(Key::Long)
        }
        (Value::Number(n), _) => n
            .as_i64()
            .map(Key::Long)
            .or_else(|| n.as_f64().map(Key::Double)),
        (Value::Bool(b), _) => Some(Key::Bool(*b)),
        _ => None,
    }
}

pub fn composite(
    _name: &str,
    body: &Value,
    subs: Option<&Map<String, Value>>,
    docs: &[DocRef],
) -> Result<Value, EsError> {
    let sources = parse_sources(body)?;
    let size = body.get("size").and_then(Value::as_u64).unwrap_or(10) as usize;
    if size > MAX_BUCKETS {
        return Err(EsError::new(400, "too_many_buckets_exception", format!(
            "Trying to create too many buckets. Must be less than or equal to: [{MAX_BUCKETS}] but was [{size}]. This limit can be set by changing the [search.max_buckets] cluster level setting."
        )).with("max_buckets", MAX_BUCKETS));
    }
    let mut types: Vec<Option<Ty>> = vec![None; sources.len()];
    let mut readers: Vec<FieldKeys> = sources.iter().map(|s| FieldKeys::new(&s.field)).collect();
    // `after` is typed by the first mapping that knows each field.
    for d in docs {
        if types.iter().all(Option::is_some) {
            break;
        }
        for (i, s) in sources.iter().enumerate() {
            if types[i].is_none() {
                types[i] = d.mapping.field_ref(&s.field).map(|f| f.ty);
            }
        }
    }
    let after: Option<CompositeKey> = match body.get("after") {
        None => None,
        Some(Value::Object(a)) => Some(
            sources
                .iter()
                .zip(types.iter())
                .map(|(s, ty)| match a.get(&s.name) {
                    None => Err(agg_error(format!(
                        "[after] has 0 value(s) but [sources] has {}",
                        sources.len()
                    ))),
                    Some(v) => Ok(part(
                        s,
                        match &s.histo {
                            Some(h) => h.parse_after(v).map(Key::Date),
                            None => typed_key(v, *ty),
                        },
                    )),
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err(EsError::parsing("[after] must be an object")),
    };
    // Top-`size` buckets after `after`, as ES's priority queue keeps them.
    let mut groups: BTreeMap<CompositeKey, Vec<DocRef>> = BTreeMap::new();
    for d in docs {
        let mut combos: Vec<CompositeKey> = vec![Vec::new()];
        for (i, s) in sources.iter().enumerate() {
            let keys = s.bucket_keys(readers[i].keys(d).1);
            let options: Vec<Option<Key>> = if keys.is_empty() {
                if s.missing_bucket {
                    vec![None]
                } else {
                    Vec::new()
                }
            } else {
                keys.into_iter().map(Some).collect()
            };
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    options.iter().map(move |o| {
                        let mut c = c.clone();
                        c.push(part(s, o.clone()));
                        c
                    })
                })
                .collect();
        }
        for c in combos {
            if after.as_ref().is_some_and(|a| c <= *a) {
                continue;
            }
            if let Some(group) = groups.get_mut(&c) {
                group.push(*d);
                continue;
            }
            if groups.len() == size && groups.last_key_value().is_some_and(|(last, _)| c > *last) {
                continue;
            }
            groups.insert(c, vec![*d]);
            if groups.len() > size {
                groups.pop_last();
            }
        }
    }
    let mut buckets = Vec::new();
    let mut last: Option<Value> = None;
    for (key, ds) in &groups {
        let key_json: Map<String, Value> = sources
            .iter()
            .zip(key.iter())
            .map(|(s, k)| {
                (
                    s.name.clone(),
                    k.key.as_ref().map_or(Value::Null, |k| s.key_json(k)),
                )
            })
            .collect();
        let mut b = json!({"key": key_json, "doc_count": ds.len()});
        add_subs(&mut b, subs, ds)?;
        last = Some(Value::Object(key_json));
        buckets.push(b);
    }
    let mut out = json!({"buckets": buckets});
    if let Some(k) = last {
        out["after_key"] = k;
    }
    Ok(out)
}
