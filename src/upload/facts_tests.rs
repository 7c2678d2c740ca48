//! The documents `build` writes straight as bytes are, byte for byte, those that
//! serialising a `serde_json::Value` tree per document gave (the encoding before issue #35,
//! kept here as the reference).

use super::*;
use crate::upload::batch::{self, tests::body_with, Window};
use chrono::{SecondsFormat, TimeZone, Utc};

/// The reference time format: chrono's own RFC 3339 writer.
fn chrono_time(t: &chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The reference: each document built as a `Value` tree, then serialised.
fn reference(prefix: &str, owning: &Owning, batch: &Batch, tags: &Tags) -> Vec<Vec<u8>> {
    let stream = batch.stream.as_str();
    let mut out = Vec::new();
    let mut newest: Vec<&Endpoint> = Vec::new();
    let endpoint_fields = |doc: &mut Value, e: &Endpoint| {
        let mut fields = json!({
            "ip": e.ip, "port": e.port, "transport": e.transport.as_str(), "service": e.service,
            "product": e.product, "version": e.version, "banner": e.banner,
        });
        let fields = fields.as_object_mut().unwrap();
        fields.retain(|_, v| !v.is_null());
        doc.as_object_mut().unwrap().append(fields);
        if let (Value::Object(d), Some(digest)) = (json!(e.details), e.details.digest()) {
            let doc = doc.as_object_mut().unwrap();
            doc.extend(d);
            doc.insert("details_digest".into(), json!(digest));
        }
    };
    let line = |index: &str, id: String, doc: &Value| {
        IndexWrites::new(index)
            .op(id, |out| serde_json::to_writer(out, doc).unwrap())
            .ndjson
    };
    for (position, o) in batch.observations.iter().enumerate() {
        let mut doc = json!({
            "execution_id": owning.execution_id.to_string(),
            "task_id": owning.task_id.to_string(),
            "owner_id": owning.owner_id.to_string(),
            "scanner_id": owning.scanner_id.to_string(),
            "upload_id": batch.upload_id.to_string(),
            "stream": stream,
            "batch_index": batch.batch_index,
            "observed_at": chrono_time(o.observed_at()),
        });
        match o {
            Observation::Endpoint(e) => {
                doc["type"] = json!("endpoint");
                doc["tags"] = json!(tags.for_ip(&e.ip));
                endpoint_fields(&mut doc, e);
                match newest
                    .iter_mut()
                    .find(|n| n.ip == e.ip && n.port == e.port && n.transport == e.transport)
                {
                    Some(slot) if rank(e) > rank(slot) => *slot = e,
                    Some(_) => {}
                    None => newest.push(e),
                }
            }
            Observation::Host(h) => {
                doc["type"] = json!("host");
                doc["tags"] = json!(tags.for_ip(&h.ip));
                doc["ip"] = json!(h.ip);
                if !h.os.is_empty() {
                    doc["os"] = json!(h.os);
                }
                if !h.hostnames.is_empty() {
                    doc["hostnames"] = json!(h.hostnames);
                }
            }
            Observation::Dns(d) => {
                doc["type"] = json!("dns");
                doc["tags"] = json!(tags.for_name(&d.name));
                doc["name"] = json!(d.name);
                doc["record_type"] = json!(d.record_type);
                doc["value"] = json!(d.value);
            }
        }
        let id = index::FactIds::new(
            owning.execution_id,
            batch.upload_id,
            stream,
            batch.batch_index,
        )
        .at(position);
        out.push(line(&index::facts_index(prefix, o.observed_at()), id, &doc));
    }
    for e in newest {
        let mut doc = json!({
            "execution_id": owning.execution_id.to_string(),
            "task_id": owning.task_id.to_string(),
            "owner_id": owning.owner_id.to_string(),
            "observed_at": chrono_time(&e.observed_at),
            "tags": tags.for_ip(&e.ip),
        });
        endpoint_fields(&mut doc, e);
        let id =
            index::execution_endpoint_id(owning.execution_id, &e.ip, e.transport.as_str(), e.port);
        out.push(line(&index::execution_endpoints(prefix), id, &doc));
    }
    out
}

fn owning() -> Owning {
    let id = |s: &str| Uuid::parse_str(s).unwrap();
    Owning {
        execution_id: id("0b7f3c2a-6d1e-4f5a-9c8b-7a6e5d4c3b2a"),
        task_id: id("1c8e4d3b-7e2f-4a6b-8d9c-8b7f6e5d4c3b"),
        owner_id: id("2d9f5e4c-8f3a-4b7c-9eAd-9c8a7f6e5d4c"),
        scanner_id: id("3eaf6f5d-9a4b-4c8d-aebe-ad9b8a7f6e5d"),
    }
}

fn parsed(observations: &str) -> Batch {
    let at = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
    let window = Window::around(
        at,
        chrono::Duration::days(400),
        chrono::Duration::seconds(300),
    );
    batch::parse(&body_with(observations, ""), 1000, window).unwrap()
}

fn assert_same(observations: &str, tags: &Tags) {
    let batch = parsed(observations);
    let ops = build("scanstore", &owning(), &batch, tags);
    let written: Vec<Vec<u8>> = ops
        .facts
        .iter()
        .chain(&ops.endpoints)
        .map(|op| op.ndjson.clone())
        .collect();
    let want = reference("scanstore", &owning(), &batch, tags);
    assert_eq!(written.len(), want.len());
    for (w, r) in written.iter().zip(&want) {
        assert_eq!(String::from_utf8_lossy(w), String::from_utf8_lossy(r));
    }
}

#[test]
fn documents_are_byte_identical_to_the_value_tree_encoding() {
    let tags = Tags::of(
        &[
            ("203.0.113.7", "prod"),
            ("203.0.113.7", "édge \"dmz\""),
            ("2001:db8::1", "v6"),
        ],
        &[("www.example.com", "web")],
    );
    let observations = r#"[
 {"type":"endpoint","ip":"203.0.113.7","port":443,"transport":"tcp","observed_at":"2026-11-29T10:00:00Z"},
 {"type":"endpoint","ip":"203.0.113.7","port":443,"transport":"tcp","service":"https","product":"nginx \"edge\"","version":"1.25","banner":"HTTP/1.1 200 OK\r\nServer: ☃ ü\u0001\\x","observed_at":"2026-11-29T10:00:00.5Z"},
 {"type":"endpoint","ip":"2001:DB8::1","port":22,"transport":"udp","service":"","banner":"SSH-2.0-OpenSSH_9.6","observed_at":"2026-10-31T23:59:59.999999+00:00"},
 {"type":"endpoint","ip":"::ffff:198.51.100.9","port":80,"transport":"sctp","state":"closed","hostnames":[{"name":"WWW.Example.com.","source":"user"},{"name":"ptr.example.net","source":"ptr"}],"cpe":["cpe:/a:nginx:nginx:1.25"],"extra_info":"Ubuntu \"noble\"","tunnel":"ssl","confidence":10,"scripts":[{"id":"http-title","output":"Welcome\n<b>ü</b>"}],"observed_at":"2026-11-29T10:00:01+01:00"},
 {"type":"endpoint","ip":"198.51.100.9","port":80,"transport":"sctp","state":"filtered","observed_at":"2026-11-29T09:00:01Z"},
 {"type":"endpoint","ip":"198.51.100.10","port":8080,"transport":"tcp","state":"open","confidence":0,"observed_at":"2026-11-29T09:00:01Z"},
 {"type":"host","ip":"203.0.113.7","os":[{"name":"Linux 5.x","accuracy":95},{"name":"FreeBSD ☃","accuracy":3}],"hostnames":[{"name":"a.example.com","source":"ptr"}],"observed_at":"2026-11-29T10:00:00Z"},
 {"type":"host","ip":"203.0.113.8","observed_at":"2026-11-29T10:00:00Z"},
 {"type":"dns","name":"WWW.Example.com.","record_type":"a","value":"203.0.113.7","observed_at":"2026-11-29T10:00:01Z"},
 {"type":"dns","name":"_sip._tcp.example.com","record_type":"TXT","value":"v=spf1 \"quoted\" \\ ü \u2028","observed_at":"2026-11-29T10:00:02Z"},
 {"type":"dns","name":"*.example.com","record_type":"AAAA","value":"2001:DB8:0:0::1","observed_at":"2026-11-29T10:00:03Z"}
]"#;
    assert_same(observations, &tags);
    assert_same(observations, &Tags::default());
    assert_same("[]", &tags);
}

#[test]
fn the_newest_observation_of_each_endpoint_is_its_document_in_first_seen_order() {
    let mut obs = Vec::new();
    for i in 0..300 {
        let second = (i * 7) % 60;
        obs.push(format!(
            r#"{{"type":"endpoint","ip":"10.0.{}.{}","port":{},"transport":"tcp","service":"s{}","observed_at":"2026-11-29T10:00:{second:02}Z"}}"#,
            i % 3,
            i % 17,
            [22, 80, 443][i % 3],
            i % 5
        ));
    }
    let observations = format!("[{}]", obs.join(","));
    assert_same(&observations, &Tags::of(&[("10.0.1.1", "x")], &[]));
    let batch = parsed(&observations);
    let ops = build("scanstore", &owning(), &batch, &Tags::default());
    assert_eq!((ops.facts.len(), ops.endpoints.len()), (300, 3 * 17));
}

proptest::proptest! {
    #[test]
    fn times_are_written_as_chrono_writes_them(
        secs in -70_000_000_000i64..300_000_000_000,
        nanos in 0u32..2_000_000_000,
    ) {
        if let Some(t) = chrono::DateTime::<Utc>::from_timestamp(secs, nanos) {
            proptest::prop_assert_eq!(es_time(&t), chrono_time(&t));
        }
    }
}

#[test]
fn detail_keys_name_the_detail_fields() {
    let names = DETAIL_KEYS.map(Key::name);
    assert_eq!(names, DETAIL_FIELDS);
}
