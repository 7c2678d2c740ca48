//! How scanstore's indices spread over a cluster (issue #35, "ready for more than one
//! machine"): the configured shard and replica counts and the facts' refresh interval reach
//! every index family it creates — the monthly facts through their template, the execution
//! endpoints, both asset views' v1 and a rebuild's next version — and a start with other
//! replicas and refresh interval puts them on the live indices, whose shard counts stay.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::emulator::{target, Es};
use crate::support::logs;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::stack::Stack;
use crate::support::wait_for;
use scanstore::config::IndexShape;
use uuid::Uuid;

/// `settings.index` of every index `expr` names, by index.
fn settings(es: &Es, expr: &str) -> Vec<(String, Value)> {
    let (status, body) = es.get(&format!("/{expr}/_settings"));
    assert_eq!(status, 200, "{body}");
    let mut out: Vec<(String, Value)> = body
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, v)| (name.clone(), v["settings"]["index"].clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// (shards, replicas, refresh interval) of one index, as the cluster reports them.
fn shape_of(es: &Es, index: &str) -> (String, String, Value) {
    let s = &settings(es, index)[0].1;
    (
        s["number_of_shards"].as_str().unwrap().to_owned(),
        s["number_of_replicas"].as_str().unwrap().to_owned(),
        s.get("refresh_interval").cloned().unwrap_or(Value::Null),
    )
}

fn upload_and_publish(s: &Stack) {
    let up = Uuid::new_v4();
    let at = scan::t0_plus(-1);
    let obs: Vec<Value> = (0..40)
        .map(|i| endpoint(&scan::nth_ip(i), 443, &at))
        .collect();
    for batch in [Batch::main(up, 0, obs), Batch::final_(up, 1, vec![])] {
        let r = scan::post(s.base(), &s.scanner.token, s.execution(), &batch);
        assert_eq!(r.status, 200, "{}", r.body);
    }
    wait_for("publication", Duration::from_secs(60), || {
        crate::support::publish::outbox_drained(s)
    });
}

#[test]
#[ignore = "needs PostgreSQL"]
fn configured_shards_reach_every_index_family_and_changed_replicas_reach_live_indices() {
    let s = Stack::build(target(), "port_scan", |cfg| {
        let i = &mut cfg.elasticsearch.indices;
        i.facts = IndexShape {
            shards: 3,
            replicas: 0,
            refresh_interval: Some(Duration::from_secs(30)),
        };
        i.execution_endpoints.shards = 2;
        i.assets = IndexShape {
            shards: 4,
            replicas: 0,
            refresh_interval: None,
        };
    });
    let (es, prefix) = (s.es(), s.prefix());
    upload_and_publish(&s);
    let months = settings(&es, &format!("{prefix}-facts-*"));
    assert!(!months.is_empty(), "no facts index");
    for (month, i) in &months {
        assert_eq!(
            (&i["number_of_shards"], &i["number_of_replicas"]),
            (&json!("3"), &json!("0")),
            "{month}"
        );
        assert_eq!(i["refresh_interval"], "30000ms", "{month}");
    }
    let endpoints = format!("{prefix}-execution-endpoints");
    assert_eq!(
        shape_of(&es, &endpoints),
        ("2".into(), "1".into(), Value::Null)
    );
    for view in ["global", "user"] {
        let v1 = format!("{prefix}-assets-{view}-v1");
        assert_eq!(shape_of(&es, &v1), ("4".into(), "0".into(), Value::Null));
    }
    // Everything reads as it would from one shard.
    assert_eq!(
        es.refreshed_count(&format!("{prefix}-assets-global"), json!({"match_all": {}})),
        40
    );
    assert_eq!(s.endpoint_docs(), 40);

    // A rebuild's new version takes the configured shape, as v1 did.
    let app = s.server.app();
    let opts = scanstore::rebuild::Options {
        settle_timeout: Duration::from_secs(60),
        rounds: 20,
    };
    scanstore::rebuild::rebuild(app, opts).expect("rebuild");
    for view in ["global", "user"] {
        let v2 = format!("{prefix}-assets-{view}-v2");
        assert_eq!(shape_of(&es, &v2).0, "4", "{v2}");
    }

    // The next start with other shapes: replicas and the refresh interval change on the
    // live indices, the shard counts stay (and are reported), new months take them all.
    let mut changed = app.config.elasticsearch.indices;
    changed.facts = IndexShape {
        shards: 5,
        replicas: 1,
        refresh_interval: Some(Duration::from_millis(1500)),
    };
    changed.execution_endpoints = IndexShape {
        shards: 1,
        replicas: 0,
        refresh_interval: None,
    };
    changed.assets.replicas = 1;
    scanstore::es::setup::install(&app.es, &prefix, &changed).unwrap();
    for (month, i) in settings(&es, &format!("{prefix}-facts-*")) {
        assert_eq!(
            (
                &i["number_of_shards"],
                &i["number_of_replicas"],
                &i["refresh_interval"]
            ),
            (&json!("3"), &json!("1"), &json!("1500ms")),
            "{month}"
        );
    }
    assert_eq!(
        shape_of(&es, &endpoints),
        ("2".into(), "0".into(), Value::Null)
    );
    // The versions behind the aliases are scanstore's; an older one is left as it is.
    assert_eq!(shape_of(&es, &format!("{prefix}-assets-user-v2")).1, "1");
    assert_eq!(shape_of(&es, &format!("{prefix}-assets-user-v1")).1, "0");
    let kept = logs::lines_with(&["event=IndexShardsKept", &endpoints]);
    assert!(
        kept.iter()
            .any(|l| l.contains("shards=2") && l.contains("configured=1")),
        "{kept:?}"
    );
    assert!(!logs::lines_with(&[
        "event=IndexSettingsChanged",
        &endpoints,
        "number_of_replicas=1->0"
    ])
    .is_empty());
    // A month created from now on has the new shape whole.
    let next = format!("{prefix}-facts-2099.01");
    let (status, v) = es.put(&format!("/{next}"), &json!({}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        shape_of(&es, &next),
        ("5".into(), "1".into(), json!("1500ms"))
    );
    es.delete(&format!("/{next}"));
}
