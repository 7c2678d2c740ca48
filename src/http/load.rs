//! What an HTTP server is doing now: open connections, bodies being read, busy workers,
//! answers being written;
//! each an [`Occupancy`], so its server reads its own and `/metrics` the process's.

use crate::telemetry::metrics::{self, Occupancy};

pub struct HttpLoad {
    /// Accepted and not yet closed (tiny_http's count, copied at each acceptor poll).
    pub connections: Occupancy,
    /// Bodies being read, or waiting for a permit to be read, off the workers.
    pub body_reads: Occupancy,
    /// Large bodies being read: permits held, at most `server.max_body_reads`.
    pub large_body_reads: Occupancy,
    /// Workers running a handler or writing a small answer.
    pub busy_workers: Occupancy,
    /// Large answers being written off the workers (to a client that may read slowly).
    pub answer_writes: Occupancy,
}

impl Default for HttpLoad {
    fn default() -> HttpLoad {
        let m = metrics::get();
        HttpLoad {
            connections: Occupancy::new(&m.http_connections_open),
            body_reads: Occupancy::new(&m.http_body_reads),
            large_body_reads: Occupancy::new(&m.http_large_body_reads),
            busy_workers: Occupancy::new(&m.http_workers_busy),
            answer_writes: Occupancy::new(&m.http_answer_writes),
        }
    }
}
