//! Elasticsearch/OpenSearch access over blocking HTTP (`ureq`): the client and its error
//! classes, index naming, bulk building and splitting, documents written straight as bytes, strict verification, the
//! concurrency limit, retry maths, the bulk writer and its sender threads, index/template
//! set-up and the indices' shards and replicas, and the Painless scripts with their native twins.

pub mod access;
pub mod alias;
pub mod bulk;
pub mod client;
pub mod error;
pub mod index;
pub mod limit;
pub mod painless;
pub mod retry;
pub mod senders;
pub mod setup;
pub mod shape;
pub mod source;
pub mod verify;
pub mod writer;

pub use client::{EsClient, EsResponse};
pub use error::EsError;
