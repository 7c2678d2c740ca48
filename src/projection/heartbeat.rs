//! The heartbeat of one claim: a thread that renews the lease every
//! `projection.heartbeat_seconds`, independently of page work, so a slow bulk never
//! starves it. When a renewal finds the lease gone it disconnects the `lost` channel at
//! once, which cancels the worker's waits and stops further pages.

use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use super::outbox::{self, OutboxClaim};
use super::ProjectionError;
use crate::db::Db;
use crate::telemetry::Line;

pub struct Heartbeat {
    stop: Mutex<Option<Sender<()>>>,
    lost: Receiver<()>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Heartbeat {
    pub fn start(db: Db, claim: OutboxClaim, period: Duration, lease: Duration) -> Heartbeat {
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let (lost_tx, lost) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name(format!("heartbeat-{}", claim.id))
            .spawn(move || beat(&db, &claim, period, lease, &stop_rx, lost_tx))
            .ok();
        Heartbeat {
            stop: Mutex::new(Some(stop_tx)),
            lost,
            thread: Mutex::new(thread),
        }
    }

    /// Disconnected when the lease was lost (or the heartbeat could not start).
    pub fn cancel(&self) -> &Receiver<()> {
        &self.lost
    }

    pub fn is_lost(&self) -> bool {
        matches!(self.lost.try_recv(), Err(TryRecvError::Disconnected))
    }

    /// Stops renewing and waits for the thread; idempotent. Called before the claim's last
    /// write (release, completion, error), so a renewal can never race it and report a
    /// lease as lost that was simply given back.
    pub fn stop(&self) {
        self.stop.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn beat(
    db: &Db,
    claim: &OutboxClaim,
    period: Duration,
    lease: Duration,
    stop: &Receiver<()>,
    lost: Sender<()>,
) {
    loop {
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            // Stopped by the worker.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        match outbox::renew(db, claim, lease) {
            Ok(()) => Line::new("ScanProjectionLeaseRenewed")
                .field("outbox_id", claim.id)
                .field("work", &claim.work)
                .info(),
            Err(ProjectionError::LeaseLost) => {
                Line::new("ScanProjectionLeaseLost")
                    .field("outbox_id", claim.id)
                    .field("work", &claim.work)
                    .warn();
                drop(lost);
                return;
            }
            // The database may be back before the lease runs out: keep trying.
            Err(e) => Line::new("ScanProjectionLeaseRenewFailed")
                .field("outbox_id", claim.id)
                .field("error", e)
                .warn(),
        }
    }
}
