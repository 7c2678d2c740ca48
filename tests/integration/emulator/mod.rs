//! Tests of the ES protocol emulator. Each test starts its own emulator process (or uses
//! `STORAGE_TEST_ES_URL` when it needs no fault injection), so they run in parallel.

mod analysis;
mod bulk;
mod conformance;
mod faults;
mod http_limits;
mod indices;
mod python_peer;
mod search;
mod strict;
mod visibility;
mod yaml_api;
mod yaml_assert;
mod yaml_namespace;
mod yaml_runner;
