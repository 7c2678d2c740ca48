//! One publication page: read up to `page_size` documents in a stable order, resuming
//! after a cursor, and turn them into idempotent updates. For an execution, each endpoint
//! of its execution projection becomes two merge updates (the global and the owner's asset
//! document) plus, where the owner has tags for the address, the owner document's tags.
//! For a tags row, each of the owner's asset documents in scope gets its current tags.

use crate::es::index::Indices;
use crate::json::Text;
use crate::tags::{TagScope, TargetKind};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::upload::details::with_detail_fields;
use uuid::Uuid;

use crate::es::alias::AssetIndices;
use crate::es::bulk::{BulkOp, ScriptedUpserts};
use crate::es::{client, index, painless, EsClient, EsError};
use crate::tags::Tags;
use crate::tombstones;

/// A page as read: the search response, parsed (and checked) by [`Fetched::page`]. Kept as
/// bytes so that the documents borrow from it instead of becoming one JSON tree each.
pub struct Fetched {
    body: Vec<u8>,
}

/// The documents of one page and the cursor after the last one.
pub struct Page<'a> {
    pub docs: Vec<Doc<'a>>,
    /// `search_after` values of the last document, as JSON text (the outbox `cursor`).
    pub cursor: Option<String>,
}

/// One document of a page: its id and the [`FIELDS`] its source has, as the JSON text the
/// search returned (copied verbatim into the merge parameters).
pub struct Doc<'a> {
    pub id: Cow<'a, str>,
    pub source: Source<'a>,
}

/// The fields an asset merge needs from an execution-projection document.
const FIELDS: [&str; 17] = with_detail_fields![
    "ip", "port", "transport", "service", "product", "version", "banner";
    "details_digest", "observed_at", "execution_id"
];
const IP: usize = 0;
const PORT: usize = 1;
const TRANSPORT: usize = 2;
const OBSERVED_AT: usize = FIELDS.len() - 2;
/// The first detail field, after the seven before it (see `with_detail_fields!`).
const STATE: usize = 7;

/// What a page reads: [`FIELDS`], then `erased` (an execution-projection document whose
/// observation an owner's deletion covers, marked when retention retired the tombstone;
/// not an observation field, so never merged).
const READ: [&str; FIELDS.len() + 1] = {
    let mut read = [""; FIELDS.len() + 1];
    let mut i = 0;
    while i < FIELDS.len() {
        read[i] = FIELDS[i];
        i += 1;
    }
    read[FIELDS.len()] = "erased";
    read
};
const ERASED: usize = FIELDS.len();

/// A document's [`READ`] fields by position; absent and `null` fields are `None`.
#[derive(Default)]
pub struct Source<'a>([Option<&'a RawValue>; READ.len()]);

impl<'a> Source<'a> {
    /// Reads the JSON object `text` (fields other than [`FIELDS`] are skipped).
    pub fn parse(text: &'a str) -> Result<Source<'a>, serde_json::Error> {
        serde_json::from_str(text)
    }

    fn text(&self, field: usize) -> Option<Cow<'a, str>> {
        let raw = self.0[field]?.get();
        serde_json::from_str::<&str>(raw)
            .map(Cow::Borrowed)
            .or_else(|_| serde_json::from_str::<String>(raw).map(Cow::Owned))
            .ok()
    }

    /// Whether an owner's deletion covers this observation: it reaches the global view only.
    fn erased(&self) -> bool {
        self.0[ERASED].is_some_and(|raw| raw.get() == "true")
    }

    /// (ip, transport, port): the endpoint's identity, which names its asset documents.
    /// A missing or mistyped part is empty (or port 0), as a merge of such a document
    /// writes it under that id rather than failing the page.
    pub(super) fn endpoint_key(&self) -> (Cow<'a, str>, Cow<'a, str>, u16) {
        let port = self.0[PORT]
            .and_then(|raw| serde_json::from_str::<u16>(raw.get()).ok())
            .unwrap_or(0);
        (
            self.text(IP).unwrap_or_default(),
            self.text(TRANSPORT).unwrap_or_default(),
            port,
        )
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Source<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SourceVisitor(PhantomData))
    }
}

struct SourceVisitor<'a>(PhantomData<Source<'a>>);

impl<'de: 'a, 'a> Visitor<'de> for SourceVisitor<'a> {
    type Value = Source<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a document source object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Source<'a>, M::Error> {
        let mut source = Source::default();
        while let Some(Text(key)) = map.next_key()? {
            match READ.iter().position(|f| *f == key) {
                Some(i) => {
                    let raw: &'de RawValue = map.next_value()?;
                    source.0[i] = (raw.get() != "null").then_some(raw);
                }
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(source)
    }
}

/// The parts of a search response a page reads.
#[derive(Deserialize)]
struct SearchResponse<'a> {
    timed_out: Option<bool>,
    #[serde(rename = "_shards", default)]
    shards: Shards,
    #[serde(borrow, default)]
    hits: Hits<'a>,
}

#[derive(Deserialize, Default)]
struct Shards {
    failed: Option<u64>,
}

#[derive(Deserialize, Default)]
struct Hits<'a> {
    #[serde(borrow, default)]
    hits: Vec<SearchHit<'a>>,
}

#[derive(Deserialize)]
struct SearchHit<'a> {
    #[serde(rename = "_id", borrow, default)]
    id: Cow<'a, str>,
    #[serde(rename = "_source", borrow, default)]
    source: Source<'a>,
    #[serde(borrow, default)]
    sort: Option<&'a RawValue>,
}

/// Reads the page of `index` matching `filter` after `cursor`. The sort (ip, port,
/// transport) is unique per endpoint of one execution and per asset of one owner, so
/// pages neither overlap nor skip.
pub fn read(
    es: &EsClient,
    index_name: &str,
    filter: Value,
    cursor: Option<&str>,
    size: usize,
) -> Result<Fetched, EsError> {
    let query = page_query(filter, cursor, size)?;
    let body = serde_json::to_vec(&query).map_err(|e| EsError::Refused(e.to_string()))?;
    let raw = es.search_raw(&Indices::one(index_name), &body)?;
    Ok(Fetched { body: raw.bytes })
}

/// The search of the page after `cursor`. `search_after` alone would leave a shard to visit
/// every match of `filter` on every page and drop those behind the cursor only when
/// collecting (a close run's filter matches all of an owner's open assets: a million
/// documents visited per page of a thousand); the cursor's address as a lower bound on `ip`
/// lets it skip them through the points index instead. The bound never changes a page:
/// the sort leads with `ip`, so nothing after the cursor lies below its address.
fn page_query(filter: Value, cursor: Option<&str>, size: usize) -> Result<Value, EsError> {
    let mut clauses = match filter {
        Value::Array(clauses) => clauses,
        one => vec![one],
    };
    let after = cursor
        .map(|c| {
            serde_json::from_str::<Value>(c)
                .map_err(|e| EsError::Refused(format!("unreadable cursor {c:?}: {e}")))
        })
        .transpose()?;
    // A document without an address sorts last with a number for it: nothing to bound by.
    if let Some(ip) = after.as_ref().and_then(|a| a[0].as_str()) {
        clauses.push(json!({ "range": { "ip": { "gte": ip } } }));
    }
    let mut query = json!({
        "size": size,
        "query": { "bool": { "filter": clauses } },
        "sort": [ {"ip": "asc"}, {"port": "asc"}, {"transport": "asc"} ],
        "track_total_hits": false,
        "_source": READ,
    });
    if let Some(after) = after {
        query["search_after"] = after;
    }
    Ok(query)
}

impl Fetched {
    /// The page's documents, borrowed from the response; a partial result is an error.
    pub fn page(&self) -> Result<Page<'_>, EsError> {
        let r: SearchResponse = client::parse(&self.body)
            .map_err(|e| EsError::BadResponse(format!("unreadable search response: {e}")))?;
        if r.timed_out == Some(true) || r.shards.failed.unwrap_or(0) > 0 {
            return Err(EsError::BadResponse(
                "partial search result (timed out or failed shards)".into(),
            ));
        }
        let cursor = r
            .hits
            .hits
            .last()
            .map(|h| h.sort.map_or("null", RawValue::get).to_string());
        let docs = r
            .hits
            .hits
            .into_iter()
            .map(|h| Doc {
                id: h.id,
                source: h.source,
            })
            .collect();
        Ok(Page { docs, cursor })
    }
}

/// The execution's endpoints in its projection.
pub fn execution_filter(execution_id: Uuid) -> Value {
    json!([ { "term": { "execution_id": execution_id.to_string() } } ])
}

/// The owner's asset documents within a tag scope (`ip` or `cidr`; a domain tag touches
/// no asset document, so it has no filter).
pub fn tag_scope_filter(owner_id: Uuid, scope: &TagScope) -> Option<Value> {
    match scope.kind {
        TargetKind::Ip | TargetKind::Cidr => Some(json!([
            { "term": { "owner_id": owner_id.to_string() } },
            { "term": { "ip": scope.key } }
        ])),
        TargetKind::Domain => None,
    }
}

/// The endpoints of a page, for the tombstone lookup.
pub fn endpoints<'a>(docs: &'a [Doc<'_>]) -> Vec<crate::tombstones::Endpoint<'a>> {
    docs.iter().map(|d| d.source.endpoint_key()).collect()
}

/// When each document of a page was observed, for the observations of an open port that
/// the owner's copy takes (not erased by a deletion, `deleted` as for
/// [`execution_operations`]); `None` for the others. What the lookup of the close runs a
/// page may have missed reads (see [`super::missed`]).
pub fn open_observed_at<'a>(
    docs: &'a [Doc<'_>],
    deleted: &[Option<String>],
) -> Vec<Option<Cow<'a, str>>> {
    docs.iter()
        .enumerate()
        .map(|(i, d)| {
            let at = d.source.text(OBSERVED_AT)?;
            let open = matches!(d.source.text(STATE).as_deref(), None | Some("open"));
            let kept = !d.source.erased()
                && !tombstones::erased(&at, deleted.get(i).and_then(Option::as_deref));
            (open && kept).then_some(at)
        })
        .collect()
}

/// The addresses of a page, for the tag lookup.
pub fn addresses<'a>(docs: &'a [Doc<'_>]) -> Vec<Cow<'a, str>> {
    docs.iter()
        .map(|d| d.source.text(IP).unwrap_or_default())
        .collect()
}

/// The asset-merge script's `params.obs`: the [`FIELDS`] the projection document has
/// (the owner's copy adds `owner_id`). Serialised from the page's documents without
/// copying them.
struct Observation<'a>(&'a Source<'a>);

impl Serialize for Observation<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (f, v) in FIELDS.iter().zip(&self.0 .0) {
            if let Some(v) = v {
                map.serialize_entry(f, v)?;
            }
        }
        map.end()
    }
}

/// Writes the merge params `{"obs":OBS}` for the global copy, or, given the owner (a JSON
/// string), `OBS` with `"owner_id":OWNER` added for the owner's copy. `obs` is an encoded
/// JSON object, so the owner goes in before its closing brace.
fn merge_params(out: &mut Vec<u8>, obs: &[u8], owner: Option<&[u8]>) {
    out.extend_from_slice(b"{\"obs\":");
    match (owner, obs.split_last()) {
        (Some(owner), Some((b'}', fields))) => {
            out.extend_from_slice(fields);
            if fields.len() > 1 {
                out.push(b',');
            }
            out.extend_from_slice(b"\"owner_id\":");
            out.extend_from_slice(owner);
            out.push(b'}');
        }
        _ => out.extend_from_slice(obs),
    }
    out.push(b'}');
}

/// Merge updates into physical asset indices (`targets`: where the aliases point, or a
/// rebuild's new version; written directly so that every item's `_index` can be
/// verified), with deterministic ids. An observation a deletion of the owner's copy erased
/// (`deleted`, per document: see [`crate::tombstones`]; or marked `erased` when its
/// tombstone was retired) updates the global view only.
pub fn execution_operations(
    targets: &AssetIndices,
    owner_id: Uuid,
    docs: &[Doc<'_>],
    tags: &Tags,
    deleted: &[Option<String>],
) -> Vec<BulkOp> {
    let global = ScriptedUpserts::new(&targets.global, painless::ASSET_MERGE_ID);
    let user = ScriptedUpserts::new(&targets.user, painless::ASSET_MERGE_ID);
    let mut ops = Vec::with_capacity(docs.len() * 2);
    // A UUID's text needs no escaping.
    let owner = format!("\"{owner_id}\"").into_bytes();
    // One observation encoded per endpoint, copied into both of its operations.
    let (mut obs, mut params) = (Vec::with_capacity(512), Vec::with_capacity(1024));
    for (i, doc) in docs.iter().enumerate() {
        let (ip, transport, port) = doc.source.endpoint_key();
        let (ip, transport) = (ip.as_ref(), transport.as_ref());
        obs.clear();
        // Serialising borrowed JSON values into memory cannot fail.
        let _ = serde_json::to_writer(&mut obs, &Observation(&doc.source));
        params.clear();
        merge_params(&mut params, &obs, None);
        let global_id = index::global_asset_id(ip, transport, port);
        let user_id = index::user_asset_id(owner_id, &global_id);
        ops.push(global.op(global_id, &params));
        let observed_at = doc.source.text(OBSERVED_AT).unwrap_or_default();
        if doc.source.erased()
            || tombstones::erased(&observed_at, deleted.get(i).and_then(Option::as_deref))
        {
            continue;
        }
        // Applied after the merge in the same request; the tags row of a later change
        // corrects it, so only current tags are ever written.
        let tags = tags.for_ip(ip);
        let retag = (!tags.is_empty())
            .then(|| BulkOp::partial_update(&targets.user, &user_id, &json!({ "tags": tags })));
        params.clear();
        merge_params(&mut params, &obs, Some(&owner));
        ops.push(user.op(user_id, &params));
        ops.extend(retag);
    }
    ops
}

/// The current tags of each owner document of the page (an empty list clears them).
pub fn retag_operations(targets: &AssetIndices, docs: &[Doc<'_>], tags: &Tags) -> Vec<BulkOp> {
    docs.iter()
        .map(|d| {
            let ip = d.source.text(IP).unwrap_or_default();
            BulkOp::partial_update(&targets.user, &d.id, &json!({ "tags": tags.for_ip(&ip) }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page's documents (all with id `d`) of these sources.
    fn docs_of(sources: &[String]) -> Vec<Doc<'_>> {
        sources
            .iter()
            .map(|text| Doc {
                id: "d".into(),
                source: Source::parse(text).unwrap(),
            })
            .collect()
    }

    #[test]
    fn two_updates_per_untagged_endpoint_with_deterministic_ids() {
        let owner = Uuid::from_u128(7);
        let e = json!({"ip": "203.0.113.7", "port": 443, "transport": "tcp", "service": "https",
                       "observed_at": "2026-11-29T10:00:00.000Z", "execution_id": "x"})
        .to_string();
        let doc = Doc {
            id: "d".into(),
            source: Source::parse(&e).unwrap(),
        };
        let ops = execution_operations(
            &AssetIndices::version("s", 1),
            owner,
            &[doc],
            &Tags::default(),
            &[],
        );
        assert_eq!(ops.len(), 2);
        assert_eq!(
            (&*ops[0].index, ops[0].id.as_str()),
            ("s-assets-global-v1", "203.0.113.7-tcp-443")
        );
        assert_eq!(&*ops[1].index, "s-assets-user-v1");
        assert_eq!(ops[1].id, format!("{}-203.0.113.7-tcp-443", owner.simple()));
        let user = String::from_utf8(ops[1].ndjson.clone()).unwrap();
        assert!(user.contains(&owner.to_string()));
        assert!(!String::from_utf8(ops[0].ndjson.clone())
            .unwrap()
            .contains("owner_id"));
    }

    #[test]
    fn a_page_copies_its_fields_verbatim_and_skips_the_rest() {
        // As a server may write it: escapes in keys' values, nulls, fields not asked for.
        let body = r#"{"timed_out": false, "_shards": {"failed": 0},
            "hits": {"hits": [
                {"_id": "a", "sort": ["10.0.0.1", 22, "tcp"],
                 "_source": {"ip": "10.0.0.1", "port": 22, "transport": "tcp",
                             "banner": "SSH-2.0 \"x\"\n", "product": null,
                             "extra": {"deep": [1, 2]}}},
                {"_id": "b\u0041", "sort": ["10.0.0.2", "80", "tcp"],
                 "_source": {"ip": "10.0.0.2", "port": "80", "transport": "t\u0063p",
                             "version": 1.5}}
            ]}}"#;
        let fetched = Fetched {
            body: body.as_bytes().to_vec(),
        };
        let page = fetched.page().unwrap();
        assert_eq!(page.cursor.as_deref(), Some(r#"["10.0.0.2", "80", "tcp"]"#));
        assert_eq!(page.docs[1].id, "bA");
        let ops = execution_operations(
            &AssetIndices::version("s", 1),
            Uuid::nil(),
            &page.docs,
            &Tags::default(),
            &[],
        );
        let obs = |i: usize| -> Value {
            let text = String::from_utf8(ops[i].ndjson.clone()).unwrap();
            let source: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
            source["script"]["params"]["obs"].clone()
        };
        // Nulls and fields outside FIELDS are not sent; strings keep their escapes' meaning.
        assert_eq!(
            obs(0),
            json!({"ip": "10.0.0.1", "port": 22, "transport": "tcp", "banner": "SSH-2.0 \"x\"\n"})
        );
        // A mistyped port is copied as it is, and names the document as port 0.
        assert_eq!(ops[2].id, "10.0.0.2-tcp-0");
        assert_eq!(obs(2)["port"], json!("80"));
        assert_eq!(obs(2)["version"], json!(1.5));
        assert_eq!(addresses(&page.docs), ["10.0.0.1", "10.0.0.2"]);
    }

    #[test]
    fn the_owners_copy_is_the_observation_plus_the_owner() {
        let owner = Uuid::from_u128(9);
        let full =
            json!({"ip": "10.0.0.1", "port": 22, "transport": "tcp", "banner": "a\"}"}).to_string();
        let sources = [full.clone(), "{}".to_string()];
        let docs = docs_of(&sources);
        let ops = execution_operations(
            &AssetIndices::version("s", 1),
            owner,
            &docs,
            &Tags::default(),
            &[],
        );
        let obs = |i: usize| -> Value {
            let text = String::from_utf8(ops[i].ndjson.clone()).unwrap();
            let source: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
            source["script"]["params"]["obs"].clone()
        };
        let mut with_owner = serde_json::from_str::<Value>(&full).unwrap();
        with_owner["owner_id"] = json!(owner.to_string());
        assert_eq!(obs(0), serde_json::from_str::<Value>(&full).unwrap());
        assert_eq!(obs(1), with_owner);
        assert_eq!(obs(2), json!({}));
        assert_eq!(obs(3), json!({"owner_id": owner.to_string()}));
    }

    #[test]
    fn a_page_after_a_cursor_is_bounded_below_by_its_address() {
        let filter = json!([{ "term": { "owner_id": "o" } }]);
        let first = page_query(filter.clone(), None, 10).unwrap();
        assert_eq!(first["query"]["bool"]["filter"], filter);
        assert!(first.get("search_after").is_none());
        let next = page_query(filter.clone(), Some(r#"["10.0.1.77",80,"tcp"]"#), 10).unwrap();
        assert_eq!(next["search_after"], json!(["10.0.1.77", 80, "tcp"]));
        assert_eq!(
            next["query"]["bool"]["filter"],
            json!([{ "term": { "owner_id": "o" } }, { "range": { "ip": { "gte": "10.0.1.77" } } }])
        );
        assert_eq!(
            next["sort"],
            json!([{"ip": "asc"}, {"port": "asc"}, {"transport": "asc"}])
        );
        // After a document without an address (sorted last, as a number) there is no bound.
        let last =
            page_query(filter.clone(), Some(r#"[9223372036854775807,0,"tcp"]"#), 10).unwrap();
        assert_eq!(last["query"]["bool"]["filter"], filter);
        assert!(page_query(filter, Some("not json"), 10).is_err());
    }

    #[test]
    fn open_observations_the_owners_copy_takes_have_their_times() {
        assert_eq!(FIELDS[STATE], "state");
        let at = "2026-11-29T10:00:00.000Z";
        let sources = [
            json!({"ip": "10.0.0.1", "observed_at": at}).to_string(),
            json!({"ip": "10.0.0.2", "observed_at": at, "state": "open"}).to_string(),
            json!({"ip": "10.0.0.3", "observed_at": at, "state": "closed"}).to_string(),
            json!({"ip": "10.0.0.4", "observed_at": at, "erased": true}).to_string(),
            json!({"ip": "10.0.0.5", "observed_at": at}).to_string(),
            json!({"ip": "10.0.0.6"}).to_string(),
        ];
        let docs = docs_of(&sources);
        // The fifth is covered by a deletion made after it was observed.
        let deleted = [
            None,
            None,
            None,
            None,
            Some("2026-12-01T00:00:00.000Z".into()),
        ];
        let observed = open_observed_at(&docs, &deleted);
        let expected = [Some(at), Some(at), None, None, None, None];
        assert_eq!(
            observed.iter().map(Option::as_deref).collect::<Vec<_>>(),
            expected
        );
    }

    #[test]
    fn a_partial_result_is_an_error() {
        let fetched = Fetched {
            body: br#"{"timed_out": true, "hits": {"hits": []}}"#.to_vec(),
        };
        assert!(fetched.page().is_err());
    }

    #[test]
    fn tag_scopes() {
        let o = Uuid::nil();
        let scope = |v: Value| serde_json::from_value::<TagScope>(v).unwrap();
        let cidr = scope(json!({"kind": "cidr", "key": "10.0.0.0/8"}));
        assert!(tag_scope_filter(o, &cidr).is_some());
        assert!(
            tag_scope_filter(o, &scope(json!({"kind": "domain", "key": "a.example"}))).is_none()
        );
        assert_eq!(cidr.to_string(), "cidr:10.0.0.0/8");
    }
}
