//! How long mimalloc (the binaries' global allocator) keeps freed pages before returning
//! them to the OS.
//!
//! Purged pages come back through page faults in which the kernel zeroes them (a whole
//! transparent huge page at a time). Both binaries free and re-allocate page-sized JSON
//! buffers on every request, so with mimalloc's default 1 s delay that zeroing showed up as
//! 15–30 % of scanstore's publisher CPU and over half of the emulator's in the benchmark's
//! profiles (`perf record -g`, README "Benchmarks").

use std::os::raw::c_long;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (include/mimalloc.h).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed pages stay mapped: `None` keeps them for good.
pub fn keep_freed_pages(for_ms: Option<u32>) {
    let delay: c_long = for_ms.map_or(-1, c_long::from);
    // SAFETY: mi_option_set only stores an option value; mimalloc reads it when it purges.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purge_delay() -> c_long {
        // SAFETY: reading a mimalloc option has no memory-safety preconditions.
        unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
    }

    #[test]
    fn the_option_set_is_the_purge_delay() {
        // v3's default purge delay is 1000 ms: the index names the purge-delay option.
        let before = purge_delay();
        assert!(
            before == 1000 || before == -1 || before == 10_000,
            "{before}"
        );
        keep_freed_pages(Some(10_000));
        assert_eq!(purge_delay(), 10_000);
        keep_freed_pages(None);
        assert_eq!(purge_delay(), -1);
    }
}
