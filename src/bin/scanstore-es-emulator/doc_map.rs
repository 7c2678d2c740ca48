//! The id → slot map of an index, split into shards by hash: a hash map grows by rehashing
//! every entry at once, which at a million documents held the store lock for 150–280 ms
//! (every request of every index waited); a shard holds a 64th of them and grows alone.

use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::Arc;

use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::store::Slot;

const SHARDS: usize = 64;

pub struct DocMap {
    shards: Box<[FxHashMap<Arc<str>, Slot>]>,
}

impl Default for DocMap {
    fn default() -> Self {
        DocMap {
            shards: (0..SHARDS).map(|_| FxHashMap::default()).collect(),
        }
    }
}

impl std::fmt::Debug for DocMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: usize = self.shards.iter().map(|s| s.len()).sum();
        f.debug_struct("DocMap").field("ids", &ids).finish()
    }
}

impl DocMap {
    /// Bits 32–37 of the id's hash: the shard's own table indexes by the low bits and
    /// tags entries with the top seven, so neither is constant within a shard.
    fn shard(id: &str) -> usize {
        (FxBuildHasher.hash_one(id) >> 32) as usize % SHARDS
    }

    pub fn get(&self, id: &str) -> Option<&Slot> {
        self.shards[Self::shard(id)].get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Slot> {
        self.shards[Self::shard(id)].get_mut(id)
    }

    pub fn get_key_value(&self, id: &str) -> Option<(&Arc<str>, &Slot)> {
        self.shards[Self::shard(id)].get_key_value(id)
    }

    pub fn entry(&mut self, id: Arc<str>) -> Entry<'_, Arc<str>, Slot> {
        self.shards[Self::shard(&id)].entry(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Slot)> {
        self.shards.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_spread_over_the_shards_and_are_found_again() {
        let mut m = DocMap::default();
        for i in 0..10_000 {
            m.entry(Arc::from(format!("doc-{i}").as_str()))
                .or_default()
                .version = i;
        }
        assert_eq!(m.iter().count(), 10_000);
        let smallest = m.shards.iter().map(|s| s.len()).min().unwrap_or(0);
        assert!(smallest > 10_000 / SHARDS / 2, "uneven shards: {smallest}");
        assert_eq!(m.get("doc-4242").map(|s| s.version), Some(4242));
        assert_eq!(m.get_key_value("doc-7").map(|(k, _)| &**k), Some("doc-7"));
        if let Some(s) = m.get_mut("doc-7") {
            s.version = -1;
        }
        assert_eq!(m.get("doc-7").map(|s| s.version), Some(-1));
        assert!(m.get("doc-10000").is_none());
    }
}
