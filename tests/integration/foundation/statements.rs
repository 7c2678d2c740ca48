//! The session's statement cache: a named SQL constant is prepared once per pooled
//! connection (shared by its transactions), and a cached statement that fails — a plan made
//! stale by a schema change under a running server — is prepared afresh on the next call.

use std::time::Duration;

use scanstore::db::{Db, Queries, Stage};

use crate::support::db;

const READ_T: &str = "SELECT * FROM statement_cache_t";
const SESSION_STATEMENTS: &str =
    "SELECT count(*) FROM pg_prepared_statements WHERE statement = 'SELECT * FROM statement_cache_t'";

fn one_connection(url: &str) -> Db {
    db::pool(url, 1, Duration::from_secs(10))
}

#[test]
fn a_constant_is_prepared_once_per_connection_and_again_after_it_failed() {
    let test_db = db::fresh();
    test_db
        .connect()
        .batch_execute(
            "CREATE TABLE statement_cache_t (a int); INSERT INTO statement_cache_t VALUES (1)",
        )
        .unwrap();
    let pool = one_connection(&test_db.url);
    let prepared = || {
        let mut c = pool.checkout(Stage::Read).unwrap();
        c.query_one(SESSION_STATEMENTS, &[])
            .unwrap()
            .get::<_, i64>(0)
    };

    for _ in 0..3 {
        let mut c = pool.checkout(Stage::Read).unwrap();
        assert_eq!(c.query(READ_T, &[]).unwrap().len(), 1);
    }
    // A transaction on the same connection runs the very same statement.
    pool.in_tx(Stage::Read, |tx| {
        assert_eq!(tx.query_one(READ_T, &[])?.get::<_, i32>(0), 1);
        Ok::<_, scanstore::db::DbError>(())
    })
    .unwrap();
    assert_eq!(prepared(), 1, "one prepared statement on the session");

    // The table changes shape under the cached plan: the cached statement fails once...
    test_db
        .connect()
        .batch_execute("ALTER TABLE statement_cache_t ADD COLUMN b text DEFAULT 'x'")
        .unwrap();
    let mut c = pool.checkout(Stage::Read).unwrap();
    let stale = c.query(READ_T, &[]).unwrap_err();
    let message = stale.as_db_error().map(|e| e.message().to_string());
    assert_eq!(
        message.as_deref(),
        Some("cached plan must not change result type"),
        "{stale:?}"
    );
    // ...and is prepared afresh on the next call, which sees the new column.
    let rows = c.query(READ_T, &[]).unwrap();
    assert_eq!(rows[0].get::<_, String>(1), "x");
    drop(c);
    assert_eq!(
        prepared(),
        1,
        "the stale statement was replaced, not kept beside it"
    );
}
