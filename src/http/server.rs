//! The HTTP server: admission of requests and a fixed pool of blocking workers that only
//! ever see complete requests.
//!
//! tiny_http's per-connection threads read request heads within `server.*` limits (head
//! size, header count, head deadline, connection cap, strict body framing; see
//! `vendor/tiny_http/PATCHED.md`). The acceptor then admits each request: one without a
//! body goes to the workers; a body is read off the workers, on a thread of its own — on
//! the scanner API a large one only after the bearer token is verified, and only while
//! fewer than `server.max_body_reads` large bodies are being read. Every socket has read
//! and write timeouts, so no read of a stalled client lasts longer than
//! `server.header_timeout_ms`, and a body read ends at its deadline. With `server.tls_*`
//! the same runs over TLS, each handshake on its connection's thread within its own
//! deadline. A panicking handler answers 500 and its thread lives on. Shutdown stops the
//! workers taking new requests and waits a bounded time for in-flight ones.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use socket2::{Domain, Socket, Type};

use super::error::ApiError;
use super::load::HttpLoad;
use super::request::{read_body, Reply, Req};
use super::router::{self, BodyPolicy};
use super::spare::Spares;
use super::tls::ServerTls;
use crate::app::App;
use crate::telemetry;
use crate::telemetry::events::ms;
use crate::telemetry::Line;
use crate::upload;

/// A request handler: the product's is `router::route`.
pub type Handler = fn(&App, &Req) -> Result<Reply, ApiError>;

/// What the server serves: the handler, and how each request's body is treated before it.
#[derive(Clone, Copy)]
pub struct Routes {
    pub handle: Handler,
    pub body_policy: fn(&str, &str) -> BodyPolicy,
}

impl Routes {
    /// The product's routes.
    pub const PRODUCT: Routes = Routes {
        handle: router::route,
        body_policy: router::body_policy,
    };
}

/// How long a worker waits in `recv` before looking at the stop flag again.
const POLL: Duration = Duration::from_millis(100);

/// At most one log line per this period for a failure that can repeat in a tight loop
/// (accept failing with EMFILE, threads that cannot be started).
const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(1);

/// Stack of a thread that only reads one body or writes one reply.
const BODY_THREAD_STACK: usize = 256 * 1024;

/// How long a body reader or reply writer whose job is done waits for the next one: as
/// long as tiny_http keeps an idle connection thread.
const SPARE_THREAD_KEEP: Duration = Duration::from_secs(5);

/// Replies larger than this are written off the worker. Linux gives a TCP socket 16 KiB
/// of send buffer to start with (`tcp_wmem`), overhead included, so a reply this small is
/// written at once even to a client that reads nothing (tiny_http answers one request of a
/// connection at a time).
const INLINE_REPLY_BYTES: usize = 8 * 1024;

/// A request for the workers: its body is in, or it is answered without one.
struct Admitted {
    request: tiny_http::Request,
    req: Req,
    started: Instant,
    /// Close the connection after the answer: part of the body may be unread.
    close: bool,
    /// Answer this error without running the handler.
    refused: Option<ApiError>,
}

/// A request whose body is to be read.
struct BodyJob {
    request: tiny_http::Request,
    req: Req,
    started: Instant,
    policy: BodyPolicy,
    /// Chunked, or declared larger than `preauth_body_bytes`.
    large: bool,
}

pub struct HttpServer {
    addr: SocketAddr,
    tls: Option<ServerTls>,
    stop: Arc<AtomicBool>,
    done: Receiver<()>,
    workers: Vec<JoinHandle<()>>,
}

/// Binds the listener and starts the acceptor, the body readers and `worker_threads`
/// workers.
pub fn start(app: Arc<App>, routes: Routes) -> io::Result<HttpServer> {
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
    let limits = tiny_http::Limits {
        header_timeout: Some(cfg.header_timeout),
        max_head_bytes: cfg.max_head_bytes,
        max_headers: cfg.max_headers,
        max_connections: cfg.max_connections,
        linger: Some(cfg.linger).filter(|d| !d.is_zero()),
        handshake_timeout: Some(cfg.tls_handshake_timeout),
    };
    let tls = match &cfg.tls {
        Some(files) => Some(ServerTls::new(files.clone()).map_err(io::Error::other)?),
        None => None,
    };
    let server = match &tls {
        Some(tls) => tiny_http::Server::from_listener_with_tls(listener, tls.config(), limits),
        None => tiny_http::Server::from_listener_with_limits(listener, None, limits),
    }
    .map_err(|e| io::Error::other(e.to_string()))?;
    if in_the_clear(addr, tls.is_some()) {
        Line::new("ListeningWithoutTls").field("addr", addr).warn();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done) = crossbeam_channel::unbounded();
    // Rendezvous: the acceptor hands a request over only when a worker is free to take it,
    // so waiting requests stay in tiny_http's queue.
    let (incoming_tx, incoming) = crossbeam_channel::bounded::<Admitted>(0);
    let (ready_tx, ready) = crossbeam_channel::unbounded::<Admitted>();
    let writers = Spares::new("http-write", BODY_THREAD_STACK, SPARE_THREAD_KEEP);
    let admission = Admission {
        app: app.clone(),
        routes,
        incoming: incoming_tx,
        ready: ready_tx,
        large_reads: Permits::new(cfg.max_body_reads),
        readers: Spares::new("http-body", BODY_THREAD_STACK, SPARE_THREAD_KEEP),
        writers: writers.clone(),
    };
    let acceptor_stop = stop.clone();
    std::thread::Builder::new()
        .name("http-accept".into())
        .spawn(move || accept(&server, &admission, &acceptor_stop))?;

    let mut workers = Vec::with_capacity(cfg.worker_threads);
    for n in 0..cfg.worker_threads {
        let (incoming, ready) = (incoming.clone(), ready.clone());
        let (app, stop, done_tx) = (app.clone(), stop.clone(), done_tx.clone());
        let writers = writers.clone();
        let worker = std::thread::Builder::new()
            .name(format!("http-{n}"))
            .spawn(move || {
                let serving = Serving {
                    app: &app,
                    handler: routes.handle,
                    writers: &writers,
                };
                work(&incoming, &ready, &serving, &stop, done_tx)
            })?;
        workers.push(worker);
    }
    Line::new("HttpServerStarted")
        .field("addr", addr)
        .field("tls", tls.is_some())
        .field("worker_threads", cfg.worker_threads)
        .field("max_connections", cfg.max_connections)
        .field("max_body_reads", cfg.max_body_reads)
        .info();
    Ok(HttpServer {
        addr,
        tls,
        stop,
        done,
        workers,
    })
}

/// Whether scanner tokens would cross a network in the clear: plain HTTP on an address
/// other hosts can reach (unless a proxy in front terminates TLS, which the warning says).
fn in_the_clear(addr: SocketAddr, tls: bool) -> bool {
    !tls && !addr.ip().is_loopback()
}

impl HttpServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Re-reads the TLS certificate and key (on SIGHUP); the one in use stays if the
    /// files do not load. Logs the outcome. Without TLS, does nothing.
    pub fn reload_tls(&self) {
        let Some(tls) = &self.tls else { return };
        match tls.reload() {
            Ok(()) => Line::new("TlsCertificateReloaded").info(),
            Err(e) => Line::new("TlsCertificateReloadFailed")
                .field("error", e)
                .warn(),
        }
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

/// Logs a repeating failure at most once per [`FAILURE_LOG_PERIOD`], with how many were
/// left out since the last line.
struct FailureLog {
    event: &'static str,
    last: Option<Instant>,
    suppressed: u64,
}

impl FailureLog {
    fn new(event: &'static str) -> FailureLog {
        FailureLog {
            event,
            last: None,
            suppressed: 0,
        }
    }

    fn record(&mut self, error: &dyn std::fmt::Display) {
        if self.last.is_some_and(|t| t.elapsed() < FAILURE_LOG_PERIOD) {
            self.suppressed += 1;
            return;
        }
        Line::new(self.event)
            .field("error", error)
            .field("suppressed", self.suppressed)
            .warn();
        self.last = Some(Instant::now());
        self.suppressed = 0;
    }
}

/// What the acceptor needs to admit a request.
struct Admission {
    app: Arc<App>,
    routes: Routes,
    incoming: Sender<Admitted>,
    ready: Sender<Admitted>,
    large_reads: Permits,
    /// Threads that read bodies, and that write the large replies of requests refused there.
    readers: Spares,
    writers: Spares,
}

/// A counting semaphore: permits to read a large body.
#[derive(Clone)]
struct Permits {
    give: Sender<()>,
    take: Receiver<()>,
}

/// A permit held; returned when dropped.
struct Permit(Sender<()>);

impl Permits {
    fn new(n: usize) -> Permits {
        let (give, take) = crossbeam_channel::bounded(n);
        for _ in 0..n {
            let _ = give.send(());
        }
        Permits { give, take }
    }

    fn acquire(&self, wait: Duration) -> Option<Permit> {
        self.take
            .recv_timeout(wait)
            .ok()
            .map(|()| Permit(self.give.clone()))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

/// Admits requests from tiny_http until stopped. tiny_http itself backs off after a failed
/// `accept` (out of file descriptors, say) and reports each failure here.
fn accept(server: &tiny_http::Server, admission: &Admission, stop: &AtomicBool) {
    let mut accept_failures = FailureLog::new("HttpAcceptFailed");
    let mut spawn_failures = FailureLog::new("HttpBodyReaderUnavailable");
    while !stop.load(Ordering::SeqCst) {
        let received = server.recv_timeout(POLL);
        let open = i64::try_from(server.open_connections()).unwrap_or(i64::MAX);
        admission.app.http_load.connections.set(open);
        match received {
            Ok(Some(request)) => {
                let admitted = catch_unwind(AssertUnwindSafe(|| {
                    admit(admission, request, &mut spawn_failures)
                }));
                match admitted {
                    Ok(Ok(())) => {}
                    // The workers are gone: the server is shutting down.
                    Ok(Err(Stopped)) => return,
                    Err(_) => Line::new("HttpAcceptorRecovered").warn(),
                }
            }
            Ok(None) => {}
            Err(e) => accept_failures.record(&e),
        }
    }
}

/// The workers stopped taking requests.
struct Stopped;

/// Decides where a request goes: straight to the workers, to a body reader, or answered
/// without reading its body.
fn admit(
    a: &Admission,
    request: tiny_http::Request,
    spawn_failures: &mut FailureLog,
) -> Result<(), Stopped> {
    let started = Instant::now();
    let req = head(&request);
    let _serving = telemetry::context::enter(&req.request_id);
    let cfg = &a.app.config.server;
    let declared = request.body_length();
    // tiny_http has refused every Transfer-Encoding but `chunked` (strict framing).
    let chunked = request
        .headers()
        .iter()
        .any(|h| h.field.equiv("Transfer-Encoding"));
    let to_workers = |request, req, close, refused| {
        a.incoming
            .send(Admitted {
                request,
                req,
                started,
                close,
                refused,
            })
            .map_err(|_| Stopped)
    };
    // tiny_http ends a connection after a request that asks to upgrade; say so.
    if !chunked && declared.unwrap_or(0) == 0 {
        let close = is_upgrade(&request);
        return to_workers(request, req, close, None);
    }
    let policy = (a.routes.body_policy)(&req.method, &req.path);
    if policy == BodyPolicy::Ignored {
        return to_workers(request, req, true, None);
    }
    if declared.is_some_and(|n| n as u64 > cfg.max_body_bytes) {
        let refused = ApiError::PayloadTooLarge {
            limit: cfg.max_body_bytes,
        };
        return to_workers(request, req, true, Some(refused));
    }
    // A request that asks to upgrade gets the raw socket as its body reader from tiny_http;
    // scanstore upgrades nothing, and a chunked body there could not be decoded.
    if chunked && is_upgrade(&request) {
        let refused = ApiError::BadRequest {
            code: "bad_framing",
            message: "a chunked body cannot come with Connection: upgrade".into(),
        };
        return to_workers(request, req, true, Some(refused));
    }
    let job = BodyJob {
        request,
        req,
        started,
        policy,
        large: chunked || declared.is_some_and(|n| n as u64 > cfg.preauth_body_bytes),
    };
    let (app, ready, permits) = (a.app.clone(), a.ready.clone(), a.large_reads.clone());
    let writers = a.writers.clone();
    let spawned = a.readers.run(move || {
        let _serving = telemetry::context::enter(&job.req.request_id);
        let read = catch_unwind(AssertUnwindSafe(|| {
            read_body_of(job, &app, &permits, &ready, &writers)
        }));
        if read.is_err() {
            Line::new("HttpBodyReaderRecovered").warn();
        }
    });
    // The request went down with the closure: tiny_http answers 500 and closes.
    if let Err(e) = spawned {
        spawn_failures.record(&e);
    }
    Ok(())
}

/// The request's method, URL and headers as handlers see them; the body comes later.
fn head(request: &tiny_http::Request) -> Req {
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
    Req::new(
        request.method().as_str(),
        request.url(),
        headers,
        Vec::new(),
    )
}

fn is_upgrade(request: &tiny_http::Request) -> bool {
    request.headers().iter().any(|h| {
        h.field.equiv("Connection") && h.value.as_str().to_ascii_lowercase().contains("upgrade")
    })
}

/// On a body's own thread: verifies the scanner's token before a large body, waits (at
/// most `header_timeout`) for a permit to read it, reads it and queues the request for the
/// workers. A stalled client holds only this thread, bounded by the connection cap.
fn read_body_of(
    mut job: BodyJob,
    app: &App,
    permits: &Permits,
    ready: &Sender<Admitted>,
    writers: &Spares,
) {
    let cfg = &app.config.server;
    let _reading = app.http_load.body_reads.enter();
    let _permit = if job.large {
        if job.policy == BodyPolicy::Scanner {
            match upload::authenticate(app, &job.req) {
                Ok(scanner) => job.req.scanner = Some(scanner),
                Err(e) => return queue(job_refused(job, e.into()), ready, app, writers),
            }
        }
        match permits.acquire(cfg.header_timeout) {
            Some(permit) => Some((permit, app.http_load.large_body_reads.enter())),
            None => {
                return queue(
                    job_refused(job, ApiError::BodyReadersBusy),
                    ready,
                    app,
                    writers,
                )
            }
        }
    } else {
        None
    };
    queue_with_body(job, app, ready, writers);
}

fn job_refused(job: BodyJob, e: ApiError) -> Admitted {
    Admitted {
        request: job.request,
        req: job.req,
        started: job.started,
        close: true,
        refused: Some(e),
    }
}

/// Reads the job's body within the limit and deadline and queues the request for the
/// workers; a body that fails is answered with the connection closed.
fn queue_with_body(job: BodyJob, app: &App, ready: &Sender<Admitted>, writers: &Spares) {
    let (limit, deadline) = (
        app.config.server.max_body_bytes,
        app.config.server.body_deadline,
    );
    let BodyJob {
        mut request,
        req,
        started,
        ..
    } = job;
    let declared = request.body_length();
    let upgrade = is_upgrade(&request);
    let reader = request.as_reader();
    // An upgrade request's reader is the raw socket: its body is the declared length.
    let read = if upgrade {
        let n = declared.unwrap_or(0) as u64;
        read_body(&mut reader.take(n), declared, limit, deadline)
    } else {
        read_body(reader, declared, limit, deadline)
    };
    let pending = match read {
        Ok(body) => Admitted {
            request,
            req: Req { body, ..req },
            started,
            close: upgrade,
            refused: None,
        },
        Err(e) => Admitted {
            request,
            req,
            started,
            close: true,
            refused: Some(e),
        },
    };
    queue(pending, ready, app, writers);
}

/// Hands a request to the workers; answers it here when they are gone.
fn queue(pending: Admitted, ready: &Sender<Admitted>, app: &App, writers: &Spares) {
    if let Err(crossbeam_channel::SendError(p)) = ready.send(pending) {
        let answering = Answering {
            load: &app.http_load,
            writers,
        };
        answer(
            p.request,
            &p.req,
            p.started,
            Err(ApiError::ShuttingDown),
            true,
            &answering,
        );
    }
}

/// What a worker serves requests with.
struct Serving<'a> {
    app: &'a App,
    handler: Handler,
    writers: &'a Spares,
}

/// What answering a request takes besides the request.
struct Answering<'a> {
    load: &'a HttpLoad,
    /// Threads for replies too large to write on the worker.
    writers: &'a Spares,
}

fn work(
    incoming: &Receiver<Admitted>,
    ready: &Receiver<Admitted>,
    serving: &Serving,
    stop: &AtomicBool,
    done: Sender<()>,
) {
    while !stop.load(Ordering::SeqCst) {
        // Nothing a request does may take the worker down with it.
        let served = catch_unwind(AssertUnwindSafe(|| {
            crossbeam_channel::select! {
                recv(ready) -> p => if let Ok(p) = p { dispatch(serving, p) },
                recv(incoming) -> p => if let Ok(p) = p { dispatch(serving, p) },
                default(POLL) => {}
            }
        }));
        if served.is_err() {
            Line::new("HttpWorkerRecovered").warn();
        }
    }
    let _ = done.send(());
}

/// Runs the handler on a complete request (or takes its refusal), and answers.
fn dispatch(serving: &Serving, p: Admitted) {
    let (app, handler) = (serving.app, serving.handler);
    let _busy = app.http_load.busy_workers.enter();
    let _serving = telemetry::context::enter(&p.req.request_id);
    let outcome = match p.refused {
        Some(e) => Err(e),
        None => catch_unwind(AssertUnwindSafe(|| handler(app, &p.req)))
            .unwrap_or_else(|_| Err(ApiError::Internal("handler panicked".into()))),
    };
    let answering = Answering {
        load: &app.http_load,
        writers: serving.writers,
    };
    answer(p.request, &p.req, p.started, outcome, p.close, &answering);
}

/// Logs the request and sends the reply (or the error's envelope); with `close`, the
/// connection ends after it.
fn answer(
    request: tiny_http::Request,
    req: &Req,
    started: Instant,
    outcome: Result<Reply, ApiError>,
    close: bool,
    answering: &Answering,
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
        line = line.field("code", e.code());
        // A client's mistake is logged by class and position only: its message may quote
        // what the client sent (observation values, query values).
        line = match e.log_detail() {
            super::error::LogDetail::Position(Some(at)) => line.field("at", at),
            super::error::LogDetail::Position(None) => line,
            super::error::LogDetail::Error => line.field("error", e),
        };
    }
    if reply.status >= 500 {
        line.warn();
    } else {
        line.info();
    }
    let large = reply.body.len() > INLINE_REPLY_BYTES;
    let response = to_response(reply, &req.request_id);
    if !large {
        return send(request, response, close);
    }
    // A client that reads nothing would block this write once the socket's send buffer is
    // full: a large reply is written by a thread of its own (inline if none can start).
    let (handoff, take) = crossbeam_channel::bounded(1);
    let writing = answering.load.answer_writes.enter();
    let writer = answering.writers.run(move || {
        let _writing = writing;
        if let Ok((request, response, close)) = take.recv() {
            send(request, response, close);
        }
    });
    match writer {
        Ok(_) => {
            let _ = handoff.send((request, response, close));
        }
        Err(_) => send(request, response, close),
    }
}

fn send(request: tiny_http::Request, response: Response, close: bool) {
    let _ = if close {
        request.respond_closing(response)
    } else {
        request.respond(response)
    };
}

type Response = tiny_http::Response<io::Cursor<Vec<u8>>>;

fn to_response(reply: Reply, request_id: &str) -> Response {
    let mut response = tiny_http::Response::from_data(reply.body).with_status_code(reply.status);
    let mut add = |name: &str, value: &str| {
        if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    };
    add("Content-Type", reply.content_type);
    add("X-Request-Id", request_id);
    add("X-Content-Type-Options", "nosniff");
    if !reply.headers.iter().any(|(n, _)| *n == "Cache-Control") {
        add("Cache-Control", "no-store");
    }
    for (name, value) in &reply.headers {
        add(name, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_flagged_only_where_other_hosts_can_reach_it() {
        for (addr, tls, flagged) in [
            ("127.0.0.1:8080", false, false),
            ("127.0.0.2:8080", false, false),
            ("[::1]:8080", false, false),
            ("0.0.0.0:8080", false, true),
            ("[::]:8080", false, true),
            ("192.0.2.10:8080", false, true),
            ("0.0.0.0:8443", true, false),
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(in_the_clear(addr, tls), flagged, "{addr} tls={tls}");
        }
    }
}
