//! The HTTP front: a fixed pool of tiny_http worker threads, node limits (request line,
//! body size, content type), fault application, the request log, and panic isolation.
//!
//! tiny_http reads request lines of any length (it has no `max_initial_line_length`), so the
//! 4 KiB limit is enforced after tiny_http has parsed the head: the answer is ES's 400
//! `too_long_http_line_exception` body followed by closing the connection, as ES does. The
//! difference: ES stops reading at byte 4097, tiny_http buffers the whole line first. A line
//! with non-ASCII bytes is dropped by tiny_http without any answer.

use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use tiny_http::{Header, Request, Response, Server};

use crate::app::{lock, thread_cpu_ns, App};
use crate::error::EsError;
use crate::faults::{wait_paused, RequestFaults};
use crate::http::{Reply, Req};
use crate::reqlog::Entry;
use crate::router::{panic_reply, route};
use crate::sockets::{shutdown_peer, Shut};

const ACCEPTED_TYPES: [&str; 4] = [
    "application/json",
    "application/x-ndjson",
    "application/vnd.elasticsearch+json",
    "application/vnd.elasticsearch+x-ndjson",
];

/// Starts `threads` workers on `server`. They run until the server is dropped/unblocked.
pub fn spawn_workers(
    app: &Arc<App>,
    server: &Arc<Server>,
    threads: usize,
) -> Vec<thread::JoinHandle<()>> {
    (0..threads)
        .map(|_| {
            let (app, server) = (app.clone(), server.clone());
            thread::spawn(move || {
                while let Ok(rq) = server.recv() {
                    handle(&app, rq);
                }
            })
        })
        .collect()
}

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn respond(rq: Request, reply: Reply) {
    if reply.close {
        return respond_and_close(rq, reply, false);
    }
    // Content-Length on every reply, as ES sends it (tiny_http switches to chunked transfer
    // at 32 KiB): clients size their read buffer from it.
    let mut resp = Response::from_data(reply.body)
        .with_status_code(reply.status)
        .with_chunked_threshold(usize::MAX);
    let ct = if reply.json {
        "application/json"
    } else {
        "text/plain; charset=UTF-8"
    };
    for h in [
        header("Content-Type", ct),
        header("X-elastic-product", "Elasticsearch"),
    ]
    .into_iter()
    .flatten()
    {
        resp.add_header(h);
    }
    // A 401 comes only from the security check: say which schemes the cluster takes, as
    // Elasticsearch does.
    if reply.status == 401 {
        let schemes = [
            "Basic realm=\"security\", charset=\"UTF-8\"",
            "Bearer realm=\"security\"",
            "ApiKey",
        ];
        for h in schemes
            .into_iter()
            .filter_map(|s| header("WWW-Authenticate", s))
        {
            resp.add_header(h);
        }
    }
    // A client that went away is not our problem; nothing else to do with the error.
    let _ = rq.respond(resp);
}

/// Writes the response by hand (tiny_http refuses a `Connection` header), whole or truncated
/// to half its body, then shuts the socket down. Reading is shut first so tiny_http does not
/// drain an unread (possibly huge) body before the answer goes out.
fn respond_and_close(rq: Request, reply: Reply, truncate: bool) {
    let peer = rq.remote_addr().copied();
    if let Some(p) = peer {
        shutdown_peer(p, Shut::Read);
    }
    let reason = match reply.status {
        200 => "OK",
        400 => "Bad Request",
        413 => "Request Entity Too Large",
        417 => "Expectation Failed",
        _ => "Error",
    };
    let ct = if reply.json {
        "application/json"
    } else {
        "text/plain; charset=UTF-8"
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {ct}\r\nX-elastic-product: Elasticsearch\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.status,
        reply.body.len()
    );
    let body = if truncate {
        &reply.body[..reply.body.len() / 2]
    } else {
        &reply.body[..]
    };
    let mut w = rq.into_writer();
    let _ = w.write_all(head.as_bytes());
    let _ = w.write_all(body);
    let _ = w.flush();
    if let Some(p) = peer {
        shutdown_peer(p, Shut::Both);
    }
}

fn content_type_error(rq: &Request) -> Option<Reply> {
    let ct = rq
        .headers()
        .iter()
        .find(|h| h.field.equiv("Content-Type"))
        .map(|h| h.value.as_str().to_owned());
    let msg = match &ct {
        None => "Content-Type header is missing".to_owned(),
        Some(v) => {
            let mime = v
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if ACCEPTED_TYPES.contains(&mime.as_str()) {
                return None;
            }
            format!("Content-Type header [{v}] is not supported")
        }
    };
    Some(Reply::json(406, &json!({"error": msg, "status": 406})))
}

/// The 401 a cluster with security on answers a request without the required credentials.
fn unauthenticated(app: &App, rq: &Request, path: &str) -> Option<EsError> {
    let required = app.required_authorization.as_deref()?;
    let given = rq
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str());
    let reason = match given {
        Some(g) if g == required => return None,
        Some(_) => {
            format!("unable to authenticate with provided credentials for REST request [{path}]")
        }
        None => format!("missing authentication credentials for REST request [{path}]"),
    };
    Some(EsError::new(401, "security_exception", reason))
}

/// A request slower than this is reported on stderr (the benchmark keeps the emulator's
/// stderr): a client-side timeout with no such line points at the transport, not a handler.
const SLOW_REQUEST: Duration = Duration::from_secs(1);

fn handle(app: &Arc<App>, rq: Request) {
    let cpu = thread_cpu_ns();
    let started = Instant::now();
    let what = format!(
        "{} {}",
        rq.method(),
        rq.url().split('?').next().unwrap_or("")
    );
    serve(app, rq);
    let took = started.elapsed();
    if took >= SLOW_REQUEST {
        eprintln!("slow request: {what} took {} ms", took.as_millis());
    }
    app.add_busy(cpu);
}

fn serve(app: &Arc<App>, rq: Request) {
    let method = rq.method().as_str().to_ascii_uppercase();
    let url = rq.url().to_owned();
    let path = url.split('?').next().unwrap_or("").to_owned();
    let control = path.starts_with("/_emulator");
    let faults = if control {
        RequestFaults::default()
    } else {
        lock(&app.faults).for_request(&method, &path)
    };
    if let Some(id) = faults.pause {
        // Paused requests wait on their own thread so workers stay free for other requests.
        let app = app.clone();
        thread::spawn(move || {
            wait_paused(&app, id);
            finish(&app, rq, method, url, path, faults);
        });
        return;
    }
    finish(app, rq, method, url, path, faults);
}

fn finish(
    app: &Arc<App>,
    mut rq: Request,
    method: String,
    url: String,
    path: String,
    faults: RequestFaults,
) {
    let control = path.starts_with("/_emulator");
    let line_bytes = method.len() + 1 + url.len() + 1 + format!("HTTP/{}", rq.http_version()).len();
    let declared = rq.body_length().map(|n| n as u64);
    let query = url
        .split_once('?')
        .map(|(_, q)| q.to_owned())
        .unwrap_or_default();
    let log = |status: u16, body_bytes: u64| {
        if !control {
            lock(&app.log).push(Entry {
                seq: 0,
                method: method.clone(),
                path: path.clone(),
                query: query.clone(),
                request_line_bytes: line_bytes,
                body_bytes,
                status,
            });
        }
    };
    if line_bytes > app.limits.max_initial_line {
        log(400, 0);
        let e = EsError::new(
            400,
            "too_long_http_line_exception",
            format!(
                "An HTTP line is larger than {} bytes.",
                app.limits.max_initial_line
            ),
        );
        let mut reply = Reply::error(&e);
        reply.close = true;
        return respond(rq, reply);
    }
    let limit = app.limits.max_content_length;
    if declared.is_some_and(|n| n > limit) {
        // Netty answers an over-limit `Expect: 100-continue` with 417, any other with 413.
        let expects = rq.headers().iter().any(|h| {
            h.field.equiv("Expect") && h.value.as_str().eq_ignore_ascii_case("100-continue")
        });
        let status = if expects { 417 } else { 413 };
        log(status, declared.unwrap_or(0));
        let mut reply = Reply::empty(status);
        reply.close = true;
        return respond(rq, reply);
    }
    if faults.latency_ms > 0 {
        thread::sleep(Duration::from_millis(faults.latency_ms));
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0).min(limit) as usize);
    if rq
        .as_reader()
        .take(limit + 1)
        .read_to_end(&mut body)
        .is_err()
    {
        log(400, body.len() as u64);
        return;
    }
    if body.len() as u64 > limit {
        log(413, body.len() as u64);
        let mut reply = Reply::empty(413);
        reply.close = true;
        return respond(rq, reply);
    }
    let body_bytes = body.len() as u64;
    if let Some(e) = (!control)
        .then(|| unauthenticated(app, &rq, &path))
        .flatten()
    {
        log(401, body_bytes);
        return respond(rq, Reply::error(&e));
    }
    if !body.is_empty() {
        if let Some(reply) = content_type_error(&rq) {
            log(reply.status, body_bytes);
            return respond(rq, reply);
        }
    }
    if let Some(e) = faults.fail {
        log(e.status, body_bytes);
        return respond(rq, Reply::error(&e));
    }
    let req = Req::new(&method, &url, body);
    let reply = match catch_unwind(AssertUnwindSafe(|| route(app, &req))) {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => Reply::error(&e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            panic_reply(&what)
        }
    };
    log(reply.status, body_bytes);
    if faults.close {
        respond_and_close(rq, reply, true);
    } else {
        respond(rq, reply);
    }
}
