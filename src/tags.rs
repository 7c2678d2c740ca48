//! Asset tags: which of an owner's tags apply to given IP addresses (exact IP tags and
//! containing CIDR tags) and DNS names (exact domain tags), and the scope of a tag change.
//! Read by the upload's `tags` stage and by publication, so facts, execution documents and
//! asset documents agree.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::db::Queries;

/// The kinds of target a tag is put on (`asset_tags.kind`, `search_targets.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    Ip,
    Cidr,
    Domain,
}

/// Which of an owner's targets a tag change affects: the `tag_scope` of a tags outbox row
/// (`{"kind": "cidr", "key": "10.0.0.0/8"}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct TagScope {
    pub kind: TargetKind,
    pub key: String,
}

impl std::fmt::Display for TagScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            TargetKind::Ip => "ip",
            TargetKind::Cidr => "cidr",
            TargetKind::Domain => "domain",
        };
        write!(f, "{kind}:{}", self.key)
    }
}

// In one round trip: exact IP tags through the primary key, containing CIDR tags through
// the partial GiST index asset_tags_cidr_gist (`kind = 'cidr'` repeated so the planner can
// use it), and exact domain tags of names (null address).
const TAGS: &str = "
    SELECT a, NULL::text, t.tag FROM unnest($2::inet[]) AS a
      JOIN asset_tags t ON t.owner_id = $1 AND t.kind = 'ip' AND t.key = host(a)
    UNION
    SELECT a, NULL, t.tag FROM unnest($2::inet[]) AS a
      JOIN asset_tags t ON t.owner_id = $1 AND t.kind = 'cidr' AND t.target_ip >>= a
    UNION ALL
    SELECT NULL, key, tag FROM asset_tags WHERE owner_id = $1 AND kind = 'domain' AND key = ANY($3)";

/// Sorted, de-duplicated tags per IP (canonical text) and per DNS name.
#[derive(Debug, Default, Clone)]
pub struct Tags {
    by_ip: HashMap<String, BTreeSet<String>>,
    by_name: HashMap<String, BTreeSet<String>>,
}

impl Tags {
    pub fn for_ip(&self, ip: &str) -> Vec<String> {
        self.by_ip
            .get(ip)
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn for_name(&self, name: &str) -> Vec<String> {
        self.by_name
            .get(name)
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ip.is_empty() && self.by_name.is_empty()
    }
}

#[cfg(test)]
impl Tags {
    /// Tags as a lookup finds them: (IP or name, tag) pairs.
    pub fn of(by_ip: &[(&str, &str)], by_name: &[(&str, &str)]) -> Tags {
        let mut tags = Tags::default();
        for (ip, tag) in by_ip {
            tags.by_ip
                .entry(ip.to_string())
                .or_default()
                .insert(tag.to_string());
        }
        for (name, tag) in by_name {
            tags.by_name
                .entry(name.to_string())
                .or_default()
                .insert(tag.to_string());
        }
        tags
    }
}

/// Looks up the tags of `owner_id` for `ips` and `names` (both may repeat).
pub fn lookup(
    db: &mut impl Queries,
    owner_id: Uuid,
    ips: &[impl AsRef<str>],
    names: &[&str],
) -> Result<Tags, postgres::Error> {
    let mut tags = Tags::default();
    let mut addrs: Vec<IpAddr> = ips.iter().filter_map(|i| i.as_ref().parse().ok()).collect();
    addrs.sort();
    addrs.dedup();
    let mut names: Vec<&str> = names.to_vec();
    names.sort_unstable();
    names.dedup();
    if addrs.is_empty() && names.is_empty() {
        return Ok(tags);
    }
    for row in db.query(TAGS, &[&owner_id, &addrs, &names])? {
        let tag: String = row.get(2);
        match (
            row.get::<_, Option<IpAddr>>(0),
            row.get::<_, Option<String>>(1),
        ) {
            (Some(ip), _) => tags.by_ip.entry(ip.to_string()),
            (None, Some(name)) => tags.by_name.entry(name),
            (None, None) => continue,
        }
        .or_default()
        .insert(tag);
    }
    Ok(tags)
}
