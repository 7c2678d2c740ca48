//! A string-keyed hash map split into shards by hash. A hash map grows by rehashing every
//! entry at once, under the store lock: an index's id map at a million documents held
//! every request 150–280 ms that way, and a keyword field with a value per document (its
//! term table) 20–90 ms per doubling. A shard holds a 64th of the keys and grows alone.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use rustc_hash::{FxBuildHasher, FxHashMap};

const SHARDS: usize = 64;

pub struct Sharded<K, V> {
    shards: Box<[FxHashMap<K, V>]>,
}

impl<K, V> Default for Sharded<K, V> {
    fn default() -> Self {
        Sharded {
            shards: (0..SHARDS).map(|_| FxHashMap::default()).collect(),
        }
    }
}

impl<K, V> std::fmt::Debug for Sharded<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharded")
            .field("keys", &self.len())
            .finish()
    }
}

impl<K, V> Sharded<K, V> {
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flatten()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.shards.iter_mut().flat_map(|s| s.values_mut())
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        for s in self.shards.iter_mut() {
            s.retain(&mut keep);
        }
    }
}

impl<K: Borrow<str> + Hash + Eq, V> Sharded<K, V> {
    /// Bits 32–37 of the key's hash: a shard's own table indexes by the low bits and tags
    /// entries with the top seven, so neither is constant within a shard.
    fn shard(key: &str) -> usize {
        (FxBuildHasher.hash_one(key) >> 32) as usize % SHARDS
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.shards[Self::shard(key)].get(key)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.shards[Self::shard(key)].get_mut(key)
    }

    pub fn get_key_value(&self, key: &str) -> Option<(&K, &V)> {
        self.shards[Self::shard(key)].get_key_value(key)
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let shard = Self::shard(key.borrow());
        self.shards[shard].insert(key, value)
    }

    #[cfg(test)]
    fn smallest_shard(&self) -> usize {
        self.shards.iter().map(|s| s.len()).min().unwrap_or(0)
    }
}

#[cfg(test)]
impl<K: Borrow<str> + Hash + Eq, V> std::ops::Index<&str> for Sharded<K, V> {
    type Output = V;

    fn index(&self, key: &str) -> &V {
        &self.shards[Self::shard(key)][key]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_over_the_shards_and_are_found_again() {
        let mut m: Sharded<String, i64> = Sharded::default();
        for i in 0..10_000 {
            assert_eq!(m.insert(format!("key-{i}"), i), None);
        }
        assert_eq!((m.len(), m.iter().count()), (10_000, 10_000));
        let smallest = m.smallest_shard();
        assert!(smallest > 10_000 / SHARDS / 2, "uneven shards: {smallest}");
        assert_eq!((m.get("key-4242"), m["key-7"]), (Some(&4242), 7));
        assert_eq!(
            m.get_key_value("key-7").map(|(k, _)| k.as_str()),
            Some("key-7")
        );
        if let Some(v) = m.get_mut("key-7") {
            *v = -1;
        }
        assert_eq!(m.insert("key-7".into(), -2), Some(-1));
        m.values_mut().for_each(|v| *v *= 2);
        m.retain(|_, v| *v % 4 == 0);
        assert_eq!(
            (m.len(), m.get("key-7"), m.get("key-1")),
            (5_001, Some(&-4), None)
        );
        assert!(m.get("key-10000").is_none());
    }
}
