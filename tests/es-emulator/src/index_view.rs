//! A borrowed view of the parts of an index that candidate lookup needs.

use crate::doc_map::DocMap;
use crate::postings::Searchable;
use crate::store::Index;

pub struct IndexView<'a> {
    pub docs: &'a DocMap,
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
