//! Transport-neutral request and reply types, query-string and path decoding.

use serde::Serialize;
use serde_json::Value;

use crate::error::EsError;

/// A decoded request: what handlers see (no socket).
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// Decoded path segments (empty segments dropped).
    pub segments: Vec<String>,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// A reply to send: status, body bytes, and whether to close the connection afterwards.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub json: bool,
    pub close: bool,
}

impl Reply {
    pub fn json(status: u16, v: &impl Serialize) -> Reply {
        Reply::json_sized(status, v, 128)
    }

    /// A JSON reply written into `capacity` bytes reserved up front: a page of hits is
    /// hundreds of KiB, which a buffer growing by doubling copies a dozen times.
    pub fn json_sized(status: u16, v: &impl Serialize, capacity: usize) -> Reply {
        let mut body = Vec::with_capacity(capacity);
        if serde_json::to_writer(&mut body, v).is_err() {
            body.clear();
        }
        Reply {
            status,
            body,
            json: true,
            close: false,
        }
    }

    pub fn ok(v: &impl Serialize) -> Reply {
        Reply::json(200, v)
    }

    pub fn empty(status: u16) -> Reply {
        Reply {
            status,
            body: Vec::new(),
            json: false,
            close: false,
        }
    }

    pub fn error(e: &EsError) -> Reply {
        Reply::json(e.status, &e.body())
    }
}

pub type HandlerResult = Result<Reply, EsError>;

pub fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Req {
    /// Builds a request from a raw URL (`/path?query`).
    pub fn new(method: &str, url: &str, body: Vec<u8>) -> Req {
        let (path, qs) = match url.split_once('?') {
            Some((p, q)) => (p, q),
            None => (url, ""),
        };
        let segments = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| percent_decode(s, false))
            .collect();
        let query = qs
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (percent_decode(k, true), percent_decode(v, true)),
                None => (percent_decode(kv, true), String::new()),
            })
            .collect();
        Req {
            method: method.to_ascii_uppercase(),
            segments,
            path: path.to_owned(),
            query,
            body,
        }
    }

    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean query parameter: present without value or `true` → true.
    pub fn flag(&self, key: &str) -> Result<Option<bool>, EsError> {
        match self.param(key) {
            None => Ok(None),
            Some("") | Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(v) => Err(EsError::bad_request(format!(
                "Failed to parse value [{v}] as only [true] or [false] are allowed."
            ))),
        }
    }

    pub fn body_is_empty(&self) -> bool {
        self.body.iter().all(|b| b.is_ascii_whitespace())
    }

    /// The body as a JSON object, or `None` when there is no body.
    pub fn json_body(&self) -> Result<Option<Value>, EsError> {
        if self.body_is_empty() {
            return Ok(None);
        }
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(v @ Value::Object(_)) => Ok(Some(v)),
            Ok(_) => Err(EsError::parsing("request body must be a JSON object")),
            Err(e) => Err(EsError::new(
                400,
                "x_content_parse_exception",
                format!("failed to parse request body: {e}"),
            )
            .caused_by(EsError::new(400, "json_parse_exception", e.to_string()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_path_and_query() {
        let r = Req::new(
            "post",
            "/a%2Cb/_refresh?ignore_unavailable=true&q=x+y&flag",
            vec![],
        );
        assert_eq!(r.segments, vec!["a,b", "_refresh"]);
        assert_eq!(r.param("q"), Some("x y"));
        assert_eq!(r.flag("flag").ok().flatten(), Some(true));
        assert_eq!(r.method, "POST");
    }

    #[test]
    fn bad_percent_is_literal() {
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz", false), "%zz");
    }
}
