//! Enrichment: turns a validated batch into Elasticsearch operations — one raw-fact
//! document per observation in its monthly index, and one execution-projection document
//! per endpoint — with deterministic ids so that a retried batch overwrites itself.

use std::collections::hash_map::{Entry, HashMap};

use chrono::Datelike;
use serde_json::{json, Value};
use uuid::Uuid;

use super::batch::{Batch, Endpoint, Observation};
use super::details::{Details, DETAIL_FIELDS};
use crate::es::bulk::{BulkOp, IndexWrites};
use crate::es::index;
use crate::es::source::{self, Field, Key, Source};
use crate::ports::Transport;
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

/// RFC 3339 UTC with milliseconds: the one time format of every document (see
/// [`source::write_time`]).
pub fn es_time(t: &chrono::DateTime<chrono::Utc>) -> String {
    let mut out = Vec::with_capacity(24);
    source::write_time(&mut out, t);
    // Only ASCII digits and separators are written.
    String::from_utf8(out).unwrap_or_default()
}

/// The ES indices a batch writes, sorted and unique: its fact months, plus the execution
/// projection when it has endpoints. Stored as the receipt's `storage_references`.
pub fn storage_references(prefix: &str, batch: &Batch) -> Vec<String> {
    let mut months: Vec<(i32, u32)> = batch
        .observations
        .iter()
        .map(|o| (o.observed_at().year(), o.observed_at().month()))
        .collect();
    months.sort_unstable();
    months.dedup();
    let mut refs: Vec<String> = months
        .into_iter()
        .map(|(year, month)| index::facts_index_of_month(prefix, year, month))
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
    let ids = [
        owning.execution_id,
        owning.task_id,
        owning.owner_id,
        owning.scanner_id,
        batch.upload_id,
    ]
    .map(|id| id.to_string());
    let mut months = Months::default();
    let mut facts = Vec::with_capacity(batch.observations.len());
    let mut newest = Newest::with_capacity(batch.endpoint_count());
    let fact_ids = index::FactIds::new(
        owning.execution_id,
        batch.upload_id,
        stream,
        batch.batch_index,
    );
    for (position, o) in batch.observations.iter().enumerate() {
        let (kind, tags) = match o {
            Observation::Endpoint(e) => ("endpoint", tags.for_ip(&e.ip)),
            Observation::Host(h) => ("host", tags.for_ip(&h.ip)),
            Observation::Dns(d) => ("dns", tags.for_name(&d.name)),
        };
        let mut doc = Source::default();
        for (key, id) in [
            Key::ExecutionId,
            Key::TaskId,
            Key::OwnerId,
            Key::ScannerId,
            Key::UploadId,
        ]
        .into_iter()
        .zip(&ids)
        {
            doc.push(key, Field::Plain(id));
        }
        doc.push(Key::Stream, Field::Plain(stream));
        doc.push(Key::BatchIndex, Field::Number(batch.batch_index.into()));
        doc.push(Key::ObservedAt, Field::Time(o.observed_at()));
        doc.push(Key::Type, Field::Plain(kind));
        doc.push(Key::Tags, Field::Texts(&tags));
        match o {
            Observation::Endpoint(e) => {
                endpoint_fields(&mut doc, e);
                newest.keep(e);
            }
            Observation::Host(h) => {
                doc.push(Key::Ip, Field::Plain(&h.ip));
                if !h.os.is_empty() {
                    doc.push(Key::Os, Field::Json(json!(h.os)));
                }
                if !h.hostnames.is_empty() {
                    doc.push(Key::Hostnames, Field::Json(json!(h.hostnames)));
                }
            }
            Observation::Dns(d) => {
                doc.push(Key::Name, Field::Text(&d.name));
                doc.push(Key::RecordType, Field::Text(&d.record_type));
                doc.push(Key::Value, Field::Text(&d.value));
            }
        }
        let id = fact_ids.at(position);
        let writes = months.of(prefix, o.observed_at());
        facts.push(writes.op(id, |out| doc.write(out)));
    }
    let docs = EndpointDocs::new(
        &index::execution_endpoints(prefix),
        (owning.execution_id, owning.task_id, owning.owner_id),
    );
    let endpoints = newest
        .endpoints
        .into_iter()
        .map(|e| docs.op(e, &tags.for_ip(&e.ip)))
        .collect();
    Ops { facts, endpoints }
}

/// The writes into each monthly facts index a batch touches (almost always one).
#[derive(Default)]
struct Months(Vec<((i32, u32), IndexWrites)>);

impl Months {
    fn of(&mut self, prefix: &str, at: &chrono::DateTime<chrono::Utc>) -> &IndexWrites {
        let utc = at.naive_utc();
        let month = (utc.year(), utc.month());
        let i = match self.0.iter().position(|(m, _)| *m == month) {
            Some(i) => i,
            None => {
                self.0
                    .push((month, IndexWrites::new(&index::facts_index(prefix, at))));
                self.0.len() - 1
            }
        };
        &self.0[i].1
    }
}

/// The execution-projection writes of one execution (of a task, of an owner): one
/// document per endpoint of the execution, holding its newest observation.
pub struct EndpointDocs {
    writes: IndexWrites,
    execution_id: Uuid,
    /// The execution's, task's and owner's ids as text.
    ids: [String; 3],
}

impl EndpointDocs {
    pub fn new(projection: &str, (execution_id, task_id, owner_id): (Uuid, Uuid, Uuid)) -> Self {
        EndpointDocs {
            writes: IndexWrites::new(projection),
            execution_id,
            ids: [execution_id, task_id, owner_id].map(|id| id.to_string()),
        }
    }

    /// The write of endpoint `e`'s document, with the tags it has.
    pub fn op(&self, e: &Endpoint, tags: &[String]) -> BulkOp {
        let mut doc = Source::default();
        for (key, id) in [Key::ExecutionId, Key::TaskId, Key::OwnerId]
            .into_iter()
            .zip(&self.ids)
        {
            doc.push(key, Field::Plain(id));
        }
        doc.push(Key::ObservedAt, Field::Time(&e.observed_at));
        doc.push(Key::Tags, Field::Texts(tags));
        endpoint_fields(&mut doc, e);
        let id =
            index::execution_endpoint_id(self.execution_id, &e.ip, e.transport.as_str(), e.port);
        self.writes.op(id, |out| doc.write(out))
    }
}

/// An endpoint fact as stored (`_source`), back to the observation and the tags it had.
pub fn endpoint_of_fact(source: &Value) -> Option<(Endpoint, Vec<String>)> {
    let text = |k: &str| source[k].as_str().map(str::to_string);
    let endpoint = Endpoint {
        ip: text("ip")?,
        port: u16::try_from(source["port"].as_u64()?).ok()?,
        transport: Transport::from_name(source["transport"].as_str()?)?,
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

/// The keys of [`DETAIL_FIELDS`], in its order.
const DETAIL_KEYS: [Key; 7] = [
    Key::State,
    Key::Hostnames,
    Key::Cpe,
    Key::ExtraInfo,
    Key::Tunnel,
    Key::Confidence,
    Key::Scripts,
];

fn endpoint_fields<'a>(doc: &mut Source<'a>, e: &'a Endpoint) {
    doc.push(Key::Ip, Field::Plain(&e.ip));
    doc.push(Key::Port, Field::Number(e.port.into()));
    doc.push(Key::Transport, Field::Plain(e.transport.as_str()));
    for (k, v) in [
        (Key::Service, &e.service),
        (Key::Product, &e.product),
        (Key::Version, &e.version),
        (Key::Banner, &e.banner),
    ] {
        if let Some(v) = v {
            doc.push(k, Field::Text(v));
        }
    }
    // Most observations have no details: no tree is built for them.
    let Some(digest) = e.details.digest() else {
        return;
    };
    if let Value::Object(mut d) = json!(e.details) {
        for (name, key) in DETAIL_FIELDS.into_iter().zip(DETAIL_KEYS) {
            if let Some(v) = d.remove(name) {
                doc.push(key, Field::Json(v));
            }
        }
    }
    doc.push(Key::DetailsDigest, Field::Json(Value::String(digest)));
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

/// One document per endpoint within a batch: the newest observation of each, in the order
/// the endpoints first appear.
struct Newest<'a> {
    endpoints: Vec<&'a Endpoint>,
    /// Position in `endpoints` by (ip, port, transport).
    slots: HashMap<(&'a str, u16, Transport), usize>,
}

impl<'a> Newest<'a> {
    fn with_capacity(n: usize) -> Self {
        Newest {
            endpoints: Vec::with_capacity(n),
            slots: HashMap::with_capacity(n),
        }
    }

    fn keep(&mut self, e: &'a Endpoint) {
        match self.slots.entry((&e.ip, e.port, e.transport)) {
            Entry::Occupied(slot) => {
                let held = &mut self.endpoints[*slot.get()];
                if rank(e) > rank(held) {
                    *held = e;
                }
            }
            Entry::Vacant(slot) => {
                slot.insert(self.endpoints.len());
                self.endpoints.push(e);
            }
        }
    }
}

#[cfg(test)]
#[path = "facts_tests.rs"]
mod tests;
