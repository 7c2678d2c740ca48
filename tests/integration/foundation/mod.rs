//! The foundation: migrations, the pool and its checkout guard, the HTTP worker pool, the
//! command line.

mod cli;
mod es_auth;
mod http;
mod migrate;
mod pg_tls;
pub mod pool;
mod statements;

/// An ES URL nobody listens on: for tests that must not depend on Elasticsearch.
pub const NO_ES: &str = "http://127.0.0.1:9";
