//! The dispatcher itself: `--help` everywhere, usage errors, where the database URL comes
//! from (`SCANSTORE_DATABASE_URL` over `--config FILE`), an unreachable database.

use super::{admin, admin_with_url, admin_without_url, count};
use crate::support::db;
use crate::support::TempFile;

/// Every command's help goes to stdout with status 0 and needs no database.
#[test]
#[ignore = "needs PostgreSQL"]
fn help_for_the_dispatcher_and_every_command() {
    let main = admin_without_url(&["--help"]).ok();
    for cmd in [
        "owner create",
        "scanner create",
        "task create",
        "target add",
        "tag add",
        "tag remove",
        "backlog",
        "outbox retry",
        "outbox requeue",
        "execution show",
        "execution list",
    ] {
        assert!(main.stdout.contains(cmd), "--help lacks {cmd}\n{main}");
        let words: Vec<&str> = cmd.split(' ').collect();
        let mut args = words.clone();
        args.push("--help");
        let r = admin_without_url(&args).ok();
        assert!(r.stdout.starts_with("Usage: scanstore-admin "), "{r}");
        assert!(r.stdout.contains(cmd), "{r}");
        assert!(r.stderr.is_empty(), "{r}");
        // The group alone, and -h, say the same.
        let r = admin_without_url(&[words[0], "-h"]).ok();
        assert!(r.stdout.starts_with("Usage: scanstore-admin "), "{r}");
    }
    assert_eq!(admin_without_url(&["help"]).ok().stdout, main.stdout);
    assert_eq!(admin_without_url(&["-h"]).ok().stdout, main.stdout);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn usage_errors_exit_2_with_a_message() {
    for (args, msg) in [
        (&[][..], "missing command"),
        (&["frobnicate"][..], "unknown command 'frobnicate'"),
        (&["--verbose", "backlog"][..], "unknown option --verbose"),
        (&["owner"][..], "missing subcommand"),
        (
            &["owner", "delete", "x"][..],
            "unknown subcommand 'owner delete'",
        ),
        (
            &["scanner", "list"][..],
            "unknown subcommand 'scanner list'",
        ),
        (&["--config"][..], "option --config needs a value"),
    ] {
        let r = admin_without_url(args).fails_with(msg);
        assert_eq!(r.code, Some(2), "{r}");
        assert!(r.stderr.contains("--help"), "no hint to --help\n{r}");
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn no_database_configured() {
    let r = admin_without_url(&["backlog"])
        .fails_with("no database: set SCANSTORE_DATABASE_URL or pass --config FILE");
    assert_ne!(r.code, Some(0));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn unreachable_database_exits_3() {
    // Port 1 on the loopback: nothing listens, the connection is refused at once.
    let r = admin_with_url(
        "postgresql://postgres@127.0.0.1:1/nothing",
        &["owner", "create", "x"],
    )
    .fails_with("cannot connect to the database");
    assert_eq!(r.code, Some(3), "{r}");
    let r = admin_with_url("postgresql://postgres@127.0.0.1:1/nothing", &["backlog"])
        .fails_with("cannot connect to the database");
    assert_eq!(r.code, Some(3), "{r}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn config_file_url_is_read_from_the_database_section() {
    let t = db::fresh();
    let cfg = TempFile::new(
        ".toml",
        &format!(
            "# scanstore\n[server]\nurl = \"postgresql://wrong@127.0.0.1:1/server-section\"\n\n\
             [database]\n# the pool\npool_size = 4\nurl = \"{}\"   # trailing comment\n\n\
             [elasticsearch]\nurl = \"http://127.0.0.1:9200\"\n",
            t.url
        ),
    );
    // Before the command and after it.
    let r = admin_without_url(&["--config", cfg.path(), "owner", "create", "via-config"]).ok();
    r.uuid("owner_id");
    admin_without_url(&["owner", "create", "after", "--config", cfg.path()]).ok();
    let literal = TempFile::new(".toml", &format!("[ database ]\nurl = '{}'\n", t.url));
    admin_without_url(&["--config", literal.path(), "owner", "create", "literal"]).ok();
    assert_eq!(count(&t, "owners"), 3);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn environment_wins_over_the_config_file() {
    let t = db::fresh();
    let cfg = TempFile::new(
        ".toml",
        "[database]\nurl = \"postgresql://postgres@127.0.0.1:1/not-this-one\"\n",
    );
    admin(&t, &["--config", cfg.path(), "owner", "create", "env-wins"]).ok();
    assert_eq!(count(&t, "owners"), 1);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn bad_config_files() {
    let missing = "/nonexistent/scanstore.toml";
    admin_without_url(&["--config", missing, "backlog"])
        .fails_with(&format!("cannot read config file '{missing}'"));
    let no_url = TempFile::new(
        ".toml",
        "[server]\nurl = \"x\"\n[database]\npool_size = 2\n",
    );
    admin_without_url(&["--config", no_url.path(), "backlog"])
        .fails_with("has no [database] url and SCANSTORE_DATABASE_URL is not set");
    let bare = TempFile::new(".toml", "[database]\nurl = postgresql://x\n");
    admin_without_url(&["--config", bare.path(), "backlog"])
        .fails_with("[database] url must be a quoted string");
    // An explicit config file must be readable even when the environment supplies the URL.
    let t = db::fresh();
    admin(&t, &["--config", missing, "backlog"]).fails_with("cannot read config file");
}

/// What reaches psql is only ever a quoted literal: arguments that look like SQL or psql
/// syntax in any position are data, and the schema is untouched.
#[test]
#[ignore = "needs PostgreSQL"]
fn injection_attempts_are_data_everywhere() {
    let t = db::fresh();
    let o = super::owner(&t, "alice");
    let evil_tag = "x'); DROP TABLE asset_tags; --";
    let r = admin(&t, &["tag", "add", "--owner", &o, "192.0.2.1", evil_tag]).ok();
    assert_eq!(r.get("tag"), evil_tag);
    admin(&t, &["scanner", "create", "'; DELETE FROM owners; --"]).ok();
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
            "--tag",
            ":'owner'",
            "--tag",
            "\\gexec",
        ],
    )
    .ok();
    let tags: Vec<String> = t
        .connect()
        .query_one("SELECT tags FROM tasks", &[])
        .unwrap()
        .get(0);
    assert_eq!(tags, [":'owner'", "\\gexec"]);
    assert_eq!(count(&t, "owners"), 1);
    assert_eq!(count(&t, "asset_tags"), 1);
    let stored: String = t
        .connect()
        .query_one("SELECT tag FROM asset_tags", &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, evil_tag);
}

/// `--option=value` is `--option value`; after `--` everything is data, even `--owner=x`.
#[test]
#[ignore = "needs PostgreSQL"]
fn option_equals_form_and_double_dash() {
    let t = db::fresh();
    let o = super::owner(&t, "alice");
    let r = admin(
        &t,
        &[
            "task",
            "create",
            &format!("--owner={o}"),
            "--kind=dns",
            "--target=example.com",
            "--tag=a=b",
        ],
    )
    .ok();
    let tags: Vec<String> = t
        .connect()
        .query_one(
            "SELECT tags FROM tasks WHERE id = $1",
            &[&r.uuid("task_id")],
        )
        .unwrap()
        .get(0);
    assert_eq!(tags, ["a=b"]);
    let r = admin(&t, &["owner", "create", "--", "--owner=x"]).ok();
    let name: String = t
        .connect()
        .query_one(
            "SELECT name FROM owners WHERE id = $1",
            &[&r.uuid("owner_id")],
        )
        .unwrap()
        .get(0);
    assert_eq!(name, "--owner=x");
    let cfg = TempFile::new(".toml", &format!("[database]\nurl = \"{}\"\n", t.url));
    admin_without_url(&[&format!("--config={}", cfg.path()), "backlog"]).ok();
}
