//! The HTTP server: one tiny_http listener served by a fixed pool of blocking worker
//! threads. An acceptor thread hands requests to the workers; a body larger than what
//! tiny_http buffers itself is read by a helper thread, and the request returns to the
//! workers only once its body is in, so no worker ever waits on a client (a trickling
//! client is cut off at the body deadline; a stalled one holds only its helper). A
//! panicking handler answers 500 and its thread lives on. Shutdown stops the workers taking
//! new requests and waits a bounded time for in-flight ones.
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

/// A request whose body has been read, waiting for a worker.
struct Pending {
    request: tiny_http::Request,
    req: Req,
    started: Instant,
}

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
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done) = crossbeam_channel::unbounded();
    // Rendezvous: the acceptor takes the next request from tiny_http only when a worker is
    // free to take it, so waiting requests stay in tiny_http's queue.
    let (incoming_tx, incoming) = crossbeam_channel::bounded::<tiny_http::Request>(0);
    let (ready_tx, ready) = crossbeam_channel::unbounded::<Pending>();

    let acceptor_stop = stop.clone();
    std::thread::Builder::new()
        .name("http-accept".into())
        .spawn(move || accept(&server, &incoming_tx, &acceptor_stop))?;

    let mut workers = Vec::with_capacity(cfg.worker_threads);
    for n in 0..cfg.worker_threads {
        let channels = Channels {
            incoming: incoming.clone(),
            ready: ready.clone(),
            ready_tx: ready_tx.clone(),
        };
        let (app, stop, done_tx) = (app.clone(), stop.clone(), done_tx.clone());
        let worker = std::thread::Builder::new()
            .name(format!("http-{n}"))
            .spawn(move || work(&channels, &app, handler, &stop, done_tx))?;
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

/// Moves requests from tiny_http to the workers until stopped.
fn accept(server: &tiny_http::Server, incoming: &Sender<tiny_http::Request>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match server.recv_timeout(POLL) {
            Ok(Some(request)) => {
                if incoming.send(request).is_err() {
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                Line::new("HttpReceiveFailed").field("error", e).warn();
                std::thread::sleep(POLL);
            }
        }
    }
}

/// A worker's ends of the request channels.
struct Channels {
    incoming: Receiver<tiny_http::Request>,
    ready: Receiver<Pending>,
    ready_tx: Sender<Pending>,
}

fn work(channels: &Channels, app: &App, handler: Handler, stop: &AtomicBool, done: Sender<()>) {
    while !stop.load(Ordering::SeqCst) {
        // Nothing a request does may take the worker down with it.
        let served = catch_unwind(AssertUnwindSafe(|| {
            crossbeam_channel::select! {
                recv(channels.ready) -> p => if let Ok(p) = p { dispatch(app, handler, p) },
                recv(channels.incoming) -> r => if let Ok(r) = r { begin(app, handler, r, &channels.ready_tx) },
                default(POLL) => {}
            }
        }));
        if served.is_err() {
            Line::new("HttpWorkerRecovered").warn();
        }
    }
    let _ = done.send(());
}

/// Starts a request: reads a small or absent body in place and serves it; hands a larger
/// one to a body reader.
fn begin(app: &App, handler: Handler, mut request: tiny_http::Request, ready: &Sender<Pending>) {
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
    let cfg = &app.config.server;
    let declared = request.body_length();
    let chunked = request
        .headers()
        .iter()
        .any(|h| h.field.equiv("Transfer-Encoding"));
    // tiny_http buffers bodies of up to 1 KiB while parsing the head.
    if declared.is_some_and(|n| n <= 1024) || (declared.is_none() && !chunked) {
        match read_body(
            request.as_reader(),
            declared,
            cfg.max_body_bytes,
            cfg.body_deadline,
        ) {
            Ok(body) => dispatch(
                app,
                handler,
                Pending {
                    request,
                    req: Req { body, ..req },
                    started,
                },
            ),
            Err(e) => answer(request, &req, started, Err(e)),
        }
        return;
    }
    read_in_background(request, req, started, cfg, ready.clone());
}

/// Reads a large body on its own thread, within the deadline and size limit, then queues
/// the request for the workers. A failed body is answered from this thread, because
/// tiny_http drains the unread rest of a body when the request is dropped.
fn read_in_background(
    request: tiny_http::Request,
    req: Req,
    started: Instant,
    cfg: &ServerConfig,
    ready: Sender<Pending>,
) {
    let (limit, deadline) = (cfg.max_body_bytes, cfg.body_deadline);
    let request_id = req.request_id.clone();
    let spawned = std::thread::Builder::new()
        .name("http-body".into())
        .spawn(move || {
            let mut request = request;
            let _serving = telemetry::context::enter(&req.request_id);
            let declared = request.body_length();
            match read_body(request.as_reader(), declared, limit, deadline) {
                Ok(body) => {
                    let pending = Pending {
                        request,
                        req: Req { body, ..req },
                        started,
                    };
                    // The workers are gone only when the server is shutting down.
                    if let Err(crossbeam_channel::SendError(p)) = ready.send(pending) {
                        answer(p.request, &p.req, p.started, Err(ApiError::ShuttingDown));
                    }
                }
                Err(e) => answer(request, &req, started, Err(e)),
            }
        });
    if spawned.is_err() {
        // The request went down with the closure; tiny_http answers 500 when it drops.
        Line::new("HttpBodyReaderUnavailable")
            .field("request_id", request_id)
            .warn();
    }
}

/// Runs the handler on a request whose body is in, and answers.
fn dispatch(app: &App, handler: Handler, p: Pending) {
    let _serving = telemetry::context::enter(&p.req.request_id);
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(app, &p.req)))
        .unwrap_or_else(|_| Err(ApiError::Internal("handler panicked".into())));
    answer(p.request, &p.req, p.started, outcome);
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
