//! Who may see and write what: tokens exist only as SHA-256 and never reach a log line;
//! every owner read route answers another owner's ids like unknown ones (404) and lists
//! none of its data; a scanner writes only its own executions; disabled principals and
//! the wrong kind of token are refused everywhere.

use std::time::Duration;

use uuid::Uuid;

use super::child::log_dir;
use super::wait_published;
use crate::support::factory;
use crate::support::logs;
use crate::support::read::get;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::server::{got, http};
use crate::support::stack::Stack;

/// Every GET route of the owner API, with `{task_id}` filled in.
fn read_paths(task: Uuid) -> Vec<String> {
    scanstore::http::router::ROUTES
        .iter()
        .filter(|(m, p)| {
            *m == "GET"
                && p.starts_with("/api/v1/")
                && !p.starts_with("/api/v1/scanner/")
                && !p.ends_with("openapi.json")
        })
        .map(|(_, p)| p.replace("{task_id}", &task.to_string()))
        .map(|p| {
            if p.ends_with("/search") {
                format!("{p}?q=nginx")
            } else {
                p
            }
        })
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn owners_read_only_their_own_data_on_every_read_route() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let other = factory::owner(&mut c, false);
    let other_scanner = factory::scanner(&mut c, None);
    let other_run = factory::task(&mut c, other.id, other_scanner.id, "port_scan", "running");
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 3, 3, t0());
    let up = Uuid::new_v4();
    let b = Batch::main(up, 0, vec![endpoint("192.0.2.77", 8443, t0())]);
    assert_eq!(
        scan::post(s.base(), &other_scanner.token, other_run.execution_id, &b).status,
        200
    );
    let f = Batch::final_(up, 1, vec![]);
    assert_eq!(
        scan::post(s.base(), &other_scanner.token, other_run.execution_id, &f).status,
        200
    );
    wait_published(&mut c, s.execution(), Duration::from_secs(60));
    wait_published(&mut c, other_run.execution_id, Duration::from_secs(60));

    let paths = read_paths(other_run.task_id);
    assert!(paths.len() >= 6, "{paths:?}");
    for path in &paths {
        // The owner of the data reads it.
        let mine = get(s.base(), &other.token, path);
        assert_eq!(mine.status, 200, "{path}: {}", mine.body);
        // Another owner: 404 for the task's routes, no trace of it in lists.
        let theirs = get(s.base(), &s.owner.token, path);
        if path.contains(&other_run.task_id.to_string()) {
            assert_eq!(theirs.status, 404, "{path}: {}", theirs.body);
            assert_eq!(theirs.body["error"]["code"], "not_found");
        } else {
            assert_eq!(theirs.status, 200, "{path}: {}", theirs.body);
        }
        let text = theirs.body.to_string();
        for secret in [
            other_run.task_id.to_string(),
            other_run.execution_id.to_string(),
            "192.0.2.77".to_string(),
        ] {
            assert!(
                !text.contains(&secret),
                "{path} shows another owner's {secret}: {text}"
            );
        }
        // The same id with a filter that names the other execution.
        let sep = if path.contains('?') { '&' } else { '?' };
        let q = format!("{path}{sep}execution_id={}", other_run.execution_id);
        let r = get(s.base(), &s.owner.token, &q);
        assert!(!r.body.to_string().contains("192.0.2.77"), "{q}");
        // Scanner tokens, unknown tokens and no token are not owner tokens.
        assert_eq!(
            get(s.base(), &other_scanner.token, path).status,
            401,
            "{path}"
        );
        assert_eq!(get(s.base(), "own_unknown", path).status, 401, "{path}");
        let anon = got(http().get(format!("{}{path}", s.base())).call());
        assert_eq!(anon.status, 401, "{path}");
    }
    // A disabled owner is refused everywhere.
    c.execute(
        "UPDATE owners SET disabled = true WHERE id = $1",
        &[&other.id],
    )
    .unwrap();
    for path in &paths {
        let r = get(s.base(), &other.token, path);
        assert_eq!(r.status, 401, "disabled owner on {path}: {}", r.body);
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn scanners_write_only_their_own_executions_and_disabled_ones_nothing() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let intruder = factory::scanner(&mut c, None);
    // A scanner restricted to another owner cannot write this owner's execution either.
    let other_owner = factory::owner(&mut c, false);
    let restricted = factory::scanner(&mut c, Some(other_owner.id));
    let b = Batch::main(Uuid::new_v4(), 0, vec![endpoint("10.0.0.1", 443, t0())]);
    for tok in [&intruder.token, &restricted.token, &s.owner.token] {
        let r = scan::post(s.base(), tok, s.execution(), &b);
        assert!(
            r.status == 403 || r.status == 401,
            "a foreign token wrote: {} {}",
            r.status,
            r.body
        );
    }
    // Claims never hand out another scanner's queued execution.
    let queued = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "queued");
    assert_eq!(scan::claim(s.base(), &intruder.token).status, 204);
    let status: String = c
        .query_one(
            "SELECT status FROM executions WHERE id = $1",
            &[&queued.execution_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "queued");
    assert!(s.receipts().is_empty());
    assert_eq!(s.fact_count(), 0);
    // Disabled: refused for batches and claims, and still nothing written.
    c.execute(
        "UPDATE scanners SET disabled = true WHERE id = $1",
        &[&s.scanner.id],
    )
    .unwrap();
    assert_eq!(
        scan::post(s.base(), &s.scanner.token, s.execution(), &b).status,
        401
    );
    assert_eq!(scan::claim(s.base(), &s.scanner.token).status, 401);
    assert!(s.receipts().is_empty());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn tokens_are_stored_only_as_sha256_and_never_logged() {
    let s = Stack::new("port_scan");
    // Traffic with good and bad tokens of both kinds.
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 2, 2, t0());
    let b = Batch::main(Uuid::new_v4(), 0, vec![endpoint("10.0.0.9", 443, t0())]);
    scan::post(
        s.base(),
        "scn_0123456789abcdef0123456789abcdef",
        s.execution(),
        &b,
    );
    get(s.base(), &s.owner.token, "/api/v1/tasks");
    get(
        s.base(),
        "own_0123456789abcdef0123456789abcdef",
        "/api/v1/tasks",
    );
    let mut c = s.sql();
    // Storage: a 32-byte digest, and no column anywhere holds the clear token.
    for (table, token) in [("owners", &s.owner.token), ("scanners", &s.scanner.token)] {
        let row: String = c
            .query_one(
                &format!("SELECT row_to_json(t)::text FROM {table} t WHERE octet_length(token_sha256) = 32 AND token_sha256 = sha256(convert_to($1, 'UTF8'))"),
                &[token],
            )
            .unwrap()
            .get(0);
        assert!(
            !row.contains(token.as_str()),
            "{table} stores the token: {row}"
        );
    }
    let dump = crate::support::db::schema_dump(&s.db.url);
    let data = std::process::Command::new("pg_dump")
        .args(["--data-only", &s.db.url])
        .output()
        .unwrap();
    let data = String::from_utf8_lossy(&data.stdout);
    assert!(!data.contains(&s.scanner.token) && !data.contains(&s.owner.token));
    assert!(dump.contains("token_sha256"));
    // Logs: this process's captured lines and every child log of the suite.
    let token_like = regex::Regex::new(r"(scn|own)_[0-9a-f]{32}|Bearer\s+\S").unwrap();
    let mut texts = vec![("captured".to_string(), logs::all())];
    for e in std::fs::read_dir(log_dir()).unwrap().flatten() {
        texts.push((
            e.path().display().to_string(),
            std::fs::read_to_string(e.path()).unwrap_or_default(),
        ));
    }
    assert!(
        texts[0].1.contains("ScanResultUpload"),
        "nothing was captured"
    );
    for (name, text) in &texts {
        if let Some(m) = token_like.find(text) {
            panic!("{name} contains a token: {}", m.as_str());
        }
    }
}

#[test]
fn a_world_readable_config_with_a_database_password_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = std::env::temp_dir().join(format!("scanstore-secret-{}.toml", Uuid::new_v4()));
    std::fs::write(
        &p,
        "[database]\nurl = \"postgresql://scanstore:hunter2@127.0.0.1/db\"\n",
    )
    .unwrap();
    let run = |mode: u32| {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_scanstore"))
            .args(["serve", "--config"])
            .arg(&p)
            .output()
            .unwrap()
    };
    let out = run(0o644);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(
        err.contains("not world-readable") && err.contains("mode 0644"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_scanstore"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    assert!(!check.status.success());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_scanstore"))
        .arg("check-config")
        .arg(&p)
        .output()
        .unwrap();
    std::fs::remove_file(&p).unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}
