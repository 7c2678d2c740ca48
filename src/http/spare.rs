//! Threads for jobs that may wait on one client for long (reading a body, writing a large
//! reply): every job still runs on a thread of its own, so a stalled client holds only
//! that thread, but a thread whose job is done waits a while for the next one instead of
//! exiting. A steady stream of requests then does not start and end a thread each: clone
//! and exit, a stack mapped and unmapped (with TLB shootdowns across CPUs) and a fresh
//! allocator heap whose pages fault in again.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

type Job = Box<dyn FnOnce() + Send>;

/// A set of threads named `name`, as many as jobs run at once, each kept `keep` after its
/// last job.
#[derive(Clone)]
pub struct Spares {
    shared: Arc<Shared>,
}

struct Shared {
    name: &'static str,
    stack: usize,
    keep: Duration,
    give: Sender<Job>,
    take: Receiver<Job>,
    /// Threads waiting for a job, less the jobs already promised to them (sent, or about
    /// to be): a job is only ever sent when it has a waiting thread to run it.
    idle: AtomicUsize,
}

impl Spares {
    pub fn new(name: &'static str, stack: usize, keep: Duration) -> Spares {
        let (give, take) = crossbeam_channel::unbounded();
        Spares {
            shared: Arc::new(Shared {
                name,
                stack,
                keep,
                give,
                take,
                idle: AtomicUsize::new(0),
            }),
        }
    }

    /// Runs `job` on a waiting thread, or on a new one. An error (no thread could be
    /// started) drops the job unrun.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) -> io::Result<()> {
        if take_one(&self.shared.idle) {
            // Unbounded: never blocks, and the receiver lives as long as `shared`.
            let _ = self.shared.give.send(Box::new(job));
            return Ok(());
        }
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name(shared.name.into())
            .stack_size(shared.stack)
            .spawn(move || {
                run_caught(Box::new(job));
                shared.serve();
            })
            .map(drop)
    }

    /// Threads waiting for a job now.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.shared.idle.load(Ordering::SeqCst)
    }
}

impl Shared {
    /// Waits for jobs and runs them until none came for `keep`.
    fn serve(&self) {
        loop {
            self.idle.fetch_add(1, Ordering::SeqCst);
            let job = loop {
                match self.take.recv_timeout(self.keep) {
                    Ok(job) => break job,
                    // Leave, unless every waiting thread has a job promised: then one is
                    // on its way, and this thread may be the one to take it.
                    Err(RecvTimeoutError::Timeout) if take_one(&self.idle) => return,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            };
            run_caught(job);
        }
    }
}

/// Decrements `idle` if it is above zero.
fn take_one(idle: &AtomicUsize) -> bool {
    idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// A panicking job ends only itself; its thread serves on.
fn run_caught(job: Job) {
    let _ = catch_unwind(AssertUnwindSafe(job));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::time::Instant;

    /// Runs a job and waits for it: the name of the thread it ran on.
    fn ran_on(spares: &Spares) -> Option<String> {
        let (done_tx, done) = crossbeam_channel::bounded(1);
        spares
            .run(move || {
                let _ = done_tx.send(std::thread::current().name().map(str::to_string));
            })
            .unwrap();
        done.recv_timeout(Duration::from_secs(5)).unwrap()
    }

    fn wait_until(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !what() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_finished_thread_runs_the_next_job_and_a_busy_one_is_not_waited_for() {
        let spares = Spares::new("spare-test", 64 * 1024, Duration::from_secs(5));
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let record = |threads: &Arc<Mutex<HashSet<_>>>| {
            let threads = threads.clone();
            move || {
                threads.lock().unwrap().insert(std::thread::current().id());
            }
        };
        spares.run(record(&threads)).unwrap();
        wait_until(|| spares.idle() == 1);
        spares.run(record(&threads)).unwrap();
        wait_until(|| spares.idle() == 1);
        assert_eq!(
            threads.lock().unwrap().len(),
            1,
            "the second job reused the thread"
        );

        // A job that blocks does not hold up the next one: it gets a thread of its own.
        let (release, blocked) = crossbeam_channel::bounded::<()>(0);
        spares
            .run(move || {
                let _ = blocked.recv();
            })
            .unwrap();
        wait_until(|| spares.idle() == 0);
        ran_on(&spares);
        release.send(()).unwrap();
        wait_until(|| spares.idle() == 2);
    }

    #[test]
    fn a_panicking_job_leaves_its_thread_serving() {
        let spares = Spares::new("spare-test", 64 * 1024, Duration::from_secs(5));
        spares.run(|| panic!("job failed")).unwrap();
        wait_until(|| spares.idle() == 1);
        assert_eq!(ran_on(&spares).as_deref(), Some("spare-test"));
        wait_until(|| spares.idle() == 1);
        assert_eq!(
            Arc::strong_count(&spares.shared),
            2,
            "one thread, still serving"
        );
    }

    #[test]
    fn idle_threads_leave_after_the_keep_time_and_jobs_still_run() {
        let spares = Spares::new("spare-test", 64 * 1024, Duration::from_millis(20));
        for _ in 0..4 {
            spares.run(|| {}).unwrap();
        }
        wait_until(|| spares.idle() == 0 && Arc::strong_count(&spares.shared) == 1);
        assert_eq!(ran_on(&spares).as_deref(), Some("spare-test"));
    }
}
