//! `owner create` and `scanner create`: tokens printed once, stored only as SHA-256 (the
//! digest the server authenticates by), names stored literally, bad input refused.

use scanstore::db::Stage;
use scanstore::telemetry::Secret;
use uuid::Uuid;

use super::{admin, count, data_dump, owner};
use crate::support::db;

/// A token is the prefix and 64 hex digits (32 random bytes).
fn assert_token_shape(token: &str, prefix: &str) {
    let hex = token
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("token {token:?} lacks prefix {prefix}"));
    assert_eq!(hex.len(), 64, "{token}");
    assert!(hex
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
}

/// The token appears nowhere in the data, neither as text nor as hex of its bytes.
fn assert_token_not_stored(t: &db::TestDb, token: &str) {
    let dump = data_dump(t);
    assert!(!dump.contains(token), "token stored in clear");
    assert!(
        !dump.contains(&hex::encode(token.as_bytes())),
        "token stored as bytes"
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn owner_create_prints_a_token_stored_only_as_its_sha256() {
    let t = db::fresh();
    let r = admin(&t, &["owner", "create", "alice"]).ok();
    let id = r.uuid("owner_id");
    let token = r.get("token").to_string();
    assert_token_shape(&token, "own_");
    assert_eq!(r.get("is_admin"), "false");

    let mut c = t.connect();
    let row = c
        .query_one(
            "SELECT name, is_admin, disabled, token_sha256, token_sha256 = sha256(convert_to($2, 'UTF8'))
               FROM owners WHERE id = $1",
            &[&id, &token],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "alice");
    assert!(!row.get::<_, bool>(1));
    assert!(!row.get::<_, bool>(2));
    let digest: Vec<u8> = row.get(3);
    assert_eq!(digest.len(), 32);
    assert!(row.get::<_, bool>(4), "digest is not sha256(token)");
    // The server's own lookup finds the owner by the printed token.
    let found = t
        .pool()
        .read_tx(Stage::Auth, |tx| {
            scanstore::auth::owner(tx, &Secret::new(token.clone()))
        })
        .unwrap()
        .expect("server authenticates the printed token");
    assert_eq!(found.id, id);
    assert!(!found.is_admin);
    assert_token_not_stored(&t, &token);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn owner_create_admin_and_tokens_differ() {
    let t = db::fresh();
    let a = admin(&t, &["owner", "create", "root", "--admin"]).ok();
    let b = admin(&t, &["owner", "create", "bob"]).ok();
    assert_eq!(a.get("is_admin"), "true");
    assert_ne!(a.get("token"), b.get("token"));
    let is_admin: bool = t
        .connect()
        .query_one(
            "SELECT is_admin FROM owners WHERE id = $1",
            &[&a.uuid("owner_id")],
        )
        .unwrap()
        .get(0);
    assert!(is_admin);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn owner_name_with_sql_is_stored_literally() {
    let t = db::fresh();
    let evil = "x'); DROP TABLE owners; --";
    let r = admin(&t, &["owner", "create", evil]).ok();
    let name: String = t
        .connect()
        .query_one(
            "SELECT name FROM owners WHERE id = $1",
            &[&r.uuid("owner_id")],
        )
        .unwrap()
        .get(0);
    assert_eq!(name, evil);
    // psql meta-commands and variable references are not interpreted either.
    for odd in [
        ":'name'",
        "\\! touch /tmp/never",
        "a\"b",
        "$(id)",
        "`id`",
        "ü λ",
    ] {
        let r = admin(&t, &["owner", "create", odd]).ok();
        let name: String = t
            .connect()
            .query_one(
                "SELECT name FROM owners WHERE id = $1",
                &[&r.uuid("owner_id")],
            )
            .unwrap()
            .get(0);
        assert_eq!(name, odd);
    }
    assert_eq!(count(&t, "owners"), 7);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn owner_create_refuses_duplicates_and_bad_names() {
    let t = db::fresh();
    admin(&t, &["owner", "create", "alice"]).ok();
    admin(&t, &["owner", "create", "alice"]).fails_with("an owner named 'alice' already exists");
    admin(&t, &["owner", "create"]).fails_with("missing NAME");
    admin(&t, &["owner", "create", ""]).fails_with("NAME must not be empty");
    admin(&t, &["owner", "create", "a\nb"]).fails_with("control character");
    admin(&t, &["owner", "create", "a", "b"]).fails_with("unexpected argument 'b'");
    admin(&t, &["owner", "create", "a", "--root"]).fails_with("unknown option --root");
    assert_eq!(count(&t, "owners"), 1);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn scanner_create_unrestricted_and_restricted() {
    let t = db::fresh();
    let o = owner(&t, "alice");
    let free = admin(&t, &["scanner", "create", "sc-free"]).ok();
    let bound = admin(&t, &["scanner", "create", "sc-bound", "--owner", &o]).ok();
    assert_eq!(free.get("owner_id"), "");
    assert_eq!(bound.get("owner_id"), o);
    let mut c = t.connect();
    for (r, owner) in [(&free, None), (&bound, Some(o.parse::<Uuid>().unwrap()))] {
        let token = r.get("token");
        assert_token_shape(token, "scn_");
        let found = t
            .pool()
            .read_tx(Stage::Auth, |tx| {
                scanstore::auth::scanner(tx, &Secret::new(token.to_string()))
            })
            .unwrap()
            .expect("server authenticates the printed scanner token");
        assert_eq!(found.id, r.uuid("scanner_id"));
        assert_eq!(found.owner_id, owner);
        let digest: Vec<u8> = c
            .query_one(
                "SELECT token_sha256 FROM scanners WHERE id = $1",
                &[&found.id],
            )
            .unwrap()
            .get(0);
        assert_eq!(digest.len(), 32);
        assert_token_not_stored(&t, token);
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn scanner_create_refuses_unknown_or_malformed_owner() {
    let t = db::fresh();
    let nobody = Uuid::new_v4().to_string();
    admin(&t, &["scanner", "create", "sc", "--owner", &nobody])
        .fails_with(&format!("unknown owner {nobody}"));
    admin(&t, &["scanner", "create", "sc", "--owner", "not-a-uuid"])
        .fails_with("invalid owner id 'not-a-uuid': not a UUID");
    admin(&t, &["scanner", "create", "sc", "--owner"]).fails_with("option --owner needs a value");
    admin(&t, &["scanner", "create"]).fails_with("missing NAME");
    admin(&t, &["scanner", "create", "sc"]).ok();
    admin(&t, &["scanner", "create", "sc"]).fails_with("a scanner named 'sc' already exists");
    assert_eq!(count(&t, "scanners"), 1);
}
