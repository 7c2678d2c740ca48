//! Deleting a task (`scanstore-admin task delete`, outbox kind `forget`): the assets it
//! shared keep only the other executions' observations (and the close runs a rebuild would
//! apply without it), the assets only it saw go from both views, its documents and rows go,
//! a rebuild afterwards verifies equal, and no replay or requeue brings anything back.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use uuid::Uuid;

use super::close::{finish, scoped_task, started_at};
use crate::support::admin::admin;
use crate::support::factory;
use crate::support::publish::{assets, drain, rebuild, reopen};
use crate::support::read;
use crate::support::scan::{self, endpoint, stored, t0, t0_plus, Batch};
use crate::support::stack::Stack;

fn stack() -> Stack {
    Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
        // Several pages per run, each page's endpoints looked up together.
        cfg.projection.page_size = 2;
    })
}

/// An observation of `ip:port/tcp` at `at` whose service says who saw it.
fn seen(ip: &str, port: u16, at: &str, who: &str) -> Value {
    let mut e = endpoint(ip, port, at);
    e["product"] = json!(who);
    e
}

/// A view's documents by endpoint (`ip-tcp-port`): the global view's, or the stack's
/// owner's (its id taken off their ids).
fn view(s: &Stack, name: &str) -> BTreeMap<String, Value> {
    let owner = format!("{}-", s.owner.id.simple());
    assets(s, name)
        .into_iter()
        .filter_map(|(id, doc)| match name {
            "user" => id.strip_prefix(&owner).map(|e| (e.to_string(), doc)),
            _ => Some((id, doc)),
        })
        .collect()
}

fn delete_task(s: &Stack, task: Uuid) -> crate::support::admin::Run {
    admin(&s.db, &["task", "delete", &task.to_string()]).ok()
}

fn rows(s: &Stack, sql: &str, id: Uuid) -> i64 {
    s.sql().query_one(sql, &[&id]).unwrap().get(0)
}

/// Documents of `index` (a pattern) with `task_id`.
fn task_docs(s: &Stack, index: &str, task: Uuid) -> u64 {
    s.es().refreshed_count(
        &format!("{}-{index}", s.prefix()),
        json!({"term": {"task_id": task.to_string()}}),
    )
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_deleted_task_leaves_only_what_the_others_saw() {
    let s = stack();
    let mut c = s.sql();
    // Task A (the stack's) and task B of the owner both see 10.0.0.1:22 (B later); A alone
    // sees 10.0.0.2:443, B alone 10.0.0.3:80; B and another owner's task see 10.0.0.4:25.
    let b = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running");
    let other = factory::owner(&mut c, false);
    let other_scanner = factory::scanner(&mut c, None);
    let o = factory::task(&mut c, other.id, other_scanner.id, "port_scan", "running");
    admin(
        &s.db,
        &[
            "tag",
            "add",
            "--owner",
            &s.owner.id.to_string(),
            "10.0.0.1",
            "prod",
        ],
    )
    .ok();
    finish(
        &s,
        s.execution(),
        vec![
            seen("10.0.0.1", 22, t0(), "a"),
            seen("10.0.0.2", 443, t0(), "a"),
        ],
    );
    finish(
        &s,
        b.execution_id,
        vec![
            seen("10.0.0.1", 22, &t0_plus(1), "b"),
            seen("10.0.0.3", 80, &t0_plus(1), "b"),
            seen("10.0.0.4", 25, &t0_plus(1), "b"),
        ],
    );
    let theirs = Batch::final_(
        Uuid::new_v4(),
        0,
        vec![seen("10.0.0.4", 25, &t0_plus(-1), "o")],
    );
    let r = scan::post(s.base(), &other_scanner.token, o.execution_id, &theirs);
    assert_eq!(r.status, 200, "{}", r.body);
    drain(&s, 50);
    assert_eq!(view(&s, "user")["10.0.0.1-tcp-22"]["product"], "b");
    assert_eq!(task_docs(&s, "execution-endpoints", b.task_id), 3);
    assert_eq!(task_docs(&s, "facts-*", b.task_id), 3);
    let a_docs = task_docs(&s, "execution-endpoints", s.run.task_id);

    let r = delete_task(&s, b.task_id);
    assert_eq!(r.get("executions"), "1");
    // Gone for reads at once; its execution is not published again.
    let got = read::get(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/tasks/{}", b.task_id),
    );
    assert_eq!(got.status, 404, "{}", got.body);
    let listed = read::ok(s.base(), &s.owner.token, "/api/v1/tasks");
    assert!(
        !listed.to_string().contains(&b.task_id.to_string()),
        "{listed}"
    );
    admin(&s.db, &["outbox", "requeue", &b.execution_id.to_string()]).fails_with("being deleted");
    drain(&s, 50);

    let user = view(&s, "user");
    let global = view(&s, "global");
    assert_eq!(
        user.keys().collect::<Vec<_>>(),
        ["10.0.0.1-tcp-22", "10.0.0.2-tcp-443"],
        "what only B saw is gone from the owner's view"
    );
    assert_eq!(
        global.keys().collect::<Vec<_>>(),
        ["10.0.0.1-tcp-22", "10.0.0.2-tcp-443", "10.0.0.4-tcp-25"],
        "what only B saw is gone; what another owner saw stays"
    );
    for doc in [&user["10.0.0.1-tcp-22"], &global["10.0.0.1-tcp-22"]] {
        assert_eq!(doc["first_seen"], json!(stored(t0())), "{doc}");
        assert_eq!(doc["last_seen"], json!(stored(t0())), "{doc}");
        assert_eq!(doc["product"], "a", "{doc}");
        assert_eq!(
            doc["execution_id"],
            json!(s.execution().to_string()),
            "{doc}"
        );
    }
    assert_eq!(
        user["10.0.0.1-tcp-22"]["tags"],
        json!(["prod"]),
        "current tags kept"
    );
    let shared = &global["10.0.0.4-tcp-25"];
    assert_eq!(shared["product"], "o", "{shared}");
    assert_eq!(shared["last_seen"], json!(stored(&t0_plus(-1))), "{shared}");

    // Its documents and rows are gone; task A's are not.
    assert_eq!(task_docs(&s, "execution-endpoints", b.task_id), 0);
    assert_eq!(task_docs(&s, "facts-*", b.task_id), 0);
    assert_eq!(task_docs(&s, "execution-endpoints", s.run.task_id), a_docs);
    let e = b.execution_id;
    for (sql, what) in [
        ("SELECT count(*) FROM executions WHERE id = $1", "executions"),
        ("SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1", "receipts"),
        ("SELECT count(*) FROM scan_upload_stream WHERE execution_id = $1", "streams"),
        (
            "SELECT count(*) FROM scan_projection_outbox WHERE execution_id = $1 OR closing_execution_id = $1",
            "outbox rows",
        ),
    ] {
        assert_eq!(rows(&s, sql, e), 0, "{what} of the execution");
    }
    for (sql, what) in [
        ("SELECT count(*) FROM tasks WHERE id = $1", "task"),
        (
            "SELECT count(*) FROM task_targets WHERE task_id = $1",
            "targets",
        ),
    ] {
        assert_eq!(rows(&s, sql, b.task_id), 0, "{what}");
    }
    assert_eq!(
        rows(
            &s,
            "SELECT count(*) FROM scan_projection_outbox
              WHERE forget_task_id = $1 AND processed_at IS NOT NULL",
            b.task_id
        ),
        1,
        "the run is done and kept as its record"
    );
    assert_eq!(
        rows(
            &s,
            "SELECT count(*) FROM executions WHERE id = $1",
            s.execution()
        ),
        1
    );

    // A rebuild from what remains verifies equal to the live view, document by document.
    let live = (view(&s, "user"), view(&s, "global"));
    assert_eq!(rebuild(&s).current, 2);
    assert_eq!((view(&s, "user"), view(&s, "global")), live);

    // Nothing comes back: the deleted execution cannot be requeued, and the remaining
    // execution's and the deletion's own rows replayed from the start change nothing.
    admin(&s.db, &["outbox", "requeue", &e.to_string()]).fails_with("unknown execution");
    admin(&s.db, &["outbox", "requeue", &s.execution().to_string()]).ok();
    reopen(&s, "forget_task_id", &b.task_id);
    drain(&s, 50);
    assert_eq!((view(&s, "user"), view(&s, "global")), live);
    assert_eq!(rebuild(&s).current, 3);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn close_runs_are_applied_as_a_rebuild_applies_them_without_the_task() {
    let s = stack();
    let mut c = s.sql();
    // A sees 22 and 80 at t0. A scoped task S starts; then B sees 80 (after S's start), so
    // S's close run, which sees only 22, does not close 80.
    finish(
        &s,
        s.execution(),
        vec![
            seen("10.0.0.1", 22, t0(), "a"),
            seen("10.0.0.1", 80, t0(), "a"),
        ],
    );
    let closing = scoped_task(&s, &[("ip", "10.0.0.1")], "22,80");
    let b = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running");
    std::thread::sleep(std::time::Duration::from_millis(5));
    let now = chrono::Utc::now().to_rfc3339();
    finish(&s, b.execution_id, vec![seen("10.0.0.1", 80, &now, "b")]);
    drain(&s, 50);
    finish(
        &s,
        closing.execution_id,
        vec![seen("10.0.0.1", 22, &chrono::Utc::now().to_rfc3339(), "s")],
    );
    drain(&s, 50);
    assert_eq!(view(&s, "user")["10.0.0.1-tcp-80"]["status"], "open");

    // Without B, 80 was last seen at t0, before S started: S's close run applies.
    delete_task(&s, b.task_id);
    drain(&s, 50);
    let start = started_at(&s, closing.execution_id);
    for name in ["user", "global"] {
        let doc = &view(&s, name)["10.0.0.1-tcp-80"];
        assert_eq!(doc["status"], "closed", "{name}: {doc}");
        assert_eq!(doc["closed_at"], json!(start), "{name}: {doc}");
        assert_eq!(doc["closed_by"], json!(closing.execution_id.to_string()));
        assert_eq!(doc["last_seen"], json!(stored(t0())), "{name}: {doc}");
        assert_eq!(doc["product"], "a", "{name}: {doc}");
    }
    let live = (view(&s, "user"), view(&s, "global"));
    assert_eq!(rebuild(&s).current, 2);
    assert_eq!((view(&s, "user"), view(&s, "global")), live);

    // Without S, nothing closes 80 and 22 was last seen at t0 again.
    delete_task(&s, closing.task_id);
    drain(&s, 50);
    for name in ["user", "global"] {
        let docs = view(&s, name);
        let (ssh, web) = (&docs["10.0.0.1-tcp-22"], &docs["10.0.0.1-tcp-80"]);
        assert_eq!(web["status"], "open", "{name}: {web}");
        assert_eq!(web["closed_by"], Value::Null, "{name}: {web}");
        assert_eq!(ssh["last_seen"], json!(stored(t0())), "{name}: {ssh}");
        assert_eq!(ssh["product"], "a", "{name}: {ssh}");
    }
    let live = (view(&s, "user"), view(&s, "global"));
    assert_eq!(rebuild(&s).current, 3);
    assert_eq!((view(&s, "user"), view(&s, "global")), live);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_publication_that_lands_while_a_page_is_rewritten_is_kept() {
    use crate::support::emulator::FaultSpec;
    use crate::support::publish::worker;
    use std::time::Duration;

    let Some(s) = Stack::with_faults("forget-race", "port_scan", |cfg| {
        cfg.projection.workers = 0;
    }) else {
        return;
    };
    let mut c = s.sql();
    let b = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running");
    let later = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running");
    finish(&s, s.execution(), vec![seen("10.0.0.1", 22, t0(), "a")]);
    finish(
        &s,
        b.execution_id,
        vec![seen("10.0.0.1", 22, &t0_plus(1), "b")],
    );
    drain(&s, 20);
    delete_task(&s, b.task_id);

    // The run has read the endpoint's sources; its write waits. Meanwhile another
    // execution sees the endpoint and is published: its merge lands before the run's
    // delete, which the run's first write therefore takes out again.
    let hold = s.emulator().add_fault(FaultSpec::Pause {
        path: "/_bulk".into(),
        method: None,
        count: Some(1),
    });
    let forgetting = {
        let w = worker(&s);
        std::thread::spawn(move || w.tick().unwrap())
    };
    s.emulator().wait_paused(1, Duration::from_secs(10));
    finish(
        &s,
        later.execution_id,
        vec![seen("10.0.0.1", 22, &t0_plus(2), "c")],
    );
    worker(&s).tick().unwrap();
    assert_eq!(view(&s, "user")["10.0.0.1-tcp-22"]["product"], "c");
    s.emulator().remove_fault(hold);
    s.emulator().release_all();
    forgetting.join().unwrap();
    drain(&s, 20);

    // The run read its sources again after the write, found the new one, and wrote again.
    for name in ["user", "global"] {
        let doc = &view(&s, name)["10.0.0.1-tcp-22"];
        assert_eq!(doc["product"], "c", "{name}: {doc}");
        assert_eq!(doc["first_seen"], json!(stored(t0())), "{name}: {doc}");
        assert_eq!(
            doc["last_seen"],
            json!(stored(&t0_plus(2))),
            "{name}: {doc}"
        );
    }
    let live = (view(&s, "user"), view(&s, "global"));
    assert_eq!(rebuild(&s).current, 2);
    assert_eq!((view(&s, "user"), view(&s, "global")), live);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_rebuild_that_a_deletion_overlaps_does_not_switch() {
    let s = stack();
    finish(&s, s.execution(), vec![seen("10.0.0.1", 22, t0(), "a")]);
    drain(&s, 20);
    // A deletion run queued while the rebuild runs (its creation time after the rebuild's
    // start): the new version may hold what it deleted, so the aliases stay.
    s.sql()
        .execute(
            "INSERT INTO scan_projection_outbox (kind, owner_id, forget_task_id, created_at, processed_at)
             VALUES ('forget', $1, gen_random_uuid(), now() + interval '1 hour', now())",
            &[&s.owner.id],
        )
        .unwrap();
    let opts = scanstore::rebuild::Options {
        settle_timeout: std::time::Duration::from_secs(60),
        rounds: 5,
    };
    let refused = scanstore::rebuild::rebuild(s.server.app(), opts).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a deletion was queued while this ran"),
        "{refused}"
    );
    let current = scanstore::es::alias::current(&s.server.app().es, &s.prefix()).unwrap();
    assert_eq!(current.version, 1, "nothing switched");
}
