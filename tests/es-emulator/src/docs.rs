//! The write engine shared by `_bulk` and the single-document APIs: index, create, update
//! (doc merge, upserts, stored/native scripts, noop) and delete, with version and
//! `if_seq_no` checks and mapping enforcement. Callers hold the store lock.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::error::EsError;
use crate::resolve::{resolve_write, WriteTarget};
use crate::store::{Index, Store};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Index,
    Create,
    Update,
    Delete,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Index => "index",
            OpKind::Create => "create",
            OpKind::Update => "update",
            OpKind::Delete => "delete",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionType {
    Internal,
    External,
    ExternalGte,
}

#[derive(Debug, Clone)]
pub struct WriteOp {
    pub kind: OpKind,
    pub index: String,
    pub id: Option<String>,
    /// Document for index/create, payload for update.
    pub body: Option<Value>,
    /// For index/create from `_bulk`: the source line as sent (see [`DocVersion::raw`]).
    ///
    /// [`DocVersion::raw`]: crate::store::DocVersion::raw
    pub raw: Option<Box<RawValue>>,
    pub version: Option<i64>,
    pub version_type: VersionType,
    pub if_seq_no: Option<i64>,
    pub if_primary_term: Option<i64>,
    pub require_alias: bool,
    /// Bulk update `_source` (action line or payload): return the updated source as `get`.
    pub fetch_source: Option<Value>,
    /// Custom routing: stored (for `exists` on `_routing`), and the value that picks the
    /// document's shard instead of its id.
    pub routing: Option<String>,
}

#[derive(Debug, Clone)]
pub struct WriteOk {
    pub index: String,
    pub id: String,
    pub version: i64,
    pub result: &'static str,
    pub seq_no: i64,
    pub status: u16,
    /// `_shards` as (total, successful, failed).
    pub shards: (u64, u64, u64),
}

/// The fields a bulk item may carry, in the order they are written.
pub const ITEM_FIELDS: [&str; 11] = [
    "_index",
    "_id",
    "_version",
    "result",
    "forced_refresh",
    "_shards",
    "_seq_no",
    "_primary_term",
    "status",
    "get",
    "error",
];

/// Which of [`ITEM_FIELDS`] a bulk item keeps under a `filter_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemFields([bool; ITEM_FIELDS.len()]);

impl ItemFields {
    /// `keep(field)` for each field; `None` if any is kept only in part (`_shards.total`),
    /// which a per-field choice cannot say.
    pub fn pick(keep: impl Fn(&str) -> Option<bool>) -> Option<ItemFields> {
        let mut kept = [false; ITEM_FIELDS.len()];
        for (slot, field) in kept.iter_mut().zip(ITEM_FIELDS) {
            *slot = keep(field)?;
        }
        Some(ItemFields(kept))
    }

    pub fn keeps(&self, field: &str) -> bool {
        ITEM_FIELDS
            .iter()
            .position(|f| *f == field)
            .is_some_and(|i| self.0[i])
    }
}

impl WriteOk {
    /// Appends the fields of this result that `fields` keeps as a bulk item body (`{...}`);
    /// false, with nothing written, if it keeps none.
    pub fn write_picked(
        &self,
        out: &mut Vec<u8>,
        forced_refresh: bool,
        get: Option<&Value>,
        fields: &ItemFields,
    ) -> bool {
        use std::io::Write;
        let mut first = true;
        let mut put = |out: &mut Vec<u8>, i: usize, value: &dyn Fn(&mut Vec<u8>)| {
            if fields.0[i] {
                out.extend_from_slice(if first { b"{\"" } else { b",\"" });
                first = false;
                out.extend_from_slice(ITEM_FIELDS[i].as_bytes());
                out.extend_from_slice(b"\":");
                value(out);
            }
        };
        put(out, 0, &|o| drop(serde_json::to_writer(o, &self.index)));
        put(out, 1, &|o| drop(serde_json::to_writer(o, &self.id)));
        put(out, 2, &|o| drop(write!(o, "{}", self.version)));
        put(out, 3, &|o| drop(write!(o, "\"{}\"", self.result)));
        if forced_refresh {
            put(out, 4, &|o| o.extend_from_slice(b"true"));
        }
        let (total, successful, failed) = self.shards;
        put(out, 5, &|o| {
            drop(write!(
                o,
                "{{\"total\":{total},\"successful\":{successful},\"failed\":{failed}}}"
            ))
        });
        put(out, 6, &|o| drop(write!(o, "{}", self.seq_no)));
        put(out, 7, &|o| o.push(b'1'));
        put(out, 8, &|o| drop(write!(o, "{}", self.status)));
        if let Some(g) = get {
            put(out, 9, &|o| drop(serde_json::to_writer(o, g)));
        }
        if !first {
            out.push(b'}');
        }
        !first
    }

    /// Appends this result as a bulk item body (`{...}`), written directly for speed.
    pub fn write_item(&self, out: &mut Vec<u8>, forced_refresh: bool, get: Option<&Value>) {
        use std::io::Write;
        let (total, successful, failed) = self.shards;
        out.extend_from_slice(b"{\"_index\":");
        let _ = serde_json::to_writer(&mut *out, &self.index);
        out.extend_from_slice(b",\"_id\":");
        let _ = serde_json::to_writer(&mut *out, &self.id);
        let _ = write!(
            out,
            ",\"_version\":{},\"result\":\"{}\",{}\"_shards\":{{\"total\":{total},\"successful\":{successful},\"failed\":{failed}}},\"_seq_no\":{},\"_primary_term\":1,\"status\":{}",
            self.version,
            self.result,
            if forced_refresh { "\"forced_refresh\":true," } else { "" },
            self.seq_no,
            self.status
        );
        if let Some(g) = get {
            out.extend_from_slice(b",\"get\":");
            let _ = serde_json::to_writer(&mut *out, g);
        }
        out.push(b'}');
    }

    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("_index".into(), json!(self.index));
        m.insert("_id".into(), json!(self.id));
        m.insert("_version".into(), json!(self.version));
        m.insert("result".into(), json!(self.result));
        let (total, successful, failed) = self.shards;
        m.insert(
            "_shards".into(),
            json!({"total": total, "successful": successful, "failed": failed}),
        );
        m.insert("_seq_no".into(), json!(self.seq_no));
        m.insert("_primary_term".into(), json!(1));
        m
    }
}

/// A failed write, with the index and id it concerned (for the bulk item).
#[derive(Debug, Clone)]
pub struct WriteErr {
    pub index: String,
    pub id: String,
    pub error: EsError,
}

pub fn parse_version_type(v: Option<&str>) -> Result<VersionType, EsError> {
    match v {
        None | Some("internal") => Ok(VersionType::Internal),
        Some("external") => Ok(VersionType::External),
        Some("external_gte") => Ok(VersionType::ExternalGte),
        Some(other) => Err(EsError::bad_request(format!(
            "No version type match [{other}]"
        ))),
    }
}

fn auto_id() -> String {
    let raw = uuid::Uuid::new_v4().simple().to_string();
    raw[..20].to_owned()
}

/// Resolves (auto-creating) the concrete index of a write.
pub fn target_index(store: &mut Store, name: &str, require_alias: bool) -> Result<String, EsError> {
    match resolve_write(store, name, require_alias)? {
        WriteTarget::Index(i) => Ok(i),
        WriteTarget::Missing => Ok(store.create_index(name, None)?.name.clone()),
    }
}

/// Applies one write. The error is boxed: it is the rare path and large.
pub fn apply(store: &mut Store, mut op: WriteOp) -> Result<WriteOk, Box<WriteErr>> {
    let id = match &op.id {
        Some(id) => id.clone(),
        None if matches!(op.kind, OpKind::Index | OpKind::Create) => auto_id(),
        None => String::new(),
    };
    let fail = |index: &str, error: EsError| {
        Box::new(WriteErr {
            index: index.to_owned(),
            id: id.clone(),
            error,
        })
    };
    if op.id.as_deref() == Some("")
        || (op.id.is_none() && matches!(op.kind, OpKind::Update | OpKind::Delete))
    {
        return Err(fail(
            &op.index,
            EsError::new(
                400,
                "illegal_argument_exception",
                "if _id is specified it must not be empty",
            ),
        ));
    }
    if id.len() > 512 {
        return Err(fail(
            &op.index,
            EsError::bad_request(format!(
                "id [{id}] is too long, must be no longer than 512 bytes but was: {}",
                id.len()
            )),
        ));
    }
    let index_name =
        target_index(store, &op.index, op.require_alias).map_err(|e| fail(&op.index, e))?;
    op.routing = crate::resolve::write_routing(store, &op.index, &index_name, op.routing.take())
        .map_err(|e| fail(&op.index, e))?;
    let Some(index) = store.indices.get_mut(&index_name) else {
        return Err(fail(&op.index, EsError::index_not_found(&op.index)));
    };
    let uuid = index.uuid.clone();
    let shard = index.shard_of(&id, op.routing.as_deref());
    let scripts = &store.scripts;
    let body = op.body.take();
    let raw = op.raw.take();
    let res = match op.kind {
        OpKind::Index | OpKind::Create => write_doc(index, &op, body.map(|b| (b, raw)), &id),
        OpKind::Delete => delete_doc(index, &op, &id),
        OpKind::Update => crate::update::update_doc(index, &op, body, &id, scripts),
    };
    res.map_err(|e| {
        // A shard-level failure names the document's shard, as ES's item errors do.
        let e = if e.meta.contains_key("shard") {
            e.with("shard", shard.to_string())
        } else {
            e
        };
        let e = if e.meta.contains_key("index") {
            e
        } else {
            e.on_index(&index_name, &uuid)
        };
        Box::new(WriteErr {
            index: index_name.clone(),
            id: id.clone(),
            error: e,
        })
    })
}

pub(crate) fn check_cas(index: &Index, op: &WriteOp, id: &str) -> Result<(), EsError> {
    let (Some(seq), term) = (op.if_seq_no, op.if_primary_term.unwrap_or(1)) else {
        return Ok(());
    };
    let current = index.docs.get(id).and_then(|s| s.latest.clone());
    match current {
        Some(doc) if doc.seq_no == seq && term == 1 => Ok(()),
        Some(doc) => Err(EsError::version_conflict(id, format!("required seqNo [{seq}], primary term [{term}]. current document has seqNo [{}] and primary term [1]", doc.seq_no), &index.name, &index.uuid)),
        None => Err(EsError::version_conflict(id, format!("required seqNo [{seq}], primary term [{term}]. but no document was found"), &index.name, &index.uuid)),
    }
}

fn next_version(index: &Index, op: &WriteOp, id: &str) -> Result<i64, EsError> {
    let slot = index.docs.get(id);
    let exists = slot.is_some_and(|s| s.latest.is_some());
    let current = slot.map_or(0, |s| s.version);
    match (op.version_type, op.version) {
        (VersionType::Internal, Some(_)) if op.kind != OpKind::Delete || op.if_seq_no.is_none() => Err(EsError::new(
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: internal versioning can not be used for optimistic concurrency control. Please use `if_seq_no` and `if_primary_term` instead;",
        )),
        (VersionType::Internal, _) => Ok(current + 1),
        (vt, Some(v)) => {
            let ok = !exists || if vt == VersionType::External { v > current } else { v >= current };
            if ok {
                Ok(v)
            } else {
                let cmp = if vt == VersionType::External { "higher or equal to" } else { "higher than" };
                Err(EsError::version_conflict(id, format!("current version [{current}] is {cmp} the one provided [{v}]"), &index.name, &index.uuid))
            }
        }
        (_, None) => Err(EsError::new(400, "action_request_validation_exception", "Validation Failed: 1: an external version is required;")),
    }
}

fn write_doc(
    index: &mut Index,
    op: &WriteOp,
    body: Option<(Value, Option<Box<RawValue>>)>,
    id: &str,
) -> Result<WriteOk, EsError> {
    let Some((source, raw)) = body else {
        return Err(EsError::new(
            400,
            "action_request_validation_exception",
            "Validation Failed: 1: source is missing;",
        ));
    };
    check_cas(index, op, id)?;
    let exists = index.docs.get(id).is_some_and(|s| s.latest.is_some());
    if op.kind == OpKind::Create && exists {
        let v = index.docs.get(id).map_or(0, |s| s.version);
        return Err(EsError::version_conflict(
            id,
            format!("document already exists (current version [{v}])"),
            &index.name,
            &index.uuid,
        ));
    }
    let version = next_version(index, op, id)?;
    index.check_doc(id, &source)?;
    let (version, seq_no) = index.put_as_sent(id, Some((source, raw)), version, op.routing.clone());
    Ok(ok(
        index,
        id,
        version,
        seq_no,
        if exists { "updated" } else { "created" },
    ))
}

pub(crate) fn ok(
    index: &Index,
    id: &str,
    version: i64,
    seq_no: i64,
    result: &'static str,
) -> WriteOk {
    let status = match result {
        "created" => 201,
        "not_found" => 404,
        _ => 200,
    };
    let shards = if result == "noop" {
        (0, 0, 0)
    } else {
        (1 + index.replicas, 1, 0)
    };
    WriteOk {
        index: index.name.clone(),
        id: id.to_owned(),
        version,
        result,
        seq_no,
        status,
        shards,
    }
}

pub(crate) fn delete_doc(index: &mut Index, op: &WriteOp, id: &str) -> Result<WriteOk, EsError> {
    check_cas(index, op, id)?;
    let exists = index.docs.get(id).is_some_and(|s| s.latest.is_some());
    let version = next_version(index, op, id)?;
    let (version, seq_no) = index.put(id, None, version, op.routing.clone());
    Ok(ok(
        index,
        id,
        version,
        seq_no,
        if exists { "deleted" } else { "not_found" },
    ))
}
