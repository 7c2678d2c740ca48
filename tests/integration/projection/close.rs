//! Close runs: a succeeded execution of a task with a port scope closes the owner's assets
//! in its targets × scope that it did not see and that were last seen before it started;
//! a newer sighting reopens them; replaying a close changes nothing; reads filter on it.

use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::factory::{self, TaskRun};
use crate::support::publish::{assets, drain, rebuild, reopen};
use crate::support::read;
use crate::support::scan::{self, endpoint, stored, t0, t0_plus, Batch};
use crate::support::stack::Stack;

/// Uploads `observations` as the execution's only batch (a final).
pub(super) fn finish(s: &Stack, execution: Uuid, observations: Vec<Value>) {
    let b = Batch::final_(Uuid::new_v4(), 0, observations);
    let r = scan::post(s.base(), &s.scanner.token, execution, &b);
    assert_eq!(r.status, 200, "{}", r.body);
}

/// A stack whose outbox the test drains itself (no publisher threads).
fn stack() -> Stack {
    Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
    })
}

fn publish_all(s: &Stack) {
    drain(s, 50);
}

/// A running execution of a new port-scan task over `targets` with port scope `ports`.
pub(super) fn scoped_task(s: &Stack, targets: &[(&str, &str)], ports: &str) -> TaskRun {
    let mut c = s.sql();
    let run = factory::task_with_targets(
        &mut c,
        s.owner.id,
        s.scanner.id,
        "port_scan",
        "running",
        targets,
    );
    c.execute(
        "UPDATE tasks SET ports = $2 WHERE id = $1",
        &[&run.task_id, &ports],
    )
    .unwrap();
    run
}

/// A scan of `targets` × `ports` that sees `seen` open now, published with its close run;
/// returns its execution.
fn close_scan(s: &Stack, targets: &[(&str, &str)], ports: &str, seen: &[(&str, u16)]) -> Uuid {
    let scoped = scoped_task(s, targets, ports);
    let now = chrono::Utc::now().to_rfc3339();
    let observations = seen
        .iter()
        .map(|(ip, port)| endpoint(ip, *port, &now))
        .collect();
    finish(s, scoped.execution_id, observations);
    publish_all(s);
    scoped.execution_id
}

/// Another running execution of the same task.
fn next_execution(s: &Stack, task: Uuid) -> Uuid {
    s.sql()
        .query_one(
            "INSERT INTO executions (task_id, scanner_id, status, started_at)
             VALUES ($1, $2, 'running', now()) RETURNING id",
            &[&task, &s.scanner.id],
        )
        .unwrap()
        .get(0)
}

pub(super) fn started_at(s: &Stack, execution: Uuid) -> String {
    let t: chrono::DateTime<chrono::Utc> = s
        .sql()
        .query_one(
            "SELECT started_at FROM executions WHERE id = $1",
            &[&execution],
        )
        .unwrap()
        .get(0);
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The owner's documents by endpoint (`ip-tcp-port`).
fn owner_assets(s: &Stack) -> std::collections::BTreeMap<String, Value> {
    let prefix = format!("{}-", s.owner.id.simple());
    assets(s, "user")
        .into_iter()
        .map(|(id, doc)| (id.trim_start_matches(&prefix).to_string(), doc))
        .collect()
}

fn close_rows(s: &Stack, execution: Uuid) -> Vec<(Option<i64>, bool)> {
    s.sql()
        .query(
            "SELECT processed_endpoints, processed_at IS NOT NULL
               FROM scan_projection_outbox WHERE closing_execution_id = $1",
            &[&execution],
        )
        .unwrap()
        .iter()
        .map(|r| (Some(r.get(0)), r.get(1)))
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_scoped_execution_closes_what_it_did_not_see_and_a_newer_sighting_reopens_it() {
    let s = stack();
    // An unscoped scan sees five endpoints; it closes nothing.
    let mut ssh_elsewhere = endpoint("10.0.1.5", 22, t0());
    ssh_elsewhere["service"] = json!("ssh");
    finish(
        &s,
        s.execution(),
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.1", 80, t0()),
            endpoint("10.0.0.2", 443, t0()),
            endpoint("10.0.0.1", 8080, t0()),
            ssh_elsewhere,
        ],
    );
    publish_all(&s);
    assert!(close_rows(&s, s.execution()).is_empty());

    // A scan of 10.0.0.0/24 on 22, 80 and 443 sees 22 (with a scanner clock behind, so
    // before its own start) and 443 closed; it does not see 80.
    let scoped = scoped_task(&s, &[("cidr", "10.0.0.0/24")], "22,80,443");
    let e2 = scoped.execution_id;
    let mut closed_443 = endpoint("10.0.0.2", 443, &chrono::Utc::now().to_rfc3339());
    closed_443["state"] = json!("closed");
    finish(
        &s,
        e2,
        vec![endpoint("10.0.0.1", 22, &t0_plus(1)), closed_443.clone()],
    );
    publish_all(&s);
    assert_eq!(close_rows(&s, e2), vec![(Some(1), true)]);
    let docs = owner_assets(&s);
    let e2_start = started_at(&s, e2);
    let closed = &docs["10.0.0.1-tcp-80"];
    assert_eq!(closed["status"], "closed", "{closed}");
    assert_eq!(closed["state"], "closed");
    assert_eq!(closed["closed_at"], json!(e2_start));
    assert_eq!(closed["closed_by"], json!(e2.to_string()));
    assert_eq!(
        closed["last_seen"],
        json!(stored(t0())),
        "closing is not seeing"
    );
    // Seen by the close's own execution, outside its targets, outside its ports: open.
    for key in ["10.0.0.1-tcp-22", "10.0.1.5-tcp-22", "10.0.0.1-tcp-8080"] {
        assert_eq!(docs[key]["status"], "open", "{key}: {}", docs[key]);
    }
    // Closed by the observation itself, at its own time.
    assert_eq!(docs["10.0.0.2-tcp-443"]["status"], "closed");
    assert_eq!(
        docs["10.0.0.2-tcp-443"]["closed_at"],
        json!(stored(closed_443["observed_at"].as_str().unwrap()))
    );
    // The global view closes with it.
    let global: std::collections::BTreeMap<String, Value> =
        assets(&s, "global").into_iter().collect();
    assert_eq!(global["10.0.0.1-tcp-80"]["status"], "closed");
    assert_eq!(global["10.0.0.1-tcp-22"]["status"], "open");

    // Reads: open by default, closed ones on request, and what the execution closed.
    let get = |query: &str| {
        let r = read::get(s.base(), &s.owner.token, &format!("/api/v1/assets?{query}"));
        assert_eq!(r.status, 200, "{query}: {}", r.body);
        let mut keys: Vec<String> = r.body["assets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                format!(
                    "{}:{}:{}",
                    a["ip"].as_str().unwrap(),
                    a["port"],
                    a["status"].as_str().unwrap()
                )
            })
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        get(""),
        ["10.0.0.1:22:open", "10.0.0.1:8080:open", "10.0.1.5:22:open"]
    );
    assert_eq!(
        get("status=closed"),
        ["10.0.0.1:80:closed", "10.0.0.2:443:closed"]
    );
    assert_eq!(get("status=all").len(), 5);
    assert_eq!(get("state=closed").len(), 2, "a state names its own set");
    let since = urlencoding(&e2_start);
    assert_eq!(
        get(&format!("closed_since={since}")),
        ["10.0.0.1:80:closed", "10.0.0.2:443:closed"]
    );
    let r = read::get(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/assets?status=open&closed_since={since}"),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    let r = read::get(s.base(), &s.owner.token, "/api/v1/assets?status=gone");
    assert_eq!(r.status, 400, "{}", r.body);
    let r = read::get(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/tasks/{}/executions", scoped.task_id),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let closing = &r.body["executions"][0]["closing"];
    assert_eq!(
        (&closing["status"], &closing["closed_endpoints"]),
        (&json!("ready"), &json!(1)),
        "{}",
        r.body
    );

    // Replaying the close run changes no document.
    let before = owner_assets(&s);
    reopen(&s, "closing_execution_id", &e2);
    publish_all(&s);
    assert_eq!(owner_assets(&s), before);

    // A later scan sees 80 open again: reopened, first seen as before.
    let e3 = next_execution(&s, scoped.task_id);
    let now = chrono::Utc::now().to_rfc3339();
    finish(
        &s,
        e3,
        vec![
            endpoint("10.0.0.1", 22, &now),
            endpoint("10.0.0.1", 80, &now),
            endpoint("10.0.0.2", 443, &now),
        ],
    );
    publish_all(&s);
    let docs = owner_assets(&s);
    let reopened = &docs["10.0.0.1-tcp-80"];
    assert_eq!(reopened["status"], "open", "{reopened}");
    assert_eq!(reopened["closed_at"], Value::Null);
    assert_eq!(reopened["first_seen"], json!(stored(t0())));
    assert_eq!(docs["10.0.0.2-tcp-443"]["status"], "open");
    assert_eq!(close_rows(&s, e3), vec![(Some(0), true)]);

    // A rebuild replays the executions and their close runs: it verifies against the live
    // view document by document before it switches, and the view reads the same after.
    assert_eq!(rebuild(&s).current, 2);
    assert_eq!(owner_assets(&s), docs);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_rebuild_replays_a_close_run_that_closed_something() {
    let s = stack();
    finish(
        &s,
        s.execution(),
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.1", 80, t0()),
        ],
    );
    publish_all(&s);
    close_scan(&s, &[("ip", "10.0.0.1")], "T:1-1024", &[("10.0.0.1", 22)]);
    let live = owner_assets(&s);
    assert_eq!(live["10.0.0.1-tcp-80"]["status"], "closed");
    rebuild(&s);
    assert_eq!(owner_assets(&s), live);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_close_run_pages_through_ties_on_an_address() {
    // Pages of two: every page but the first starts at the address its cursor ends on.
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
        cfg.projection.page_size = 2;
    });
    let seen = [
        ("10.0.0.1", 22),
        ("10.0.0.1", 80),
        ("10.0.0.1", 443),
        ("10.0.0.2", 22),
        ("10.0.0.2", 80),
        ("10.0.0.3", 443),
        ("10.0.0.4", 22),
    ];
    let observations = seen
        .iter()
        .map(|(ip, port)| endpoint(ip, *port, t0()))
        .collect();
    finish(&s, s.execution(), observations);
    publish_all(&s);
    let scoped = close_scan(
        &s,
        &[("cidr", "10.0.0.0/24")],
        "22,80,443",
        &[("10.0.0.9", 22)],
    );
    assert_eq!(close_rows(&s, scoped), vec![(Some(7), true)]);
    let docs = owner_assets(&s);
    for (ip, port) in seen {
        let doc = &docs[&format!("{ip}-tcp-{port}")];
        assert_eq!(doc["status"], "closed", "{ip}:{port}: {doc}");
    }
    assert_eq!(docs["10.0.0.9-tcp-22"]["status"], "open");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_older_observation_published_after_a_close_run_is_closed_with_its_page() {
    let s = stack();
    // 10.0.0.7:80 is seen closed (a scanner's own state) an hour after t0.
    let earlier = next_execution(&s, s.run.task_id);
    let mut closed_7 = endpoint("10.0.0.7", 80, &t0_plus(1));
    closed_7["state"] = json!("closed");
    finish(&s, earlier, vec![closed_7.clone()]);
    publish_all(&s);

    // The close run of a scan of 10.0.0.0/24 on 22 and 80 that saw only 10.0.0.1:22.
    let e_close = close_scan(&s, &[("cidr", "10.0.0.0/24")], "22,80", &[("10.0.0.1", 22)]);
    assert_eq!(close_rows(&s, e_close), vec![(Some(0), true)]);

    // Then an upload of observations made before that scan started: the close run would
    // have closed those it did not see had they been published before it.
    let newer = chrono::Utc::now().to_rfc3339();
    finish(
        &s,
        s.execution(),
        vec![
            endpoint("10.0.0.5", 80, t0()),
            endpoint("10.0.0.5", 443, t0()),
            endpoint("10.0.1.5", 80, t0()),
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.6", 80, &newer),
            endpoint("10.0.0.7", 80, t0()),
        ],
    );
    publish_all(&s);
    let docs = owner_assets(&s);
    let closed = &docs["10.0.0.5-tcp-80"];
    assert_eq!(
        (
            &closed["status"],
            &closed["closed_at"],
            &closed["closed_by"]
        ),
        (
            &json!("closed"),
            &json!(started_at(&s, e_close)),
            &json!(e_close.to_string())
        ),
        "{closed}"
    );
    assert_eq!(closed["last_seen"], json!(stored(t0())));
    let global: std::collections::BTreeMap<String, Value> =
        assets(&s, "global").into_iter().collect();
    assert_eq!(global["10.0.0.5-tcp-80"]["status"], "closed");
    // Outside the scope, outside the targets, seen by the close's execution, newer than
    // its start: open.
    for key in [
        "10.0.0.5-tcp-443",
        "10.0.1.5-tcp-80",
        "10.0.0.1-tcp-22",
        "10.0.0.6-tcp-80",
    ] {
        assert_eq!(docs[key]["status"], "open", "{key}: {}", docs[key]);
    }
    // Closed by a newer observation of its own, which the close run left alone: as it was.
    assert_eq!(
        (
            &docs["10.0.0.7-tcp-80"]["status"],
            &docs["10.0.0.7-tcp-80"]["closed_at"]
        ),
        (&json!("closed"), &json!(stored(&t0_plus(1)))),
    );

    // A rebuild, which replays the close run after every execution, verifies equal.
    assert_eq!(rebuild(&s).current, 2);
    assert_eq!(owner_assets(&s), docs);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_older_observation_behind_a_running_close_runs_cursor_is_closed_with_its_page() {
    let s = stack();
    let scoped = close_scan(&s, &[("cidr", "10.0.0.0/24")], "80", &[("10.0.0.1", 80)]);
    // The close run, under way again, has passed 10.0.0.200 when the older observation of
    // 10.0.0.5:80 is published.
    s.sql()
        .execute(
            "UPDATE scan_projection_outbox SET processed_at = NULL, phase = 'publishing',
                    cursor = '[\"10.0.0.200\",80,\"tcp\"]'
              WHERE closing_execution_id = $1",
            &[&scoped],
        )
        .unwrap();
    finish(&s, s.execution(), vec![endpoint("10.0.0.5", 80, t0())]);
    publish_all(&s);
    assert_eq!(close_rows(&s, scoped), vec![(Some(0), true)]);
    let docs = owner_assets(&s);
    assert_eq!(docs["10.0.0.5-tcp-80"]["status"], "closed", "{docs:?}");
    assert_eq!(
        docs["10.0.0.5-tcp-80"]["closed_by"],
        json!(scoped.to_string())
    );
}

/// `+` and `:` in a time, for a query string.
fn urlencoding(t: &str) -> String {
    t.replace('+', "%2B").replace(':', "%3A")
}
