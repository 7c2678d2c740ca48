//! The running service: shared state (`App`) and the start-up sequence (migrate, install
//! indices, start the HTTP workers, the publishers, the sampler and the lease sweep) with
//! its orderly shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::db::{self, Db, DbError};
use crate::es::limit::Limiter;
use crate::es::retry::Backoff;
use crate::es::senders::{SendContext, Senders};
use crate::es::writer::{WritePolicy, Writer};
use crate::es::{setup, EsClient, EsError};
use crate::http::load::HttpLoad;
use crate::http::server::{self, HttpServer, Routes};
use crate::periodic::Periodic;
use crate::projection::wake::Wake;
use crate::projection::Workers;
use crate::telemetry::Line;

/// How often the backlog and slow SQL are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(30);

/// Timeout of the readiness probe's Elasticsearch ping.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Upload sender threads per bulk permit: a thread that has just had its answer checks it
/// (and reports) after giving its permit back, and with one thread per permit that permit
/// would stay idle meanwhile; the permits alone bound the requests in flight.
const UPLOAD_SENDERS_PER_PERMIT: usize = 2;

/// What every handler and worker shares.
pub struct App {
    pub config: Config,
    pub db: Db,
    pub es: EsClient,
    /// A short-timeout client for probes, so `/readyz` answers quickly when ES hangs.
    pub es_probe: EsClient,
    /// Bound on concurrent ES requests, shared by uploads and publication.
    pub limiter: Limiter,
    /// The threads uploads send their bulk requests on, one per concurrency permit (each
    /// publication worker has its own).
    pub upload_senders: Senders,
    /// What the HTTP server is doing now.
    pub http_load: HttpLoad,
    /// Rung when publication work may be due, so idle workers need not wait for their poll.
    pub projection_wake: Wake,
    /// Set once the index templates and indices are installed (at start, or lazily by
    /// the first write when ES was down at start).
    indices_ready: AtomicBool,
    /// The last installation failed because the cluster would not compile the merge script.
    script_rejected: AtomicBool,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("database: {0}")]
    Db(#[from] DbError),
    #[error("http listener: {0}")]
    Http(#[from] std::io::Error),
}

impl App {
    pub fn new(config: Config) -> Result<App, StartError> {
        let db = Db::new(&config.database)?;
        let es_cfg = &config.elasticsearch;
        let (auth, roots, pin) = (
            &es_cfg.auth,
            es_cfg.ca_roots.as_ref(),
            es_cfg.ca_fingerprint,
        );
        let es = EsClient::with_access(&es_cfg.url, es_cfg.request_timeout, auth, roots, pin);
        let es_probe = EsClient::with_access(&es_cfg.url, PROBE_TIMEOUT, auth, roots, pin);
        let limiter = Limiter::new(config.elasticsearch.bulk_max_concurrency);
        let upload_senders = Senders::start(
            "upload-send",
            UPLOAD_SENDERS_PER_PERMIT * config.elasticsearch.bulk_max_concurrency,
        );
        Ok(App {
            config,
            db,
            es,
            es_probe,
            limiter,
            upload_senders,
            http_load: HttpLoad::default(),
            projection_wake: Wake::default(),
            indices_ready: AtomicBool::new(false),
            script_rejected: AtomicBool::new(false),
        })
    }

    /// Installs templates and indices unless done already; idempotent, so a race between
    /// two threads only repeats harmless PUTs.
    /// A bulk writer of `bulk_batch_size` operations per request under the process-wide
    /// concurrency permits, retrying a transient failure `attempts` times.
    pub fn writer<'a>(&'a self, attempts: u32, backoff: Backoff, trace_id: &'a str) -> Writer<'a> {
        Writer {
            es: &self.es,
            limiter: &self.limiter,
            policy: self.write_policy(attempts, backoff),
            cancel: None,
            trace_id,
        }
    }

    /// As [`App::writer`], owned, for requests sent on sender threads.
    pub fn send_context(&self, attempts: u32, backoff: Backoff, trace_id: &str) -> SendContext {
        SendContext {
            es: self.es.clone(),
            limiter: self.limiter.clone(),
            policy: self.write_policy(attempts, backoff),
            cancel: None,
            trace_id: trace_id.to_owned(),
        }
    }

    fn write_policy(&self, attempts: u32, backoff: Backoff) -> WritePolicy {
        let cfg = &self.config.elasticsearch;
        WritePolicy {
            max_ops: cfg.bulk_batch_size,
            max_bytes: cfg.bulk_max_bytes,
            attempts,
            backoff,
        }
    }

    pub fn ensure_indices(&self) -> Result<(), EsError> {
        if self.indices_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let es = &self.config.elasticsearch;
        let installed = setup::install(&self.es, &es.index_prefix, &es.indices);
        self.script_rejected.store(
            installed.as_ref().is_err_and(EsError::is_script_rejected),
            Ordering::Release,
        );
        installed?;
        self.indices_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// The cluster refused to compile the merge script at the last installation.
    pub fn script_rejected(&self) -> bool {
        self.script_rejected.load(Ordering::Acquire)
    }
}

/// A started scanstore: stop it with [`Running::shutdown`].
pub struct Running {
    pub app: Arc<App>,
    http: HttpServer,
    workers: Workers,
    sampler: Periodic,
    sweeper: Periodic,
    retention: Option<Periodic>,
}

impl Running {
    pub fn addr(&self) -> std::net::SocketAddr {
        self.http.addr()
    }

    /// The base URL clients reach it at (`https://` when it serves TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.http.scheme(), self.http.addr())
    }

    /// Re-reads the TLS certificate (SIGHUP).
    pub fn reload_tls(&self) {
        self.http.reload_tls();
    }

    /// Stops taking requests, lets in-flight ones finish within the configured grace.
    /// Returns true when everything stopped in time.
    pub fn shutdown(self) -> bool {
        let grace = self.app.config.server.shutdown_grace;
        let http = self.http.shutdown(grace);
        self.workers.stop();
        self.sampler.stop();
        self.sweeper.stop();
        if let Some(daily) = self.retention {
            daily.stop();
        }
        http
    }
}

/// Environment variable through which systemd (`Type=notify`) passes its socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends one state datagram (`READY=1`, `STOPPING=1`, …) to the service manager when
/// `NOTIFY_SOCKET` is set (a path, or `@name` for the abstract namespace); returns whether
/// it was sent. Without the variable this does nothing, as `sd_notify(3)` does.
pub fn notify(state: &str) -> std::io::Result<bool> {
    use std::os::unix::net::UnixDatagram;
    let Some(target) = std::env::var_os(NOTIFY_SOCKET) else {
        return Ok(false);
    };
    let socket = UnixDatagram::unbound()?;
    let bytes = target.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        socket.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        socket.send_to(state.as_bytes(), &target)?;
    }
    Ok(true)
}

/// Migrates the schema and starts serving with the product's router.
pub fn start(config: Config) -> Result<Running, StartError> {
    start_with(config, Routes::PRODUCT)
}

/// As [`start`], with other routes (tests of the HTTP machinery itself).
pub fn start_with(config: Config, routes: Routes) -> Result<Running, StartError> {
    for (old, new) in &config.deprecated {
        Line::new("ConfigKeyDeprecated")
            .field("key", old)
            .field("use", new)
            .warn();
    }
    let app = Arc::new(App::new(config)?);
    let outcome = db::migrate::run(&app.db)?;
    Line::new("SchemaReady")
        .field("outcome", format!("{outcome:?}"))
        .info();
    // ES may be down at start: writes install the indices on first use instead.
    if let Err(e) = app.ensure_indices() {
        Line::new("ElasticsearchSetupDeferred")
            .field("error", e)
            .warn();
    }
    let http = server::start(app.clone(), routes)?;
    let workers = Workers::start(&app)?;
    let sampler = crate::telemetry::sampler::start_sampler(app.db.clone(), SAMPLE_EVERY)?;
    let sweeper = crate::upload::lease::start_sweeper(app.clone())?;
    let retention = crate::retention::start_daily(app.clone())?;
    Ok(Running {
        app,
        http,
        workers,
        sampler,
        sweeper,
        retention,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};

    // The only test that touches NOTIFY_SOCKET: both forms in one test, so no other test
    // of this process sees the variable change under it.
    #[test]
    fn notify_sends_to_a_path_or_an_abstract_socket_and_nothing_without_one() {
        std::env::remove_var(NOTIFY_SOCKET);
        assert!(!notify("READY=1").unwrap());

        let name = format!("scanstore-notify-test-{}", uuid::Uuid::new_v4());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_socket = UnixDatagram::bind_addr(&addr).unwrap();
        std::env::set_var(NOTIFY_SOCKET, format!("@{name}"));
        assert!(notify("READY=1").unwrap());
        let mut buf = [0u8; 64];
        let n = abstract_socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        let path = std::env::temp_dir().join(format!("{name}.sock"));
        let path_socket = UnixDatagram::bind(&path).unwrap();
        std::env::set_var(NOTIFY_SOCKET, &path);
        assert!(notify("STOPPING=1").unwrap());
        let n = path_socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        std::env::remove_var(NOTIFY_SOCKET);
        let _ = std::fs::remove_file(&path);
    }
}
