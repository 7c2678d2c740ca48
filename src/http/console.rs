//! The embedded owner web console (static HTML, CSS and JS compiled into the binary; no
//! build step, no CDN) served at `/` and `/console/…`, and the OpenAPI description served
//! at `/api/v1/openapi.json`. The console talks only to the read API, with the owner token
//! the user types in (kept in `sessionStorage`).

use super::request::{Reply, Req};

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_CSS: &str = include_str!("console/console.css");
const CONSOLE_JS: &str = include_str!("console/console.js");
/// The OpenAPI 3 description of the whole HTTP API.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// Scripts and styles only from scanstore itself; no inline script, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &str) -> Reply {
    Reply {
        status: 200,
        content_type,
        headers: vec![
            ("Cache-Control", "no-cache".to_string()),
            ("X-Content-Type-Options", "nosniff".to_string()),
        ],
        body: body.as_bytes().to_vec(),
    }
}

/// `GET /` and `GET /console/…`: the page, its stylesheet and script; `None` = not found.
pub fn page(req: &Req) -> Option<Reply> {
    let segments = req.segments();
    match segments.as_slice() {
        [] | ["console"] | ["console", "index.html"] => Some(
            asset("text/html; charset=utf-8", INDEX_HTML)
                .with_header("Content-Security-Policy", CSP)
                .with_header("Referrer-Policy", "no-referrer"),
        ),
        ["console", "console.css"] => Some(asset("text/css; charset=utf-8", CONSOLE_CSS)),
        ["console", "console.js"] => {
            Some(asset("application/javascript; charset=utf-8", CONSOLE_JS))
        }
        _ => None,
    }
}

/// `GET /api/v1/openapi.json`
pub fn openapi() -> Reply {
    asset("application/json", OPENAPI_JSON)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openapi_is_json_and_version_3() {
        let v: serde_json::Value = serde_json::from_str(OPENAPI_JSON).expect("valid JSON");
        assert!(v["openapi"].as_str().unwrap().starts_with("3."));
    }

    #[test]
    fn pages() {
        let get = |p: &str| page(&Req::new("GET", p, vec![], vec![]));
        assert_eq!(get("/").unwrap().content_type, "text/html; charset=utf-8");
        assert!(get("/console/").is_some());
        assert!(get("/console/console.js").is_some());
        assert!(get("/console/console.css").is_some());
        assert!(get("/console/nope").is_none());
    }

    /// The console never inserts server data as HTML.
    #[test]
    fn console_builds_dom_without_inner_html() {
        assert!(!CONSOLE_JS.contains("innerHTML"));
        assert!(!CONSOLE_JS.contains("outerHTML"));
        assert!(!CONSOLE_JS.contains("insertAdjacentHTML"));
        assert!(!CONSOLE_JS.contains("document.write"));
    }
}
