//! Elasticsearch-side assets of scanstore.
pub mod painless;
