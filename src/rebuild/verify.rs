//! Document-by-document comparison of two asset versions (seed 003: equal totals prove
//! nothing). Each view is read page by page in a stable order on one side and looked up by
//! id on the other, in both directions, so a document missing on either side, or one whose
//! fields differ (first/last seen, service fields and their observation time, the
//! execution that decided them, owner, tags), is named by its id.

use crate::es::index::Indices;
use serde_json::{json, Map, Value};

use crate::es::alias::{AssetIndices, View};
use crate::es::{EsClient, EsError};

/// Documents compared per request.
const PAGE: usize = 500;
/// Differences named in a report (the counts cover all of them).
pub const NAMED: usize = 10;

/// What differs between two versions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Documents compared (those present on the reference side).
    pub compared: u64,
    /// Ids present only in the reference version.
    pub missing: u64,
    /// Ids present only in the other version.
    pub extra: u64,
    /// Ids present in both with different content.
    pub differing: u64,
    /// The first differences, `view:id (what)`.
    pub first: Vec<String>,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.missing == 0 && self.extra == 0 && self.differing == 0
    }

    fn note(&mut self, view: View, id: &str, what: &str) {
        if self.first.len() < NAMED {
            self.first.push(format!("{}:{id} ({what})", view.as_str()));
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} missing, {} extra, {} differing of {} compared; first: {}",
            self.missing,
            self.extra,
            self.differing,
            self.compared,
            self.first.join(", ")
        )
    }
}

/// The stable order of a view: unique per document.
fn sort(view: View) -> Value {
    match view {
        View::Global => json!([{"ip": "asc"}, {"port": "asc"}, {"transport": "asc"}]),
        View::User => {
            json!([{"owner_id": "asc"}, {"ip": "asc"}, {"port": "asc"}, {"transport": "asc"}])
        }
    }
}

/// A document as compared: explicit nulls dropped and no tags the same as empty tags
/// (a document untagged by a tag change keeps `tags: []`, one never tagged has none).
pub fn normalise(source: &Value) -> Value {
    let mut out = Map::new();
    for (k, v) in source.as_object().into_iter().flatten() {
        let empty_tags = k == "tags" && v.as_array().is_some_and(Vec::is_empty);
        if !v.is_null() && !empty_tags {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// The fields in which two normalised documents differ, by name.
fn differing_fields(a: &Value, b: &Value) -> Vec<String> {
    let empty = Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

type Page = (Vec<(String, Value)>, Option<Value>);

fn read_page(
    es: &EsClient,
    name: &str,
    view: View,
    after: Option<&Value>,
) -> Result<Page, EsError> {
    let mut query = json!({
        "size": PAGE,
        "query": {"match_all": {}},
        "sort": sort(view),
        "track_total_hits": false,
    });
    if let Some(a) = after {
        query["search_after"] = a.clone();
    }
    hits(es, name, &query)
}

fn by_ids(es: &EsClient, name: &str, ids: &[&str]) -> Result<Vec<(String, Value)>, EsError> {
    let query = json!({
        "size": ids.len(),
        "query": {"ids": {"values": ids}},
        "track_total_hits": false,
    });
    Ok(hits(es, name, &query)?.0)
}

fn hits(es: &EsClient, name: &str, query: &Value) -> Result<Page, EsError> {
    let body = es.search(&Indices::one(name), query)?;
    if body["timed_out"].as_bool() == Some(true)
        || body["_shards"]["failed"].as_u64().unwrap_or(0) > 0
    {
        return Err(EsError::BadResponse(format!(
            "partial search result from {name} (timed out or failed shards)"
        )));
    }
    let hits = body["hits"]["hits"].as_array().cloned().unwrap_or_default();
    let after = hits.last().map(|h| h["sort"].clone());
    Ok((
        hits.into_iter()
            .map(|h| {
                (
                    h["_id"].as_str().unwrap_or_default().to_string(),
                    h["_source"].clone(),
                )
            })
            .collect(),
        after,
    ))
}

/// Walks `from` page by page and looks every id up in `to`. With `content`, documents
/// present on both sides are compared field by field; without, only presence is checked.
fn walk(
    es: &EsClient,
    view: View,
    from: &str,
    to: &str,
    content: bool,
    diff: &mut Diff,
) -> Result<(), EsError> {
    let mut after: Option<Value> = None;
    loop {
        let (docs, next) = read_page(es, from, view, after.as_ref())?;
        if docs.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = docs.iter().map(|(id, _)| id.as_str()).collect();
        let other: std::collections::HashMap<String, Value> =
            by_ids(es, to, &ids)?.into_iter().collect();
        for (id, doc) in &docs {
            match other.get(id) {
                None if content => {
                    diff.missing += 1;
                    diff.note(view, id, &format!("missing in {to}"));
                }
                None => {
                    diff.extra += 1;
                    diff.note(view, id, &format!("only in {from}"));
                }
                Some(o) if content => {
                    diff.compared += 1;
                    let fields = differing_fields(&normalise(doc), &normalise(o));
                    if !fields.is_empty() {
                        diff.differing += 1;
                        diff.note(view, id, &format!("differs in {}", fields.join(",")));
                    }
                }
                Some(_) => {}
            }
        }
        if docs.len() < PAGE {
            return Ok(());
        }
        after = next;
    }
}

/// Compares `other` against `reference`, both views. Both must be refreshed first.
pub fn compare(
    es: &EsClient,
    reference: &AssetIndices,
    other: &AssetIndices,
) -> Result<Diff, EsError> {
    let mut diff = Diff::default();
    for view in View::BOTH {
        walk(
            es,
            view,
            reference.of(view),
            other.of(view),
            true,
            &mut diff,
        )?;
        walk(
            es,
            view,
            other.of(view),
            reference.of(view),
            false,
            &mut diff,
        )?;
    }
    Ok(diff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_and_empty_tags_are_absent() {
        let a = json!({"ip": "10.0.0.1", "banner": null, "tags": []});
        assert_eq!(normalise(&a), json!({"ip": "10.0.0.1"}));
        let b = json!({"ip": "10.0.0.1", "tags": ["x"]});
        assert_eq!(normalise(&b), b);
    }

    #[test]
    fn differing_fields_are_named() {
        let a =
            json!({"first_seen": "2026-01-01T00:00:00.000Z", "service": "https", "tags": ["a"]});
        let b = json!({"first_seen": "2026-01-02T00:00:00.000Z", "service": "https"});
        assert_eq!(differing_fields(&a, &b), vec!["first_seen", "tags"]);
        assert!(differing_fields(&a, &a).is_empty());
    }

    #[test]
    fn a_report_names_at_most_ten() {
        let mut d = Diff::default();
        for i in 0..15 {
            d.missing += 1;
            d.note(View::User, &i.to_string(), "missing");
        }
        assert_eq!(d.first.len(), NAMED);
        assert!(!d.is_empty());
        assert!(d.summary().starts_with("15 missing"));
    }
}
