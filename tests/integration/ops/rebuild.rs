//! `scanstore rebuild-assets` (seed 003): the next version is built while uploads and live
//! publication go on, verified document by document, and switched to with one atomic
//! `_aliases` request; switch-back is refused with PROJECTION_MISMATCH until `catch-up`;
//! `drop` never deletes an aliased index.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use super::bin;
use crate::support::emulator::{Es, Target};
use crate::support::factory;
use crate::support::publish::outbox_row;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::secure::suite_access;
use crate::support::stack::Stack;
use crate::support::wait_for;
use crate::support::{config_file, TempFile};
use scanstore::rebuild::{self, Options};

fn opts() -> Options {
    Options {
        settle_timeout: Duration::from_secs(60),
        rounds: 20,
    }
}

/// Every document of one physical index, by id.
fn docs(es: &Es, index: &str) -> Vec<(String, Value)> {
    es.post(&format!("/{index}/_refresh"), &json!({}));
    let (status, body) = es.post(
        &format!("/{index}/_search"),
        &json!({"size": 10000, "query": {"match_all": {}}}),
    );
    assert_eq!(status, 200, "{body}");
    let mut out: Vec<(String, Value)> = body["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_id"].as_str().unwrap().to_string(),
                scanstore::rebuild::verify::normalise(&h["_source"]),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn physical(s: &Stack, view: &str, version: u32) -> String {
    format!("{}-assets-{view}-v{version}", s.prefix())
}

/// Where an alias points, as the cluster says.
fn points_at(s: &Stack, view: &str) -> Vec<String> {
    let (status, body) = s.es().get(&format!("/_alias/{}-assets-{view}", s.prefix()));
    assert_eq!(status, 200, "{body}");
    let mut v: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
    v.sort();
    v
}

/// The old and the new version hold the same documents, field by field.
fn assert_same(s: &Stack, a: u32, b: u32) {
    for view in ["global", "user"] {
        let (x, y) = (
            docs(&s.es(), &physical(s, view, a)),
            docs(&s.es(), &physical(s, view, b)),
        );
        assert!(!x.is_empty(), "{view} v{a} is empty");
        assert_eq!(x.len(), y.len(), "{view}: v{a} and v{b} differ in size");
        for (d, e) in x.iter().zip(&y) {
            assert_eq!(d, e, "{view}: v{a} and v{b} differ");
        }
    }
}

/// A running execution of a new port-scan task of the stack's owner.
fn new_execution(s: &Stack) -> Uuid {
    factory::task(
        &mut s.sql(),
        s.owner.id,
        s.scanner.id,
        "port_scan",
        "running",
    )
    .execution_id
}

/// Uploads execution number `n`: 30 endpoints overlapping the previous execution's, with
/// its own observation time and service, so merges of first/last seen and service matter.
fn upload_nth(s: &Stack, n: usize) -> Uuid {
    let execution = new_execution(s);
    let up = Uuid::new_v4();
    // Later executions observe later, within the last four weeks.
    let at = scan::t0_plus(-24 * (27 - (n * 7) % 28) as i64);
    let obs: Vec<Value> = (0..30)
        .map(|i| {
            let mut e = endpoint(&scan::nth_ip(n * 10 + i), 443, &at);
            e["service"] = json!(format!("svc{}", n % 3));
            e
        })
        .collect();
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        execution,
        &Batch::main(up, 0, obs),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        execution,
        &Batch::final_(up, 1, vec![]),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    execution
}

fn add_tag(s: &Stack, ip: &str, tag: &str) {
    s.sql()
        .batch_execute(&format!(
            "BEGIN;
             INSERT INTO asset_tags (owner_id, kind, key, tag) VALUES ('{o}', 'ip', '{ip}', '{tag}');
             INSERT INTO scan_projection_outbox (kind, owner_id, tag_scope)
                  VALUES ('tags', '{o}', jsonb_build_object('kind', 'ip', 'key', '{ip}'));
             COMMIT;",
            o = s.owner.id
        ))
        .unwrap();
}

fn stack() -> Stack {
    Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.page_size = 7;
        cfg.projection.pages_per_tick = 2;
    })
}

#[test]
#[ignore = "needs PostgreSQL"]
fn rebuild_during_uploads_and_live_publication_verifies_and_switches_atomically() {
    let s = stack();
    for n in 0..6 {
        upload_nth(&s, n);
    }
    add_tag(&s, &scan::nth_ip(12), "prod");
    wait_for("initial publication", Duration::from_secs(60), || {
        crate::support::publish::outbox_drained(&s)
    });

    // Uploads (and the server's publisher) keep going while the rebuild runs.
    let done = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let uploader = {
        let (base, token) = (s.base().to_string(), s.scanner.token.clone());
        let executions: Vec<Uuid> = (0..10).map(|_| new_execution(&s)).collect();
        let (done, finished) = (done.clone(), finished.clone());
        std::thread::spawn(move || {
            for (k, execution) in executions.into_iter().enumerate() {
                let n = 6 + k;
                let at = scan::t0_plus(-24 * 27 - 1 - n as i64);
                let up = Uuid::new_v4();
                let obs: Vec<Value> = (0..30)
                    .map(|i| endpoint(&scan::nth_ip(n * 10 + i), 443, &at))
                    .collect();
                assert_eq!(
                    scan::post(&base, &token, execution, &Batch::main(up, 0, obs)).status,
                    200
                );
                assert_eq!(
                    scan::post(&base, &token, execution, &Batch::final_(up, 1, vec![])).status,
                    200
                );
                finished.lock().unwrap().push(Instant::now());
                if done.load(Ordering::SeqCst) {
                    break;
                }
                // Paced on purpose: the uploads spread over the whole rebuild.
                std::thread::sleep(Duration::from_millis(40));
            }
        })
    };
    wait_for(
        "the first concurrent upload",
        Duration::from_secs(30),
        || !finished.lock().unwrap().is_empty(),
    );
    let tagger = {
        let s_owner = s.owner.id;
        let url = s.db.url.clone();
        let (es, next) = (s.es(), format!("/{}", physical(&s, "user", 2)));
        std::thread::spawn(move || {
            // The tag changes while the rebuild copies: once its new version exists.
            wait_for("the rebuild's new version", Duration::from_secs(60), || {
                es.head(&next) == 200
            });
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.batch_execute(&format!(
                "BEGIN;
                 INSERT INTO asset_tags (owner_id, kind, key, tag) VALUES ('{s_owner}', 'cidr', '10.0.0.0/24', 'lab');
                 INSERT INTO scan_projection_outbox (kind, owner_id, tag_scope)
                      VALUES ('tags', '{s_owner}', jsonb_build_object('kind', 'cidr', 'key', '10.0.0.0/24'));
                 COMMIT;"
            ))
            .unwrap();
        })
    };
    let alias_posts = || match &s.target {
        Target::Emulator(e) => Some(e.requests(Some("POST"), Some("/_aliases")).count),
        Target::Real(_) => None,
    };
    let posts_before = alias_posts();
    let started = Instant::now();
    let outcome = rebuild::rebuild(s.server.app(), opts()).expect("rebuild");
    let ended = Instant::now();
    done.store(true, Ordering::SeqCst);
    uploader.join().unwrap();
    tagger.join().unwrap();
    let during = finished
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t > started && **t < ended)
        .count();
    assert!(during > 0, "no upload finished while the rebuild ran");
    assert_eq!((outcome.current, outcome.previous), (2, Some(1)));
    assert!(outcome.documents_compared > 0);

    // Both aliases moved together, and the old version is kept.
    assert_eq!(points_at(&s, "global"), vec![physical(&s, "global", 2)]);
    assert_eq!(points_at(&s, "user"), vec![physical(&s, "user", 2)]);
    assert_eq!(s.es().head(&format!("/{}", physical(&s, "user", 1))), 200);
    if let (Some(before), Some(after)) = (posts_before, alias_posts()) {
        assert_eq!(after - before, 1, "the switch is one _aliases request");
    }

    // Everything uploaded is in the new current version, merged and tagged as live
    // publication does it; live publication now writes there.
    wait_for(
        "publication after the rebuild",
        Duration::from_secs(60),
        || crate::support::publish::outbox_drained(&s),
    );
    let current = docs(&s.es(), &physical(&s, "user", 2));
    let uploaded = finished.lock().unwrap().len();
    let distinct_ips = (0..6 + uploaded)
        .flat_map(|n| (0..30).map(move |i| n * 10 + i))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(current.len(), distinct_ips);
    let tagged = current
        .iter()
        .find(|(id, _)| id.ends_with(&format!("-{}-tcp-443", scan::nth_ip(12))))
        .unwrap();
    let tags = tagged.1["tags"].as_array().unwrap();
    assert!(
        tags.contains(&json!("prod")) && tags.contains(&json!("lab")),
        "{tagged:?}"
    );

    // Final comparison: the old version, caught up, equals the new one document by document.
    rebuild::catch_up(s.server.app(), 1, None, opts()).expect("catch-up of v1");
    assert_same(&s, 1, 2);
}

/// A config file for the CLI on this stack's database, cluster and prefix.
fn cli_config(s: &Stack) -> TempFile {
    config_file(&format!(
        "[database]\nurl = \"{}\"\n[elasticsearch]\nurl = \"{}\"\nindex_prefix = \"{}\"\n{}",
        s.db.url,
        s.es().url(),
        s.prefix(),
        suite_access().toml()
    ))
}

fn run(f: &TempFile, args: &[&str]) -> (i32, String, String) {
    let out = bin()
        .arg("rebuild-assets")
        .args(args)
        .arg("--config")
        .arg(&f.0)
        .arg("--settle-timeout")
        .arg("60")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs PostgreSQL"]
fn switch_back_is_refused_until_the_old_version_is_caught_up_and_drop_spares_aliased_indices() {
    let s = stack();
    let f = cli_config(&s);
    upload_nth(&s, 0);
    wait_for("publication", Duration::from_secs(60), || {
        crate::support::publish::outbox_drained(&s)
    });

    let (code, out, err) = run(&f, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("current=v2") && out.contains("previous=v1"),
        "{out}"
    );
    assert_eq!(points_at(&s, "user"), vec![physical(&s, "user", 2)]);

    // A newer execution is published into v2 only: v1 now lacks it.
    let newer = upload_nth(&s, 1);
    wait_for("publication into v2", Duration::from_secs(60), || {
        outbox_row(&s, newer)["processed_at"].is_string()
    });
    let (code, out, err) = run(&f, &["switch-back", "--to", "v1"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("PROJECTION_MISMATCH"), "{err}");
    // The first differing ids are named with what differs: the endpoints both executions
    // saw come first (address order), merged with the newer observation only in v2.
    assert!(
        err.contains(&format!("global:{}-tcp-443 (differs in", scan::nth_ip(10))),
        "{err}"
    );
    assert!(err.contains("last_seen"), "{err}");
    assert!(
        err.contains("20 missing, 0 extra, 40 differing"),
        "10 endpoints only the newer execution saw, 20 both saw, in both views: {err}"
    );
    assert_eq!(
        points_at(&s, "global"),
        vec![physical(&s, "global", 2)],
        "nothing switched"
    );
    assert_eq!(
        points_at(&s, "user"),
        vec![physical(&s, "user", 2)],
        "nothing switched"
    );

    // The aliased index cannot be dropped.
    let (code, _, err) = run(&f, &["drop", "--index", &physical(&s, "user", 2)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("behind alias"), "{err}");
    assert_eq!(s.es().head(&format!("/{}", physical(&s, "user", 2))), 200);

    // Catch-up re-publishes what v1 lacks and verifies it; then switch-back succeeds.
    let (code, out, err) = run(&f, &["catch-up", "--to", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("caught_up=v1"), "{out}");
    assert_same(&s, 1, 2);
    let (code, out, err) = run(&f, &["switch-back", "--to", "v1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("current=v1"), "{out}");
    assert_eq!(points_at(&s, "global"), vec![physical(&s, "global", 1)]);
    assert_eq!(points_at(&s, "user"), vec![physical(&s, "user", 1)]);

    // Live publication follows the aliases back to v1.
    let third = upload_nth(&s, 2);
    wait_for("publication into v1", Duration::from_secs(60), || {
        outbox_row(&s, third)["processed_at"].is_string()
    });
    let ip = scan::nth_ip(25);
    assert!(docs(&s.es(), &physical(&s, "global", 1))
        .iter()
        .any(|(id, _)| id == &format!("{ip}-tcp-443")));

    // Now v2 is not aliased: it may be dropped, explicitly, and the status shows it gone.
    let (code, out, err) = run(&f, &["drop", "--index", &physical(&s, "user", 2)]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(s.es().head(&format!("/{}", physical(&s, "user", 2))), 404);
    let (code, out, _) = run(&f, &["status"]);
    assert_eq!(code, 0);
    assert!(out.contains("current=v1"), "{out}");
    assert!(
        !out.contains(&format!("index={}", physical(&s, "user", 2))),
        "{out}"
    );
    // A name that is not one of ours is refused.
    let (code, _, err) = run(
        &f,
        &[
            "drop",
            "--index",
            &format!("{}-execution-endpoints", s.prefix()),
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("not a versioned asset index"), "{err}");
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_rebuild_without_live_publication_settling_switches_nothing() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
    });
    let execution = upload_nth(&s, 0);
    let oldest: i64 = outbox_row(&s, execution)["id"].as_i64().unwrap();
    let err = rebuild::rebuild(
        s.server.app(),
        Options {
            settle_timeout: Duration::from_secs(1),
            rounds: 2,
        },
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&format!("oldest id {oldest}")), "{text}");
    assert!(!err.is_mismatch());
    assert_eq!(points_at(&s, "user"), vec![physical(&s, "user", 1)]);
    // The half-built version stays for inspection and can be dropped.
    rebuild::drop_index(s.server.app(), &physical(&s, "user", 2)).unwrap();
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_restart_after_a_rebuild_keeps_the_aliases_and_does_not_recreate_a_dropped_v1() {
    let s = stack();
    upload_nth(&s, 0);
    wait_for("publication", Duration::from_secs(60), || {
        crate::support::publish::outbox_drained(&s)
    });
    rebuild::rebuild(s.server.app(), opts()).expect("rebuild");
    rebuild::drop_index(s.server.app(), &physical(&s, "global", 1)).unwrap();
    rebuild::drop_index(s.server.app(), &physical(&s, "user", 1)).unwrap();
    let app = s.server.app();
    scanstore::es::setup::install(&app.es, &s.prefix(), &app.config.elasticsearch.indices).unwrap();
    assert_eq!(points_at(&s, "user"), vec![physical(&s, "user", 2)]);
    assert_eq!(s.es().head(&format!("/{}", physical(&s, "user", 1))), 404);
}
