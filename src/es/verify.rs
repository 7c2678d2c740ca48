//! Strict verification of a `_bulk` response against the request that produced it: item
//! count, order, operation, `_index`, `_id` and status of every item. ES answers 200 even
//! when items failed, so nothing is taken on trust.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::bulk::{BulkOp, OpKind};
use super::client;
use super::error::{item_class, ErrorClass, EsError};

/// What a verified bulk did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub items: usize,
    /// Updates that changed nothing (`result: noop`).
    pub noops: usize,
    pub es_took_ms: u64,
}

/// The parts of a bulk response that verification reads, borrowed from the body where
/// possible; absent fields stay `None` so that their absence is reported, not defaulted.
#[derive(Deserialize)]
struct BulkResponse<'a> {
    took: Option<u64>,
    errors: Option<bool>,
    #[serde(borrow)]
    items: Option<Vec<BulkItem<'a>>>,
}

/// One item: an object keyed by the operation it answers (serde's external tagging, so an
/// item is one small value and a 10 000-item response is not a vector of four options each).
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

#[derive(Deserialize)]
struct ItemResult<'a> {
    #[serde(rename = "_index", borrow)]
    index: Option<Cow<'a, str>>,
    #[serde(rename = "_id", borrow)]
    id: Option<Cow<'a, str>>,
    status: Option<u64>,
    #[serde(borrow)]
    result: Option<Cow<'a, str>>,
    /// Parsed only for a failed item.
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

/// Checks every item; the first structural mismatch or the failed items become an error.
pub fn verify(ops: &[BulkOp], body: &[u8]) -> Result<Verified, EsError> {
    let bad = |m: String| Err(EsError::BadResponse(m));
    let response: BulkResponse = client::parse(body)
        .map_err(|e| EsError::BadResponse(format!("unreadable bulk response: {e}")))?;
    let Some(items) = response.items else {
        return bad("bulk response has no items array".into());
    };
    if items.len() != ops.len() {
        return bad(format!(
            "bulk response has {} items for {} operations",
            items.len(),
            ops.len()
        ));
    }
    let mut verified = Verified {
        items: items.len(),
        noops: 0,
        es_took_ms: response.took.unwrap_or(0),
    };
    let mut failed: Vec<(u16, String, String)> = Vec::new();
    // Deletes answered with an error that says the document is not there.
    let mut excused = 0;
    for (n, (op, item)) in ops.iter().zip(&items).enumerate() {
        let Some(result) = item.result(op.kind) else {
            return bad(format!(
                "item {n}: expected a {:?} result, got {}",
                op.kind.as_str(),
                item.answered()
            ));
        };
        if result.id.as_deref() != Some(op.id.as_str()) {
            return bad(format!(
                "item {n}: _id {:?} instead of {}",
                result.id, op.id
            ));
        }
        if result.index.as_deref() != Some(&*op.index) {
            return bad(format!(
                "item {n}: _index {:?} instead of {}",
                result.index, op.index
            ));
        }
        let Some(status) = result.status.and_then(|s| u16::try_from(s).ok()) else {
            return bad(format!("item {n}: no status"));
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
            (error, true) if gone => excused += usize::from(error.is_some()),
            (None, true) => {
                if result.result.as_deref() == Some("noop") {
                    verified.noops += 1;
                }
            }
            (error, _) => {
                let error: Value = error
                    .and_then(|e| serde_json::from_str(e.get()).ok())
                    .unwrap_or_default();
                failed.push((
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
    }
    if response.errors != Some(!failed.is_empty() || excused > 0) {
        return bad(format!(
            "bulk response says errors={:?} but {} items failed",
            response.errors,
            failed.len()
        ));
    }
    if let Some((status, error_type, reason)) = worst(&failed) {
        return Err(EsError::ItemsFailed {
            failed: failed.len(),
            total: ops.len(),
            status,
            error_type,
            reason,
        });
    }
    Ok(verified)
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
