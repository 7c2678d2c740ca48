//! Start-up configuration: `RawConfig` is what serde reads from TOML, `Config` is what the
//! rest of scanstore may rely on — every documented range checked, environment overrides
//! applied. Not a dynamic runtime configuration (seed 000, "配置").

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::db::tls::DbUrl;
use crate::es::access::{self, EsAuth, Fingerprint};
use crate::http::tls::TlsFiles;
use crate::telemetry::secret::Secret;
use ureq::tls::RootCerts;

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

/// A configuration file that holds a secret (a database URL with a password) must not be
/// readable by every local user: start-up is refused, naming the file, its mode and the fix.
/// Group-readable files (`0640`, root:scanstore) are fine; so is a world-readable file
/// without a password (the password can come from `$SCANSTORE_DATABASE_URL`).
pub fn check_secret_permissions(path: &Path, raw: &RawConfig) -> Result<(), ConfigError> {
    let secret = if raw.database.url.as_deref().is_some_and(url_has_password) {
        format!("database.url contains a password (or move the URL to ${ENV_DATABASE_URL})")
    } else if raw.elasticsearch.api_key.is_some() {
        format!("it holds elasticsearch.api_key (or move the key to ${ENV_ES_API_KEY})")
    } else {
        return Ok(());
    };
    let mode = file_mode(path).unwrap_or(0);
    if mode & 0o004 != 0 {
        return Err(refuse(
            "config file",
            format!("{} (mode {:04o})", path.display(), mode & 0o7777),
            format!(
                "not world-readable while {secret}: chmod o-r {}",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// True when a postgres URL or key=value string carries a password.
pub fn url_has_password(url: &str) -> bool {
    DbUrl::parse(url, None)
        .map(|u| u.config.get_password().is_some_and(|p| !p.is_empty()))
        .unwrap_or(false)
}

#[cfg(unix)]
fn file_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).ok().map(|m| m.permissions().mode())
}

#[cfg(not(unix))]
fn file_mode(_: &Path) -> Option<u32> {
    None
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

/// Where the database is: the URL (`$SCANSTORE_DATABASE_URL` first) and its CA file.
fn database_target(
    d: &RawDatabase,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Option<PathBuf>), ConfigError> {
    let url = env(ENV_DATABASE_URL)
        .filter(|u| !u.is_empty())
        .or_else(|| d.url.clone())
        .ok_or_else(|| {
            refuse(
                "database.url",
                "(unset)",
                format!("a postgresql:// URL in the file or ${ENV_DATABASE_URL}"),
            )
        })?;
    if !(url.starts_with("postgres://")
        || url.starts_with("postgresql://")
        || url.contains("host="))
    {
        return Err(refuse(
            "database.url",
            "(hidden)",
            "a postgresql:// URL or a key=value connection string",
        ));
    }
    let ca_file = d.ca_file.as_ref().map(PathBuf::from);
    // The URL's TLS settings, and the CA file they would read, are checked now rather
    // than at the first connection.
    DbUrl::parse(&url, ca_file.as_deref())
        .and_then(|u| u.connector().map(|_| ()))
        .map_err(|why| refuse("database.url", "(hidden)", why))?;
    Ok((url, ca_file))
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

/// How the cluster is reached, checked before any range: its URL, credentials and CAs.
struct EsAccess {
    url: String,
    auth: EsAuth,
    ca_roots: Option<RootCerts>,
    ca_fingerprint: Option<Fingerprint>,
}

/// `elasticsearch.url` (`$SCANSTORE_ES_URL` first), the index prefix, credentials and CAs.
fn es_access(
    e: &RawElasticsearch,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EsAccess, ConfigError> {
    let url = env(ENV_ES_URL)
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| e.url.clone());
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(refuse(
            "elasticsearch.url",
            &url,
            "an http:// or https:// URL",
        ));
    }
    validate_index_prefix(&e.index_prefix)?;
    let auth = es_auth(e.api_key.clone(), e.username.clone(), env)?;
    let ca_fingerprint = match &e.ca_fingerprint {
        Some(_) if e.ca_file.is_some() => {
            return Err(refuse(
                "elasticsearch.ca_fingerprint",
                "(set, with elasticsearch.ca_file)",
                "a CA file or a fingerprint, not both",
            ))
        }
        Some(_) if !url.starts_with("https://") => {
            return Err(refuse(
                "elasticsearch.ca_fingerprint",
                "(set)",
                "used with an https:// elasticsearch.url",
            ))
        }
        Some(text) => Some(
            text.parse::<Fingerprint>()
                .map_err(|why| refuse("elasticsearch.ca_fingerprint", text, why))?,
        ),
        None => None,
    };
    let ca_roots = match &e.ca_file {
        Some(path) => Some(access::ca_roots(Path::new(path)).map_err(|why| {
            refuse(
                "elasticsearch.ca_file",
                path,
                format!("a readable PEM bundle ({why})"),
            )
        })?),
        None => None,
    };
    Ok(EsAccess {
        url,
        auth,
        ca_roots,
        ca_fingerprint,
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

/// The moved keys' values ([`DEPRECATED_KEYS`]); only the lease and heartbeat range-checked.
struct MovedKeys {
    page_size: u64,
    bulk_max_bytes: u64,
    pages_per_tick: u64,
    lease: u64,
    heartbeat: u64,
    /// Old names the file used, as (old, new).
    deprecated: Vec<(&'static str, &'static str)>,
}

/// The moved keys (new name, else old name, else default), with the heartbeat × 3 ≤ lease rule.
fn moved_keys(p: &RawProjection, e: &RawElasticsearch) -> Result<MovedKeys, ConfigError> {
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

/// `server.tls_cert` and `server.tls_key`: both or neither; they must load as a certificate
/// chain and its key, and the key must not be readable by every local user.
fn server_tls(cert: Option<String>, key: Option<String>) -> Result<Option<TlsFiles>, ConfigError> {
    let files = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => TlsFiles {
            cert: cert.into(),
            key: key.into(),
        },
        (Some(_), None) => {
            return Err(refuse(
                "server.tls_key",
                "(unset)",
                "set with server.tls_cert",
            ))
        }
        (None, Some(_)) => {
            return Err(refuse(
                "server.tls_cert",
                "(unset)",
                "set with server.tls_key",
            ))
        }
    };
    let mode = file_mode(&files.key).unwrap_or(0);
    if mode & 0o004 != 0 {
        return Err(refuse(
            "server.tls_key",
            format!("{} (mode {:04o})", files.key.display(), mode & 0o7777),
            format!("not world-readable: chmod o-r {}", files.key.display()),
        ));
    }
    files.load().map_err(|why| {
        refuse(
            "server.tls_cert",
            files.cert.display(),
            format!("a PEM certificate chain and its key in server.tls_key ({why})"),
        )
    })?;
    Ok(Some(files))
}

/// The cluster's credentials: an API key (file or `$SCANSTORE_ES_API_KEY`), or a user
/// whose password comes from `$SCANSTORE_ES_PASSWORD` only; not both.
fn es_auth(
    file_key: Option<String>,
    username: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EsAuth, ConfigError> {
    let api_key = env(ENV_ES_API_KEY).filter(|k| !k.is_empty()).or(file_key);
    let password = env(ENV_ES_PASSWORD).filter(|p| !p.is_empty());
    match (api_key, username) {
        (Some(_), Some(_)) => Err(refuse(
            "elasticsearch.username",
            "(set, with an API key)",
            "an API key or a username, not both",
        )),
        (Some(key), None) => {
            let ok = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+/=_-:".contains(&b));
            if !ok {
                return Err(refuse(
                    "elasticsearch.api_key",
                    "(hidden)",
                    "the encoded API key Elasticsearch prints (base64 text)",
                ));
            }
            Ok(EsAuth::ApiKey(Secret::new(key)))
        }
        (None, Some(username)) => {
            if username.is_empty() || username.contains(':') {
                return Err(refuse(
                    "elasticsearch.username",
                    &username,
                    "a user name without ':'",
                ));
            }
            let password = password.ok_or_else(|| {
                refuse(
                    "elasticsearch.username",
                    &username,
                    format!("a password in ${ENV_ES_PASSWORD}"),
                )
            })?;
            Ok(EsAuth::Basic {
                username,
                password: Secret::new(password),
            })
        }
        (None, None) if password.is_some() => Err(refuse(
            ENV_ES_PASSWORD,
            "(set)",
            "elasticsearch.username to go with it",
        )),
        (None, None) => Ok(EsAuth::None),
    }
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
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn base() -> RawConfig {
        let mut raw = RawConfig::default();
        raw.database.url = Some("postgresql://u@127.0.0.1/db".into());
        raw
    }

    fn parse(toml_text: &str) -> Result<Config, ConfigError> {
        let mut raw: RawConfig = toml::from_str(toml_text).map_err(|e| refuse("toml", e, ""))?;
        if raw.database.url.is_none() {
            raw.database.url = Some("postgresql://u@127.0.0.1/db".into());
        }
        Config::from_raw(raw, &no_env)
    }

    /// Sets one key of the table by its dotted name.
    fn with(key: &str, value: u64) -> Result<Config, ConfigError> {
        let (section, field) = key.split_once('.').unwrap_or(("", key));
        let mut text = format!("[{section}]\n{field} = {value}\n");
        // Keep the heartbeat rule out of the way when testing the lease range alone.
        if key == "projection.lease_seconds" {
            text.push_str("heartbeat_seconds = 1\n");
        }
        if key == "projection.heartbeat_seconds" {
            text.push_str("lease_seconds = 3600\n");
        }
        parse(&text)
    }

    #[test]
    fn defaults_are_valid() {
        let c = Config::from_raw(base(), &no_env).unwrap();
        assert_eq!(c.projection.page_size, 1000);
        assert_eq!(c.elasticsearch.bulk_max_bytes, 5_242_880);
        assert_eq!(c.projection.pages_per_tick, 4);
        assert_eq!(c.projection.lease, Duration::from_secs(120));
        assert_eq!(c.projection.heartbeat, Duration::from_secs(20));
        assert_eq!(c.projection.workers, 1);
        assert_eq!(c.projection.nice, 0);
        assert!(c.deprecated.is_empty());
    }

    #[test]
    fn every_range_accepts_its_edges_and_refuses_just_outside() {
        for (key, lo, hi, _) in RANGES {
            assert!(with(key, *lo).is_ok(), "{key} = {lo} should be accepted");
            assert!(with(key, *hi).is_ok(), "{key} = {hi} should be accepted");
            let above = with(key, hi + 1).unwrap_err();
            assert_eq!(above.key, *key);
            assert_eq!(above.value, (hi + 1).to_string());
            if *lo > 0 {
                let below = with(key, lo - 1).unwrap_err();
                assert_eq!(below.key, *key, "{key} = {} should be refused", lo - 1);
            }
        }
    }

    #[test]
    fn page_size_2000_ok_2001_rejected() {
        assert!(with("projection.page_size", 2000).is_ok());
        let err = with("projection.page_size", 2001).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: projection.page_size = 2001 (allowed: 1..=2000)"
        );
    }

    #[test]
    fn bulk_bytes_edges() {
        assert!(with("elasticsearch.bulk_max_bytes", 65_536).is_ok());
        assert!(with("elasticsearch.bulk_max_bytes", 65_535).is_err());
        assert!(with("elasticsearch.bulk_max_bytes", 16_777_216).is_ok());
        assert!(with("elasticsearch.bulk_max_bytes", 16_777_217).is_err());
    }

    #[test]
    fn index_shapes_default_to_what_was_created_before_they_were_keys() {
        let c = Config::from_raw(base(), &no_env).unwrap();
        let one = IndexShape {
            shards: 1,
            replicas: 1,
            refresh_interval: None,
        };
        assert_eq!(
            c.elasticsearch.indices,
            IndexShapes {
                facts: one,
                execution_endpoints: one,
                assets: one
            }
        );
    }

    #[test]
    fn index_shapes_are_read_per_family() {
        let c = parse(
            "[elasticsearch]\nfacts_shards = 6\nfacts_replicas = 0\n\
             facts_refresh_interval_ms = 30000\nexecution_endpoints_shards = 12\n\
             execution_endpoints_replicas = 2\nassets_shards = 3\nassets_replicas = 1\n",
        )
        .unwrap();
        let i = c.elasticsearch.indices;
        assert_eq!(
            (i.facts.shards, i.facts.replicas, i.facts.refresh_interval),
            (6, 0, Some(Duration::from_secs(30)))
        );
        assert_eq!(
            (i.execution_endpoints.shards, i.execution_endpoints.replicas),
            (12, 2)
        );
        assert_eq!((i.assets.shards, i.assets.replicas), (3, 1));
        // Only the facts have a refresh interval of their own.
        assert_eq!(
            (
                i.execution_endpoints.refresh_interval,
                i.assets.refresh_interval
            ),
            (None, None)
        );
    }

    #[test]
    fn shards_1024_ok_1025_rejected_and_zero_shards_rejected() {
        for family in ["facts", "execution_endpoints", "assets"] {
            let key = format!("elasticsearch.{family}_shards");
            assert!(with(&key, 1024).is_ok(), "{key}");
            let err = with(&key, 1025).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("invalid configuration: {key} = 1025 (allowed: 1..=1024)")
            );
            assert_eq!(with(&key, 0).unwrap_err().key, key);
            let replicas = format!("elasticsearch.{family}_replicas");
            assert!(with(&replicas, 0).is_ok() && with(&replicas, 32).is_ok());
            assert_eq!(with(&replicas, 33).unwrap_err().key, replicas);
        }
    }

    #[test]
    fn facts_refresh_interval_0_is_the_clusters_default_and_an_hour_is_the_most() {
        let refresh = |ms| {
            with("elasticsearch.facts_refresh_interval_ms", ms)
                .map(|c| c.elasticsearch.indices.facts.refresh_interval)
        };
        assert_eq!(refresh(0), Ok(None));
        assert_eq!(refresh(1), Ok(Some(Duration::from_millis(1))));
        assert_eq!(refresh(3_600_000), Ok(Some(Duration::from_secs(3600))));
        assert_eq!(
            refresh(3_600_001).unwrap_err().allowed,
            "0..=3600000 ms".to_string()
        );
    }

    #[test]
    fn a_tombstone_outlives_the_oldest_observation_an_upload_may_carry() {
        let msg = parse("[retention]\ntombstone_days = 31\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("upload.max_observation_age_days (31)"),
            "{msg}"
        );
        assert!(parse("[retention]\ntombstone_days = 32\n").is_ok());
        assert!(parse("[retention]\ntombstone_days = 0\n").is_ok());
        let longer =
            "[upload]\nmax_observation_age_days = 400\n[retention]\ntombstone_days = 365\n";
        assert!(parse(longer).is_err());
    }

    #[test]
    fn heartbeat_must_fit_three_times_in_lease() {
        let err = parse("[projection]\nheartbeat_seconds = 50\nlease_seconds = 120\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("projection.heartbeat_seconds"), "{msg}");
        assert!(msg.contains("projection.lease_seconds"), "{msg}");
        assert!(parse("[projection]\nheartbeat_seconds = 40\nlease_seconds = 120\n").is_ok());
        assert!(parse("[projection]\nheartbeat_seconds = 41\nlease_seconds = 120\n").is_err());
    }

    #[test]
    fn the_old_projection_keys_under_elasticsearch_still_work_for_one_release() {
        for (old, new) in DEPRECATED_KEYS {
            let (_, old_field) = old.split_once('.').unwrap();
            let (_, new_field) = new.split_once('.').unwrap();
            let value = match *new {
                "elasticsearch.bulk_max_bytes" => 65_536,
                "projection.lease_seconds" => 3600,
                _ => 1,
            };
            let c = parse(&format!("[elasticsearch]\n{old_field} = {value}\n")).unwrap();
            assert_eq!(c.deprecated, vec![(*old, *new)], "{old}");
            let (new_section, _) = new.split_once('.').unwrap();
            let same = parse(&format!("[{new_section}]\n{new_field} = {value}\n")).unwrap();
            assert_eq!(
                format!("{:?} {}", c.projection, c.elasticsearch.bulk_max_bytes),
                format!(
                    "{:?} {}",
                    same.projection, same.elasticsearch.bulk_max_bytes
                ),
                "{old} means {new}"
            );
            // Both names at once is ambiguous.
            let both = if new_section == "elasticsearch" {
                format!("[elasticsearch]\n{old_field} = {value}\n{new_field} = {value}\n")
            } else {
                format!(
                    "[elasticsearch]\n{old_field} = {value}\n[projection]\n{new_field} = {value}\n"
                )
            };
            let both = parse(&both).unwrap_err();
            assert_eq!(both.key, *new);
        }
        // Old names are range-checked under the new name.
        let err = parse("[elasticsearch]\nprojection_page_size = 2001\n").unwrap_err();
        assert_eq!(err.key, "projection.page_size");
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(
            toml::from_str::<RawConfig>("[elasticsearch]\nprojection_page_sise = 10\n").is_err()
        );
        assert!(toml::from_str::<RawConfig>("[nonsense]\n").is_err());
    }

    #[test]
    fn elasticsearch_credentials_are_a_key_or_a_user_with_its_password_from_the_environment() {
        let with = |file: &str, vars: &[(&str, &str)]| {
            let mut raw: RawConfig = toml::from_str(file).unwrap();
            raw.database.url = Some("postgresql://u@127.0.0.1/db".into());
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Config::from_raw(raw, &|name| {
                vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            })
        };
        let kind = |c: Result<Config, ConfigError>| c.map(|c| c.elasticsearch.auth.kind());
        assert_eq!(kind(with("", &[])), Ok("none"));
        assert_eq!(
            kind(with("[elasticsearch]\napi_key = \"aWQ6a2V5\"\n", &[])),
            Ok("api_key")
        );
        assert_eq!(
            kind(with("", &[(ENV_ES_API_KEY, "aWQ6a2V5")])),
            Ok("api_key")
        );
        let basic = with(
            "[elasticsearch]\nusername = \"scanstore\"\n",
            &[(ENV_ES_PASSWORD, "pw")],
        )
        .unwrap();
        assert_eq!(
            basic.elasticsearch.auth.header().unwrap().expose(),
            "Basic c2NhbnN0b3JlOnB3"
        );
        assert!(
            !format!("{basic:?}").contains("pw\""),
            "the password printed"
        );
        for (file, vars, key) in [
            (
                "[elasticsearch]\nusername = \"scanstore\"\n",
                vec![],
                "elasticsearch.username",
            ),
            ("", vec![(ENV_ES_PASSWORD, "pw")], ENV_ES_PASSWORD),
            (
                "[elasticsearch]\nusername = \"s\"\napi_key = \"aWQ6a2V5\"\n",
                vec![(ENV_ES_PASSWORD, "pw")],
                "elasticsearch.username",
            ),
            (
                "[elasticsearch]\napi_key = \"not a key\"\n",
                vec![],
                "elasticsearch.api_key",
            ),
        ] {
            let err = with(file, &vars).unwrap_err();
            assert_eq!(err.key, key, "{file} {vars:?}");
            assert!(!err.to_string().contains("aWQ6a2V5") && !err.to_string().contains("pw "));
        }
    }

    #[test]
    fn a_ca_fingerprint_is_64_hex_digits_for_an_https_cluster_without_a_ca_file() {
        let pin = "8B:0B:".repeat(16);
        let pin = &pin[..pin.len() - 1];
        let ok = parse(&format!(
            "[elasticsearch]\nurl = \"https://es:9200\"\nca_fingerprint = \"{pin}\"\n"
        ))
        .unwrap();
        assert_eq!(
            ok.elasticsearch.ca_fingerprint.unwrap().to_string(),
            "8B0B".repeat(16)
        );
        for file in [
            "url = \"https://es:9200\"\nca_fingerprint = \"8B:0B\"\n".to_string(),
            format!("url = \"http://es:9200\"\nca_fingerprint = \"{pin}\"\n"),
            format!("url = \"https://es:9200\"\nca_fingerprint = \"{pin}\"\nca_file = \"/x\"\n"),
        ] {
            let err = parse(&format!("[elasticsearch]\n{file}")).unwrap_err();
            assert_eq!(err.key, "elasticsearch.ca_fingerprint", "{file}");
        }
    }

    #[test]
    fn server_tls_needs_a_certificate_and_its_private_key() {
        let dir = std::env::temp_dir().join(format!("scanstore-tls-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p.display().to_string()
        };
        let make = || {
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (cert, key) = make();
        let (_, other_key) = make();
        let cert = write("cert.pem", &cert, 0o644);
        let key_file = write("key.pem", &key, 0o600);
        let tls = |c: &str, k: &str| format!("[server]\ntls_cert = {c:?}\ntls_key = {k:?}\n");
        let ok = parse(&tls(&cert, &key_file)).unwrap();
        assert!(ok.server.tls.is_some());
        assert!(parse("").unwrap().server.tls.is_none());

        let open_key = write("open.pem", &key, 0o644);
        let wrong_key = write("wrong.pem", &other_key, 0o600);
        for (file, refused) in [
            (format!("[server]\ntls_cert = {cert:?}\n"), "server.tls_key"),
            (
                format!("[server]\ntls_key = {key_file:?}\n"),
                "server.tls_cert",
            ),
            (tls(&cert, &open_key), "server.tls_key"),
            (tls(&cert, &wrong_key), "server.tls_cert"),
            (tls(&key_file, &key_file), "server.tls_cert"),
            (
                tls(&cert, &dir.join("none").display().to_string()),
                "server.tls_cert",
            ),
        ] {
            let err = parse(&file).unwrap_err();
            assert_eq!(err.key, refused, "{file}");
            assert!(!err.to_string().contains("PRIVATE KEY"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_ca_file_must_hold_pem_certificates() {
        let p = std::env::temp_dir().join(format!("scanstore-ca-{}.pem", std::process::id()));
        for (text, missing) in [(Some("not a certificate\n"), false), (None, true)] {
            if let Some(t) = text {
                std::fs::write(&p, t).unwrap();
            } else {
                let _ = std::fs::remove_file(&p);
            }
            let file = format!("[elasticsearch]\nca_file = {:?}\n", p.display().to_string());
            let err = parse(&file).unwrap_err();
            assert_eq!(err.key, "elasticsearch.ca_file", "missing: {missing}");
        }
    }

    #[test]
    fn a_world_readable_file_holding_an_api_key_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("scanstore-key-{}.toml", std::process::id()));
        let text = "[database]\nurl = \"postgresql://u@127.0.0.1/db\"\n\
                    [elasticsearch]\napi_key = \"aWQ6a2V5\"\n";
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Config::load(&p).unwrap_err().to_string();
        assert!(
            err.contains("elasticsearch.api_key") && err.contains("0644"),
            "{err}"
        );
        assert!(!err.contains("aWQ6a2V5"), "{err}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let loaded = Config::load(&p);
        std::fs::remove_file(&p).unwrap();
        assert!(loaded.is_ok());
    }

    #[test]
    fn environment_overrides_urls() {
        let env = |name: &str| match name {
            ENV_DATABASE_URL => Some("postgresql://env@127.0.0.1/envdb".to_string()),
            ENV_ES_URL => Some("http://127.0.0.1:9999/".to_string()),
            _ => None,
        };
        let c = Config::from_raw(base(), &env).unwrap();
        assert_eq!(c.database.url, "postgresql://env@127.0.0.1/envdb");
        assert_eq!(c.elasticsearch.url, "http://127.0.0.1:9999");
    }

    #[test]
    fn missing_database_url_is_refused() {
        let err = Config::from_raw(RawConfig::default(), &no_env).unwrap_err();
        assert_eq!(err.key, "database.url");
    }

    #[test]
    fn bad_prefix_and_listen_refused() {
        assert_eq!(
            parse("[elasticsearch]\nindex_prefix = \"Scan\"\n")
                .unwrap_err()
                .key,
            "elasticsearch.index_prefix"
        );
        assert_eq!(
            parse("[elasticsearch]\nindex_prefix = \"_x\"\n")
                .unwrap_err()
                .key,
            "elasticsearch.index_prefix"
        );
        assert_eq!(
            parse("[server]\nlisten = \"localhost\"\n").unwrap_err().key,
            "server.listen"
        );
    }

    #[test]
    fn example_file_is_valid_and_complete() {
        let text = include_str!("../scripts/scanstore.example.toml");
        let raw: RawConfig = toml::from_str(text).unwrap();
        Config::from_raw(raw, &no_env).unwrap();
        for (key, ..) in RANGES {
            let field = key.split_once('.').map(|(_, f)| f).unwrap_or(key);
            assert!(text.contains(&format!("{field} =")), "example lacks {key}");
        }
    }

    fn file_with_mode(body: &str, mode: u32) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("scanstore-perm-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    const WITH_PASSWORD: &str = "[database]\nurl = \"postgresql://u:s3cret@127.0.0.1/db\"\n";
    const WITHOUT_PASSWORD: &str = "[database]\nurl = \"postgresql://u@127.0.0.1/db\"\n";

    #[test]
    fn password_in_a_world_readable_file_is_refused() {
        let p = file_with_mode(WITH_PASSWORD, 0o644);
        let e = Config::load(&p).unwrap_err();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(e.key, "config file");
        assert!(e.value.contains("mode 0644"), "{e}");
        assert!(e.allowed.contains("chmod o-r"), "{e}");
        assert!(
            !e.to_string().contains("s3cret"),
            "the message leaks the password: {e}"
        );
    }

    #[test]
    fn password_in_an_owner_or_group_readable_file_is_accepted() {
        for mode in [0o600, 0o640] {
            let p = file_with_mode(WITH_PASSWORD, mode);
            let r = Config::load(&p);
            std::fs::remove_file(&p).unwrap();
            assert!(r.is_ok(), "mode {mode:o}: {r:?}");
        }
    }

    #[test]
    fn world_readable_file_without_a_password_is_accepted() {
        let p = file_with_mode(WITHOUT_PASSWORD, 0o644);
        let r = Config::load(&p);
        std::fs::remove_file(&p).unwrap();
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn passwords_are_found_in_urls_and_key_value_strings() {
        assert!(url_has_password("postgresql://u:p@h/db"));
        assert!(url_has_password("host=h user=u password=p"));
        assert!(!url_has_password("postgresql://u@h/db"));
        assert!(!url_has_password("postgresql://u:@h/db"));
        assert!(!url_has_password("host=h user=u"));
    }
}
