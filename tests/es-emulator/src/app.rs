//! Shared emulator state (store, faults, request log) behind poison-tolerant locks, the
//! periodic refresher, and `refresh=wait_for` waiting.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::faults::Faults;
use crate::ranked::RankedCache;
use crate::reqlog::RequestLog;
use crate::store::Store;

/// Documents a refresh publishes per store lock (about a millisecond of work).
const REFRESH_SLICE: usize = 256;

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
    /// Taken through [`App::lock_store`] only.
    store: Mutex<Store>,
    /// Requests waiting for the store lock (see [`App::lock_store`]).
    store_waiters: AtomicUsize,
    /// Nanoseconds the store lock has been held in all (`GET /_emulator/store`): every
    /// write is applied under it, so a run that kept it held for all its wall time was
    /// bounded by it, not by the CPU.
    store_held_ns: AtomicU64,
    /// Notified after every refresh that published documents.
    pub refreshed: Condvar,
    pub faults: Mutex<Faults>,
    /// Notified when pauses are released.
    pub released: Condvar,
    pub log: Mutex<RequestLog>,
    /// Sorted hit lists of recent sorted searches (see `ranked`).
    pub ranked: Mutex<RankedCache>,
    pub limits: Limits,
    /// The `Authorization` value every request must carry (`--api-key`, `--basic-auth`),
    /// as a cluster with security on requires credentials; `None` accepts anyone.
    pub required_authorization: Option<String>,
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
    pub fn new(
        limits: Limits,
        id_field_data_default: bool,
        required_authorization: Option<String>,
    ) -> Arc<App> {
        Arc::new(App {
            store: Mutex::new(Store::default()),
            store_waiters: AtomicUsize::new(0),
            store_held_ns: AtomicU64::new(0),
            refreshed: Condvar::new(),
            faults: Mutex::new(Faults::default()),
            released: Condvar::new(),
            log: Mutex::new(RequestLog::default()),
            ranked: Mutex::new(RankedCache::default()),
            limits,
            required_authorization,
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
            let due: Vec<String> = app
                .lock_store()
                .indices
                .values()
                .filter(|idx| {
                    idx.refresh_interval.is_some_and(|every| {
                        !idx.dirty.is_empty() && idx.last_refresh.elapsed() >= every
                    })
                })
                .map(|idx| idx.name.clone())
                .collect();
            let mut any = false;
            for name in &due {
                any |= app.refresh_sliced(name);
            }
            app.add_busy(cpu);
            if any {
                app.refreshed.notify_all();
            }
        });
    }

    /// Locks the store, counted as waiting meanwhile. A bulk gives way between its slices
    /// of items only while someone waits (on a real node a small request never waits for a
    /// big bulk); yielding after every slice regardless handed the CPU to whatever else was
    /// runnable, a quarter of a bulk's time when nobody waited.
    pub fn lock_store(&self) -> StoreGuard<'_> {
        self.store_waiters.fetch_add(1, Ordering::SeqCst);
        let store = lock(&self.store);
        self.store_waiters.fetch_sub(1, Ordering::SeqCst);
        StoreGuard {
            guard: Some(store),
            since: Instant::now(),
            held_ns: &self.store_held_ns,
        }
    }

    /// Nanoseconds the store lock has been held since the emulator started.
    pub fn store_held_ns(&self) -> u64 {
        self.store_held_ns.load(Ordering::Relaxed)
    }

    /// Whether a request waits in [`App::lock_store`].
    pub fn store_wanted(&self) -> bool {
        self.store_waiters.load(Ordering::SeqCst) > 0
    }

    /// The periodic refresh of index `name`: publishes the writes pending when called,
    /// `REFRESH_SLICE` documents per store lock. A real refresh stops neither indexing nor
    /// search, and publishing a second's writes of four uploaders at once held every
    /// request for 100–300 ms. (An explicit `_refresh`, whose caller waits for all of it,
    /// publishes in one go.) Returns whether anything was published. Slices are taken
    /// from the front of the pending queue, so when this returns, every write queued
    /// before the call is searchable, whoever published it.
    pub fn refresh_sliced(&self, name: &str) -> bool {
        let mut left = {
            let mut store = self.lock_store();
            let Some(idx) = store.indices.get_mut(name) else {
                return false;
            };
            idx.last_refresh = std::time::Instant::now();
            idx.dirty.len()
        };
        let any = left > 0;
        while left > 0 {
            let mut store = self.lock_store();
            let Some(idx) = store.indices.get_mut(name) else {
                break;
            };
            match idx.publish(left.min(REFRESH_SLICE)) {
                // Another refresh took the rest.
                0 => break,
                n => left -= n,
            }
            drop(store);
            thread::yield_now();
        }
        any
    }

    /// Adds the calling thread's CPU time since `since` (from [`thread_cpu_ns`]).
    pub fn add_busy(&self, since: u64) {
        self.busy_cpu_ns
            .fetch_add(thread_cpu_ns().saturating_sub(since), Ordering::Relaxed);
    }

    /// Blocks until, in each `(index, queued)`, the writes queued up to `queued` are
    /// searchable (or the index is gone).
    pub fn wait_for_refresh(&self, waits: &[(String, u64)]) {
        let mut store = self.lock_store();
        loop {
            let pending = waits.iter().any(|(name, queued)| {
                store
                    .indices
                    .get(name)
                    .is_some_and(|i| i.published < *queued)
            });
            if !pending {
                return;
            }
            store = store.wait(&self.refreshed, Duration::from_millis(100));
        }
    }
}

/// The locked store; adds how long it was held to [`App::store_held_ns`] when released.
pub struct StoreGuard<'a> {
    /// `None` only inside [`StoreGuard::wait`], which releases the lock meanwhile.
    guard: Option<MutexGuard<'a, Store>>,
    since: Instant,
    held_ns: &'a AtomicU64,
}

impl<'a> StoreGuard<'a> {
    /// Waits on `cv` for at most `timeout`, the lock released meanwhile (and not counted).
    fn wait(mut self, cv: &Condvar, timeout: Duration) -> StoreGuard<'a> {
        self.count();
        let guard = self
            .guard
            .take()
            .map(|g| match cv.wait_timeout(g, timeout) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            });
        StoreGuard {
            guard,
            since: Instant::now(),
            held_ns: self.held_ns,
        }
    }

    fn count(&self) {
        let ns = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.held_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

impl Deref for StoreGuard<'_> {
    type Target = Store;
    fn deref(&self) -> &Store {
        match &self.guard {
            Some(g) => g,
            None => unreachable!("a store guard is read only while it holds the lock"),
        }
    }
}

impl DerefMut for StoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Store {
        match &mut self.guard {
            Some(g) => g,
            None => unreachable!("a store guard is written only while it holds the lock"),
        }
    }
}

impl Drop for StoreGuard<'_> {
    fn drop(&mut self) {
        if self.guard.is_some() {
            self.count();
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn visible(app: &App, id: &str) -> bool {
        app.lock_store().indices["r"]
            .docs
            .get(id)
            .is_some_and(|s| s.searchable.is_some())
    }

    #[test]
    fn a_sliced_refresh_publishes_every_earlier_write_while_others_refresh_too() {
        let app = App::new(Limits::default(), false, None);
        let body = json!({"settings": {"index": {"refresh_interval": "-1"}}});
        assert!(app.lock_store().create_index("r", Some(&body)).is_ok());
        let put = |i: usize| {
            if let Some(idx) = app.lock_store().indices.get_mut("r") {
                idx.put(&format!("d{i}"), Some(json!({"n": i})), 1, None);
            }
        };
        // Many slices' worth pending, then a second refresher racing the checking one.
        (0..3 * REFRESH_SLICE).for_each(put);
        thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..200 {
                    app.refresh_sliced("r");
                }
            });
            for i in 3 * REFRESH_SLICE..3 * REFRESH_SLICE + 200 {
                put(i);
                app.refresh_sliced("r");
                assert!(visible(&app, &format!("d{i}")), "d{i} after its refresh");
                assert!(visible(&app, "d0"));
            }
        });
        let store = app.lock_store();
        let idx = &store.indices["r"];
        assert!(idx.dirty.is_empty());
        assert_eq!(idx.published, idx.queued);
        assert_eq!(idx.queued, (3 * REFRESH_SLICE + 200) as u64);
    }

    #[test]
    fn the_store_lock_counts_the_time_it_was_held_not_the_time_a_waiter_released_it() {
        let app = App::new(Limits::default(), false, None);
        let body = json!({"settings": {"index": {"refresh_interval": "-1"}}});
        assert!(app.lock_store().create_index("r", Some(&body)).is_ok());
        let start = app.store_held_ns();
        let store = app.lock_store();
        thread::sleep(Duration::from_millis(30));
        drop(store);
        let held = app.store_held_ns() - start;
        assert!(held >= 30_000_000, "held {held} ns");

        // A `wait_for` waiter releases the lock while it waits for the refresh (here 300 ms
        // away): its wait is not counted.
        let queued = {
            let mut store = app.lock_store();
            let idx = store.indices.get_mut("r").expect("index r");
            idx.put("d", Some(json!({"n": 1})), 1, None);
            idx.queued
        };
        let before = app.store_held_ns();
        thread::scope(|s| {
            s.spawn(|| {
                thread::sleep(Duration::from_millis(300));
                app.refresh_sliced("r");
                app.refreshed.notify_all();
            });
            app.wait_for_refresh(&[("r".to_string(), queued)]);
        });
        let waited = app.store_held_ns() - before;
        assert!(waited < 150_000_000, "held {waited} ns over a 300 ms wait");
        assert!(visible(&app, "d"));
    }
}
