//! Routing: method and path to handler. Handlers are plain functions of `(&App, &Req)`, so
//! every route is testable without a socket.

use super::error::ApiError;
use super::request::{Reply, Req};
use super::{console, health};
use crate::app::App;
use crate::{read, upload};

/// Every route: method and path template (`{name}` is one path segment). The OpenAPI
/// description (`openapi.json`) documents exactly these; a test holds the two together.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/api/v1/scanner/executions"),
    ("POST", "/api/v1/scanner/executions/claim"),
    ("POST", "/api/v1/scanner/executions/{execution_id}/batches"),
    (
        "POST",
        "/api/v1/scanner/executions/{execution_id}/heartbeat",
    ),
    ("POST", "/api/v1/scanner/executions/{execution_id}/fail"),
    (
        "DELETE",
        "/api/v1/scanner/executions/{execution_id}/uploads/{upload_id}",
    ),
    ("GET", "/api/v1/tasks"),
    ("GET", "/api/v1/tasks/{task_id}"),
    ("GET", "/api/v1/tasks/{task_id}/executions"),
    ("GET", "/api/v1/tasks/{task_id}/results"),
    ("GET", "/api/v1/assets"),
    ("GET", "/api/v1/search"),
    ("GET", "/api/v1/openapi.json"),
];

/// How the server treats a request's body before any handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyPolicy {
    /// The route reads no body: one that is sent is never read, and the connection is
    /// closed after the answer (its unread rest would be taken for the next request).
    Ignored,
    /// Read for anyone, within the size limit and the deadline (handlers of tests of the
    /// HTTP machinery; no product route).
    Open,
    /// A scanner route: a body larger than `server.preauth_body_bytes` is read only after
    /// the bearer token names an enabled scanner.
    Scanner,
}

/// The body policy of a request, from its method and path alone: the scanner API's POSTs
/// are the only product routes that take a body.
pub fn body_policy(method: &str, path: &str) -> BodyPolicy {
    if method == "POST" && path.starts_with("/api/v1/scanner/") {
        BodyPolicy::Scanner
    } else {
        BodyPolicy::Ignored
    }
}

/// The product's handler, given to the HTTP server.
pub fn route(app: &App, req: &Req) -> Result<Reply, ApiError> {
    let segments = req.segments();
    match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["healthz"]) => Ok(health::healthz()),
        ("GET", ["readyz"]) => Ok(health::readyz(app)),
        ("GET", ["metrics"]) => Ok(health::metrics(app)),
        ("GET", ["api", "v1", "scanner", "executions"]) => Ok(upload::list(app, req)?),
        ("POST", ["api", "v1", "scanner", "executions", "claim"]) => Ok(upload::claim(app, req)?),
        ("POST", ["api", "v1", "scanner", "executions", id, "batches"]) => {
            Ok(upload::batch(app, req, id)?)
        }
        ("POST", ["api", "v1", "scanner", "executions", id, "heartbeat"]) => {
            Ok(upload::heartbeat(app, req, id)?)
        }
        ("POST", ["api", "v1", "scanner", "executions", id, "fail"]) => {
            Ok(upload::fail(app, req, id)?)
        }
        ("DELETE", ["api", "v1", "scanner", "executions", id, "uploads", upload]) => {
            Ok(upload::abandon(app, req, id, upload)?)
        }
        (_, ["api", "v1", "scanner", "executions", ..]) => Err(ApiError::MethodNotAllowed),
        (_, ["healthz"]) | (_, ["readyz"]) | (_, ["metrics"]) => Err(ApiError::MethodNotAllowed),
        ("GET", ["api", "v1", "tasks"]) => Ok(read::tasks::list(app, req)?),
        ("GET", ["api", "v1", "tasks", id]) => Ok(read::tasks::get(app, req, id)?),
        ("GET", ["api", "v1", "tasks", id, "executions"]) => {
            Ok(read::executions::list(app, req, id)?)
        }
        ("GET", ["api", "v1", "tasks", id, "results"]) => Ok(read::results::list(app, req, id)?),
        ("GET", ["api", "v1", "assets"]) => Ok(read::assets::assets(app, req)?),
        ("GET", ["api", "v1", "search"]) => Ok(read::assets::search_assets(app, req)?),
        ("GET", ["api", "v1", "openapi.json"]) => Ok(console::openapi()),
        (_, ["api", "v1", "tasks", ..])
        | (_, ["api", "v1", "assets"])
        | (_, ["api", "v1", "search"])
        | (_, ["api", "v1", "openapi.json"]) => Err(ApiError::MethodNotAllowed),
        ("GET", []) | ("GET", ["console", ..]) => console::page(req).ok_or(ApiError::NotFound),
        _ => Err(ApiError::NotFound),
    }
}
