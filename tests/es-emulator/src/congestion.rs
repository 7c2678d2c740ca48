//! The TCP congestion control of the emulator's connections, set on the listening socket
//! (accepted sockets inherit one chosen with `setsockopt`).
//!
//! The emulator serves loopback only, where BBR, the default of many hosts, now and then
//! paces a response of a few hundred KiB out over 60–75 ms: the handler has written all of
//! it, the client has acknowledged all that was sent and its window is open, and the rest
//! waits in the kernel (`tcpdump` on `lo`). In the benchmark that was 0.3–0.8 % of the
//! 1 000-item bulk answers at 1 M endpoints, enough to decide a p99 there; with cubic,
//! none. Whether Elasticsearch on the same host as scanstore meets it too was not measured.

use std::net::TcpListener;

/// What the emulator uses unless told otherwise: built into Linux, and allowed to
/// unprivileged processes by default (`net.ipv4.tcp_allowed_congestion_control`).
pub const DEFAULT: &str = "cubic";

/// Keep the host's default (`--tcp-congestion system`).
pub const SYSTEM: &str = "system";

/// Sets `algorithm` on `listener`, unless it is [`SYSTEM`].
#[cfg(target_os = "linux")]
pub fn set(listener: &TcpListener, algorithm: &str) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if algorithm == SYSTEM {
        return Ok(());
    }
    let len = libc::socklen_t::try_from(algorithm.len())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: setsockopt reads `len` bytes from the name, which outlives the call.
    let r = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            algorithm.as_ptr().cast(),
            len,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub fn set(_listener: &TcpListener, algorithm: &str) -> std::io::Result<()> {
    match algorithm {
        SYSTEM => Ok(()),
        _ => Err(std::io::Error::from(std::io::ErrorKind::Unsupported)),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::sockets::accepted;

    /// The congestion control of socket `fd`.
    fn of(fd: i32) -> std::io::Result<String> {
        let mut name = [0u8; 32];
        let mut len = name.len() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `name`, which we own.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                name.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let name = &name[..(len as usize).min(name.len())];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(String::from_utf8_lossy(&name[..end]).into_owned())
    }

    /// What the server's end of a fresh connection to an emulator started with `algorithm`
    /// uses, and what the client's end uses.
    fn accepted_with(algorithm: &str) -> (Vec<String>, String) {
        let (_running, client, accepted) = accepted(algorithm);
        let server = accepted.iter().map(|&fd| of(fd).unwrap()).collect();
        (server, of(client.as_raw_fd()).unwrap())
    }

    /// reno is built into every Linux kernel, so it can be asked for whatever the host's
    /// default is; the client's socket keeps that default.
    #[test]
    fn accepted_connections_use_the_chosen_congestion_control() {
        let (server, client) = accepted_with("reno");
        assert!(server.iter().all(|a| a == "reno"), "{server:?}");
        let (server, _) = accepted_with(SYSTEM);
        assert!(
            server.iter().all(|a| *a == client),
            "{server:?} vs {client}"
        );
    }

    #[test]
    fn an_unknown_algorithm_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(set(&listener, "no-such-algorithm").is_err());
    }
}
