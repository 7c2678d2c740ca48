//! Index mappings: the field tree (types, multi-fields, `dynamic`), parsing and echoing it,
//! and resolving a dotted field name (`name.keyword`) to where its values live. Index-time
//! enforcement is in `doc_check`, value reading in `extract`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::analysis::Analyzer;
use crate::doc_check::{check_object, needs_new_fields};
use crate::error::EsError;
use crate::extract::FieldRef;
use crate::values::Key;

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
    /// A text field's declared `analyzer` and `search_analyzer` (`None`: the default).
    pub analyzer: Option<Analyzer>,
    pub search_analyzer: Option<Analyzer>,
    /// The index's first write (`write_no`) this field indexes: a multi-field added to a live
    /// index is not indexed for the documents written before (as in Elasticsearch, until
    /// they are written again).
    pub since_seq: i64,
    /// Other mapping parameters, echoed unchanged.
    pub extra: Map<String, Value>,
}

impl Field {
    /// The analyzers a text field indexes and searches with; `None` for other types.
    pub fn analyzers(&self) -> Option<(Analyzer, Analyzer)> {
        (self.ty == Ty::Text).then(|| {
            let index = self.analyzer.unwrap_or_default();
            (index, self.search_analyzer.unwrap_or(index))
        })
    }
}

#[derive(Debug, Clone)]
pub struct Mapping {
    pub dynamic: Dynamic,
    pub props: BTreeMap<String, Field>,
    pub extra: Map<String, Value>,
}

pub(crate) fn mapper_error(reason: impl Into<String>) -> EsError {
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
    crate::mapping_params::check(name, &type_name, ty, obj)?;
    let mut extra = Map::new();
    for (k, v) in obj {
        if !matches!(
            k.as_str(),
            "type"
                | "properties"
                | "dynamic"
                | "fields"
                | "ignore_above"
                | "analyzer"
                | "search_analyzer"
        ) {
            extra.insert(k.clone(), v.clone());
        }
    }
    let analyzer = |key: &str| -> Result<Option<Analyzer>, EsError> {
        let Some(v) = obj.get(key) else {
            return Ok(None);
        };
        if ty != Ty::Text {
            return Err(mapper_error(format!(
                "unknown parameter [{key}] on mapper [{name}] of type [{type_name}]"
            )));
        }
        let named = v.as_str().unwrap_or_default();
        Analyzer::parse(named).map(Some).ok_or_else(|| {
            mapper_error(format!(
                "analyzer [{named}] has not been configured in mappings ({})",
                Analyzer::IMPLEMENTED
            ))
        })
    };
    Ok(Field {
        analyzer: analyzer("analyzer")?,
        search_analyzer: analyzer("search_analyzer")?,
        since_seq: 0,
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
    if let Some(a) = f.analyzer {
        m.insert("analyzer".into(), json!(a.name()));
    }
    if let Some(a) = f.search_analyzer {
        m.insert("search_analyzer".into(), json!(a.name()));
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

fn check_additions(
    have: &BTreeMap<String, Field>,
    add: &BTreeMap<String, Field>,
    at: &str,
) -> Result<(), EsError> {
    for (k, f) in add {
        let path = if at.is_empty() {
            k.clone()
        } else {
            format!("{at}.{k}")
        };
        let Some(h) = have.get(k) else { continue };
        let conflict =
            |reason: String| Err(EsError::new(400, "illegal_argument_exception", reason));
        if h.type_name != f.type_name {
            return conflict(format!(
                "mapper [{path}] cannot be changed from type [{}] to [{}]",
                h.type_name, f.type_name
            ));
        }
        for (param, was, now) in [
            ("analyzer", h.analyzer, f.analyzer),
            ("search_analyzer", h.search_analyzer, f.search_analyzer),
        ] {
            if was != now {
                let name = |a: Option<Analyzer>| a.map_or("default", Analyzer::name);
                return conflict(format!(
                    "Mapper for [{path}] conflicts with existing mapper:\n\tCannot update parameter [{param}] from [{}] to [{}]",
                    name(was),
                    name(now)
                ));
            }
        }
        check_additions(&h.props, &f.props, &path)?;
        check_additions(&h.fields, &f.fields, &path)?;
    }
    Ok(())
}

fn add_fields(have: &mut BTreeMap<String, Field>, add: &BTreeMap<String, Field>, next_seq: i64) {
    for (k, f) in add {
        match have.get_mut(k) {
            Some(h) => {
                add_fields(&mut h.props, &f.props, next_seq);
                add_fields(&mut h.fields, &f.fields, next_seq);
            }
            None => {
                let mut f = f.clone();
                stamp(&mut f, next_seq);
                have.insert(k.clone(), f);
            }
        }
    }
}

fn stamp(f: &mut Field, since_seq: i64) {
    f.since_seq = since_seq;
    for sub in f.props.values_mut().chain(f.fields.values_mut()) {
        stamp(sub, since_seq);
    }
}

/// Whether a root mapping key asks only for what the emulator does anyway.
fn root_default(key: &str, val: &Value) -> bool {
    match key {
        "_source" => val == &json!({}) || val == &json!({"enabled": true}),
        "_routing" => val == &json!({}) || val == &json!({"required": false}),
        "date_detection" => val == &json!(true),
        "numeric_detection" => val == &json!(false),
        "dynamic_templates" => val == &json!([]),
        _ => false,
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
                // Echoed; the others only with the values the emulator behaves as.
                "_meta" => {
                    m.extra.insert(k.clone(), val.clone());
                }
                "_source" | "_routing" | "date_detection" | "numeric_detection"
                | "dynamic_templates"
                    if root_default(k, val) =>
                {
                    m.extra.insert(k.clone(), val.clone());
                }
                "_source" | "_routing" | "date_detection" | "numeric_detection"
                | "dynamic_templates" | "dynamic_date_formats" => {
                    return Err(mapper_error(format!(
                        "[{k} : {val}] is not implemented by the emulator, which keeps the whole _source, never requires routing, detects dates but not numbers in new strings and has no dynamic templates"
                    )))
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

    /// Adds the fields of `other` that this mapping lacks, as `PUT _mapping` does: a field
    /// both have must keep its type and analyzers (objects gain sub-fields, fields gain
    /// multi-fields); on a conflict nothing changes and the error names the field. A field
    /// added here indexes the documents from sequence number `next_seq` on.
    pub fn add_fields(&mut self, other: &Mapping, next_seq: i64) -> Result<(), EsError> {
        check_additions(&self.props, &other.props, "")?;
        add_fields(&mut self.props, &other.props, next_seq);
        if other.dynamic != Dynamic::True {
            self.dynamic = other.dynamic;
        }
        Ok(())
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

    pub fn field_ref(&self, field: &str) -> Option<FieldRef> {
        self.resolve(field)
            .map(|r| FieldRef::new(r.source_path, r.field))
    }

    /// Indexed keys of `field` in a document (empty for unmapped or object fields).
    pub fn keys(&self, src: &Value, field: &str) -> (Option<Ty>, Vec<Key>) {
        match self.field_ref(field) {
            Some(f) => (Some(f.ty), f.keys(src)),
            None => (None, Vec::new()),
        }
    }

    /// Checks a document against the mapping and adds dynamic fields; `Ok(true)` when it
    /// added any. Nothing is changed when the document is rejected.
    pub fn index_doc(&mut self, id: &str, src: &Value) -> Result<bool, EsError> {
        let Some(obj) = src.as_object() else {
            return Err(mapper_error("failed to parse, document is empty"));
        };
        // Fast path: a read-only check; the mapping is cloned only when a dynamic field must
        // be added (so a rejected document never changes it).
        if !needs_new_fields(&self.props, self.dynamic, obj)? {
            return Ok(false);
        }
        let mut props = self.props.clone();
        let mut changed = false;
        check_object(&mut props, self.dynamic, obj, "", id, &mut changed)?;
        if changed {
            self.props = props;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::source_values;

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
    fn added_fields_join_and_a_changed_type_is_refused() {
        let mut m = strict();
        let more = Mapping::parse(&json!({"dynamic": "strict", "properties": {
            "ip": {"type": "ip"}, "state": {"type": "keyword"},
            "svc": {"properties": {"cpe": {"type": "keyword"}}}}}))
        .unwrap();
        m.add_fields(&more, 0).unwrap();
        assert_eq!(m.resolve("state").map(|r| r.field.ty), Some(Ty::Keyword));
        assert_eq!(m.resolve("svc.cpe").map(|r| r.field.ty), Some(Ty::Keyword));
        assert_eq!(m.resolve("svc.name").map(|r| r.field.ty), Some(Ty::Keyword));
        let clash = Mapping::parse(
            &json!({"properties": {"ip": {"type": "keyword"}, "x": {"type": "long"}}}),
        )
        .unwrap();
        let e = m.add_fields(&clash, 0).unwrap_err();
        assert!(
            e.reason
                .contains("mapper [ip] cannot be changed from type [ip] to [keyword]"),
            "{}",
            e.reason
        );
        assert!(
            m.resolve("x").is_none(),
            "nothing of a refused update is applied"
        );
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
