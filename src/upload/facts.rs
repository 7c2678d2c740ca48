//! Enrichment: turns a validated batch into Elasticsearch operations — one raw-fact
//! document per observation in its monthly index, and one execution-projection document
//! per endpoint — with deterministic ids so that a retried batch overwrites itself.

use chrono::SecondsFormat;
use serde_json::{json, Value};
use uuid::Uuid;

use super::batch::{Batch, Endpoint, Observation};
use super::details::{Details, DETAIL_FIELDS};
use crate::es::bulk::BulkOp;
use crate::es::index;
use crate::tags::Tags;

/// Who and what a batch belongs to: copied into every document.
#[derive(Debug, Clone)]
pub struct Owning {
    pub execution_id: Uuid,
    pub task_id: Uuid,
    pub owner_id: Uuid,
    pub scanner_id: Uuid,
}

/// The operations of one batch.
pub struct Ops {
    pub facts: Vec<BulkOp>,
    pub endpoints: Vec<BulkOp>,
}

/// RFC 3339 UTC with milliseconds: the one time format of every document.
pub fn es_time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The ES indices a batch writes, sorted and unique: its fact months, plus the execution
/// projection when it has endpoints. Stored as the receipt's `storage_references`.
pub fn storage_references(prefix: &str, batch: &Batch) -> Vec<String> {
    let mut refs: Vec<String> = batch
        .observations
        .iter()
        .map(|o| index::facts_index(prefix, o.observed_at()))
        .collect();
    if batch.endpoint_count() > 0 {
        refs.push(index::execution_endpoints(prefix));
    }
    refs.sort();
    refs.dedup();
    refs
}

pub fn build(prefix: &str, owning: &Owning, batch: &Batch, tags: &Tags) -> Ops {
    let stream = batch.stream.as_str();
    let mut facts = Vec::with_capacity(batch.observations.len());
    let mut newest: Vec<&Endpoint> = Vec::new();
    for (position, o) in batch.observations.iter().enumerate() {
        let mut doc = json!({
            "execution_id": owning.execution_id.to_string(),
            "task_id": owning.task_id.to_string(),
            "owner_id": owning.owner_id.to_string(),
            "scanner_id": owning.scanner_id.to_string(),
            "upload_id": batch.upload_id.to_string(),
            "stream": stream,
            "batch_index": batch.batch_index,
            "observed_at": es_time(o.observed_at()),
        });
        match o {
            Observation::Endpoint(e) => {
                doc["type"] = json!("endpoint");
                doc["tags"] = json!(tags.for_ip(&e.ip));
                endpoint_fields(&mut doc, e);
                keep_newest(&mut newest, e);
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
        let id = index::fact_id(
            owning.execution_id,
            batch.upload_id,
            stream,
            batch.batch_index,
            position,
        );
        facts.push(BulkOp::index(
            &index::facts_index(prefix, o.observed_at()),
            &id,
            &doc,
        ));
    }
    let projection = index::execution_endpoints(prefix);
    let endpoints = newest
        .into_iter()
        .map(|e| {
            let ids = (owning.execution_id, owning.task_id, owning.owner_id);
            endpoint_op(&projection, ids, e, &tags.for_ip(&e.ip))
        })
        .collect();
    Ops { facts, endpoints }
}

/// The execution-projection write of endpoint `e` of (execution, task, owner): one
/// document per endpoint of the execution, holding its newest observation.
pub fn endpoint_op(
    projection: &str,
    (execution_id, task_id, owner_id): (Uuid, Uuid, Uuid),
    e: &Endpoint,
    tags: &[String],
) -> BulkOp {
    let mut doc = json!({
        "execution_id": execution_id.to_string(),
        "task_id": task_id.to_string(),
        "owner_id": owner_id.to_string(),
        "observed_at": es_time(&e.observed_at),
        "tags": tags,
    });
    endpoint_fields(&mut doc, e);
    let id = index::execution_endpoint_id(execution_id, &e.ip, &e.transport, e.port);
    BulkOp::index(projection, &id, &doc)
}

/// An endpoint fact as stored (`_source`), back to the observation and the tags it had.
pub fn endpoint_of_fact(source: &Value) -> Option<(Endpoint, Vec<String>)> {
    let text = |k: &str| source[k].as_str().map(str::to_string);
    let endpoint = Endpoint {
        ip: text("ip")?,
        port: u16::try_from(source["port"].as_u64()?).ok()?,
        transport: text("transport")?,
        service: text("service"),
        product: text("product"),
        version: text("version"),
        banner: text("banner"),
        details: details_of(source),
        observed_at: chrono::DateTime::parse_from_rfc3339(source["observed_at"].as_str()?)
            .ok()?
            .with_timezone(&chrono::Utc),
    };
    let tags = source["tags"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Some((endpoint, tags))
}

/// The details a stored endpoint document carries (none when it has none, or when they
/// cannot be read back: the document was written by scanstore, so that does not happen).
fn details_of(source: &Value) -> Details {
    let fields: serde_json::Map<String, Value> = DETAIL_FIELDS
        .iter()
        .filter_map(|k| source.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    serde_json::from_value(Value::Object(fields)).unwrap_or_default()
}

/// Whether `a` outranks `b` as the observation an endpoint's document shows.
pub fn newer(a: &Endpoint, b: &Endpoint) -> bool {
    rank(a) > rank(b)
}

fn endpoint_fields(doc: &mut Value, e: &Endpoint) {
    doc["ip"] = json!(e.ip);
    doc["port"] = json!(e.port);
    doc["transport"] = json!(e.transport);
    for (k, v) in [
        ("service", &e.service),
        ("product", &e.product),
        ("version", &e.version),
        ("banner", &e.banner),
    ] {
        if let Some(v) = v {
            doc[k] = json!(v);
        }
    }
    if let (Value::Object(d), Some(digest)) = (json!(e.details), e.details.digest()) {
        if let Some(doc) = doc.as_object_mut() {
            doc.extend(d);
            doc.insert("details_digest".into(), json!(digest));
        }
    }
}

/// The order deciding which observation of one endpoint wins: newest time, then the
/// service fields, then the details' digest (the same total order as the asset merge).
fn rank(
    e: &Endpoint,
) -> (
    &chrono::DateTime<chrono::Utc>,
    &str,
    &str,
    &str,
    &str,
    String,
) {
    fn s(v: &Option<String>) -> &str {
        v.as_deref().unwrap_or("")
    }
    (
        &e.observed_at,
        s(&e.service),
        s(&e.product),
        s(&e.version),
        s(&e.banner),
        e.details.digest().unwrap_or_default(),
    )
}

/// One document per endpoint within a batch: the newest observation of it.
fn keep_newest<'a>(newest: &mut Vec<&'a Endpoint>, e: &'a Endpoint) {
    match newest
        .iter_mut()
        .find(|n| n.ip == e.ip && n.port == e.port && n.transport == e.transport)
    {
        Some(slot) if rank(e) > rank(slot) => *slot = e,
        Some(_) => {}
        None => newest.push(e),
    }
}
