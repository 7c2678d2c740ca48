//! scanstore library.
