//! Elasticsearch/OpenSearch access over blocking HTTP (`ureq`): the client, its error
//! classification, and (with the write path and queue) bulk building, splitting and
//! verification.

pub mod client;
pub mod error;

pub use client::{EsClient, EsResponse};
pub use error::EsError;
