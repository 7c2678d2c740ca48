//! Migrations: idempotent, serialised across concurrent starters, and the schema they
//! leave is exactly the fresh one.

use crate::support::db;

#[test]
#[ignore = "needs PostgreSQL"]
fn migrations_run_twice_leave_the_schema_unchanged() {
    let t = db::empty();
    db::migrate(&t.url);
    let first = db::schema_dump(&t.url);
    db::migrate(&t.url);
    let second = db::schema_dump(&t.url);
    assert!(first.contains("scan_projection_outbox") || first.contains("owners"));
    assert_eq!(first, second, "a second migration changed the schema");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn concurrent_starters_migrate_once() {
    let t = db::empty();
    let url = t.url.clone();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || db::migrate(&url))
        })
        .collect();
    for h in handles {
        h.join().expect("a concurrent migration failed");
    }
    let reference = db::empty();
    db::migrate(&reference.url);
    assert_eq!(db::schema_dump(&t.url), db::schema_dump(&reference.url));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn fresh_schema_is_current() {
    let t = db::fresh();
    assert!(t.schema_is_current());
    t.connect()
        .batch_execute("DELETE FROM schema_marker WHERE name = 'scan_projection_v2'")
        .unwrap();
    assert!(!t.schema_is_current());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn legacy_database_upgrades_to_exactly_the_fresh_schema() {
    let legacy = db::empty();
    let mut c = legacy.connect();
    legacy_v1(&mut c);
    let receipts: i64 = c
        .query_one("SELECT count(*) FROM scan_upload_receipts", &[])
        .unwrap()
        .get(0);
    let outbox: i64 = c
        .query_one("SELECT count(*) FROM scan_projection_outbox", &[])
        .unwrap()
        .get(0);
    assert!(
        receipts > 0 && outbox > 0,
        "the seed has receipts and queue rows"
    );
    drop(c);

    let mut c = upgraded_to_current(&legacy);
    let kept: (i64, i64) = {
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM scan_upload_receipts), (SELECT count(*) FROM scan_projection_outbox)",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(kept, (receipts, outbox), "the upgrade lost rows");
    // Every stream row equals a recount from receipts.
    let mismatched: i64 = c
        .query_one(
            "SELECT count(*) FROM scan_upload_stream s FULL JOIN scan_upload_stream_recount r
               USING (execution_id, upload_id)
             WHERE s.batch_count IS DISTINCT FROM r.batch_count
                OR s.confirmed_count IS DISTINCT FROM r.confirmed_count
                OR s.pending_count IS DISTINCT FROM r.pending_count
                OR s.final_count IS DISTINCT FROM r.final_count
                OR s.confirmed_observations IS DISTINCT FROM r.confirmed_observations
                OR s.dns_batch_count IS DISTINCT FROM r.dns_batch_count",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(mismatched, 0);
    // A second start skips the backfill: a stream made dirty stays dirty.
    c.batch_execute("UPDATE scan_upload_stream SET dirty = true WHERE ctid = (SELECT ctid FROM scan_upload_stream LIMIT 1)")
        .unwrap();
    drop(c);
    db::migrate(&legacy.url);
    let dirty: i64 = legacy
        .connect()
        .query_one("SELECT count(*) FROM scan_upload_stream WHERE dirty", &[])
        .unwrap()
        .get(0);
    assert_eq!(dirty, 1, "the backfill ran again");
}

/// Migrates `old` and checks it is now exactly a fresh install of this release: the same
/// schema dump, every marker, the current version. Returns a connection to it.
fn upgraded_to_current(old: &db::TestDb) -> postgres::Client {
    db::migrate(&old.url);
    let fresh = db::empty();
    db::migrate(&fresh.url);
    assert_eq!(db::schema_dump(&old.url), db::schema_dump(&fresh.url));
    assert!(old.schema_is_current());
    let mut c = old.connect();
    let version: i32 = c
        .query_one("SELECT version FROM schema_version", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, scanstore::db::migrate::SCHEMA_VERSION);
    c
}

/// The previous generation's schema (version 1) with its seed rows.
fn legacy_v1(c: &mut postgres::Client) {
    c.batch_execute(include_str!("../../../schema/legacy_v1.sql"))
        .unwrap();
    c.batch_execute(include_str!("../../sql/legacy_seed.sql"))
        .unwrap();
}

/// A release-2 database (schema version 2) as the previous release left it: the legacy
/// schema with the first four migrations, exactly what its upgrade test held equal to its
/// fresh install.
fn release_2(t: &db::TestDb) {
    let mut c = t.connect();
    legacy_v1(&mut c);
    for (_, sql) in &scanstore::db::migrate::MIGRATIONS[..4] {
        c.batch_execute(sql).unwrap();
    }
    c.batch_execute("UPDATE schema_version SET version = 2")
        .unwrap();
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_release_2_database_upgrades_to_exactly_the_fresh_schema_keeping_its_targets() {
    let old = db::empty();
    release_2(&old);
    assert!(!old.schema_is_current());
    let mut c = old.connect();
    let owner: uuid::Uuid = c
        .query_one("SELECT id FROM owners ORDER BY id LIMIT 1", &[])
        .unwrap()
        .get(0);
    c.execute(
        "INSERT INTO search_targets (owner_id, kind, key)
         VALUES ($1, 'ip', '198.51.100.7'), ($1, 'cidr', '198.51.100.0/25')",
        &[&owner],
    )
    .unwrap();
    let targets = |c: &mut postgres::Client| -> i64 {
        c.query_one("SELECT count(*) FROM search_targets", &[])
            .unwrap()
            .get(0)
    };
    let before = targets(&mut c);
    drop(c);

    db::migrate(&old.url);
    let mut c = upgraded_to_current(&old);
    assert_eq!(targets(&mut c), before);
}
