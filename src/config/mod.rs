//! Start-up configuration: `RawConfig` is what serde reads from TOML, `Config` is what the
//! rest of scanstore may rely on — every documented range checked, environment overrides
//! applied. Not a dynamic runtime configuration (seed 000, "配置").

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::es::access::{EsAuth, Fingerprint};
use crate::http::tls::TlsFiles;
use ureq::tls::RootCerts;

mod connections;
mod raw;

pub use connections::{check_secret_permissions, url_has_password};
use connections::{database_target, es_access, server_tls, EsAccess};
use raw::{moved_keys, MovedKeys};
pub use raw::{
    RawConfig, RawDatabase, RawElasticsearch, RawProjection, RawRetention, RawScanner, RawServer,
    RawUpload, DEPRECATED_KEYS,
};

/// Environment variable that overrides `database.url` (keeps the password out of the file).
pub const ENV_DATABASE_URL: &str = "SCANSTORE_DATABASE_URL";
/// Environment variable that overrides `elasticsearch.url`.
pub const ENV_ES_URL: &str = "SCANSTORE_ES_URL";
/// Environment variable that overrides `elasticsearch.api_key` (keeps it out of the file).
pub const ENV_ES_API_KEY: &str = "SCANSTORE_ES_API_KEY";
/// Environment variable holding the password of `elasticsearch.username`; never in a file.
pub const ENV_ES_PASSWORD: &str = "SCANSTORE_ES_PASSWORD";

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Why a configuration was refused: the key, the value found and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub allowed: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration: {} = {} (allowed: {})",
            self.key, self.value, self.allowed
        )
    }
}

impl std::error::Error for ConfigError {}

fn refuse(key: &str, value: impl fmt::Display, allowed: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        value: value.to_string(),
        allowed: allowed.into(),
    }
}
/// Validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Deprecated key names the file used, as (old, new), for the warning at start.
    pub deprecated: Vec<(&'static str, &'static str)>,
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub elasticsearch: EsConfig,
    pub projection: ProjectionConfig,
    pub upload: UploadConfig,
    pub scanner: ScannerConfig,
    pub retention: RetentionConfig,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: String,
    pub worker_threads: usize,
    pub max_body_bytes: u64,
    pub max_observations: usize,
    /// Total time a client may take to send one request body.
    pub body_deadline: Duration,
    /// Read timeout of every client socket; the most a request line and headers may take,
    /// and how long an idle connection is kept between requests.
    pub header_timeout: Duration,
    /// Most bytes in a request line and its headers (431 beyond).
    pub max_head_bytes: usize,
    /// Most header lines in one request (431 beyond).
    pub max_headers: usize,
    /// Most client connections at once (503 + Retry-After beyond).
    pub max_connections: usize,
    /// Most bodies larger than `preauth_body_bytes` being read at once; with
    /// `max_body_bytes` this bounds the memory of large bodies in flight.
    pub max_body_reads: usize,
    /// Bodies larger than this are read only after the scanner's token is verified.
    pub preauth_body_bytes: u64,
    /// How long a closing connection's input is still read off and dropped, so that a
    /// client still sending a refused body gets the answer rather than a reset.
    pub linger: Duration,
    pub shutdown_grace: Duration,
    /// Serve HTTPS with this certificate and key (re-read on SIGHUP).
    pub tls: Option<TlsFiles>,
    /// The longest a client's TLS handshake may take.
    pub tls_handshake_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub url: String,
    /// The CA to verify the server against when the URL names no `sslrootcert`.
    pub ca_file: Option<std::path::PathBuf>,
    pub pool_size: u32,
    pub pool_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct EsConfig {
    pub url: String,
    /// Most NDJSON bytes in one `_bulk` request (uploads, publication, rebuild).
    pub bulk_max_bytes: usize,
    pub index_prefix: String,
    pub bulk_batch_size: usize,
    pub bulk_max_concurrency: usize,
    pub request_timeout: Duration,
    /// Credentials sent with every request (`Secret`s: never printed).
    pub auth: EsAuth,
    /// The CAs an `https://` cluster is verified against (the public web roots when unset).
    pub ca_roots: Option<RootCerts>,
    /// `elasticsearch.ca_fingerprint`: trust the CA with this SHA-256 in the cluster's chain.
    pub ca_fingerprint: Option<Fingerprint>,
    /// Shards, replicas and refresh interval of each index family.
    pub indices: IndexShapes,
}

/// How one family of indices is laid out on the cluster. The shard count is fixed when an
/// index is created (new indices take a changed value: the next month's facts, a rebuild's
/// asset version); replicas and the refresh interval are changed on live indices at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexShape {
    pub shards: u32,
    pub replicas: u32,
    /// `None`: not set, so the cluster's default applies (Elasticsearch: 1 s, paused on a
    /// shard no search has reached for 30 s).
    pub refresh_interval: Option<Duration>,
}

impl Default for IndexShape {
    /// What scanstore created before these were configurable: one shard, Elasticsearch's
    /// default of one replica, the default refresh interval.
    fn default() -> Self {
        IndexShape {
            shards: 1,
            replicas: 1,
            refresh_interval: None,
        }
    }
}

/// The index families scanstore creates: the monthly facts (through their template), the
/// shared execution endpoint index, and the versioned asset indices of both views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexShapes {
    pub facts: IndexShape,
    pub execution_endpoints: IndexShape,
    pub assets: IndexShape,
}

#[derive(Debug, Clone)]
pub struct ProjectionConfig {
    pub workers: usize,
    /// Endpoints read per publication page.
    pub page_size: usize,
    /// Pages one claim publishes before yielding.
    pub pages_per_tick: usize,
    /// Lease of a claimed outbox row, and its renewal period.
    pub lease: Duration,
    pub heartbeat: Duration,
    /// Added to the worker threads' nice value (and so to the heartbeat, bulk and page-read
    /// threads they start): background publication yields the CPU to uploads and to a
    /// co-located Elasticsearch or PostgreSQL.
    pub nice: i32,
    /// How often an idle worker looks for due rows nobody rang about (not a file setting:
    /// rows made due by this instance ring the workers; tests lengthen it to prove that).
    pub poll_interval: Duration,
}

#[derive(Debug, Clone)]
pub struct UploadConfig {
    /// How far back an observation may lie: older ones are refused, so that one batch cannot
    /// open years of monthly facts indices or bury old data as new.
    pub max_observation_age: chrono::Duration,
    /// How far ahead of the server's clock an observation may lie: a scanner with a fast
    /// clock is tolerated, one that pins `last_seen` in the future is not.
    pub max_clock_skew: chrono::Duration,
}

#[derive(Debug, Clone)]
pub struct ScannerConfig {
    /// How long a claimed execution stays the scanner's without a heartbeat or batch.
    pub lease: Duration,
    /// Claims an execution may have; a lease that expires on the last one fails it.
    pub max_attempts: u32,
    /// How often lapsed leases are looked for (not a file setting: a tenth of the lease,
    /// 1 to 30 s; tests shorten it).
    pub sweep_interval: Duration,
    /// How long after an upload is abandoned its pending receipts are kept: longer than a
    /// batch's Elasticsearch writes can last (three attempts of a request and the backoff
    /// between them), so that none lands after its receipt is gone (not a file setting:
    /// follows `elasticsearch.request_timeout_ms`; tests shorten it).
    pub write_grace: Duration,
}

/// What ages out, and how often that is looked at. `None` keeps that kind of data forever.
#[derive(Debug, Clone)]
pub struct RetentionConfig {
    /// How often a run is due (the instances share one run through the database).
    pub interval: Duration,
    /// Monthly facts indices older than this many whole months are dropped.
    pub facts_months: Option<u32>,
    /// An owner's asset not seen for this long is deleted (through a tombstone).
    pub asset_age: Option<chrono::Duration>,
    /// A finished execution's upload records (receipts, upload streams, DNS answers,
    /// analysis and outbox rows) are removed this long after it finished.
    pub execution_age: Option<chrono::Duration>,
    /// A tombstone is retired this long after its deletion: the observations it covers
    /// are marked in the execution projection, which keeps them out of the owner's view
    /// from then on, and the row goes.
    pub tombstone_age: Option<chrono::Duration>,
    /// Rows per short transaction, and documents per page.
    pub batch_size: usize,
    /// How often the daily run asks whether a run is due (not a file setting: a minute;
    /// tests shorten it).
    pub check_every: Duration,
}

/// One documented range: `(key, low, high, unit)`. The table is the single source for
/// validation, the example file's comments and the boundary tests.
pub const RANGES: &[(&str, u64, u64, &str)] = &[
    ("server.worker_threads", 1, 512, ""),
    ("server.max_body_bytes", KIB, 256 * MIB, " bytes"),
    ("server.max_observations", 1, 100_000, ""),
    ("server.body_deadline_ms", 1000, 3_600_000, " ms"),
    ("server.header_timeout_ms", 100, 600_000, " ms"),
    ("server.max_head_bytes", KIB, MIB, " bytes"),
    ("server.max_headers", 8, 1000, ""),
    ("server.max_connections", 16, 65_536, ""),
    ("server.max_body_reads", 1, 1024, ""),
    ("server.preauth_body_bytes", 0, MIB, " bytes"),
    ("server.linger_ms", 0, 60_000, " ms"),
    ("server.shutdown_grace_seconds", 1, 600, " s"),
    ("server.tls_handshake_timeout_ms", 100, 60_000, " ms"),
    ("database.pool_size", 1, 512, ""),
    ("database.pool_timeout_ms", 10, 600_000, " ms"),
    ("elasticsearch.bulk_batch_size", 1, 10_000, ""),
    ("elasticsearch.bulk_max_concurrency", 1, 64, ""),
    ("elasticsearch.request_timeout_ms", 100, 600_000, " ms"),
    // 1024: Elasticsearch's and OpenSearch's most shards per index.
    ("elasticsearch.facts_shards", 1, 1024, ""),
    ("elasticsearch.facts_replicas", 0, 32, ""),
    // 0 = not set (the cluster's default); at most an hour.
    (
        "elasticsearch.facts_refresh_interval_ms",
        0,
        3_600_000,
        " ms",
    ),
    ("elasticsearch.execution_endpoints_shards", 1, 1024, ""),
    ("elasticsearch.execution_endpoints_replicas", 0, 32, ""),
    ("elasticsearch.assets_shards", 1, 1024, ""),
    ("elasticsearch.assets_replicas", 0, 32, ""),
    ("projection.page_size", 1, 2000, ""),
    ("elasticsearch.bulk_max_bytes", 64 * KIB, 16 * MIB, " bytes"),
    ("projection.pages_per_tick", 1, 32, ""),
    ("projection.lease_seconds", 10, 3600, " s"),
    ("projection.heartbeat_seconds", 1, 1200, " s"),
    ("projection.workers", 0, 64, ""),
    ("projection.nice", 0, 19, ""),
    ("upload.max_observation_age_days", 1, 3650, " days"),
    ("upload.max_clock_skew_seconds", 0, 86_400, " s"),
    ("scanner.lease_seconds", 5, 86_400, " s"),
    ("scanner.max_attempts", 1, 100, ""),
    ("retention.interval_hours", 1, 720, " h"),
    // 0 = keep forever, in these three.
    ("retention.facts_months", 0, 1200, " months"),
    ("retention.asset_days", 0, 36_500, " days"),
    ("retention.execution_days", 0, 36_500, " days"),
    ("retention.tombstone_days", 0, 36_500, " days"),
    ("retention.batch_size", 100, 100_000, ""),
];

fn checked(key: &str, value: u64) -> Result<u64, ConfigError> {
    // Every numeric key has a documented range; one without is refused (and the tests,
    // which load the defaults, fail), never let through unchecked.
    let Some((_, lo, hi, unit)) = RANGES.iter().find(|(k, ..)| *k == key).copied() else {
        return Err(refuse(key, value, "a key listed in config::RANGES"));
    };
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(refuse(key, value, format!("{lo}..={hi}{unit}")))
    }
}

fn to_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

impl Config {
    /// Reads, parses and validates a TOML file, then applies the environment overrides.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            refuse(
                "config file",
                path.display(),
                format!("a readable file ({e})"),
            )
        })?;
        let raw: RawConfig = toml::from_str(&text)
            .map_err(|e| refuse("config file", path.display(), format!("valid TOML: {e}")))?;
        check_secret_permissions(path, &raw)?;
        Config::from_raw(raw, &|name| std::env::var(name).ok())
    }

    /// Validates a parsed file; `env` looks up environment overrides (injectable for tests).
    ///
    /// Of several problems the one reported is the first of: an index shape, `server.listen`,
    /// the TLS files, the database URL, the Elasticsearch access, a moved key, other ranges.
    pub fn from_raw(
        raw: RawConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let indices = index_shapes(&raw.elasticsearch)?;
        let tls = server_endpoint(&raw.server)?;
        let db_target = database_target(&raw.database, env)?;
        let access = es_access(&raw.elasticsearch, env)?;
        let moved = moved_keys(&raw.projection, &raw.elasticsearch)?;
        let request_timeout_ms = raw.elasticsearch.request_timeout_ms;
        let max_observation_age_days = raw.upload.max_observation_age_days;
        Ok(Config {
            server: server(raw.server, tls)?,
            database: database(raw.database, db_target)?,
            elasticsearch: elasticsearch(raw.elasticsearch, access, &moved, indices)?,
            projection: projection(raw.projection, &moved)?,
            upload: upload(raw.upload)?,
            scanner: scanner(raw.scanner, request_timeout_ms)?,
            retention: retention(raw.retention, max_observation_age_days)?,
            deprecated: moved.deprecated,
        })
    }
}

/// `server.listen` and the TLS files: the `[server]` keys checked before any range.
fn server_endpoint(s: &RawServer) -> Result<Option<TlsFiles>, ConfigError> {
    if s.listen.parse::<std::net::SocketAddr>().is_err() {
        return Err(refuse(
            "server.listen",
            &s.listen,
            "HOST:PORT with an IP address",
        ));
    }
    server_tls(s.tls_cert.clone(), s.tls_key.clone())
}

/// The `[server]` section, given its already checked TLS files.
fn server(s: RawServer, tls: Option<TlsFiles>) -> Result<ServerConfig, ConfigError> {
    Ok(ServerConfig {
        listen: s.listen,
        worker_threads: to_usize(checked("server.worker_threads", s.worker_threads)?),
        max_body_bytes: checked("server.max_body_bytes", s.max_body_bytes)?,
        max_observations: to_usize(checked("server.max_observations", s.max_observations)?),
        body_deadline: Duration::from_millis(checked(
            "server.body_deadline_ms",
            s.body_deadline_ms,
        )?),
        header_timeout: Duration::from_millis(checked(
            "server.header_timeout_ms",
            s.header_timeout_ms,
        )?),
        max_head_bytes: to_usize(checked("server.max_head_bytes", s.max_head_bytes)?),
        max_headers: to_usize(checked("server.max_headers", s.max_headers)?),
        max_connections: to_usize(checked("server.max_connections", s.max_connections)?),
        max_body_reads: to_usize(checked("server.max_body_reads", s.max_body_reads)?),
        preauth_body_bytes: checked("server.preauth_body_bytes", s.preauth_body_bytes)?,
        linger: Duration::from_millis(checked("server.linger_ms", s.linger_ms)?),
        shutdown_grace: Duration::from_secs(checked(
            "server.shutdown_grace_seconds",
            s.shutdown_grace_seconds,
        )?),
        tls,
        tls_handshake_timeout: Duration::from_millis(checked(
            "server.tls_handshake_timeout_ms",
            s.tls_handshake_timeout_ms,
        )?),
    })
}

/// The `[database]` section, given its already checked URL and CA file.
fn database(
    d: RawDatabase,
    (url, ca_file): (String, Option<PathBuf>),
) -> Result<DatabaseConfig, ConfigError> {
    Ok(DatabaseConfig {
        url,
        ca_file,
        pool_size: u32::try_from(checked("database.pool_size", d.pool_size)?).unwrap_or(u32::MAX),
        pool_timeout: Duration::from_millis(checked(
            "database.pool_timeout_ms",
            d.pool_timeout_ms,
        )?),
    })
}

/// The `[elasticsearch]` section, given its checked access, moved keys and index shapes.
fn elasticsearch(
    e: RawElasticsearch,
    access: EsAccess,
    moved: &MovedKeys,
    indices: IndexShapes,
) -> Result<EsConfig, ConfigError> {
    Ok(EsConfig {
        url: access.url.trim_end_matches('/').to_string(),
        bulk_max_bytes: to_usize(checked(
            "elasticsearch.bulk_max_bytes",
            moved.bulk_max_bytes,
        )?),
        index_prefix: e.index_prefix,
        bulk_batch_size: to_usize(checked("elasticsearch.bulk_batch_size", e.bulk_batch_size)?),
        bulk_max_concurrency: to_usize(checked(
            "elasticsearch.bulk_max_concurrency",
            e.bulk_max_concurrency,
        )?),
        request_timeout: Duration::from_millis(checked(
            "elasticsearch.request_timeout_ms",
            e.request_timeout_ms,
        )?),
        auth: access.auth,
        ca_roots: access.ca_roots,
        ca_fingerprint: access.ca_fingerprint,
        indices,
    })
}

/// The `[projection]` section, given its resolved moved keys.
fn projection(p: RawProjection, moved: &MovedKeys) -> Result<ProjectionConfig, ConfigError> {
    Ok(ProjectionConfig {
        workers: to_usize(checked("projection.workers", p.workers)?),
        page_size: to_usize(checked("projection.page_size", moved.page_size)?),
        pages_per_tick: to_usize(checked("projection.pages_per_tick", moved.pages_per_tick)?),
        lease: Duration::from_secs(moved.lease),
        heartbeat: Duration::from_secs(moved.heartbeat),
        nice: i32::try_from(checked("projection.nice", p.nice)?).unwrap_or(19),
        poll_interval: crate::projection::worker::IDLE_WAIT,
    })
}

/// The `[upload]` section.
fn upload(u: RawUpload) -> Result<UploadConfig, ConfigError> {
    Ok(UploadConfig {
        max_observation_age: chrono::Duration::days(checked(
            "upload.max_observation_age_days",
            u.max_observation_age_days,
        )? as i64),
        max_clock_skew: chrono::Duration::seconds(checked(
            "upload.max_clock_skew_seconds",
            u.max_clock_skew_seconds,
        )? as i64),
    })
}

/// The `[scanner]` section; the receipts' write grace follows `request_timeout_ms`.
fn scanner(sc: RawScanner, request_timeout_ms: u64) -> Result<ScannerConfig, ConfigError> {
    let lease = checked("scanner.lease_seconds", sc.lease_seconds)?;
    Ok(ScannerConfig {
        lease: Duration::from_secs(lease),
        max_attempts: checked("scanner.max_attempts", sc.max_attempts)? as u32,
        sweep_interval: Duration::from_secs((lease / 10).clamp(1, 30)),
        write_grace: Duration::from_millis(request_timeout_ms) * crate::upload::BULK_ATTEMPTS
            + crate::upload::BULK_BACKOFF.cap * crate::upload::BULK_ATTEMPTS
            + Duration::from_secs(1),
    })
}

/// The `[retention]` section. A tombstone outlives the oldest observation an upload may
/// still carry (`upload.max_observation_age_days`): once retired, only the marks it left
/// on what was already uploaded keep the deletion.
fn retention(
    r: RawRetention,
    max_observation_age_days: u64,
) -> Result<RetentionConfig, ConfigError> {
    let tombstone_days = checked("retention.tombstone_days", r.tombstone_days)?;
    if tombstone_days != 0 && tombstone_days <= max_observation_age_days {
        return Err(refuse(
            "retention.tombstone_days",
            tombstone_days,
            format!(
                "0 (keep) or more than upload.max_observation_age_days ({max_observation_age_days}): \
                 an upload may still carry an observation that old"
            ),
        ));
    }
    let days = |key: &str, v: u64| -> Result<Option<chrono::Duration>, ConfigError> {
        Ok(Some(checked(key, v)?)
            .filter(|d| *d > 0)
            .map(|d| chrono::Duration::days(d as i64)))
    };
    Ok(RetentionConfig {
        interval: Duration::from_secs(
            checked("retention.interval_hours", r.interval_hours)? * 3600,
        ),
        facts_months: Some(checked("retention.facts_months", r.facts_months)? as u32)
            .filter(|m| *m > 0),
        asset_age: days("retention.asset_days", r.asset_days)?,
        execution_age: days("retention.execution_days", r.execution_days)?,
        tombstone_age: days("retention.tombstone_days", tombstone_days)?,
        batch_size: to_usize(checked("retention.batch_size", r.batch_size)?),
        check_every: Duration::from_secs(60),
    })
}

/// The `[elasticsearch]` shard, replica and refresh keys of each index family.
fn index_shapes(e: &RawElasticsearch) -> Result<IndexShapes, ConfigError> {
    let shape = |family: &str, shards: u64, replicas: u64| -> Result<IndexShape, ConfigError> {
        let count = |what: &str, v: u64| {
            checked(&format!("elasticsearch.{family}_{what}"), v).map(|v| v as u32)
        };
        Ok(IndexShape {
            shards: count("shards", shards)?,
            replicas: count("replicas", replicas)?,
            refresh_interval: None,
        })
    };
    let refresh = checked(
        "elasticsearch.facts_refresh_interval_ms",
        e.facts_refresh_interval_ms,
    )?;
    Ok(IndexShapes {
        facts: IndexShape {
            refresh_interval: (refresh > 0).then(|| Duration::from_millis(refresh)),
            ..shape("facts", e.facts_shards, e.facts_replicas)?
        },
        execution_endpoints: shape(
            "execution_endpoints",
            e.execution_endpoints_shards,
            e.execution_endpoints_replicas,
        )?,
        assets: shape("assets", e.assets_shards, e.assets_replicas)?,
    })
}

/// ES index names must be lowercase and may not start with `-`, `_` or `+`; the prefix
/// also has to leave room for `-facts-YYYY.MM` and friends within the 255-byte limit.
fn validate_index_prefix(prefix: &str) -> Result<(), ConfigError> {
    let ok_chars = prefix.bytes().all(|b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
    });
    let ok_start = prefix
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok_chars && ok_start && prefix.len() <= 200 {
        Ok(())
    } else {
        Err(refuse(
            "elasticsearch.index_prefix",
            prefix,
            "1..=200 chars of a-z 0-9 - _ . starting with a letter or digit",
        ))
    }
}

#[cfg(test)]
mod tests;
