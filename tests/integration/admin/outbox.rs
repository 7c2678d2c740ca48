//! `outbox retry` and `outbox requeue`: the queue as the operator repairs it. A live lease
//! is never stolen; history survives a retry; a requeue starts the publication over.

use postgres::Client;
use uuid::Uuid;

use super::{admin, count, queued_execution};
use crate::support::db;

/// Marks the execution succeeded, as transaction B of its final would.
pub(super) fn succeed(c: &mut Client, execution_id: &str) {
    c.execute(
        "UPDATE executions SET status = 'succeeded', started_at = now(), finished_at = now(),
                endpoint_count = 3, observation_count = 3
          WHERE id = $1::text::uuid",
        &[&execution_id],
    )
    .unwrap();
}

/// An execution outbox row in a given state; returns its id.
pub(super) fn outbox_row(c: &mut Client, execution_id: &str, set: &str) -> i64 {
    let id: i64 = c
        .query_one(
            "INSERT INTO scan_projection_outbox (kind, execution_id, owner_id)
             SELECT 'execution', e.id, t.owner_id FROM executions e JOIN tasks t ON t.id = e.task_id
              WHERE e.id = $1::text::uuid
             RETURNING id",
            &[&execution_id],
        )
        .unwrap()
        .get(0);
    // `set` is a fixed SQL fragment from the test, never input.
    c.batch_execute(&format!(
        "UPDATE scan_projection_outbox SET {set} WHERE id = {id}"
    ))
    .unwrap();
    id
}

pub(super) const FAILED_MID_WAY: &str =
    "attempts = 4, last_error = 'es 503', last_error_class = 'transient',
     cursor = '203.0.113.9/80/tcp', processed_endpoints = 2, phase = 'refreshing',
     available_at = now() + interval '1 hour', created_at = now() - interval '90 seconds'";

#[derive(Debug, PartialEq)]
struct Row {
    available_now: bool,
    attempts: i32,
    last_error: Option<String>,
    last_error_class: Option<String>,
    claim_token: Option<Uuid>,
    cursor: Option<String>,
    processed_endpoints: i64,
    phase: String,
    processed: bool,
}

fn read(c: &mut Client, id: i64) -> Row {
    let r = c
        .query_one(
            "SELECT available_at <= now(), attempts, last_error, last_error_class, claim_token,
                    cursor, processed_endpoints, phase, processed_at IS NOT NULL
               FROM scan_projection_outbox WHERE id = $1",
            &[&id],
        )
        .unwrap();
    Row {
        available_now: r.get(0),
        attempts: r.get(1),
        last_error: r.get(2),
        last_error_class: r.get(3),
        claim_token: r.get(4),
        cursor: r.get(5),
        processed_endpoints: r.get(6),
        phase: r.get(7),
        processed: r.get(8),
    }
}

/// scripts/backlog.sql works on its own with `psql -f`.
#[test]
#[ignore = "needs PostgreSQL"]
fn retry_makes_a_row_due_now_keeping_its_history() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    let id = outbox_row(&mut c, &e, FAILED_MID_WAY);
    let r = admin(&t, &["outbox", "retry", &id.to_string()]).ok();
    assert_eq!(r.get("outbox_id"), id.to_string());
    assert_eq!(
        read(&mut c, id),
        Row {
            available_now: true,
            attempts: 4,
            last_error: Some("es 503".into()),
            last_error_class: Some("transient".into()),
            claim_token: None,
            cursor: Some("203.0.113.9/80/tcp".into()),
            processed_endpoints: 2,
            phase: "refreshing".into(),
            processed: false,
        }
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn retry_never_steals_a_live_lease_but_clears_an_expired_one() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    let token = Uuid::new_v4();
    let id = outbox_row(
        &mut c,
        &e,
        &format!(
            "{FAILED_MID_WAY}, claim_token = '{token}', lease_expires_at = now() + interval '2 minutes'"
        ),
    );
    let before = read(&mut c, id);
    admin(&t, &["outbox", "retry", &id.to_string()])
        .fails_with(&format!("outbox row {id} is leased until"));
    assert_eq!(read(&mut c, id), before, "a refused retry changed the row");
    assert_eq!(before.claim_token, Some(token));

    c.execute(
        "UPDATE scan_projection_outbox SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
        &[&id],
    )
    .unwrap();
    admin(&t, &["outbox", "retry", &id.to_string()]).ok();
    let after = read(&mut c, id);
    assert_eq!(after.claim_token, None);
    assert!(after.available_now);
    assert_eq!(after.attempts, 4);
    let lease_cleared: bool = c
        .query_one(
            "SELECT lease_expires_at IS NULL FROM scan_projection_outbox WHERE id = $1",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert!(lease_cleared);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn retry_refuses_unknown_published_and_malformed_rows() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    let id = outbox_row(&mut c, &e, "processed_at = now()");
    admin(&t, &["outbox", "retry", &id.to_string()]).fails_with("was already published");
    admin(&t, &["outbox", "retry", "987654"]).fails_with("unknown outbox row 987654");
    admin(&t, &["outbox", "retry", "1; DELETE FROM owners"])
        .fails_with("invalid outbox id '1; DELETE FROM owners'");
    admin(&t, &["outbox", "retry"]).fails_with("missing OUTBOX_ID");
    admin(&t, &["outbox", "purge"]).fails_with("unknown subcommand 'outbox purge'");
    assert!(read(&mut c, id).processed);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn requeue_resets_a_row_to_publish_from_the_start() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    let id = outbox_row(
        &mut c,
        &e,
        &FAILED_MID_WAY
            .replace("'transient'", "'permanent'")
            .replace(
                "available_at = now() + interval '1 hour'",
                "processed_at = now()",
            ),
    );
    let r = admin(&t, &["outbox", "requeue", &e]).ok();
    assert_eq!(r.get("outbox_id"), id.to_string());
    assert_eq!(r.get("action"), "reset");
    assert_eq!(
        read(&mut c, id),
        Row {
            available_now: true,
            attempts: 0,
            last_error: None,
            last_error_class: None,
            claim_token: None,
            cursor: None,
            processed_endpoints: 0,
            phase: "publishing".into(),
            processed: false,
        }
    );
    assert_eq!(count(&t, "scan_projection_outbox"), 1);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn requeue_refuses_a_live_lease() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    let id = outbox_row(
        &mut c,
        &e,
        &format!(
            "{FAILED_MID_WAY}, claim_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'"
        ),
    );
    let before = read(&mut c, id);
    admin(&t, &["outbox", "requeue", &e]).fails_with("refusing to steal a live lease");
    assert_eq!(read(&mut c, id), before);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn requeue_creates_a_missing_row_only_for_a_succeeded_execution() {
    let t = db::fresh();
    let (o, _, e) = queued_execution(&t, "port_scan");
    admin(&t, &["outbox", "requeue", &e]).fails_with("is queued and has no outbox row");
    assert_eq!(count(&t, "scan_projection_outbox"), 0);

    let mut c = t.connect();
    succeed(&mut c, &e);
    let r = admin(&t, &["outbox", "requeue", &e]).ok();
    assert_eq!(r.get("action"), "created");
    let id: i64 = r.get("outbox_id").parse().unwrap();
    let row = c
        .query_one(
            "SELECT kind, execution_id::text, owner_id::text, processed_at IS NULL
               FROM scan_projection_outbox WHERE id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "execution");
    assert_eq!(row.get::<_, String>(1), e);
    assert_eq!(row.get::<_, String>(2), o);
    assert!(row.get::<_, bool>(3));

    let nobody = Uuid::new_v4().to_string();
    admin(&t, &["outbox", "requeue", &nobody]).fails_with(&format!("unknown execution {nobody}"));
    admin(&t, &["outbox", "requeue", "nope"]).fails_with("invalid execution id 'nope'");
    admin(&t, &["outbox", "requeue"]).fails_with("missing EXECUTION_ID");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn requeue_refuses_dns_only_executions_without_a_row() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "dns");
    succeed(&mut t.connect(), &e);
    admin(&t, &["outbox", "requeue", &e]).fails_with("DNS-only executions have no assets");
    assert_eq!(count(&t, "scan_projection_outbox"), 0);
}

/// `--config FILE` works for every command, including the table-printing one.
/// A worker's claim that is still in flight (row locked, lease not yet committed) makes
/// `outbox retry` wait for it and then refuse: the script reads the row under the lock,
/// so it cannot clear a lease that commits a moment later.
#[test]
#[ignore = "needs PostgreSQL"]
fn retry_waits_for_an_in_flight_claim_and_then_refuses() {
    let t = db::fresh();
    let (_, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    let id = outbox_row(&mut c, &e, "attempts = 1");

    let mut worker = t.connect();
    let mut claim = worker.transaction().unwrap();
    claim
        .execute(
            "UPDATE scan_projection_outbox
                SET claim_token = gen_random_uuid(), lease_expires_at = now() + interval '2 minutes'
              WHERE id = $1",
            &[&id],
        )
        .unwrap();

    let child = super::command()
        .args(["outbox", "retry", &id.to_string()])
        .env("SCANSTORE_DATABASE_URL", &t.url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the script's session is blocked on the row lock.
    db::wait_lock_waiter(&mut c, "the script to wait for the claim's row lock");
    claim.commit().unwrap();
    let out = child.wait_with_output().unwrap();
    let r = super::Run {
        args: vec!["outbox".into(), "retry".into(), id.to_string()],
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    r.fails_with("refusing to steal a live lease");
    assert!(read(&mut c, id).claim_token.is_some());
}
