//! Long-lived threads that send bulk requests, the one way uploads and publication send
//! a write's requests concurrently: each request a job, the caller free to go on meanwhile
//! (a publication worker reads and builds its next page while the last one is written) and
//! to wait for all of them later. Starting a thread per request costs more CPU than the
//! client's own work on the request: clone and exit, a stack mapped and unmapped (with TLB
//! shootdowns across CPUs) and a fresh allocator heap.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::bulk::BulkOp;
use super::client::EsClient;
use super::error::EsError;
use super::limit::Limiter;
use super::writer::{WritePolicy, WriteReport, Writer};

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

/// What a write's requests need on the sender threads, owned: a job may outlive the
/// caller's borrows (and must not hold the application, whose last reference a sender
/// thread would then drop).
pub struct SendContext {
    pub es: EsClient,
    pub limiter: Limiter,
    pub policy: WritePolicy,
    /// A message or disconnect aborts the requests' waits at once (a lost lease).
    pub cancel: Option<Receiver<()>>,
    pub trace_id: String,
}

impl SendContext {
    fn writer(&self) -> Writer<'_> {
        Writer {
            es: &self.es,
            limiter: &self.limiter,
            policy: self.policy,
            cancel: self.cancel.as_ref(),
            trace_id: &self.trace_id,
        }
    }
}

/// The requests of one write being sent, and its operations: held here as well, so that the
/// thread that built them frees them once every request has ended (mimalloc defers a free
/// from another thread, and collecting those costs the builder on its next allocations).
pub struct Writes {
    requests: Vec<Submitted<(Result<WriteReport, EsError>, Instant)>>,
    ops: Arc<Vec<BulkOp>>,
}

/// A write's outcome: the first failure once every request has ended, and when the last
/// request ended.
pub struct Written {
    pub result: Result<WriteReport, EsError>,
    pub ended: Option<Instant>,
}

impl Writes {
    /// Waits for every request of the write.
    pub fn wait(self) -> Written {
        let mut report = WriteReport::default();
        let mut first = Ok(());
        let mut ended = None;
        for request in self.requests {
            let (result, at) = request.wait().unwrap_or_else(|| {
                let panicked = Err(EsError::Transport("bulk sender panicked".into()));
                (panicked, Instant::now())
            });
            ended = ended.max(Some(at));
            match result {
                Ok(r) => report.add(&r),
                Err(e) if first.is_ok() => first = Err(e),
                Err(_) => {}
            }
        }
        // The senders' shares were dropped before their results came.
        drop(self.ops);
        Written {
            result: first.map(|()| report),
            ended,
        }
    }
}

impl Senders {
    /// Sends `ops` as requests within `ctx`'s policy on these threads: each request a job
    /// of its own (operations on distinct documents, whose order cannot matter), or, when
    /// `in_order`, all of them one after the other as one job.
    pub fn write(
        &self,
        ctx: &Arc<SendContext>,
        ops: Vec<BulkOp>,
        in_order: bool,
    ) -> Result<Writes, EsError> {
        let ops = Arc::new(ops);
        let requests = if in_order {
            let (ctx, ops) = (ctx.clone(), ops.clone());
            vec![self.submit(move || (ctx.writer().write(&ops), Instant::now()))]
        } else {
            let ranges = ctx.writer().requests(&ops)?;
            ranges
                .into_iter()
                .map(|range| {
                    let (ctx, ops, queued) = (ctx.clone(), ops.clone(), Instant::now());
                    self.submit(move || {
                        let sent = ctx.writer().send(&ops[range], queued.elapsed());
                        (sent, Instant::now())
                    })
                })
                .collect()
        };
        Ok(Writes { requests, ops })
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
