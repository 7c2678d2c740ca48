//! The HTTP server: one tiny_http listener served by a fixed pool of blocking worker
//! threads. Socket timeouts are set on the listening socket (accepted sockets inherit them
//! on Linux) so no read or write blocks forever; a body must also arrive within a total
//! deadline. A panicking handler answers 500 and its thread lives on. Shutdown stops the
//! workers taking new requests and waits a bounded time for in-flight ones.

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
use crate::telemetry::events::ms;
use crate::telemetry::Line;

/// A request handler: the product's is `router::route`.
pub type Handler = fn(&App, &Req) -> Result<Reply, ApiError>;

/// How long a worker waits in `recv` before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(100);

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
    socket.set_read_timeout(Some(cfg.read_timeout))?;
    socket.set_write_timeout(Some(cfg.read_timeout))?;
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

fn serve_one(app: &App, handler: Handler, mut request: tiny_http::Request) {
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
    let cfg = &app.config.server;
    let declared = request.body_length();
    let body = read_body(
        request.as_reader(),
        declared,
        cfg.max_body_bytes,
        cfg.body_deadline,
    );
    let req = Req::new(&method, &url, headers, Vec::new());
    let request_id = req.request_id.clone();
    let outcome = body.and_then(|body| {
        let req = Req {
            body,
            ..req.clone()
        };
        catch_unwind(AssertUnwindSafe(|| handler(app, &req)))
            .unwrap_or_else(|_| Err(ApiError::Internal("handler panicked".into())))
    });
    let (reply, failure) = match outcome {
        Ok(reply) => (reply, None),
        Err(e) => (e.reply(&request_id), Some(e)),
    };
    let mut line = Line::new("HttpRequest")
        .field("request_id", &request_id)
        .field("method", &method)
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
    let _ = request.respond(to_response(reply, &request_id));
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
