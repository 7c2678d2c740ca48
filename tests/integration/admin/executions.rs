//! `execution show` (the execution, its receipts, streams and outbox row) and
//! `execution list`.

use uuid::Uuid;

use super::{admin, queued_execution};
use crate::support::db;

#[test]
#[ignore = "needs PostgreSQL"]
fn show_prints_execution_receipts_streams_and_outbox() {
    let t = db::fresh();
    let (o, task, e) = queued_execution(&t, "mixed");
    let upload = Uuid::new_v4();
    let mut c = t.connect();
    c.execute(
        "UPDATE executions SET status = 'running', started_at = now() WHERE id = $1::text::uuid",
        &[&e],
    )
    .unwrap();
    // Two main batches (one confirmed, one pending) and a dns sidecar batch; the triggers
    // keep scan_upload_stream.
    c.batch_execute(&format!(
        "INSERT INTO scan_upload_receipts
             (execution_id, upload_id, stream, batch_index, is_final, checksum, observation_count,
              status, confirmed_at)
         VALUES ('{e}', '{upload}', 'main', 0, false, 'sha256:aa', 5, 'confirmed', now()),
                ('{e}', '{upload}', 'main', 1, true, 'sha256:bb', 2, 'pending', NULL),
                ('{e}', '{upload}', 'dns', 4, false, 'sha256:cc', 3, 'confirmed', now())"
    ))
    .unwrap();

    let r = admin(&t, &["execution", "show", &e]).ok();
    assert_eq!(r.get("execution_id"), e);
    assert_eq!(r.get("task_id"), task);
    assert_eq!(r.get("owner_id"), o);
    assert_eq!(r.get("task_kind"), "mixed");
    assert!(r.get("started_at").ends_with('Z'), "{r}");
    assert_eq!(r.get("finished_at"), "");
    assert_eq!(r.get("receipts"), "3");

    let lines: Vec<&str> = r.stdout.lines().collect();
    let section = |name: &str| -> Vec<&str> {
        let start = lines.iter().position(|l| *l == name).expect(name) + 1;
        lines[start..]
            .iter()
            .take_while(|l| !l.starts_with('['))
            .copied()
            .collect()
    };
    let receipts = section("[receipts]");
    assert_eq!(receipts.len(), 3, "{r}");
    assert!(receipts[0].starts_with(
        "stream=main batch_index=0 is_final=false status=confirmed observation_count=5"
    ));
    assert!(receipts[1]
        .starts_with("stream=main batch_index=1 is_final=true status=pending observation_count=2"));
    assert!(receipts[2].starts_with(
        "stream=dns batch_index=4 is_final=false status=confirmed observation_count=3"
    ));
    let streams = section("[streams]");
    assert_eq!(streams.len(), 1, "{r}");
    for field in [
        format!("upload_id={upload}"),
        "batch_count=2".into(),
        "confirmed_count=1".into(),
        "pending_count=1".into(),
        "final_count=1".into(),
        "confirmed_observations=5".into(),
        "dns_batch_count=1".into(),
    ] {
        assert!(
            streams[0].split(' ').any(|kv| kv == field),
            "{field} missing\n{r}"
        );
    }
    assert_eq!(section("[outbox]"), ["outbox=none"]);

    // With an outbox row (its multi-line error kept on one line).
    c.batch_execute(&format!(
        "UPDATE executions SET status = 'succeeded' WHERE id = '{e}';
         INSERT INTO scan_projection_outbox (kind, execution_id, owner_id, attempts, last_error,
                                             last_error_class, claim_token, lease_expires_at)
         VALUES ('execution', '{e}', '{o}', 2, E'bulk failed\\nitem 3: 429', 'transient',
                 gen_random_uuid(), now() + interval '1 minute')"
    ))
    .unwrap();
    let r = admin(&t, &["execution", "show", &e]).ok();
    assert_eq!(r.get("status"), "succeeded");
    assert_eq!(r.get("attempts"), "2");
    assert_eq!(r.get("leased"), "true");
    assert_eq!(r.get("phase"), "publishing");
    assert_eq!(r.get("last_error"), "bulk failed\\nitem 3: 429");
    assert_eq!(r.get("last_error_class"), "transient");
    assert!(r.get("outbox_id").parse::<i64>().is_ok());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn show_refuses_unknown_and_malformed_ids() {
    let t = db::fresh();
    let nobody = Uuid::new_v4().to_string();
    admin(&t, &["execution", "show", &nobody]).fails_with(&format!("unknown execution {nobody}"));
    admin(&t, &["execution", "show", "x"]).fails_with("invalid execution id 'x': not a UUID");
    admin(&t, &["execution", "show"]).fails_with("missing EXECUTION_ID");
    admin(&t, &["execution", "show", &nobody, "--limit", "3"]).fails_with("unknown option --limit");
    admin(&t, &["execution", "kill", &nobody]).fails_with("unknown subcommand 'execution kill'");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn list_filters_by_owner_and_status_and_limits() {
    let t = db::fresh();
    let (o1, _, e1) = queued_execution(&t, "mixed");
    let o2 = super::owner(&t, "bob");
    let s2 = super::scanner(&t, "s2", None);
    let mut e2 = Vec::new();
    for _ in 0..3 {
        let r = admin(
            &t,
            &[
                "task",
                "create",
                "--owner",
                &o2,
                "--kind",
                "dns",
                "--target",
                "example.com",
                "--scanner",
                &s2,
            ],
        )
        .ok();
        e2.push(r.get("execution_id").to_string());
    }
    t.connect()
        .execute(
            "UPDATE executions SET status = 'succeeded' WHERE id = $1::text::uuid",
            &[&e1],
        )
        .unwrap();

    let all = admin(&t, &["execution", "list"]).ok();
    assert_eq!(all.stdout.lines().count(), 4, "{all}");
    let ids = |r: &super::Run| -> Vec<String> {
        r.stdout
            .lines()
            .map(|l| {
                l.split(' ')
                    .find_map(|kv| kv.strip_prefix("execution_id="))
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    // Newest first.
    assert_eq!(ids(&all)[0], e2[2]);

    let mine = admin(&t, &["execution", "list", "--owner", &o1]).ok();
    assert_eq!(ids(&mine), std::slice::from_ref(&e1));
    assert!(mine.stdout.contains(" status=succeeded "), "{mine}");
    assert!(mine.stdout.contains(" outbox=none "), "{mine}");

    let queued = admin(&t, &["execution", "list", "--status", "queued"]).ok();
    let mut q = ids(&queued);
    q.sort();
    let mut want = e2.clone();
    want.sort();
    assert_eq!(q, want);

    let two = admin(&t, &["execution", "list", "--owner", &o2, "--limit", "2"]).ok();
    assert_eq!(ids(&two), [e2[2].clone(), e2[1].clone()]);

    let nobody = Uuid::new_v4().to_string();
    admin(&t, &["execution", "list", "--owner", &nobody])
        .fails_with(&format!("unknown owner {nobody}"));
    admin(&t, &["execution", "list", "--status", "done"]).fails_with("invalid --status 'done'");
    admin(&t, &["execution", "list", "--limit", "0"]).fails_with("invalid --limit '0'");
    admin(&t, &["execution", "list", "--limit", "1;"]).fails_with("invalid --limit");
}
