//! The process-wide bound on concurrent Elasticsearch requests (`bulk_max_concurrency`),
//! shared by uploads and publication, granted first come, first served. Waiting for a
//! permit is measured, so bulk queueing is never mistaken for scan time.
//!
//! Why in order: with a channel of tokens as the semaphore, a sender thread that was
//! already running took a returned permit before the woken waiter could, so one
//! publication worker's requests could wait while the others' went out, and its execution
//! finished last and alone, with the other cores idle.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    tickets: Mutex<Tickets>,
    admitted: Condvar,
}

/// Ticket `n` may go once `n < admitted`: each acquire draws the next ticket, each
/// release admits one more.
struct Tickets {
    next: u64,
    admitted: u64,
}

/// A held permit; dropping it returns the permit.
pub struct Permit {
    inner: Arc<Inner>,
    pub waited: Duration,
}

impl Inner {
    /// The state stays consistent under a panic elsewhere (two counters, each updated in
    /// one step), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Tickets> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Limiter {
    pub fn new(permits: usize) -> Limiter {
        Limiter {
            inner: Arc::new(Inner {
                tickets: Mutex::new(Tickets {
                    next: 0,
                    admitted: permits.max(1) as u64,
                }),
                admitted: Condvar::new(),
            }),
        }
    }

    /// Blocks until a permit is free and every earlier caller has had one.
    pub fn acquire(&self) -> Permit {
        let started = Instant::now();
        let mut tickets = self.inner.lock();
        let ticket = tickets.next;
        tickets.next += 1;
        while ticket >= tickets.admitted {
            tickets = self
                .inner
                .admitted
                .wait(tickets)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(tickets);
        Permit {
            inner: self.inner.clone(),
            waited: started.elapsed(),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.inner.lock().admitted += 1;
        // Every waiter checks its own ticket; only the next one goes.
        self.inner.admitted.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_n_permits_at_once() {
        let l = Limiter::new(2);
        let a = l.acquire();
        let _b = l.acquire();
        {
            let t = l.inner.lock();
            assert!(t.next >= t.admitted, "a third permit was available");
        }
        drop(a);
        let _c = l.acquire();
    }

    #[test]
    fn permits_go_in_the_order_they_were_asked_for() {
        let l = Limiter::new(1);
        let held = l.acquire();
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..5)
            .map(|n| {
                let (mine, order) = (l.clone(), order.clone());
                let t = std::thread::spawn(move || {
                    let _p = mine.acquire();
                    order.lock().unwrap().push(n);
                });
                // Each waiter has drawn its ticket before the next one starts.
                while l.inner.lock().next < n + 2 {
                    std::thread::yield_now();
                }
                t
            })
            .collect();
        drop(held);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }
}
