//! Validation of batch bodies: every field, the checksum over exact bytes, limits.

use super::*;
use chrono::TimeZone;
use serde_json::json;

fn now() -> Window {
    let at = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    Window::around(at, ChronoDuration::days(31), ChronoDuration::seconds(300))
}

/// A body whose checksum is computed over exactly the observations text given.
pub fn body_with(observations: &str, extra: &str) -> Vec<u8> {
    let sum = hex::encode(Sha256::digest(observations.as_bytes()));
    format!(
        r#"{{"protocol_version":2,"upload_id":"7d9f8c1e-2a4b-4c6d-8e0f-1a2b3c4d5e6f","stream":"main","batch_index":0,"is_final":false{extra},"checksum":"sha256:{sum}","observations":{observations}}}"#
    )
    .into_bytes()
}

fn endpoint(fields: serde_json::Value) -> String {
    let mut o = json!({"type": "endpoint", "ip": "203.0.113.7", "port": 443, "transport": "tcp",
                       "observed_at": "2026-11-29T10:00:00Z"});
    for (k, v) in fields.as_object().unwrap() {
        o[k] = v.clone();
    }
    format!("[{o}]")
}

fn err_code(body: &[u8]) -> &'static str {
    match parse(body, 100, now()).and_then(|b| b.check_window().map(|_| b)) {
        Err(UploadError::Invalid { code, .. }) => code,
        Err(UploadError::Unprocessable { code, .. }) => code,
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => "ok",
    }
}

#[test]
fn a_valid_mixed_batch() {
    let obs = r#"[{"type":"endpoint","ip":"2001:DB8::1","port":443,"transport":"tcp","service":"https","banner":"x","observed_at":"2026-11-29T10:00:00.123456+01:00"},{"type":"dns","name":"WWW.Example.com.","record_type":"a","value":"203.0.113.7","observed_at":"2026-11-29T10:00:01Z"}]"#;
    let b = parse(&body_with(obs, ""), 100, now()).unwrap();
    assert_eq!(b.observations.len(), 2);
    assert_eq!((b.endpoint_count(), b.dns_count()), (1, 1));
    let Observation::Endpoint(e) = &b.observations[0] else {
        panic!()
    };
    assert_eq!(e.ip, "2001:db8::1");
    assert_eq!(
        e.observed_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "2026-11-29T09:00:00.123Z"
    );
    let Observation::Dns(d) = &b.observations[1] else {
        panic!()
    };
    assert_eq!(
        (d.name.as_str(), d.record_type.as_str()),
        ("www.example.com", "A")
    );
    assert!(b.checksum.starts_with("sha256:"));
}

#[test]
fn checksum_is_over_the_exact_bytes() {
    let obs = endpoint(json!({}));
    let mut body = body_with(&obs, "");
    assert_eq!(err_code(&body), "ok");
    // Same JSON value, different bytes (a space): the checksum no longer matches.
    let spaced = String::from_utf8(body.clone())
        .unwrap()
        .replacen("[{", "[ {", 1);
    body = spaced.into_bytes();
    assert_eq!(err_code(&body), "checksum_mismatch");
    let bad_form = String::from_utf8(body_with(&obs, ""))
        .unwrap()
        .replace("sha256:", "md5:");
    assert_eq!(err_code(bad_form.as_bytes()), "bad_field");
}

#[test]
fn envelope_errors() {
    assert_eq!(err_code(b"{"), "malformed_json");
    assert_eq!(err_code(b"[]"), "malformed_json");
    let obs = endpoint(json!({}));
    let b = String::from_utf8(body_with(&obs, "")).unwrap();
    assert_eq!(
        err_code(
            b.replace("\"protocol_version\":2", "\"protocol_version\":1")
                .as_bytes()
        ),
        "unsupported_protocol_version"
    );
    assert_eq!(
        err_code(b.replace("7d9f8c1e-2a4b", "zzz").as_bytes()),
        "bad_field"
    );
    assert_eq!(
        err_code(b.replace("\"main\"", "\"other\"").as_bytes()),
        "bad_field"
    );
    assert_eq!(
        err_code(
            b.replace("\"batch_index\":0", "\"batch_index\":-1")
                .as_bytes()
        ),
        "bad_field"
    );
    assert_eq!(
        err_code(
            b.replace("\"batch_index\":0", "\"batch_index\":2147483648")
                .as_bytes()
        ),
        "bad_field"
    );
    assert_eq!(
        err_code(
            b.replace("\"batch_index\":0", "\"batch_index\":1.5")
                .as_bytes()
        ),
        "malformed_json"
    );
    assert_eq!(
        err_code(body_with(&obs, ",\"extra\":1").as_slice()),
        "malformed_json"
    );
    let dns_final = b
        .replace("\"main\"", "\"dns\"")
        .replace("\"is_final\":false", "\"is_final\":true");
    assert_eq!(err_code(dns_final.as_bytes()), "bad_field");
}

#[test]
fn observation_errors() {
    for bad in [
        json!({"ip": "300.1.1.1"}),
        json!({"ip": "example.com"}),
        json!({"port": 0}),
        json!({"port": 65536}),
        json!({"port": -1}),
        json!({"port": "80"}),
        json!({"transport": "icmp"}),
        json!({"observed_at": "yesterday"}),
        json!({"observed_at": "2026-11-29T10:00:00"}),
        json!({"observed_at": "2026-11-29T10:00:60Z"}),
        json!({"observed_at": "2026-11-29t10:00:00z"}),
        json!({"observed_at": "2026-11-29 10:00:00Z"}),
        json!({"observed_at": "2026-11-29T10:00:00.Z"}),
        json!({"observed_at": "2026-11-29T10:00:00.1234567891Z"}),
        json!({"observed_at": "2026-11-29T10:00:00+0100"}),
        json!({"observed_at": "+2026-11-29T10:00:00Z"}),
        json!({"service": "x".repeat(257)}),
        json!({"banner": "x".repeat(16 * 1024 + 1)}),
        json!({"unknown": 1}),
        json!({"type": "other"}),
    ] {
        let obs = endpoint(bad.clone());
        assert_eq!(
            err_code(&body_with(&obs, "")),
            "bad_field",
            "accepted {bad}"
        );
    }
    let dns = |name: &str, rt: &str, value: &str| {
        format!(
            r#"[{{"type":"dns","name":"{name}","record_type":"{rt}","value":"{value}","observed_at":"2026-11-29T10:00:00Z"}}]"#
        )
    };
    assert_eq!(
        err_code(&body_with(&dns("a..b", "A", "1.2.3.4"), "")),
        "bad_field"
    );
    assert_eq!(
        err_code(&body_with(&dns("a.b", "A", "::1"), "")),
        "bad_field"
    );
    assert_eq!(
        err_code(&body_with(&dns("a.b", "AAAA", "1.2.3.4"), "")),
        "bad_field"
    );
    assert_eq!(
        err_code(&body_with(&dns("a.b", "BOGUS", "x"), "")),
        "bad_field"
    );
    assert_eq!(
        err_code(&body_with(&dns(&"a".repeat(64), "TXT", "x"), "")),
        "bad_field"
    );
    assert_eq!(
        err_code(&body_with(
            &dns("_sip._tcp.example.com", "SRV", "10 5 5060 sip.example.com"),
            ""
        )),
        "ok"
    );
}

#[test]
fn endpoints_are_refused_in_the_dns_stream() {
    let obs = endpoint(json!({}));
    let b = String::from_utf8(body_with(&obs, ""))
        .unwrap()
        .replace("\"main\"", "\"dns\"");
    assert_eq!(err_code(b.as_bytes()), "bad_field");
}

#[test]
fn observation_limit() {
    let one = json!({"type": "endpoint", "ip": "203.0.113.7", "port": 443, "transport": "tcp", "observed_at": "2026-11-29T10:00:00Z"});
    let obs = serde_json::to_string(&vec![one; 3]).unwrap();
    match parse(&body_with(&obs, ""), 2, now()) {
        Err(UploadError::Invalid { code, .. }) => assert_eq!(code, "too_many_observations"),
        other => panic!("{other:?}"),
    }
    assert!(parse(&body_with(&obs, ""), 3, now()).is_ok());
}

#[test]
fn empty_batch_is_valid() {
    let b = parse(&body_with("[]", ""), 10, now()).unwrap();
    assert!(b.observations.is_empty());
}

#[test]
fn dns_answers_are_the_distinct_a_and_aaaa_values_in_address_order() {
    let dns = |record_type: &str, value: &str| {
        json!({"type": "dns", "name": "www.example.com", "record_type": record_type,
               "value": value, "observed_at": "2026-11-29T10:00:00Z"})
    };
    let obs = json!([
        dns("AAAA", "2001:DB8::1"),
        dns("A", "203.0.113.9"),
        dns("CNAME", "example.com"),
        dns("a", "203.0.113.7"),
        dns("A", "203.0.113.9"),
        {"type": "endpoint", "ip": "198.51.100.1", "port": 443, "transport": "tcp",
         "observed_at": "2026-11-29T10:00:00Z"}
    ])
    .to_string();
    let b = parse(&body_with(&obs, ""), 100, now()).unwrap();
    let answers: Vec<String> = b
        .dns_answers_where(|_| true)
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(answers, ["203.0.113.7", "203.0.113.9", "2001:db8::1"]);
}

#[test]
fn observed_at_must_lie_in_the_window_and_every_position_is_named() {
    // now() is 2026-11-29T12:00Z with 31 days back and 300 s ahead.
    for (at, ok) in [
        ("2026-10-29T12:00:00Z", true),
        ("2026-10-29T11:59:59.999Z", false),
        ("2026-11-29T12:05:00Z", true),
        ("2026-11-29T12:05:00.001Z", false),
        ("2026-11-29T13:04:00+01:00", true),
        ("2026-11-29T10:00:00.123456789Z", true),
        ("1990-01-01T00:00:00Z", false),
        ("2030-01-01T00:00:00Z", false),
    ] {
        let code = err_code(&body_with(&endpoint(json!({ "observed_at": at })), ""));
        assert_eq!(code, if ok { "ok" } else { "out_of_window" }, "{at}");
    }
    let ep = |i: u32, at: &str| json!({"type": "endpoint", "ip": "203.0.113.7", "port": i, "transport": "tcp", "observed_at": at});
    let obs: Vec<_> = (1..=150)
        .map(|i| {
            ep(
                i,
                if i % 3 == 0 {
                    "2026-12-01T00:00:00Z"
                } else {
                    "2026-11-29T10:00:00Z"
                },
            )
        })
        .collect();
    let obs = serde_json::to_string(&obs).unwrap();
    match parse(&body_with(&obs, ""), 1000, now()).and_then(|b| b.check_window()) {
        Err(UploadError::Unprocessable { code, details, .. }) => {
            assert_eq!(code, "out_of_window");
            assert_eq!(details["count"], 50);
            let positions = details["positions"].as_array().unwrap();
            assert_eq!(positions.len(), 50);
            assert_eq!(positions[0], 2);
            assert_eq!(positions[49], 149);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn ipv4_mapped_addresses_are_their_ipv4_host() {
    let obs = r#"[{"type":"endpoint","ip":"::ffff:198.51.100.9","port":443,"transport":"tcp","observed_at":"2026-11-29T10:00:00Z"},{"type":"dns","name":"a.example","record_type":"AAAA","value":"::ffff:198.51.100.10","observed_at":"2026-11-29T10:00:00Z"}]"#;
    let b = parse(&body_with(obs, ""), 100, now()).unwrap();
    let Observation::Endpoint(e) = &b.observations[0] else {
        panic!()
    };
    assert_eq!(e.ip, "198.51.100.9");
    assert_eq!(
        b.dns_answers_where(|_| true),
        vec!["198.51.100.10".parse::<IpAddr>().unwrap()]
    );
}

#[test]
fn protocol_2_details_are_validated_and_normalised() {
    let obs = endpoint(json!({
        "state": "open",
        "hostnames": [{"name": "WWW.Example.com.", "source": "user"}, {"name": "www.example.com", "source": "user"}],
        "cpe": ["cpe:/a:nginx:nginx:1.24.0"], "tunnel": "ssl", "confidence": 10,
        "scripts": [{"id": "http-title", "output": "Welcome"}]
    }));
    let b = parse(&body_with(&obs, ""), 100, now()).unwrap();
    let Observation::Endpoint(e) = &b.observations[0] else {
        panic!()
    };
    assert!(
        e.details.is_open() && e.details.state.is_none(),
        "open is stored as no state"
    );
    assert_eq!(e.details.hostnames.len(), 1, "one name once, lower case");
    assert_eq!(e.details.hostnames[0].name, "www.example.com");
    assert!(e.details.digest().is_some());
    let plain = parse(&body_with(&endpoint(json!({})), ""), 100, now()).unwrap();
    let Observation::Endpoint(p) = &plain.observations[0] else {
        panic!()
    };
    assert_eq!(
        p.details.digest(),
        None,
        "no details, no digest: ranks as before"
    );
    for bad in [
        json!({"state": "half-open"}),
        json!({"confidence": -1}),
        json!({"cpe": "cpe:/a:x"}),
        json!({"scripts": [{"id": "x"}]}),
        json!({"hostnames": [{"name": "a.example.com"}]}),
    ] {
        assert_eq!(
            err_code(&body_with(&endpoint(bad.clone()), "")),
            "bad_field",
            "{bad}"
        );
    }
}

#[test]
fn a_host_observation_carries_os_guesses_and_counts_as_neither_endpoint_nor_dns() {
    let obs = r#"[{"type":"host","ip":"::ffff:203.0.113.7","os":[{"name":"Linux 5.X","accuracy":95}],"observed_at":"2026-11-29T10:00:00Z"}]"#;
    let b = parse(&body_with(obs, ""), 100, now()).unwrap();
    let Observation::Host(h) = &b.observations[0] else {
        panic!()
    };
    assert_eq!(h.ip, "203.0.113.7");
    assert_eq!(h.os[0].accuracy, 95);
    assert_eq!((b.endpoint_count(), b.dns_count()), (0, 0));
    assert_eq!(b.observations[0].ip(), Some("203.0.113.7"));
    let in_dns = String::from_utf8(body_with(obs, ""))
        .unwrap()
        .replace(r#""stream":"main""#, r#""stream":"dns""#)
        .into_bytes();
    assert_eq!(
        err_code(&in_dns),
        "bad_field",
        "the dns stream carries only dns records"
    );
}

#[test]
fn an_ipv4_address_that_parses_is_already_canonical() {
    for ok in ["0.0.0.0", "10.0.0.1", "255.255.255.255", "192.168.100.9"] {
        assert_eq!(address(ok.into()).unwrap(), ok);
        assert_eq!(ok.parse::<IpAddr>().unwrap().to_string(), ok);
    }
    for bad in [
        "010.0.0.1",
        "1.2.3",
        "1.2.3.4.5",
        "256.0.0.1",
        " 1.2.3.4",
        "1.2.3.4 ",
        "+1.2.3.4",
    ] {
        assert!(address(bad.into()).is_err(), "{bad}");
    }
    assert_eq!(address("::FFFF:10.0.0.1".into()).unwrap(), "10.0.0.1");
    assert_eq!(address("2001:DB8:0::1".into()).unwrap(), "2001:db8::1");
}
