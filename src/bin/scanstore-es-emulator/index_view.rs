//! A borrowed view of the parts of an index that candidate lookup needs.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::postings::Searchable;
use crate::store::{Index, Slot};

pub struct IndexView<'a> {
    pub docs: &'a FxHashMap<Arc<str>, Slot>,
    pub searchable: &'a Searchable,
}

impl<'a> IndexView<'a> {
    pub fn of(idx: &'a Index) -> IndexView<'a> {
        IndexView {
            docs: &idx.docs,
            searchable: &idx.searchable,
        }
    }
}
