//! Body strictness: the keys of a request object checked against what the emulator
//! implements, anything else refused naming it, as Elasticsearch refuses an unknown key.

use serde_json::{Map, Value};

use crate::error::EsError;

/// The first key of `obj` not in `allowed`.
fn stray<'a>(obj: &'a Map<String, Value>, allowed: &[&str]) -> Option<&'a str> {
    obj.keys()
        .map(String::as_str)
        .find(|k| !allowed.contains(k))
}

/// An `ObjectParser`'s refusal (aggregations, composite sources):
/// `x_content_parse_exception` `[terms] unknown field [include]`.
pub fn fields(obj: &Map<String, Value>, parser: &str, allowed: &[&str]) -> Result<(), EsError> {
    match stray(obj, allowed) {
        None => Ok(()),
        Some(k) => Err(EsError::new(
            400,
            "x_content_parse_exception",
            format!("[{parser}] unknown field [{k}]"),
        )),
    }
}

/// A query builder's refusal: `parsing_exception` `[range] query does not support [format]`.
pub fn query_keys(obj: &Map<String, Value>, query: &str, allowed: &[&str]) -> Result<(), EsError> {
    match stray(obj, allowed) {
        None => Ok(()),
        Some(k) => Err(EsError::parsing(format!(
            "[{query}] query does not support [{k}]"
        ))),
    }
}

/// The JSON token Elasticsearch names when it meets `v` where it expected nothing.
pub fn token(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "START_OBJECT",
        Value::Array(_) => "START_ARRAY",
        Value::String(_) => "VALUE_STRING",
        Value::Number(_) => "VALUE_NUMBER",
        Value::Bool(_) => "VALUE_BOOLEAN",
        Value::Null => "VALUE_NULL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_stray_field_is_named() {
        let e = fields(
            &obj(json!({"field": "a", "include": "x"})),
            "terms",
            &["field"],
        )
        .err()
        .map(|e| (e.kind, e.reason));
        assert_eq!(
            e,
            Some((
                "x_content_parse_exception".into(),
                "[terms] unknown field [include]".into()
            ))
        );
        let e = query_keys(&obj(json!({"gte": 1, "format": "x"})), "range", &["gte"])
            .err()
            .map(|e| (e.kind, e.reason));
        assert_eq!(
            e,
            Some((
                "parsing_exception".into(),
                "[range] query does not support [format]".into()
            ))
        );
    }

    #[test]
    fn allowed_keys_pass() {
        assert!(fields(&obj(json!({"field": "a"})), "terms", &["field", "size"]).is_ok());
    }
}
