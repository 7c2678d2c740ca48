//! Aggregations: `composite` (terms sources, `size`, `after`, `after_key`, `missing_bucket`),
//! `terms`, `cardinality`, `value_count`, `min`, `max`, `sum`, `avg`, with sub-aggregations.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use serde_json::{json, Map, Value};

use crate::error::EsError;
use crate::mapping::{Mapping, Ty};
use crate::values::{cmp_keys, fmt_date, parse_date, parse_ip, Key};

/// `search.max_buckets` default.
const MAX_BUCKETS: usize = 65_535;

/// A matched document as aggregations see it.
#[derive(Clone, Copy)]
pub struct DocRef<'a> {
    pub mapping: &'a Mapping,
    pub source: &'a Value,
}

fn agg_error(reason: impl Into<String>) -> EsError {
    EsError::bad_request(reason)
}

fn field_of(body: &Value, kind: &str) -> Result<String, EsError> {
    body.get("field")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| agg_error(format!("Required [field] for [{kind}] in the emulator")))
}

fn keys_of(d: &DocRef, field: &str) -> (Option<Ty>, Vec<Key>) {
    let (ty, mut keys) = d.mapping.keys(d.source, field);
    if ty == Some(Ty::Text) {
        keys.clear();
    }
    (ty, keys)
}

/// Runs every aggregation of an `aggs` object over `docs`.
pub fn run(spec: &Map<String, Value>, docs: &[DocRef], top_level: bool) -> Result<Value, EsError> {
    let mut out = Map::new();
    for (name, def) in spec {
        let Some(def) = def.as_object() else {
            return Err(EsError::parsing(format!(
                "Expected [START_OBJECT] under [{name}]"
            )));
        };
        let subs = def
            .get("aggs")
            .or_else(|| def.get("aggregations"))
            .and_then(Value::as_object);
        let Some((kind, body)) = def
            .iter()
            .find(|(k, _)| !matches!(k.as_str(), "aggs" | "aggregations" | "meta"))
        else {
            return Err(EsError::parsing(format!(
                "Missing definition for aggregation [{name}]"
            )));
        };
        let mut result = match kind.as_str() {
            "composite" if !top_level => return Err(agg_error(format!("[composite] aggregation cannot be used with a parent aggregation of type: [{name}]"))),
            "composite" => composite(name, body, subs, docs)?,
            "terms" => terms(body, subs, docs)?,
            "cardinality" => {
                if let Some(p) = body.get("precision_threshold").and_then(Value::as_i64) {
                    if p < 0 {
                        return Err(agg_error(format!("[precisionThreshold] must be greater than or equal to 0. Found [{p}] in [{name}]")));
                    }
                }
                let field = field_of(body, kind)?;
                let mut seen = HashSet::new();
                for d in docs {
                    for k in keys_of(d, &field).1 {
                        seen.insert(serde_json::to_string(&k.to_json()).unwrap_or_default());
                    }
                    if let (true, Some(m)) = (keys_of(d, &field).1.is_empty(), body.get("missing")) {
                        seen.insert(m.to_string());
                    }
                }
                json!({"value": seen.len()})
            }
            "value_count" => {
                let field = field_of(body, kind)?;
                json!({"value": docs.iter().map(|d| keys_of(d, &field).1.len()).sum::<usize>()})
            }
            "min" | "max" | "sum" | "avg" => metric(kind, body, docs)?,
            other => return Err(EsError::new(400, "named_object_not_found_exception", format!("[1:1] unknown field [{other}]: the emulator does not support this aggregation"))),
        };
        if let (Some(meta), Some(o)) = (def.get("meta"), result.as_object_mut()) {
            o.insert("meta".into(), meta.clone());
        }
        out.insert(name.clone(), result);
    }
    Ok(Value::Object(out))
}

fn metric(kind: &str, body: &Value, docs: &[DocRef]) -> Result<Value, EsError> {
    let field = field_of(body, kind)?;
    let mut vals = Vec::new();
    let mut is_date = false;
    for d in docs {
        let (ty, keys) = keys_of(d, &field);
        is_date |= ty == Some(Ty::Date);
        vals.extend(keys.iter().filter_map(Key::numeric));
    }
    let v = match kind {
        "min" => vals.iter().copied().reduce(f64::min),
        "max" => vals.iter().copied().reduce(f64::max),
        "sum" => Some(vals.iter().sum()),
        _ => (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64),
    };
    let mut out = json!({"value": v});
    if let (true, Some(v)) = (is_date && kind != "sum", v) {
        out["value_as_string"] = json!(fmt_date(v as i64));
    }
    Ok(out)
}

fn bucket_key(k: &Key, ty: Option<Ty>) -> (Value, Option<String>) {
    match (k, ty) {
        (Key::Date(ms), _) => (json!(ms), Some(fmt_date(*ms))),
        (Key::Bool(b), _) => (json!(u8::from(*b)), Some(b.to_string())),
        _ => (k.to_json(), None),
    }
}

fn terms(
    body: &Value,
    subs: Option<&Map<String, Value>>,
    docs: &[DocRef],
) -> Result<Value, EsError> {
    let field = field_of(body, "terms")?;
    let size = body.get("size").and_then(Value::as_u64).unwrap_or(10) as usize;
    let min_doc_count = body
        .get("min_doc_count")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    let mut groups: Vec<(Key, Option<Ty>, Vec<DocRef>)> = Vec::new();
    for d in docs {
        let (ty, mut keys) = keys_of(d, &field);
        keys.sort_by(cmp_keys);
        keys.dedup_by(|a, b| cmp_keys(a, b).is_eq());
        for k in keys {
            match groups.binary_search_by(|(g, _, _)| cmp_keys(g, &k)) {
                Ok(i) => groups[i].2.push(*d),
                Err(i) => groups.insert(i, (k, ty, vec![*d])),
            }
        }
    }
    groups.retain(|g| g.2.len() >= min_doc_count);
    let order = body
        .get("order")
        .and_then(Value::as_object)
        .and_then(|o| o.iter().next())
        .map(|(k, v)| (k.clone(), v.as_str() == Some("asc")));
    match order.as_ref().map(|(k, asc)| (k.as_str(), *asc)) {
        Some(("_key", asc)) => groups.sort_by(|a, b| {
            if asc {
                cmp_keys(&a.0, &b.0)
            } else {
                cmp_keys(&b.0, &a.0)
            }
        }),
        Some(("_count", true)) => {
            groups.sort_by(|a, b| a.2.len().cmp(&b.2.len()).then(cmp_keys(&a.0, &b.0)))
        }
        _ => groups.sort_by(|a, b| b.2.len().cmp(&a.2.len()).then(cmp_keys(&a.0, &b.0))),
    }
    let other: usize = groups.iter().skip(size).map(|g| g.2.len()).sum();
    let mut buckets = Vec::new();
    for (k, ty, ds) in groups.into_iter().take(size) {
        let (key, as_string) = bucket_key(&k, ty);
        let mut b = json!({"key": key, "doc_count": ds.len()});
        if let Some(s) = as_string {
            b["key_as_string"] = json!(s);
        }
        add_subs(&mut b, subs, &ds)?;
        buckets.push(b);
    }
    Ok(json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": other, "buckets": buckets}))
}

fn add_subs(
    bucket: &mut Value,
    subs: Option<&Map<String, Value>>,
    docs: &[DocRef],
) -> Result<(), EsError> {
    if let (Some(subs), Some(b)) = (subs, bucket.as_object_mut()) {
        if let Value::Object(res) = run(subs, docs, false)? {
            b.extend(res);
        }
    }
    Ok(())
}

struct Source {
    name: String,
    field: String,
    desc: bool,
    missing_bucket: bool,
    missing_first: bool,
}

type CompositeKey = Vec<Option<Key>>;

fn cmp_composite(sources: &[Source], a: &CompositeKey, b: &CompositeKey) -> Ordering {
    for (s, (x, y)) in sources.iter().zip(a.iter().zip(b.iter())) {
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

fn parse_sources(body: &Value) -> Result<Vec<Source>, EsError> {
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
        if out.iter().any(|o| &o.name == name) {
            return Err(agg_error(format!(
                "Composite source names must be unique, found duplicates: [{name}]"
            )));
        }
        let Some(terms) = def.get("terms") else {
            return Err(agg_error(format!(
                "the emulator supports only [terms] composite sources, source [{name}] is not one"
            )));
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
        });
    }
    Ok(out)
}

fn after_key(v: &Value, ty: Option<Ty>) -> Option<Key> {
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

fn composite(
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
    let mut groups: BTreeMap<usize, (CompositeKey, Vec<DocRef>)> = BTreeMap::new();
    let mut index: Vec<(CompositeKey, usize)> = Vec::new();
    for d in docs {
        let mut combos: Vec<CompositeKey> = vec![Vec::new()];
        for (i, s) in sources.iter().enumerate() {
            let (ty, mut keys) = keys_of(d, &s.field);
            if ty.is_some() {
                types[i] = ty;
            }
            keys.sort_by(cmp_keys);
            keys.dedup_by(|a, b| cmp_keys(a, b).is_eq());
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
                        c.push(o.clone());
                        c
                    })
                })
                .collect();
        }
        for c in combos {
            match index.binary_search_by(|(k, _)| cmp_composite(&sources, k, &c)) {
                Ok(pos) => {
                    if let Some(g) = groups.get_mut(&index[pos].1) {
                        g.1.push(*d);
                    }
                }
                Err(pos) => {
                    let id = groups.len();
                    index.insert(pos, (c.clone(), id));
                    groups.insert(id, (c, vec![*d]));
                }
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
                    Some(v) => Ok(after_key(v, *ty)),
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err(EsError::parsing("[after] must be an object")),
    };
    let mut buckets = Vec::new();
    let mut last: Option<Value> = None;
    for (key, id) in &index {
        if after
            .as_ref()
            .is_some_and(|a| cmp_composite(&sources, key, a) != Ordering::Greater)
        {
            continue;
        }
        if buckets.len() == size {
            break;
        }
        let Some((_, ds)) = groups.get(id) else {
            continue;
        };
        let key_json: Map<String, Value> = sources
            .iter()
            .zip(key.iter())
            .map(|(s, k)| (s.name.clone(), k.as_ref().map_or(Value::Null, Key::to_json)))
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
