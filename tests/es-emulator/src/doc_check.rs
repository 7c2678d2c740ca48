//! Index-time enforcement of a mapping: strict/false/true dynamic handling, type checks of
//! every value (`mapper_parsing_exception`), and the dynamic fields a document introduces.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::EsError;
use crate::extract::to_key;
use crate::mapping::{mapper_error, Dynamic, Field, Ty};

/// Validates like [`check_object`] without changing anything; `Ok(true)` when the document
/// introduces fields that dynamic mapping would add (or the check needs the slow path).
pub fn needs_new_fields(
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

pub fn check_object(
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

pub fn check_value(
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

pub fn dynamic_field(v: &Value) -> Option<Field> {
    let leaf = |type_name: &str, ty: Ty| Field {
        ty,
        type_name: type_name.to_owned(),
        props: BTreeMap::new(),
        dynamic: None,
        fields: BTreeMap::new(),
        ignore_above: None,
        analyzer: None,
        search_analyzer: None,
        since_seq: 0,
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
