//! Protocol 2's optional fields end to end: what a scanner knows beyond the service (state,
//! hostnames, CPEs, extra info, tunnel, confidence, scripts) and host observations with OS
//! guesses are validated, stored in the facts and the execution projection, merged into
//! the assets, shown and filtered by the read APIs; what breaks a limit is refused whole.

use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::publish::{tick_until_done, worker};
use crate::support::read::ok;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::stack::Stack;

fn ssh(observed_at: &str) -> Value {
    let mut e = endpoint("10.0.0.1", 22, observed_at);
    e["service"] = json!("ssh");
    e["product"] = json!("OpenSSH");
    e["version"] = json!("8.9p1");
    e["banner"] = json!("SSH-2.0-OpenSSH_8.9p1");
    e["cpe"] = json!(["cpe:/a:openbsd:openssh:8.9p1", "cpe:/o:linux:linux_kernel"]);
    e["hostnames"] = json!([
        {"name": "Gate.Example.com", "source": "user"},
        {"name": "gate.example.com", "source": "user"},
        {"name": "1.0.0.10.in-addr.example.net", "source": "ptr"}
    ]);
    e["extra_info"] = json!("Ubuntu Linux; protocol 2.0");
    e["confidence"] = json!(10);
    e["scripts"] = json!([{"id": "ssh-hostkey", "output": "256 SHA256:abc (ED25519)"}]);
    e
}

fn hit_sources(v: &Value) -> Vec<Value> {
    v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["_source"].clone())
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL"]
fn details_flow_through_facts_projection_assets_and_filters() {
    let s = Stack::new("port_scan");
    let (base, token) = (s.base().to_string(), s.scanner.token.clone());
    let mut https = endpoint("10.0.0.1", 443, t0());
    https["tunnel"] = json!("ssl");
    https["state"] = json!("open");
    let mut filtered = endpoint("10.0.0.2", 8080, t0());
    filtered["state"] = json!("filtered");
    filtered.as_object_mut().unwrap().remove("product");
    let host = json!({"type": "host", "ip": "10.0.0.1", "observed_at": t0(),
                      "os": [{"name": "Linux 5.0 - 5.14", "accuracy": 98}],
                      "hostnames": [{"name": "gate.example.com", "source": "user"}]});
    let fin = Batch::final_(Uuid::new_v4(), 0, vec![ssh(t0()), https, filtered, host]);
    let r = scan::post(&base, &token, s.execution(), &fin);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["saved"], 4);
    let row = s
        .sql()
        .query_one(
            "SELECT observation_count, endpoint_count, dns_record_count FROM scan_upload_receipts WHERE execution_id = $1",
            &[&s.execution()],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i32>(0),
            row.get::<_, i32>(1),
            row.get::<_, i32>(2)
        ),
        (4, 3, 0)
    );

    // The facts: the host observation is a fact of its own; names are stored lower case,
    // once; open is stored as no state.
    let es = s.es();
    let facts = es.post(
        &format!("/{}-facts-*/_search", s.prefix()),
        &json!({"size": 10, "sort": [{"port": "asc"}],
                "query": {"term": {"execution_id": s.execution().to_string()}}}),
    );
    let facts = hit_sources(&facts.1);
    let host = facts.iter().find(|f| f["type"] == "host").unwrap();
    assert_eq!(host["os"][0]["accuracy"], 98);
    let ssh_fact = facts.iter().find(|f| f["port"] == 22).unwrap();
    assert_eq!(
        ssh_fact["hostnames"],
        json!([
            {"name": "gate.example.com", "source": "user"},
            {"name": "1.0.0.10.in-addr.example.net", "source": "ptr"}
        ])
    );
    assert!(ssh_fact.get("state").is_none());
    assert_eq!(
        facts
            .iter()
            .find(|f| f["port"] == 443)
            .unwrap()
            .get("state"),
        None
    );
    assert_eq!(
        facts.iter().find(|f| f["port"] == 8080).unwrap()["state"],
        "filtered"
    );

    // The execution's results show them.
    let task = s.run.task_id;
    let results = ok(
        &base,
        &s.owner.token,
        &format!("/api/v1/tasks/{task}/results"),
    );
    let ep = &results["ips"][0]["endpoints"];
    let ssh_ep = ep
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["port"] == 22)
        .unwrap();
    assert_eq!(ssh_ep["state"], "open");
    assert_eq!(ssh_ep["cpe"][0], "cpe:/a:openbsd:openssh:8.9p1");
    assert_eq!(ssh_ep["scripts"][0]["id"], "ssh-hostkey");
    assert_eq!(ssh_ep["confidence"], 10);
    assert!(
        ssh_ep.get("details_digest").is_none(),
        "an internal field is not shown"
    );

    // Published: the assets carry them, and the read filters find them.
    tick_until_done(&worker(&s), &s, s.execution(), 50);
    let assets = |query: &str| -> Vec<(String, u64)> {
        ok(&base, &s.owner.token, &format!("/api/v1/assets?{query}"))["assets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["ip"].as_str().unwrap().to_string(),
                    a["port"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let all = ok(&base, &s.owner.token, "/api/v1/assets?status=all");
    let a22 = all["assets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["port"] == 22)
        .unwrap();
    assert_eq!(a22["extra_info"], "Ubuntu Linux; protocol 2.0");
    assert_eq!(a22["hostnames"][0]["name"], "gate.example.com");
    assert_eq!(a22["state"], "open");
    let a8080 = all["assets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["port"] == 8080)
        .unwrap();
    assert_eq!(a8080["state"], "filtered");
    assert!(a8080["first_seen"].is_null(), "never seen open");
    let one = |ip: &str, port: u64| vec![(ip.to_string(), port)];
    assert_eq!(assets("state=filtered"), one("10.0.0.2", 8080));
    assert_eq!(
        assets("state=open"),
        vec![("10.0.0.1".into(), 22), ("10.0.0.1".into(), 443)]
    );
    assert_eq!(assets("cpe=cpe:/a:openbsd:openssh"), one("10.0.0.1", 22));
    assert_eq!(assets("cpe=CPE:/o:linux:linux_kernel"), one("10.0.0.1", 22));
    assert_eq!(assets("product=OpenSSH&version=8.9p1"), one("10.0.0.1", 22));
    assert_eq!(assets("hostname=GATE.example.com"), one("10.0.0.1", 22));
    assert!(assets("cpe=cpe:/a:nginx").is_empty());
    let found = ok(&base, &s.owner.token, "/api/v1/search?q=ED25519");
    assert_eq!(
        found["assets"][0]["port"], 22,
        "search reads script output: {found}"
    );
    let bad = crate::support::read::get(&base, &s.owner.token, "/api/v1/assets?state=half-open");
    assert_eq!(bad.status, 400);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_detail_that_breaks_a_limit_refuses_the_whole_batch() {
    let s = Stack::new("port_scan");
    let (base, token) = (s.base().to_string(), s.scanner.token.clone());
    let bad: Vec<(&str, Value)> = vec![
        ("state", json!("half-open")),
        ("cpe", json!(["nginx 1.24"])),
        (
            "cpe",
            json!((0..33)
                .map(|i| format!("cpe:/a:x:y:{i}"))
                .collect::<Vec<_>>()),
        ),
        ("confidence", json!(11)),
        ("tunnel", json!("SSL")),
        ("extra_info", json!("x".repeat(257))),
        (
            "hostnames",
            json!([{"name": "not a name", "source": "user"}]),
        ),
        (
            "hostnames",
            json!([{"name": "a.example.com", "source": "guess"}]),
        ),
        ("scripts", json!([{"id": "Bad Id", "output": ""}])),
        (
            "scripts",
            json!([{"id": "x", "output": "y".repeat(16 * 1024 + 1)}]),
        ),
    ];
    for (field, value) in bad {
        let mut e = endpoint("10.0.0.1", 22, t0());
        e[field] = value;
        let b = Batch::main(Uuid::new_v4(), 0, vec![endpoint("10.0.0.3", 80, t0()), e]);
        let r = scan::post(&base, &token, s.execution(), &b);
        assert_eq!(r.status, 400, "{field}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "bad_field");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("observations[1]"), "{message}");
    }
    let host = |v: Value| {
        let mut h = json!({"type": "host", "ip": "10.0.0.1", "observed_at": t0()});
        for (k, x) in v.as_object().unwrap() {
            h[k] = x.clone();
        }
        h
    };
    for h in [
        host(json!({"os": [{"name": "Linux", "accuracy": 101}]})),
        host(
            json!({"os": (0..9).map(|_| json!({"name": "Linux", "accuracy": 1})).collect::<Vec<_>>()}),
        ),
        host(json!({"os": [{"name": "", "accuracy": 1}]})),
        host(json!({"port": 22})),
    ] {
        let r = scan::post(
            &base,
            &token,
            s.execution(),
            &Batch::main(Uuid::new_v4(), 0, vec![h]),
        );
        assert_eq!(r.status, 400, "{}", r.body);
    }
    // A host outside the task's targets is out of scope like an endpoint.
    let outside = host(json!({"ip": "203.0.114.1"}));
    let r = scan::post(
        &base,
        &token,
        s.execution(),
        &Batch::main(Uuid::new_v4(), 0, vec![outside]),
    );
    assert_eq!(
        (r.status, r.body["error"]["code"].as_str()),
        (422, Some("out_of_scope"))
    );
    assert!(s.receipts().is_empty());
    assert_eq!(s.fact_count(), 0);
}
