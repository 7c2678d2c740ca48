//! The upload write path end to end (SPEC §3, §5, §6, §10): real PostgreSQL, the
//! emulator (or a real cluster where no fault is needed), data checked in both.

mod commit;
mod dns_answers;
mod faults;
mod final_scope;
mod rejects;
mod streams;
mod telemetry;

pub const T0: &str = "2026-11-29T10:00:00Z";
