//! Results paging: every endpoint of a big execution exactly once across pages, exact
//! totals on the first page only.

use std::collections::HashSet;

use serde_json::Value;
use uuid::Uuid;

use crate::support::emulator;
use crate::support::read::ok;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoint, Batch};
use crate::support::stack::Stack;

const ENDPOINTS: usize = 25_000;
const IPS: usize = 3_000;
const BATCH: usize = 5_000;

#[test]
#[ignore = "needs PostgreSQL"]
fn results_page_25k_endpoints_on_3k_ips_exactly_once() {
    let s = Stack::build(emulator::target(), "port_scan", |c| {
        c.projection.workers = 0;
        c.server.max_observations = BATCH;
    });
    let (base, token) = (s.base(), s.owner.token.as_str());
    // Endpoint i: IP i mod 3000, port 1000 + i / 3000 (so 8 or 9 ports per IP).
    let up = Uuid::new_v4();
    for (index, start) in (0..ENDPOINTS).step_by(BATCH).enumerate() {
        let obs: Vec<Value> = (start..start + BATCH)
            .map(|i| endpoint(&scan::nth_ip(i % IPS), (1000 + i / IPS) as u16, t0()))
            .collect();
        let r = scan::post(
            base,
            &s.scanner.token,
            s.execution(),
            &Batch::main(up, index as u32, obs),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let r = scan::post(
        base,
        &s.scanner.token,
        s.execution(),
        &Batch::final_(up, (ENDPOINTS / BATCH) as u32, vec![]),
    );
    assert_eq!(r.status, 200, "{}", r.body);

    let task = s.run.task_id;
    let mut seen: HashSet<(String, u64)> = HashSet::new();
    let mut ips_seen: HashSet<String> = HashSet::new();
    let mut last_ip: Option<std::net::Ipv4Addr> = None;
    let mut path = format!("/api/v1/tasks/{task}/results?size=400");
    let mut pages = 0;
    loop {
        let body = ok(base, token, &path);
        pages += 1;
        if pages == 1 {
            assert_eq!(
                body["totals"]["endpoints"],
                serde_json::json!({"value": ENDPOINTS, "relation": "eq"})
            );
            assert_eq!(
                body["totals"]["ips"],
                serde_json::json!({"value": IPS, "relation": "eq"})
            );
            assert_eq!(body["complete"], true);
        } else {
            assert!(body["totals"].is_null(), "totals only on page one");
        }
        for group in body["ips"].as_array().unwrap() {
            let ip = group["ip"].as_str().unwrap().to_string();
            let addr: std::net::Ipv4Addr = ip.parse().unwrap();
            if let Some(l) = last_ip {
                assert!(l < addr, "IPs ascend across pages");
            }
            last_ip = Some(addr);
            assert!(ips_seen.insert(ip.clone()), "{ip} on two pages");
            let endpoints = group["endpoints"].as_array().unwrap();
            assert_eq!(group["endpoint_count"], endpoints.len());
            for e in endpoints {
                assert_eq!(e["ip"], ip.as_str());
                assert!(
                    seen.insert((ip.clone(), e["port"].as_u64().unwrap())),
                    "duplicate endpoint"
                );
            }
        }
        match body["next"].as_str() {
            Some(n) => path = format!("/api/v1/tasks/{task}/results?size=400&after={n}"),
            None => break,
        }
        assert!(pages < 100, "runaway paging");
    }
    assert_eq!(seen.len(), ENDPOINTS);
    assert_eq!(ips_seen.len(), IPS);
    assert_eq!(pages, IPS.div_ceil(400));
    // The endpoint fetches of a page (400 IPs ≈ 3,300 endpoints) took more than one
    // chunked search each: no page was read as one default-size search.
    if let emulator::Target::Emulator(e) = &s.target {
        let searches = e.requests(Some("POST"), Some("*_search")).count;
        assert!(
            searches > pages * 2,
            "{searches} searches for {pages} pages"
        );
    }
}
