//! An `ip` field's addresses in order, each with the number of the version holding it: the
//! emulator's stand-in for a shard's points index on the field, from which a sorted page
//! bounded below on it walks in address order (see `walk`).
//!
//! Built for a field the first time a walk asks for it (most address fields are never
//! walked, and a bulk should not pay for keeping them), then kept up to date as each
//! version is written, as postings are. Like a posting list, it keeps the entries of
//! versions that are not searchable (yet, or any more) until the index renumbers; walkers
//! skip them.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::chunked::Chunked;
use crate::extract::{to_key, FieldRef};
use crate::postings::{DocNo, Published};
use crate::values::Key;

/// (address as big-endian bytes, document number): ordered as (address, number), 20 bytes
/// where a `u128` would make it 32.
type Entry = ([u8; 16], DocNo);

#[derive(Debug)]
pub struct Points {
    field: FieldRef,
    entries: BTreeSet<Entry>,
    /// A version with two or more addresses was indexed. Its sort value is its least
    /// address, which a walk may meet only after other documents: walks are refused.
    multi_valued: bool,
}

impl Points {
    /// The points of `field` over every indexed version.
    pub fn build(field: FieldRef, by_docno: &Chunked<Option<Published>>) -> Points {
        let (mut entries, mut multi_valued) = (Vec::new(), false);
        for (d, entry) in by_docno.iter().enumerate() {
            if let Some(p) = entry {
                let n = each_address(&field, &p.doc.source, &mut |a| {
                    entries.push((a.to_be_bytes(), d as DocNo))
                });
                multi_valued |= n > 1;
            }
        }
        // Built from sorted entries in one pass rather than inserted one by one.
        entries.sort_unstable();
        Points {
            field,
            entries: entries.into_iter().collect(),
            multi_valued,
        }
    }

    pub fn field(&self) -> &FieldRef {
        &self.field
    }

    pub fn walkable(&self) -> bool {
        !self.multi_valued
    }

    /// Adds the addresses of the version numbered `d`.
    pub fn add(&mut self, src: &Value, d: DocNo) {
        let entries = &mut self.entries;
        self.multi_valued |= each_address(&self.field, src, &mut |a| {
            entries.insert((a.to_be_bytes(), d));
        }) > 1;
    }

    /// Moves every entry to its version's new number (`DocNo::MAX`: dropped), after the
    /// index renumbered its versions.
    pub fn renumber(&mut self, remap: &[DocNo]) {
        self.entries = std::mem::take(&mut self.entries)
            .into_iter()
            .filter_map(|(a, d)| {
                let n = remap.get(d as usize).copied().unwrap_or(DocNo::MAX);
                (n != DocNo::MAX).then_some((a, n))
            })
            .collect();
    }

    /// (address, number) from address `from` up, in order.
    pub fn from(&self, from: u128) -> impl Iterator<Item = (u128, DocNo)> + '_ {
        self.entries
            .range((from.to_be_bytes(), 0)..)
            .map(|(a, d)| (u128::from_be_bytes(*a), *d))
    }
}

/// Calls `f` with each address of `field` in `src` that search would read (as its sort key
/// and range queries do); returns how many there were.
fn each_address(field: &FieldRef, src: &Value, f: &mut dyn FnMut(u128)) -> usize {
    let mut n = 0;
    field.any(src, &mut |v| {
        if let Ok(Some(Key::Ip(a))) = to_key(field.ty, v) {
            f(a);
            n += 1;
        }
        false
    });
    n
}
