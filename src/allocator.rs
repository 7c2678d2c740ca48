//! How the binaries' memory comes from the OS: how long mimalloc (their global allocator)
//! keeps freed pages, and no transparent huge pages.
//!
//! Purged pages come back through page faults in which the kernel zeroes them. Both
//! binaries free and re-allocate page-sized JSON buffers on every request, so with
//! mimalloc's default 1 s delay that zeroing becomes a large part of the publisher's and
//! the emulator's CPU (`perf record -g` shows it); with huge pages each fault zeroes 2 MiB.

use std::os::raw::c_long;

/// Sets both up, first thing in `main`: freed pages kept for `keep_freed_for_ms` (`None`:
/// for good), no transparent huge pages (a warning if the kernel refuses).
pub fn setup(keep_freed_for_ms: Option<u32>) {
    keep_freed_pages(keep_freed_for_ms);
    if let Err(e) = no_huge_pages() {
        eprintln!("warning: transparent huge pages stay on: {e}");
    }
}

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (include/mimalloc.h).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed pages stay mapped: `None` keeps them for good.
fn keep_freed_pages(for_ms: Option<u32>) {
    let delay: c_long = for_ms.map_or(-1, c_long::from);
    // SAFETY: mi_option_set only stores an option value; mimalloc reads it when it purges.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay) }
}

/// Turns transparent huge pages off for this process.
///
/// mimalloc advises its arenas for huge pages, so the first touch of a size class's page by
/// any of the many threads made the kernel zero a whole 2 MiB page: a publisher's memory was
/// 137 MB instead of 41 MB, and 40 % of its CPU was `clear_page_erms`; the emulator ingested
/// 25–30 % slower (README "Benchmarks"). mimalloc's own `allow_thp` option does the same
/// `prctl`, but only when read at start-up, before `main` can set it.
#[cfg(target_os = "linux")]
fn no_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and only sets a flag of the process.
    match unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Elsewhere there is nothing to turn off.
#[cfg(not(target_os = "linux"))]
fn no_huge_pages() -> std::io::Result<()> {
    Ok(())
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

    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_are_off_for_the_process() {
        no_huge_pages().unwrap();
        // SAFETY: PR_GET_THP_DISABLE reads the flag; the other arguments must be zero.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1);
    }
}
