//! Schema installation and upgrade, embedded in the binary and run by `scanstore migrate`
//! and at `serve` start. All of it runs under one session-level advisory lock so that
//! several instances starting together cannot race; every file is idempotent, and
//! one-time backfills are guarded by rows in `schema_marker`.

use postgres::Client;

use super::{Db, DbError, Queries, Stage};

/// Fresh install: the whole current model.
const INIT_SQL: &str = include_str!("../../schema/init.sql");

/// Upgrades from earlier releases, in the order they must run. Each file is idempotent and
/// a no-op on a database created by `INIT_SQL`; the first four make a release-2 (schema
/// version 2) database of a legacy one.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "migrate_scan_projection.sql",
        include_str!("../../schema/migrate_scan_projection.sql"),
    ),
    (
        "migrate_scan_upload_stream.sql",
        include_str!("../../schema/migrate_scan_upload_stream.sql"),
    ),
    (
        "migrate_search_target_ip.sql",
        include_str!("../../schema/migrate_search_target_ip.sql"),
    ),
    (
        "migrate_execution_dns_answers.sql",
        include_str!("../../schema/migrate_execution_dns_answers.sql"),
    ),
    (
        "migrate_execution_lifecycle.sql",
        include_str!("../../schema/migrate_execution_lifecycle.sql"),
    ),
    (
        "migrate_task_ports.sql",
        include_str!("../../schema/migrate_task_ports.sql"),
    ),
    (
        "migrate_asset_lifecycle.sql",
        include_str!("../../schema/migrate_asset_lifecycle.sql"),
    ),
    (
        "migrate_retention.sql",
        include_str!("../../schema/migrate_retention.sql"),
    ),
    (
        "migrate_task_delete.sql",
        include_str!("../../schema/migrate_task_delete.sql"),
    ),
    (
        "migrate_close_lookup.sql",
        include_str!("../../schema/migrate_close_lookup.sql"),
    ),
    (
        "migrate_task_freshness.sql",
        include_str!("../../schema/migrate_task_freshness.sql"),
    ),
    (
        "migrate_task_networks.sql",
        include_str!("../../schema/migrate_task_networks.sql"),
    ),
    (
        "migrate_backlog_count.sql",
        include_str!("../../schema/migrate_backlog_count.sql"),
    ),
];

/// Markers a current schema carries; readiness fails until all are present.
pub const CURRENT_MARKERS: &[&str] = &[
    "scan_projection_v2",
    "scan_upload_stream_backfill",
    "search_target_ip",
    "execution_dns_answers",
    "execution_lifecycle",
    "task_ports",
    "asset_lifecycle",
    "retention",
    "task_delete",
    "close_lookup",
    "task_freshness",
    "task_networks",
    "backlog_count",
];

/// The schema generation this binary writes (legacy_v1 = 1).
pub const SCHEMA_VERSION: i32 = 3;

/// Recorded after the migrations; a no-op on a database already at this version.
const SET_VERSION: &str =
    "UPDATE schema_version SET version = $1, updated_at = now() WHERE version < $1";

/// Advisory-lock key of the migration ("scanstore" read as bytes); any constant works as
/// long as every instance uses the same one.
const MIGRATION_LOCK_KEY: i64 = 0x7363_616e_7374_6f72;

/// What `run` did, for the start-up log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Installed,
    Upgraded,
}

/// Installs or upgrades the schema. Safe to call from several processes at once: the
/// advisory lock serialises them and the files are idempotent.
pub fn run(db: &Db) -> Result<Outcome, DbError> {
    let mut conn = db.checkout(Stage::Migrate)?;
    conn.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])?;
    let result = run_locked(conn.client());
    // Unlock even after a failed migration; if the connection itself broke, the server
    // drops the session lock with it.
    let unlocked = conn.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY]);
    let outcome = result?;
    unlocked?;
    Ok(outcome)
}

fn run_locked(conn: &mut Client) -> Result<Outcome, DbError> {
    let installed: bool = conn
        .query_one("SELECT to_regclass('owners') IS NOT NULL", &[])?
        .get(0);
    if !installed {
        // A multi-statement simple query is one implicit transaction: all or nothing.
        conn.batch_execute(INIT_SQL)?;
        log::info!(target: "scanstore::migrate", "event=SchemaInstalled");
        return Ok(Outcome::Installed);
    }
    for (name, sql) in MIGRATIONS {
        conn.batch_execute(sql)?;
        log::info!(target: "scanstore::migrate", "event=SchemaMigrationApplied file={name}");
    }
    conn.execute(SET_VERSION, &[&SCHEMA_VERSION])?;
    Ok(Outcome::Upgraded)
}

/// True when every marker of the current schema is present (readiness).
pub fn is_current(conn: &mut impl Queries) -> Result<bool, DbError> {
    let exists: bool = conn
        .query_one("SELECT to_regclass('schema_marker') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(false);
    }
    let markers: Vec<String> = CURRENT_MARKERS.iter().map(|m| m.to_string()).collect();
    let found: i64 = conn
        .query_one(
            "SELECT count(*) FROM schema_marker WHERE name = ANY($1)",
            &[&markers],
        )?
        .get(0);
    Ok(found == CURRENT_MARKERS.len() as i64)
}
