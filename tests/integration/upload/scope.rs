//! What an execution may report: addresses within its task's targets (or answers to its
//! domain targets), times within the observation window, IPv4-mapped addresses as IPv4.
//! A refused batch is refused whole and leaves nothing behind.

use serde_json::json;
use uuid::Uuid;

use crate::support::factory;
use crate::support::read;
use crate::support::scan::t0;
use crate::support::scan::{self, dns, endpoint, Batch};
use crate::support::server::Got;
use crate::support::stack::Stack;

fn assert_nothing_written(s: &Stack) {
    assert!(s.receipts().is_empty(), "a refused batch left a receipt");
    assert_eq!(s.fact_count(), 0, "a refused batch left a document");
}

fn refusal(r: &Got, status: u16, code: &str) -> Vec<u64> {
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.body["error"]["code"], code, "{}", r.body);
    r.body["error"]["details"]["positions"]
        .as_array()
        .unwrap_or_else(|| panic!("no positions: {}", r.body))
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect()
}

/// A stack whose task's targets are the rows `targets` selects ($1: the task), analysed.
fn with_targets(targets: &str) -> (Stack, postgres::Client, Uuid) {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let task = s.run.task_id;
    c.execute("DELETE FROM task_targets WHERE task_id = $1", &[&task])
        .unwrap();
    c.execute(
        &format!("INSERT INTO task_targets (task_id, kind, value) {targets}"),
        &[&task],
    )
    .unwrap();
    c.batch_execute("ANALYZE task_targets").unwrap();
    (s, c, task)
}

/// Sends a main batch of endpoints at `sent` (address, port), which must be refused as
/// out of scope at exactly `outside` with nothing written, then a final of the others,
/// which must be stored whole.
fn only_in_scope_stored(s: &Stack, sent: &[(&str, u16)], outside: &[u64]) {
    let up = Uuid::new_v4();
    let batch = |inside_only: bool| {
        sent.iter()
            .enumerate()
            .filter(|(i, _)| !inside_only || !outside.contains(&(*i as u64)))
            .map(|(_, (ip, port))| endpoint(ip, *port, t0()))
            .collect::<Vec<_>>()
    };
    let post = |b: &Batch| scan::post(s.base(), &s.scanner.token, s.execution(), b);
    let r = post(&Batch::main(up, 0, batch(false)));
    assert_eq!(refusal(&r, 422, "out_of_scope"), outside);
    assert_nothing_written(s);
    let stored = batch(true);
    let r = post(&Batch::final_(up, 0, stored.clone()));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.fact_count(), stored.len() as u64);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_address_outside_the_tasks_targets_refuses_the_whole_batch() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    c.execute(
        "DELETE FROM task_targets WHERE task_id = $1",
        &[&s.run.task_id],
    )
    .unwrap();
    c.execute(
        "INSERT INTO task_targets (task_id, kind, value)
         VALUES ($1, 'cidr', '198.51.100.0/24'), ($1, 'ip', '192.0.2.7'), ($1, 'cidr', '2001:db8::/64')",
        &[&s.run.task_id],
    )
    .unwrap();
    let up = Uuid::new_v4();
    let mixed = vec![
        endpoint("198.51.100.1", 443, t0()),
        endpoint("198.51.101.1", 443, t0()),
        endpoint("192.0.2.7", 22, t0()),
        endpoint("192.0.2.8", 22, t0()),
        endpoint("2001:db8::5", 80, t0()),
        endpoint("2001:db8:0:1::5", 80, t0()),
    ];
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::main(up, 0, mixed),
    );
    assert_eq!(refusal(&r, 422, "out_of_scope"), [1, 3, 5]);
    assert_eq!(r.body["error"]["details"]["count"], 3);
    assert_nothing_written(&s);

    // The same upload goes on with what is in scope, down to the edges of the networks.
    let inside = vec![
        endpoint("198.51.100.0", 443, t0()),
        endpoint("198.51.100.255", 443, t0()),
        endpoint("192.0.2.7", 22, t0()),
        endpoint("::ffff:198.51.100.3", 22, t0()),
        endpoint("2001:db8::ffff:ffff:ffff:ffff", 80, t0()),
    ];
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::final_(up, 0, inside),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.fact_count(), 5);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_task_of_50k_addresses_is_read_only_as_far_as_a_batch_names_them() {
    let (s, mut c, task) = with_targets(
        "SELECT $1::uuid, 'ip', host('10.0.0.0'::inet + i) FROM generate_series(0, 49999) AS i
         UNION ALL VALUES ($1, 'cidr', '198.51.100.0/24'), ($1, 'ip', '::ffff:192.0.2.9')",
    );
    // What a batch reads of it: the network and the mark of a long list, then of the
    // addresses it names only those listed, not 50 000.
    use scanstore::upload::coverage::{NAMED_TARGETS, TARGETS};
    let rows = c.query(TARGETS, &[&task, &1000i64]).unwrap();
    assert_eq!(rows.len(), 2, "the CIDR and the long list's mark");
    assert!(rows.iter().any(|r| r.get::<_, Option<bool>>(0).is_none()));
    let named: Vec<std::net::IpAddr> =
        vec!["10.0.0.7".parse().unwrap(), "10.9.9.9".parse().unwrap()];
    let rows = c
        .query(NAMED_TARGETS, &[&task, &named, &true, &false])
        .unwrap();
    assert_eq!(rows.len(), 1, "the one listed address the batch names");

    // Past the last listed address, and another family's: outside. A mapped spelling of a
    // listed IPv4 address, and the IPv4 spelling of a listed mapped one: inside.
    only_in_scope_stored(
        &s,
        &[
            ("10.0.0.7", 443),
            ("::ffff:10.0.1.2", 443),
            ("10.0.195.80", 443),
            ("198.51.100.4", 22),
            ("192.0.2.9", 22),
            ("2001:db8::1", 80),
            ("10.0.195.79", 443),
            ("10.0.0.0", 443),
        ],
        &[2, 5],
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_task_of_20k_networks_is_read_only_around_a_batchs_addresses() {
    // Every other /24 from 10.0.0.0 (10.0.0.0/24, 10.0.2.0/24, … 10.156.62.0/24), one
    // IPv4-mapped network and one IPv6 network.
    let (s, mut c, task) = with_targets(
        "SELECT $1::uuid, 'cidr', network(set_masklen('10.0.0.0'::inet + i * 512, 24))::text
           FROM generate_series(0, 19999) AS i
         UNION ALL VALUES ($1, 'cidr', '::ffff:192.0.2.0/120'), ($1, 'cidr', '2001:db8::/64'),
                          ($1, 'ip', '198.51.100.7')",
    );
    // What a batch reads of it: the single address and the mark of a long list of networks,
    // then of the networks only those around the addresses it names.
    use scanstore::upload::coverage::{NAMED_TARGETS, TARGETS};
    let rows = c.query(TARGETS, &[&task, &1000i64]).unwrap();
    assert_eq!(rows.len(), 2, "the address and the long list's mark");
    let marks: Vec<&str> = rows
        .iter()
        .filter(|r| r.get::<_, Option<bool>>(0).is_none())
        .map(|r| r.get(1))
        .collect();
    assert_eq!(marks, ["cidr"]);
    let named: Vec<std::net::IpAddr> = ["10.0.4.7", "10.0.4.200", "10.0.5.1"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let rows = c
        .query(NAMED_TARGETS, &[&task, &named, &false, &true])
        .unwrap();
    assert_eq!(rows.len(), 1, "10.0.4.0/24, the one network around them");
    let sql = NAMED_TARGETS
        .replace("$1", "$1::uuid")
        .replace("$2", "$2::inet[]")
        .replace("$3", "$3::boolean")
        .replace("$4", "$4::boolean");
    let plan: Vec<String> = c
        .query(&format!("EXPLAIN {sql}"), &[&task, &named, &false, &true])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("task_targets_cidr_gist"), "{plan}");

    // Between two listed networks, past the last one, and another IPv6 network: outside.
    // The IPv4 spelling of an address in the mapped network, the mapped spelling of one in
    // a listed IPv4 network, and the single address: inside.
    only_in_scope_stored(
        &s,
        &[
            ("10.0.4.7", 443),
            ("10.0.5.1", 443),
            ("10.156.62.255", 443),
            ("10.156.63.0", 443),
            ("192.0.2.9", 22),
            ("::ffff:10.0.6.6", 22),
            ("2001:db8::1", 80),
            ("2001:db8:1::1", 80),
            ("198.51.100.7", 80),
        ],
        &[1, 3, 7],
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn answers_to_the_domain_targets_bring_their_addresses_into_scope() {
    let s = Stack::new("port_scan");
    let mut c = s.sql();
    let run = factory::task_with_targets(
        &mut c,
        s.owner.id,
        s.scanner.id,
        "mixed",
        "running",
        &[("domain", "example.com")],
    );
    let up = Uuid::new_v4();
    // An answer to a name outside the targets brings nothing into scope.
    let b0 = vec![
        dns("www.example.com", "192.0.2.10", t0()),
        dns("evil.example.net", "192.0.2.66", t0()),
        endpoint("192.0.2.10", 443, t0()),
        endpoint("192.0.2.66", 443, t0()),
    ];
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        run.execution_id,
        &Batch::main(up, 0, b0.clone()),
    );
    assert_eq!(refusal(&r, 422, "out_of_scope"), [3]);
    // The answer in the batch itself counts; later batches find it recorded.
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        run.execution_id,
        &Batch::main(up, 0, b0[..3].to_vec()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        run.execution_id,
        &Batch::main(up, 1, vec![endpoint("192.0.2.10", 80, t0())]),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        run.execution_id,
        &Batch::final_(up, 2, vec![endpoint("192.0.2.66", 80, t0())]),
    );
    assert_eq!(refusal(&r, 422, "out_of_scope"), [0]);
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        run.execution_id,
        &Batch::final_(up, 2, vec![]),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Only the in-scope answer becomes the generated port scan's target.
    let children: Vec<String> = c
        .query(
            "SELECT tt.value FROM tasks t JOIN task_targets tt ON tt.task_id = t.id
              WHERE t.parent_task_id = $1 ORDER BY tt.value",
            &[&run.task_id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(children, ["192.0.2.10"]);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn observed_at_must_lie_in_the_window_and_parse_as_elasticsearch_does() {
    let s = Stack::new("port_scan");
    let now = chrono::Utc::now();
    let at = |d: chrono::Duration| (now + d).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let up = Uuid::new_v4();
    let post = |obs: Vec<serde_json::Value>| {
        scan::post(
            s.base(),
            &s.scanner.token,
            s.execution(),
            &Batch::main(up, 0, obs),
        )
    };
    // A day ahead would pin last_seen for a day; a year back would open a year of indices.
    let r = post(vec![
        endpoint("10.0.0.1", 443, t0()),
        endpoint("10.0.0.2", 443, &at(chrono::Duration::days(1))),
        endpoint("10.0.0.3", 443, &at(chrono::Duration::seconds(600))),
        endpoint("10.0.0.4", 443, "1990-01-01T00:00:00Z"),
        endpoint("10.0.0.5", 443, &at(-chrono::Duration::days(32))),
    ]);
    assert_eq!(refusal(&r, 422, "out_of_window"), [1, 2, 3, 4]);
    // Three months back in one batch: nothing, and no index of those months.
    let months: Vec<_> = (2..5)
        .map(|m| endpoint("10.0.0.6", 443, &at(-chrono::Duration::days(31 * m))))
        .collect();
    assert_eq!(refusal(&post(months), 422, "out_of_window"), [0, 1, 2]);
    // A leap second is refused as a real cluster's date parser refuses it.
    let leap = format!("{}:60Z", &t0()[..16]);
    let r = post(vec![endpoint("10.0.0.7", 443, &leap)]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "bad_field");
    assert_nothing_written(&s);
    let (_, indices) = s.es().get(&format!("/{}-facts-*", s.prefix()));
    assert_eq!(indices, json!({}), "a refused batch created an index");

    // The edges: 31 days back less a minute, and 4 minutes ahead.
    let r = post(vec![
        endpoint(
            "10.0.0.8",
            443,
            &at(-chrono::Duration::days(31) + chrono::Duration::minutes(1)),
        ),
        endpoint("10.0.0.9", 443, &at(chrono::Duration::minutes(4))),
    ]);
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_ipv4_mapped_address_is_the_same_endpoint_as_its_ipv4_host() {
    let s = Stack::new("port_scan");
    let up = Uuid::new_v4();
    let obs = vec![
        endpoint("198.51.100.9", 443, t0()),
        endpoint("::ffff:198.51.100.9", 443, t0()),
        endpoint("::FFFF:c633:6409", 22, t0()),
    ];
    let r = scan::post(
        s.base(),
        &s.scanner.token,
        s.execution(),
        &Batch::final_(up, 0, obs),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.endpoint_docs(), 2, "two endpoints of one IPv4 host");
    let (_, hits) = s.es().post(
        &format!("/{}-facts-*/_search", s.prefix()),
        &json!({"size": 10, "query": {"term": {"execution_id": s.execution().to_string()}}}),
    );
    for h in hits["hits"]["hits"].as_array().unwrap() {
        assert_eq!(h["_source"]["ip"], "198.51.100.9", "{h}");
    }
    // The task's results list the host with both of its endpoints.
    let r = read::get(
        s.base(),
        &s.owner.token,
        &format!("/api/v1/tasks/{}/results", s.run.task_id),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ips = r.body["ips"].as_array().unwrap();
    assert_eq!(ips.len(), 1, "{}", r.body);
    assert_eq!(ips[0]["ip"], "198.51.100.9");
    assert_eq!(ips[0]["endpoint_count"], 2);
    assert_eq!(ips[0]["endpoints"].as_array().unwrap().len(), 2);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_retry_is_answered_as_before_after_its_times_left_the_window() {
    let s = Stack::build(crate::support::emulator::target(), "port_scan", |cfg| {
        cfg.upload.max_observation_age = chrono::Duration::seconds(3);
    });
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let up = Uuid::new_v4();
    let b0 = Batch::main(up, 0, vec![endpoint("10.0.0.1", 443, &at)]);
    let post = |b: &Batch| scan::post(s.base(), &s.scanner.token, s.execution(), b);
    assert_eq!(post(&b0).body["saved"], 1);
    // The observation's time must leave the 3 s window: time passing is what is tested.
    std::thread::sleep(std::time::Duration::from_secs(4));
    // The confirmed batch again: saved 0, as ever; a new one with that time: refused.
    let again = post(&b0);
    assert_eq!(
        (again.status, again.body["saved"].clone()),
        (200, json!(0)),
        "{}",
        again.body
    );
    let b1 = Batch::main(up, 1, vec![endpoint("10.0.0.2", 443, &at)]);
    assert_eq!(refusal(&post(&b1), 422, "out_of_window"), [0]);
}
