//! Target freshness, DNS parent and child tasks, and tags with their re-publication
//! (SPEC §7, issue 7), end to end through the scanner API and the admin command.

mod freshness;
mod tags;

pub const T0: &str = "2026-11-29T10:00:00Z";
