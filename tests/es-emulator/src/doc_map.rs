//! The id → slot map of an index: the ids (sharded, see `sharded`), each naming its
//! slot's number, and the slots themselves in number order. Slots sit apart from the ids
//! so that a refresh walks its pending slots by number, in write order, instead of hashing
//! every id again: at a million documents each of those lookups missed the cache and a
//! refresh of the same 50 000 writes took 3–7 × what it took in a small index (a Lucene
//! refresh costs what was buffered, whatever the index holds).

use std::sync::Arc;

use crate::chunked::Chunked;
use crate::sharded::Sharded;
use crate::store::Slot;

/// A slot's number: its place in write order of first writes.
pub type SlotNo = u32;

#[derive(Default)]
pub struct DocMap {
    ids: Sharded<Arc<str>, SlotNo>,
    /// Chunked, so that growing never copies every slot under the store lock.
    slots: Chunked<Slot>,
}

impl std::fmt::Debug for DocMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocMap")
            .field("ids", &self.slots.len())
            .finish()
    }
}

impl DocMap {
    fn number(&self, id: &str) -> Option<SlotNo> {
        self.ids.get(id).copied()
    }

    pub fn get(&self, id: &str) -> Option<&Slot> {
        self.slots.get(self.number(id)? as usize)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Slot> {
        let n = self.number(id)?;
        self.slots.get_mut(n as usize)
    }

    /// The slot numbered `n`.
    pub fn slot_mut(&mut self, n: SlotNo) -> Option<&mut Slot> {
        self.slots.get_mut(n as usize)
    }

    /// The id's slot, a new empty one for an id never written; with its number and the
    /// id as shared with the postings.
    pub fn upsert(&mut self, id: &str) -> (SlotNo, Arc<str>, &mut Slot) {
        let (key, n) = match self.ids.get_key_value(id) {
            Some((key, n)) => (key.clone(), *n),
            None => {
                let key: Arc<str> = Arc::from(id);
                let n = self.slots.len() as SlotNo;
                self.ids.insert(key.clone(), n);
                self.slots.push(Slot::default());
                (key, n)
            }
        };
        (n, key, &mut self.slots[n as usize])
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Slot)> {
        self.ids
            .iter()
            .map(|(id, n)| (id, &self.slots[*n as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_slot_numbers() {
        let mut m = DocMap::default();
        for i in 0..10_000 {
            let (n, key, slot) = m.upsert(&format!("doc-{i}"));
            assert_eq!((n as i64, &*key), (i, format!("doc-{i}").as_str()));
            slot.version = i;
        }
        assert_eq!(m.upsert("doc-7").0, 7, "a known id keeps its number");
        assert_eq!(m.iter().count(), 10_000);
        assert_eq!(m.get("doc-4242").map(|s| s.version), Some(4242));
        if let Some(s) = m.get_mut("doc-7") {
            s.version = -1;
        }
        assert_eq!(m.get("doc-7").map(|s| s.version), Some(-1));
        assert_eq!(m.slot_mut(7).map(|s| s.version), Some(-1));
        assert!(m.get("doc-10000").is_none());
    }
}
