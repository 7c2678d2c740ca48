//! `task delete`: refused (nothing written) while an execution is running or a child task
//! hangs off the task; otherwise the task is marked and its deletion run queued in one
//! transaction, once however often it is asked, and its queued executions are withdrawn
//! from the scanners; a deletion racing a claim waits for it instead of deadlocking; usage
//! errors exit 2.

use super::outbox::{outbox_row, succeed};
use super::{admin, admin_without_url, count, queued_execution};
use crate::support::db;

/// (deleted_at set, forget rows of the task).
fn marked(t: &db::TestDb, task: &str) -> (bool, i64) {
    let r = t
        .connect()
        .query_one(
            "SELECT deleted_at IS NOT NULL,
                    (SELECT count(*) FROM scan_projection_outbox
                      WHERE kind = 'forget' AND forget_task_id = t.id)
               FROM tasks t WHERE id = $1::text::uuid",
            &[&task],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_task_is_deleted_once_its_executions_have_ended() {
    let t = db::fresh();
    let (o, task, e) = queued_execution(&t, "port_scan");
    let mut c = t.connect();

    c.execute(
        "UPDATE executions SET status = 'running', started_at = now() WHERE id = $1::text::uuid",
        &[&e],
    )
    .unwrap();
    admin(&t, &["task", "delete", &task]).fails_with("1 running execution(s)");
    assert_eq!(marked(&t, &task), (false, 0), "a refusal writes nothing");

    // A child task generated from its DNS answers would go with it (the cascade) while
    // keeping its documents: refused until the child is deleted.
    succeed(&mut c, &e);
    outbox_row(&mut c, &e, "processed_at = now()");
    let child: uuid::Uuid = c
        .query_one(
            "INSERT INTO tasks (owner_id, kind, parent_task_id, source_execution_id)
             VALUES ($1::text::uuid, 'port_scan', $2::text::uuid, $3::text::uuid) RETURNING id",
            &[&o, &task, &e],
        )
        .unwrap()
        .get(0);
    admin(&t, &["task", "delete", &task]).fails_with("1 child task(s)");
    assert_eq!(marked(&t, &task), (false, 0));
    let r = admin(&t, &["task", "delete", &child.to_string()]).ok();
    assert_eq!(r.get("executions"), "0");
    // A child being deleted still hangs off it until its run has removed it.
    admin(&t, &["task", "delete", &task]).fails_with("1 child task(s)");
    c.execute("DELETE FROM tasks WHERE id = $1", &[&child])
        .unwrap();

    let tasks_before = count(&t, "tasks");
    let r = admin(&t, &["task", "delete", &task]).ok();
    assert!(
        r.stdout.starts_with("task deleted (deletion queued)\n"),
        "{r}"
    );
    assert_eq!(r.get("task_id"), task);
    assert_eq!(r.get("owner_id"), o);
    assert_eq!(r.get("executions"), "1");
    assert_eq!(r.get("queued"), "0");
    let outbox_id = r.get("outbox_id").to_string();
    assert_eq!(marked(&t, &task), (true, 1));
    let (kind, owner): (String, uuid::Uuid) = {
        let row = c
            .query_one(
                "SELECT kind, owner_id::text::uuid FROM scan_projection_outbox WHERE id = $1::text::bigint",
                &[&outbox_id],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((kind.as_str(), owner.to_string()), ("forget", o.clone()));
    assert_eq!(
        count(&t, "tasks"),
        tasks_before,
        "the row stays until the run"
    );

    // Asked again: the same run, nothing queued twice.
    let again = admin(&t, &["task", "delete", &task]).ok();
    assert!(
        again.stdout.starts_with("task deletion already queued\n"),
        "{again}"
    );
    assert_eq!(again.get("outbox_id"), outbox_id);
    assert_eq!(marked(&t, &task), (true, 1));

    // The backlog names the run; its execution is not published again.
    let backlog = admin(&t, &["backlog"]).ok();
    assert!(backlog.stdout.contains("| forget"), "{backlog}");
    assert!(backlog.stdout.contains(&task), "{backlog}");
    admin(&t, &["outbox", "requeue", &e]).fails_with("which is being deleted");
}

/// A queued execution has uploaded nothing, or (requeued after its lease lapsed) has only
/// what the deletion run takes out anyway: it goes with its task, and from the deletion on
/// no scanner is handed it, whether it was assigned to one or queued for any of the owner's.
#[test]
#[ignore = "needs PostgreSQL"]
fn queued_executions_go_with_the_task_and_no_scanner_claims_them() {
    use crate::support::{scan, server};

    let t = db::fresh();
    let o = super::owner(&t, "alice");
    let sc = admin(&t, &["scanner", "create", "edge-1", "--owner", &o]).ok();
    let create = |scanner: Option<&str>| {
        let mut args = vec!["task", "create", "--owner", &o, "--kind", "port_scan"];
        args.extend(["--target", "198.51.100.0/24"]);
        args.extend(scanner.map(|s| ["--scanner", s]).into_iter().flatten());
        let r = admin(&t, &args).ok();
        (
            r.get("task_id").to_string(),
            r.get("execution_id").to_string(),
        )
    };
    // A scanner of no owner in particular takes only what is assigned to it.
    let unrestricted = admin(&t, &["scanner", "create", "edge-2"]).ok();
    let (assigned, assigned_execution) = create(Some(sc.get("scanner_id")));
    let (anyone, anyone_execution) = create(None);
    let (theirs, theirs_execution) = create(Some(unrestricted.get("scanner_id")));
    for task in [&assigned, &anyone, &theirs] {
        let r = admin(&t, &["task", "delete", task]).ok();
        assert!(
            r.stdout.starts_with("task deleted (deletion queued)\n"),
            "{r}"
        );
        assert_eq!((r.get("executions"), r.get("queued")), ("1", "1"));
        assert_eq!(marked(&t, task), (true, 1));
    }
    // No Elasticsearch is needed to claim: nothing listens on port 9.
    let srv = server::TestServer::start(server::config(&t.url, "http://127.0.0.1:9"));
    for scanner in [&sc, &unrestricted] {
        let got = scan::claim(&srv.base, scanner.get("token"));
        assert_eq!(got.status, 204, "{}", got.body);
    }
    srv.shutdown();
    // The deletion run removes them with the task; until then they stay queued, unclaimed.
    let queued: i64 = t
        .connect()
        .query_one(
            "SELECT count(*) FROM executions
              WHERE id::text = ANY($1) AND status = 'queued'",
            &[&vec![
                assigned_execution,
                anyone_execution,
                theirs_execution,
            ]],
        )
        .unwrap()
        .get(0);
    assert_eq!(queued, 3);
}

/// A claim locks its execution, then its task; a deletion the task's executions, then the
/// task. A deletion arriving while a claim holds only the execution (a trigger holds the
/// claim there for a second) waits for the claim and is then refused, the execution being
/// running: neither deadlocks, as they would if the deletion took the task first.
#[test]
#[ignore = "needs PostgreSQL"]
fn a_deletion_racing_a_claim_waits_for_it_instead_of_deadlocking() {
    use crate::support::{scan, server};
    use std::time::Duration;

    let t = db::fresh();
    let o = super::owner(&t, "alice");
    let sc = admin(&t, &["scanner", "create", "edge-1", "--owner", &o]).ok();
    let r = admin(
        &t,
        &[
            "task",
            "create",
            "--owner",
            &o,
            "--kind",
            "port_scan",
            "--target",
            "198.51.100.0/24",
            "--scanner",
            sc.get("scanner_id"),
        ],
    )
    .ok();
    let (task, execution) = (
        r.get("task_id").to_string(),
        r.get("execution_id").to_string(),
    );
    t.connect()
        .batch_execute(
            "CREATE FUNCTION hold_claim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
             CREATE TRIGGER hold_claim BEFORE UPDATE ON executions FOR EACH ROW
               WHEN (OLD.status = 'queued' AND NEW.status = 'running')
               EXECUTE FUNCTION hold_claim();",
        )
        .unwrap();
    // No Elasticsearch is needed to claim: nothing listens on port 9.
    let srv = server::TestServer::start(server::config(&t.url, "http://127.0.0.1:9"));
    let (base, token) = (srv.base.clone(), sc.get("token").to_string());
    let claim = std::thread::spawn(move || scan::claim(&base, &token));
    std::thread::sleep(Duration::from_millis(300));
    admin(&t, &["task", "delete", &task]).fails_with("1 running execution(s)");
    let got = claim.join().unwrap();
    srv.shutdown();
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["execution_id"], execution.as_str(), "{}", got.body);
    assert_eq!(marked(&t, &task), (false, 0), "a refusal writes nothing");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn task_delete_usage_errors() {
    let cases: [(&[&str], &str); 4] = [
        (&["task", "delete"], "missing TASK_ID"),
        (
            &["task", "delete", "nope"],
            "invalid task id 'nope': not a UUID",
        ),
        (
            &[
                "task",
                "delete",
                "00000000-0000-4000-8000-000000000001",
                "extra",
            ],
            "unexpected argument 'extra'",
        ),
        (
            &["task", "delete", "--force", "x"],
            "unknown option --force",
        ),
    ];
    for (args, needle) in cases {
        let r = admin_without_url(args);
        assert_eq!(r.code, Some(2), "{r}");
        assert!(r.stderr.contains(needle), "{needle}\n{r}");
        assert!(
            r.stderr
                .contains("Try 'scanstore-admin task delete --help'"),
            "{r}"
        );
    }
    let help = admin_without_url(&["task", "delete", "--help"]).ok();
    assert!(
        help.stdout.contains("scanstore-admin task delete TASK_ID"),
        "{help}"
    );
    let t = db::fresh();
    admin(
        &t,
        &["task", "delete", "00000000-0000-4000-8000-000000000001"],
    )
    .fails_with("unknown task 00000000-0000-4000-8000-000000000001");
}
