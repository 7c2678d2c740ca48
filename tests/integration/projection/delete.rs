//! Deletion with tombstones (`scanstore-admin asset delete`): the owner's documents go, a
//! replayed page, a re-published execution or a rebuild does not bring them back, a newer
//! observation does (with its own `first_seen`), and the global view is left as it was.

use serde_json::Value;

use crate::support::admin::admin;
use crate::support::publish::{assets, drain, rebuild, reopen};
use crate::support::scan::{self, endpoint, stored, t0, Batch};
use crate::support::stack::Stack;
use uuid::Uuid;

fn owner_ids(s: &Stack) -> Vec<String> {
    let prefix = format!("{}-", s.owner.id.simple());
    assets(s, "user")
        .into_iter()
        .map(|(id, _)| id.trim_start_matches(&prefix).to_string())
        .collect()
}

fn delete(s: &Stack, args: &[&str]) -> crate::support::admin::Run {
    let owner = s.owner.id.to_string();
    let mut all = vec!["asset", "delete", "--owner", owner.as_str()];
    all.extend_from_slice(args);
    admin(&s.db, &all)
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_deletion_stays_deleted_until_a_newer_observation() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
    });
    let b = Batch::final_(
        Uuid::new_v4(),
        0,
        vec![
            endpoint("10.0.0.1", 22, t0()),
            endpoint("10.0.0.1", 80, t0()),
            endpoint("10.0.0.2", 443, t0()),
            endpoint("10.0.1.9", 443, t0()),
        ],
    );
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b).status,
        200
    );
    drain(&s, 20);
    let global_before = assets(&s, "global");

    // One endpoint, then a network.
    let r = delete(&s, &["10.0.0.1", "--port", "80", "--transport", "tcp"]).ok();
    assert_eq!(r.get("target"), "10.0.0.1/32");
    let r = delete(&s, &["10.0.0.0/24"]).ok();
    assert!(r.get("tombstone_id").parse::<i64>().is_ok(), "{r}");
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.1.9-tcp-443"]);
    assert_eq!(
        assets(&s, "global"),
        global_before,
        "the global view is kept"
    );

    // The execution's pages replayed from the start: still deleted.
    reopen(&s, "execution_id", &s.execution());
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.1.9-tcp-443"]);

    // A rebuild from the execution projection verifies against the live view and keeps
    // the deletion.
    rebuild(&s);
    assert_eq!(owner_ids(&s), ["10.0.1.9-tcp-443"]);

    // A rescan after the deletion: back, first seen now.
    let again: Uuid = s
        .sql()
        .query_one(
            "INSERT INTO executions (task_id, scanner_id, status, started_at)
             VALUES ($1, $2, 'running', now()) RETURNING id",
            &[&s.run.task_id, &s.scanner.id],
        )
        .unwrap()
        .get(0);
    let now = chrono::Utc::now().to_rfc3339();
    let b = Batch::final_(Uuid::new_v4(), 0, vec![endpoint("10.0.0.1", 22, &now)]);
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, again, &b).status,
        200
    );
    drain(&s, 20);
    assert_eq!(owner_ids(&s), ["10.0.0.1-tcp-22", "10.0.1.9-tcp-443"]);
    let back: Value = assets(&s, "user")[0].1.clone();
    assert_eq!(back["first_seen"], serde_json::json!(stored(&now)));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn deletions_are_refused_for_names_and_half_endpoints() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
    });
    delete(&s, &["example.com"]).fails_with("is a DNS name");
    delete(&s, &["10.0.0.1", "--port", "80"]).fails_with("go together");
    delete(&s, &["10.0.0.1", "--port", "80", "--transport", "icmp"]).fails_with("tcp, udp or sctp");
    let rows: i64 = s
        .sql()
        .query_one("SELECT count(*) FROM asset_tombstones", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "nothing written");
}
