//! Which primary shard of an index a document lives on, computed as Elasticsearch and
//! OpenSearch route it, so that what a client can see of shards (the `shard` of a write
//! error, per-shard `_seq_no`s, the order of hits with equal sort values) is what a
//! cluster shows:
//!
//! - the routing value is the `routing` of the write, else the `_id`;
//! - its hash is Murmur3 (x86, 32 bits, seed 0) of the value's UTF-16 code units, each
//!   as two bytes, low byte first (OSP:server/src/main/java/org/opensearch/cluster/routing/
//!   Murmur3HashFunction.java, over Lucene's `StringHelper.murmurhash3_x86_32`);
//! - shard = floorMod(hash, routing shards) / (routing shards / shards)
//!   (`OperationRouting.calculateScaledShardId`), where the routing shards default to the
//!   largest `shards × 2^k` not above 1024, and at least `shards × 2`, so that the index can
//!   be split (`MetadataCreateIndexService.calculateNumRoutingShards`, indices since 7.0).

/// Murmur3 x86 32-bit (Austin Appleby's reference algorithm).
pub fn murmur3_x86_32(data: &[u8], seed: u32) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = seed;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The routing hash of a value, as Java's `int`.
pub fn hash(routing: &str) -> i32 {
    let bytes: Vec<u8> = routing.encode_utf16().flat_map(u16::to_le_bytes).collect();
    murmur3_x86_32(&bytes, 0) as i32
}

/// `index.number_of_routing_shards` of an index created without it.
pub fn default_routing_shards(shards: u32) -> u32 {
    // ceil(log2(shards)); 0 for one shard.
    let log2_shards = 32 - shards.saturating_sub(1).leading_zeros();
    let splits = 10u32.saturating_sub(log2_shards).max(1);
    shards << splits
}

/// The shard (0-based) of a routing value in an index of `shards` primaries and
/// `routing_shards` routing shards (a multiple of `shards`).
pub fn shard(routing: &str, shards: u32, routing_shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    let factor = routing_shards / shards;
    hash(routing).rem_euclid(routing_shards as i32) as u32 / factor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_elasticsearchs() {
        // The known values of OpenSearch's Murmur3HashFunctionTests (Apache-2.0).
        for (expected, text) in [
            (0x5a0cb7c3_u32, "hell"),
            (0xd7c31989, "hello"),
            (0x22ab2984, "hello w"),
            (0xdf0ca123, "hello wo"),
            (0xe7744d61, "hello wor"),
            (0xe07db09c, "The quick brown fox jumps over the lazy dog"),
            (0x4e63d2ad, "The quick brown fox jumps over the lazy cog"),
        ] {
            assert_eq!(hash(text), expected as i32, "{text}");
        }
    }

    #[test]
    fn routing_shards_allow_splitting_up_to_1024() {
        assert_eq!(default_routing_shards(1), 1024);
        assert_eq!(default_routing_shards(2), 1024);
        assert_eq!(default_routing_shards(3), 768);
        assert_eq!(default_routing_shards(5), 640);
        assert_eq!(default_routing_shards(600), 1200);
        assert_eq!(default_routing_shards(1024), 2048);
    }

    #[test]
    fn ids_spread_over_the_shards_and_one_shard_takes_all() {
        let mut counts = [0u32; 3];
        for i in 0..3000 {
            let id = format!("10.0.{}.{}-tcp-443", i / 256, i % 256);
            assert_eq!(shard(&id, 1, default_routing_shards(1)), 0);
            counts[shard(&id, 3, default_routing_shards(3)) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "uneven: {counts:?}");
        // A negative hash is taken modulo as Java's floorMod does, never below zero.
        let negative = (0..100)
            .map(|i| format!("id-{i}"))
            .find(|id| hash(id) < 0)
            .unwrap();
        assert!(shard(&negative, 5, 640) < 5);
    }
}
