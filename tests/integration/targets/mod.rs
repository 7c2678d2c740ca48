//! Target freshness, DNS parent and child tasks, and tags with their re-publication
//! end to end through the scanner API and the admin command.

mod freshness;
mod tags;
