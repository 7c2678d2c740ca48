//! Closing a client connection mid-response. tiny_http never exposes the socket of a
//! request (its connection thread owns the read half and keeps reading), so after writing a
//! truncated response through `Request::into_writer` the emulator finds the accepted socket
//! by its peer address in `/proc/self/fd` and shuts it down. Linux only; elsewhere the
//! fault answers 501 instead.

use std::net::SocketAddr;

#[cfg(target_os = "linux")]
fn peer_of(fd: i32) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    // SAFETY: getpeername only writes into the zeroed storage we own, up to `len` bytes; an
    // fd that is not a socket (or already closed) makes it fail, which we treat as None.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getpeername(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) != 0
        {
            return None;
        }
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                let a = &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let a = &*(&storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(a.sin6_port),
                    0,
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Which direction to shut down.
#[derive(Debug, Clone, Copy)]
pub enum Shut {
    Read,
    Both,
}

/// The descriptors of this process's sockets connected to `peer`.
#[cfg(target_os = "linux")]
fn sockets_of(peer: SocketAddr) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&fd| peer_of(fd) == Some(peer))
        .collect()
}

/// Shuts down every socket of this process connected to `peer`.
#[cfg(target_os = "linux")]
pub fn shutdown_peer(peer: SocketAddr, how: Shut) -> bool {
    let fds = sockets_of(peer);
    for &fd in &fds {
        // SAFETY: shutdown on an fd we just identified as this peer's socket; it does not
        // close or invalidate the fd, tiny_http still owns and later closes it.
        unsafe {
            libc::shutdown(
                fd,
                if matches!(how, Shut::Read) {
                    libc::SHUT_RD
                } else {
                    libc::SHUT_RDWR
                },
            );
        }
    }
    !fds.is_empty()
}

#[cfg(not(target_os = "linux"))]
pub fn shutdown_peer(_peer: SocketAddr, _how: Shut) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    fn nodelay(fd: i32) -> bool {
        let mut on: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `on`, which we own.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&mut on as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        r == 0 && on != 0
    }

    /// A response's last segment must not wait for the client's delayed ACK (40 ms on
    /// Linux): a quarter of all bulk requests did, before the accepted sockets had Nagle's
    /// algorithm switched off (as ES's `http.tcp.no_delay` does by default).
    #[test]
    fn accepted_connections_have_nagle_off() {
        let (_running, client, accepted) = accepted(crate::congestion::SYSTEM);
        assert!(accepted.iter().all(|&fd| nodelay(fd)));
        assert!(
            !nodelay(client.as_raw_fd()),
            "a plain client socket keeps Nagle on"
        );
    }
}

/// A connection to an emulator started with congestion control `algorithm`: the emulator,
/// the client's end and the server's (tiny_http holds it twice: a read and a write handle).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn accepted(algorithm: &str) -> (crate::Running, std::net::TcpStream, Vec<i32>) {
    use std::io::{Read, Write};
    let running = crate::start(
        "127.0.0.1:0".parse().unwrap(),
        1,
        crate::app::Limits::default(),
        false,
        None,
        None,
        algorithm,
    )
    .unwrap();
    let mut client = std::net::TcpStream::connect(running.addr).unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // An answer means the connection was accepted.
    client.read_exact(&mut [0u8; 1]).unwrap();
    let accepted = sockets_of(client.local_addr().unwrap());
    assert!(!accepted.is_empty());
    (running, client, accepted)
}
