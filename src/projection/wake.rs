//! Waking idle publication workers: instead of sleeping out their poll interval, idle
//! workers wait on a [`Wake`], which a committed final (its execution's row is now due) and
//! a worker that found work after idling (more may be due: a burst) ring. Polling stays as
//! the fallback for rows made due elsewhere (another instance, `psql`, a lease expiring).

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::telemetry::metrics::{self, Occupancy};

/// A generation counter with a condition variable: a waiter that read generation `g`
/// before looking for work returns as soon as the generation moves past `g`, so a ring
/// between its look and its wait is not lost.
pub struct Wake {
    generation: Mutex<u64>,
    rung: Condvar,
    /// Workers waiting now.
    pub idle: Occupancy,
}

impl Default for Wake {
    fn default() -> Wake {
        Wake {
            generation: Mutex::default(),
            rung: Condvar::new(),
            idle: Occupancy::new(&metrics::get().projection_workers_idle),
        }
    }
}

impl Wake {
    /// The current generation, read before looking for work.
    pub fn generation(&self) -> u64 {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiting worker.
    pub fn ring(&self) {
        *self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += 1;
        self.rung.notify_all();
    }

    /// Waits until the generation moves past `seen`, or `timeout`; true when rung.
    pub fn wait(&self, seen: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let _idle = self.idle.enter();
        let mut g = self
            .generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while *g == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self
                .rung
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_releases_a_waiter_long_before_its_timeout() {
        let wake = Arc::new(Wake::default());
        let seen = wake.generation();
        let w = wake.clone();
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            (w.wait(seen, Duration::from_secs(60)), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(20));
        wake.ring();
        let (rung, waited) = waiter.join().unwrap();
        assert!(rung);
        assert!(waited < Duration::from_secs(30), "{waited:?}");
    }

    #[test]
    fn a_ring_before_the_wait_is_not_lost() {
        let wake = Wake::default();
        let seen = wake.generation();
        wake.ring();
        let started = Instant::now();
        assert!(wake.wait(seen, Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn without_a_ring_the_wait_times_out() {
        let wake = Wake::default();
        assert!(!wake.wait(wake.generation(), Duration::from_millis(10)));
    }
}
