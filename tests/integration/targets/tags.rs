//! Tags: applied to facts and execution documents at upload, re-published to exactly the
//! affected owner asset documents through the outbox, sharing turns with executions.

use serde_json::json;
use uuid::Uuid;

use crate::support::factory;
use crate::support::publish::{assets, outbox_row, worker};
use crate::support::scan::t0;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::stack::Stack;

fn admin(s: &Stack, args: &[&str]) -> String {
    crate::support::admin::admin(&s.db, args).ok().stdout
}

fn tags_of(doc: &serde_json::Value) -> Vec<String> {
    doc["tags"]
        .as_array()
        .map(|a| a.iter().map(|t| t.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn manual() -> Stack {
    Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0
    })
}

#[test]
#[ignore = "needs PostgreSQL"]
fn upload_attaches_the_owners_matching_tags() {
    let s = manual();
    let owner = s.owner.id.to_string();
    admin(&s, &["tag", "add", "--owner", &owner, "10.0.0.0/24", "lab"]);
    admin(&s, &["tag", "add", "--owner", &owner, "10.0.0.1", "web"]);
    admin(
        &s,
        &["tag", "add", "--owner", &owner, "www.example.com", "site"],
    );
    let obs = vec![
        endpoint("10.0.0.1", 443, t0()),
        endpoint("10.0.1.1", 443, t0()),
        scan::dns("www.example.com", "10.0.0.1", t0()),
    ];
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::final_(Uuid::new_v4(), 0, obs),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let es = s.es();
    let facts = format!("{}-facts-*", s.prefix());
    es.post(&format!("/{facts}/_refresh"), &json!({}));
    let (_, hits) = es.post(
        &format!("/{facts}/_search"),
        &json!({"size": 10, "sort": [{"batch_index": "asc"}]}),
    );
    let mut seen: Vec<(String, Vec<String>)> = hits["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let src = &h["_source"];
            let key = src["ip"]
                .as_str()
                .or(src["name"].as_str())
                .unwrap()
                .to_string();
            (key, tags_of(src))
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("10.0.0.1".into(), vec!["lab".into(), "web".into()]),
            ("10.0.1.1".into(), vec![]),
            ("www.example.com".into(), vec!["site".into()]),
        ]
    );
    // Publication carries the tags to the owner's asset document, not the global one.
    crate::support::publish::tick_until_done(&worker(&s), &s, s.execution(), 5);
    let user = assets(&s, "user");
    let tagged: Vec<_> = user
        .iter()
        .map(|(_, d)| (d["ip"].as_str().unwrap().to_string(), tags_of(d)))
        .collect();
    assert!(
        tagged.contains(&("10.0.0.1".into(), vec!["lab".into(), "web".into()])),
        "{tagged:?}"
    );
    assert!(tagged.contains(&("10.0.1.1".into(), vec![])));
    assert!(assets(&s, "global")
        .iter()
        .all(|(_, d)| d.get("tags").is_none()));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_tag_change_is_republished_to_every_affected_document_and_nothing_else() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
        cfg.projection.page_size = 7;
    });
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 300, 100, t0());
    let w = worker(&s);
    crate::support::publish::tick_until_done(&w, &s, s.execution(), 20);
    let before = assets(&s, "user");
    assert_eq!(before.len(), 300);

    let owner = s.owner.id.to_string();
    let out = admin(
        &s,
        &["tag", "add", "--owner", &owner, "10.0.0.0/24", "rack-7"],
    );
    assert!(out.contains("re-publication queued"), "{out}");
    for _ in 0..40 {
        w.tick().unwrap();
    }
    assert!(crate::support::publish::outbox_drained(&s));
    let after = assets(&s, "user");
    for ((id, b), (_, a)) in before.iter().zip(&after) {
        let in_scope = b["ip"].as_str().unwrap().starts_with("10.0.0.");
        let expected: Vec<String> = if in_scope {
            vec!["rack-7".into()]
        } else {
            vec![]
        };
        assert_eq!(tags_of(a), expected, "{id}");
        // Nothing but the tags changed.
        let (mut a, mut b) = (a.clone(), b.clone());
        a.as_object_mut().unwrap().remove("tags");
        b.as_object_mut().unwrap().remove("tags");
        assert_eq!(a, b, "{id}");
    }

    admin(
        &s,
        &["tag", "remove", "--owner", &owner, "10.0.0.0/24", "rack-7"],
    );
    for _ in 0..40 {
        w.tick().unwrap();
    }
    assert!(assets(&s, "user")
        .iter()
        .all(|(_, d)| tags_of(d).is_empty()));
}

#[test]
#[ignore = "needs PostgreSQL"]
fn tag_rows_and_execution_rows_take_turns() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.projection.workers = 0;
        cfg.projection.page_size = 50;
        cfg.projection.pages_per_tick = 1;
    });
    scan::upload_execution(s.base(), &s.scanner.token, s.execution(), 0, 500, 250, t0());
    let w = worker(&s);
    crate::support::publish::tick_until_done(&w, &s, s.execution(), 30);
    // A big execution and a tag change queued behind it.
    let mut c = s.sql();
    let big = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "running");
    scan::upload_execution(
        s.base(),
        &s.scanner.token,
        big.execution_id,
        1000,
        500,
        250,
        t0(),
    );
    let owner = s.owner.id.to_string();
    admin(
        &s,
        &["tag", "add", "--owner", &owner, "10.0.1.0/24", "late"],
    );
    let mut ticks_until_tags = None;
    for n in 1..=30 {
        w.tick().unwrap();
        let tags_done: i64 = c
            .query_one("SELECT count(*) FROM scan_projection_outbox WHERE kind = 'tags' AND processed_at IS NOT NULL", &[])
            .unwrap()
            .get(0);
        if tags_done == 1 && ticks_until_tags.is_none() {
            ticks_until_tags = Some(n);
            assert!(
                outbox_row(&s, big.execution_id)["processed_at"].is_null(),
                "the tag row waited for the whole execution"
            );
        }
    }
    assert!(ticks_until_tags.is_some(), "the tag row never ran");
    assert!(outbox_row(&s, big.execution_id)["processed_at"].is_string());
}

#[test]
#[ignore = "needs PostgreSQL"]
fn targets_are_added_and_removed_by_the_admin_command() {
    let s = manual();
    let owner = s.owner.id.to_string();
    let out = admin(&s, &["target", "add", "--owner", &owner, "10.9.0.5/16"]);
    assert!(
        out.contains("target added") && out.contains("key=10.9.0.0/16"),
        "{out}"
    );
    let out = admin(&s, &["target", "remove", "--owner", &owner, "10.9.0.0/16"]);
    assert!(out.contains("target removed"), "{out}");
    let n: i64 = s
        .sql()
        .query_one("SELECT count(*) FROM search_targets", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    crate::support::admin::admin(
        &s.db,
        &["target", "remove", "--owner", &owner, "10.9.0.0/16"],
    )
    .fails_with("is not a target");
}
