//! Reading typed values out of `_source`: JSON scalar → [`Key`] per field type, dotted-path lookup (objects, dotted keys, arrays), and
//! [`FieldRef`], a field resolved once per index and request.

use serde_json::Value;

use crate::analysis::Analyzer;
use crate::mapping::{Field, Ty};
use crate::values::{parse_date, parse_ip, Key};

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

/// Calls `f` on each non-null value at a dotted path until it returns true.
pub fn any_value(src: &Value, path: &str, f: &mut dyn FnMut(&Value) -> bool) -> bool {
    match src {
        Value::Array(items) => items.iter().any(|i| any_value(i, path, f)),
        Value::Object(map) => {
            if map.get(path).is_some_and(|v| any_flat(v, f)) {
                return true;
            }
            let mut idx = 0;
            while let Some(pos) = path[idx..].find('.') {
                let split = idx + pos;
                if map
                    .get(&path[..split])
                    .is_some_and(|inner| any_value(inner, &path[split + 1..], f))
                {
                    return true;
                }
                idx = split + 1;
            }
            false
        }
        _ => false,
    }
}

fn any_flat(v: &Value, f: &mut dyn FnMut(&Value) -> bool) -> bool {
    match v {
        Value::Array(items) => items.iter().any(|i| any_flat(i, f)),
        Value::Null => false,
        other => f(other),
    }
}

fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        Value::Null => {}
        other => out.push(other),
    }
}

/// A field resolved once per index and request: its `_source` path and how to read it.
#[derive(Debug, Clone)]
pub struct FieldRef {
    pub path: String,
    pub ty: Ty,
    pub ignore_above: Option<usize>,
    /// A text field's index and search analyzers.
    pub analyzers: Option<(Analyzer, Analyzer)>,
    /// Documents with a lower sequence number were written before this field was mapped.
    pub since_seq: i64,
}

impl FieldRef {
    pub fn new(path: String, field: &Field) -> FieldRef {
        FieldRef {
            path,
            ty: field.ty,
            ignore_above: field.ignore_above,
            analyzers: field.analyzers(),
            since_seq: field.since_seq,
        }
    }

    /// Whether this field indexed the document written as the index's `write_no`-th write.
    pub fn indexed(&self, write_no: i64) -> bool {
        write_no >= self.since_seq
    }

    fn admits(&self, v: &Value) -> bool {
        match (self.ignore_above, v.as_str()) {
            (Some(limit), Some(s)) => s.chars().count() <= limit,
            _ => true,
        }
    }

    /// Indexed keys of this field in a document.
    pub fn keys(&self, src: &Value) -> Vec<Key> {
        let mut vals = Vec::new();
        source_values(src, &self.path, &mut vals);
        vals.into_iter()
            .filter(|v| self.admits(v))
            .filter_map(|v| to_key(self.ty, v).ok().flatten())
            .collect()
    }

    /// Whether any indexed raw value satisfies `f` (no allocation per value).
    pub fn any(&self, src: &Value, f: &mut dyn FnMut(&Value) -> bool) -> bool {
        any_value(src, &self.path, &mut |v| self.admits(v) && f(v))
    }
}
