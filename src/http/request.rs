//! The request and reply as handlers see them: plain data, so routing and handlers are
//! testable without a socket. Also the bounded body reader (size limit and total deadline).

use std::io::{self, Read};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::error::ApiError;
use crate::auth::Scanner;
use crate::telemetry::Secret;

#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// Path without the query string, not decoded.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Per-request id for logs and error bodies.
    pub request_id: String,
    /// The scanner whose token the body reader verified before reading a large body: the
    /// handler takes it rather than asking the database a second time.
    pub scanner: Option<Scanner>,
}

impl Req {
    /// A request built in memory (tests, and the server after reading the body).
    pub fn new(method: &str, url: &str, headers: Vec<(String, String)>, body: Vec<u8>) -> Req {
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, parse_query(q)),
            None => (url, Vec::new()),
        };
        Req {
            method: method.to_ascii_uppercase(),
            path: path.to_string(),
            query,
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect(),
            body,
            request_id: uuid::Uuid::new_v4().simple().to_string(),
            scanner: None,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The bearer token, if the Authorization header carries one.
    pub fn bearer_token(&self) -> Option<Secret<String>> {
        let value = self.header("authorization")?;
        let (scheme, token) = value.trim().split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty())
            .then(|| Secret::new(token.to_string()))
    }

    /// Path segments after a prefix, e.g. `/api/v1/x/1` → `["api","v1","x","1"]`.
    pub fn segments(&self) -> Vec<&str> {
        self.path.split('/').filter(|s| !s.is_empty()).collect()
    }
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// Decodes `%XX` and `+`; invalid escapes are kept as written (the handler validates).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// What a handler answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: u16, value: &impl Serialize) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec()),
        }
    }

    pub fn ok(value: Value) -> Reply {
        Reply::json(200, &value)
    }

    pub fn empty(status: u16) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// The body parsed as JSON (tests).
    pub fn json_body(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads a body of at most `limit` bytes, giving up when the whole read takes longer than
/// `deadline`. Each socket read is itself bounded by the socket timeout, so a client that
/// trickles one byte at a time is cut off at the deadline rather than holding a worker.
pub fn read_body(
    reader: &mut dyn Read,
    declared_len: Option<usize>,
    limit: u64,
    deadline: Duration,
) -> Result<Vec<u8>, ApiError> {
    if declared_len.is_some_and(|n| n as u64 > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let started = Instant::now();
    // A declared length is within the limit here; memory is only resident as it is
    // written. An unknown one (chunked) grows by doubling, never past the limit.
    let mut body = Vec::with_capacity(declared_len.unwrap_or(0));
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if started.elapsed() > deadline {
            return Err(ApiError::BodyTimeout);
        }
        match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if (body.len() + n) as u64 > limit {
                    return Err(ApiError::PayloadTooLarge { limit });
                }
                if body.capacity() - body.len() < n {
                    let grown = (body.capacity() * 2).clamp(body.len() + n, limit as usize);
                    body.reserve_exact(grown - body.len());
                }
                body.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ApiError::BodyTimeout)
            }
            Err(e) => {
                return Err(ApiError::BadRequest {
                    code: "body_unreadable",
                    message: format!("request body could not be read: {e}"),
                })
            }
        }
    }
    // tiny_http reports a connection closed mid-body as an ordinary end of input.
    if declared_len.is_some_and(|n| n != body.len()) {
        return Err(ApiError::BadRequest {
            code: "body_incomplete",
            message: "connection closed before the whole body arrived".into(),
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_segments() {
        let r = Req::new("get", "/api/v1/tasks?size=10&after=a%2Fb+c", vec![], vec![]);
        assert_eq!(r.method, "GET");
        assert_eq!(r.segments(), vec!["api", "v1", "tasks"]);
        assert_eq!(r.query_param("size"), Some("10"));
        assert_eq!(r.query_param("after"), Some("a/b c"));
    }

    #[test]
    fn bearer_token_parsing() {
        let h = |v: &str| vec![("Authorization".to_string(), v.to_string())];
        assert_eq!(
            Req::new("GET", "/", h("Bearer abc"), vec![])
                .bearer_token()
                .unwrap()
                .expose(),
            "abc"
        );
        assert_eq!(
            Req::new("GET", "/", h("bearer  abc "), vec![])
                .bearer_token()
                .unwrap()
                .expose(),
            "abc"
        );
        assert!(Req::new("GET", "/", h("Basic abc"), vec![])
            .bearer_token()
            .is_none());
        assert!(Req::new("GET", "/", h("Bearer "), vec![])
            .bearer_token()
            .is_none());
        assert!(Req::new("GET", "/", vec![], vec![])
            .bearer_token()
            .is_none());
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(percent_decode("%41%zz%4"), "A%zz%4");
        assert_eq!(percent_decode("%"), "%");
    }

    #[test]
    fn body_limit_by_declared_length_and_by_bytes() {
        let data = [7u8; 100];
        let err = read_body(&mut &data[..], Some(100), 50, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, ApiError::PayloadTooLarge { limit: 50 }));
        let err = read_body(&mut &data[..], None, 50, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, ApiError::PayloadTooLarge { .. }));
        let ok = read_body(&mut &data[..], Some(100), 100, Duration::from_secs(5)).unwrap();
        assert_eq!(ok.len(), 100);
    }

    /// A reader that yields one byte per call, slowly.
    struct Trickle(usize);
    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            std::thread::sleep(Duration::from_millis(20));
            if self.0 == 0 {
                return Ok(0);
            }
            self.0 -= 1;
            buf[0] = b'x';
            Ok(1)
        }
    }

    #[test]
    fn truncated_body_is_refused() {
        let data = [1u8; 10];
        let err = read_body(&mut &data[..], Some(20), 100, Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.code(), "body_incomplete");
    }

    #[test]
    fn trickled_body_hits_the_deadline() {
        let err = read_body(
            &mut Trickle(1000),
            None,
            1 << 20,
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::BodyTimeout));
    }
}
