//! TLS terminated by a reverse proxy: nginx (Debian's) with the README's snippet,
//! `scripts/nginx/scanstore.conf`, in front of a scanstore on loopback. Scanners upload and
//! owners read through it over HTTPS; a batch over the body limit is refused by nginx and
//! nothing is written. Without nginx the test fails when `CI` is set and skips otherwise.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::scan::{self, t0};
use crate::support::secure::{suite_ca, temp_dir};
use crate::support::server::{got, http};
use crate::support::stack::Stack;
use crate::support::wait_for;

const NGINX: &str = "/usr/sbin/nginx";

/// nginx serving HTTPS on a free loopback port in front of `upstream` (host:port).
struct Nginx {
    child: Child,
    url: String,
}

impl Nginx {
    fn start(upstream: &str) -> Nginx {
        let dir = temp_dir("nginx");
        let (cert, key) = suite_ca().issue(&dir, "proxy");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let snippet = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/nginx/scanstore.conf"),
        )
        .unwrap()
        .replace(
            "proxy_pass http://127.0.0.1:8080;",
            &format!("proxy_pass http://{upstream};"),
        );
        assert!(
            snippet.contains(upstream),
            "the snippet's proxy_pass line changed"
        );
        std::fs::write(dir.join("scanstore.conf"), snippet).unwrap();
        let d = dir.display();
        // Everything under the test's directory; workers may run as another user.
        for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let _ = Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(&dir)
            .status();
        std::fs::write(
            dir.join("nginx.conf"),
            format!(
                "daemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n\
                 proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
                 uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
                 server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {};\n\
                 ssl_certificate_key {};\n    include {d}/scanstore.conf;\n  }}\n}}\n",
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
        let child = Command::new(NGINX)
            .args(["-p", &d.to_string(), "-c"])
            .arg(dir.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let url = format!("https://127.0.0.1:{port}");
        wait_for("nginx to listen", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Nginx { child, url }
    }
}

impl Drop for Nginx {
    /// SIGTERM, so the master stops its workers too (SIGKILL would orphan them).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn scanners_and_owners_work_through_nginx_terminating_tls() {
    if !Path::new(NGINX).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "nginx (Debian package) is missing in CI"
        );
        println!("SKIP scanners_and_owners_work_through_nginx_terminating_tls: no {NGINX}");
        return;
    }
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |c| {
        // Plain HTTP on loopback behind the proxy (whatever the suite's mode).
        c.server.tls = None;
    });
    let upstream = s.base().trim_start_matches("http://").to_string();
    let proxy = Nginx::start(&upstream);

    scan::upload_execution(&proxy.url, &s.scanner.token, s.execution(), 0, 30, 10, t0());
    assert_eq!(s.observation_count(), 30);
    let r = got(http()
        .get(format!("{}/api/v1/tasks", proxy.url))
        .header("Authorization", &format!("Bearer {}", s.owner.token))
        .call());
    assert_eq!(r.status, 200, "{}", r.body);

    // Over client_max_body_size: nginx answers 413 and scanstore never sees the batch.
    let receipts = s.receipts();
    let big = vec![b' '; 17 * 1024 * 1024];
    let r = http()
        .post(format!(
            "{}/api/v1/scanner/executions/{}/batches",
            proxy.url,
            s.execution()
        ))
        .header("Authorization", &format!("Bearer {}", s.scanner.token))
        .header("Content-Type", "application/json")
        .send(&big[..])
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert_eq!(s.receipts(), receipts);
}
