//! Two owners on one server: neither sees the other's tasks, executions, results, assets
//! or search hits; another owner's ids are 404; only admins read the global view.

use crate::support::emulator;
use crate::support::factory;
use crate::support::publish::{tick_until_done, worker};
use crate::support::read::{get, ok};
use crate::support::scan::t0;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::stack::Stack;
use uuid::Uuid;

#[test]
#[ignore = "needs PostgreSQL"]
fn owners_see_only_their_own_data() {
    let s = Stack::build(emulator::target(), "port_scan", |c| {
        c.projection.workers = 0
    });
    let mut c = s.sql();
    let b = factory::owner(&mut c, false);
    let admin = factory::owner(&mut c, true);
    let b_run = factory::task(&mut c, b.id, s.scanner.id, "port_scan", "running");
    let base = s.base();
    // A: 10.0.0.1-5; B: 192.0.2.1-3, both "nginx".
    scan::upload_execution(base, &s.scanner.token, s.execution(), 0, 5, 5, t0());
    let up = Uuid::new_v4();
    let obs = (1..=3)
        .map(|i| endpoint(&format!("192.0.2.{i}"), 443, t0()))
        .collect();
    assert_eq!(
        scan::post(
            base,
            &s.scanner.token,
            b_run.execution_id,
            &Batch::main(up, 0, obs)
        )
        .status,
        200
    );
    assert_eq!(
        scan::post(
            base,
            &s.scanner.token,
            b_run.execution_id,
            &Batch::final_(up, 1, vec![])
        )
        .status,
        200
    );
    let w = worker(&s);
    tick_until_done(&w, &s, s.execution(), 50);
    tick_until_done(&w, &s, b_run.execution_id, 50);

    let a_task = s.run.task_id;
    let a_exec = s.execution();
    // B's view of A's ids: 404, the same as an unknown id.
    for path in [
        format!("/api/v1/tasks/{a_task}"),
        format!("/api/v1/tasks/{a_task}/executions"),
        format!("/api/v1/tasks/{a_task}/results"),
        format!(
            "/api/v1/tasks/{}/results?execution_id={a_exec}",
            b_run.task_id
        ),
        format!("/api/v1/tasks/{}", Uuid::new_v4()),
    ] {
        let r = get(base, &b.token, &path);
        assert_eq!(r.status, 404, "{path}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "not_found");
    }
    let tasks = ok(base, &b.token, "/api/v1/tasks");
    let ids: Vec<&str> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [b_run.task_id.to_string()]);
    let results = ok(
        base,
        &b.token,
        &format!("/api/v1/tasks/{}/results", b_run.task_id),
    );
    assert_eq!(results["totals"]["endpoints"]["value"], 3);
    let assets = ok(base, &b.token, "/api/v1/assets?size=200");
    let ips: Vec<&str> = assets["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["ip"].as_str().unwrap())
        .collect();
    assert_eq!(ips, ["192.0.2.1", "192.0.2.2", "192.0.2.3"]);
    assert_eq!(
        ok(base, &b.token, "/api/v1/assets?ip=10.0.0.0/8")["assets"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let hits = ok(base, &b.token, "/api/v1/search?q=nginx&size=200");
    assert_eq!(hits["assets"].as_array().unwrap().len(), 3);
    assert_eq!(hits["total"]["value"], 3);
    // A sees its 5.
    assert_eq!(
        ok(base, &s.owner.token, "/api/v1/search?q=nginx")["total"]["value"],
        5
    );
    assert_eq!(
        ok(base, &s.owner.token, "/api/v1/tasks")["tasks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // The global view: 403 for owners, everything for admins.
    let r = get(base, &b.token, "/api/v1/assets?scope=global");
    assert_eq!(r.status, 403);
    assert_eq!(r.body["error"]["code"], "forbidden");
    assert_eq!(
        get(base, &b.token, "/api/v1/search?q=nginx&scope=global").status,
        403
    );
    let g = ok(base, &admin.token, "/api/v1/assets?scope=global&size=200");
    assert_eq!(g["scope"], "global");
    assert_eq!(g["assets"].as_array().unwrap().len(), 8);
    assert_eq!(
        ok(
            base,
            &admin.token,
            "/api/v1/search?q=nginx&scope=global&ip=192.0.2.0/24"
        )["total"]["value"],
        3
    );
    // The admin's own view is its own (empty).
    assert_eq!(
        ok(base, &admin.token, "/api/v1/assets")["total"]["value"],
        0
    );
}
