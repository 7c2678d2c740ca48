//! Keeps a YAML REST test to its own names on a shared cluster. The vendored tests use fixed
//! names (`test_1`, `test_alias`, template `test`, script `1`) and read `_all`; on a real
//! cluster those could meet someone's data. A [`Namespace`] puts a unique prefix before
//! every index, alias, template and stored-script name a request carries (path parts and
//! bodies), turns `_all`, `*` and a missing index into the prefix's own wildcard, and
//! removes the prefix from every response, so the test's assertions read the names they
//! expect. [`Namespace::clean`] deletes by name what was made under the prefix.

use serde_json::{Map, Value};

use super::yaml_api::encode;
use crate::support::emulator::Es;

/// APIs whose `{index}` part is optional: without it they would reach every index.
const INDEX_OPTIONAL: &[&str] = &[
    "search",
    "count",
    "indices.refresh",
    "indices.get_mapping",
    "indices.get_settings",
    "indices.get_alias",
];
/// APIs whose `name` is an alias or an index template.
const NAMED: &[&str] = &[
    "indices.put_alias",
    "indices.get_alias",
    "indices.exists_alias",
    "indices.put_index_template",
    "indices.get_index_template",
    "indices.delete_index_template",
];
const SCRIPT_APIS: &[&str] = &["put_script", "get_script", "delete_script"];

pub struct Namespace {
    prefix: String,
    scripts: std::cell::RefCell<Vec<String>>,
}

impl Namespace {
    /// `prefix` must be a valid start of an index name (lowercase, not `_`, `-` or `+`).
    pub fn new(prefix: String) -> Namespace {
        Namespace {
            prefix,
            scripts: Default::default(),
        }
    }

    /// One name or wildcard expression: `-name` stays an exclusion, `_all` and `*` become
    /// the prefix's wildcard.
    fn name(&self, n: &str) -> String {
        match n {
            "_all" | "*" => format!("{}*", self.prefix),
            _ => match n.strip_prefix('-') {
                Some(rest) => format!("-{}{rest}", self.prefix),
                None => format!("{}{n}", self.prefix),
            },
        }
    }

    /// A list of names given as a JSON string (comma-separated) or array.
    fn names(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(
                s.split(',')
                    .map(|n| self.name(n.trim()))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Value::Array(a) if a.is_empty() => Value::String(format!("{}*", self.prefix)),
            Value::Array(a) => Value::Array(a.iter().map(|n| self.names(n)).collect()),
            other => other.clone(),
        }
    }

    /// The arguments of a `do` step (path parts, params and `body`) with every name
    /// prefixed.
    pub fn request(&self, api: &str, args: &Map<String, Value>) -> Map<String, Value> {
        let mut args = args.clone();
        match args.get("index") {
            Some(v) => {
                let v = self.names(v);
                args.insert("index".into(), v);
            }
            None if INDEX_OPTIONAL.contains(&api) => {
                args.insert("index".into(), Value::String(format!("{}*", self.prefix)));
            }
            None => {}
        }
        if NAMED.contains(&api) {
            match args.get("name") {
                Some(v) => {
                    let v = self.names(v);
                    args.insert("name".into(), v);
                }
                None if api == "indices.get_index_template" => {
                    args.insert("name".into(), Value::String(format!("{}*", self.prefix)));
                }
                None => {}
            }
        }
        if SCRIPT_APIS.contains(&api) {
            if let Some(id) = args.get("id").and_then(Value::as_str) {
                let id = self.name(id);
                self.scripts.borrow_mut().push(id.clone());
                args.insert("id".into(), Value::String(id));
            }
        }
        if let Some(body) = args.remove("body") {
            let body = match api {
                "bulk" => self.bulk(body),
                "indices.update_aliases" => self.alias_actions(body),
                "indices.create" => self.alias_keys(body, "aliases"),
                "indices.put_index_template" => self.template(body),
                "update" => self.stored_script_ref(body),
                _ => body,
            };
            args.insert("body".into(), body);
        }
        args
    }

    /// A bulk body as objects, JSON strings or one NDJSON string: each action's `_index`.
    fn bulk(&self, body: Value) -> Value {
        let mut source_next = false;
        let mut line = |v: Value| -> Value {
            if std::mem::take(&mut source_next) {
                return v;
            }
            let Value::Object(mut o) = v else { return v };
            if let Some((op, Value::Object(meta))) = o.iter_mut().next() {
                source_next = op != "delete";
                if let Some(i) = meta.get("_index").and_then(Value::as_str) {
                    let i = self.name(i);
                    meta.insert("_index".into(), Value::String(i));
                }
            }
            Value::Object(o)
        };
        let mut text_line = |s: &str| match serde_json::from_str::<Value>(s) {
            Ok(v) => line(v).to_string(),
            Err(_) => s.to_owned(),
        };
        match body {
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .map(|i| match i {
                        Value::String(s) => Value::String(text_line(&s)),
                        other => Value::String(text_line(&other.to_string())),
                    })
                    .collect(),
            ),
            Value::String(s) => Value::String(
                s.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| text_line(l) + "\n")
                    .collect(),
            ),
            other => other,
        }
    }

    /// `_aliases` actions: `index`, `indices`, `alias` and `aliases` of each.
    fn alias_actions(&self, mut body: Value) -> Value {
        if let Some(actions) = body.get_mut("actions").and_then(Value::as_array_mut) {
            for action in actions.iter_mut().filter_map(Value::as_object_mut) {
                for spec in action.values_mut().filter_map(Value::as_object_mut) {
                    for key in ["index", "indices", "alias", "aliases"] {
                        if let Some(v) = spec.get(key) {
                            let v = match v {
                                // An empty list stays empty: its error is the test's point.
                                Value::Array(a) if a.is_empty() => v.clone(),
                                _ => self.names(v),
                            };
                            spec.insert(key.into(), v);
                        }
                    }
                }
            }
        }
        body
    }

    /// The keys of the object at `key` (alias definitions) prefixed.
    fn alias_keys(&self, mut body: Value, key: &str) -> Value {
        if let Some(Value::Object(aliases)) = body.get_mut(key) {
            let renamed: Map<String, Value> = std::mem::take(aliases)
                .into_iter()
                .map(|(k, v)| (self.name(&k), v))
                .collect();
            *aliases = renamed;
        }
        body
    }

    /// An index template: its patterns and its aliases.
    fn template(&self, mut body: Value) -> Value {
        if let Some(p) = body.get("index_patterns") {
            let p = self.names(p);
            body["index_patterns"] = p;
        }
        if let Some(t) = body.get_mut("template") {
            *t = self.alias_keys(t.take(), "aliases");
        }
        body
    }

    /// An update that runs a stored script by id.
    fn stored_script_ref(&self, mut body: Value) -> Value {
        if let Some(id) = body.pointer("/script/id").and_then(Value::as_str) {
            let id = self.name(id);
            body["script"]["id"] = Value::String(id);
        }
        body
    }

    /// A response body as the test expects it: without the prefix.
    pub fn response(&self, raw: &str) -> String {
        raw.replace(&self.prefix, "")
    }

    /// Deletes, by name, every index (with its aliases), index template and stored script
    /// made under the prefix: clusters may refuse wildcard deletes
    /// (`action.destructive_requires_name`), and a name is never someone else's.
    pub fn clean(&self, es: &Es) {
        let pattern = encode(&format!("{}*", self.prefix));
        let (_, indices) = es.get(&format!("/{pattern}"));
        if let Some(names) = indices
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
        {
            for n in names.iter().filter(|n| n.starts_with(&self.prefix)) {
                es.delete(&format!("/{}", encode(n)));
            }
        }
        let (_, templates) = es.get(&format!("/_index_template/{pattern}"));
        for t in templates["index_templates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(n) = t["name"].as_str().filter(|n| n.starts_with(&self.prefix)) {
                es.delete(&format!("/_index_template/{}", encode(n)));
            }
        }
        for id in self.scripts.borrow_mut().drain(..) {
            es.delete(&format!("/_scripts/{}", encode(&id)));
        }
    }
}
