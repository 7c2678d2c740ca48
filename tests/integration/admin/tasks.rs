//! `task create`: one transaction of task, canonical targets and (with `--scanner`) one
//! queued execution; any bad input leaves nothing behind.

use uuid::Uuid;

use super::{admin, count, owner, scanner};
use crate::support::db;

#[test]
#[ignore = "needs PostgreSQL"]
fn task_with_scanner_gets_one_queued_assigned_execution_and_canonical_targets() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let s = scanner(&t, "sc", Some(&o));
    let r = admin(
        &t,
        &[
            "task",
            "create",
            "--owner",
            &o,
            "--kind",
            "mixed",
            "--target",
            "10.0.0.5/8",
            "--target",
            "2001:DB8:0:0::1",
            "--target",
            "WWW.Example.COM.",
            "--target",
            "192.0.2.7",
            "--target",
            "192.0.2.7",
            "--target",
            "::ffff:198.51.100.9",
            "--target",
            "::FFFF:198.51.100.0/120",
            "--target",
            "007.example.com",
            "--scanner",
            &s,
            "--tag",
            "prod",
            "--tag",
            "dmz",
            "--tag",
            "prod",
        ],
    )
    .ok();
    let task_id = r.uuid("task_id");
    let execution_id = r.uuid("execution_id");
    assert_eq!(
        r.all("target"),
        [
            "cidr:10.0.0.0/8",
            "cidr:198.51.100.0/24",
            "domain:007.example.com",
            "domain:www.example.com",
            "ip:192.0.2.7",
            "ip:198.51.100.9",
            "ip:2001:db8::1"
        ]
    );

    let mut c = t.connect();
    let task = c
        .query_one(
            "SELECT owner_id, kind, status, tags, executions_total, executions_succeeded
               FROM tasks WHERE id = $1",
            &[&task_id],
        )
        .unwrap();
    assert_eq!(task.get::<_, Uuid>(0).to_string(), o);
    assert_eq!(task.get::<_, String>(1), "mixed");
    assert_eq!(task.get::<_, String>(2), "pending");
    assert_eq!(task.get::<_, Vec<String>>(3), ["prod", "dmz"]);
    assert_eq!(task.get::<_, i64>(4), 1);
    assert_eq!(task.get::<_, i64>(5), 0);

    let targets: Vec<(String, String)> = c
        .query(
            "SELECT kind, value FROM task_targets WHERE task_id = $1 ORDER BY kind, value",
            &[&task_id],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let want = [
        ("cidr", "10.0.0.0/8"),
        ("cidr", "198.51.100.0/24"),
        ("domain", "007.example.com"),
        ("domain", "www.example.com"),
        ("ip", "192.0.2.7"),
        ("ip", "198.51.100.9"),
        ("ip", "2001:db8::1"),
    ];
    assert_eq!(targets, want.map(|(k, v)| (k.to_string(), v.to_string())));

    let exec = c
        .query_one(
            "SELECT task_id, scanner_id, status, started_at IS NULL FROM executions WHERE id = $1",
            &[&execution_id],
        )
        .unwrap();
    assert_eq!(exec.get::<_, Uuid>(0), task_id);
    assert_eq!(exec.get::<_, Uuid>(1).to_string(), s);
    assert_eq!(exec.get::<_, String>(2), "queued");
    assert!(exec.get::<_, bool>(3));
    assert_eq!(count(&t, "executions"), 1);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn task_without_scanner_gets_an_execution_queued_for_any_scanner_of_its_owner() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let r = admin(
        &t,
        &[
            "task",
            "create",
            "--owner",
            &o,
            "--kind",
            "dns",
            "--target",
            "example.org",
        ],
    )
    .ok();
    let execution = r.uuid("execution_id");
    let row = t
        .connect()
        .query_one(
            "SELECT t.status, t.executions_total, t.tags, e.status, e.scanner_id, e.any_scanner
               FROM tasks t JOIN executions e ON e.task_id = t.id WHERE e.id = $1",
            &[&execution],
        )
        .unwrap();
    let (status, total, tags): (String, i64, Vec<String>) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((status.as_str(), total), ("pending", 1));
    assert!(tags.is_empty());
    let (e_status, e_scanner, any): (String, Option<uuid::Uuid>, bool) =
        (row.get(3), row.get(4), row.get(5));
    assert_eq!((e_status.as_str(), e_scanner, any), ("queued", None, true));
    assert_eq!(count(&t, "executions"), 1);
    let shown = admin(&t, &["execution", "show", &execution.to_string()]).ok();
    assert_eq!(shown.all("scanner_id"), [""]);
    assert_eq!(shown.all("claims"), ["0"]);
}

/// Every bad target fails the whole command, names the value, and writes nothing.
#[test]
#[ignore = "needs PostgreSQL"]
fn bad_target_fails_naming_it_and_leaves_nothing() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let s = scanner(&t, "sc", None);
    for bad in [
        "10.0.0.0/33",
        "10.0.0.256",
        "300.1.2.3/8",
        "10.1",
        "010.0.0.1",
        "10.0.0.01",
        "10.00.0.0/16",
        "::ffff:010.0.0.1",
        "exa mple.com",
        "-bad.example",
        "a..b",
        "example.com/x",
        "ünicode.example",
        "x'); DROP TABLE tasks; --",
    ] {
        admin(
            &t,
            &[
                "task",
                "create",
                "--owner",
                &o,
                "--kind",
                "port_scan",
                "--target",
                "192.0.2.1",
                "--target",
                bad,
                "--scanner",
                &s,
            ],
        )
        .fails_with(&format!("invalid target '{}'", bad.replace('\'', "''")));
    }
    assert_eq!(count(&t, "tasks"), 0);
    assert_eq!(count(&t, "task_targets"), 0);
    assert_eq!(count(&t, "executions"), 0);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn task_create_refuses_bad_owner_scanner_kind_and_missing_args() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let other = owner(&t, "bob");
    let bobs = scanner(&t, "bobs", Some(&other));
    let nobody = Uuid::new_v4().to_string();
    let base = |extra: &[&str]| {
        let mut v: Vec<String> = ["task", "create", "--kind", "mixed", "--target", "192.0.2.1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        admin(&t, &refs)
    };
    run(base(&["--owner", &nobody])).fails_with(&format!("unknown owner {nobody}"));
    run(base(&["--owner", "1234"])).fails_with("invalid owner id '1234': not a UUID");
    run(base(&[])).fails_with("missing --owner");
    run(base(&["--owner", &o, "--scanner", &nobody]))
        .fails_with(&format!("unknown scanner {nobody}"));
    run(base(&["--owner", &o, "--scanner", "zz"])).fails_with("invalid scanner id 'zz'");
    run(base(&["--owner", &o, "--scanner", &bobs]))
        .fails_with(&format!("scanner {bobs} is restricted to owner {other}"));
    run(base(&["--owner", &o, "--tag", ""])).fails_with("tag must not be empty");
    run(base(&["--owner", &o, "extra"])).fails_with("unexpected argument 'extra'");
    admin(
        &t,
        &[
            "task",
            "create",
            "--owner",
            &o,
            "--kind",
            "ping",
            "--target",
            "192.0.2.1",
        ],
    )
    .fails_with("invalid --kind 'ping'");
    admin(
        &t,
        &["task", "create", "--owner", &o, "--target", "192.0.2.1"],
    )
    .fails_with("missing --kind");
    admin(&t, &["task", "create", "--owner", &o, "--kind", "dns"]).fails_with("missing --target");
    admin(&t, &["task", "create", "--owner", &o, "--kind"])
        .fails_with("option --kind needs a value");
    admin(&t, &["task", "remove"]).fails_with("unknown subcommand 'task remove'");
    admin(&t, &["task"]).fails_with("missing subcommand");
    assert_eq!(count(&t, "tasks"), 0);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn disabled_scanner_is_refused() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let s = scanner(&t, "sc", None);
    t.connect()
        .execute(
            "UPDATE scanners SET disabled = true WHERE id = $1::text::uuid",
            &[&s],
        )
        .unwrap();
    admin(
        &t,
        &[
            "task",
            "create",
            "--owner",
            &o,
            "--kind",
            "mixed",
            "--target",
            "192.0.2.1",
            "--scanner",
            &s,
        ],
    )
    .fails_with("is disabled");
    assert_eq!(count(&t, "tasks"), 0);
}

/// End to end: the scanner token printed by `scanner create` authenticates against a real
/// scanstore server, and the claim hands out the execution `task create` queued, with the
/// canonical targets and the tags.
#[test]
#[ignore = "needs PostgreSQL"]
fn server_hands_the_queued_execution_to_the_admin_created_scanner() {
    use crate::support::{scan, server};

    let t = db::fresh();
    let o = owner(&t, "alice");
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
            "198.51.100.77/24",
            "--scanner",
            sc.get("scanner_id"),
            "--tag",
            "edge",
            "--ports",
            "U:53,T:1-1000",
        ],
    )
    .ok();
    // No Elasticsearch is needed to claim: nothing listens on port 9.
    let srv = server::TestServer::start(server::config(&t.url, "http://127.0.0.1:9"));
    let got = scan::claim(&srv.base, sc.get("token"));
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["execution_id"], r.get("execution_id"));
    assert_eq!(got.body["task_id"], r.get("task_id"));
    assert_eq!(got.body["kind"], "port_scan");
    assert_eq!(got.body["tags"], serde_json::json!(["edge"]));
    assert_eq!(
        got.body["targets"],
        serde_json::json!([{"kind": "cidr", "value": "198.51.100.0/24"}])
    );
    assert_eq!(got.body["ports"], "U:53,T:1-1000");
    assert_eq!(scan::claim(&srv.base, sc.get("token")).status, 204);
    // The owner token printed by `owner create` is not a scanner token.
    let owner_token = admin(&t, &["owner", "create", "bob"])
        .ok()
        .get("token")
        .to_string();
    assert_eq!(scan::claim(&srv.base, &owner_token).status, 401);
    srv.shutdown();
}

#[test]
#[ignore = "needs PostgreSQL"]
fn task_create_takes_a_port_scope_in_nmap_syntax_and_refuses_a_bad_one() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let create = |extra: &[&str]| {
        let mut args = vec!["task", "create", "--owner", &o, "--kind", "port_scan"];
        args.extend(["--target", "192.0.2.0/24"]);
        args.extend(extra);
        admin(&t, &args)
    };
    for ports in ["22,80,443", "1-1024", "U:53,T:1-1000", "0,65535", "S:2905"] {
        let r = create(&["--ports", ports]).ok();
        assert_eq!(r.get("ports"), ports);
        let stored: Option<String> = t
            .connect()
            .query_one(
                "SELECT ports FROM tasks WHERE id = $1",
                &[&r.uuid("task_id")],
            )
            .unwrap()
            .get(0);
        assert_eq!(stored.as_deref(), Some(ports));
    }
    let before = count(&t, "tasks");
    let too_long = "1,".repeat(600);
    for bad in [
        "65536", "1024-1", "-100", "1-", "http", "22,,80", "X:22", "22 80", "1-2-3", &too_long,
    ] {
        create(&["--ports", bad]).fails_with("nmap port list");
    }
    assert_eq!(
        count(&t, "tasks"),
        before,
        "a refused scope creates nothing"
    );
    // Without --ports the task has no scope.
    assert_eq!(create(&[]).ok().all("ports").len(), 0);
}
