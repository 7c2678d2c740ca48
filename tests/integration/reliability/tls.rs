//! Scanners over HTTPS: with `server.tls_cert`/`server.tls_key` the whole API is served
//! over TLS with the front door's limits intact, a handshake that stalls or trickles is
//! cut off at `server.tls_handshake_timeout_ms`, a plain-HTTP client gets no answer, and
//! SIGHUP swaps in a renewed certificate (a broken one is refused and the old one kept).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use scanstore::config::Config;
use scanstore::http::tls::TlsFiles;

use super::child::{ChildConfig, Serve};
use super::front_door::read_to_close;
use crate::support::scan::{self, t0};
use crate::support::secure::{suite_ca, temp_dir, TestCa};
use crate::support::server::{got, http};
use crate::support::stack::Stack;
use crate::support::{db, emulator, logs, wait_for};

/// A stack serving HTTPS with a certificate from the suite's CA.
fn https_stack(adjust: impl FnOnce(&mut Config)) -> Stack {
    let (cert, key) = suite_ca().issue(&temp_dir("tls"), "server");
    Stack::build(emulator::target(), "port_scan", |c| {
        c.server.tls = Some(TlsFiles { cert, key });
        c.server.header_timeout = Duration::from_millis(1000);
        adjust(c);
    })
}

/// A TLS client connection to `base` trusting `ca`.
fn tls_connect(
    base: &str,
    ca: &Path,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, std::io::Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(scanstore::http::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let addr = base.trim_start_matches("https://");
    let sock = TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = "127.0.0.1".try_into().unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut sock = sock;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(rustls::StreamOwned::new(conn, sock))
}

#[test]
#[ignore = "needs PostgreSQL"]
fn uploads_and_reads_work_over_https_and_plain_http_gets_no_answer() {
    let s = https_stack(|_| {});
    assert!(s.base().starts_with("https://127.0.0.1:"), "{}", s.base());
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 20, 10, t0());
    assert_eq!(s.observation_count(), 20);
    let r = got(http().get(format!("{}/healthz", s.base())).call());
    assert_eq!(r.status, 200);
    assert!(!logs::lines_with(&["event=HttpServerStarted", "tls=true"]).is_empty());

    // A plain-HTTP request is no TLS record: the server closes without an answer.
    let mut plain = TcpStream::connect(s.base().trim_start_matches("https://")).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(!read_to_close(&mut plain).contains("HTTP/1.1"));

    // A client that does not trust the server's CA refuses it.
    let other = TestCa::new(&temp_dir("other-ca"));
    let refused = tls_connect(s.base(), &other.pem);
    assert!(
        refused.is_err(),
        "a certificate from another CA was accepted"
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_front_doors_limits_hold_over_tls() {
    let s = https_stack(|c| c.server.max_head_bytes = 1024);
    let mut c = tls_connect(s.base(), &suite_ca().pem).unwrap();
    let big = "a".repeat(4096);
    write!(
        c,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n"
    )
    .unwrap();
    let out = read_to_close(&mut c);
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");

    // A head trickled inside the TLS stream for twice the header deadline is cut off at
    // it (the client stops within the server's lingering close, so no reset eats the
    // answer).
    let mut c = tls_connect(s.base(), &suite_ca().pem).unwrap();
    for b in b"GET /healthz HTTP/1.1\r\nHost: x" {
        if c.write_all(&[*b]).is_err() {
            break;
        }
        // The trickle itself: a byte every 100 ms.
        std::thread::sleep(Duration::from_millis(100));
    }
    let answered = read_to_close(&mut c);
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn stalled_and_trickled_handshakes_are_cut_off_and_do_not_pin_the_server() {
    let s = https_stack(|c| {
        c.server.tls_handshake_timeout = Duration::from_millis(800);
        c.server.header_timeout = Duration::from_secs(5);
        c.server.max_connections = 16;
    });
    let addr = s.base().trim_start_matches("https://").to_string();
    // Silent connections up to the cap, and one that trickles a ClientHello's first bytes
    // one per 200 ms, within every per-read timeout but not the handshake's deadline.
    let silent: Vec<TcpStream> = (0..15)
        .map(|_| {
            let c = TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c
        })
        .collect();
    let mut trickle = TcpStream::connect(&addr).unwrap();
    trickle
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let writer = {
        let mut w = trickle.try_clone().unwrap();
        std::thread::spawn(move || {
            // A TLS handshake record header, then a body that never completes.
            let mut hello = vec![0x16, 0x03, 0x01, 0x02, 0x00];
            hello.extend(std::iter::repeat(0x01).take(512));
            for b in hello {
                if w.write_all(&[b]).is_err() {
                    return true;
                }
                // The trickle itself: a byte every 200 ms.
                std::thread::sleep(Duration::from_millis(200));
            }
            false
        })
    };
    // Every one of them is closed by the server (EOF, not the client's 10 s timeout).
    for mut c in silent {
        let mut buf = [0u8; 16];
        assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)));
    }
    let mut buf = [0u8; 16];
    let start = std::time::Instant::now();
    let read = trickle.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || start.elapsed() < Duration::from_secs(9),
        "the trickled handshake was not cut off: {read:?}"
    );
    assert!(
        writer.join().unwrap(),
        "the server kept reading the trickle"
    );
    // And the server answers again.
    let r = got(http().get(format!("{}/healthz", s.base())).call());
    assert_eq!(r.status, 200);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn sighup_swaps_in_a_renewed_certificate_and_keeps_the_old_one_if_the_new_is_broken() {
    let t = db::fresh();
    let es = emulator::target();
    let dir = temp_dir("reload");
    let first = TestCa::new(&dir.join("first"));
    let (cert, key) = first.issue(&dir, "server");
    let serve = Serve::start(&ChildConfig {
        extra_server: format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            cert.display().to_string(),
            key.display().to_string()
        ),
        ..ChildConfig::new(&t.url, es.es().url(), &emulator::es_prefix("tlsreload"))
    });
    assert!(serve.base.starts_with("https://"), "{}", serve.base);
    assert!(tls_connect(&serve.base, &first.pem).is_ok());

    // Renewed under another CA: the running server serves it after SIGHUP, no restart.
    let second = TestCa::new(&dir.join("second"));
    let (renewed, renewed_key) = second.issue(&dir.join("second"), "server");
    std::fs::copy(&renewed, &cert).unwrap();
    std::fs::copy(&renewed_key, &key).unwrap();
    serve.signal("HUP");
    wait_for("the renewed certificate", Duration::from_secs(10), || {
        tls_connect(&serve.base, &second.pem).is_ok()
    });
    assert!(tls_connect(&serve.base, &first.pem).is_err());
    assert!(serve.log().contains("event=TlsCertificateReloaded"));

    // A broken file is refused; the renewed certificate stays in use.
    std::fs::write(&cert, "not a certificate").unwrap();
    serve.signal("HUP");
    wait_for("the refused reload", Duration::from_secs(10), || {
        serve.log().contains("event=TlsCertificateReloadFailed")
    });
    assert!(tls_connect(&serve.base, &second.pem).is_ok());
    assert!(serve.alive());
    std::fs::remove_dir_all(&dir).unwrap();
}
