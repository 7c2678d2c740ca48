//! `scanstore-client run -- nmap` against services of the test's own on loopback: an HTTP
//! server, an SSH-speaking banner server and a TLS server. Needs Debian's nmap (CI
//! installs it); without it the test says so and fails.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use super::{client, endpoints, execution_status, queued, run};
use crate::support::secure::{suite_ca, temp_dir};
use crate::support::stack::Stack;

/// Accepts connections forever on a thread, handing each to `serve`; the port.
fn listen(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let serve = Arc::clone(&serve);
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                serve(conn)
            });
        }
    });
    port
}

const PAGE: &str = "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0\r\nContent-Type: text/html\r\n\
                    Content-Length: 58\r\nConnection: close\r\n\r\n\
                    <html><head><title>loopback</title></head><body></body></html>";

/// Reads a request head (or whatever comes within the timeout), answers with [`PAGE`].
fn http_answer(conn: &mut impl ReadWrite) {
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    while let Ok(n) = conn.read(&mut buf) {
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        if seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let _ = conn.write_all(PAGE.as_bytes());
            break;
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn http_server() -> u16 {
    listen(|mut c| http_answer(&mut c))
}

fn ssh_server() -> u16 {
    listen(|mut c| {
        let _ = c.write_all(b"SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.10\r\n");
        let _ = c.read(&mut [0u8; 256]);
    })
}

fn tls_server() -> u16 {
    let (cert, key) = suite_ca().issue(&temp_dir("nmap-tls"), "loopback");
    let certs: Vec<_> = rustls_pemfile_certs(&cert);
    let key = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap()
    };
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(scanstore::http::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    );
    listen(move |c| {
        let Ok(conn) = rustls::ServerConnection::new(Arc::clone(&config)) else {
            return;
        };
        let mut tls = rustls::StreamOwned::new(conn, c);
        http_answer(&mut tls);
        // A probe that broke the handshake has had its alert; no close after it.
        if !tls.conn.is_handshaking() {
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    })
}

fn rustls_pemfile_certs(path: &std::path::Path) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(path)
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn nmap_installed() -> bool {
    std::process::Command::new("nmap")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
#[ignore = "needs PostgreSQL and nmap"]
fn the_agent_scans_loopback_services_with_nmap_and_streams_what_it_finds() {
    assert!(
        nmap_installed(),
        "nmap is not installed (scripts/test.sh installs it)"
    );
    let s = Stack::new("port_scan");
    let (http, ssh, tls) = (http_server(), ssh_server(), tls_server());
    let task = queued(&s, "port_scan", &[("ip", "127.0.0.1")]);
    // The task's port scope reaches nmap through the claim (`-p`), not the command line.
    let ports = format!("T:{http},{ssh},{tls}");
    s.sql()
        .execute(
            "UPDATE tasks SET ports = $2 WHERE id = $1",
            &[&task.task_id, &ports],
        )
        .unwrap();
    let scanner_args = "-sV -Pn -n -T4 --script banner";
    let out = run(client(&s, &temp_dir("client-journal")).args([
        "run",
        "--once",
        "--scanner-args",
        scanner_args,
        "--",
        "nmap",
    ]));
    assert!(out.status.success());
    assert_eq!(execution_status(&s, task.execution_id).0, "succeeded");

    let found = endpoints(&s, task.task_id);
    let at = |port: u16| {
        found
            .iter()
            .find(|e| e["port"] == port)
            .unwrap_or_else(|| panic!("port {port} not found in {found:?}"))
    };
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found
        .iter()
        .all(|e| e["ip"] == "127.0.0.1" && e["transport"] == "tcp"));
    let web = at(http);
    assert_eq!(web["service"], "http");
    assert_eq!(web["product"], "nginx");
    assert_eq!(web["version"], "1.24.0");
    let shell = at(ssh);
    assert_eq!(shell["service"], "ssh");
    assert_eq!(shell["product"], "OpenSSH");
    assert!(
        shell["version"].as_str().unwrap().starts_with("8.9p1"),
        "{shell}"
    );
    assert_eq!(shell["banner"], "SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.10");
    assert_eq!(web["state"], "open");
    assert!(
        web["cpe"][0].as_str().unwrap().contains(":nginx:1.24.0"),
        "{web}"
    );
    let header = web["scripts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "http-server-header");
    assert_eq!(header.unwrap()["output"], "nginx/1.24.0", "{web}");
    assert!(
        shell["cpe"][0]
            .as_str()
            .unwrap()
            .starts_with("cpe:/a:openbsd:openssh:8.9p1"),
        "{shell}"
    );
    let secure = at(tls);
    assert_eq!(secure["service"], "http", "{secure}");
    assert_eq!(secure["tunnel"], "ssl", "{secure}");
    assert_eq!(secure["product"], "nginx");
}

#[test]
#[ignore = "needs PostgreSQL and nmap"]
fn a_scanner_that_fails_fails_its_execution_with_the_reason() {
    assert!(
        nmap_installed(),
        "nmap is not installed (scripts/test.sh installs it)"
    );
    let s = Stack::new("port_scan");
    let task = queued(&s, "port_scan", &[("ip", "127.0.0.1")]);
    let out = run(client(&s, &temp_dir("client-journal")).args([
        "run",
        "--once",
        "--",
        "nmap",
        "--no-such-option",
    ]));
    assert!(
        out.status.success(),
        "the agent goes on; the execution failed"
    );
    let (status, reason) = execution_status(&s, task.execution_id);
    assert_eq!(status, "failed");
    let reason = reason.unwrap();
    assert!(
        reason.starts_with("nmap exited with exit status: 255"),
        "{reason}"
    );
    assert!(reason.contains("no-such-option"), "{reason}");

    // Nothing queued: --once says so and exits 0.
    let out = run(client(&s, &temp_dir("client-journal")).args(["run", "--once", "--", "nmap"]));
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing queued"));
}

/// Answers every datagram, so that nmap sees the port open.
fn udp_responder() -> u16 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((_, from)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(b"scanstore-test udp\n", from);
        }
    });
    port
}

/// A TCP port nothing listens on: bound once, then released.
fn closed_tcp_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
#[ignore = "needs PostgreSQL, nmap and root (raw sockets)"]
fn the_agent_reports_a_udp_responder_open_and_a_closed_port_closed() {
    assert!(
        nmap_installed(),
        "nmap is not installed (scripts/test.sh installs it)"
    );
    if effective_uid() != 0 {
        eprintln!("SKIPPED the UDP scan: nmap needs root for -sU (CI runs as root)");
        return;
    }
    let s = Stack::new("port_scan");
    let (udp, closed) = (udp_responder(), closed_tcp_port());
    let task = queued(&s, "port_scan", &[("ip", "127.0.0.1")]);
    let token_file = temp_dir("client-token").join("scanner.token");
    std::fs::write(&token_file, format!("{}\n", s.scanner.token)).unwrap();
    let out = run(client(&s, &temp_dir("client-journal"))
        .env_remove("SCANSTORE_SCANNER_TOKEN")
        .arg("--token-file")
        .arg(&token_file)
        .args(["run", "--once", "--scanner-args"])
        .arg(format!("-sU -sS -Pn -n -p U:{udp},T:{closed}"))
        .args(["--", "nmap"]));
    assert!(out.status.success());
    assert_eq!(execution_status(&s, task.execution_id).0, "succeeded");
    let found = endpoints(&s, task.task_id);
    let of = |port: u16, transport: &str| {
        found
            .iter()
            .find(|e| e["port"] == port && e["transport"] == transport)
            .unwrap_or_else(|| panic!("{port}/{transport} not in {found:?}"))
            .clone()
    };
    assert_eq!(of(udp, "udp")["state"], "open");
    assert_eq!(of(closed, "tcp")["state"], "closed");
}

fn effective_uid() -> u32 {
    // The effective user, from the kernel's view of this process.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|u| u.parse().ok())
        })
        .unwrap_or(u32::MAX)
}
