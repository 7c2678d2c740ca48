//! The configuration file as serde reads it from TOML, with every key's default, and the
//! keys that moved to another name (read under the old one for a release).

use serde::Deserialize;

use super::{checked, refuse, ConfigError, KIB, MIB};

/// The file as written. Unknown keys are refused so that a typo never silently falls back
/// to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub database: RawDatabase,
    #[serde(default)]
    pub elasticsearch: RawElasticsearch,
    #[serde(default)]
    pub projection: RawProjection,
    #[serde(default)]
    pub upload: RawUpload,
    #[serde(default)]
    pub scanner: RawScanner,
    #[serde(default)]
    pub retention: RawRetention,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawServer {
    pub listen: String,
    pub worker_threads: u64,
    pub max_body_bytes: u64,
    pub max_observations: u64,
    pub body_deadline_ms: u64,
    pub header_timeout_ms: u64,
    pub max_head_bytes: u64,
    pub max_headers: u64,
    pub max_connections: u64,
    pub max_body_reads: u64,
    pub preauth_body_bytes: u64,
    pub linger_ms: u64,
    pub shutdown_grace_seconds: u64,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub tls_handshake_timeout_ms: u64,
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: "127.0.0.1:8080".into(),
            worker_threads: 16,
            max_body_bytes: 16 * MIB,
            max_observations: 5000,
            body_deadline_ms: 60_000,
            header_timeout_ms: 10_000,
            max_head_bytes: 16 * KIB,
            max_headers: 100,
            max_connections: 512,
            max_body_reads: 16,
            preauth_body_bytes: 64 * KIB,
            linger_ms: 2000,
            shutdown_grace_seconds: 30,
            tls_cert: None,
            tls_key: None,
            tls_handshake_timeout_ms: 10_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawDatabase {
    pub url: Option<String>,
    pub ca_file: Option<String>,
    pub pool_size: u64,
    pub pool_timeout_ms: u64,
}

impl Default for RawDatabase {
    fn default() -> Self {
        RawDatabase {
            url: None,
            ca_file: None,
            pool_size: 8,
            pool_timeout_ms: 5000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawElasticsearch {
    pub url: String,
    pub index_prefix: String,
    pub bulk_batch_size: u64,
    pub bulk_max_concurrency: u64,
    pub request_timeout_ms: u64,
    /// `None`: the deprecated name below, or the default.
    pub bulk_max_bytes: Option<u64>,
    /// Deprecated names, read for one release (see [`DEPRECATED_KEYS`]).
    pub projection_page_size: Option<u64>,
    pub projection_bulk_max_bytes: Option<u64>,
    pub projection_pages_per_tick: Option<u64>,
    pub projection_lease_seconds: Option<u64>,
    pub projection_heartbeat_seconds: Option<u64>,
    pub api_key: Option<String>,
    pub username: Option<String>,
    pub ca_file: Option<String>,
    pub ca_fingerprint: Option<String>,
    pub facts_shards: u64,
    pub facts_replicas: u64,
    /// 0: not set on the indices (the cluster's default).
    pub facts_refresh_interval_ms: u64,
    pub execution_endpoints_shards: u64,
    pub execution_endpoints_replicas: u64,
    pub assets_shards: u64,
    pub assets_replicas: u64,
}

impl Default for RawElasticsearch {
    fn default() -> Self {
        RawElasticsearch {
            url: "http://127.0.0.1:9200".into(),
            index_prefix: "scanstore".into(),
            bulk_batch_size: 1000,
            bulk_max_concurrency: 4,
            request_timeout_ms: 30_000,
            bulk_max_bytes: None,
            projection_page_size: None,
            projection_bulk_max_bytes: None,
            projection_pages_per_tick: None,
            projection_lease_seconds: None,
            projection_heartbeat_seconds: None,
            api_key: None,
            username: None,
            ca_file: None,
            ca_fingerprint: None,
            facts_shards: 1,
            facts_replicas: 1,
            facts_refresh_interval_ms: 0,
            execution_endpoints_shards: 1,
            execution_endpoints_replicas: 1,
            assets_shards: 1,
            assets_replicas: 1,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawProjection {
    pub workers: u64,
    pub nice: u64,
    /// `None`: the deprecated `[elasticsearch]` name, or the default.
    pub page_size: Option<u64>,
    pub pages_per_tick: Option<u64>,
    pub lease_seconds: Option<u64>,
    pub heartbeat_seconds: Option<u64>,
}

impl Default for RawProjection {
    fn default() -> Self {
        RawProjection {
            workers: 1,
            nice: 0,
            page_size: None,
            pages_per_tick: None,
            lease_seconds: None,
            heartbeat_seconds: None,
        }
    }
}

/// Keys that moved, as (old name, new name); the old names are read for one release, with
/// a warning at start (`ConfigKeyDeprecated`).
pub const DEPRECATED_KEYS: &[(&str, &str)] = &[
    ("elasticsearch.projection_page_size", "projection.page_size"),
    (
        "elasticsearch.projection_bulk_max_bytes",
        "elasticsearch.bulk_max_bytes",
    ),
    (
        "elasticsearch.projection_pages_per_tick",
        "projection.pages_per_tick",
    ),
    (
        "elasticsearch.projection_lease_seconds",
        "projection.lease_seconds",
    ),
    (
        "elasticsearch.projection_heartbeat_seconds",
        "projection.heartbeat_seconds",
    ),
];

/// A moved key's value: the new name's, else the old name's (noted in `used_old`), else
/// `default`; both names at once is refused as ambiguous.
fn moved(
    new: Option<u64>,
    old: Option<u64>,
    default: u64,
    new_name: &'static str,
    used_old: &mut Vec<(&'static str, &'static str)>,
) -> Result<u64, ConfigError> {
    let old_name = DEPRECATED_KEYS
        .iter()
        .find(|(_, n)| *n == new_name)
        .map(|(o, _)| *o)
        .unwrap_or(new_name);
    match (new, old) {
        (Some(_), Some(_)) => Err(refuse(
            new_name,
            format!("(set, with its old name {old_name})"),
            format!("one of {new_name} and {old_name} (deprecated)"),
        )),
        (Some(v), None) => Ok(v),
        (None, Some(v)) => {
            used_old.push((old_name, new_name));
            Ok(v)
        }
        (None, None) => Ok(default),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawUpload {
    pub max_observation_age_days: u64,
    pub max_clock_skew_seconds: u64,
}

impl Default for RawUpload {
    fn default() -> Self {
        RawUpload {
            max_observation_age_days: 31,
            max_clock_skew_seconds: 300,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawScanner {
    pub lease_seconds: u64,
    pub max_attempts: u64,
}

impl Default for RawScanner {
    fn default() -> Self {
        RawScanner {
            lease_seconds: 600,
            max_attempts: 3,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawRetention {
    pub interval_hours: u64,
    pub facts_months: u64,
    pub asset_days: u64,
    pub execution_days: u64,
    pub tombstone_days: u64,
    pub batch_size: u64,
}

impl Default for RawRetention {
    fn default() -> Self {
        RawRetention {
            interval_hours: 24,
            facts_months: 0,
            asset_days: 0,
            execution_days: 0,
            tombstone_days: 0,
            batch_size: 1000,
        }
    }
}

/// The moved keys' values ([`DEPRECATED_KEYS`]); only the lease and heartbeat range-checked.
pub(super) struct MovedKeys {
    pub(super) page_size: u64,
    pub(super) bulk_max_bytes: u64,
    pub(super) pages_per_tick: u64,
    pub(super) lease: u64,
    pub(super) heartbeat: u64,
    /// Old names the file used, as (old, new).
    pub(super) deprecated: Vec<(&'static str, &'static str)>,
}

/// The moved keys (new name, else old name, else default), with the heartbeat × 3 ≤ lease rule.
pub(super) fn moved_keys(
    p: &RawProjection,
    e: &RawElasticsearch,
) -> Result<MovedKeys, ConfigError> {
    let mut deprecated = Vec::new();
    let mut moved = |new, old, default, name| moved(new, old, default, name, &mut deprecated);
    let page_size = moved(
        p.page_size,
        e.projection_page_size,
        1000,
        "projection.page_size",
    )?;
    let bulk_max_bytes = moved(
        e.bulk_max_bytes,
        e.projection_bulk_max_bytes,
        5 * MIB,
        "elasticsearch.bulk_max_bytes",
    )?;
    let pages_per_tick = moved(
        p.pages_per_tick,
        e.projection_pages_per_tick,
        4,
        "projection.pages_per_tick",
    )?;
    let lease = moved(
        p.lease_seconds,
        e.projection_lease_seconds,
        120,
        "projection.lease_seconds",
    )?;
    let heartbeat = moved(
        p.heartbeat_seconds,
        e.projection_heartbeat_seconds,
        20,
        "projection.heartbeat_seconds",
    )?;
    let lease = checked("projection.lease_seconds", lease)?;
    let heartbeat = checked("projection.heartbeat_seconds", heartbeat)?;
    // A renewal must fit three times into a lease so that two missed beats still keep it.
    if heartbeat * 3 > lease {
        return Err(refuse(
            "projection.heartbeat_seconds",
            format!("{heartbeat} with projection.lease_seconds = {lease}"),
            format!("at most projection.lease_seconds / 3 = {}", lease / 3),
        ));
    }
    Ok(MovedKeys {
        page_size,
        bulk_max_bytes,
        pages_per_tick,
        lease,
        heartbeat,
        deprecated,
    })
}
