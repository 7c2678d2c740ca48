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

/// Shuts down every socket of this process connected to `peer`.
#[cfg(target_os = "linux")]
pub fn shutdown_peer(peer: SocketAddr, how: Shut) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    let mut done = false;
    for entry in dir.flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if peer_of(fd) == Some(peer) {
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
            done = true;
        }
    }
    done
}

#[cfg(not(target_os = "linux"))]
pub fn shutdown_peer(_peer: SocketAddr, _how: Shut) -> bool {
    false
}
