//! The process-wide bound on concurrent Elasticsearch requests (`bulk_max_concurrency`),
//! shared by uploads and publication. Waiting for a permit is measured, so bulk queueing
//! is never mistaken for scan time.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

#[derive(Clone)]
pub struct Limiter {
    give: Sender<()>,
    take: Receiver<()>,
}

/// A held permit; dropping it returns the permit.
pub struct Permit {
    give: Sender<()>,
    pub waited: Duration,
}

impl Limiter {
    pub fn new(permits: usize) -> Limiter {
        let (give, take) = crossbeam_channel::bounded(permits.max(1));
        for _ in 0..permits.max(1) {
            let _ = give.send(());
        }
        Limiter { give, take }
    }

    /// Blocks until a permit is free.
    pub fn acquire(&self) -> Permit {
        let started = Instant::now();
        // The limiter holds a sender itself, so the channel never disconnects.
        let _ = self.take.recv();
        Permit {
            give: self.give.clone(),
            waited: started.elapsed(),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let _ = self.give.send(());
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
        assert!(l.take.try_recv().is_err(), "a third permit was available");
        drop(a);
        let _c = l.acquire();
    }
}
