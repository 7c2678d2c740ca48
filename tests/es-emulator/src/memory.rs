//! Pre-touching the heap before listening, as Elasticsearch's `-XX:+AlwaysPreTouch` does.

/// Writes `mib` MiB of fresh heap and frees it. Memory the process has never touched costs a
/// page fault on first write — on the benchmark's VM ~1–3 s of kernel time per GiB, paid
/// by whichever request grows the heap, under whatever lock it holds. With freed pages kept
/// for good (`scanstore::allocator::setup(None)`) mimalloc reuses these pages for later allocations of any size,
/// so growth up to `mib` MiB faults nothing: what Elasticsearch's default
/// `-XX:+AlwaysPreTouch` does for its heap.
pub fn pretouch(mib: usize) {
    const MIB: usize = 1 << 20;
    // Held all at once: freeing each block before the next would reuse one block's pages.
    let blocks: Vec<Vec<u8>> = (0..mib).map(|_| vec![1u8; MIB]).collect();
    drop(blocks);
}
