//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

#[cfg(feature = "ssl-rustls")]
use zeroize::Zeroizing;

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;

mod client;
mod common;
mod connection;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,

    // scanstore patch: connections being served, for `Limits::max_connections` and
    // `Server::open_connections`.
    open: Arc<AtomicUsize>,
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// Limits on what a client may send and hold (scanstore patch). The default limits
/// nothing, as upstream.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Read and write timeout of every accepted socket, so no read from a stalled client
    /// and no write to one that stopped reading blocks longer; also the longest a request
    /// line and its headers may take from their first byte, and how long an idle
    /// connection is kept between requests. `None`: no timeout.
    pub header_timeout: Option<Duration>,
    /// Most bytes in a request line and its headers (including line ends); more is
    /// answered 431 and the connection closed.
    pub max_head_bytes: usize,
    /// Most header lines in a request; more is answered 431 and the connection closed.
    pub max_headers: usize,
    /// Most connections served at once; one more is answered 503 with `Retry-After: 1`
    /// and closed at once.
    pub max_connections: usize,
    /// Lingering close: how long a connection's input is still read off and dropped
    /// after its last answer, so that a client still sending a body the server refused
    /// without reading it gets that answer rather than a reset. `None`: none.
    pub linger: Option<Duration>,
    /// The longest a TLS handshake may take from the connection's start; the connection
    /// is closed after it. `None`: no deadline beyond `header_timeout` per read.
    pub handshake_timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_timeout: None,
            max_head_bytes: usize::MAX,
            max_headers: usize::MAX,
            max_connections: usize::MAX,
            linger: None,
            handshake_timeout: None,
        }
    }
}

/// First and longest pause after a failed `accept` (scanstore patch).
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Waits after a failure of the accept loop, twice as long as the last time (scanstore
/// patch).
fn pause(backoff: &mut Duration) {
    thread::sleep(*backoff);
    *backoff = (*backoff * 2).min(ACCEPT_BACKOFF_MAX);
}

/// Counts a connection as open while it lives (scanstore patch).
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn new(open: &Arc<AtomicUsize>) -> OpenConnection {
        open.fetch_add(1, Relaxed);
        OpenConnection(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// Answers a connection over `Limits::max_connections` with 503 and closes it (scanstore
/// patch). What the client already sent is read off first, so that closing does not reset
/// the connection before the client has read the answer.
fn refuse_busy(sock: Connection) {
    const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\
Connection: close\r\nContent-Length: 0\r\n\r\n";
    use std::io::{Read, Write};
    let mut sock = sock;
    let _ = sock.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = sock.write_all(BUSY);
    let _ = sock.shutdown(Shutdown::Write);
    if sock.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match sock.read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
    }
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

/// A plain connection's client (scanstore patch: split out of the accept loop).
fn connect_plain(sock: Connection, limits: &Limits) -> IoResult<ClientConnection> {
    let (read_closable, write_closable) = util::RefinedTcpStream::new(sock, limits.linger)?;
    Ok(ClientConnection::new(
        write_closable,
        read_closable,
        limits.clone(),
    ))
}

/// An accepted connection on its way to its thread (scanstore patch): a plain one is
/// ready; a TLS one is handshaken there, within `Limits::handshake_timeout`, and closed if
/// the handshake fails.
enum Connect {
    Ready(ClientConnection),
    #[cfg(feature = "ssl-rustls")]
    Tls(Arc<crate::ssl::SslContextImpl>, Connection, Limits),
}

impl Connect {
    fn finish(self) -> Option<ClientConnection> {
        match self {
            Connect::Ready(client) => Some(client),
            #[cfg(feature = "ssl-rustls")]
            Connect::Tls(tls, sock, limits) => {
                let stream = match tls.accept(sock, limits.handshake_timeout, limits.header_timeout)
                {
                    Ok(stream) => stream,
                    Err(e) => {
                        log::debug!("TLS handshake failed: {}", e);
                        return None;
                    }
                };
                let (read_closable, write_closable) =
                    util::RefinedTcpStream::new(stream, limits.linger).ok()?;
                Some(ClientConnection::new(write_closable, read_closable, limits))
            }
        }
    }
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(feature = "ssl-rustls")]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener_with_limits(listener, ssl_config, Limits::default())
    }

    /// Like `from_listener`, with limits on what clients may send and hold (scanstore
    /// patch).
    pub fn from_listener_with_limits<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
        limits: Limits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        #[cfg(not(feature = "ssl-rustls"))]
        type SslContext = ();
        #[cfg(feature = "ssl-rustls")]
        type SslContext = crate::ssl::SslContextImpl;
        let ssl: Option<SslContext> = {
            match ssl_config {
                #[cfg(feature = "ssl-rustls")]
                Some(config) => Some(SslContext::from_pem(
                    config.certificate,
                    Zeroizing::new(config.private_key),
                )?),
                #[cfg(not(feature = "ssl-rustls"))]
                Some(_) => return Err(
                    "Building a server with SSL requires enabling the `ssl` feature in tiny-http"
                        .into(),
                ),
                None => None,
            }
        };
        Self::start(listener.into(), ssl, limits)
    }

    /// An HTTPS server with a rustls configuration the caller built (its own certificate
    /// resolver, for instance one that reloads the certificate), and limits (scanstore
    /// patch).
    #[cfg(feature = "ssl-rustls")]
    pub fn from_listener_with_tls<L: Into<Listener>>(
        listener: L,
        tls: Arc<rustls::ServerConfig>,
        limits: Limits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let ssl = crate::ssl::SslContextImpl::from_config(tls);
        Self::start(listener.into(), Some(ssl), limits)
    }

    fn start(
        listener: Listener,
        #[cfg(feature = "ssl-rustls")] ssl: Option<crate::ssl::SslContextImpl>,
        #[cfg(not(feature = "ssl-rustls"))] ssl: Option<()>,
        limits: Limits,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));

        // building the TcpListener
        let (server, local_addr) = {
            let local_addr = listener.local_addr()?;
            log::debug!("Server listening on {}", local_addr);
            (listener, local_addr)
        };
        #[cfg(feature = "ssl-rustls")]
        let ssl = ssl.map(Arc::new);

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);

        let inside_close_trigger = close_trigger.clone();
        let inside_messages = messages.clone();
        let open = Arc::new(AtomicUsize::new(0));
        let inside_open = open.clone();
        thread::spawn(move || {
            // a tasks pool is used to dispatch the connections into threads
            let tasks_pool = util::TaskPool::new();
            let open = inside_open;
            let mut backoff = ACCEPT_BACKOFF_MIN;

            log::debug!("Running accept thread");
            while !inside_close_trigger.load(Relaxed) {
                // scanstore patch: a failed accept (EMFILE, ENFILE, ENOBUFS...) or a failed
                // dup of the accepted socket is reported to the server's owner, then
                // retried after a growing pause; it used to end this thread, leaving the
                // process alive but deaf.
                let accepted = server.accept().and_then(|(sock, _)| {
                    if open.load(Relaxed) >= limits.max_connections {
                        // A TLS client could not read a plain answer: it is only closed.
                        if ssl.is_none() {
                            refuse_busy(sock);
                        }
                        return Ok(None);
                    }
                    if let Some(t) = limits.header_timeout {
                        sock.set_read_timeout(Some(t))?;
                        sock.set_write_timeout(Some(t))?;
                    }
                    Ok(Some(sock))
                });
                let sock = match accepted {
                    Ok(Some(sock)) => sock,
                    Ok(None) => continue,
                    Err(e) => {
                        log::error!("Error accepting new client: {}", e);
                        inside_messages.push(e.into());
                        pause(&mut backoff);
                        continue;
                    }
                };
                // scanstore patch: a TLS connection is made in its own thread (see
                // `connect`), so that no handshake holds up the accept loop.
                #[cfg(feature = "ssl-rustls")]
                let tls = ssl.clone();
                #[cfg(not(feature = "ssl-rustls"))]
                let tls: Option<()> = None;
                let new_client = match tls {
                    None => match connect_plain(sock, &limits) {
                        Ok(client) => Connect::Ready(client),
                        Err(e) => {
                            inside_messages.push(e.into());
                            pause(&mut backoff);
                            continue;
                        }
                    },
                    #[cfg(feature = "ssl-rustls")]
                    Some(tls) => Connect::Tls(tls, sock, limits.clone()),
                    #[cfg(not(feature = "ssl-rustls"))]
                    Some(()) => unreachable!(),
                };

                let messages = inside_messages.clone();
                let mut client = Some(new_client);
                let slot = OpenConnection::new(&open);
                let mut slot = Some(slot);
                let spawned = tasks_pool.spawn(Box::new(move || {
                    let _slot = slot.take();
                    if let Some(client) = client.take().and_then(Connect::finish) {
                        // Synchronization is needed for HTTPS requests to avoid a deadlock
                        if client.secure() {
                            let (sender, receiver) = mpsc::channel();
                            for rq in client {
                                messages.push(rq.with_notify_sender(sender.clone()).into());
                                // scanstore patch: no panic if the request went unanswered.
                                if receiver.recv().is_err() {
                                    break;
                                }
                            }
                        } else {
                            for rq in client {
                                messages.push(rq.into());
                            }
                        }
                    }
                }));
                // scanstore patch: no thread for the connection; it is closed (the task
                // and the client in it are dropped), the owner is told, and accepting
                // pauses as after a failed accept.
                match spawned {
                    Ok(()) => backoff = ACCEPT_BACKOFF_MIN,
                    Err(e) => {
                        inside_messages.push(e.into());
                        pause(&mut backoff);
                    }
                }
            }
            log::debug!("Terminating accept thread");
        });

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
            open,
        })
    }

    /// Connections being served now: accepted and not yet closed (scanstore patch).
    pub fn open_connections(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    pub fn num_connections(&self) -> usize {
        unimplemented!()
        //self.requests_receiver.lock().len()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
