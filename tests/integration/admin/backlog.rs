//! `backlog` and `scripts/backlog.sql`: the seed's queue query with ids, kinds and error
//! classes, as a table and a key=value summary.

use super::outbox::{outbox_row, succeed, FAILED_MID_WAY};
use super::{admin, queued_execution};
use crate::support::db;
use crate::support::TempFile;

#[test]
#[ignore = "needs PostgreSQL"]
fn backlog_prints_unprocessed_rows_and_a_summary() {
    let t = db::fresh();
    let (o, _, e) = queued_execution(&t, "mixed");
    let mut c = t.connect();
    succeed(&mut c, &e);
    outbox_row(&mut c, &e, FAILED_MID_WAY);
    admin(&t, &["tag", "add", "--owner", &o, "192.0.2.1", "x"]).ok();
    // A row published 10 minutes ago (counted) and one two hours ago (not counted).
    let (_, _, e2) = {
        let o2 = super::owner(&t, "o2");
        let s2 = super::scanner(&t, "s2", None);
        let r = admin(
            &t,
            &[
                "task",
                "create",
                "--owner",
                &o2,
                "--kind",
                "mixed",
                "--target",
                "192.0.2.2",
                "--scanner",
                &s2,
            ],
        )
        .ok();
        (
            o2,
            r.get("task_id").to_string(),
            r.get("execution_id").to_string(),
        )
    };
    succeed(&mut c, &e2);
    outbox_row(&mut c, &e2, "processed_at = now() - interval '10 minutes'");
    c.batch_execute(
        "INSERT INTO scan_projection_outbox (kind, owner_id, tag_scope, processed_at)
         SELECT 'tags', id, '{\"kind\":\"ip\",\"key\":\"192.0.2.3\"}', now() - interval '2 hours'
           FROM owners LIMIT 1",
    )
    .unwrap();

    let r = admin(&t, &["backlog"]).ok();
    let header = r.stdout.lines().next().unwrap();
    for col in [
        "id",
        "kind",
        "execution_id",
        "closing_execution_id",
        "tombstone_id",
        "forget_task_id",
        "phase",
        "processed_endpoints",
        "attempts",
        "claim_token",
        "lease_expires_at",
        "last_error_class",
        "last_error",
        "age",
    ] {
        assert!(
            header.split('|').any(|h| h.trim() == col),
            "no column {col}\n{r}"
        );
    }
    assert!(r.stdout.contains("(2 rows)"), "{r}");
    assert!(r.stdout.contains(&e), "{r}");
    assert!(
        !r.stdout.contains(&e2),
        "a published row is in the backlog\n{r}"
    );
    assert!(r.stdout.contains("es 503") && r.stdout.contains("transient"));
    assert_eq!(r.get("backlog_rows"), "2");
    let age: i64 = r.get("oldest_age_seconds").parse().unwrap();
    assert!((90..600).contains(&age), "age {age}\n{r}");
    assert_eq!(r.get("published_last_hour"), "1");
    assert_eq!(r.get("leased_rows"), "0");
    assert_eq!(r.get("permanent_error_rows"), "0");
    assert_eq!(
        r.get("backlog_by_kind"),
        "execution:1,tags:1,close:0,delete:0,expire:0,forget:0"
    );
    // The failed row is due in an hour: it sorts after the tags row, which is due now.
    let pos_tags = r.stdout.find("| tags").unwrap();
    let pos_exec = r.stdout.find(&e).unwrap();
    assert!(pos_tags < pos_exec, "{r}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn backlog_of_an_empty_queue() {
    let t = db::fresh();
    let r = admin(&t, &["backlog"]).ok();
    assert!(r.stdout.contains("(0 rows)"), "{r}");
    assert_eq!(r.get("backlog_rows"), "0");
    assert_eq!(r.get("oldest_age_seconds"), "0");
    assert_eq!(r.get("published_last_hour"), "0");
    admin(&t, &["backlog", "extra"]).fails_with("unexpected argument 'extra'");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn backlog_sql_runs_standalone() {
    let t = db::fresh();
    let out = std::process::Command::new("psql")
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-d", &t.url, "-f"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/backlog.sql"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("execution_id") && stdout.contains("backlog_rows=0"));
    // Even without -q, no psql chatter ("Output format is unaligned.") between the parts.
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 10, "{stdout}");
    assert_eq!(lines[2], "(0 rows)", "{stdout}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn backlog_through_a_config_file() {
    let t = db::fresh();
    let cfg = TempFile::new(".toml", &format!("[database]\nurl = \"{}\"\n", t.url));
    let r = super::admin_without_url(&["--config", cfg.path(), "backlog"]).ok();
    assert_eq!(r.get("backlog_rows"), "0");
}
