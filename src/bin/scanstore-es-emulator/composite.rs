//! The `composite` aggregation: `terms` sources (order, `missing_bucket`, `missing_order`),
//! multi-valued documents in several buckets, `size`, `after`, and `after_key`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::aggs::{add_subs, agg_error, field_of, keys_of, DocRef, MAX_BUCKETS};
use crate::error::EsError;
use crate::mapping::Ty;
use crate::values::{cmp_keys, parse_date, parse_ip, Key};

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
