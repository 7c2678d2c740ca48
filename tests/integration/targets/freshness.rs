//! Freshness of search targets after a final: IP, CIDR (v4/v6) and domain keys, order of
//! executions, DNS parents waiting for their children, the GiST plans, and a task's long
//! history read through its partial indexes.

use chrono::{DateTime, Utc};
use postgres::Client;
use uuid::Uuid;

use crate::support::factory::{self, TaskRun};
use crate::support::scan::t0;
use crate::support::scan::{self, dns, endpoint, Batch};
use crate::support::stack::Stack;

fn target(c: &mut Client, owner: Uuid, kind: &str, key: &str) {
    c.execute(
        "INSERT INTO search_targets (owner_id, kind, key) VALUES ($1, $2, $3)",
        &[&owner, &kind, &key],
    )
    .unwrap();
}

fn scanned(c: &mut Client, owner: Uuid, kind: &str, key: &str) -> Option<(DateTime<Utc>, Uuid)> {
    let r = c
        .query_one(
            "SELECT last_scanned_at, last_execution_id FROM search_targets WHERE owner_id = $1 AND kind = $2 AND key = $3",
            &[&owner, &kind, &key],
        )
        .unwrap();
    r.get::<_, Option<DateTime<Utc>>>(0).map(|t| (t, r.get(1)))
}

/// A running task of `kind` with the given task targets.
fn task_with_targets(c: &mut Client, s: &Stack, kind: &str, targets: &[(&str, &str)]) -> TaskRun {
    factory::task_with_targets(c, s.owner.id, s.scanner.id, kind, "running", targets)
}

fn finish(s: &Stack, run: &TaskRun, observations: Vec<serde_json::Value>) {
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        run.execution_id,
        &Batch::final_(Uuid::new_v4(), 0, observations),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn ip_cidr_and_domain_targets_are_refreshed_per_family() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let o = s.owner.id;
    for (k, v) in [
        ("ip", "203.0.113.7"),
        ("ip", "203.0.113.8"),
        ("ip", "198.51.100.7"),
        ("ip", "2001:db8::7"),
        ("cidr", "203.0.113.0/25"),
        ("cidr", "203.0.113.128/25"),
        ("cidr", "198.51.100.0/24"),
        ("cidr", "2001:db8::/48"),
        ("cidr", "2001:db8:1::/48"),
        ("domain", "www.example.com"),
        ("domain", "mail.example.com"),
    ] {
        target(&mut c, o, k, v);
    }
    // Another owner's identical target is never touched.
    let other = factory::owner(&mut c, false);
    target(&mut c, other.id, "cidr", "203.0.113.0/25");

    let v4 = task_with_targets(
        &mut c,
        &s,
        "port_scan",
        &[("cidr", "203.0.113.0/24"), ("ip", "203.0.113.7")],
    );
    finish(&s, &v4, vec![endpoint("203.0.113.9", 443, t0())]);
    assert!(scanned(&mut c, o, "ip", "203.0.113.7").is_some());
    assert!(
        scanned(&mut c, o, "ip", "203.0.113.8").is_some(),
        "a single IP inside a scanned network"
    );
    assert!(scanned(&mut c, o, "ip", "198.51.100.7").is_none());
    assert!(scanned(&mut c, o, "cidr", "203.0.113.0/25").is_some());
    assert!(scanned(&mut c, o, "cidr", "203.0.113.128/25").is_some());
    assert!(scanned(&mut c, o, "cidr", "198.51.100.0/24").is_none());
    assert!(
        scanned(&mut c, o, "cidr", "2001:db8::/48").is_none(),
        "IPv4 never matches IPv6"
    );
    assert!(
        scanned(&mut c, other.id, "cidr", "203.0.113.0/25").is_none(),
        "another owner's target"
    );

    let v6 = task_with_targets(&mut c, &s, "port_scan", &[("cidr", "2001:db8::/47")]);
    assert!(scanned(&mut c, o, "ip", "2001:db8::7").is_none());
    finish(&s, &v6, vec![]);
    assert!(scanned(&mut c, o, "ip", "2001:db8::7").is_some());
    assert!(scanned(&mut c, o, "cidr", "2001:db8::/48").is_some());
    assert!(scanned(&mut c, o, "cidr", "2001:db8:1::/48").is_some());

    let names = task_with_targets(&mut c, &s, "dns", &[("domain", "www.example.com")]);
    finish(&s, &names, vec![dns("www.example.com", "192.0.2.5", t0())]);
    // The DNS task waits for the port scan generated from its answer.
    assert!(scanned(&mut c, o, "domain", "www.example.com").is_none());
    assert!(scanned(&mut c, o, "domain", "mail.example.com").is_none());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_older_scan_never_overwrites_a_newer_time() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    target(&mut c, s.owner.id, "ip", "192.0.2.1");
    let older = task_with_targets(&mut c, &s, "port_scan", &[("ip", "192.0.2.1")]);
    let newer = task_with_targets(&mut c, &s, "port_scan", &[("ip", "192.0.2.1")]);
    c.execute(
        "UPDATE executions SET started_at = now() - interval '1 hour' WHERE id = $1",
        &[&older.execution_id],
    )
    .unwrap();
    // The newer scan finishes first, the older one last.
    finish(&s, &newer, vec![]);
    let (t_new, e_new) = scanned(&mut c, s.owner.id, "ip", "192.0.2.1").unwrap();
    assert_eq!(e_new, newer.execution_id);
    finish(&s, &older, vec![]);
    let (t, e) = scanned(&mut c, s.owner.id, "ip", "192.0.2.1").unwrap();
    assert_eq!((t, e), (t_new, newer.execution_id));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_dns_parent_waits_for_all_children_then_refreshes_its_domains() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    target(&mut c, s.owner.id, "domain", "example.org");
    target(&mut c, s.owner.id, "ip", "192.0.2.10");
    let parent = task_with_targets(&mut c, &s, "dns", &[("domain", "example.org")]);
    let answers = vec![
        dns("example.org", "192.0.2.10", t0()),
        dns("example.org", "192.0.2.11", t0()),
        dns("www.example.org", "192.0.2.10", t0()),
    ];
    let up = Uuid::new_v4();
    let fin = Batch::final_(up, 0, answers);
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, parent.execution_id, &fin).status,
        200
    );
    // A retried final generates nothing twice.
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, parent.execution_id, &fin).body["saved"],
        0
    );
    let children: Vec<(Uuid, Vec<String>)> = c
        .query(
            "SELECT t.id, array_agg(tt.value ORDER BY tt.value) FROM tasks t
               JOIN task_targets tt ON tt.task_id = t.id
              WHERE t.parent_task_id = $1 GROUP BY t.id",
            &[&parent.task_id],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(children.len(), 1);
    assert_eq!(
        children[0].1,
        vec!["192.0.2.10".to_string(), "192.0.2.11".to_string()]
    );
    let status = |c: &mut Client, t: Uuid| -> String {
        c.query_one("SELECT status FROM tasks WHERE id = $1", &[&t])
            .unwrap()
            .get(0)
    };
    assert_eq!(status(&mut c, parent.task_id), "running");
    assert!(scanned(&mut c, s.owner.id, "domain", "example.org").is_none());

    // The scanner claims and finishes the generated port scan.
    let claimed = scan::claim(s.base(), &s.scanner.token);
    assert_eq!(claimed.status, 200);
    let child_exec: Uuid = claimed.body["execution_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        child_exec,
        &Batch::final_(Uuid::new_v4(), 0, vec![endpoint("192.0.2.10", 443, t0())]),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(status(&mut c, children[0].0), "succeeded");
    assert_eq!(status(&mut c, parent.task_id), "succeeded");
    assert!(scanned(&mut c, s.owner.id, "domain", "example.org").is_some());
    assert!(scanned(&mut c, s.owner.id, "ip", "192.0.2.10").is_some());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn the_freshness_statements_use_their_gist_indexes_on_200k_targets() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    c.execute(
        "INSERT INTO search_targets (owner_id, kind, key)
         SELECT $1::uuid, 'cidr', host('10.0.0.0'::inet + (i * 256)) || '/24' FROM generate_series(0, 99999) AS i
         UNION ALL
         SELECT $1::uuid, 'ip', host('10.0.0.7'::inet + (i * 256)) FROM generate_series(0, 99999) AS i",
        &[&s.owner.id],
    )
    .unwrap();
    let n: i64 = c
        .query_one("SELECT count(*) FROM search_targets", &[])
        .unwrap()
        .get(0);
    assert!(n >= 200_000, "{n} targets");
    c.batch_execute("ANALYZE search_targets").unwrap();
    let run = task_with_targets(&mut c, &s, "port_scan", &[("cidr", "10.1.0.0/16")]);
    for (sql, index) in [
        (
            scanstore::upload::freshness::FRESHNESS_CIDR,
            "search_targets_cidr_gist",
        ),
        (
            scanstore::upload::freshness::FRESHNESS_IP,
            "search_targets_ip_gist",
        ),
    ] {
        let plan: Vec<String> = c
            .query(
                &format!(
                    "EXPLAIN {}",
                    sql.replace("$1", "$1::uuid")
                        .replace("$2", "$2::uuid")
                        .replace("$3", "$3::timestamptz")
                        .replace("$4", "$4::uuid")
                ),
                &[&s.owner.id, &run.task_id, &Utc::now(), &run.execution_id],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let text = plan.join("\n");
        assert!(
            text.contains(index),
            "the freshness statement does not use {index}:\n{text}"
        );
    }
    finish(&s, &run, vec![]);
    let refreshed: Vec<(String, i64)> = c
        .query(
            "SELECT kind, count(*) FROM search_targets WHERE last_scanned_at IS NOT NULL
              GROUP BY kind ORDER BY kind",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        refreshed,
        [("cidr".to_string(), 256), ("ip".to_string(), 256)],
        "every /24 and every single IP of 10.1.0.0/16, and nothing else"
    );
}

/// The plan of `sql` (one uuid parameter) as text.
fn plan(c: &mut Client, sql: &str, id: Uuid) -> String {
    c.query(
        &format!("EXPLAIN {}", sql.replace("$1", "$1::uuid")),
        &[&id],
    )
    .unwrap()
    .iter()
    .map(|r| r.get::<_, String>(0))
    .collect::<Vec<_>>()
    .join("\n")
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_final_of_a_task_with_100k_executions_reads_its_partial_indexes_not_its_history() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let o = s.owner.id;
    target(&mut c, o, "ip", "203.0.113.7");
    let run = task_with_targets(&mut c, &s, "port_scan", &[("ip", "203.0.113.7")]);
    // The task's history: 100 000 succeeded executions started before this one, and one
    // that started after it (the task's scan time once this one is done too).
    c.execute(
        "INSERT INTO executions (task_id, scanner_id, status, started_at, finished_at)
         SELECT $1, $2, 'succeeded', now() - interval '1 day' - g * interval '1 s', now()
           FROM generate_series(1, 100000) AS g",
        &[&run.task_id, &s.scanner.id],
    )
    .unwrap();
    let newest: Uuid = c
        .query_one(
            "INSERT INTO executions (task_id, scanner_id, status, started_at, finished_at)
             VALUES ($1, $2, 'succeeded', now() + interval '1 minute', now()) RETURNING id",
            &[&run.task_id, &s.scanner.id],
        )
        .unwrap()
        .get(0);
    c.batch_execute("VACUUM ANALYZE executions").unwrap();
    for (sql, index) in [
        (
            scanstore::upload::freshness::TASK_SETTLED,
            "executions_task_unsettled_idx",
        ),
        (
            scanstore::upload::freshness::SCAN_TIME,
            "executions_task_scan_time_idx",
        ),
    ] {
        let text = plan(&mut c, sql, run.task_id);
        assert!(text.contains(index), "does not use {index}:\n{text}");
        assert!(!text.contains("Seq Scan on executions"), "{text}");
    }

    finish(&s, &run, vec![endpoint("203.0.113.7", 443, t0())]);
    let (at, by) = scanned(&mut c, o, "ip", "203.0.113.7").expect("refreshed");
    assert_eq!(
        by, newest,
        "the newest start among the succeeded executions"
    );
    let started: DateTime<Utc> = c
        .query_one(
            "SELECT started_at FROM executions WHERE id = $1",
            &[&newest],
        )
        .unwrap()
        .get(0);
    assert_eq!(at, started);
    let status: String = c
        .query_one("SELECT status FROM tasks WHERE id = $1", &[&run.task_id])
        .unwrap()
        .get(0);
    assert_eq!(status, "succeeded");
}
