//! Shared test support: throwaway databases, in-process scanstore servers, captured logs,
//! the ES emulator process and its control client.
#![allow(dead_code)]

pub mod db;
pub mod emulator;
pub mod factory;
pub mod logs;
pub mod scan;
pub mod server;
pub mod stack;
