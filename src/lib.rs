//! scanstore library.

pub mod es;
