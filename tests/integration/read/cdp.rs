//! Headless Chromium driven over the Chrome DevTools Protocol, for the console test: a
//! minimal WebSocket client (RFC 6455 text frames, client-masked) on a plain `TcpStream`,
//! so the test needs no extra crate. Chromium is Debian's `chromium` package (installed by
//! `scripts/test.sh`); it is started with a fresh profile and killed on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{poll_until, wait_for};

/// The Chromium binary, if installed.
pub fn chromium_binary() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| {
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join(name))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .find(|p| p.is_file())
}

pub struct Browser {
    child: Child,
    _profile: TempDir,
    ws: TcpStream,
    next_id: u64,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Browser {
    /// Starts headless Chromium and attaches to its first page.
    pub fn launch(binary: &Path) -> Browser {
        let profile = std::env::temp_dir().join(format!(
            "scanstore-chromium-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let profile = TempDir(profile);
        // Chromium writes the port it chose to DevToolsActivePort in the profile.
        let port_file = profile.0.join("DevToolsActivePort");
        let mut port: Option<u16> = None;
        wait_for(
            "chromium to open its DevTools port",
            Duration::from_secs(30),
            || {
                port = std::fs::read_to_string(&port_file)
                    .ok()
                    .and_then(|text| text.lines().next()?.trim().parse().ok());
                port.is_some()
            },
        );
        let port = port.unwrap();
        let targets: Value = {
            let mut r = crate::support::server::http()
                .get(format!("http://127.0.0.1:{port}/json/list"))
                .call()
                .expect("DevTools target list");
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
        };
        let page = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target");
        let url = page["webSocketDebuggerUrl"].as_str().unwrap();
        let path = &url[url.find("/devtools/").unwrap()..];
        let ws = handshake(port, path);
        let mut b = Browser {
            child,
            _profile: profile,
            ws,
            next_id: 0,
        };
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b
    }

    /// Sends one command and waits for its answer (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        send_text(
            &mut self.ws,
            &json!({"id": id, "method": method, "params": params}).to_string(),
        );
        loop {
            let msg: Value = serde_json::from_str(&read_message(&mut self.ws)).expect("CDP JSON");
            if msg["id"] == id {
                assert!(msg["error"].is_null(), "{method}: {}", msg["error"]);
                return msg["result"].clone();
            }
        }
    }

    /// Evaluates `expression` in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r["exceptionDetails"].is_null(),
            "{expression}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy, or panics with `what`.
    pub fn wait_until(&mut self, what: &str, limit: Duration, expression: &str) -> Value {
        let mut v = Value::Null;
        if !poll_until(limit, || {
            v = self.eval(expression);
            !(v.is_null() || v == false || v == "" || v == 0)
        }) {
            let text = self.eval("document.body ? document.body.innerText : ''");
            panic!("timed out waiting for {what}; page text:\n{text}");
        }
        v
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// A PNG screenshot of the viewport, written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64_decode(r["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn handshake(port: u16, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect DevTools");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: c2NhbnN0b3JlLWNvbnNvbGU=\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(
        status.contains(" 101 "),
        "WebSocket upgrade refused: {status}"
    );
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    // The server speaks only after a request, so nothing is left in the reader's buffer.
    assert!(reader.buffer().is_empty());
    s
}

fn send_text(s: &mut TcpStream, text: &str) {
    let payload = text.as_bytes();
    let mut frame = vec![0x81u8];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n <= 0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask: [u8; 4] = rand_mask();
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&frame).unwrap();
}

fn rand_mask() -> [u8; 4] {
    let b = uuid::Uuid::new_v4();
    let b = b.as_bytes();
    [b[0], b[1], b[2], b[3]]
}

/// Reads one whole text message (joining continuation frames; control frames skipped).
fn read_message(s: &mut TcpStream) -> String {
    let mut message = Vec::new();
    loop {
        let mut head = [0u8; 2];
        s.read_exact(&mut head).expect("DevTools frame");
        let fin = head[0] & 0x80 != 0;
        let opcode = head[0] & 0x0f;
        let mut len = u64::from(head[1] & 0x7f);
        if len == 126 {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            len = u64::from(u16::from_be_bytes(b));
        } else if len == 127 {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).unwrap();
            len = u64::from_be_bytes(b);
        }
        let mut payload = vec![0u8; len as usize];
        s.read_exact(&mut payload).unwrap();
        match opcode {
            0x8 => panic!("DevTools closed the connection"),
            0x9 | 0xA => continue,
            _ => message.extend_from_slice(&payload),
        }
        if fin {
            return String::from_utf8(message).expect("UTF-8 message");
        }
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64"),
        }
    };
    let clean: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    for chunk in clean.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&b| b != b'=').collect();
        let mut n = 0u32;
        for (i, &b) in data.iter().enumerate() {
            n |= value(b) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..data.len()]);
    }
    out
}

#[test]
fn base64_round_trip() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode("YWJj"), b"abc");
}
