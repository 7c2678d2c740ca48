//! The in-memory cluster state: indices (latest vs searchable documents), index templates,
//! stored scripts, aliases, and the refresh that publishes latest → searchable.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::doc_map::{DocMap, SlotNo};
use crate::error::EsError;
use crate::mapping::Mapping;
use crate::postings::{DocNo, KeywordFields, Searchable};
use crate::settings::{
    flatten_settings, insert_dotted, parse_interval, setting, validate_index_name,
};

/// One version of a document.
#[derive(Debug)]
pub struct DocVersion {
    pub source: Value,
    /// The source as it was sent, when it was written whole (index or create): what ES
    /// stores and returns as `_source`. `None` for a source an update produced.
    pub raw: Option<Box<RawValue>>,
    pub version: i64,
    /// The sequence number on its shard (what `_seq_no` shows: each shard counts its own).
    pub seq_no: i64,
    /// The index-wide order of writes (a mapping update's fields index only later ones).
    pub write_no: i64,
    /// The primary shard the document is routed to (see `routing`).
    pub shard: u32,
    pub routing: Option<String>,
}

/// A document id's slot: the latest write (what GET sees) and the number of the refreshed
/// version in the index's [`Searchable`] (what search sees). `version` survives deletes so a
/// re-create continues the version sequence.
#[derive(Debug, Default)]
pub struct Slot {
    pub latest: Option<Arc<DocVersion>>,
    pub searchable: Option<DocNo>,
    pub version: i64,
    pub dirty: bool,
    /// The number of `latest` while it waits for a refresh (`None` for a pending delete).
    pub pending: Option<DocNo>,
}

#[derive(Debug, Clone, Default)]
pub struct AliasMeta {
    pub is_write_index: Option<bool>,
    pub extra: Map<String, Value>,
}

#[derive(Debug)]
pub struct Index {
    pub name: String,
    pub uuid: String,
    pub shards: u64,
    /// `index.number_of_routing_shards` (see `routing`).
    pub routing_shards: u32,
    pub replicas: u64,
    /// `None` = `refresh_interval: -1`.
    pub refresh_interval: Option<Duration>,
    pub settings: Map<String, Value>,
    pub mapping: Mapping,
    pub aliases: BTreeMap<String, AliasMeta>,
    /// Ids are shared (`Arc<str>`) between this map and the postings; Fx hashing because
    /// every write and candidate lookup goes through it.
    pub docs: DocMap,
    /// The slots with writes search does not see yet, oldest first. Publication takes them
    /// from the front only, so a write queued as the n-th is searchable once
    /// `published >= n`.
    pub dirty: VecDeque<SlotNo>,
    /// Ids ever queued in / taken from `dirty` (what `refresh=wait_for` waits on).
    pub queued: u64,
    pub published: u64,
    /// The next write's number in the index-wide order ([`DocVersion::write_no`]).
    pub next_write_no: i64,
    /// The next sequence number of each shard.
    next_seq_no: Vec<i64>,
    pub last_refresh: Instant,
    /// Incremented by every publication that changed what search sees (a cache key).
    pub refresh_gen: u64,
    /// Every indexed version by number, which are searchable, and their keyword postings
    /// (see `postings`).
    pub searchable: Searchable,
    /// The mapping's keyword fields, kept with it (every write inverts its document).
    keywords: KeywordFields,
}

#[derive(Debug, Clone)]
pub struct Template {
    pub patterns: Vec<String>,
    pub priority: i64,
    pub body: Value,
}

#[derive(Debug, Clone)]
pub struct StoredScript {
    pub lang: String,
    pub source: String,
    /// The native twin of `source`, looked up once at PUT time.
    pub native: Option<crate::painless::NativeScript>,
}

#[derive(Debug, Default)]
pub struct Store {
    pub indices: BTreeMap<String, Index>,
    pub templates: BTreeMap<String, Template>,
    pub scripts: BTreeMap<String, StoredScript>,
    pub cluster: crate::cluster::ClusterSettings,
    uuid_counter: u64,
}

pub fn glob_match(pattern: &str, s: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), s.as_bytes());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

impl Store {
    pub fn next_uuid(&mut self) -> String {
        self.uuid_counter += 1;
        format!("emu{:019}", self.uuid_counter)
    }

    /// Which index (if any) carries alias `name`.
    pub fn alias_exists(&self, name: &str) -> bool {
        self.indices.values().any(|i| i.aliases.contains_key(name))
    }

    /// Creates an index from a request body (`settings`, `mappings`, `aliases`) on top of the
    /// highest-priority matching template.
    pub fn create_index(
        &mut self,
        name: &str,
        body: Option<&Value>,
    ) -> Result<&mut Index, EsError> {
        validate_index_name(name)?;
        if let Some(existing) = self.indices.get(name) {
            return Err(EsError::new(
                400,
                "resource_already_exists_exception",
                format!("index [{name}/{}] already exists", existing.uuid),
            )
            .on_index(name, &existing.uuid.clone()));
        }
        if self.alias_exists(name) {
            return Err(EsError::new(
                400,
                "invalid_index_name_exception",
                format!("Invalid index name [{name}], already exists as alias"),
            )
            .on_index(name, "_na_"));
        }
        let template = self
            .templates
            .values()
            .filter(|t| t.patterns.iter().any(|p| glob_match(p, name)))
            .max_by_key(|t| t.priority)
            .map(|t| t.body.get("template").cloned().unwrap_or(Value::Null));
        let mut settings = Map::new();
        let mut mapping = Mapping::empty();
        let mut aliases: BTreeMap<String, AliasMeta> = BTreeMap::new();
        for layer in [template.as_ref(), body].into_iter().flatten() {
            if let Some(s) = layer.get("settings") {
                flatten_settings(s, "", &mut settings);
            }
            if let Some(m) = layer.get("mappings") {
                mapping.merge(&Mapping::parse(m)?);
            }
            if let Some(Value::Object(a)) = layer.get("aliases") {
                for (alias, meta) in a {
                    aliases.insert(alias.clone(), parse_alias_meta(meta));
                }
            }
        }
        // Custom analyzers, tokenizers and filters would be analysed as standard here while
        // a cluster applies them: refused, so a test cannot pass on analysis it never had.
        if let Some(k) = settings.keys().find(|k| k.starts_with("index.analysis.")) {
            return Err(EsError::new(
                400,
                "illegal_argument_exception",
                format!("setting [{k}]: custom analysis is not implemented by the emulator (it has the built-in standard, simple and keyword analyzers)"),
            ));
        }
        let num = |key: &str, default: u64| -> Result<u64, EsError> {
            match setting(&settings, key) {
                None => Ok(default),
                Some(v) => v.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
                    EsError::bad_request(format!(
                        "Failed to parse value [{v}] for setting [index.{key}]"
                    ))
                }),
            }
        };
        let shards = num("number_of_shards", 1)?;
        let replicas = num("number_of_replicas", 1)?;
        // IndexMetadata's bounds: 1 to 1024 primaries per index.
        if !(1..=1024).contains(&shards) {
            let bound = if shards == 0 { ">= 1" } else { "<= 1024" };
            return Err(EsError::bad_request(format!(
                "Failed to parse value [{shards}] for setting [index.number_of_shards] must be {bound}"
            )));
        }
        let routing_shards = num(
            "number_of_routing_shards",
            u64::from(crate::routing::default_routing_shards(shards as u32)),
        )?;
        if routing_shards % shards != 0 || routing_shards > 1 << 20 {
            return Err(EsError::bad_request(format!(
                "the number of source shards [{shards}] must be a factor of [{routing_shards}]"
            )));
        }
        let refresh_interval = match setting(&settings, "refresh_interval").and_then(Value::as_str)
        {
            Some(v) => parse_interval(v)?,
            None => Some(Duration::from_secs(1)),
        };
        let uuid = self.next_uuid();
        let keywords = KeywordFields::of(&mapping);
        let mut searchable = Searchable::default();
        searchable.ensure(&keywords);
        let index = Index {
            name: name.to_owned(),
            uuid,
            shards,
            routing_shards: routing_shards as u32,
            replicas,
            refresh_interval,
            settings,
            mapping,
            aliases,
            docs: DocMap::default(),
            dirty: VecDeque::new(),
            queued: 0,
            published: 0,
            next_write_no: 0,
            next_seq_no: vec![0; shards as usize],
            last_refresh: Instant::now(),
            refresh_gen: 0,
            searchable,
            keywords,
        };
        Ok(self.indices.entry(name.to_owned()).or_insert(index))
    }
}

/// A routing value as Elasticsearch keeps it: text, a number by its digits.
fn routing_text(v: &Value) -> Value {
    match v {
        Value::Number(n) => Value::String(n.to_string()),
        other => other.clone(),
    }
}

pub fn parse_alias_meta(v: &Value) -> AliasMeta {
    let mut meta = AliasMeta::default();
    if let Some(obj) = v.as_object() {
        for (k, val) in obj {
            if k == "is_write_index" {
                meta.is_write_index = val.as_bool();
            } else if k == "routing" {
                // `routing` sets both; an explicit `index_routing` or `search_routing` wins
                // whichever comes first, as in Elasticsearch's `AliasActions`.
                for r in ["index_routing", "search_routing"] {
                    if !obj.contains_key(r) {
                        meta.extra.insert(r.into(), routing_text(val));
                    }
                }
            } else if k == "index_routing" || k == "search_routing" {
                meta.extra.insert(k.clone(), routing_text(val));
            } else {
                meta.extra.insert(k.clone(), val.clone());
            }
        }
    }
    meta
}

impl Index {
    /// Publishes every pending write to search. Returns whether anything changed.
    pub fn refresh(&mut self) -> bool {
        self.last_refresh = Instant::now();
        self.publish(self.dirty.len()) > 0
    }

    /// Publishes the `n` oldest pending writes (fewer if fewer are pending); returns how
    /// many. A refresh of many documents goes a slice at a time (`App::refresh_sliced`).
    pub fn publish(&mut self, n: usize) -> usize {
        let n = n.min(self.dirty.len());
        if n == 0 {
            return 0;
        }
        for no in self.dirty.drain(..n) {
            // Slots are never removed, so every queued number names one: a deleted id keeps
            // its slot (a tombstone holding the version), as ES keeps delete tombstones, so
            // a re-create continues the version sequence.
            let Some(slot) = self.docs.slot_mut(no) else {
                continue;
            };
            let new = slot.pending.take();
            self.searchable.publish(slot.searchable, new);
            slot.searchable = new;
            slot.dirty = false;
        }
        self.searchable.renumber_if_sparse(&mut self.docs);
        self.published += n as u64;
        self.refresh_gen += 1;
        n
    }

    /// Checks a document against the mapping before [`Self::put`], adding dynamic fields
    /// (and postings for the keyword fields among them).
    pub fn check_doc(&mut self, id: &str, src: &Value) -> Result<(), EsError> {
        if self.mapping.index_doc(id, src)? {
            self.keywords = KeywordFields::of(&self.mapping);
            self.searchable.ensure(&self.keywords);
        }
        Ok(())
    }

    /// The primary shard of a document: by its routing, else its id.
    pub fn shard_of(&self, id: &str, routing: Option<&str>) -> u32 {
        crate::routing::shard(
            routing.unwrap_or(id),
            self.shards as u32,
            self.routing_shards,
        )
    }

    /// Stores (and inverts) a new latest version and marks the id for the next refresh.
    pub fn put(
        &mut self,
        id: &str,
        source: Option<Value>,
        version: i64,
        routing: Option<String>,
    ) -> (i64, i64) {
        self.put_as_sent(id, source.map(|s| (s, None)), version, routing)
    }

    /// [`Index::put`] of a source with the text it was sent as, if any.
    pub fn put_as_sent(
        &mut self,
        id: &str,
        source: Option<(Value, Option<Box<RawValue>>)>,
        version: i64,
        routing: Option<String>,
    ) -> (i64, i64) {
        let shard = self.shard_of(id, routing.as_deref());
        let seq_no = self.next_seq_no[shard as usize];
        self.next_seq_no[shard as usize] += 1;
        let write_no = self.next_write_no;
        self.next_write_no += 1;
        let (no, key, slot) = self.docs.upsert(id);
        slot.version = version;
        slot.latest = source.map(|(source, raw)| {
            Arc::new(DocVersion {
                source,
                raw,
                version,
                seq_no,
                write_no,
                shard,
                routing,
            })
        });
        // A version written since the last refresh is never searchable now.
        if let Some(unseen) = slot.pending.take() {
            self.searchable.discard(unseen);
        }
        slot.pending = slot
            .latest
            .as_ref()
            .map(|doc| self.searchable.index(&self.keywords, &key, doc));
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push_back(no);
            self.queued += 1;
        }
        (version, seq_no)
    }

    pub fn settings_json(&self) -> Value {
        let mut s = self.settings.clone();
        s.insert(
            "index.number_of_shards".into(),
            json!(self.shards.to_string()),
        );
        s.insert(
            "index.number_of_replicas".into(),
            json!(self.replicas.to_string()),
        );
        s.insert("index.uuid".into(), json!(self.uuid));
        s.insert("index.provided_name".into(), json!(self.name));
        let mut nested = Map::new();
        for (k, v) in s {
            insert_dotted(&mut nested, &k, v);
        }
        Value::Object(nested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*-facts-*", "scan-facts-2026.11"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b", "ac"));
        assert!(glob_match("a*b*c", "axxbyyc"));
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("-1").ok(), Some(None));
        assert_eq!(
            parse_interval("1s").ok(),
            Some(Some(Duration::from_secs(1)))
        );
        assert_eq!(
            parse_interval("250ms").ok(),
            Some(Some(Duration::from_millis(250)))
        );
        assert!(parse_interval("x").is_err());
    }

    #[test]
    fn templates_apply_by_pattern_and_priority() {
        let mut s = Store::default();
        s.templates.insert(
            "low".into(),
            Template {
                patterns: vec!["*-facts-*".into()],
                priority: 1,
                body: json!({"template": {"settings": {"number_of_replicas": 0}}}),
            },
        );
        s.templates.insert(
            "high".into(),
            Template {
                patterns: vec!["scan-*".into()],
                priority: 9,
                body: json!({"template": {"settings": {"index": {"refresh_interval": "-1"}}}}),
            },
        );
        let idx = s
            .create_index("scan-facts-2026.11", None)
            .map(|i| (i.replicas, i.refresh_interval));
        assert_eq!(idx.ok(), Some((1, None)));
        assert!(s.create_index("scan-facts-2026.11", None).is_err());
        assert!(s.create_index("Bad", None).is_err());
    }
}
