//! The scanner API against its OpenAPI description: every answer of the scanner routes —
//! claim, batches (accepted, refused for scope, time, state), heartbeat, fail, listing —
//! matches its documented schema, carries an error code the description lists for its
//! status, and the documented limits are the ones the server enforces.

use serde_json::Value;
use uuid::Uuid;

use crate::support::factory;
use crate::support::openapi::{assert_documented, spec};
use crate::support::scan::t0;
use crate::support::scan::{self, endpoint, endpoints, Batch};
use crate::support::server::Got;
use crate::support::stack::Stack;
use scanstore::upload::{batch, details, lifecycle};

/// The answer matches the documented schema of its status, and its error code is one the
/// description lists for that status.
fn check(spec: &Value, path: &str, method: &str, r: &Got) {
    assert_documented(spec, path, method, r.status, &r.body);
    if let Some(code) = r.body["error"]["code"].as_str() {
        let codes =
            &spec["paths"][path][method]["responses"][r.status.to_string()]["x-error-codes"];
        assert!(
            codes
                .as_array()
                .is_some_and(|c| c.iter().any(|x| x == code)),
            "{method} {path} {}: code {code} is not in {codes}",
            r.status
        );
    }
}

#[test]
fn the_documented_limits_are_the_enforced_ones() {
    let spec = spec();
    let s = &spec["components"]["schemas"];
    let endpoint = &s["Observation"]["oneOf"][0]["properties"];
    assert_eq!(
        s["Observation"]["oneOf"][1]["$ref"],
        "#/components/schemas/DnsObservation"
    );
    let dns = &s["DnsObservation"]["properties"];
    for field in ["service", "product", "version"] {
        assert_eq!(
            endpoint[field]["maxLength"],
            batch::MAX_SHORT_TEXT,
            "{field}"
        );
    }
    assert_eq!(endpoint["banner"]["maxLength"], batch::MAX_BANNER);
    for list in ["hostnames", "cpe", "scripts"] {
        assert_eq!(endpoint[list]["maxItems"], details::MAX_LIST, "{list}");
    }
    assert_eq!(endpoint["cpe"]["items"]["maxLength"], details::MAX_CPE);
    assert_eq!(endpoint["extra_info"]["maxLength"], batch::MAX_SHORT_TEXT);
    assert_eq!(endpoint["tunnel"]["maxLength"], details::MAX_TUNNEL);
    assert_eq!(endpoint["confidence"]["maximum"], details::MAX_CONFIDENCE);
    let script = &endpoint["scripts"]["items"]["properties"];
    assert_eq!(script["id"]["maxLength"], details::MAX_SCRIPT_ID);
    assert_eq!(script["output"]["maxLength"], details::MAX_SCRIPT_OUTPUT);
    let host = &s["Observation"]["oneOf"][2]["properties"];
    assert_eq!(host["type"]["enum"][0], "host");
    assert_eq!(host["os"]["maxItems"], details::MAX_OS_GUESSES);
    assert_eq!(endpoint["port"]["minimum"], 1);
    assert_eq!(endpoint["port"]["maximum"], u16::MAX);
    assert_eq!(dns["value"]["maxLength"], batch::MAX_DNS_VALUE);
    assert_eq!(
        dns["name"]["maxLength"],
        batch::MAX_DOMAIN + 1,
        "with the trailing dot"
    );
    // Every DNS name field's pattern admits exactly the names the server takes.
    let name_patterns = [
        &dns["name"]["pattern"],
        &endpoint["hostnames"]["items"]["properties"]["name"]["pattern"],
        &host["hostnames"]["items"]["properties"]["name"]["pattern"],
    ];
    let long_label = "x".repeat(64);
    for pattern in name_patterns {
        let pattern = regex::Regex::new(pattern.as_str().expect("a pattern")).unwrap();
        for name in [
            "a.b",
            "*.example.com",
            "scanstore.test.",
            "*",
            "_sip._tcp.example.com",
            "-a.b",
            "a..b",
            ".",
            "",
            "a.*",
            "é.com",
            "a b.com",
            &long_label,
        ] {
            assert_eq!(
                pattern.is_match(name),
                batch::domain(name).is_ok(),
                "{name:?} against {pattern}"
            );
        }
    }
    assert_eq!(
        s["Batch"]["properties"]["protocol_version"]["enum"][0],
        batch::PROTOCOL_VERSION
    );
    assert_eq!(
        s["FailRequest"]["properties"]["reason"]["maxLength"],
        lifecycle::MAX_REASON_BYTES
    );
    let size = &spec["paths"]["/api/v1/scanner/executions"]["get"]["parameters"][1]["schema"];
    assert_eq!(size["maximum"], lifecycle::MAX_LIST_SIZE);
    assert!(
        s["Error"]["properties"]["error"]["properties"]["details"]["description"]
            .as_str()
            .unwrap()
            .contains(&format!("the first {}", batch::LISTED_POSITIONS))
    );
}

/// Whether the server's validation takes a batch of `stream` with `observations`.
fn takes(stream: &'static str, is_final: bool, observations: Vec<Value>) -> bool {
    let b = Batch {
        upload_id: Uuid::new_v4(),
        stream,
        index: 0,
        is_final,
        observations,
    };
    // The server's default window, which `scan::t0` lies within.
    let (age, skew) = (chrono::Duration::days(31), chrono::Duration::seconds(300));
    let window = batch::Window::around(chrono::Utc::now(), age, skew);
    batch::parse(b.body().as_bytes(), 10, window).is_ok()
}

#[test]
fn the_schema_states_which_batches_and_dns_values_the_server_takes() {
    let spec = spec();
    let s = &spec["components"]["schemas"];
    let at = scan::t0_plus(0);
    // A DNS record's value against its record type's variant: a format where the variant
    // names one, any text otherwise.
    let variants = s["DnsObservation"]["oneOf"]
        .as_array()
        .expect("record-type variants");
    let mut types = 0;
    for variant in variants {
        let format = variant["properties"]["value"]["format"].as_str();
        for record_type in variant["properties"]["record_type"]["enum"]
            .as_array()
            .unwrap()
        {
            types += 1;
            for value in ["192.0.2.1", "2001:db8::1", "mail.example.com"] {
                let documented = match format {
                    Some("ipv4") => value.parse::<std::net::Ipv4Addr>().is_ok(),
                    Some("ipv6") => value.parse::<std::net::Ipv6Addr>().is_ok(),
                    None => true,
                    Some(other) => panic!("format {other} is not checked here"),
                };
                let mut record = scan::dns("a.example.com", value, &at);
                record["record_type"] = record_type.clone();
                assert_eq!(
                    takes("main", false, vec![record]),
                    documented,
                    "{record_type} {value}"
                );
            }
        }
    }
    let listed = s["DnsObservation"]["properties"]["record_type"]["enum"].as_array();
    assert_eq!(
        Some(types),
        listed.map(Vec::len),
        "every record type has a variant"
    );
    // A batch's stream against its variant: what it may carry and whether it may be final.
    for variant in s["Batch"]["oneOf"].as_array().expect("stream variants") {
        let props = &variant["properties"];
        let stream = match props["stream"]["enum"][0].as_str() {
            Some("main") => "main",
            Some("dns") => "dns",
            other => panic!("stream {other:?}"),
        };
        let only_dns =
            props["observations"]["items"]["$ref"] == "#/components/schemas/DnsObservation";
        for is_final in [false, true] {
            let may_be_final = props["is_final"]["enum"]
                .as_array()
                .is_none_or(|allowed| allowed.contains(&Value::Bool(is_final)));
            let kinds = [
                (endpoint("10.0.0.1", 443, &at), !only_dns),
                (scan::dns("a.example.com", "192.0.2.1", &at), true),
            ];
            for (observation, carried) in kinds {
                assert_eq!(
                    takes(stream, is_final, vec![observation.clone()]),
                    may_be_final && carried,
                    "{stream} final={is_final} {observation}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs PostgreSQL"]
fn every_scanner_answer_matches_the_description() {
    let spec = spec();
    let s = Stack::new("port_scan");
    let (base, token) = (s.base(), s.scanner.token.as_str());
    let mut c = s.sql();
    let batches = "/api/v1/scanner/executions/{execution_id}/batches";
    let heartbeat = "/api/v1/scanner/executions/{execution_id}/heartbeat";
    let fail = "/api/v1/scanner/executions/{execution_id}/fail";

    let queued = factory::task(&mut c, s.owner.id, s.scanner.id, "port_scan", "queued");
    let claim = scan::claim(base, token);
    check(&spec, "/api/v1/scanner/executions/claim", "post", &claim);
    let e = queued.execution_id;
    check(&spec, heartbeat, "post", &scan::heartbeat(base, token, e));

    let up = Uuid::new_v4();
    let ok = scan::post(base, token, e, &Batch::main(up, 0, endpoints(0, 2, t0())));
    check(&spec, batches, "post", &ok);
    let outside = Batch::main(up, 1, vec![endpoint("100.64.0.1", 443, t0())]);
    check(
        &spec,
        batches,
        "post",
        &scan::post(base, token, e, &outside),
    );
    let future = Batch::main(
        up,
        1,
        vec![endpoint("10.0.0.1", 443, "2999-01-01T00:00:00Z")],
    );
    check(&spec, batches, "post", &scan::post(base, token, e, &future));
    let gap = Batch::final_(up, 5, vec![]);
    check(&spec, batches, "post", &scan::post(base, token, e, &gap));
    let bad = scan::post_raw(base, Some(token), &e.to_string(), b"{");
    check(&spec, batches, "post", &bad);

    let list = scan::executions(base, token, "size=1");
    check(&spec, "/api/v1/scanner/executions", "get", &list);
    check(
        &spec,
        "/api/v1/scanner/executions",
        "get",
        &scan::executions(base, token, "size=0"),
    );

    let failed = scan::fail(base, token, e, "scanner crashed");
    check(&spec, fail, "post", &failed);
    check(&spec, fail, "post", &scan::fail(base, token, e, ""));
    check(&spec, heartbeat, "post", &scan::heartbeat(base, token, e));
    check(
        &spec,
        heartbeat,
        "post",
        &scan::heartbeat(base, token, Uuid::new_v4()),
    );
    let late = Batch::main(up, 1, endpoints(2, 1, t0()));
    check(&spec, batches, "post", &scan::post(base, token, e, &late));
    check(
        &spec,
        "/api/v1/scanner/executions",
        "get",
        &scan::executions(base, token, "status=failed"),
    );
}
