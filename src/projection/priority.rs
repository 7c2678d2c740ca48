//! The publisher threads' CPU priority: Linux keeps a nice value per thread, and threads
//! a thread starts inherit it, so publication can yield to the HTTP threads of the same
//! process (`projection.nice`).

/// Adds `by` to the calling thread's nice value (capped at 19). On Linux the nice value
/// belongs to the thread, not the process, and threads it starts inherit it: a worker's
/// heartbeat and page-writing threads yield with it, while the HTTP threads keep the
/// process's priority. Raising a nice value needs no privilege.
pub fn lower_thread_priority(by: i32) -> std::io::Result<()> {
    if by == 0 {
        return Ok(());
    }
    let tid = thread_id();
    let now = thread_nice(tid)?;
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, (now + by).min(19)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's kernel id (what `setpriority(PRIO_PROCESS, …)` names on Linux).
pub fn thread_id() -> libc::id_t {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    libc::id_t::try_from(tid).unwrap_or(0)
}

/// The nice value of thread `tid`. `getpriority` answers -1 both for nice -1 and for an
/// error, so errno is cleared first and read after.
pub fn thread_nice(tid: libc::id_t) -> std::io::Result<i32> {
    // SAFETY: errno is thread-local; getpriority takes plain integers.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(nice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_is_lowered_for_the_thread_and_what_it_starts_not_its_parent() {
        let parent = thread_nice(thread_id()).unwrap();
        let (own, child) = std::thread::spawn(|| {
            lower_thread_priority(3).unwrap();
            let own = thread_nice(thread_id()).unwrap();
            let child = std::thread::spawn(|| thread_nice(thread_id()).unwrap())
                .join()
                .unwrap();
            (own, child)
        })
        .join()
        .unwrap();
        assert_eq!(own, (parent + 3).min(19));
        assert_eq!(
            child, own,
            "threads started by a worker inherit its nice value"
        );
        assert_eq!(thread_nice(thread_id()).unwrap(), parent);
    }

    #[test]
    fn priority_is_capped_at_19_and_zero_changes_nothing() {
        let (capped, same) = std::thread::spawn(|| {
            let before = thread_nice(thread_id()).unwrap();
            lower_thread_priority(0).unwrap();
            let same = thread_nice(thread_id()).unwrap() == before;
            lower_thread_priority(15).unwrap();
            lower_thread_priority(15).unwrap();
            (thread_nice(thread_id()).unwrap(), same)
        })
        .join()
        .unwrap();
        assert_eq!(capped, 19);
        assert!(same);
    }
}
