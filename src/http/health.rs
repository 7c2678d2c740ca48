//! Probes: `/healthz` says the process serves requests; `/readyz` says it can do its job
//! (PostgreSQL reachable with the current schema, Elasticsearch reachable, accepting
//! scanstore's credentials and its merge script); `/metrics`
//! exposes the Prometheus metrics, with the backlog sampled fresh for the scrape.

use serde_json::json;

use super::request::Reply;
use crate::app::App;
use crate::db::{migrate, Stage};
use crate::telemetry;
use crate::telemetry::Line;

pub fn healthz() -> Reply {
    Reply::ok(json!({ "status": "ok" }))
}

pub fn readyz(app: &App) -> Reply {
    // Anyone may ask: the answer names component states only, the reasons go to the log.
    let postgres = match app.db.checkout(Stage::Health) {
        Ok(mut conn) => match migrate::is_current(&mut conn) {
            Ok(true) => "ok",
            Ok(false) => not_ready("postgres", "schema_not_current", &"run `scanstore migrate`"),
            Err(e) => not_ready("postgres", "unavailable", &e),
        },
        Err(e) => not_ready("postgres", "unavailable", &e),
    };
    let elasticsearch = match app.es_probe.ping() {
        Ok(_) if app.script_rejected() => not_ready(
            "elasticsearch",
            "script_rejected",
            &"the cluster would not compile the asset merge script",
        ),
        Ok(_) => "ok",
        Err(e) if e.is_unauthorized() => not_ready("elasticsearch", "unauthorized", &e),
        Err(e) => not_ready("elasticsearch", "unavailable", &e),
    };
    let ready = postgres == "ok" && elasticsearch == "ok";
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "postgres": postgres,
        "elasticsearch": elasticsearch,
    });
    Reply::json(if ready { 200 } else { 503 }, &body)
}

/// Logs why a component is not ready and returns its state for the answer.
fn not_ready(component: &str, state: &'static str, why: &dyn std::fmt::Display) -> &'static str {
    Line::new("ReadinessFailed")
        .field("component", component)
        .field("state", state)
        .field("error", why)
        .warn();
    state
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
