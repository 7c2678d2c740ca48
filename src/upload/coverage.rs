//! The addresses an execution may report: its task's IP and CIDR targets, and for a task
//! with domain targets the A/AAAA answers to names within them (recorded by earlier
//! batches, or carried by the batch itself). Read in transaction A; an endpoint outside
//! makes the whole batch 422 `out_of_scope`.

use std::collections::HashSet;
use std::net::IpAddr;

use uuid::Uuid;

use super::batch::{refuse_positions, Batch};
use super::error::UploadError;
use crate::db::{Queries, Tx};

// The task's targets a batch needs, in one round trip: its domains as they are (never
// cast), its networks as first and last address (inet decodes to its address, so PG does
// the prefix arithmetic) and its single addresses, each list read whole only when it is
// short (up to $2 entries): all by primary-key prefix. For a longer list one row whose
// first column is NULL names its kind ('ip' or 'cidr'), and NAMED_TARGETS reads only what
// the batch's addresses need of it. Either way a batch never reads a long list whole.
pub const TARGETS: &str = "
    WITH few AS (
        SELECT (SELECT count(*) FROM (SELECT 1 FROM task_targets
                                       WHERE task_id = $1 AND kind = 'ip'
                                       LIMIT $2::bigint + 1) AS listed) <= $2::bigint AS ips,
               (SELECT count(*) FROM (SELECT 1 FROM task_targets
                                       WHERE task_id = $1 AND kind = 'cidr'
                                       LIMIT $2::bigint + 1) AS listed) <= $2::bigint AS nets)
    SELECT true, value, NULL::inet, NULL::inet
      FROM task_targets WHERE task_id = $1 AND kind = 'domain'
    UNION ALL
    SELECT false, NULL, network(value::inet)::inet, broadcast(value::inet)
      FROM task_targets WHERE task_id = $1 AND kind = 'cidr' AND (SELECT nets FROM few)
    UNION ALL
    SELECT false, NULL, value::inet, value::inet
      FROM task_targets WHERE task_id = $1 AND kind = 'ip' AND (SELECT ips FROM few)
    UNION ALL
    SELECT NULL, long.kind, NULL, NULL
      FROM (VALUES ('ip', (SELECT ips FROM few)), ('cidr', (SELECT nets FROM few)))
           AS long (kind, short)
     WHERE NOT long.short";

// Of the long lists ($3: the single addresses, $4: the networks), what the batch's
// addresses ($2, each IPv4 one in both spellings) need, as first and last address: the
// listed addresses among them, one primary-key probe each (the key is host()'s spelling,
// task_targets_value_canonical); and the networks overlapping the smallest network that
// spans them, per family and spelling, through the GiST index task_targets_cidr_gist, so
// a batch of nearby addresses reads only the networks around them.
pub const NAMED_TARGETS: &str = "
    SELECT a, a FROM unnest($2::inet[]) AS a
     WHERE $3 AND EXISTS (SELECT 1 FROM task_targets t
                           WHERE t.task_id = $1 AND t.kind = 'ip' AND t.value = host(a))
    UNION ALL
    SELECT network(t.value::inet)::inet, broadcast(t.value::inet)
      FROM (SELECT inet_merge(min(a), max(a)) AS span
              FROM unnest($2::inet[]) AS a WHERE $4
             GROUP BY family(a), a << '::ffff:0.0.0.0/96') AS spans
      JOIN task_targets t
        ON t.kind = 'cidr' AND t.value::inet && spans.span AND t.task_id = $1";

/// Entries of a task's single addresses, or of its networks, that a batch reads whole (a
/// batch's own addresses are about as many): beyond it, only what the batch needs.
const LISTED_TARGETS: i64 = 1000;

// At most children::MAX_CHILD_TARGETS rows, by primary-key prefix.
const RECORDED_ANSWERS: &str = "SELECT address FROM execution_dns_answers WHERE execution_id = $1";

/// Merged address ranges, per family (IPv4 widened to u128), sorted for binary search.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Coverage {
    v4: Vec<(u128, u128)>,
    v6: Vec<(u128, u128)>,
    /// The task's domain targets (lower case, no `*.`): answers to names within them count.
    domains: Vec<String>,
}

impl Coverage {
    /// The coverage of execution `execution_id` of task `task_id`, as far as `batch` needs
    /// it: its networks and domains, and those of its single addresses the batch names.
    pub fn load(
        tx: &mut Tx<'_>,
        task_id: Uuid,
        execution_id: Uuid,
        batch: &Batch,
    ) -> Result<Coverage, UploadError> {
        let mut ranges: Vec<(IpAddr, IpAddr)> = Vec::new();
        let mut domains: Vec<String> = Vec::new();
        let (mut long_ips, mut long_nets) = (false, false);
        for r in tx.query(TARGETS, &[&task_id, &LISTED_TARGETS])? {
            match r.get::<_, Option<bool>>(0) {
                Some(true) => {
                    let d: String = r.get(1);
                    domains.push(d.strip_prefix("*.").map(str::to_string).unwrap_or(d));
                }
                Some(false) => {
                    if let (Some(first), Some(last)) = (r.get(2), r.get(3)) {
                        ranges.push((first, last));
                    }
                }
                None => match r.get::<_, &str>(1) {
                    "ip" => long_ips = true,
                    _ => long_nets = true,
                },
            }
        }
        if long_ips || long_nets {
            let named = named_addresses(batch);
            for r in tx.query(NAMED_TARGETS, &[&task_id, &named, &long_ips, &long_nets])? {
                ranges.push((r.get(0), r.get(1)));
            }
        }
        if !domains.is_empty() {
            for r in tx.query(RECORDED_ANSWERS, &[&execution_id])? {
                let a: IpAddr = r.get(0);
                ranges.push((a, a));
            }
        }
        Ok(Coverage::new(ranges, domains))
    }

    pub fn new(ranges: Vec<(IpAddr, IpAddr)>, domains: Vec<String>) -> Coverage {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for (first, last) in ranges {
            match (first.to_canonical(), last.to_canonical()) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    v4.push((u32::from(a).into(), u32::from(b).into()))
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => v6.push((u128::from(a), u128::from(b))),
                _ => {}
            }
        }
        Coverage {
            v4: merged(v4),
            v6: merged(v6),
            domains,
        }
    }

    /// True when `name` is a domain target or lies under one.
    pub fn covers_name(&self, name: &str) -> bool {
        self.domains.iter().any(|d| {
            name == d
                || name
                    .strip_suffix(d.as_str())
                    .is_some_and(|head| head.ends_with('.'))
        })
    }

    pub fn covers(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(a) => within(&self.v4, u32::from(a).into()),
            IpAddr::V6(a) => within(&self.v6, u128::from(a)),
        }
    }

    /// Refuses the batch when any endpoint or host lies outside, naming every such position. The
    /// batch's own answers to names within the domain targets count, as they will be
    /// recorded with it.
    pub fn check(&self, batch: &Batch) -> Result<(), UploadError> {
        let own = Coverage::new(
            self.answers_of(batch).into_iter().map(|a| (a, a)).collect(),
            Vec::new(),
        );
        let outside: Vec<usize> = batch
            .observations
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                let ip: IpAddr = o.ip()?.parse().ok()?;
                (!self.covers(ip) && !own.covers(ip)).then_some(i)
            })
            .collect();
        if outside.is_empty() {
            Ok(())
        } else {
            Err(refuse_positions(
                "out_of_scope",
                "lie outside the task's targets",
                &outside,
            ))
        }
    }

    /// The batch's distinct A/AAAA answers to names within the domain targets: what its
    /// confirm records, so what scope and DNS child tasks take from it.
    pub fn answers_of(&self, batch: &Batch) -> Vec<IpAddr> {
        if self.domains.is_empty() {
            return Vec::new();
        }
        batch.dns_answers_where(|name| self.covers_name(name))
    }
}

/// The distinct addresses `batch` reports, each in both spellings containment treats alike
/// (IPv4, and IPv4-mapped IPv6), for the long lists of targets it may be within.
fn named_addresses(batch: &Batch) -> Vec<IpAddr> {
    let mut named = HashSet::new();
    for ip in batch
        .observations
        .iter()
        .filter_map(|o| o.ip()?.parse().ok())
    {
        if let IpAddr::V4(v4) = IpAddr::to_canonical(&ip) {
            named.insert(IpAddr::V6(v4.to_ipv6_mapped()));
            named.insert(IpAddr::V4(v4));
        } else {
            named.insert(ip);
        }
    }
    named.into_iter().collect()
}

/// Sorted, non-overlapping, non-adjacent ranges.
fn merged(mut v: Vec<(u128, u128)>) -> Vec<(u128, u128)> {
    v.sort_unstable();
    let mut out: Vec<(u128, u128)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn within(ranges: &[(u128, u128)], x: u128) -> bool {
    let i = ranges.partition_point(|r| r.0 <= x);
    i > 0 && x <= ranges[i - 1].1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_merge_and_contain_per_family() {
        let c = Coverage::new(
            vec![
                (ip("10.0.0.0"), ip("10.0.0.255")),
                (ip("10.0.1.0"), ip("10.0.1.255")),
                (ip("10.0.0.128"), ip("10.0.0.130")),
                (ip("192.0.2.7"), ip("192.0.2.7")),
                (ip("2001:db8::"), ip("2001:db8::ffff")),
            ],
            vec!["example.com".into()],
        );
        assert_eq!(c.v4.len(), 2, "{:?}", c.v4);
        for (a, inside) in [
            ("10.0.0.0", true),
            ("10.0.1.255", true),
            ("10.0.2.0", false),
            ("9.255.255.255", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("::ffff:10.0.0.9", true),
            ("2001:db8::1", true),
            ("2001:db8::1:0", false),
            ("::a00:1", false),
        ] {
            assert_eq!(c.covers(ip(a)), inside, "{a}");
        }
        assert!(c.covers_name("example.com"));
        assert!(c.covers_name("www.example.com"));
        assert!(!c.covers_name("badexample.com"));
        assert!(!c.covers_name("example.com.evil"));
        assert!(!Coverage::default().covers(ip("10.0.0.1")));
    }
}
