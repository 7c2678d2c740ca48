//! The HTTP server: one tiny_http listener served by a fixed pool of blocking worker
//! threads. A request body must arrive within a total deadline, and a client that stalls
//! cannot pin a worker (see [`receive_body`]). A panicking handler answers 500 and its
//! thread lives on. Shutdown stops the workers taking new requests and waits a bounded
//! time for in-flight ones.
//!
//! Why no socket timeouts: on Linux `SO_RCVTIMEO` on the listening socket is inherited by
//! accepted sockets, but it also makes `accept()` time out, and tiny_http 0.12's accept
//! thread ends on the first accept error — the server would stop accepting after one idle
//! period. tiny_http exposes no accepted socket to set it on afterwards.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use socket2::{Domain, Socket, Type};

use super::error::ApiError;
use super::request::{read_body, Reply, Req};
use crate::app::App;
use crate::config::ServerConfig;
use crate::telemetry;
use crate::telemetry::events::ms;
use crate::telemetry::Line;

/// A request handler: the product's is `router::route`.
pub type Handler = fn(&App, &Req) -> Result<Reply, ApiError>;

/// How long a worker waits in `recv` before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(100);

/// Extra wait beyond the body deadline, so a reader that hit the deadline can still hand
/// its 408 back to the worker.
const BODY_SLACK: Duration = Duration::from_millis(250);

pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    done: Receiver<()>,
    workers: Vec<JoinHandle<()>>,
}

/// Binds the listener with socket timeouts and starts `worker_threads` workers.
pub fn start(app: Arc<App>, handler: Handler) -> io::Result<HttpServer> {
    let cfg = &app.config.server;
    let addr: SocketAddr = cfg
        .listen
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {e}", cfg.listen)))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    let listener: TcpListener = socket.into();
    let addr = listener.local_addr()?;
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let server = Arc::new(server);
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done) = crossbeam_channel::unbounded();

    let mut workers = Vec::with_capacity(cfg.worker_threads);
    for n in 0..cfg.worker_threads {
        let (server, app, stop, done_tx) =
            (server.clone(), app.clone(), stop.clone(), done_tx.clone());
        let worker = std::thread::Builder::new()
            .name(format!("http-{n}"))
            .spawn(move || work(&server, &app, handler, &stop, done_tx))?;
        workers.push(worker);
    }
    Line::new("HttpServerStarted")
        .field("addr", addr)
        .field("worker_threads", cfg.worker_threads)
        .info();
    Ok(HttpServer {
        addr,
        stop,
        done,
        workers,
    })
}

impl HttpServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops taking requests and waits up to `grace` for in-flight ones. Returns true when
    /// every worker finished in time.
    pub fn shutdown(self, grace: Duration) -> bool {
        self.stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + grace;
        let mut finished = 0;
        while finished < self.workers.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(left) {
                Ok(()) => finished += 1,
                Err(_) => break,
            }
        }
        let all = finished == self.workers.len();
        if all {
            for w in self.workers {
                let _ = w.join();
            }
        }
        Line::new("HttpServerStopped")
            .field("finished_workers", finished)
            .field("graceful", all)
            .info();
        all
    }
}

fn work(
    server: &tiny_http::Server,
    app: &App,
    handler: Handler,
    stop: &AtomicBool,
    done: Sender<()>,
) {
    while !stop.load(Ordering::SeqCst) {
        match server.recv_timeout(POLL) {
            Ok(Some(request)) => {
                // Nothing a request does may take the worker down with it.
                if catch_unwind(AssertUnwindSafe(|| serve_one(app, handler, request))).is_err() {
                    Line::new("HttpWorkerRecovered").warn();
                }
            }
            Ok(None) => {}
            Err(e) => {
                Line::new("HttpReceiveFailed").field("error", e).warn();
                std::thread::sleep(POLL);
            }
        }
    }
    let _ = done.send(());
}

fn serve_one(app: &App, handler: Handler, request: tiny_http::Request) {
    let started = Instant::now();
    let method = request.method().as_str().to_string();
    let url = request.url().to_string();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_string(),
                h.value.as_str().to_string(),
            )
        })
        .collect();
    let req = Req::new(&method, &url, headers, Vec::new());
    let _serving = telemetry::context::enter(&req.request_id);
    let Some((request, body)) = receive_body(request, &app.config.server, &req, started) else {
        return;
    };
    let req = Req { body, ..req };
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(app, &req)))
        .unwrap_or_else(|_| Err(ApiError::Internal("handler panicked".into())));
    answer(request, &req, started, outcome);
}

/// Logs the request and sends the reply (or the error's envelope).
fn answer(
    request: tiny_http::Request,
    req: &Req,
    started: Instant,
    outcome: Result<Reply, ApiError>,
) {
    let (reply, failure) = match outcome {
        Ok(reply) => (reply, None),
        Err(e) => (e.reply(&req.request_id), Some(e)),
    };
    let mut line = Line::new("HttpRequest")
        .field("request_id", &req.request_id)
        .field("method", &req.method)
        .field("path", &req.path)
        .field("status", reply.status)
        .field("duration_ms", ms(started.elapsed()));
    if let Some(e) = &failure {
        line = line.field("code", e.code()).field("error", e);
    }
    if reply.status >= 500 {
        line.warn();
    } else {
        line.info();
    }
    let _ = request.respond(to_response(reply, &req.request_id));
}

/// Reads the request body within the configured deadline and size limit; `None` when the
/// request was already answered (a body error) or abandoned (a stalled client).
///
/// Small bodies (tiny_http buffers up to 1 KiB while parsing the head) and bodiless
/// requests are read in place. Larger ones are read on a helper thread while the worker
/// waits at most the deadline: a trickling client is cut off by the deadline check between
/// reads, and one that stalls completely leaves only the helper blocked, not the worker.
/// A failed body is answered by the helper too, because tiny_http drains the unread rest
/// of the body when the request is dropped — and that drain must not run on a worker.
fn receive_body(
    mut request: tiny_http::Request,
    cfg: &ServerConfig,
    req: &Req,
    started: Instant,
) -> Option<(tiny_http::Request, Vec<u8>)> {
    let declared = request.body_length();
    let chunked = request
        .headers()
        .iter()
        .any(|h| h.field.equiv("Transfer-Encoding"));
    if declared.is_some_and(|n| n <= 1024) || (declared.is_none() && !chunked) {
        return match read_body(
            request.as_reader(),
            declared,
            cfg.max_body_bytes,
            cfg.body_deadline,
        ) {
            Ok(body) => Some((request, body)),
            Err(e) => {
                answer(request, req, started, Err(e));
                None
            }
        };
    }
    let (limit, deadline) = (cfg.max_body_bytes, cfg.body_deadline);
    // A rendezvous channel: the hand-over succeeds only while the worker still waits.
    let (tx, rx) = crossbeam_channel::bounded::<(tiny_http::Request, Vec<u8>)>(0);
    let helper_req = req.clone();
    let spawned = std::thread::Builder::new()
        .name("http-body".into())
        .spawn(move || {
            let mut request = request;
            let outcome = read_body(request.as_reader(), declared, limit, deadline);
            match outcome {
                Ok(body) => {
                    if let Err(crossbeam_channel::SendError((request, _))) =
                        tx.send((request, body))
                    {
                        answer(request, &helper_req, started, Err(ApiError::BodyTimeout));
                    }
                }
                Err(e) => {
                    drop(tx);
                    answer(request, &helper_req, started, Err(e));
                }
            }
        });
    if spawned.is_err() {
        // The request went down with the closure; tiny_http answers 500 when it drops.
        Line::new("HttpBodyReaderUnavailable")
            .field("request_id", &req.request_id)
            .warn();
        return None;
    }
    match rx.recv_timeout(deadline + BODY_SLACK) {
        Ok(received) => Some(received),
        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
            Line::new("HttpBodyStalled")
                .field("request_id", &req.request_id)
                .field("method", &req.method)
                .field("path", &req.path)
                .warn();
            None
        }
        // The helper answered an error itself.
        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => None,
    }
}

fn to_response(reply: Reply, request_id: &str) -> tiny_http::Response<io::Cursor<Vec<u8>>> {
    let mut response = tiny_http::Response::from_data(reply.body).with_status_code(reply.status);
    let mut add = |name: &str, value: &str| {
        if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    };
    add("Content-Type", reply.content_type);
    add("X-Request-Id", request_id);
    for (name, value) in &reply.headers {
        add(name, value);
    }
    response
}
