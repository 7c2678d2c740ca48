//! Index mappings: parsing, strict/dynamic enforcement at index time, and typed value
//! extraction (`_source` field → [`Key`]s) for queries, sorts and aggregations.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::error::EsError;
use crate::values::{parse_date, parse_ip, Key};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dynamic {
    True,
    False,
    Strict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Keyword,
    Text,
    Ip,
    Date,
    Long,
    Integer,
    Short,
    Byte,
    UnsignedLong,
    Double,
    Float,
    HalfFloat,
    Boolean,
    Object,
    /// A type the emulator stores but does not index (geo, binary, ranges, vectors, …):
    /// accepted in mappings and documents, matched only by `exists`.
    Opaque,
}

impl Ty {
    fn parse(name: &str) -> Option<Ty> {
        Some(match name {
            "keyword" | "constant_keyword" | "wildcard" => Ty::Keyword,
            "text" | "match_only_text" => Ty::Text,
            "ip" => Ty::Ip,
            "date" | "date_nanos" => Ty::Date,
            "long" => Ty::Long,
            "integer" => Ty::Integer,
            "short" => Ty::Short,
            "byte" => Ty::Byte,
            "unsigned_long" => Ty::UnsignedLong,
            "double" | "scaled_float" => Ty::Double,
            "float" => Ty::Float,
            "half_float" => Ty::HalfFloat,
            "boolean" => Ty::Boolean,
            "object" | "nested" | "flattened" => Ty::Object,
            "binary" | "geo_point" | "geo_shape" | "point" | "shape" | "integer_range"
            | "float_range" | "long_range" | "double_range" | "date_range" | "ip_range"
            | "alias" | "join" | "percolator" | "rank_feature" | "rank_features"
            | "dense_vector" | "knn_vector" | "sparse_vector" | "search_as_you_type"
            | "completion" | "token_count" | "histogram" | "version" | "flat_object"
            | "semantic_text" | "murmur3" => Ty::Opaque,
            _ => return None,
        })
    }

    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Ty::Long
                | Ty::Integer
                | Ty::Short
                | Ty::Byte
                | Ty::UnsignedLong
                | Ty::Double
                | Ty::Float
                | Ty::HalfFloat
        )
    }
}

#[derive(Debug, Clone)]
pub struct Field {
    pub ty: Ty,
    /// The declared type name (echoed by GET _mapping).
    pub type_name: String,
    pub props: BTreeMap<String, Field>,
    pub dynamic: Option<Dynamic>,
    /// Multi-fields (`fields: {keyword: {type: keyword}}`).
    pub fields: BTreeMap<String, Field>,
    pub ignore_above: Option<usize>,
    /// Other mapping parameters, echoed unchanged.
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone)]
pub struct Mapping {
    pub dynamic: Dynamic,
    pub props: BTreeMap<String, Field>,
    pub extra: Map<String, Value>,
}

fn mapper_error(reason: impl Into<String>) -> EsError {
    EsError::new(400, "mapper_parsing_exception", reason)
}

fn parse_dynamic(v: &Value) -> Result<Dynamic, EsError> {
    match v {
        Value::Bool(true) => Ok(Dynamic::True),
        Value::Bool(false) => Ok(Dynamic::False),
        Value::String(s) if s == "true" || s == "runtime" => Ok(Dynamic::True),
        Value::String(s) if s == "false" => Ok(Dynamic::False),
        Value::String(s) if s == "strict" => Ok(Dynamic::Strict),
        other => Err(mapper_error(format!(
            "Could not convert [dynamic] to boolean: {other}"
        ))),
    }
}

fn parse_props(v: Option<&Value>) -> Result<BTreeMap<String, Field>, EsError> {
    let mut out = BTreeMap::new();
    let Some(v) = v else { return Ok(out) };
    let Some(obj) = v.as_object() else {
        return Err(mapper_error("Expected map for property [properties]"));
    };
    for (name, def) in obj {
        if name.trim().is_empty() {
            return Err(EsError::bad_request("field name cannot be an empty string"));
        }
        out.insert(name.clone(), parse_field(name, def)?);
    }
    Ok(out)
}

fn parse_field(name: &str, def: &Value) -> Result<Field, EsError> {
    let Some(obj) = def.as_object() else {
        return Err(mapper_error(format!(
            "Expected map for property [fields] on field [{name}]"
        )));
    };
    let has_props = obj.contains_key("properties");
    let type_name = match obj.get("type") {
        Some(Value::String(t)) => t.clone(),
        None if has_props || obj.contains_key("dynamic") => "object".to_owned(),
        None => "object".to_owned(),
        Some(other) => {
            return Err(mapper_error(format!(
                "No type specified for field [{name}]: {other}"
            )))
        }
    };
    let ty = Ty::parse(&type_name).ok_or_else(|| {
        mapper_error(format!(
            "No handler for type [{type_name}] declared on field [{name}]"
        ))
    })?;
    let mut extra = Map::new();
    for (k, v) in obj {
        if !matches!(
            k.as_str(),
            "type" | "properties" | "dynamic" | "fields" | "ignore_above"
        ) {
            extra.insert(k.clone(), v.clone());
        }
    }
    Ok(Field {
        ty,
        type_name,
        props: parse_props(obj.get("properties"))?,
        dynamic: obj.get("dynamic").map(parse_dynamic).transpose()?,
        fields: parse_props(obj.get("fields"))?,
        ignore_above: obj
            .get("ignore_above")
            .and_then(Value::as_u64)
            .map(|n| n as usize),
        extra,
    })
}

fn field_json(f: &Field) -> Value {
    let mut m = Map::new();
    if f.ty != Ty::Object || f.type_name != "object" {
        m.insert("type".into(), json!(f.type_name));
    }
    if let Some(d) = f.dynamic {
        m.insert("dynamic".into(), dynamic_json(d));
    }
    if let Some(n) = f.ignore_above {
        m.insert("ignore_above".into(), json!(n));
    }
    m.extend(f.extra.clone());
    if !f.fields.is_empty() {
        m.insert("fields".into(), props_json(&f.fields));
    }
    if !f.props.is_empty() {
        m.insert("properties".into(), props_json(&f.props));
    }
    Value::Object(m)
}

fn dynamic_json(d: Dynamic) -> Value {
    match d {
        Dynamic::True => json!("true"),
        Dynamic::False => json!("false"),
        Dynamic::Strict => json!("strict"),
    }
}

fn props_json(p: &BTreeMap<String, Field>) -> Value {
    Value::Object(p.iter().map(|(k, f)| (k.clone(), field_json(f))).collect())
}

/// Converts one JSON scalar to the field's key type; `Err` carries the cause message.
pub fn to_key(ty: Ty, v: &Value) -> Result<Option<Key>, String> {
    let bad = || {
        format!(
            "For input string: \"{}\"",
            v.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string())
        )
    };
    Ok(Some(match ty {
        Ty::Keyword | Ty::Text => match v {
            Value::String(s) => Key::Str(s.clone()),
            Value::Number(n) => Key::Str(n.to_string()),
            Value::Bool(b) => Key::Str(b.to_string()),
            _ => return Err("expected a scalar value".into()),
        },
        Ty::Long | Ty::Integer | Ty::Short | Ty::Byte | Ty::UnsignedLong => {
            let n = match v {
                Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f.trunc() as i64)),
                Value::String(s) => s.trim().parse::<i64>().ok().or_else(|| s.trim().parse::<f64>().ok().map(|f| f.trunc() as i64)),
                _ => None,
            }
            .ok_or_else(bad)?;
            let (lo, hi) = match ty {
                Ty::Integer => (i32::MIN as i64, i32::MAX as i64),
                Ty::Short => (i16::MIN as i64, i16::MAX as i64),
                Ty::Byte => (i8::MIN as i64, i8::MAX as i64),
                Ty::UnsignedLong => (0, i64::MAX),
                _ => (i64::MIN, i64::MAX),
            };
            if n < lo || n > hi {
                return Err(format!("Value [{n}] is out of range"));
            }
            Key::Long(n)
        }
        Ty::Double | Ty::Float | Ty::HalfFloat => match v {
            Value::Number(n) => Key::Double(n.as_f64().ok_or_else(bad)?),
            Value::String(s) => Key::Double(s.trim().parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        },
        Ty::Boolean => match v {
            Value::Bool(b) => Key::Bool(*b),
            Value::String(s) if s == "true" => Key::Bool(true),
            Value::String(s) if s == "false" || s.is_empty() => Key::Bool(false),
            _ => return Err(format!("Failed to parse value [{v}] as only [true] or [false] are allowed.")),
        },
        Ty::Ip => match v {
            Value::String(s) => Key::Ip(parse_ip(s).ok_or_else(|| format!("'{s}' is not an IP string literal."))?),
            _ => return Err(format!("'{v}' is not an IP string literal.")),
        },
        Ty::Date => Key::Date(parse_date(v).ok_or_else(|| format!("failed to parse date field [{v}] with format [strict_date_optional_time||epoch_millis]"))?),
        Ty::Object | Ty::Opaque => return Ok(None),
    }))
}

/// Lower-cased alphanumeric tokens (a small stand-in for the standard analyzer).
pub fn tokens(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

/// Collects the JSON values at a dotted path (objects and dotted keys, arrays flattened).
pub fn source_values<'a>(src: &'a Value, path: &str, out: &mut Vec<&'a Value>) {
    match src {
        Value::Array(items) => items.iter().for_each(|i| source_values(i, path, out)),
        Value::Object(map) => {
            if let Some(v) = map.get(path) {
                flatten(v, out);
            }
            let mut idx = 0;
            while let Some(pos) = path[idx..].find('.') {
                let split = idx + pos;
                if let Some(inner) = map.get(&path[..split]) {
                    source_values(inner, &path[split + 1..], out);
                }
                idx = split + 1;
            }
        }
        _ => {}
    }
}

fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        Value::Null => {}
        other => out.push(other),
    }
}

/// A resolved field: where its values live in `_source`, and its type.
pub struct Resolved<'a> {
    pub source_path: String,
    pub field: &'a Field,
}

impl Mapping {
    pub fn empty() -> Mapping {
        Mapping {
            dynamic: Dynamic::True,
            props: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    pub fn parse(v: &Value) -> Result<Mapping, EsError> {
        let Some(obj) = v.as_object() else {
            return Err(mapper_error("mappings must be an object"));
        };
        if obj.len() == 1 && obj.contains_key("_doc") {
            return Err(EsError::bad_request(
                "The mapping definition cannot be nested under a type [_doc] unless include_type_name is set to true.",
            ));
        }
        let mut m = Mapping::empty();
        for (k, val) in obj {
            match k.as_str() {
                "dynamic" => m.dynamic = parse_dynamic(val)?,
                "properties" => m.props = parse_props(Some(val))?,
                "_source"
                | "_meta"
                | "_routing"
                | "date_detection"
                | "numeric_detection"
                | "dynamic_templates"
                | "dynamic_date_formats" => {
                    m.extra.insert(k.clone(), val.clone());
                }
                other => {
                    return Err(mapper_error(format!(
                        "Root mapping definition has unsupported parameters:  [{other} : {val}]"
                    )))
                }
            }
        }
        Ok(m)
    }

    /// Overlays `other` (later wins), as template + request mappings compose.
    pub fn merge(&mut self, other: &Mapping) {
        if other.dynamic != Dynamic::True {
            self.dynamic = other.dynamic;
        }
        for (k, f) in &other.props {
            self.props.insert(k.clone(), f.clone());
        }
        self.extra.extend(other.extra.clone());
    }

    pub fn to_json(&self) -> Value {
        let mut m = self.extra.clone();
        if self.dynamic != Dynamic::True {
            m.insert("dynamic".into(), dynamic_json(self.dynamic));
        }
        if !self.props.is_empty() {
            m.insert("properties".into(), props_json(&self.props));
        }
        Value::Object(m)
    }

    /// Resolves a dotted field name, including multi-fields such as `name.keyword`.
    pub fn resolve(&self, path: &str) -> Option<Resolved<'_>> {
        let segs: Vec<&str> = path.split('.').collect();
        let mut props = &self.props;
        for (i, seg) in segs.iter().enumerate() {
            let f = props.get(*seg)?;
            let rest = &segs[i + 1..];
            if rest.is_empty() {
                return Some(Resolved {
                    source_path: path.to_owned(),
                    field: f,
                });
            }
            if let Some(sub) = f.fields.get(&rest.join(".")) {
                return Some(Resolved {
                    source_path: segs[..=i].join("."),
                    field: sub,
                });
            }
            props = &f.props;
        }
        None
    }

    /// Indexed keys of `field` in a document (empty for unmapped or object fields).
    pub fn keys(&self, src: &Value, field: &str) -> (Option<Ty>, Vec<Key>) {
        let Some(r) = self.resolve(field) else {
            return (None, Vec::new());
        };
        let mut vals = Vec::new();
        source_values(src, &r.source_path, &mut vals);
        let mut out = Vec::with_capacity(vals.len());
        for v in vals {
            if let (Some(limit), Some(s)) = (r.field.ignore_above, v.as_str()) {
                if s.chars().count() > limit {
                    continue;
                }
            }
            if let Ok(Some(k)) = to_key(r.field.ty, v) {
                out.push(k);
            }
        }
        (Some(r.field.ty), out)
    }

    /// Checks a document against the mapping and adds dynamic fields. Nothing is changed
    /// when the document is rejected.
    pub fn index_doc(&mut self, id: &str, src: &Value) -> Result<(), EsError> {
        let Some(obj) = src.as_object() else {
            return Err(mapper_error("failed to parse, document is empty"));
        };
        // Fast path: a read-only check; the mapping is cloned only when a dynamic field must
        // be added (so a rejected document never changes it).
        if !needs_new_fields(&self.props, self.dynamic, obj)? {
            return Ok(());
        }
        let mut props = self.props.clone();
        let mut changed = false;
        check_object(&mut props, self.dynamic, obj, "", id, &mut changed)?;
        if changed {
            self.props = props;
        }
        Ok(())
    }
}

/// Validates like [`check_object`] without changing anything; `Ok(true)` when the document
/// introduces fields that dynamic mapping would add (or the check needs the slow path).
fn needs_new_fields(
    props: &BTreeMap<String, Field>,
    dynamic: Dynamic,
    obj: &Map<String, Value>,
) -> Result<bool, EsError> {
    for (name, value) in obj {
        let Some(field) = props.get(name) else {
            if value.is_null() || dynamic == Dynamic::False {
                continue;
            }
            return Ok(true);
        };
        let mut items = std::slice::from_ref(value);
        if let Value::Array(a) = value {
            items = a;
        }
        for v in items {
            match v {
                Value::Object(inner) if field.ty == Ty::Object => {
                    if needs_new_fields(&field.props, field.dynamic.unwrap_or(dynamic), inner)? {
                        return Ok(true);
                    }
                }
                Value::Null => {}
                Value::Array(_) => return Ok(true),
                v if field.ty != Ty::Object && to_key(field.ty, v).is_ok() => {}
                _ => return Ok(true),
            }
        }
    }
    Ok(false)
}

fn check_object(
    props: &mut BTreeMap<String, Field>,
    dynamic: Dynamic,
    obj: &Map<String, Value>,
    prefix: &str,
    id: &str,
    changed: &mut bool,
) -> Result<(), EsError> {
    for (name, value) in obj {
        if name.is_empty() {
            return Err(mapper_error("field name cannot be an empty string"));
        }
        let full = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        if !props.contains_key(name) {
            if value.is_null() {
                continue;
            }
            match dynamic {
                Dynamic::Strict => {
                    let within = if prefix.is_empty() {
                        "_doc"
                    } else {
                        prefix.rsplit('.').next().unwrap_or(prefix)
                    };
                    return Err(EsError::new(
                        400,
                        "strict_dynamic_mapping_exception",
                        format!("mapping set to strict, dynamic introduction of [{name}] within [{within}] is not allowed"),
                    ));
                }
                Dynamic::False => continue,
                Dynamic::True => match dynamic_field(value) {
                    Some(f) => {
                        props.insert(name.clone(), f);
                        *changed = true;
                    }
                    None => continue,
                },
            }
        }
        let Some(field) = props.get_mut(name) else {
            continue;
        };
        check_value(field, dynamic, value, &full, id, changed)?;
    }
    Ok(())
}

fn check_value(
    field: &mut Field,
    dynamic: Dynamic,
    value: &Value,
    full: &str,
    id: &str,
    changed: &mut bool,
) -> Result<(), EsError> {
    match value {
        Value::Null => Ok(()),
        Value::Array(items) => items.iter().try_for_each(|v| check_value(field, dynamic, v, full, id, changed)),
        Value::Object(inner) if field.ty == Ty::Object => {
            let d = field.dynamic.unwrap_or(dynamic);
            check_object(&mut field.props, d, inner, full, id, changed)
        }
        _ if field.ty == Ty::Object => Err(mapper_error(format!(
            "object mapping for [{full}] tried to parse field [{full}] as object, but found a concrete value"
        ))),
        v => match to_key(field.ty, v) {
            Ok(_) => Ok(()),
            Err(cause) => {
                let preview = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
                Err(mapper_error(format!(
                    "failed to parse field [{full}] of type [{}] in document with id '{id}'. Preview of field's value: '{preview}'",
                    field.type_name
                ))
                .caused_by(EsError::bad_request(cause)))
            }
        },
    }
}

fn dynamic_field(v: &Value) -> Option<Field> {
    let leaf = |type_name: &str, ty: Ty| Field {
        ty,
        type_name: type_name.to_owned(),
        props: BTreeMap::new(),
        dynamic: None,
        fields: BTreeMap::new(),
        ignore_above: None,
        extra: Map::new(),
    };
    match v {
        Value::Array(items) => items.iter().find_map(dynamic_field),
        Value::Bool(_) => Some(leaf("boolean", Ty::Boolean)),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(leaf("long", Ty::Long)),
        Value::Number(_) => Some(leaf("float", Ty::Float)),
        Value::String(s) if s.contains('-') && crate::values::parse_date_str(s).is_some() => {
            Some(leaf("date", Ty::Date))
        }
        Value::String(_) => {
            let mut text = leaf("text", Ty::Text);
            let mut kw = leaf("keyword", Ty::Keyword);
            kw.ignore_above = Some(256);
            text.fields.insert("keyword".into(), kw);
            Some(text)
        }
        Value::Object(_) => Some(leaf("object", Ty::Object)),
        Value::Null => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict() -> Mapping {
        Mapping::parse(&json!({"dynamic": "strict", "properties": {
            "ip": {"type": "ip"}, "port": {"type": "long"}, "seen": {"type": "date"},
            "svc": {"type": "object", "properties": {"name": {"type": "keyword"}}}}}))
        .unwrap_or_else(|_| Mapping::empty())
    }

    #[test]
    fn strict_rejects_unknown_and_bad_values() {
        let mut m = strict();
        assert!(m
            .index_doc(
                "1",
                &json!({"ip": "10.0.0.1", "port": "443", "svc": {"name": "x"}})
            )
            .is_ok());
        let e = m.index_doc("1", &json!({"other": 1})).err();
        assert_eq!(
            e.map(|e| e.kind),
            Some("strict_dynamic_mapping_exception".to_owned())
        );
        for bad in [
            json!({"port": "abc"}),
            json!({"ip": "1.2.3"}),
            json!({"seen": "yesterday"}),
            json!({"svc": 3}),
        ] {
            let e = m.index_doc("1", &bad).err();
            assert_eq!(
                e.map(|e| e.kind),
                Some("mapper_parsing_exception".to_owned()),
                "{bad}"
            );
        }
    }

    #[test]
    fn dynamic_strings_get_a_keyword_subfield() {
        let mut m = Mapping::empty();
        assert!(m
            .index_doc("1", &json!({"name": "Hello World", "n": 3}))
            .is_ok());
        let (_, keys) = m.keys(&json!({"name": "Hello World"}), "name.keyword");
        assert_eq!(keys, vec![Key::Str("Hello World".into())]);
        assert_eq!(m.resolve("n").map(|r| r.field.ty), Some(Ty::Long));
    }

    #[test]
    fn dotted_keys_and_objects_both_resolve() {
        let mut out = Vec::new();
        let doc = json!({"a": {"b": 1}, "a.b": 2});
        source_values(&doc, "a.b", &mut out);
        assert_eq!(out.len(), 2);
    }
}
