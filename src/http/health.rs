//! Probes: `/healthz` says the process serves requests; `/readyz` says it can do its job
//! (PostgreSQL reachable with the current schema, Elasticsearch reachable); `/metrics`
//! exposes the Prometheus metrics, with the backlog sampled fresh for the scrape.

use serde_json::json;

use super::request::Reply;
use crate::app::App;
use crate::db::{migrate, Stage};
use crate::telemetry;

pub fn healthz() -> Reply {
    Reply::ok(json!({ "status": "ok" }))
}

pub fn readyz(app: &App) -> Reply {
    let postgres = match app.db.checkout(Stage::Health) {
        Ok(mut conn) => match migrate::is_current(&mut conn) {
            Ok(true) => Ok("ok"),
            Ok(false) => Err("schema not current: run `scanstore migrate`".to_string()),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    let elasticsearch = app.es_probe.ping();
    let ready = postgres.is_ok() && elasticsearch.is_ok();
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "postgres": match &postgres { Ok(s) => s.to_string(), Err(e) => e.clone() },
        "elasticsearch": match &elasticsearch {
            Ok(version) => format!("ok {version}"),
            Err(e) => e.to_string(),
        },
    });
    Reply::json(if ready { 200 } else { 503 }, &body)
}

/// `GET /metrics`: the Prometheus text format. The outbox backlog is sampled for the
/// scrape (one bounded query); slow SQL comes from the periodic sampler.
pub fn metrics(app: &App) -> Reply {
    let m = telemetry::metrics::get();
    match telemetry::sampler::backlog_now(&app.db) {
        Ok((rows, age)) => {
            m.outbox_backlog.set(rows);
            m.outbox_oldest_age_seconds.set(age);
        }
        Err(_) => {
            m.sampling_failures.inc();
        }
    }
    Reply {
        status: 200,
        content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
        headers: Vec::new(),
        body: m.render().into_bytes(),
    }
}
