//! `ApiError` and the one place where any error of any layer becomes an HTTP status, an
//! error code, a message and (for retryable overload) `Retry-After`.

use serde_json::json;

use super::request::Reply;
use crate::db::DbError;
use crate::es::EsError;
use crate::read::{Partial, ReadError};
use crate::upload::UploadError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("request body larger than {limit} bytes")]
    PayloadTooLarge { limit: u64 },
    #[error("request body not received in time")]
    BodyTimeout,
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("too many request bodies are being read; retry shortly")]
    BodyReadersBusy,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Es(#[from] EsError),
    #[error(transparent)]
    Upload(#[from] UploadError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Status, code and `Retry-After` of an error; the only status mapping in scanstore.
struct Mapping {
    status: u16,
    code: &'static str,
    retry_after: Option<u32>,
}

fn m(status: u16, code: &'static str) -> Mapping {
    Mapping {
        status,
        code,
        retry_after: None,
    }
}

fn db(e: &DbError) -> Mapping {
    match e {
        // The pool is saturated: the client should come back shortly.
        DbError::PoolTimeout { .. } => Mapping {
            status: 503,
            code: "database_busy",
            retry_after: Some(2),
        },
        DbError::Unavailable(_) => m(503, "database_unavailable"),
        DbError::Contention(_) => m(503, "database_contention"),
        DbError::Constraint(_) => m(409, "database_constraint"),
        DbError::Query(_) | DbError::Config(_) => m(500, "database_error"),
    }
}

fn es(e: &EsError) -> Mapping {
    match e.class() {
        // Overload or outage: the same request may succeed later.
        crate::es::error::ErrorClass::Transient => m(503, "search_backend_unavailable"),
        crate::es::error::ErrorClass::Permanent => m(502, "search_backend_error"),
    }
}

fn upload(e: &UploadError) -> Mapping {
    match e {
        UploadError::Invalid { code, .. } => m(400, code),
        UploadError::Unauthorized => m(401, "unauthorized"),
        UploadError::Forbidden(_) => m(403, "forbidden"),
        UploadError::NotFound => m(404, "not_found"),
        UploadError::Conflict { code, .. } => m(409, code),
        UploadError::Unprocessable { code, .. } => m(422, code),
        UploadError::BadCount(_) => m(502, "search_backend_error"),
        UploadError::IndexNameTooLong(_) => m(500, "index_name_too_long"),
        UploadError::Db(e) => db(e),
        UploadError::Es(e) => es(e),
    }
}

fn read(e: &ReadError) -> Mapping {
    match e {
        ReadError::Invalid { code, .. } => m(400, code),
        ReadError::Unauthorized => m(401, "unauthorized"),
        ReadError::Forbidden(_) => m(403, "forbidden"),
        // Another owner's id is not found, never forbidden: existence is not disclosed.
        ReadError::NotFound => m(404, "not_found"),
        // ES stopped before every shard answered: the same search may complete later.
        ReadError::Partial(Partial::TimedOut) => m(503, "search_timed_out"),
        ReadError::Partial(Partial::ShardsFailed { .. }) => m(502, "search_shards_failed"),
        ReadError::Db(e) => db(e),
        ReadError::Es(e) => es(e),
    }
}

/// The HTTP status an upload error is answered with (for the upload span's log line).
pub fn upload_status(e: &UploadError) -> u16 {
    upload(e).status
}

/// The error code an upload failure answers with (for logs that must not quote details).
pub fn upload_code(e: &UploadError) -> &'static str {
    upload(e).code
}

impl ApiError {
    fn mapping(&self) -> Mapping {
        match self {
            ApiError::BadRequest { code, .. } => m(400, code),
            ApiError::Unauthorized => m(401, "unauthorized"),
            ApiError::Forbidden(_) => m(403, "forbidden"),
            ApiError::NotFound => m(404, "not_found"),
            ApiError::MethodNotAllowed => m(405, "method_not_allowed"),
            ApiError::Conflict { code, .. } => m(409, code),
            ApiError::PayloadTooLarge { .. } => m(413, "payload_too_large"),
            ApiError::BodyTimeout => m(408, "request_timeout"),
            ApiError::ShuttingDown => Mapping {
                status: 503,
                code: "shutting_down",
                retry_after: Some(2),
            },
            ApiError::BodyReadersBusy => Mapping {
                status: 503,
                code: "server_busy",
                retry_after: Some(1),
            },
            ApiError::Db(e) => db(e),
            ApiError::Es(e) => es(e),
            ApiError::Upload(e) => upload(e),
            ApiError::Read(e) => read(e),
            ApiError::Internal(_) => m(500, "internal_error"),
        }
    }

    pub fn status(&self) -> u16 {
        self.mapping().status
    }

    pub fn code(&self) -> &'static str {
        self.mapping().code
    }

    /// What of this error the request's log line may carry. A client error (4xx) is the
    /// client's own input described back to it, and its message may quote observation or
    /// query values: only the position it names is logged. A server error is logged whole
    /// (its internals stay out of the answer instead).
    pub fn log_detail(&self) -> LogDetail {
        if self.status() >= 500 {
            LogDetail::Error
        } else {
            LogDetail::Position(position(&self.to_string()))
        }
    }

    /// The JSON error envelope. Server-side failures get a generic message: internals
    /// (SQL, hostnames) stay in the log, keyed by the request id.
    pub fn reply(&self, request_id: &str) -> Reply {
        let m = self.mapping();
        let message = if m.status >= 500 {
            format!("{} (request {request_id})", public_message(m.code))
        } else {
            self.to_string()
        };
        let mut body = json!({
            "success": false,
            "error": { "code": m.code, "message": message, "request_id": request_id }
        });
        if let Some(details) = match self {
            ApiError::Upload(e) => e.details(),
            _ => None,
        } {
            body["error"]["details"] = details.clone();
        }
        let reply = Reply::json(m.status, &body);
        match m.retry_after {
            Some(s) => reply.with_header("Retry-After", s.to_string()),
            None => reply,
        }
    }
}

/// See [`ApiError::log_detail`].
#[derive(Debug, PartialEq, Eq)]
pub enum LogDetail {
    /// The field or parameter a client error names, if any.
    Position(Option<String>),
    /// The whole error.
    Error,
}

/// The position a client error's message names, with nothing the client sent: its leading
/// field name (every message starts with scanstore's own words, such as
/// `observations[3]: ...` or `size must be ...`) and serde's `line L column C`.
fn position(message: &str) -> Option<String> {
    let name_len = message
        .bytes()
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_[]".contains(b))
        .count();
    let name = &message[..name_len];
    let named = !name.is_empty() && message[name_len..].starts_with([':', ' ']);
    let line_column = message.rfind(" at line ").and_then(|i| {
        let tail = &message[i + 1..];
        let ok = tail.split(' ').enumerate().all(|(k, w)| match k {
            0 => w == "at",
            1 | 3 => matches!(w, "line" | "column"),
            2 | 4 => !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()),
            _ => false,
        });
        ok.then_some(tail)
    });
    match (named.then_some(name), line_column) {
        (Some(n), Some(lc)) => Some(format!("{n} {lc}")),
        (Some(n), None) => Some(n.to_string()),
        (None, Some(lc)) => Some(lc.to_string()),
        (None, None) => None,
    }
}

fn public_message(code: &str) -> &'static str {
    match code {
        "database_busy" => "database busy, retry shortly",
        "database_unavailable" => "database unavailable",
        "database_contention" => "database contention, retry",
        "search_backend_unavailable" => "search backend unavailable, retry",
        "search_backend_error" => "search backend rejected the request",
        "shutting_down" => "the server is shutting down, retry",
        "server_busy" => "too many request bodies are being read, retry shortly",
        "search_timed_out" => "search timed out; the page would be incomplete, retry",
        "search_shards_failed" => "some search shards failed; the page would be incomplete",
        "index_name_too_long" => "index name exceeds the request-line budget; check index_prefix",
        _ => "internal error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn pool_timeout_is_503_with_retry_after_2() {
        let e = ApiError::from(DbError::PoolTimeout {
            stage: "reserve",
            waited: Duration::from_millis(5),
            cause: None,
        });
        let r = e.reply("rid");
        assert_eq!(r.status, 503);
        assert!(r.headers.contains(&("Retry-After", "2".to_string())));
        assert_eq!(r.json_body()["error"]["code"], "database_busy");
        assert_eq!(r.json_body()["success"], false);
    }

    #[test]
    fn client_errors_keep_their_message() {
        let e = ApiError::BadRequest {
            code: "bad_field",
            message: "port out of range".into(),
        };
        let r = e.reply("rid");
        assert_eq!(r.status, 400);
        assert_eq!(r.json_body()["error"]["message"], "port out of range");
        assert!(r.headers.is_empty());
    }

    #[test]
    fn client_errors_are_logged_by_position_without_values() {
        let detail = |message: &str| {
            ApiError::from(UploadError::Invalid {
                code: "bad_field",
                message: message.into(),
            })
            .log_detail()
        };
        let at = |s: &str| LogDetail::Position(Some(s.to_string()));
        assert_eq!(
            detail("observations[3]: invalid type: string \"SSH-2.0-OpenSSH\", expected u16 at line 1 column 42"),
            at("observations[3] at line 1 column 42")
        );
        assert_eq!(
            detail("request body: expected value at line 1 column 1"),
            at("request at line 1 column 1")
        );
        assert_eq!(
            ApiError::from(ReadError::invalid(
                "bad_size",
                "size must be an integer from 1 to 500, got \"x y\""
            ))
            .log_detail(),
            at("size")
        );
        // A message that does not start with a name gives nothing of itself away.
        assert_eq!(
            detail("\"secret\" at line 1 column 9x"),
            LogDetail::Position(None)
        );
        assert_eq!(
            ApiError::Internal("boom".into()).log_detail(),
            LogDetail::Error
        );
    }

    #[test]
    fn read_errors() {
        let r = ApiError::from(ReadError::NotFound).reply("rid");
        assert_eq!(r.status, 404);
        let r = ApiError::from(ReadError::invalid("bad_cursor", "nope")).reply("rid");
        assert_eq!(
            (r.status, r.json_body()["error"]["code"].clone()),
            (400, "bad_cursor".into())
        );
        let r = ApiError::from(ReadError::Partial(Partial::TimedOut)).reply("rid");
        assert_eq!(r.status, 503);
        assert!(r.json_body()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out"));
        let r = ApiError::from(ReadError::Partial(Partial::ShardsFailed {
            failed: 1,
            total: 2,
        }))
        .reply("rid");
        assert_eq!(r.status, 502);
        assert_eq!(r.json_body()["error"]["code"], "search_shards_failed");
    }

    #[test]
    fn es_errors_are_5xx_without_internals() {
        let e = ApiError::from(EsError::Status {
            status: 429,
            error_type: "es_rejected_execution_exception".into(),
            reason: "queue full on node-1".into(),
        });
        let r = e.reply("rid");
        assert_eq!(r.status, 503);
        assert!(!String::from_utf8_lossy(&r.body).contains("node-1"));
        let e = ApiError::from(EsError::BadResponse("item 3 _id mismatch".into()));
        assert_eq!(e.reply("rid").status, 503);
        let e = ApiError::from(EsError::Status {
            status: 400,
            error_type: "mapper_parsing_exception".into(),
            reason: "bad".into(),
        });
        assert_eq!(e.reply("rid").status, 502);
    }
}
