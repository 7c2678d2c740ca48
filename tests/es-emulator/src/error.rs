//! The ES error envelope: exception types, metadata, `caused_by`, and the
//! `{"error": {"root_cause": [...], "type", "reason", ...}, "status"}` body.

use serde_json::{json, Map, Value};

/// One ES exception, as rendered in error bodies and bulk item errors.
#[derive(Debug, Clone)]
pub struct EsError {
    pub status: u16,
    pub kind: String,
    pub reason: String,
    pub meta: Map<String, Value>,
    pub caused_by: Option<Box<EsError>>,
}

impl EsError {
    pub fn new(status: u16, kind: &str, reason: impl Into<String>) -> EsError {
        EsError {
            status,
            kind: kind.to_owned(),
            reason: reason.into(),
            meta: Map::new(),
            caused_by: None,
        }
    }

    pub fn bad_request(reason: impl Into<String>) -> EsError {
        EsError::new(400, "illegal_argument_exception", reason)
    }

    pub fn parsing(reason: impl Into<String>) -> EsError {
        EsError::new(400, "parsing_exception", reason)
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> EsError {
        self.meta.insert(key.to_owned(), value.into());
        self
    }

    pub fn caused_by(mut self, cause: EsError) -> EsError {
        self.caused_by = Some(Box::new(cause));
        self
    }

    /// Index-scoped exceptions carry `index_uuid` and `index`.
    pub fn on_index(self, index: &str, uuid: &str) -> EsError {
        self.with("index_uuid", uuid).with("index", index)
    }

    pub fn index_not_found(index: &str) -> EsError {
        EsError::new(
            404,
            "index_not_found_exception",
            format!("no such index [{index}]"),
        )
        .with("resource.type", "index_or_alias")
        .with("resource.id", index)
        .on_index(index, "_na_")
    }

    pub fn version_conflict(id: &str, detail: String, index: &str, uuid: &str) -> EsError {
        EsError::new(
            409,
            "version_conflict_engine_exception",
            format!("[{id}]: version conflict, {detail}"),
        )
        .with("shard", "0")
        .on_index(index, uuid)
    }

    /// The exception object itself (`type`, `reason`, metadata, `caused_by`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.kind));
        m.insert("reason".into(), json!(self.reason));
        for (k, v) in &self.meta {
            m.insert(k.clone(), v.clone());
        }
        if let Some(c) = &self.caused_by {
            m.insert("caused_by".into(), c.to_json());
        }
        Value::Object(m)
    }

    fn root(&self) -> &EsError {
        match &self.caused_by {
            Some(c) => c.root(),
            None => self,
        }
    }

    /// The whole REST error body.
    pub fn body(&self) -> Value {
        let mut root = self.root().to_json();
        if let Some(m) = root.as_object_mut() {
            m.remove("caused_by");
        }
        let mut err = self.to_json();
        if let Some(m) = err.as_object_mut() {
            // root_cause goes first, as ES writes it.
            let mut ordered = Map::new();
            ordered.insert("root_cause".into(), json!([root]));
            ordered.extend(std::mem::take(m));
            *m = ordered;
        }
        json!({"error": err, "status": self.status})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_root_cause_and_status() {
        let e = EsError::index_not_found("x");
        let b = e.body();
        assert_eq!(b["status"], 404);
        assert_eq!(b["error"]["type"], "index_not_found_exception");
        assert_eq!(b["error"]["root_cause"][0]["resource.id"], "x");
    }

    #[test]
    fn root_cause_is_the_innermost() {
        let e =
            EsError::bad_request("outer").caused_by(EsError::new(400, "script_exception", "inner"));
        assert_eq!(
            e.body()["error"]["root_cause"][0]["type"],
            "script_exception"
        );
        assert_eq!(e.body()["error"]["caused_by"]["type"], "script_exception");
    }
}
