//! Search hits (owned, so sort keys, ordering and rendering happen after the store lock is
//! released) and the cache of fully sorted hit lists that lets a `search_after` walk sort
//! once per refresh, not per page.
//!
//! A real shard answers a sorted page from doc values without touching every match; the
//! emulator's equivalent is to remember the last few sorted result sets. An entry is keyed by
//! the query and sort text plus each index's uuid and refresh generation, and searchable
//! documents change only on a refresh, so an entry can never serve stale hits.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::mapping::Mapping;
use crate::store::DocVersion;
use crate::values::Key;

/// One matching document: where it is, what it is, and (once computed) its sort keys.
pub struct Hit {
    pub index: Arc<str>,
    pub mapping: Arc<Mapping>,
    pub id: Arc<str>,
    pub doc: Arc<DocVersion>,
    pub score: f32,
    pub sort: Vec<Option<Key>>,
}

/// Entries kept; a publication walk reads one execution at a time per worker.
const ENTRIES: usize = 16;
/// Hits kept over all entries (bounds memory at a few hundred MB in the worst case).
const MAX_HITS: usize = 4_000_000;

#[derive(Default)]
pub struct RankedCache {
    /// Most recently used last.
    entries: VecDeque<(String, Arc<Vec<Hit>>)>,
}

impl RankedCache {
    pub fn get(&mut self, key: &str) -> Option<Arc<Vec<Hit>>> {
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.entries.remove(pos)?;
        let hits = entry.1.clone();
        self.entries.push_back(entry);
        Some(hits)
    }

    pub fn put(&mut self, key: String, hits: Arc<Vec<Hit>>) {
        if hits.len() > MAX_HITS {
            return;
        }
        self.entries.retain(|(k, _)| *k != key);
        self.entries.push_back((key, hits));
        while self.entries.len() > ENTRIES || self.total() > MAX_HITS {
            self.entries.pop_front();
        }
    }

    /// Takes every entry out (for the caller to drop once it has released the lock).
    pub fn take_all(&mut self) -> VecDeque<(String, Arc<Vec<Hit>>)> {
        std::mem::take(&mut self.entries)
    }

    fn total(&self) -> usize {
        self.entries.iter().map(|(_, h)| h.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(n: usize) -> Arc<Vec<Hit>> {
        let doc = Arc::new(DocVersion {
            source: serde_json::Value::Null,
            raw: None,
            version: 1,
            seq_no: 0,
            write_no: 0,
            shard: 0,
            routing: None,
        });
        Arc::new(
            (0..n)
                .map(|i| Hit {
                    index: Arc::from("i"),
                    mapping: Arc::new(Mapping::empty()),
                    id: Arc::from(i.to_string().as_str()),
                    doc: doc.clone(),
                    score: 1.0,
                    sort: Vec::new(),
                })
                .collect(),
        )
    }

    #[test]
    fn least_recently_used_entry_goes_first() {
        let mut c = RankedCache::default();
        for i in 0..ENTRIES {
            c.put(format!("k{i}"), hits(1));
        }
        assert!(c.get("k0").is_some());
        c.put("new".into(), hits(1));
        assert!(c.get("k1").is_none(), "k1 was the least recently used");
        assert!(c.get("k0").is_some());
        assert!(c.get("new").is_some());
        assert_eq!(c.entries.len(), ENTRIES);
    }

    #[test]
    fn same_key_replaces_its_entry() {
        let mut c = RankedCache::default();
        c.put("k".into(), hits(1));
        c.put("k".into(), hits(3));
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.get("k").map(|h| h.len()), Some(3));
    }

    #[test]
    fn taking_all_leaves_nothing_holding_documents() {
        let mut c = RankedCache::default();
        let kept = hits(2);
        c.put("k".into(), kept.clone());
        let taken = c.take_all();
        assert!(c.get("k").is_none());
        drop(taken);
        assert_eq!(Arc::strong_count(&kept), 1);
    }
}
