//! DNS answers for child tasks: each batch's confirm records its distinct A/AAAA answers
//! in PostgreSQL (at most 1024 per execution), the final reads them instead of
//! aggregating the execution's facts, and a final over receipts confirmed by an older
//! release falls back to the facts.

use std::net::IpAddr;

use postgres::Client;
use uuid::Uuid;

use crate::support::emulator::Target;
use crate::support::scan::t0;
use crate::support::scan::{self, dns, endpoints, Batch};
use crate::support::stack::Stack;

fn recorded(c: &mut Client, execution: Uuid) -> Vec<String> {
    c.query(
        "SELECT host(address) FROM execution_dns_answers WHERE execution_id = $1 ORDER BY address",
        &[&execution],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The targets of the execution's child task (none: empty).
fn child_targets(c: &mut Client, execution: Uuid) -> Vec<String> {
    c.query(
        "SELECT tt.value FROM tasks t JOIN task_targets tt ON tt.task_id = t.id
          WHERE t.source_execution_id = $1 ORDER BY tt.value::inet",
        &[&execution],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Searches the emulator answered so far (`None` on a real cluster, which has no log).
/// Searches of the facts indices (a final rings the publishers, whose page reads search
/// the execution projection meanwhile: those do not count).
fn searches(s: &Stack) -> Option<usize> {
    match &s.target {
        Target::Emulator(e) => Some(e.requests(Some("POST"), Some("*-facts-*/_search")).count),
        Target::Real(_) => None,
    }
}

fn post_ok(s: &Stack, b: &Batch) -> serde_json::Value {
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), b);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[test]
#[ignore = "needs PostgreSQL"]
fn answers_are_recorded_at_confirm_and_the_final_reads_them_not_the_facts() {
    let s = Stack::new("mixed");
    let mut c = s.sql();
    let up = Uuid::new_v4();
    let mut obs0 = endpoints(0, 2, t0());
    obs0.push(dns("a.example.com", "10.0.0.2", t0()));
    obs0.push(dns("b.example.com", "10.0.0.2", t0()));
    obs0.push(
        serde_json::json!({"type": "dns", "name": "c.example.com", "record_type": "AAAA",
                                 "value": "2001:DB8:0:0::1", "observed_at": t0()}),
    );
    obs0.push(
        serde_json::json!({"type": "dns", "name": "d.example.com", "record_type": "CNAME",
                                 "value": "a.example.com", "observed_at": t0()}),
    );
    post_ok(&s, &Batch::main(up, 0, obs0));
    let sidecar = Batch::dns(
        up,
        0,
        vec![
            dns("e.example.com", "10.0.0.3", t0()),
            dns("a.example.com", "10.0.0.2", t0()),
        ],
    );
    post_ok(&s, &sidecar);
    // A confirmed retry records nothing (and nothing twice).
    assert_eq!(post_ok(&s, &sidecar)["saved"], 0);
    assert_eq!(
        recorded(&mut c, s.execution()),
        vec!["10.0.0.2", "10.0.0.3", "2001:db8::1"],
        "A and AAAA answers only, canonical, once each"
    );
    let unrecorded: i64 = c
        .query_one(
            "SELECT count(*) FROM scan_upload_receipts WHERE execution_id = $1 AND NOT dns_answers_recorded",
            &[&s.execution()],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        unrecorded, 0,
        "every confirmed receipt says its answers are recorded"
    );

    let before = searches(&s);
    let mut fin = endpoints(2, 1, t0());
    fin.push(dns("f.example.com", "10.0.0.1", t0()));
    post_ok(&s, &Batch::final_(up, 1, fin));
    if let (Some(before), Some(after)) = (before, searches(&s)) {
        assert_eq!(after, before, "the final searched no facts for its answers");
    }
    assert_eq!(
        child_targets(&mut c, s.execution()),
        vec!["10.0.0.1", "10.0.0.2", "10.0.0.3", "2001:db8::1"],
        "the final batch's own answer included"
    );
    assert!(
        recorded(&mut c, s.execution()).is_empty(),
        "the final consumed the recorded answers"
    );
}

#[test]
#[ignore = "needs PostgreSQL"]
fn an_execution_records_at_most_1024_answers() {
    let s = Stack::new("dns");
    let mut c = s.sql();
    let up = Uuid::new_v4();
    let answers = |from: u32, n: u32| -> Vec<serde_json::Value> {
        (from..from + n)
            .map(|i| {
                let ip = std::net::Ipv4Addr::from(0x0a01_0000 + i);
                dns(&format!("h{i}.example.com"), &ip.to_string(), t0())
            })
            .collect()
    };
    // 600 new, then 600 of which 100 repeat the first batch: 1100 distinct answers.
    post_ok(&s, &Batch::main(up, 0, answers(0, 600)));
    post_ok(&s, &Batch::main(up, 1, answers(500, 600)));
    let rows = recorded(&mut c, s.execution());
    assert_eq!(rows.len(), 1024);
    let addresses: Vec<IpAddr> = rows.iter().map(|r| r.parse().unwrap()).collect();
    assert_eq!(
        addresses.last(),
        Some(&IpAddr::from(std::net::Ipv4Addr::from(0x0a01_0000 + 1023))),
        "the second batch filled the room left in address order"
    );
    post_ok(&s, &Batch::main(up, 2, answers(2000, 5)));
    assert_eq!(
        recorded(&mut c, s.execution()).len(),
        1024,
        "a full set takes no more"
    );
    post_ok(&s, &Batch::final_(up, 3, Vec::new()));
    assert_eq!(child_targets(&mut c, s.execution()).len(), 1024);
}

#[test]
#[ignore = "needs PostgreSQL"]
fn a_final_over_receipts_from_an_older_release_reads_the_answers_from_the_facts() {
    let s = Stack::new("mixed");
    let mut c = s.sql();
    let up = Uuid::new_v4();
    let mut obs0 = endpoints(0, 1, t0());
    obs0.push(dns("a.example.com", "10.0.0.7", t0()));
    obs0.push(dns("b.example.com", "10.0.0.8", t0()));
    post_ok(&s, &Batch::main(up, 0, obs0));
    // As an older release would have left it: confirmed, nothing recorded.
    c.execute(
        "UPDATE scan_upload_receipts SET dns_answers_recorded = false WHERE execution_id = $1",
        &[&s.execution()],
    )
    .unwrap();
    c.execute(
        "DELETE FROM execution_dns_answers WHERE execution_id = $1 AND address = '10.0.0.8'",
        &[&s.execution()],
    )
    .unwrap();
    let before = searches(&s);
    let mut fin = endpoints(1, 1, t0());
    fin.push(dns("c.example.com", "10.0.0.9", t0()));
    post_ok(&s, &Batch::final_(up, 1, fin));
    if let (Some(before), Some(after)) = (before, searches(&s)) {
        assert!(after > before, "the final aggregated the facts");
    }
    assert_eq!(
        child_targets(&mut c, s.execution()),
        vec!["10.0.0.7", "10.0.0.8", "10.0.0.9"],
        "the answer missing from PostgreSQL came from the facts"
    );
    assert!(recorded(&mut c, s.execution()).is_empty());
}
