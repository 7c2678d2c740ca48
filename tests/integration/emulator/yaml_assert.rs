//! Assertion helpers of the YAML runner: stash substitution, dotted-path lookup (`\.`
//! escapes, `$body`, stashed keys), `/regex/` values, lenient value equality, truthiness, and
//! `catch` matching.

use std::collections::HashMap;

use regex::RegexBuilder;
use serde_json::Value;

pub fn stash_subst(v: &Value, stash: &HashMap<String, Value>) -> Value {
    match v {
        Value::String(s) if s.starts_with('$') && stash.contains_key(&s[1..]) => {
            stash[&s[1..]].clone()
        }
        Value::String(s) if s.contains("${") => {
            let mut out = s.clone();
            for (k, val) in stash {
                let text = val
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| val.to_string());
                out = out.replace(&format!("${{{k}}}"), &text);
            }
            Value::String(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| stash_subst(x, stash)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), stash_subst(x, stash)))
                .collect(),
        ),
        other => other.clone(),
    }
}

pub fn lookup<'v>(
    body: &'v Value,
    path: &str,
    stash: &HashMap<String, Value>,
) -> Option<&'v Value> {
    if path.is_empty() || path == "$body" {
        return Some(body);
    }
    let mut cur = body;
    let mut parts = Vec::new();
    let mut buf = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => buf.push(chars.next().unwrap_or('.')),
            '.' => parts.push(std::mem::take(&mut buf)),
            other => buf.push(other),
        }
    }
    parts.push(buf);
    for p in parts {
        let key = match stash.get(p.strip_prefix('$').unwrap_or("\u{0}")) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => p,
        };
        cur = match cur {
            Value::Object(o) => o.get(&key)?,
            Value::Array(a) => a.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// `/regex/` → a regex. `match` compiles with Java's `Pattern.COMMENTS` (whitespace ignored),
/// `catch` without it, as the reference runner does.
pub fn regex_of(s: &str, comments: bool) -> Option<regex::Regex> {
    let t = s.trim();
    if t.len() >= 2 && t.starts_with('/') && t.ends_with('/') {
        RegexBuilder::new(&t[1..t.len() - 1])
            .ignore_whitespace(comments)
            .build()
            .ok()
    } else {
        None
    }
}

pub fn values_match(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| values_match(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, x)| b.get(k).is_some_and(|y| values_match(x, y)))
        }
        (Value::String(a), Value::Number(b)) | (Value::Number(b), Value::String(a)) => {
            a.parse::<f64>().ok() == b.as_f64() && !a.is_empty()
        }
        (a, b) => a == b,
    }
}

pub fn truthy(v: Option<&Value>) -> bool {
    !matches!(v, None | Some(Value::Null) | Some(Value::Bool(false)))
        && v != Some(&Value::String(String::new()))
        && v.and_then(Value::as_f64) != Some(0.0)
}

pub fn catch_ok(catch: &str, status: u16, raw: &str) -> bool {
    match catch {
        "bad_request" => status == 400,
        "unauthorized" => status == 401,
        "forbidden" => status == 403,
        "missing" => status == 404,
        "request_timeout" => status == 408,
        "conflict" => status == 409,
        "unavailable" => status == 503,
        "request" => status >= 400,
        other => regex_of(other, false).is_some_and(|r| status >= 400 && r.is_match(raw)),
    }
}
