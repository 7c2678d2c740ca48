//! Prometheus metrics: one process-wide registry, fed by the telemetry events (so every
//! logged measurement is also a metric, from one place) and by the sampler (backlog, slow
//! SQL). Rendered in the Prometheus text format by `GET /metrics`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UploadLabels {
    pub class: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub success: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    pub queryid: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub to: String,
    pub cause: String,
}

/// A retention run's outcome (`completed`, `failed`, `busy`), or what it removed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetentionLabels {
    pub what: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

pub struct Metrics {
    registry: Registry,
    pub upload_requests: Family<UploadLabels, Counter>,
    pub upload_seconds: Family<UploadLabels, Histogram>,
    pub stage_seconds: Family<StageLabels, Histogram>,
    pub pool_wait_seconds: Family<StageLabels, Histogram>,
    pub pool_hold_seconds: Family<StageLabels, Histogram>,
    pub pool_timeouts: Family<StageLabels, Counter>,
    pub es_requests_with_connection_held: Family<StageLabels, Counter>,
    pub bulk_seconds: Family<OutcomeLabels, Histogram>,
    pub bulk_bytes: Histogram,
    pub bulk_operations: Histogram,
    pub outbox_backlog: Gauge,
    pub outbox_oldest_age_seconds: FloatGauge,
    pub projection_endpoints_published: Counter,
    pub projection_lease_losses: Counter,
    pub execution_transitions: Family<TransitionLabels, Counter>,
    pub sql_mean_ms: Family<QueryLabels, FloatGauge>,
    pub sql_calls: Family<QueryLabels, Gauge>,
    pub slow_sql_available: Gauge,
    pub sampling_failures: Counter,
    pub http_connections_open: Gauge,
    pub http_body_reads: Gauge,
    pub http_large_body_reads: Gauge,
    pub http_workers_busy: Gauge,
    pub http_answer_writes: Gauge,
    pub projection_workers_idle: Gauge,
    pub retention_runs: Family<RetentionLabels, Counter>,
    pub retention_removed: Family<RetentionLabels, Counter>,
    pub retention_last_completed: Gauge,
}

fn seconds() -> Histogram {
    // 50 µs … ~100 s.
    Histogram::new(exponential_buckets(0.00005, 2.0, 22))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("scanstore");
        let m = Metrics {
            upload_requests: Family::default(),
            upload_seconds: Family::new_with_constructor(seconds),
            stage_seconds: Family::new_with_constructor(seconds),
            pool_wait_seconds: Family::new_with_constructor(seconds),
            pool_hold_seconds: Family::new_with_constructor(seconds),
            pool_timeouts: Family::default(),
            es_requests_with_connection_held: Family::default(),
            bulk_seconds: Family::new_with_constructor(seconds),
            bulk_bytes: Histogram::new(exponential_buckets(256.0, 2.0, 18)),
            bulk_operations: Histogram::new(exponential_buckets(1.0, 2.0, 15)),
            outbox_backlog: Gauge::default(),
            outbox_oldest_age_seconds: FloatGauge::default(),
            projection_endpoints_published: Counter::default(),
            projection_lease_losses: Counter::default(),
            execution_transitions: Family::default(),
            sql_mean_ms: Family::default(),
            sql_calls: Family::default(),
            slow_sql_available: Gauge::default(),
            sampling_failures: Counter::default(),
            http_connections_open: Gauge::default(),
            http_body_reads: Gauge::default(),
            http_large_body_reads: Gauge::default(),
            http_workers_busy: Gauge::default(),
            http_answer_writes: Gauge::default(),
            projection_workers_idle: Gauge::default(),
            retention_runs: Family::default(),
            retention_removed: Family::default(),
            retention_last_completed: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "upload_requests",
            "Batch uploads by class and HTTP status",
            m.upload_requests.clone(),
        );
        registry.register(
            "upload_seconds",
            "Batch upload latency by class and status",
            m.upload_seconds.clone(),
        );
        registry.register(
            "write_stage_seconds",
            "Write-path stage durations",
            m.stage_seconds.clone(),
        );
        registry.register(
            "pool_wait_seconds",
            "Time waiting for a pooled connection, by stage",
            m.pool_wait_seconds.clone(),
        );
        registry.register(
            "pool_hold_seconds",
            "Time a pooled connection was held, by stage",
            m.pool_hold_seconds.clone(),
        );
        registry.register(
            "pool_timeouts",
            "Checkouts that gave up after the pool timeout",
            m.pool_timeouts.clone(),
        );
        registry.register(
            "es_bulk_seconds",
            "Elasticsearch _bulk request latency",
            m.bulk_seconds.clone(),
        );
        registry.register(
            "es_bulk_request_bytes",
            "Elasticsearch _bulk request sizes",
            m.bulk_bytes.clone(),
        );
        registry.register(
            "es_bulk_operations",
            "Operations per Elasticsearch _bulk request",
            m.bulk_operations.clone(),
        );
        registry.register(
            "outbox_backlog",
            "Unprocessed asset publication rows (sampled)",
            m.outbox_backlog.clone(),
        );
        registry.register(
            "outbox_oldest_age_seconds",
            "Age of the oldest unprocessed publication row (sampled)",
            m.outbox_oldest_age_seconds.clone(),
        );
        registry.register(
            "projection_endpoints_published",
            "Endpoints published into the current asset view",
            m.projection_endpoints_published.clone(),
        );
        registry.register(
            "projection_lease_losses",
            "Publication leases lost",
            m.projection_lease_losses.clone(),
        );
        registry.register(
            "execution_transitions",
            "Execution state changes by new state and cause (claim, final, scanner, lease_expired)",
            m.execution_transitions.clone(),
        );
        registry.register(
            "sql_mean_ms",
            "Mean execution time of the slowest statements (pg_stat_statements)",
            m.sql_mean_ms.clone(),
        );
        registry.register(
            "sql_calls",
            "Calls of the slowest statements (pg_stat_statements)",
            m.sql_calls.clone(),
        );
        registry.register(
            "slow_sql_available",
            "1 when pg_stat_statements can be sampled, 0 when it is unavailable",
            m.slow_sql_available.clone(),
        );
        registry.register(
            "es_requests_with_connection_held",
            "Elasticsearch requests sent by a thread holding a pooled connection (must stay 0)",
            m.es_requests_with_connection_held.clone(),
        );
        registry.register(
            "sampling_failures",
            "Samplings that failed (pool or query failure)",
            m.sampling_failures.clone(),
        );
        registry.register(
            "http_connections_open",
            "HTTP connections accepted and not yet closed",
            m.http_connections_open.clone(),
        );
        registry.register(
            "http_body_reads",
            "Request bodies being read, or waiting for a permit to be read",
            m.http_body_reads.clone(),
        );
        registry.register(
            "http_large_body_reads",
            "Large request bodies being read (at most server.max_body_reads)",
            m.http_large_body_reads.clone(),
        );
        registry.register(
            "http_workers_busy",
            "HTTP workers handling or answering a request",
            m.http_workers_busy.clone(),
        );
        registry.register(
            "http_answer_writes",
            "Large answers being written off the workers",
            m.http_answer_writes.clone(),
        );
        registry.register(
            "projection_workers_idle",
            "Publication workers waiting for due work",
            m.projection_workers_idle.clone(),
        );
        registry.register(
            "retention_runs",
            "Retention runs of this instance by outcome (completed, failed, busy: another ran)",
            m.retention_runs.clone(),
        );
        registry.register(
            "retention_removed",
            "What retention runs of this instance removed or queued for removal, by kind",
            m.retention_removed.clone(),
        );
        registry.register(
            "retention_last_completed_timestamp_seconds",
            "When this instance last completed a retention run (Unix time; 0 = never)",
            m.retention_last_completed.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// A count of things in progress kept for their owner (one HTTP server, one set of
/// publication workers) and added into a process-wide gauge: the owner reads its own count
/// even where one process runs several (tests), and `/metrics` shows the sum.
#[derive(Clone)]
pub struct Occupancy {
    here: Arc<AtomicI64>,
    gauge: Gauge,
}

/// One unit of an [`Occupancy`], given back when dropped; it may move to another thread.
pub struct Occupied(Occupancy);

impl Occupancy {
    pub fn new(gauge: &Gauge) -> Occupancy {
        Occupancy {
            here: Arc::default(),
            gauge: gauge.clone(),
        }
    }

    pub fn get(&self) -> i64 {
        self.here.load(Ordering::Relaxed)
    }

    /// Replaces the count with one measured elsewhere.
    pub fn set(&self, n: i64) {
        let before = self.here.swap(n, Ordering::Relaxed);
        self.gauge.inc_by(n - before);
    }

    /// Counts one more until the returned guard is dropped.
    pub fn enter(&self) -> Occupied {
        self.here.fetch_add(1, Ordering::Relaxed);
        self.gauge.inc();
        Occupied(self.clone())
    }
}

impl Drop for Occupied {
    fn drop(&mut self) {
        self.0.here.fetch_sub(1, Ordering::Relaxed);
        self.0.gauge.dec();
    }
}

pub fn stage(stage: &str) -> StageLabels {
    StageLabels {
        stage: stage.to_string(),
    }
}

pub fn observe(h: &Histogram, d: Duration) {
    h.observe(d.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_registered_families() {
        let m = get();
        m.upload_requests
            .get_or_create(&UploadLabels {
                class: "final".into(),
                status: "200".into(),
            })
            .inc();
        observe(
            &m.pool_hold_seconds.get_or_create(&stage("reserve")),
            Duration::from_millis(3),
        );
        let text = m.render();
        assert!(
            text.contains("scanstore_upload_requests_total{class=\"final\",status=\"200\"}"),
            "{text}"
        );
        assert!(
            text.contains("scanstore_pool_hold_seconds_bucket{le="),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn an_occupancy_counts_for_its_owner_and_adds_into_the_gauge() {
        let gauge = Gauge::default();
        let (a, b) = (Occupancy::new(&gauge), Occupancy::new(&gauge));
        let held = a.enter();
        b.set(5);
        assert_eq!((a.get(), b.get(), gauge.get()), (1, 5, 6));
        b.set(2);
        drop(held);
        assert_eq!((a.get(), b.get(), gauge.get()), (0, 2, 2));
    }
}
