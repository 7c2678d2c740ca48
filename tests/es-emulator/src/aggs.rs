//! Aggregations: dispatch of an `aggs` object, `cardinality`, `value_count`, `min`, `max`,
//! `sum`, `avg`, and sub-aggregations per bucket (`terms` and `composite` live in modules
//! of their own).

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::error::EsError;
use crate::extract::FieldRef;
use crate::mapping::{Mapping, Ty};
use crate::values::{fmt_date, Key};

/// `search.max_buckets` default.
pub(crate) const MAX_BUCKETS: usize = 65_535;

/// A matched document as aggregations see it.
#[derive(Clone, Copy)]
pub struct DocRef<'a> {
    pub mapping: &'a Mapping,
    pub source: &'a Value,
    /// The shard it was found on: its index and shard number.
    pub shard: (&'a str, u32),
}

pub(crate) fn agg_error(reason: impl Into<String>) -> EsError {
    EsError::bad_request(reason)
}

pub(crate) fn field_of(body: &Value, kind: &str) -> Result<String, EsError> {
    body.get("field")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| agg_error(format!("Required [field] for [{kind}] in the emulator")))
}

/// Reads one field's keys from documents of possibly several indices, resolving the field
/// once per mapping instead of once per document. `text` fields have no doc values.
pub(crate) struct FieldKeys<'f> {
    field: &'f str,
    cache: Vec<(*const Mapping, Option<FieldRef>)>,
}

impl<'f> FieldKeys<'f> {
    pub(crate) fn new(field: &'f str) -> FieldKeys<'f> {
        FieldKeys {
            field,
            cache: Vec::new(),
        }
    }

    pub(crate) fn keys(&mut self, d: &DocRef) -> (Option<Ty>, Vec<Key>) {
        let ptr: *const Mapping = d.mapping;
        let pos = match self.cache.iter().position(|(m, _)| std::ptr::eq(*m, ptr)) {
            Some(p) => p,
            None => {
                self.cache.push((ptr, d.mapping.field_ref(self.field)));
                self.cache.len() - 1
            }
        };
        match &self.cache[pos].1 {
            Some(f) if f.ty != Ty::Text => (Some(f.ty), f.keys(d.source)),
            Some(f) => (Some(f.ty), Vec::new()),
            None => (None, Vec::new()),
        }
    }
}

/// The options each aggregation implements (`None`: it checks its own, as `composite`).
fn options(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "terms" => &[
            "field",
            "size",
            "shard_size",
            "min_doc_count",
            "order",
            "missing",
        ],
        "cardinality" => &["field", "precision_threshold", "missing"],
        "value_count" | "min" | "max" | "sum" | "avg" => &["field", "missing"],
        _ => return None,
    })
}

/// `missing` as a key of the field's type, for documents without a value.
pub(crate) fn missing_key(body: &Value, ty: Option<Ty>) -> Option<Key> {
    body.get("missing")
        .filter(|m| !m.is_null())
        .and_then(|m| crate::composite::typed_key(m, ty))
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
        let mut kinds = def
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "aggs" | "aggregations" | "meta"));
        let Some((kind, body)) = kinds.next() else {
            return Err(EsError::parsing(format!(
                "Missing definition for aggregation [{name}]"
            )));
        };
        if let Some((second, _)) = kinds.next() {
            return Err(EsError::parsing(format!(
                "Found two aggregation type definitions in [{name}]: [{kind}] and [{second}]"
            )));
        }
        let Some(opts) = body.as_object() else {
            return Err(EsError::parsing(format!(
                "Expected [START_OBJECT] under [{kind}], but got a [{}] in [{name}]",
                crate::strict::token(body)
            )));
        };
        if let Some(allowed) = options(kind) {
            crate::strict::fields(opts, kind, allowed)?;
        }
        let mut result = match kind.as_str() {
            "composite" if !top_level => return Err(agg_error(format!("[composite] aggregation cannot be used with a parent aggregation of type: [{name}]"))),
            "composite" => crate::composite::composite(name, body, subs, docs)?,
            "terms" => crate::terms::terms(body, subs, docs)?,
            "cardinality" => {
                if let Some(p) = body.get("precision_threshold").and_then(Value::as_i64) {
                    if p < 0 {
                        return Err(agg_error(format!("[precisionThreshold] must be greater than or equal to 0. Found [{p}] in [{name}]")));
                    }
                }
                let field = field_of(body, kind)?;
                let mut seen = HashSet::new();
                let mut fk = FieldKeys::new(&field);
                for d in docs {
                    let keys = fk.keys(d).1;
                    let empty = keys.is_empty();
                    for k in keys {
                        seen.insert(serde_json::to_string(&k.to_json()).unwrap_or_default());
                    }
                    if let (true, Some(m)) = (empty, body.get("missing").filter(|m| !m.is_null())) {
                        seen.insert(m.to_string());
                    }
                }
                json!({"value": seen.len()})
            }
            "value_count" => {
                let field = field_of(body, kind)?;
                // `missing` stands in for the value of a document that has none.
                let missing = usize::from(body.get("missing").is_some_and(|m| !m.is_null()));
                let mut fk = FieldKeys::new(&field);
                let n: usize = docs
                    .iter()
                    .map(|d| match fk.keys(d).1.len() {
                        0 => missing,
                        n => n,
                    })
                    .sum();
                json!({ "value": n })
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
    let mut fk = FieldKeys::new(&field);
    for d in docs {
        let (ty, keys) = fk.keys(d);
        is_date |= ty == Some(Ty::Date);
        if keys.is_empty() {
            vals.extend(missing_key(body, ty).as_ref().and_then(Key::numeric));
        }
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

pub(crate) fn bucket_key(k: &Key, ty: Option<Ty>) -> (Value, Option<String>) {
    match (k, ty) {
        (Key::Date(ms), _) => (json!(ms), Some(fmt_date(*ms))),
        (Key::Bool(b), _) => (json!(u8::from(*b)), Some(b.to_string())),
        _ => (k.to_json(), None),
    }
}

pub(crate) fn add_subs(
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
