//! Keeping a claimed execution's lease alive while the client works on it: a thread that
//! heartbeats at a third of the lease, and notes when the server says the execution is no
//! longer this scanner's.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use uuid::Uuid;

use crate::api::Server;
use crate::error::Error;

pub struct Heartbeat {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    lost: Arc<Mutex<Option<String>>>,
}

impl Heartbeat {
    /// Heartbeats `execution` every `lease / 3` until dropped.
    pub fn start(server: &Server, execution: Uuid, lease: Duration) -> Heartbeat {
        let every = (lease / 3).max(Duration::from_secs(1));
        let (stop, stopped) = bounded::<()>(0);
        let lost = Arc::new(Mutex::new(None));
        let server = server.clone();
        let noted = Arc::clone(&lost);
        let thread = std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    match server.heartbeat(execution) {
                        Ok(()) => {}
                        Err(e @ Error::Refused { .. }) => {
                            if let Ok(mut l) = noted.lock() {
                                *l = Some(format!("execution {execution} is no longer ours: {e}"));
                            }
                            return;
                        }
                        // The next beat tries again; the lease outlasts two missed beats.
                        Err(e) => log::warn!("heartbeat: {e}"),
                    }
                }
            })
            .ok();
        Heartbeat {
            stop: Some(stop),
            thread,
            lost,
        }
    }

    /// Why the execution was lost, once the server said so.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
