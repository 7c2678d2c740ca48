//! The upload write path end to end: real PostgreSQL, the
//! emulator (or a real cluster where no fault is needed), data checked in both.

mod abandon;
mod commit;
mod contract;
mod details;
mod dns_answers;
mod faults;
mod final_scope;
mod lifecycle;
mod rejects;
mod scope;
mod streams;
mod telemetry;
