//! Shared emulator state (store, faults, request log) behind poison-tolerant locks, the
//! periodic refresher, and `refresh=wait_for` waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use crate::faults::Faults;
use crate::ranked::RankedCache;
use crate::reqlog::RequestLog;
use crate::store::Store;

/// HTTP limits of a real node (`http.max_initial_line_length`, `http.max_content_length`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_initial_line: usize,
    pub max_content_length: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_initial_line: 4096,
            max_content_length: 100 * 1024 * 1024,
        }
    }
}

pub struct App {
    pub store: Mutex<Store>,
    /// Notified after every refresh that published documents.
    pub refreshed: Condvar,
    pub faults: Mutex<Faults>,
    /// Notified when pauses are released.
    pub released: Condvar,
    pub log: Mutex<RequestLog>,
    /// Sorted hit lists of recent sorted searches (see `ranked`).
    pub ranked: Mutex<RankedCache>,
    pub limits: Limits,
    /// CPU time (ns) spent serving requests and refreshing, for `bench`'s per-core figure.
    pub busy_cpu_ns: AtomicU64,
    /// Default of `indices.id_field_data.enabled` (ES 8: false) when the cluster setting is unset.
    pub id_field_data_default: bool,
}

/// Locks a mutex even if a panicking handler poisoned it (the state stays usable; handlers
/// never leave it half-written across a panic point that matters for tests).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl App {
    pub fn new(limits: Limits, id_field_data_default: bool) -> Arc<App> {
        Arc::new(App {
            store: Mutex::new(Store::default()),
            refreshed: Condvar::new(),
            faults: Mutex::new(Faults::default()),
            released: Condvar::new(),
            log: Mutex::new(RequestLog::default()),
            ranked: Mutex::new(RankedCache::default()),
            limits,
            busy_cpu_ns: AtomicU64::new(0),
            id_field_data_default,
        })
    }

    /// Runs the periodic refresh (each index's `refresh_interval`; `-1` disables it).
    pub fn spawn_refresher(app: &Arc<App>) {
        let weak = Arc::downgrade(app);
        thread::spawn(move || loop {
            thread::sleep(Duration::from_millis(50));
            let Some(app) = weak.upgrade() else { return };
            let cpu = thread_cpu_ns();
            let mut store = lock(&app.store);
            let mut any = false;
            for idx in store.indices.values_mut() {
                if let Some(every) = idx.refresh_interval {
                    if !idx.dirty.is_empty() && idx.last_refresh.elapsed() >= every {
                        any |= idx.refresh();
                    }
                }
            }
            drop(store);
            app.add_busy(cpu);
            if any {
                app.refreshed.notify_all();
            }
        });
    }

    /// Adds the calling thread's CPU time since `since` (from [`thread_cpu_ns`]).
    pub fn add_busy(&self, since: u64) {
        self.busy_cpu_ns
            .fetch_add(thread_cpu_ns().saturating_sub(since), Ordering::Relaxed);
    }

    /// Blocks until each `(index, generation)` has seen a later refresh (or is gone).
    pub fn wait_for_refresh(&self, gens: &[(String, u64)]) {
        let mut store = lock(&self.store);
        loop {
            let pending = gens
                .iter()
                .any(|(name, g)| store.indices.get(name).is_some_and(|i| i.refresh_gen <= *g));
            if !pending {
                return;
            }
            store = match self
                .refreshed
                .wait_timeout(store, Duration::from_millis(100))
            {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// CPU time consumed by the calling thread, in nanoseconds (0 if unavailable).
pub fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime only writes into the zeroed timespec we own.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) != 0 {
            return 0;
        }
        ts
    };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
