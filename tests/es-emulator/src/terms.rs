//! The `terms` aggregation as a cluster computes it: each shard (an index's shard, found
//! through the documents' routing) keeps its own top `shard_size` terms, and the
//! coordinating node sums what the shards returned and keeps the top `size`. So with
//! several shards a count is an under-estimate when a shard left a term out, and
//! `doc_count_error_upper_bound` says by how much at most; with one shard (or ordered by
//! key) every count is exact. Sources: `TermsAggregatorFactory` (a count order without an
//! explicit `shard_size` asks each shard for `size × 1.5 + 10`, `BucketUtils.
//! suggestShardSideQueueSize`; `ensureValidity` raises `shard_size` to at least `size`)
//! and `AbstractInternalTerms.reduce` (a shard that returned `shard_size` buckets adds the
//! count of its last one to the error bound; fewer, or a key order, add 0; an ascending
//! count order makes it unknowable, -1), in opensearch-project/OpenSearch and
//! elastic/elasticsearch, `server/src/main/java/.../search/aggregations/bucket/terms/`.

use serde_json::{json, Value};

use crate::aggs::{add_subs, bucket_key, missing_key, DocRef, FieldKeys};
use crate::error::EsError;
use crate::mapping::Ty;
use crate::values::{cmp_keys, Key};

type Group<'a> = (Key, Option<Ty>, Vec<DocRef<'a>>);

#[derive(Clone, Copy, PartialEq)]
enum Order {
    CountDesc,
    CountAsc,
    Key { asc: bool },
}

/// The buckets of `docs` by the field's keys (a document in each of its distinct keys).
fn group<'a>(field: &str, body: &Value, docs: &[DocRef<'a>]) -> Vec<Group<'a>> {
    let mut groups: Vec<Group<'a>> = Vec::new();
    let mut fk = FieldKeys::new(field);
    for d in docs {
        let (ty, mut keys) = fk.keys(d);
        if keys.is_empty() {
            keys.extend(missing_key(body, ty));
        }
        keys.sort_by(cmp_keys);
        keys.dedup_by(|a, b| cmp_keys(a, b).is_eq());
        for k in keys {
            match groups.binary_search_by(|(g, _, _)| cmp_keys(g, &k)) {
                Ok(i) => groups[i].2.push(*d),
                Err(i) => groups.insert(i, (k, ty, vec![*d])),
            }
        }
    }
    groups
}

fn sort(groups: &mut [Group], order: Order) {
    match order {
        Order::Key { asc: true } => groups.sort_by(|a, b| cmp_keys(&a.0, &b.0)),
        Order::Key { asc: false } => groups.sort_by(|a, b| cmp_keys(&b.0, &a.0)),
        Order::CountAsc => {
            groups.sort_by(|a, b| a.2.len().cmp(&b.2.len()).then(cmp_keys(&a.0, &b.0)))
        }
        Order::CountDesc => {
            groups.sort_by(|a, b| b.2.len().cmp(&a.2.len()).then(cmp_keys(&a.0, &b.0)))
        }
    }
}

/// What one shard returns: its top `shard_size` buckets, the documents of those it left
/// out, and its contribution to the error bound.
fn shard_result<'a>(
    mut groups: Vec<Group<'a>>,
    order: Order,
    shard_size: usize,
) -> (Vec<Group<'a>>, usize, i64) {
    sort(&mut groups, order);
    let full = groups.len() >= shard_size;
    let left_out: usize = groups.iter().skip(shard_size).map(|g| g.2.len()).sum();
    groups.truncate(shard_size);
    let error = match order {
        Order::Key { .. } => 0,
        _ if !full => 0,
        Order::CountDesc => groups.last().map_or(0, |g| g.2.len() as i64),
        Order::CountAsc => -1,
    };
    (groups, left_out, error)
}

pub fn terms(
    body: &Value,
    subs: Option<&serde_json::Map<String, Value>>,
    docs: &[DocRef],
) -> Result<Value, EsError> {
    let field = crate::aggs::field_of(body, "terms")?;
    let size = body.get("size").and_then(Value::as_u64).unwrap_or(10) as usize;
    let min_doc_count = body
        .get("min_doc_count")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    let order = match body
        .get("order")
        .and_then(Value::as_object)
        .and_then(|o| o.iter().next())
        .map(|(k, v)| (k.as_str(), v.as_str() == Some("asc")))
    {
        Some(("_key", asc)) => Order::Key { asc },
        Some(("_count", true)) => Order::CountAsc,
        _ => Order::CountDesc,
    };
    let shard_size = match body.get("shard_size").and_then(Value::as_u64) {
        Some(s) => s as usize,
        None if matches!(order, Order::Key { .. }) => size,
        None => size + size / 2 + 10,
    }
    .max(size);
    // The shards the documents were found on, in a stable order.
    let mut shards: Vec<(&str, u32)> = docs.iter().map(|d| d.shard).collect();
    shards.sort_unstable();
    shards.dedup();
    let (mut groups, mut other, error) = if shards.len() <= 1 {
        (group(&field, body, docs), 0, 0)
    } else {
        let mut merged: Vec<Group> = Vec::new();
        let (mut other, mut error) = (0, 0i64);
        for shard in shards {
            let on_shard: Vec<DocRef> = docs.iter().filter(|d| d.shard == shard).copied().collect();
            let (returned, left_out, e) =
                shard_result(group(&field, body, &on_shard), order, shard_size);
            other += left_out;
            error = if error < 0 || e < 0 { -1 } else { error + e };
            for (k, ty, ds) in returned {
                match merged.binary_search_by(|(g, _, _)| cmp_keys(g, &k)) {
                    Ok(i) => merged[i].2.extend(ds),
                    Err(i) => merged.insert(i, (k, ty, ds)),
                }
            }
        }
        (merged, other, error)
    };
    groups.retain(|g| g.2.len() >= min_doc_count);
    sort(&mut groups, order);
    other += groups.iter().skip(size).map(|g| g.2.len()).sum::<usize>();
    let mut buckets = Vec::new();
    for (k, ty, ds) in groups.into_iter().take(size) {
        let (key, as_string) = bucket_key(&k, ty);
        let mut b = json!({"key": key, "doc_count": ds.len()});
        if let Some(s) = as_string {
            b["key_as_string"] = json!(s);
        }
        add_subs(&mut b, subs, &ds)?;
        buckets.push(b);
    }
    Ok(
        json!({"doc_count_error_upper_bound": error, "sum_other_doc_count": other, "buckets": buckets}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::Mapping;

    fn mapping() -> Mapping {
        Mapping::parse(&json!({"properties": {"v": {"type": "keyword"}}})).unwrap()
    }

    /// Documents with value `v`, `n` of them on each shard as given.
    fn docs<'a>(m: &'a Mapping, sources: &'a [(Value, u32)]) -> Vec<DocRef<'a>> {
        sources
            .iter()
            .map(|(source, shard)| DocRef {
                mapping: m,
                source,
                shard: ("i", *shard),
            })
            .collect()
    }

    fn sources(per_shard: &[&[(&str, usize)]]) -> Vec<(Value, u32)> {
        let mut out = Vec::new();
        for (shard, counts) in per_shard.iter().enumerate() {
            for (v, n) in *counts {
                for _ in 0..*n {
                    out.push((json!({ "v": v }), shard as u32));
                }
            }
        }
        out
    }

    fn buckets(r: &Value) -> Vec<(String, u64)> {
        r["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["key"].as_str().unwrap().to_owned(),
                    b["doc_count"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn one_shard_counts_exactly() {
        let m = mapping();
        let s = sources(&[&[("a", 5), ("b", 3), ("c", 1)]]);
        let r = terms(&json!({"field": "v", "size": 2}), None, &docs(&m, &s)).unwrap();
        assert_eq!(buckets(&r), vec![("a".into(), 5), ("b".into(), 3)]);
        assert_eq!(
            (
                r["sum_other_doc_count"].as_u64(),
                r["doc_count_error_upper_bound"].as_i64()
            ),
            (Some(1), Some(0))
        );
    }

    #[test]
    fn shards_that_return_every_term_still_count_exactly() {
        let m = mapping();
        let s = sources(&[&[("a", 2), ("b", 1)], &[("b", 2), ("c", 1)], &[("a", 1)]]);
        let r = terms(&json!({"field": "v"}), None, &docs(&m, &s)).unwrap();
        assert_eq!(
            buckets(&r),
            vec![("a".into(), 3), ("b".into(), 3), ("c".into(), 1)]
        );
        assert_eq!(r["doc_count_error_upper_bound"], 0);
    }

    #[test]
    fn a_term_a_shard_left_out_is_undercounted_within_the_error_bound() {
        let m = mapping();
        // shard_size 1: shard 0 returns only a (3), shard 1 only b (3); c's 2 + 2 are lost
        // although c is the most frequent term overall.
        let s = sources(&[&[("a", 3), ("c", 2)], &[("b", 3), ("c", 2)]]);
        let body = json!({"field": "v", "size": 1, "shard_size": 1});
        let r = terms(&body, None, &docs(&m, &s)).unwrap();
        assert_eq!(buckets(&r), vec![("a".into(), 3)]);
        assert_eq!(
            r["doc_count_error_upper_bound"], 6,
            "3 + 3: each shard's last count"
        );
        assert_eq!(
            r["sum_other_doc_count"], 7,
            "c's 4 left on the shards, b's 3 in the reduce"
        );
        // Ordered by key, every shard's first terms are the overall first: exact.
        let by_key = json!({"field": "v", "size": 2, "order": {"_key": "asc"}});
        let r = terms(&by_key, None, &docs(&m, &s)).unwrap();
        assert_eq!(buckets(&r), vec![("a".into(), 3), ("b".into(), 3)]);
        assert_eq!(r["doc_count_error_upper_bound"], 0);
        let ascending =
            json!({"field": "v", "size": 1, "shard_size": 1, "order": {"_count": "asc"}});
        assert_eq!(
            terms(&ascending, None, &docs(&m, &s)).unwrap()["doc_count_error_upper_bound"],
            -1
        );
    }
}
