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
    let mut c = t.connect();
    assert!(scanstore::db::migrate::is_current(&mut c).unwrap());
    c.batch_execute("DELETE FROM schema_marker WHERE name = 'scan_projection_v2'")
        .unwrap();
    assert!(!scanstore::db::migrate::is_current(&mut c).unwrap());
}
