//! Each read endpoint on one owner's data, and projection_status across a publication.

use serde_json::Value;

use crate::support::emulator;
use crate::support::publish::{tick_until_done, worker};
use crate::support::read::{get, ok};
use crate::support::scan;
use crate::support::scan::t0;
use crate::support::stack::Stack;

fn hand_ticked(kind: &str) -> Stack {
    Stack::build(emulator::target(), kind, |c| c.projection.workers = 0)
}

fn statuses(body: &Value) -> Vec<String> {
    body["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["projection_status"].as_str().unwrap().to_string())
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn projection_status_goes_not_started_pending_ready_across_a_publication() {
    let s = hand_ticked("port_scan");
    let (base, token) = (s.base(), s.owner.token.as_str());
    let task = s.run.task_id;
    let execs = format!("/api/v1/tasks/{task}/executions");

    // Running execution: nothing to publish yet.
    assert_eq!(statuses(&ok(base, token, &execs)), ["not_started"]);
    assert_eq!(
        ok(base, token, &format!("/api/v1/tasks/{task}"))["projection_status"],
        "not_started"
    );

    scan::upload_execution(base, &s.scanner.token, s.execution(), 0, 30, 10, t0());

    // Succeeded, queued, no worker has run: pending; results are complete already.
    let body = ok(base, token, &execs);
    assert_eq!(statuses(&body), ["pending"]);
    let e = &body["executions"][0];
    assert_eq!(e["status"], "succeeded");
    assert_eq!(e["counts"]["endpoints"], 30);
    assert_eq!(e["projection"]["processed_endpoints"], 0);
    assert_eq!(e["projection"]["attempts"], 0);
    assert!(e["projection"]["last_error_class"].is_null());
    assert!(e["finished_at"].is_string());
    let t = ok(base, token, &format!("/api/v1/tasks/{task}"));
    assert_eq!(t["projection_status"], "pending");
    assert_eq!(t["projection_counts"]["pending"], 1);
    let results = ok(base, token, &format!("/api/v1/tasks/{task}/results"));
    assert_eq!(results["complete"], true);
    assert_eq!(results["totals"]["endpoints"]["value"], 30);
    assert_eq!(results["totals"]["ips"]["value"], 30);
    // The current projection has nothing yet.
    assert_eq!(
        ok(base, token, "/api/v1/assets")["assets"],
        serde_json::json!([])
    );

    tick_until_done(&worker(&s), &s, s.execution(), 50);

    let body = ok(base, token, &execs);
    assert_eq!(statuses(&body), ["ready"]);
    assert_eq!(
        body["executions"][0]["projection"]["processed_endpoints"],
        30
    );
    assert!(body["executions"][0]["projection"]["processed_at"].is_string());
    let t = ok(base, token, &format!("/api/v1/tasks/{task}"));
    assert_eq!(t["projection_status"], "ready");
    assert_eq!(t["status"], "succeeded");
    assert_eq!(t["counters"]["endpoints_total"], 30);
    assert_eq!(t["targets"][0]["value"], "10.0.0.0/8");
    assert_eq!(t["targets_total"], 5);
    let assets = ok(base, token, "/api/v1/assets?size=200");
    assert_eq!(assets["assets"].as_array().unwrap().len(), 30);
    assert_eq!(assets["total"]["value"], 30);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_failed_attempt_shows_retrying_with_its_class_only() {
    let s = hand_ticked("port_scan");
    let (base, token) = (s.base(), s.owner.token.as_str());
    scan::upload_execution(base, &s.scanner.token, s.execution(), 0, 3, 3, t0());
    s.sql()
        .execute(
            "UPDATE scan_projection_outbox SET attempts = 2, last_error = 'secret internal detail http://es-7:9200',
                    last_error_class = 'transient', available_at = now() + interval '1 hour'
              WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap();
    let r = get(
        base,
        token,
        &format!("/api/v1/tasks/{}/executions", s.run.task_id),
    );
    assert_eq!(r.status, 200);
    let e = &r.body["executions"][0];
    assert_eq!(e["projection_status"], "retrying");
    assert_eq!(e["projection"]["attempts"], 2);
    assert_eq!(e["projection"]["last_error_class"], "transient");
    assert!(e["projection"]["next_attempt_at"].is_string());
    assert!(!r.body.to_string().contains("secret internal detail"));
    let t = ok(base, token, &format!("/api/v1/tasks/{}", s.run.task_id));
    assert_eq!(t["projection_status"], "retrying");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn dns_tasks_are_not_applicable() {
    let s = hand_ticked("dns");
    let body = ok(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/tasks/{}/executions", s.run.task_id),
    );
    assert_eq!(statuses(&body), ["not_applicable"]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn task_list_pages_newest_first_with_keyset_cursor() {
    let s = hand_ticked("port_scan");
    let mut c = s.sql();
    for i in 0..6 {
        c.execute(
            "INSERT INTO tasks (owner_id, kind, tags, created_at) VALUES ($1, 'mixed', ARRAY[$2], now() - make_interval(mins => $3))",
            &[&s.owner.id, &format!("t{i}"), &(i + 1)],
        )
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut path = "/api/v1/tasks?size=3".to_string();
    loop {
        let body = ok(s.base(), &s.owner.token, &path);
        for t in body["tasks"].as_array().unwrap() {
            seen.push(t["created_at"].as_str().unwrap().to_string());
            assert!(t["projection_status"].is_string());
        }
        match body["next"].as_str() {
            Some(n) => path = format!("/api/v1/tasks?size=3&after={n}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7);
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first");
    let first = ok(s.base(), &s.owner.token, "/api/v1/tasks?size=1");
    assert_eq!(first["tasks"][0]["id"], s.run.task_id.to_string());
    // A task without executions is not_started.
    let list = ok(s.base(), &s.owner.token, "/api/v1/tasks?size=200");
    assert_eq!(list["tasks"][6]["projection_status"], "not_started");
    assert_eq!(list["tasks"][6]["tags"][0], "t5");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn assets_filters_cursor_and_search() {
    let s = hand_ticked("port_scan");
    let (base, token) = (s.base(), s.owner.token.as_str());
    scan::upload_execution(base, &s.scanner.token, s.execution(), 0, 12, 5, t0());
    tick_until_done(&worker(&s), &s, s.execution(), 50);

    // Cursor paging: every asset exactly once.
    let mut seen = Vec::new();
    let mut path = "/api/v1/assets?size=5".to_string();
    let mut pages = 0;
    loop {
        let body = ok(base, token, &path);
        pages += 1;
        if pages > 1 {
            assert!(body["total"].is_null());
        }
        for a in body["assets"].as_array().unwrap() {
            seen.push(a["ip"].as_str().unwrap().to_string());
        }
        match body["next"].as_str() {
            Some(n) => path = format!("/api/v1/assets?size=5&after={n}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut expected: Vec<String> = (0..12).map(scan::nth_ip).collect();
    expected.sort_by_key(|ip| ip.parse::<std::net::Ipv4Addr>().unwrap());
    assert_eq!(seen, expected);

    let n = |path: &str| ok(base, token, path)["assets"].as_array().unwrap().len();
    assert_eq!(n("/api/v1/assets?ip=10.0.0.3"), 1);
    assert_eq!(n("/api/v1/assets?ip=10.0.0.0/29"), 7); // .1 … .7
    assert_eq!(n("/api/v1/assets?ip=10.9.0.0/16"), 0);
    assert_eq!(n("/api/v1/assets?port=443&transport=tcp"), 12);
    assert_eq!(n("/api/v1/assets?port=80"), 0);
    assert_eq!(n("/api/v1/assets?service=https"), 12);
    assert_eq!(n("/api/v1/assets?tag=nope"), 0);
    let since = |at: String| format!("/api/v1/assets?seen_since={at}");
    assert_eq!(n(&since(scan::t0_plus(-1))), 12);
    assert_eq!(n(&since(scan::t0_plus(1))), 0);
    let a = &ok(base, token, "/api/v1/assets?ip=10.0.0.3")["assets"][0];
    assert_eq!(a["port"], 443);
    assert_eq!(a["product"], "nginx");
    assert_eq!(a["first_seen"], scan::stored(t0()));

    assert_eq!(n("/api/v1/search?q=nginx"), 12);
    assert_eq!(n("/api/v1/search?q=OK"), 12); // banner text "HTTP/1.1 200 OK"
    assert_eq!(n("/api/v1/search?q=apache"), 0);
    assert_eq!(n("/api/v1/search?q=nginx&ip=10.0.0.1"), 1);
    let body = ok(base, token, "/api/v1/search?q=nginx&size=10");
    assert_eq!(body["total"]["value"], 12);
    assert!(body["next"].is_string());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn validation_answers_clear_400s() {
    let s = hand_ticked("port_scan");
    let (base, token) = (s.base(), s.owner.token.as_str());
    let task = s.run.task_id;
    let cases = [
        ("/api/v1/tasks?size=0", "bad_size"),
        ("/api/v1/tasks?size=201", "bad_size"),
        ("/api/v1/tasks?size=ten", "bad_size"),
        ("/api/v1/tasks?after=zz", "bad_cursor"),
        ("/api/v1/tasks?after=5b5d", "bad_cursor"),
        (
            &format!("/api/v1/tasks/{task}/results?size=501"),
            "bad_size",
        ),
        (
            &format!("/api/v1/tasks/{task}/results?after=00"),
            "bad_cursor",
        ),
        (
            &format!("/api/v1/tasks/{task}/results?execution_id=x"),
            "bad_parameter",
        ),
        ("/api/v1/assets?ip=10.0.0.0/33", "bad_ip"),
        ("/api/v1/assets?ip=300.1.1.1", "bad_ip"),
        ("/api/v1/assets?port=0", "bad_port"),
        ("/api/v1/assets?port=70000", "bad_port"),
        ("/api/v1/assets?transport=icmp", "bad_transport"),
        ("/api/v1/assets?seen_since=yesterday", "bad_time"),
        ("/api/v1/assets?scope=everything", "bad_scope"),
        ("/api/v1/search", "bad_parameter"),
        ("/api/v1/search?q=", "bad_parameter"),
        (
            &format!("/api/v1/search?q={}", "x".repeat(201)),
            "bad_parameter",
        ),
    ];
    for (path, code) in cases {
        let r = get(base, token, path);
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(r.body["error"]["code"], code, "{path}");
        assert_eq!(r.body["success"], false);
        assert!(r.body["error"]["message"].as_str().unwrap().len() > 10);
    }
    // A tasks cursor is not an assets cursor.
    let other = scanstore::read::params::encode_cursor("tasks", &[serde_json::json!("x")]);
    let r = get(base, token, &format!("/api/v1/assets?after={other}"));
    assert_eq!(r.body["error"]["code"], "bad_cursor");
    // Bad uuids are simply not found.
    for path in [
        "/api/v1/tasks/not-a-uuid",
        "/api/v1/tasks/123/executions",
        "/api/v1/tasks/zz/results",
    ] {
        assert_eq!(get(base, token, path).status, 404, "{path}");
    }
    // No token or a wrong one.
    assert_eq!(get(base, "nope", "/api/v1/tasks").status, 401);
    assert_eq!(get(base, &s.scanner.token, "/api/v1/tasks").status, 401);
    // Wrong method.
    let r = crate::support::server::got(
        crate::support::server::http()
            .post(format!("{base}/api/v1/tasks"))
            .header("Authorization", &format!("Bearer {token}"))
            .send_empty(),
    );
    assert_eq!(r.status, 405);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_incomplete_search_answer_is_refused_not_served() {
    let Some(s) = Stack::with_faults(
        "an_incomplete_search_answer_is_refused_not_served",
        "port_scan",
        |c| c.projection.workers = 0,
    ) else {
        return;
    };
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 3, 3, t0());
    s.emulator()
        .add_fault(crate::support::emulator::FaultSpec::fail(
            "*_search",
            1,
            503,
            "search_phase_execution_exception",
        ));
    let r = get(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/tasks/{}/results", s.run.task_id),
    );
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "search_backend_unavailable");
}
