//! A runner for the ES/OpenSearch YAML REST test format: `setup`/`teardown`, `skip`
//! (version ranges and features), `do` (with `catch`, `headers`, `ignore`), `match` (values
//! and `/regex/`), `length`, `is_true`, `is_false`, `set` (stash), `gt`/`gte`/`lt`/`lte`.
//!
//! Version gates are evaluated as if the server were OpenSearch [`RUNNER_VERSION`] (the
//! vendored files are OpenSearch's; their `- 6.x`/`- 7.x` ranges mean legacy Elasticsearch,
//! which sorts below every OpenSearch version, as in OpenSearch's own runner), or, on a
//! real OpenSearch cluster, as its own version ([`Run::version`]).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::yaml_api::resolve;
use super::yaml_assert::{catch_ok, lookup, regex_of, stash_subst, truthy, values_match};
use super::yaml_namespace::Namespace;
use crate::support::emulator::Es;

pub const RUNNER_VERSION: (u64, u64, u64) = (3, 0, 0);
const FEATURES: &[&str] = &["headers", "allowed_warnings", "allowed_warnings_regex"];

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pass,
    Fail(String),
    /// Skipped by the file's own `skip` section (version gate or unsupported feature).
    Gated(String),
}

pub struct Section {
    pub name: String,
    pub steps: Vec<Value>,
}

pub struct YamlFile {
    pub setup: Vec<Value>,
    pub teardown: Vec<Value>,
    pub tests: Vec<Section>,
}

pub fn parse_file(text: &str) -> Result<YamlFile, String> {
    let mut file = YamlFile {
        setup: Vec::new(),
        teardown: Vec::new(),
        tests: Vec::new(),
    };
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: serde_yaml::Value =
            serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        let json: Value = serde_json::to_value(&v).map_err(|e| e.to_string())?;
        let Value::Object(m) = json else { continue };
        for (name, steps) in m {
            let steps = steps.as_array().cloned().unwrap_or_default();
            match name.as_str() {
                "setup" => file.setup = steps,
                "teardown" => file.teardown = steps,
                _ => file.tests.push(Section { name, steps }),
            }
        }
    }
    Ok(file)
}

/// Versions as OpenSearch's runner orders them: legacy Elasticsearch numbers (majors 5–7)
/// sort below every OpenSearch version (1.0 and up).
fn parse_version(s: &str) -> Option<(u8, u64, u64, u64)> {
    let mut it = s.trim().split('.').map(|p| p.parse::<u64>().ok());
    let major = it.next()??;
    let tier = u8::from(!(5..=7).contains(&major));
    Some((
        tier,
        major,
        it.next().flatten().unwrap_or(0),
        it.next().flatten().unwrap_or(0),
    ))
}

/// How a section runs: the OpenSearch version its `skip` gates are read against, and on a
/// shared cluster the namespace that keeps it to its own names.
pub struct Run<'a> {
    pub version: (u64, u64, u64),
    pub ns: Option<&'a Namespace>,
}

/// Why a `skip` section applies, if it does.
fn skip_reason(skip: &Value, version: (u64, u64, u64)) -> Option<String> {
    let reason = skip
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if let Some(range) = skip.get("version").and_then(Value::as_str) {
        if range.trim() == "all" {
            return Some(format!("version all: {reason}"));
        }
        for r in range.split(',') {
            let (lo, hi) = r.split_once('-').unwrap_or((r, r));
            let lo = parse_version(lo).unwrap_or((0, 0, 0, 0));
            let hi = parse_version(hi).unwrap_or((u8::MAX, 0, 0, 0));
            let me = (1, version.0, version.1, version.2);
            if lo <= me && me <= hi {
                return Some(format!("version {range}: {reason}"));
            }
        }
    }
    let features: Vec<String> = match skip.get("features") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|f| f.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    features
        .iter()
        .find(|f| !FEATURES.contains(&f.as_str()))
        .map(|f| format!("runner feature [{f}] unsupported"))
}

/// Execution state of one test section.
struct Ctx<'a> {
    es: &'a Es,
    /// On a shared cluster: the test's own names.
    ns: Option<&'a Namespace>,
    version: (u64, u64, u64),
    stash: HashMap<String, Value>,
    body: Value,
    raw: String,
}

fn run_do(ctx: &mut Ctx, spec: &Map<String, Value>) -> Result<(), String> {
    let catch = spec.get("catch").and_then(Value::as_str);
    let headers: Vec<(String, String)> = spec
        .get("headers")
        .and_then(Value::as_object)
        .map(|h| {
            h.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let Some((api, args)) = spec.iter().find(|(k, _)| {
        !matches!(
            k.as_str(),
            "catch"
                | "headers"
                | "warnings"
                | "allowed_warnings"
                | "allowed_warnings_regex"
                | "node_selector"
        )
    }) else {
        return Err("do without an API".into());
    };
    let args = stash_subst(args, &ctx.stash);
    let mut args = args.as_object().cloned().unwrap_or_default();
    if let Some(ns) = ctx.ns {
        args = ns.request(api, &args);
    }
    let body = args.get("body");
    let call = resolve(api, &args, body.is_some())?;
    let bytes = body.map(|b| match b {
        Value::Array(items) => items
            .iter()
            .map(|i| {
                format!(
                    "{}\n",
                    i.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| i.to_string())
                )
            })
            .collect::<String>()
            .into_bytes(),
        Value::String(s) => s.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    });
    let ct = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "application/json".into());
    let r = ctx.es.raw(
        &call.method,
        &call.path_and_query,
        bytes.as_ref().map(|_| ct.as_str()),
        bytes.as_deref(),
    );
    ctx.raw = String::from_utf8_lossy(&r.body).into_owned();
    if let Some(ns) = ctx.ns {
        ctx.raw = ns.response(&ctx.raw);
    }
    ctx.body = if call.method == "HEAD" {
        Value::Bool(r.status < 300)
    } else {
        serde_json::from_str(&ctx.raw).unwrap_or(Value::String(ctx.raw.clone()))
    };
    match catch {
        Some(c) if catch_ok(c, r.status, &ctx.raw) => Ok(()),
        Some(c) => Err(format!(
            "expected catch [{c}] but got {} {} → {}",
            r.status, call.path_and_query, ctx.raw
        )),
        None if r.status >= 400 && !call.ignore.contains(&r.status) && call.method != "HEAD" => {
            Err(format!(
                "{} {} failed: {} {}",
                call.method, call.path_and_query, r.status, ctx.raw
            ))
        }
        None => Ok(()),
    }
}

fn run_step(ctx: &mut Ctx, step: &Value) -> Result<Option<String>, String> {
    let Some((kind, arg)) = step.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("bad step {step}"));
    };
    let pairs = |arg: &Value| arg.as_object().cloned().unwrap_or_default();
    match kind.as_str() {
        "skip" => return Ok(skip_reason(arg, ctx.version)),
        "do" => run_do(ctx, &pairs(arg))?,
        "set" => {
            for (path, var) in pairs(arg) {
                let v = lookup(&ctx.body, &path, &ctx.stash)
                    .cloned()
                    .ok_or_else(|| format!("set: no [{path}] in {}", ctx.body))?;
                ctx.stash.insert(var.as_str().unwrap_or("").to_owned(), v);
            }
        }
        "match" => {
            for (path, expected) in pairs(arg) {
                let expected = stash_subst(&expected, &ctx.stash);
                let actual = lookup(&ctx.body, &path, &ctx.stash);
                let ok = match (&expected, actual) {
                    (Value::String(s), Some(a)) if regex_of(s, true).is_some() => {
                        let text = if path == "$body" {
                            ctx.raw.clone()
                        } else {
                            a.as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| a.to_string())
                        };
                        regex_of(s, true).is_some_and(|r| r.is_match(&text))
                    }
                    (e, Some(a)) => values_match(a, e),
                    (Value::Null, None) => true,
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "match [{path}]: expected {expected}, got {}",
                        actual.map_or("nothing".into(), Value::to_string)
                    ));
                }
            }
        }
        "length" => {
            for (path, n) in pairs(arg) {
                let len = match lookup(&ctx.body, &path, &ctx.stash) {
                    Some(Value::Array(a)) => a.len(),
                    Some(Value::Object(o)) => o.len(),
                    Some(Value::String(s)) => s.chars().count(),
                    other => return Err(format!("length [{path}]: not a collection: {other:?}")),
                };
                if Some(len as u64) != n.as_u64() {
                    return Err(format!("length [{path}]: expected {n}, got {len}"));
                }
            }
        }
        "is_true" | "is_false" => {
            let path = arg.as_str().unwrap_or("");
            let t = truthy(lookup(&ctx.body, path, &ctx.stash));
            if t != (kind == "is_true") {
                return Err(format!("{kind} [{path}] failed on {}", ctx.body));
            }
        }
        "gt" | "gte" | "lt" | "lte" => {
            for (path, bound) in pairs(arg) {
                let bound = stash_subst(&bound, &ctx.stash)
                    .as_f64()
                    .ok_or("non-numeric bound")?;
                let a = lookup(&ctx.body, &path, &ctx.stash)
                    .and_then(Value::as_f64)
                    .ok_or_else(|| format!("{kind} [{path}]: not a number"))?;
                let ok = match kind.as_str() {
                    "gt" => a > bound,
                    "gte" => a >= bound,
                    "lt" => a < bound,
                    _ => a <= bound,
                };
                if !ok {
                    return Err(format!("{kind} [{path}]: {a} vs {bound}"));
                }
            }
        }
        other => return Err(format!("runner does not support step [{other}]")),
    }
    Ok(None)
}

fn run_steps(ctx: &mut Ctx, steps: &[Value]) -> Result<Option<String>, String> {
    for s in steps {
        if let Some(reason) = run_step(ctx, s)? {
            return Ok(Some(reason));
        }
    }
    Ok(None)
}

/// Runs one section with the file's setup and teardown as `run` says; `reset` wipes the
/// server (or the namespace) after.
pub fn run_section(
    es: &Es,
    run: &Run,
    file: &YamlFile,
    section: &Section,
    reset: &dyn Fn(),
) -> Outcome {
    let mut ctx = Ctx {
        es,
        ns: run.ns,
        version: run.version,
        stash: HashMap::new(),
        body: Value::Null,
        raw: String::new(),
    };
    let outcome = (|| {
        if let Some(reason) = run_steps(&mut ctx, &file.setup)? {
            return Ok(Outcome::Gated(reason));
        }
        ctx.stash.clear();
        if let Some(reason) = run_steps(&mut ctx, &section.steps)? {
            return Ok(Outcome::Gated(reason));
        }
        run_steps(&mut ctx, &file.teardown)?;
        Ok(Outcome::Pass)
    })()
    .unwrap_or_else(Outcome::Fail);
    reset();
    outcome
}
