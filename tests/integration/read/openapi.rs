//! The OpenAPI description against the running server.
