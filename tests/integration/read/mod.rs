//! Reading it back, run with `cargo test --test integration read:: --
//! --include-ignored`: tasks, executions with projection status, results by IP, assets and
//! search, owner isolation, validation, the OpenAPI description and the browser console.

mod api;
mod browser;
mod cdp;
mod isolation;
pub mod openapi;
mod paging;
mod text_search;

use serde_json::Value;

use crate::support::server::{got, http, Got};

/// `GET base+path` with an owner token.
pub fn get(base: &str, token: &str, path: &str) -> Got {
    got(http()
        .get(format!("{base}{path}"))
        .header("Authorization", &format!("Bearer {token}"))
        .call())
}

/// As [`get`], asserting 200, returning the body.
pub fn ok(base: &str, token: &str, path: &str) -> Value {
    let r = get(base, token, path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body
}
