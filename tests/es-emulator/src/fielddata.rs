//! Which fields a search may sort or aggregate on, as ES 8 decides: `_id` only with the
//! cluster setting `indices.id_field_data.enabled`, `text` only with `fielddata: true`,
//! other types only with their doc values (not `doc_values: false`).
//! Violations fail like a shard failure does: `search_phase_execution_exception` (400)
//! caused by `illegal_argument_exception`.

use serde_json::{json, Value};

use crate::app::App;
use crate::error::EsError;
use crate::mapping::{Mapping, Ty};
use crate::sort::SortSpec;
use crate::store::Store;

/// Rejects `_id` sorts (unless enabled) and sorts/aggregations on `text` fields.
pub fn check(
    app: &App,
    store: &Store,
    names: &[String],
    sort: &[SortSpec],
    aggs: Option<&Value>,
) -> Result<(), EsError> {
    if sort.iter().any(|s| s.field == "_id") {
        let enabled = match store.cluster.get(crate::cluster::ID_FIELD_DATA) {
            Some(v) => v.as_bool().unwrap_or_else(|| v.as_str() == Some("true")),
            None => app.id_field_data_default,
        };
        if !enabled {
            return Err(id_fielddata_error(
                names.first().map_or("_na_", String::as_str),
            ));
        }
    }
    let mut used: Vec<String> = sort.iter().map(|s| s.field.clone()).collect();
    if let Some(a) = aggs {
        agg_fields(a, &mut used);
    }
    for n in names {
        if let Some(idx) = store.indices.get(n) {
            if let Some(f) = used
                .iter()
                .find(|f| text_without_fielddata(&idx.mapping, f))
            {
                return Err(text_fielddata_error(f, n));
            }
            if let Some((f, ty)) = used.iter().find_map(|f| {
                idx.mapping
                    .resolve(f)
                    .filter(|r| {
                        r.field.ty != Ty::Text
                            && r.field.extra.get("doc_values") == Some(&Value::Bool(false))
                    })
                    .map(|r| (f, r.field.type_name.clone()))
            }) {
                return Err(shard_failure(
                    n,
                    EsError::bad_request(format!(
                        "Can't load fielddata on [{f}] because fielddata is unsupported on fields of type [{ty}]. Use doc values instead."
                    )),
                ));
            }
        }
    }
    Ok(())
}

/// Every `"field": "…"` of an aggregation tree.
fn agg_fields(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("field", Value::String(f)) => out.push(f.clone()),
                    _ => agg_fields(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| agg_fields(x, out)),
        _ => {}
    }
}

fn text_without_fielddata(m: &Mapping, field: &str) -> bool {
    m.resolve(field).is_some_and(|r| {
        r.field.ty == Ty::Text && r.field.extra.get("fielddata") != Some(&Value::Bool(true))
    })
}

/// Sorting or aggregating on a `text` field fails in ES unless it enables `fielddata`.
fn text_fielddata_error(field: &str, index: &str) -> EsError {
    shard_failure(index, EsError::bad_request(format!(
        "Fielddata is disabled on [{field}] in [{index}]. Text fields are not optimised for operations that require per-document field data like aggregations and sorting, so these operations are disabled by default. Please use a keyword field instead. Alternatively, set fielddata=true on [{field}] in order to load field data by uninverting the inverted index. Note that this can use significant memory."
    )))
}

/// A query-phase failure on the index's one shard, caused by `cause`.
fn shard_failure(index: &str, cause: EsError) -> EsError {
    EsError::new(400, "search_phase_execution_exception", "all shards failed")
        .with("phase", "query")
        .with("grouped", true)
        .with(
            "failed_shards",
            json!([{"shard": 0, "index": index, "node": "emulator", "reason": cause.to_json()}]),
        )
        .caused_by(cause)
}

/// ES 8 refuses `_id` fielddata by default; the shard failure surfaces as
/// `search_phase_execution_exception` (400) with an `illegal_argument_exception` root cause.
fn id_fielddata_error(index: &str) -> EsError {
    let cause = EsError::bad_request(format!(
        "Fielddata access on the _id field is disallowed, you can re-enable it by updating the dynamic cluster setting: {}",
        crate::cluster::ID_FIELD_DATA
    ));
    EsError::new(400, "search_phase_execution_exception", "all shards failed")
        .with("phase", "query")
        .with("grouped", true)
        .with(
            "failed_shards",
            json!([{"shard": 0, "index": index, "node": "emulator", "reason": cause.to_json()}]),
        )
        .caused_by(cause)
}
