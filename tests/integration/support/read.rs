//! The owner's reads of the HTTP API: a GET with a bearer token, and the form that asserts
//! 200 and returns the body.

use serde_json::Value;

use super::server::{got, http, Got};

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
