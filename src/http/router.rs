//! Routing: method and path to handler. Handlers are plain functions of `(&App, &Req)`, so
//! every route is testable without a socket.

use super::error::ApiError;
use super::health;
use super::request::{Reply, Req};
use crate::app::App;
use crate::upload;

/// The product's handler, given to the HTTP server.
pub fn route(app: &App, req: &Req) -> Result<Reply, ApiError> {
    let segments = req.segments();
    match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["healthz"]) => Ok(health::healthz()),
        ("GET", ["readyz"]) => Ok(health::readyz(app)),
        ("GET", ["metrics"]) => Ok(health::metrics(app)),
        ("POST", ["api", "v1", "scanner", "executions", "claim"]) => Ok(upload::claim(app, req)?),
        ("POST", ["api", "v1", "scanner", "executions", id, "batches"]) => {
            Ok(upload::batch(app, req, id)?)
        }
        (_, ["api", "v1", "scanner", "executions", ..]) => Err(ApiError::MethodNotAllowed),
        (_, ["healthz"]) | (_, ["readyz"]) | (_, ["metrics"]) => Err(ApiError::MethodNotAllowed),
        _ => Err(ApiError::NotFound),
    }
}
