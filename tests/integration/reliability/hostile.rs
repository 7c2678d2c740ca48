//! The hostile-input corpus (`tests/fixtures/hostile/corpus.jsonl`, written by
//! `generate.py` there): every request is sent over a raw TCP connection — no client
//! library normalises its path or headers — and must get its documented status and error
//! code, and leave nothing behind: no receipt, no stream, no ES document. A valid batch
//! afterwards is accepted, so the "nothing written" check can see a write.

use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::child::raw_exchange;
use crate::support::scan::t0;
use crate::support::scan::{self, endpoints, Batch};
use crate::support::stack::Stack;

const CORPUS: &str = include_str!("../../fixtures/hostile/corpus.jsonl");
/// `{T0}` in the corpus stands for the test's observation time.
const DEFAULT_OBS: &str =
    r#"[{"type":"endpoint","ip":"203.0.113.7","port":443,"transport":"tcp","observed_at":"{T0}"}]"#;

fn sha(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The request bytes of one case.
fn request(case: &Value, exec: Uuid, scanner: &str, owner: &str) -> Vec<u8> {
    let body = if let Some(b) = case["body"].as_str() {
        b.to_string()
    } else {
        let obs = match case["obs"].as_str() {
            Some(obs) => obs.to_string(),
            None => DEFAULT_OBS.replace("{T0}", t0()),
        };
        let mut fields: Vec<(String, Option<String>)> = vec![
            ("protocol_version".into(), Some("2".into())),
            ("upload_id".into(), Some(format!("\"{}\"", Uuid::new_v4()))),
            ("stream".into(), Some("\"main\"".into())),
            ("batch_index".into(), Some("0".into())),
            ("is_final".into(), Some("false".into())),
            ("checksum".into(), None),
            ("observations".into(), Some(obs.clone())),
        ];
        if let Some(over) = case["fields"].as_object() {
            for (k, v) in over {
                let v = v.as_str().map(str::to_string);
                match fields.iter_mut().find(|(f, _)| f == k) {
                    Some(slot) if v.is_none() => slot.0 = String::new(),
                    Some(slot) => slot.1 = v,
                    None => fields.push((k.clone(), v)),
                }
            }
        }
        let obs_text = fields
            .iter()
            .find(|(k, _)| k == "observations")
            .and_then(|(_, v)| v.clone())
            .unwrap_or_default();
        let checksum_of = case["checksum_of"]
            .as_str()
            .unwrap_or(&obs_text)
            .to_string();
        let parts: Vec<String> = fields
            .into_iter()
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| {
                let v = v.unwrap_or_else(|| format!("\"sha256:{}\"", sha(&checksum_of)));
                format!("\"{k}\":{v}")
            })
            .collect();
        format!("{{{}}}", parts.join(","))
    };
    let path = case["path"]
        .as_str()
        .unwrap_or("/api/v1/scanner/executions/{exec}/batches")
        .replace("{exec}", &exec.to_string());
    let method = case["method"].as_str().unwrap_or("POST");
    let auth = match case["auth"].as_str() {
        None => Some(format!("Bearer {scanner}")),
        Some("none") => None,
        Some("OWNER") => Some(format!("Bearer {owner}")),
        Some("PREFIX") => Some(format!("Bearer {}", &scanner[..scanner.len() / 2])),
        Some(a) => Some(a.to_string()),
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: scanstore\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(a) = auth {
        head.push_str(&format!("Authorization: {a}\r\n"));
    }
    for h in case["headers"].as_array().into_iter().flatten() {
        head.push_str(&h.as_str().unwrap().replace("{scanner}", scanner));
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

#[test]
#[ignore = "needs PostgreSQL"]
fn every_hostile_request_gets_its_documented_4xx_and_writes_nothing() {
    let s = Stack::new("port_scan");
    let cases: Vec<Value> = CORPUS
        .replace("{T0}", t0())
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(cases.len() >= 100, "the corpus has {} cases", cases.len());
    let openapi: Value = serde_json::from_str(scanstore::http::console::OPENAPI_JSON).unwrap();
    let documented =
        &openapi["paths"]["/api/v1/scanner/executions/{execution_id}/batches"]["post"]["responses"];
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let want = case["status"].as_u64().unwrap() as u16;
        let req = request(case, s.execution(), &s.scanner.token, &s.owner.token);
        let (status, head, body) = raw_exchange(s.base(), &req);
        let code = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        let want_code = case["code"].as_str();
        if status != want || (want_code.is_some() && code.as_deref() != want_code) {
            failures.push(format!(
                "{name}: want {want} {want_code:?}, got {status} {code:?}: {}",
                body.chars().take(200).collect::<String>()
            ));
        }
        // The answer is one the API documents (405/404 of unknown routes aside).
        if ![404, 405].contains(&status) && documented[status.to_string()].is_null() {
            failures.push(format!("{name}: {status} is not documented"));
        }
        // And so is its error code, for that status.
        let codes = &documented[status.to_string()]["x-error-codes"];
        if let (Some(code), Some(listed)) = (&code, codes.as_array()) {
            if !listed.iter().any(|c| c == code.as_str()) {
                failures.push(format!(
                    "{name}: code {code} is not documented for {status}"
                ));
            }
        }
        // Nothing of the request is reflected into a response header.
        if head.to_ascii_lowercase().contains("x-scanner-id") {
            failures.push(format!("{name}: request header reflected: {head}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(s.receipts().is_empty(), "a hostile request left a receipt");
    let streams: i64 = s
        .sql()
        .query_one("SELECT count(*) FROM scan_upload_stream", &[])
        .unwrap()
        .get(0);
    assert_eq!(streams, 0, "a hostile request left a stream");
    assert_eq!(s.fact_count(), 0, "a hostile request left a fact");
    assert_eq!(s.endpoint_docs(), 0, "a hostile request left a document");
    // The server still works, and a write is visible to these checks.
    let b = Batch::main(Uuid::new_v4(), 0, endpoints(0, 3, t0()));
    let r = scan::post(s.base(), &s.scanner.token, s.execution(), &b);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.receipts().len(), 1);
    assert_eq!(s.fact_count(), 3);
}
