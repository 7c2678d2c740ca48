//! Upgrade by starting the new binary (README "Upgrade and rollback"): a database of the
//! previous release, with queue rows and receipts, is upgraded by `scanstore serve`
//! itself; every legacy row survives unchanged, the stream rows equal a recount, and a
//! second start skips the backfill through the schema marker.

use postgres::Client;
use serde_json::{json, Value};

use scanstore::es::index;

use super::Served;
use crate::support::config_file;
use crate::support::{db, emulator};

/// A digest of every legacy column of `table`, row by row in key order: an upgrade that
/// lost, added or changed a legacy row changes it. `columns` are the table's columns in the
/// previous release (the upgrade may add new ones).
fn digest(c: &mut Client, table: &str, columns: &[String], key: &str) -> (i64, String) {
    let list = columns
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let r = c
        .query_one(
            &format!(
                "SELECT count(*), coalesce(md5(string_agg(row(x.*)::text, '|' ORDER BY {key})), '')
                   FROM (SELECT {list} FROM {table}) x"
            ),
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

fn legacy_columns(c: &mut Client, table: &str) -> Vec<String> {
    c.query(
        "SELECT column_name::text FROM information_schema.columns
          WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
        &[&table],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

const KEPT: [(&str, &str); 4] = [
    ("scan_upload_receipts", "id"),
    ("scan_projection_outbox", "id"),
    ("executions", "id"),
    ("scan_analysis_queue", "execution_id"),
];

#[test]
#[ignore = "needs PostgreSQL"]
fn starting_the_new_binary_upgrades_a_legacy_database_without_losing_rows() {
    let legacy = db::empty();
    let mut c = legacy.connect();
    c.batch_execute(include_str!("../../../schema/legacy_v1.sql"))
        .unwrap();
    c.batch_execute(include_str!("../../sql/legacy_seed.sql"))
        .unwrap();
    let before: Vec<_> = KEPT
        .iter()
        .map(|(t, key)| {
            let cols = legacy_columns(&mut c, t);
            let d = digest(&mut c, t, &cols, key);
            assert!(d.0 > 0, "the seed has rows in {t}");
            (t, key, cols, d)
        })
        .collect();
    drop(c);

    let es = emulator::Emulator::start();
    // No publishers: the legacy outbox rows must be found exactly as they were (a
    // publisher would rightly process them).
    let f = config_file(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[database]\nurl = \"{}\"\n[elasticsearch]\nurl = \"{}\"\nindex_prefix = \"upg{}\"\n{}[projection]\nworkers = 0\n",
        legacy.url,
        es.url(),
        &uuid::Uuid::new_v4().simple().to_string()[..8],
        crate::support::secure::suite_access().toml()
    ));
    let served = Served::start(&f, &[]);
    assert!(legacy.schema_is_current());
    let mut c = legacy.connect();
    for (t, key, cols, d) in &before {
        assert_eq!(
            &digest(&mut c, t, cols, key),
            d,
            "legacy rows of {t} changed"
        );
    }
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
    assert_eq!(
        mismatched, 0,
        "stream rows differ from a recount of the receipts"
    );
    let streams: i64 = c
        .query_one("SELECT count(*) FROM scan_upload_stream", &[])
        .unwrap()
        .get(0);
    assert!(streams > 0, "the backfill created the stream rows");
    // The upgraded queue is served: a legacy unprocessed row is claimable with a lease.
    let claimable: i64 = c
        .query_one(
            "SELECT count(*) FROM scan_projection_outbox o JOIN executions e ON e.id = o.execution_id
              WHERE o.processed_at IS NULL AND e.status = 'succeeded' AND o.claim_token IS NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(claimable > 0);
    served.stop();

    // Between the starts a stream goes dirty; a second start must not backfill again.
    c.batch_execute(
        "UPDATE scan_upload_stream SET dirty = true
          WHERE (execution_id, upload_id) = (SELECT execution_id, upload_id FROM scan_upload_stream
                                              ORDER BY execution_id, upload_id LIMIT 1)",
    )
    .unwrap();
    drop(c);
    let served = Served::start(&f, &[]);
    let mut c = legacy.connect();
    let dirty: i64 = c
        .query_one("SELECT count(*) FROM scan_upload_stream WHERE dirty", &[])
        .unwrap()
        .get(0);
    assert_eq!(dirty, 1, "the second start ran the backfill again");
    for (t, key, cols, d) in &before {
        assert_eq!(
            &digest(&mut c, t, cols, key),
            d,
            "legacy rows of {t} changed on restart"
        );
    }
    served.stop();
}

/// The strict mapping of scanstore's indices before protocol 2's optional fields.
fn mapping_before_details(extra: Value) -> Value {
    let mut properties = json!({
        "ip": {"type": "ip"}, "port": {"type": "integer"}, "transport": {"type": "keyword"},
        "service": {"type": "keyword"}, "product": {"type": "keyword"},
        "version": {"type": "keyword"}, "banner": {"type": "text"},
        "execution_id": {"type": "keyword"}, "owner_id": {"type": "keyword"},
        "tags": {"type": "keyword"}
    });
    for (k, v) in extra.as_object().unwrap() {
        properties[k] = v.clone();
    }
    json!({"mappings": {"dynamic": "strict", "properties": properties}})
}

#[test]
fn indices_of_an_earlier_release_gain_the_new_fields_at_start() {
    let t = emulator::target();
    let es = t.es();
    let prefix = emulator::unique("upg");
    let date = json!({"type": "date"});
    let keyword = json!({"type": "keyword"});
    let facts = format!("{prefix}-facts-2026.11");
    let endpoints = index::execution_endpoints(&prefix);
    let global = index::versioned(&index::assets_global_alias(&prefix), 1);
    let user = index::versioned(&index::assets_user_alias(&prefix), 1);
    es.put(
        &format!("/{facts}"),
        &mapping_before_details(json!({
        "type": keyword, "task_id": keyword, "scanner_id": keyword, "upload_id": keyword,
        "stream": keyword, "batch_index": {"type": "integer"}, "name": keyword,
        "record_type": keyword, "value": keyword, "observed_at": date})),
    );
    es.put(
        &format!("/{endpoints}"),
        &mapping_before_details(json!({"task_id": keyword, "observed_at": date})),
    );
    for (physical, alias) in [
        (&global, index::assets_global_alias(&prefix)),
        (&user, index::assets_user_alias(&prefix)),
    ] {
        es.put(
            &format!("/{physical}"),
            &mapping_before_details(json!({
            "first_seen": date, "last_seen": date, "service_observed_at": date})),
        );
        es.post(
            "/_aliases",
            &json!({"actions": [{"add": {"index": physical, "alias": alias}}]}),
        );
    }
    // As in Elasticsearch, a mapping update whose wildcard matches no index is refused:
    // install names the fact indices one by one.
    let (status, _) = es.put(
        &format!("/{prefix}-nothing-*/_mapping"),
        &json!({"properties": {}}),
    );
    assert_eq!(status, 404);
    // A document with the new fields is refused before.
    let detailed = json!({"ip": "10.0.0.1", "port": 22, "transport": "tcp", "state": "closed",
                          "cpe": ["cpe:/a:openbsd:openssh:8.9p1"],
                          "hostnames": [{"name": "gate.example.com", "source": "ptr"}],
                          "scripts": [{"id": "banner", "output": "SSH-2.0"}], "details_digest": "d"});
    assert_eq!(es.put(&format!("/{endpoints}/_doc/x"), &detailed).0, 400);

    // The suite's access to its cluster, as a scanstore configuration holds it.
    let cfg = crate::support::server::config("postgresql://localhost/unused", es.url());
    let e = &cfg.elasticsearch;
    let client = scanstore::es::EsClient::with_access(
        &e.url,
        e.request_timeout,
        &e.auth,
        e.ca_roots.as_ref(),
        e.ca_fingerprint,
    );
    scanstore::es::setup::install(&client, &prefix, &e.indices).unwrap();

    for (idx, extra) in [
        (
            &facts,
            json!({"os": [{"name": "Linux", "accuracy": 90}], "observed_at": "2026-11-29T10:00:00.000Z"}),
        ),
        (
            &endpoints,
            json!({"observed_at": "2026-11-29T10:00:00.000Z"}),
        ),
        (
            &global,
            json!({"state_observed_at": "2026-11-29T10:00:00.000Z"}),
        ),
        (
            &user,
            json!({"state_observed_at": "2026-11-29T10:00:00.000Z"}),
        ),
    ] {
        let mut doc = detailed.clone();
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        let (status, body) = es.put(&format!("/{idx}/_doc/x"), &doc);
        assert_eq!(status, 201, "{idx}: {body}");
        let (_, m) = es.get(&format!("/{idx}/_mapping"));
        let p = &m[idx.as_str()]["mappings"]["properties"];
        assert_eq!(p["cpe"]["type"], "keyword", "{idx}");
        assert_eq!(
            p["hostnames"]["properties"]["name"]["type"], "keyword",
            "{idx}"
        );
        assert_eq!(
            p["ip"]["type"], "ip",
            "{idx}: existing fields keep their type"
        );
        assert_eq!(
            p["banner"]["fields"]["words"]["analyzer"], "simple",
            "{idx}: the banner gains its words"
        );
        let (_, t) = es.post(
            &format!("/{idx}/_analyze"),
            &json!({"field": "banner.words", "text": "SSH-2.0-OpenSSH_8.9p1"}),
        );
        assert_eq!(t["tokens"][1]["token"], "openssh", "{idx}: {t}");
    }
    // Installing again changes nothing and fails nothing.
    scanstore::es::setup::install(&client, &prefix, &e.indices).unwrap();
}
