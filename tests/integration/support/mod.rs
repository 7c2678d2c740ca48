//! Shared test support: throwaway databases, the ES emulator process and its control client.
#![allow(dead_code)]

pub mod emulator;
