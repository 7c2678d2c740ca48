//! Owner-side reads: tasks, executions, task results, assets and search.
//!
//! Every handler authenticates the owner and reads what it needs from PostgreSQL in one
//! short read-only transaction ([`with_owner`]); the connection is back in the pool before
//! any Elasticsearch request. An owner sees only its own rows and documents: another
//! owner's id answers 404 exactly like an unknown one. Every query is bounded (page sizes,
//! chunked endpoint fetches, a cap on counting passes), and every search answer is checked
//! for `timed_out` and failed shards ([`search`]) so a partial page is never served.
//!
//! Files: [`tasks`] (list, detail, the task-level projection status), [`executions`],
//! [`results`] (execution projection grouped by IP), [`assets`] (assets and search over the
//! current projection), [`params`] (query parameters and cursors), [`error`].

pub mod assets;
pub mod error;
pub mod executions;
pub mod params;
pub mod results;
pub mod tasks;

use serde_json::Value;

use crate::app::App;
use crate::auth::{self, Owner};
use crate::db::{Stage, Tx};
use crate::es::index::Indices;
use crate::http::request::Req;

pub use error::{Partial, ReadError};

/// Authenticates the bearer token as an owner and runs `f` in one short read-only
/// transaction on a connection that is returned before this function returns.
pub fn with_owner<T>(
    app: &App,
    req: &Req,
    f: impl FnOnce(&mut Tx<'_>, Owner) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    let token = req.bearer_token().ok_or(ReadError::Unauthorized)?;
    app.db.read_tx(Stage::Read, |tx| {
        let owner = auth::owner(tx, &token)?.ok_or(ReadError::Unauthorized)?;
        f(tx, owner)
    })
}

/// Upper bound on how long Elasticsearch may work on one read request before it must
/// answer (and say `timed_out`).
pub const SEARCH_TIMEOUT: &str = "20s";

/// A stored endpoint or asset document as the API shows it: every one of `fields`, `null`
/// when absent, `tags` an empty list and `state` `open` (how it is stored) when absent.
pub fn endpoint_json(src: &Value, fields: &[&str]) -> Value {
    let mut e = serde_json::Map::new();
    for f in fields {
        let v = match (src.get(*f), *f) {
            (None | Some(Value::Null), "tags") => Value::Array(Vec::new()),
            (None | Some(Value::Null), "state") => Value::from("open"),
            // Documents merged before status was stored: it follows from the state.
            (None | Some(Value::Null), "status") => {
                Value::from(if closed(src) { "closed" } else { "open" })
            }
            (None | Some(Value::Null), "closed_at") if closed(src) => {
                src.get("state_observed_at").cloned().unwrap_or(Value::Null)
            }
            (v, _) => v.cloned().unwrap_or(Value::Null),
        };
        e.insert(f.to_string(), v);
    }
    Value::Object(e)
}

/// Whether an asset document is closed: it has a state, and open is stored as none.
fn closed(src: &Value) -> bool {
    src.get("state").is_some_and(|s| !s.is_null())
}

/// `POST /<index>/_search` with `body`; an error status is an `EsError`, an incomplete
/// answer (`timed_out`, failed shards) is [`ReadError::Partial`].
pub fn search(app: &App, index: &str, body: &Value) -> Result<Value, ReadError> {
    app.ensure_indices()?;
    let response = app.es.search(&Indices::one(index), body)?;
    check_complete(&response)?;
    Ok(response)
}

/// Refuses an answer that does not cover every shard within the timeout.
pub fn check_complete(body: &Value) -> Result<(), ReadError> {
    if body["timed_out"].as_bool() == Some(true) {
        return Err(ReadError::Partial(Partial::TimedOut));
    }
    let failed = body["_shards"]["failed"].as_u64().unwrap_or(0);
    if failed > 0 {
        let total = body["_shards"]["total"].as_u64().unwrap_or(failed);
        return Err(ReadError::Partial(Partial::ShardsFailed { failed, total }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn complete_answers_pass() {
        let ok = json!({"timed_out": false, "_shards": {"total": 2, "successful": 2, "failed": 0}});
        assert!(check_complete(&ok).is_ok());
    }

    #[test]
    fn timed_out_or_failed_shards_are_refused() {
        let t = json!({"timed_out": true, "_shards": {"total": 1, "failed": 0}});
        assert!(matches!(
            check_complete(&t),
            Err(ReadError::Partial(Partial::TimedOut))
        ));
        let f = json!({"timed_out": false, "_shards": {"total": 3, "failed": 1}});
        assert!(matches!(
            check_complete(&f),
            Err(ReadError::Partial(Partial::ShardsFailed {
                failed: 1,
                total: 3
            }))
        ));
    }
}
