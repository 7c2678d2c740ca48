//! Long-lived threads that send bulk requests for a caller that goes on meanwhile (a
//! publication worker reads and builds its next page while the last one is written).
//! Starting a thread per request costs more CPU than the client's own work on the request:
//! clone and exit, a stack mapped and unmapped (with TLB shootdowns across CPUs) and a
//! fresh allocator heap.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads taking jobs in submission order; a panicking job ends only
/// itself. Dropping it lets the threads finish what was submitted, then joins them.
pub struct Senders {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

/// A submitted job's result, once it has run.
pub struct Submitted<T>(Receiver<T>);

impl Senders {
    /// Starts `threads` threads (at least one) named `{name}-{n}`.
    pub fn start(name: &str, threads: usize) -> Senders {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let threads: Vec<JoinHandle<()>> = (0..threads.max(1))
            .filter_map(|n| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{n}"))
                    .spawn(move || {
                        for job in rx {
                            let _ = catch_unwind(AssertUnwindSafe(job));
                        }
                    })
                    .ok()
            })
            .collect();
        Senders {
            jobs: (!threads.is_empty()).then_some(tx),
            threads,
        }
    }

    /// Runs `job` on the first free thread (here and now if none could be started).
    pub fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Submitted<T> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let run: Job = Box::new(move || {
            let _ = tx.send(job());
        });
        match &self.jobs {
            Some(jobs) => {
                if let Err(unsent) = jobs.send(run) {
                    let _ = catch_unwind(AssertUnwindSafe(unsent.into_inner()));
                }
            }
            None => {
                let _ = catch_unwind(AssertUnwindSafe(run));
            }
        }
        Submitted(rx)
    }
}

impl<T> Submitted<T> {
    /// Waits for the job's result; `None` when it panicked.
    pub fn wait(self) -> Option<T> {
        self.0.recv().ok()
    }
}

impl Drop for Senders {
    fn drop(&mut self) {
        self.jobs.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn jobs_run_on_the_threads_and_a_panic_ends_only_its_job() {
        let senders = Senders::start("t", 2);
        let ran = Arc::new(AtomicUsize::new(0));
        let pending: Vec<_> = (0..10)
            .map(|i| {
                let ran = ran.clone();
                senders.submit(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                    assert!(i != 3, "job 3 panics");
                    std::thread::current().name().map(str::to_owned)
                })
            })
            .collect();
        let results: Vec<_> = pending.into_iter().map(Submitted::wait).collect();
        assert_eq!(ran.load(Ordering::SeqCst), 10);
        assert!(results[3].is_none());
        for (i, r) in results.iter().enumerate().filter(|(i, _)| *i != 3) {
            let name = r.as_ref().and_then(|n| n.as_deref());
            assert!(
                matches!(name, Some("t-0") | Some("t-1")),
                "job {i} ran on {name:?}"
            );
        }
    }

    #[test]
    fn dropping_finishes_what_was_submitted() {
        let senders = Senders::start("t", 1);
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..5 {
            let ran = ran.clone();
            drop(senders.submit(move || {
                std::thread::sleep(std::time::Duration::from_millis(5));
                ran.fetch_add(1, Ordering::SeqCst);
            }));
        }
        drop(senders);
        assert_eq!(ran.load(Ordering::SeqCst), 5);
    }
}
