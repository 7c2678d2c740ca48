//! scanstore: the storage server of a network-scanning platform.
//!
//! ```text
//!  scanner ──POST batch──▶ http (fixed worker threads) ──▶ upload
//!                                                     │  tx A (db, short)  reserve receipt
//!                                                     │  es bulk (no connection held)
//!                                                     │  tx B (db, short)  confirm; final → outbox row
//!  projection workers ◀── claim/lease/checkpoint ── scan_projection_outbox (PostgreSQL)
//!        └── paged _bulk ──▶ es current asset projection (aliases)
//!  owners ──GET──▶ http ──▶ read (execution projection, current assets)
//! ```
//!
//! Modules, one responsibility each: [`config`] (start-up TOML), [`db`] (pool, checkout
//! guard, migrations), [`es`] (Elasticsearch client), [`http`] (threads, routing, error
//! mapping), [`upload`] (the write path), [`projection`] (the asset publisher), [`rebuild`]
//! (re-building the asset projection into a new version and switching its aliases), [`read`]
//! (owner-side read APIs), [`auth`] (tokens to principals), [`tags`] (asset tags), [`task`]
//! (task kinds), [`ports`] (a task's port scope), [`tombstones`] (deletions), [`forget`]
//! (deleting a task and what it produced), [`app`]
//! (start-up and shutdown), [`telemetry`] (events, metrics, sampler), [`allocator`] (how
//! long freed memory stays mapped, no transparent huge pages).

pub mod allocator;
pub mod app;
pub mod auth;
pub mod config;
pub mod db;
pub mod es;
pub mod forget;
pub mod http;
pub mod json;
pub mod periodic;
pub mod ports;
pub mod projection;
pub mod read;
pub mod rebuild;
pub mod retention;
pub mod tags;
pub mod task;
pub mod telemetry;
pub mod tombstones;
pub mod upload;
