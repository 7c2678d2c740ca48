//! Which mapping parameters the emulator takes on the field types it indexes: those it
//! implements and those that change nothing it answers. Any other is refused as
//! Elasticsearch refuses an unknown parameter.

use serde_json::{Map, Value};

use crate::error::EsError;
use crate::mapping::{mapper_error, Ty};
use crate::query::DEFAULT_DATE;

/// Taken on every indexed type: `store` does not change what the emulator answers, `meta`
/// is only echoed, `index: false` searches through the doc values as Elasticsearch 8 does,
/// and without doc values a sort or aggregation fails (`fielddata`).
const ANY: &[&str] = &["type", "index", "doc_values", "store", "meta"];

/// The further parameters a type takes, `None` for the types stored but not indexed.
fn own(ty: Ty) -> Option<&'static [&'static str]> {
    Some(match ty {
        Ty::Keyword => &[
            "ignore_above",
            "fields",
            "norms",
            "similarity",
            "eager_global_ordinals",
            "index_options",
        ],
        Ty::Date => &["format", "fields"],
        // One emulated shard holds doubles exactly; a scaled float differs from ES only
        // below its scaling factor.
        Ty::Double => &["scaling_factor", "fields"],
        Ty::Ip
        | Ty::Long
        | Ty::Integer
        | Ty::Short
        | Ty::Byte
        | Ty::UnsignedLong
        | Ty::Float
        | Ty::HalfFloat
        | Ty::Boolean => &["fields"],
        Ty::Object => &["properties", "dynamic", "enabled"],
        // The analyzers are checked with the mapping (`mapping::parse_field`).
        Ty::Text => &["analyzer", "search_analyzer", "fields", "fielddata"],
        Ty::Opaque => return None,
    })
}

/// Refuses a parameter of field `name` its type does not take, and values the emulator
/// does not implement: a date `format` other than the default, `enabled: false`, and a
/// field neither indexed nor with doc values (Elasticsearch cannot search it at all).
pub fn check(name: &str, type_name: &str, ty: Ty, obj: &Map<String, Value>) -> Result<(), EsError> {
    let Some(own) = own(ty) else {
        return Ok(());
    };
    let unknown = |k: &str| {
        mapper_error(format!(
            "unknown parameter [{k}] on mapper [{name}] of type [{type_name}]"
        ))
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !ANY.contains(&k.as_str()) && !own.contains(&k.as_str()))
    {
        return Err(unknown(k));
    }
    if let Some(f) = obj
        .get("format")
        .filter(|f| f.as_str() != Some(DEFAULT_DATE))
    {
        return Err(mapper_error(format!(
            "Error parsing [format] on field [{name}]: the emulator parses dates only as [{DEFAULT_DATE}], not {f}"
        )));
    }
    if obj.get("enabled").is_some_and(|e| e != &Value::Bool(true)) {
        return Err(unknown("enabled"));
    }
    let off = |k: &str| obj.get(k) == Some(&Value::Bool(false));
    if off("index") && off("doc_values") {
        return Err(mapper_error(format!(
            "field [{name}] is neither indexed nor has doc values: the emulator does not implement such a field"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(ty: Ty, type_name: &str, v: Value) -> Option<String> {
        let obj = v.as_object().cloned().unwrap_or_default();
        check("f", type_name, ty, &obj).err().map(|e| {
            assert_eq!(e.kind, "mapper_parsing_exception");
            e.reason
        })
    }

    #[test]
    fn unimplemented_parameters_are_named() {
        assert_eq!(
            reason(
                Ty::Keyword,
                "keyword",
                json!({"type": "keyword", "null_value": "x"})
            )
            .as_deref(),
            Some("unknown parameter [null_value] on mapper [f] of type [keyword]")
        );
        assert_eq!(
            reason(Ty::Long, "long", json!({"copy_to": "all"})).as_deref(),
            Some("unknown parameter [copy_to] on mapper [f] of type [long]")
        );
        assert_eq!(
            reason(Ty::Object, "object", json!({"enabled": false})).as_deref(),
            Some("unknown parameter [enabled] on mapper [f] of type [object]")
        );
    }

    #[test]
    fn a_custom_date_format_is_refused_the_default_taken() {
        let r = reason(Ty::Date, "date", json!({"format": "yyyy/MM/dd"}));
        assert!(r.is_some_and(|r| r.contains("[format] on field [f]") && r.contains("yyyy/MM/dd")));
        assert_eq!(
            reason(Ty::Date, "date", json!({"format": DEFAULT_DATE})),
            None
        );
    }

    #[test]
    fn harmless_parameters_and_unchecked_types_pass() {
        assert_eq!(
            reason(
                Ty::Keyword,
                "keyword",
                json!({"index": false, "doc_values": true, "ignore_above": 10})
            ),
            None
        );
        assert_eq!(
            reason(Ty::Opaque, "geo_point", json!({"ignore_z_value": true})),
            None
        );
    }
}
