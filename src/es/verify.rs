//! Strict verification of a `_bulk` response against the request that produced it: item
//! count, order, operation, `_index`, `_id` and status of every item. ES answers 200 even
//! when items failed, so nothing is taken on trust.

use serde_json::Value;

use super::bulk::{BulkOp, OpKind};
use super::error::{status_class, ErrorClass, EsError};

/// What a verified bulk did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub items: usize,
    /// Updates that changed nothing (`result: noop`).
    pub noops: usize,
    pub es_took_ms: u64,
}

/// Checks every item; the first structural mismatch or the failed items become an error.
pub fn verify(ops: &[BulkOp], response: &Value) -> Result<Verified, EsError> {
    let bad = |m: String| Err(EsError::BadResponse(m));
    let Some(items) = response["items"].as_array() else {
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
        es_took_ms: response["took"].as_u64().unwrap_or(0),
    };
    let mut failed: Vec<(u16, String, String)> = Vec::new();
    for (n, (op, item)) in ops.iter().zip(items).enumerate() {
        let Some(result) = item.get(op.kind.as_str()) else {
            return bad(format!(
                "item {n}: expected a {:?} result",
                op.kind.as_str()
            ));
        };
        if result["_id"].as_str() != Some(op.id.as_str()) {
            return bad(format!(
                "item {n}: _id {} instead of {}",
                result["_id"], op.id
            ));
        }
        if result["_index"].as_str() != Some(op.index.as_str()) {
            return bad(format!(
                "item {n}: _index {} instead of {}",
                result["_index"], op.index
            ));
        }
        let Some(status) = result["status"]
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
        else {
            return bad(format!("item {n}: no status"));
        };
        let ok = match op.kind {
            OpKind::Index => status == 200 || status == 201,
            OpKind::Update => status == 200 || status == 201,
        };
        if ok && result.get("error").is_none() {
            if result["result"] == "noop" {
                verified.noops += 1;
            }
        } else {
            let error = &result["error"];
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
    if response["errors"].as_bool() != Some(!failed.is_empty()) {
        return bad(format!(
            "bulk response says errors={} but {} items failed",
            response["errors"],
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
        .find(|(s, ..)| status_class(*s) == ErrorClass::Permanent)
        .or(failed.first())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops() -> Vec<BulkOp> {
        vec![
            BulkOp::index("i1", "a", &json!({})),
            BulkOp::scripted_upsert("i2", "b", "s", json!({})),
        ]
    }

    fn ok_response() -> Value {
        json!({"took": 7, "errors": false, "items": [
            {"index": {"_index": "i1", "_id": "a", "status": 201, "result": "created"}},
            {"update": {"_index": "i2", "_id": "b", "status": 200, "result": "noop"}}
        ]})
    }

    #[test]
    fn a_clean_response_verifies() {
        let v = verify(&ops(), &ok_response()).unwrap();
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
    fn missing_or_extra_items_are_rejected() {
        let mut r = ok_response();
        r["items"].as_array_mut().unwrap().pop();
        assert!(matches!(verify(&ops(), &r), Err(EsError::BadResponse(_))));
        let mut r = ok_response();
        let extra = r["items"][0].clone();
        r["items"].as_array_mut().unwrap().push(extra);
        assert!(matches!(verify(&ops(), &r), Err(EsError::BadResponse(_))));
    }

    #[test]
    fn wrong_id_index_or_op_is_rejected() {
        let mut r = ok_response();
        r["items"][0]["index"]["_id"] = json!("zzz");
        assert!(matches!(verify(&ops(), &r), Err(EsError::BadResponse(_))));
        let mut r = ok_response();
        r["items"][1]["update"]["_index"] = json!("other");
        assert!(matches!(verify(&ops(), &r), Err(EsError::BadResponse(_))));
        let mut r = ok_response();
        r["items"][0] = json!({"create": r["items"][0]["index"].clone()});
        assert!(matches!(verify(&ops(), &r), Err(EsError::BadResponse(_))));
    }

    #[test]
    fn swapped_items_are_rejected() {
        let mut r = ok_response();
        r["items"].as_array_mut().unwrap().swap(0, 1);
        assert!(verify(&ops(), &r).is_err());
    }

    #[test]
    fn failed_items_are_classified() {
        let mut r = ok_response();
        r["errors"] = json!(true);
        r["items"][0]["index"]["status"] = json!(429);
        r["items"][0]["index"]["error"] =
            json!({"type": "es_rejected_execution_exception", "reason": "busy"});
        let e = verify(&ops(), &r).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Transient);
        r["items"][1]["update"]["status"] = json!(400);
        r["items"][1]["update"]["error"] =
            json!({"type": "mapper_parsing_exception", "reason": "bad"});
        let e = verify(&ops(), &r).unwrap_err();
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
        assert!(matches!(verify(&ops(), &r), Err(EsError::BadResponse(_))));
    }
}
