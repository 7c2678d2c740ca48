//! Executing the query DSL: compiling a [`Query`] against one index's mapping (typed values,
//! CIDR terms on `ip`) and matching a document with a simple score.

use serde_json::Value;

use crate::error::EsError;
use crate::extract::FieldRef;
use crate::extract::{source_values, to_key};
use crate::mapping::{Mapping, Ty};
use crate::query::Query;
use crate::store::DocVersion;
use crate::values::{cmp_keys, parse_cidr, parse_date, parse_ip, Key};

/// A query bound to one index's mapping.
pub enum Compiled {
    All,
    Nothing,
    Ids(Vec<String>),
    Keys {
        /// The field as queried (postings are keyed by it).
        name: String,
        field: FieldRef,
        keys: Vec<Key>,
        cidrs: Vec<(u128, u128)>,
    },
    Range {
        field: FieldRef,
        lo: Option<(Key, bool)>,
        hi: Option<(Key, bool)>,
    },
    Exists(String),
    Tokens {
        field: FieldRef,
        tokens: Vec<String>,
        and: bool,
    },
    Prefix {
        field: FieldRef,
        prefix: String,
    },
    Bool {
        must: Vec<Compiled>,
        filter: Vec<Compiled>,
        should: Vec<Compiled>,
        must_not: Vec<Compiled>,
        msm: usize,
    },
}

fn shard_error(e: String) -> EsError {
    EsError::new(
        400,
        "query_shard_exception",
        format!("failed to create query: {e}"),
    )
}

fn typed(ty: Ty, v: &Value) -> Result<Key, EsError> {
    match ty {
        Ty::Date => parse_date(v)
            .map(Key::Date)
            .ok_or_else(|| shard_error(format!("failed to parse date field [{v}]"))),
        Ty::Ip => v
            .as_str()
            .and_then(parse_ip)
            .map(Key::Ip)
            .ok_or_else(|| shard_error(format!("'{v}' is not an IP string literal."))),
        _ => to_key(ty, v)
            .map_err(shard_error)?
            .ok_or_else(|| shard_error("cannot query an object field".into())),
    }
}

pub fn compile(q: &Query, m: &Mapping) -> Result<Compiled, EsError> {
    Ok(match q {
        Query::MatchAll => Compiled::All,
        Query::MatchNone => Compiled::Nothing,
        Query::Ids(ids) => Compiled::Ids(ids.clone()),
        Query::Term { field, values } if field == "_id" => Compiled::Ids(
            values
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect(),
        ),
        Query::Term { field, values } => match m.field_ref(field) {
            None => Compiled::Nothing,
            Some(f) if matches!(f.ty, Ty::Object | Ty::Opaque) => Compiled::Nothing,
            Some(f) => {
                let ty = f.ty;
                let (mut keys, mut cidrs) = (Vec::new(), Vec::new());
                for v in values {
                    match (ty, v.as_str().and_then(parse_cidr)) {
                        (Ty::Ip, Some(c)) => cidrs.push(c),
                        _ => keys.push(typed(if ty == Ty::Text { Ty::Keyword } else { ty }, v)?),
                    }
                }
                Compiled::Keys {
                    name: field.clone(),
                    field: f,
                    keys,
                    cidrs,
                }
            }
        },
        Query::Range {
            field,
            gt,
            gte,
            lt,
            lte,
        } => match m.field_ref(field) {
            None => Compiled::Nothing,
            Some(f) if matches!(f.ty, Ty::Object | Ty::Opaque) => Compiled::Nothing,
            Some(f) => {
                let ty = if f.ty == Ty::Text { Ty::Keyword } else { f.ty };
                let bound = |v: &Option<Value>, inclusive: bool| {
                    v.as_ref()
                        .map(|v| typed(ty, v).map(|k| (k, inclusive)))
                        .transpose()
                };
                Compiled::Range {
                    field: f,
                    lo: bound(gt, false)?.or(bound(gte, true)?),
                    hi: bound(lt, false)?.or(bound(lte, true)?),
                }
            }
        },
        Query::Exists { field } if field == "_source" => {
            return Err(EsError::new(
                400,
                "query_shard_exception",
                "failed to create query: the _source field is not searchable",
            )
            .with("index", "_na_"))
        }
        Query::Exists { field } => Compiled::Exists(field.clone()),
        Query::Match { field, text, and } => match m.field_ref(field) {
            Some(f) if f.ty == Ty::Text => {
                let s = text
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| text.to_string());
                let search = f.analyzers.map(|(_, search)| search).unwrap_or_default();
                Compiled::Tokens {
                    tokens: search.terms(&s).collect(),
                    field: f,
                    and: *and,
                }
            }
            None => Compiled::Nothing,
            Some(f) if matches!(f.ty, Ty::Object | Ty::Opaque) => Compiled::Nothing,
            Some(_) => compile(
                &Query::Term {
                    field: field.clone(),
                    values: vec![text.clone()],
                },
                m,
            )?,
        },
        Query::Prefix { field, prefix } => match m.field_ref(field) {
            Some(f) => Compiled::Prefix {
                field: f,
                prefix: prefix.clone(),
            },
            None => Compiled::Nothing,
        },
        Query::Bool {
            must,
            filter,
            should,
            must_not,
            msm,
        } => {
            let all = |v: &Vec<Query>| {
                v.iter()
                    .map(|q| compile(q, m))
                    .collect::<Result<Vec<_>, _>>()
            };
            let default_msm =
                usize::from(must.is_empty() && filter.is_empty() && !should.is_empty());
            Compiled::Bool {
                must: all(must)?,
                filter: all(filter)?,
                should: all(should)?,
                must_not: all(must_not)?,
                msm: msm.unwrap_or(default_msm),
            }
        }
    })
}

fn in_range(k: &Key, lo: &Option<(Key, bool)>, hi: &Option<(Key, bool)>) -> bool {
    use std::cmp::Ordering::*;
    let lo_ok = lo.as_ref().map_or(true, |(b, inc)| {
        matches!((cmp_keys(k, b), inc), (Greater, _) | (Equal, true))
    });
    let hi_ok = hi.as_ref().map_or(true, |(b, inc)| {
        matches!((cmp_keys(k, b), inc), (Less, _) | (Equal, true))
    });
    lo_ok && hi_ok
}

/// The score of a matching document, `None` if it does not match.
pub fn score(c: &Compiled, m: &Mapping, id: &str, doc: &DocVersion) -> Option<f32> {
    let src = &doc.source;
    match c {
        Compiled::All => Some(1.0),
        Compiled::Nothing => None,
        Compiled::Ids(ids) => ids.iter().any(|i| i == id).then_some(1.0),
        Compiled::Keys {
            field, keys, cidrs, ..
        } => (field.indexed(doc.write_no)
            && field.any(src, &mut |v| value_in(field, v, keys, cidrs)))
        .then_some(1.0),
        Compiled::Range { field, lo, hi } => field
            .any(src, &mut |v| {
                let ty = if field.ty == Ty::Text {
                    Ty::Keyword
                } else {
                    field.ty
                };
                matches!(to_key(ty, v), Ok(Some(k)) if in_range(&k, lo, hi))
            })
            .then_some(1.0),
        Compiled::Exists(field) if field.starts_with('_') && !field.contains('.') => {
            match field.as_str() {
                "_routing" => doc.routing.is_some().then_some(1.0),
                _ => Some(1.0),
            }
        }
        Compiled::Exists(field) => {
            if m.resolve(field)
                .is_some_and(|r| !matches!(r.field.ty, Ty::Object | Ty::Opaque))
            {
                return (!m.keys(src, field).1.is_empty()).then_some(1.0);
            }
            let mut vals = Vec::new();
            source_values(src, field, &mut vals);
            (!vals.is_empty()).then_some(1.0)
        }
        Compiled::Tokens {
            field,
            tokens: want,
            and,
        } => {
            if !field.indexed(doc.write_no) {
                return None;
            }
            let index = field.analyzers.map(|(index, _)| index).unwrap_or_default();
            let mut have: Vec<String> = Vec::new();
            field.any(src, &mut |v| {
                if let Some(s) = v.as_str() {
                    have.extend(index.terms(s));
                }
                false
            });
            let found = want.iter().filter(|t| have.contains(t)).count();
            let ok = if *and {
                found == want.len() && !want.is_empty()
            } else {
                found > 0
            };
            ok.then_some(found as f32)
        }
        Compiled::Prefix { field, prefix } => field
            .any(src, &mut |v| {
                v.as_str().is_some_and(|s| s.starts_with(prefix.as_str()))
            })
            .then_some(1.0),
        Compiled::Bool {
            must,
            filter,
            should,
            must_not,
            msm,
        } => {
            let mut total = 0.0;
            for q in must {
                total += score(q, m, id, doc)?;
            }
            for q in filter {
                score(q, m, id, doc)?;
            }
            if must_not.iter().any(|q| score(q, m, id, doc).is_some()) {
                return None;
            }
            let mut matched = 0;
            for q in should {
                if let Some(s) = score(q, m, id, doc) {
                    matched += 1;
                    total += s;
                }
            }
            (matched >= *msm).then_some(total)
        }
    }
}

/// Whether one raw `_source` value equals one of the term keys (or lies in a CIDR), without
/// allocating for keyword strings.
fn value_in(field: &FieldRef, v: &Value, keys: &[Key], cidrs: &[(u128, u128)]) -> bool {
    let ty = field.ty;
    match (ty, v) {
        (Ty::Keyword, Value::String(s)) => keys.iter().any(|k| matches!(k, Key::Str(x) if x == s)),
        (Ty::Text, Value::String(s)) => {
            let index = field.analyzers.map(|(index, _)| index).unwrap_or_default();
            index
                .terms(s)
                .any(|t| keys.iter().any(|k| matches!(k, Key::Str(x) if *x == t)))
        }
        _ => match to_key(ty, v) {
            Ok(Some(h)) => {
                keys.iter().any(|k| cmp_keys(&h, k).is_eq() && h.rank_eq(k))
                    || matches!(h, Key::Ip(ip) if cidrs.iter().any(|(lo, hi)| *lo <= ip && ip <= *hi))
            }
            _ => false,
        },
    }
}

impl Key {
    /// Same kind of value (a long 1 equals a double 1.0, a string never equals a number).
    pub fn rank_eq(&self, other: &Key) -> bool {
        matches!(
            (self, other),
            (Key::Str(_), Key::Str(_)) | (Key::Ip(_), Key::Ip(_)) | (Key::Bool(_), Key::Bool(_))
        ) || (self.numeric().is_some()
            && other.numeric().is_some()
            && !matches!(self, Key::Bool(_))
            && !matches!(other, Key::Bool(_)))
    }
}
