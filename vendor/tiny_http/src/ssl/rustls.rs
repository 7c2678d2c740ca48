use crate::connection::Connection;
use crate::util::refined_tcp_stream::Stream as RefinedStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::error::Error;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// A wrapper around an owned Rustls connection and corresponding stream.
///
/// Uses an internal Mutex to permit disparate reader & writer threads to access the stream independently.
pub(crate) struct RustlsStream(
    Arc<Mutex<rustls::StreamOwned<rustls::ServerConnection, Connection>>>,
);

impl RustlsStream {
    // scanstore patch: a poisoned lock (a panic while reading or writing) is an I/O
    // error, not a second panic.
    fn lock(
        &self,
    ) -> std::io::Result<MutexGuard<'_, rustls::StreamOwned<rustls::ServerConnection, Connection>>>
    {
        self.0
            .lock()
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::Other, "TLS stream poisoned"))
    }

    pub(crate) fn peer_addr(&mut self) -> std::io::Result<Option<SocketAddr>> {
        self.lock()?.sock.peer_addr()
    }

    /// scanstore patch: closing the write half first tells the client so in TLS
    /// (`close_notify`), so that it can tell the end of the answer from a truncation.
    pub(crate) fn shutdown(&mut self, how: Shutdown) -> std::io::Result<()> {
        let mut stream = self.lock()?;
        if how != Shutdown::Read {
            stream.conn.send_close_notify();
            let rustls::StreamOwned { conn, sock } = &mut *stream;
            while conn.wants_write() {
                if conn.write_tls(sock)? == 0 {
                    break;
                }
            }
        }
        stream.sock.shutdown(how)
    }

    /// scanstore patch: runs `f` on the socket under the TLS stream.
    pub(crate) fn with_socket(&self, f: impl FnOnce(&mut Connection)) {
        if let Ok(mut stream) = self.lock() {
            f(&mut stream.sock);
        }
    }
}

impl Clone for RustlsStream {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl Read for RustlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.lock()?.read(buf)
    }
}

impl Write for RustlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock()?.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.lock()?.flush()
    }
}

pub(crate) struct RustlsContext(Arc<rustls::ServerConfig>);

impl RustlsContext {
    /// scanstore patch: ported to rustls 0.23 (its process-wide default crypto provider).
    pub(crate) fn from_pem(
        certificates: Vec<u8>,
        private_key: Zeroizing<Vec<u8>>,
    ) -> Result<Self, Box<dyn Error + Send + Sync>> {
        let certificate_chain = CertificateDer::pem_slice_iter(&certificates)
            .collect::<Result<Vec<_>, _>>()?;
        if certificate_chain.is_empty() {
            return Err("Couldn't extract certificate chain from config.".into());
        }
        let private_key = PrivateKeyDer::from_pem_slice(&private_key)?;
        let tls_conf = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certificate_chain, private_key)?;
        Ok(Self(Arc::new(tls_conf)))
    }

    /// scanstore patch: a configuration the caller built (its own certificate resolver,
    /// e.g. one that reloads the certificate).
    pub(crate) fn from_config(config: Arc<rustls::ServerConfig>) -> Self {
        Self(config)
    }

    /// scanstore patch: the handshake is completed here, on the connection's own thread,
    /// within `deadline` from the start (each read waits at most what is left), so a client
    /// that trickles its handshake cannot hold the connection longer. The socket's
    /// timeouts are then set to `socket_timeout`.
    pub(crate) fn accept(
        &self,
        stream: Connection,
        deadline: Option<Duration>,
        socket_timeout: Option<Duration>,
    ) -> Result<RustlsStream, Box<dyn Error + Send + Sync + 'static>> {
        let mut connection = rustls::ServerConnection::new(self.0.clone())?;
        let mut io = Deadlined {
            sock: stream,
            end: deadline.map(|d| Instant::now() + d),
        };
        while connection.is_handshaking() {
            connection.complete_io(&mut io)?;
        }
        io.sock.set_read_timeout(socket_timeout)?;
        io.sock.set_write_timeout(socket_timeout)?;
        Ok(RustlsStream(Arc::new(Mutex::new(
            rustls::StreamOwned::new(connection, io.sock),
        ))))
    }
}

/// A socket whose reads and writes fail once `end` has passed (scanstore patch).
struct Deadlined {
    sock: Connection,
    end: Option<Instant>,
}

impl Deadlined {
    /// Sets the socket's timeouts to what is left; an error once nothing is.
    fn arm(&self) -> std::io::Result<()> {
        let Some(end) = self.end else { return Ok(()) };
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.sock.set_read_timeout(Some(left))?;
        self.sock.set_write_timeout(Some(left))
    }

    /// A socket timeout shows as `WouldBlock` on Unix, which `complete_io` would retry.
    fn timed_out(e: std::io::Error) -> std::io::Error {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            std::io::ErrorKind::TimedOut.into()
        } else {
            e
        }
    }
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.sock.read(buf).map_err(Deadlined::timed_out)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.sock.write(buf).map_err(Deadlined::timed_out)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

impl From<RustlsStream> for RefinedStream {
    fn from(stream: RustlsStream) -> Self {
        Self::Https(stream)
    }
}
