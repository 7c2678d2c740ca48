//! Telemetry: structured key=value log events, the Prometheus metrics they feed,
//! the periodic sampler (outbox backlog, slow SQL), and secret-safe value types.

pub mod context;
pub mod events;
pub mod metrics;
pub mod sampler;
pub mod secret;
pub mod span;

pub use events::Line;
pub use secret::Secret;

/// Installs the process logger: one line per event on stderr, `RUST_LOG` honoured
/// (default `info`), timestamps in UTC with milliseconds.
pub fn init_logger() {
    init_logger_at("info");
}

/// As [`init_logger`] with another default filter (`RUST_LOG` still wins).
pub fn init_logger_at(default: &str) {
    let env = env_logger::Env::default().default_filter_or(default);
    let _ = env_logger::Builder::from_env(env)
        .format_timestamp_millis()
        .try_init();
}
