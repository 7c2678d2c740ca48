//! Strict verification of a `_bulk` response against the request that produced it: item
//! count, order, operation, `_index`, `_id` and status of every item. ES answers 200 even
//! when items failed, so nothing is taken on trust.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::bulk::{BulkOp, OpKind};
use super::error::{item_class, ErrorClass, EsError};
use crate::json::Text;

/// Where bulks are sent: the answer carries only what [`verify`] reads (`filter_path`), so
/// neither the cluster nor this process spends time on each item's `_shards`, `_seq_no`,
/// `_primary_term` and `_version`. Error answers are never filtered.
pub const BULK_PATH: &str = "/_bulk?filter_path=took,errors,items.*._index,items.*._id,items.*.status,items.*.result,items.*.error";

/// What a verified bulk did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub items: usize,
    /// Updates that changed nothing (`result: noop`).
    pub noops: usize,
    pub es_took_ms: u64,
}

/// One item: an object keyed by the operation it answers (serde's external tagging, so an
/// item is one small value).
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum BulkItem<'a> {
    Index(#[serde(borrow)] ItemResult<'a>),
    Update(#[serde(borrow)] ItemResult<'a>),
    Create(IgnoredAny),
    Delete(#[serde(borrow)] ItemResult<'a>),
}

impl<'a> BulkItem<'a> {
    fn result(&self, kind: OpKind) -> Option<&ItemResult<'a>> {
        match (kind, self) {
            (OpKind::Index, BulkItem::Index(r))
            | (OpKind::Update, BulkItem::Update(r))
            | (OpKind::Delete | OpKind::DeleteIfUnchanged, BulkItem::Delete(r)) => Some(r),
            _ => None,
        }
    }

    fn answered(&self) -> &'static str {
        match self {
            BulkItem::Index(_) => "index",
            BulkItem::Update(_) => "update",
            BulkItem::Create(_) => "create",
            BulkItem::Delete(_) => "delete",
        }
    }
}

/// The fields of an item that verification reads; the texts are borrowed from the body
/// unless they hold escapes. Absent fields stay `None` so that their absence is reported,
/// not defaulted.
#[derive(Deserialize)]
struct ItemResult<'a> {
    #[serde(rename = "_index", borrow)]
    index: Option<Text<'a>>,
    #[serde(rename = "_id", borrow)]
    id: Option<Text<'a>>,
    status: Option<u64>,
    #[serde(borrow)]
    result: Option<Text<'a>>,
    /// Parsed only for a failed item.
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// What the items said, tallied as they are read: no array of items is ever held.
#[derive(Default)]
struct Tally {
    /// Items read, whether or not they matched an operation.
    items: usize,
    noops: usize,
    /// Failed items: status, error type, reason.
    failed: Vec<(u16, String, String)>,
    /// Deletes answered with an error that says the document is not there.
    excused: usize,
    /// The first item that does not answer its operation.
    mismatch: Option<String>,
}

impl Tally {
    /// Checks item `n` against the operation it answers.
    fn check(&mut self, n: usize, op: &BulkOp, item: &BulkItem) -> Result<(), String> {
        let Some(result) = item.result(op.kind) else {
            return Err(format!(
                "item {n}: expected a {:?} result, got {}",
                op.kind.as_str(),
                item.answered()
            ));
        };
        if result.id.as_deref() != Some(op.id.as_str()) {
            return Err(format!(
                "item {n}: _id {:?} instead of {}",
                result.id.as_deref(),
                op.id
            ));
        }
        if result.index.as_deref() != Some(&*op.index) {
            return Err(format!(
                "item {n}: _index {:?} instead of {}",
                result.index.as_deref(),
                op.index
            ));
        }
        let Some(status) = result.status.and_then(|s| u16::try_from(s).ok()) else {
            return Err(format!("item {n}: no status"));
        };
        let ok = match op.kind {
            OpKind::Index => status == 200 || status == 201,
            OpKind::Update => status == 200 || status == 201,
            // Gone already, or its index never existed: the document is not there.
            OpKind::Delete => status == 200 || status == 404,
            // Or changed since it was read, and so kept: what the condition asked for.
            OpKind::DeleteIfUnchanged => matches!(status, 200 | 404 | 409),
        };
        // A delete of a document in a missing index is answered 404 with an error, and a
        // conditional one of a changed document 409; either says what the delete wanted.
        let gone = match op.kind {
            OpKind::Delete => status == 404,
            OpKind::DeleteIfUnchanged => status == 404 || status == 409,
            _ => false,
        };
        match (&result.error, ok) {
            (error, true) if gone => self.excused += usize::from(error.is_some()),
            (None, true) => {
                if result.result.as_deref() == Some("noop") {
                    self.noops += 1;
                }
            }
            (error, _) => {
                let error: Value = error
                    .and_then(|e| serde_json::from_str(e.get()).ok())
                    .unwrap_or_default();
                self.failed.push((
                    status,
                    error["type"].as_str().unwrap_or("unknown").to_string(),
                    error["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .take(300)
                        .collect(),
                ));
            }
        }
        Ok(())
    }
}

/// The `items` array, each item checked against its operation as it is read.
struct Items<'o> {
    ops: &'o [BulkOp],
    tally: &'o mut Tally,
}

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of bulk items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        loop {
            let n = self.tally.items;
            let op = self.ops.get(n).filter(|_| self.tally.mismatch.is_none());
            let read = match op {
                Some(op) => items.next_element::<BulkItem>()?.map(|item| {
                    if let Err(m) = self.tally.check(n, op, &item) {
                        self.tally.mismatch = Some(m);
                    }
                }),
                // Past the operations, or after a mismatch: only counted.
                None => items.next_element::<IgnoredAny>()?.map(drop),
            };
            if read.is_none() {
                return Ok(());
            }
            self.tally.items += 1;
        }
    }
}

/// The response object: `took`, `errors` and the items (checked as read); other fields
/// are skipped.
struct Response<'o> {
    ops: &'o [BulkOp],
    tally: &'o mut Tally,
}

/// What the response object held besides the items.
struct Head {
    took: Option<u64>,
    errors: Option<bool>,
    has_items: bool,
}

impl<'de> DeserializeSeed<'de> for Response<'_> {
    type Value = Head;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Head, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Response<'_> {
    type Value = Head;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a bulk response object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
        let mut head = Head {
            took: None,
            errors: None,
            has_items: false,
        };
        #[derive(Default)]
        struct Seen {
            took: bool,
            errors: bool,
        }
        let mut seen = Seen::default();
        while let Some(Text(key)) = map.next_key()? {
            match &*key {
                "took" if seen.took => return Err(de::Error::duplicate_field("took")),
                "took" => (seen.took, head.took) = (true, map.next_value()?),
                "errors" if seen.errors => return Err(de::Error::duplicate_field("errors")),
                "errors" => (seen.errors, head.errors) = (true, map.next_value()?),
                "items" if head.has_items => return Err(de::Error::duplicate_field("items")),
                "items" => {
                    map.next_value_seed(Items {
                        ops: self.ops,
                        tally: &mut *self.tally,
                    })?;
                    head.has_items = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(head)
    }
}

/// Checks every item; the first structural mismatch or the failed items become an error.
pub fn verify(ops: &[BulkOp], body: &[u8]) -> Result<Verified, EsError> {
    let bad = |m: String| Err(EsError::BadResponse(m));
    let mut tally = Tally::default();
    let head = std::str::from_utf8(body)
        .map_err(|e| e.to_string())
        .and_then(|text| {
            let mut d = serde_json::Deserializer::from_str(text);
            let head = Response {
                ops,
                tally: &mut tally,
            }
            .deserialize(&mut d)
            .and_then(|head| d.end().map(|()| head));
            head.map_err(|e| e.to_string())
        })
        .map_err(|e| EsError::BadResponse(format!("unreadable bulk response: {e}")))?;
    if !head.has_items {
        return bad("bulk response has no items array".into());
    }
    if tally.items != ops.len() {
        return bad(format!(
            "bulk response has {} items for {} operations",
            tally.items,
            ops.len()
        ));
    }
    if let Some(m) = tally.mismatch {
        return bad(m);
    }
    if head.errors != Some(!tally.failed.is_empty() || tally.excused > 0) {
        return bad(format!(
            "bulk response says errors={:?} but {} items failed",
            head.errors,
            tally.failed.len()
        ));
    }
    if let Some((status, error_type, reason)) = worst(&tally.failed) {
        return Err(EsError::ItemsFailed {
            failed: tally.failed.len(),
            total: ops.len(),
            status,
            error_type,
            reason,
        });
    }
    Ok(Verified {
        items: tally.items,
        noops: tally.noops,
        es_took_ms: head.took.unwrap_or(0),
    })
}

/// The failure that decides the class: a permanent one if any, else the first.
fn worst(failed: &[(u16, String, String)]) -> Option<(u16, String, String)> {
    failed
        .iter()
        .find(|(s, t, _)| item_class(*s, t) == ErrorClass::Permanent)
        .or(failed.first())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::es::bulk::ScriptedUpserts;
    use serde_json::json;

    fn ops() -> Vec<BulkOp> {
        vec![
            crate::es::bulk::tests::index_op("i1", "a", &json!({})),
            ScriptedUpserts::new("i2", "s").op("b".into(), b"{}"),
        ]
    }

    fn check(response: &Value) -> Result<Verified, EsError> {
        verify(&ops(), &serde_json::to_vec(response).unwrap())
    }

    fn ok_response() -> Value {
        json!({"took": 7, "errors": false, "items": [
            {"index": {"_index": "i1", "_id": "a", "status": 201, "result": "created"}},
            {"update": {"_index": "i2", "_id": "b", "status": 200, "result": "noop"}}
        ]})
    }

    #[test]
    fn a_clean_response_verifies() {
        let v = check(&ok_response()).unwrap();
        assert_eq!(
            v,
            Verified {
                items: 2,
                noops: 1,
                es_took_ms: 7
            }
        );
    }

    #[test]
    fn a_delete_of_what_is_not_there_succeeds_and_other_delete_failures_do_not() {
        let ops = vec![
            BulkOp::delete("i1", "a"),
            BulkOp::delete("i1", "b"),
            BulkOp::delete("gone", "c"),
        ];
        let missing_index =
            json!({"type": "index_not_found_exception", "reason": "no such index [gone]"});
        let response = |third_status: u64, third_error: Value| {
            json!({"took": 1, "errors": true, "items": [
                {"delete": {"_index": "i1", "_id": "a", "status": 200, "result": "deleted"}},
                {"delete": {"_index": "i1", "_id": "b", "status": 404, "result": "not_found"}},
                {"delete": {"_index": "gone", "_id": "c", "status": third_status, "error": third_error}}
            ]})
        };
        let body = |v: Value| serde_json::to_vec(&v).unwrap();
        let v = verify(&ops, &body(response(404, missing_index))).unwrap();
        assert_eq!(v.items, 3);
        let refused = json!({"type": "cluster_block_exception", "reason": "read-only"});
        assert!(matches!(
            verify(&ops, &body(response(403, refused))),
            Err(EsError::ItemsFailed { status: 403, .. })
        ));
    }

    #[test]
    fn a_conditional_delete_of_a_changed_document_keeps_it_and_a_plain_one_fails() {
        let conflict = json!({"type": "version_conflict_engine_exception", "reason": "changed"});
        let response = json!({"took": 1, "errors": true, "items": [
            {"delete": {"_index": "i1", "_id": "a", "status": 409, "error": conflict}}
        ]});
        let body = serde_json::to_vec(&response).unwrap();
        let kept = verify(&[BulkOp::delete_if_unchanged("i1", "a", 7, 1)], &body).unwrap();
        assert_eq!(kept.items, 1);
        assert!(matches!(
            verify(&[BulkOp::delete("i1", "a")], &body),
            Err(EsError::ItemsFailed { status: 409, .. })
        ));
        let line = BulkOp::delete_if_unchanged("i1", "a", 7, 1).ndjson;
        let action: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            action,
            json!({"delete": {"_id": "a", "_index": "i1", "if_seq_no": 7, "if_primary_term": 1}})
        );
    }

    #[test]
    fn missing_or_extra_items_are_rejected() {
        let mut r = ok_response();
        r["items"].as_array_mut().unwrap().pop();
        assert!(matches!(check(&r), Err(EsError::BadResponse(_))));
        let mut r = ok_response();
        let extra = r["items"][0].clone();
        r["items"].as_array_mut().unwrap().push(extra);
        assert!(matches!(check(&r), Err(EsError::BadResponse(_))));
    }

    #[test]
    fn wrong_id_index_or_op_is_rejected() {
        let mut r = ok_response();
        r["items"][0]["index"]["_id"] = json!("zzz");
        assert!(matches!(check(&r), Err(EsError::BadResponse(_))));
        let mut r = ok_response();
        r["items"][1]["update"]["_index"] = json!("other");
        assert!(matches!(check(&r), Err(EsError::BadResponse(_))));
        let mut r = ok_response();
        r["items"][0] = json!({"create": r["items"][0]["index"].clone()});
        assert!(matches!(check(&r), Err(EsError::BadResponse(_))));
    }

    #[test]
    fn swapped_items_are_rejected() {
        let mut r = ok_response();
        r["items"].as_array_mut().unwrap().swap(0, 1);
        assert!(check(&r).is_err());
    }

    #[test]
    fn failed_items_are_classified() {
        let mut r = ok_response();
        r["errors"] = json!(true);
        r["items"][0]["index"]["status"] = json!(429);
        r["items"][0]["index"]["error"] =
            json!({"type": "es_rejected_execution_exception", "reason": "busy"});
        let e = check(&r).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient);
        r["items"][1]["update"]["status"] = json!(400);
        r["items"][1]["update"]["error"] =
            json!({"type": "mapper_parsing_exception", "reason": "bad"});
        let e = check(&r).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Permanent);
        assert!(matches!(
            e,
            EsError::ItemsFailed {
                failed: 2,
                total: 2,
                status: 400,
                ..
            }
        ));
    }

    #[test]
    fn errors_flag_must_agree() {
        let mut r = ok_response();
        r["errors"] = json!(true);
        assert!(matches!(check(&r), Err(EsError::BadResponse(_))));
    }
}
