//! The OpenAPI description against the implementation: the documented paths are exactly
//! the router's routes, every documented operation is answered (not 404/405) by the
//! running server, and sample responses of each read endpoint carry the documented
//! required fields with the documented types.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::emulator;
use crate::support::openapi::{assert_documented, spec};
use crate::support::publish::{tick_until_done, worker};
use crate::support::read::{get, ok};
use crate::support::scan;
use crate::support::scan::t0;
use crate::support::server::{got, http};
use crate::support::stack::Stack;
use scanstore::http::router::ROUTES;

fn documented(spec: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            out.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    out
}

#[test]
fn documented_paths_are_exactly_the_routes() {
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented(&spec()), routes);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn every_documented_operation_is_served_and_responses_match() {
    let spec = spec();
    let s = Stack::build(emulator::target(), "port_scan", |c| {
        c.projection.workers = 0
    });
    let (base, token) = (s.base(), s.owner.token.as_str());
    scan::upload_execution(base, &s.scanner.token, s.execution(), 0, 4, 4, t0());
    tick_until_done(&worker(&s), &s, s.execution(), 50);

    for (method, path) in documented(&spec) {
        let url = path
            .replace("{task_id}", &s.run.task_id.to_string())
            .replace("{execution_id}", &s.execution().to_string())
            .replace("{upload_id}", &uuid::Uuid::new_v4().to_string());
        let url = if path == "/api/v1/search" {
            format!("{url}?q=nginx")
        } else {
            url
        };
        let is_scanner = path.contains("/scanner/");
        let auth = format!(
            "Bearer {}",
            if is_scanner { &s.scanner.token } else { token }
        );
        let r = match method.as_str() {
            "GET" => got(http()
                .get(format!("{base}{url}"))
                .header("Authorization", &auth)
                .call()),
            "POST" => got(http()
                .post(format!("{base}{url}"))
                .header("Authorization", &auth)
                .header("Content-Type", "application/json")
                .send(b"{}".as_slice())),
            "DELETE" => got(http()
                .delete(format!("{base}{url}"))
                .header("Authorization", &auth)
                .call()),
            other => panic!("undocumented method {other}"),
        };
        assert!(
            r.status != 404 && r.status != 405,
            "{method} {path} answered {}: {}",
            r.status,
            r.body
        );
        let documented_status =
            &spec["paths"][&path][method.to_ascii_lowercase()]["responses"][r.status.to_string()];
        assert!(
            !documented_status.is_null(),
            "{method} {path}: status {} undocumented",
            r.status
        );
    }

    let task = s.run.task_id;
    let samples = [
        ("/api/v1/tasks", "/api/v1/tasks".to_string()),
        ("/api/v1/tasks/{task_id}", format!("/api/v1/tasks/{task}")),
        (
            "/api/v1/tasks/{task_id}/executions",
            format!("/api/v1/tasks/{task}/executions"),
        ),
        (
            "/api/v1/tasks/{task_id}/results",
            format!("/api/v1/tasks/{task}/results?size=2"),
        ),
        ("/api/v1/assets", "/api/v1/assets?size=2".to_string()),
        (
            "/api/v1/search",
            "/api/v1/search?q=nginx&size=2".to_string(),
        ),
    ];
    for (doc_path, url) in samples {
        let body = ok(base, token, &url);
        assert_documented(&spec, doc_path, "get", 200, &body);
        // The second page too (totals null, cursor-driven).
        if let Some(next) = body["next"].as_str() {
            let sep = if url.contains('?') { '&' } else { '?' };
            let body = ok(base, token, &format!("{url}{sep}after={next}"));
            assert_documented(&spec, doc_path, "get", 200, &body);
        }
    }
    let r = get(
        base,
        token,
        &format!("/api/v1/tasks/{}", uuid::Uuid::new_v4()),
    );
    assert_documented(&spec, "/api/v1/tasks/{task_id}", "get", 404, &r.body);
    let r = get(base, token, "/api/v1/assets?port=0");
    assert_documented(&spec, "/api/v1/assets", "get", 400, &r.body);
    let r = get(base, token, "/api/v1/assets?scope=global");
    assert_documented(&spec, "/api/v1/assets", "get", 403, &r.body);
    // The console is served too.
    let r = got(http().get(format!("{base}/")).call());
    assert_eq!(r.status, 200);
    assert!(r.body.as_str().unwrap().contains("scanstore console"));
}
