//! One integration-test binary of modules, one per capability (ripgrep style).
//! Tests that need PostgreSQL or the ES emulator are `#[ignore]`d by default;
//! `cargo test -- --include-ignored` (what `scripts/test.sh` runs) runs them all.

mod support;

mod admin;
mod bench;
mod client;
mod emulator;
mod foundation;
mod observability;
mod ops;
mod projection;
mod read;
mod reliability;
mod targets;
mod upload;
