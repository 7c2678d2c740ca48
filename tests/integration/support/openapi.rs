//! The OpenAPI description as a checker: the parsed spec, and responses validated against
//! the schema it documents for their path, method and status.

use serde_json::Value;

use scanstore::http::console::OPENAPI_JSON;

/// The served description, parsed.
pub fn spec() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("openapi.json is JSON")
}

/// Resolves a local `$ref`.
fn resolve<'a>(spec: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.trim_start_matches("#/components/schemas/");
            &spec["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// Checks `value` against the subset of JSON Schema the description uses.
fn validate(spec: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(spec, schema);
    if value.is_null() {
        if schema["nullable"] != true {
            errors.push(format!("{at}: null but not nullable"));
        }
        return;
    }
    if let Some(options) = schema["oneOf"].as_array() {
        let fits = options.iter().any(|o| {
            let mut e = Vec::new();
            validate(spec, o, value, at, &mut e);
            e.is_empty()
        });
        if !fits {
            errors.push(format!("{at}: matches no oneOf"));
        }
    }
    // Keywords beside a `oneOf` apply as well (a batch's common properties).
    let ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !ok {
        errors.push(format!("{at}: expected {}, got {value}", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            errors.push(format!("{at}: {value} not in {allowed:?}"));
        }
    }
    for r in schema["required"].as_array().into_iter().flatten() {
        let r = r.as_str().unwrap();
        if value.get(r).is_none() {
            errors.push(format!("{at}: missing required {r}"));
        }
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, s) in props {
            if let Some(v) = value.get(k) {
                validate(spec, s, v, &format!("{at}.{k}"), errors);
            }
        }
    }
    if let (Some(items), Some(list)) = (schema.get("items"), value.as_array()) {
        for (i, v) in list.iter().enumerate() {
            validate(spec, items, v, &format!("{at}[{i}]"), errors);
        }
    }
}

/// Asserts that `body` matches the schema documented for `method path` answering `status`.
pub fn assert_documented(spec: &Value, path: &str, method: &str, status: u16, body: &Value) {
    let schema = &spec["paths"][path][method]["responses"][status.to_string()]["content"]
        ["application/json"]["schema"];
    assert!(
        !schema.is_null(),
        "{method} {path} {status} is not documented"
    );
    let mut errors = Vec::new();
    validate(spec, schema, body, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: {errors:#?}\n{body}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keywords_beside_a_one_of_apply_too() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "oneOf": [{"required": ["b"]}, {"required": ["c"]}],
        });
        let check = |value: Value| {
            let mut errors = Vec::new();
            validate(&json!({}), &schema, &value, "$", &mut errors);
            errors
        };
        assert!(check(json!({"a": "x", "b": 1})).is_empty());
        assert_eq!(check(json!({"a": 1, "b": 1})).len(), 1);
        assert_eq!(check(json!({"a": "x"})), vec!["$: matches no oneOf"]);
    }
}
