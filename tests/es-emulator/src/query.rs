//! The query DSL subset as parsed from request bodies: `match_all`, `match_none`, `term`,
//! `terms`, `range`, `exists`, `match`, `prefix`, `constant_score`, `ids` and `bool`.
//! Execution against documents lives in `query_exec`.

use serde_json::{Map, Value};

use crate::error::EsError;

#[derive(Debug, Clone)]
pub enum Query {
    MatchAll,
    MatchNone,
    Term {
        field: String,
        values: Vec<Value>,
    },
    Range {
        field: String,
        gt: Option<Value>,
        gte: Option<Value>,
        lt: Option<Value>,
        lte: Option<Value>,
    },
    Exists {
        field: String,
    },
    Match {
        field: String,
        text: Value,
        and: bool,
    },
    Prefix {
        field: String,
        prefix: String,
    },
    Ids(Vec<String>),
    Bool {
        must: Vec<Query>,
        filter: Vec<Query>,
        should: Vec<Query>,
        must_not: Vec<Query>,
        msm: Option<usize>,
    },
}

fn one_field<'a>(kind: &str, v: &'a Value) -> Result<(&'a String, &'a Value), EsError> {
    let obj = v.as_object().ok_or_else(|| {
        EsError::parsing(format!(
            "[{kind}] query malformed, no start_object after query name"
        ))
    })?;
    let mut fields = obj
        .iter()
        .filter(|(k, _)| k.as_str() != "boost" && k.as_str() != "_name");
    let first = fields.next().ok_or_else(|| {
        EsError::parsing(format!(
            "[{kind}] query doesn't support multiple fields, found none"
        ))
    })?;
    if let Some((k, _)) = fields.next() {
        return Err(EsError::parsing(format!(
            "[{kind}] query doesn't support multiple fields, found [{}] and [{k}]",
            first.0
        )));
    }
    Ok(first)
}

fn clauses(v: Option<&Value>) -> Result<Vec<Query>, EsError> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(parse).collect(),
        Some(single) => Ok(vec![parse(single)?]),
    }
}

const RANGE_KEYS: &[&str] = &[
    "gt",
    "gte",
    "lt",
    "lte",
    "from",
    "to",
    "include_lower",
    "include_upper",
    "format",
    "boost",
    "_name",
];

/// The date format of every `date` field the emulator maps.
pub(crate) const DEFAULT_DATE: &str = "strict_date_optional_time||epoch_millis";

/// The `values` of an `ids` query. Ids are strings; a number is read as its decimal text,
/// as Elasticsearch does; anything else is refused as Elasticsearch refuses it.
fn ids(body: &Value) -> Result<Vec<String>, EsError> {
    let Some(o) = body.as_object() else {
        return Err(EsError::parsing(
            "[ids] query malformed, no start_object after query name",
        ));
    };
    crate::strict::query_keys(o, "ids", &["values", "boost", "_name"])?;
    let bad_type = |v: &Value| {
        EsError::new(
            400,
            "x_content_parse_exception",
            format!(
                "[ids] values doesn't support values of type: {}",
                crate::strict::token(v)
            ),
        )
    };
    let values = match o.get("values") {
        None => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => return Err(bad_type(other)),
    };
    values
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(bad_type(other)),
        })
        .collect()
}

pub fn parse(v: &Value) -> Result<Query, EsError> {
    let obj = v
        .as_object()
        .ok_or_else(|| EsError::parsing("query malformed, must start with start_object"))?;
    if obj.len() != 1 {
        return Err(EsError::parsing(
            "[_na] query malformed, must start with start_object",
        ));
    }
    let Some((kind, body)) = obj.iter().next() else {
        return Ok(Query::MatchAll);
    };
    Ok(match kind.as_str() {
        "match_all" => Query::MatchAll,
        "match_none" => Query::MatchNone,
        "term" => {
            let (f, val) = one_field(kind, body)?;
            let val = match val {
                Value::Object(o) => {
                    crate::strict::query_keys(o, kind, &["value", "boost", "_name"])?;
                    o.get("value").cloned().ok_or_else(|| {
                        EsError::parsing("[term] query does not support [value] missing")
                    })?
                }
                other => other.clone(),
            };
            Query::Term {
                field: f.clone(),
                values: vec![val],
            }
        }
        "terms" => {
            let (f, val) = one_field(kind, body)?;
            let Value::Array(values) = val else {
                return Err(EsError::parsing("[terms] query does not support [terms lookup] in the emulator; expected an array"));
            };
            Query::Term {
                field: f.clone(),
                values: values.clone(),
            }
        }
        "range" => {
            let (f, val) = one_field(kind, body)?;
            let o = val.as_object().ok_or_else(|| {
                EsError::parsing("[range] query malformed, no start_object after query name")
            })?;
            crate::strict::query_keys(o, kind, RANGE_KEYS)?;
            // The emulator reads dates only as the default format does.
            if let Some(f) = o.get("format").filter(|f| f.as_str() != Some(DEFAULT_DATE)) {
                return Err(EsError::parsing(format!(
                    "[range] query does not support [format] {f}: the emulator reads dates only as [{DEFAULT_DATE}]"
                )));
            }
            let get = |k: &str| o.get(k).filter(|v| !v.is_null()).cloned();
            let (mut gt, mut gte, mut lt, mut lte) = (get("gt"), get("gte"), get("lt"), get("lte"));
            if let Some(from) = get("from") {
                if o.get("include_lower")
                    .and_then(Value::as_bool)
                    .unwrap_or(true)
                {
                    gte = Some(from)
                } else {
                    gt = Some(from)
                }
            }
            if let Some(to) = get("to") {
                if o.get("include_upper")
                    .and_then(Value::as_bool)
                    .unwrap_or(true)
                {
                    lte = Some(to)
                } else {
                    lt = Some(to)
                }
            }
            Query::Range {
                field: f.clone(),
                gt,
                gte,
                lt,
                lte,
            }
        }
        "exists" => {
            if let Some(o) = body.as_object() {
                crate::strict::query_keys(o, kind, &["field", "boost", "_name"])?;
            }
            let field = body
                .get("field")
                .and_then(Value::as_str)
                .ok_or_else(|| EsError::parsing("[exists] must be provided with a [field]"))?;
            Query::Exists {
                field: field.to_owned(),
            }
        }
        "match" | "match_phrase" => {
            let (f, val) = one_field(kind, body)?;
            let (text, and) = match val {
                Value::Object(o) => (
                    {
                        let allowed: &[&str] = match kind.as_str() {
                            "match" => &["query", "operator", "boost", "_name"],
                            _ => &["query", "boost", "_name"],
                        };
                        crate::strict::query_keys(o, kind, allowed)?;
                        o.get("query").cloned().unwrap_or(Value::Null)
                    },
                    o.get("operator")
                        .and_then(Value::as_str)
                        .is_some_and(|s| s.eq_ignore_ascii_case("and"))
                        || kind == "match_phrase",
                ),
                other => (other.clone(), kind == "match_phrase"),
            };
            Query::Match {
                field: f.clone(),
                text,
                and,
            }
        }
        "prefix" => {
            let (f, val) = one_field(kind, body)?;
            let p = match val {
                Value::Object(o) => {
                    crate::strict::query_keys(o, kind, &["value", "boost", "_name"])?;
                    o.get("value")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                }
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            Query::Prefix {
                field: f.clone(),
                prefix: p,
            }
        }
        "constant_score" => {
            if let Some(o) = body.as_object() {
                crate::strict::query_keys(o, kind, &["filter", "boost", "_name"])?;
            }
            let filter = body
                .get("filter")
                .ok_or_else(|| EsError::parsing("[constant_score] requires a 'filter' element"))?;
            Query::Bool {
                must: Vec::new(),
                filter: vec![parse(filter)?],
                should: Vec::new(),
                must_not: Vec::new(),
                msm: Some(0),
            }
        }
        "ids" => Query::Ids(ids(body)?),
        "bool" => {
            let o = body.as_object().cloned().unwrap_or_else(Map::new);
            for k in o.keys() {
                if ![
                    "must",
                    "filter",
                    "should",
                    "must_not",
                    "minimum_should_match",
                    "boost",
                    "_name",
                    "adjust_pure_negative",
                ]
                .contains(&k.as_str())
                {
                    return Err(EsError::parsing(format!(
                        "[bool] query does not support [{k}]"
                    )));
                }
            }
            let msm = match o.get("minimum_should_match") {
                None => None,
                Some(Value::Number(n)) => n.as_u64().map(|n| n as usize),
                Some(Value::String(s)) => {
                    Some(s.trim_end_matches('%').parse::<usize>().map_err(|_| {
                        EsError::parsing(format!(
                            "emulator supports only integer minimum_should_match, got [{s}]"
                        ))
                    })?)
                }
                Some(other) => {
                    return Err(EsError::parsing(format!(
                        "bad minimum_should_match [{other}]"
                    )))
                }
            };
            Query::Bool {
                must: clauses(o.get("must"))?,
                filter: clauses(o.get("filter"))?,
                should: clauses(o.get("should"))?,
                must_not: clauses(o.get("must_not"))?,
                msm,
            }
        }
        other => {
            return Err(EsError::parsing(format!("unknown query [{other}]"))
                .with("line", 1)
                .with("col", 1))
        }
    })
}
