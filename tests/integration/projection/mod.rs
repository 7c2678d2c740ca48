//! Asset publication, run with `cargo test projection:: -- --include-ignored`:
//! leased claims, heartbeats, verified paged bulk with checkpoints, the refresh phase,
//! backoff and recovery. Tests that drive ticks by hand start the server with no workers.

mod claims;
mod close;
mod delete;
mod faults;
mod forget;
mod merge;
mod publish;
