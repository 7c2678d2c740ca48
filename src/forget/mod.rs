//! Deleting a task (`scanstore-admin task delete`, outbox kind `forget`): the run that
//! takes a deleted task's observations out of the asset views and then removes everything
//! the task produced, so that the views equal what a rebuild from the remaining sources
//! gives and nothing of the task comes back.
//!
//! ```text
//!   task delete   tasks.deleted_at = now() + outbox row 'forget' (one transaction);
//!                 reads, claims and rebuilds skip the task from then on
//!   publishing    pages of the endpoints the task touched (its execution-projection
//!                 documents, and the asset documents its close runs closed), each page's
//!                 documents rebuilt from what remains (recompute.rs), checkpointed
//!   refreshing    refresh; the task's projection documents and facts deleted, then its
//!                 receipts, executions (with streams, DNS answers, outbox rows) and
//!                 targets in short transactions (purge.rs); the completion deletes the task
//! ```
//!
//! Every step is idempotent and the task row stays until the completion, so a run killed
//! anywhere resumes from its checkpoint (or redoes the purge) and converges.

mod purge;
mod recompute;
mod sources;

pub use recompute::keys;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::{Db, DbError, Queries, Stage};
use crate::es::alias::AssetIndices;
use crate::es::index;

// A deleted task's run context: the task's executions that have a close run (their
// `closed` observations are taken back too). No row when the task is gone (a run already
// done) or not deleted (a row made by hand): the run then does nothing. By primary key,
// executions_task_idx and the outbox's closing_execution_id key.
const FORGET_CONTEXT: &str = "
    SELECT coalesce(array_agg(o.closing_execution_id::text ORDER BY o.closing_execution_id)
                    FILTER (WHERE o.id IS NOT NULL), '{}')
      FROM tasks t
      LEFT JOIN executions e ON e.task_id = t.id
      LEFT JOIN scan_projection_outbox o ON o.closing_execution_id = e.id
     WHERE t.id = $1 AND t.deleted_at IS NOT NULL
     GROUP BY t.id";

/// The deletion run of one task.
pub struct ForgetRun {
    pub task_id: Uuid,
    /// The task's owner: the only owner whose view holds the task's observations.
    pub owner_id: Uuid,
    /// The task's executions with a close run, whose `closed` observations may decide
    /// documents the task never observed.
    closers: Vec<String>,
}

impl ForgetRun {
    /// Reads the run's task; `None` when there is nothing to do (see `FORGET_CONTEXT`).
    pub fn load(db: &Db, task_id: Uuid, owner_id: Uuid) -> Result<Option<ForgetRun>, DbError> {
        let mut conn = db.checkout(Stage::Context)?;
        Ok(conn
            .query_opt(FORGET_CONTEXT, &[&task_id])?
            .map(|r| ForgetRun {
                task_id,
                owner_id,
                closers: r.get(0),
            }))
    }

    /// Where the run's pages come from: the execution projection, and, when the task
    /// closed something, both asset views (a comma-separated index list).
    pub fn source(&self, prefix: &str, targets: &AssetIndices) -> String {
        let projection = index::execution_endpoints(prefix);
        match self.closers.is_empty() {
            true => projection,
            false => [projection.as_str(), &targets.global, &targets.user].join(","),
        }
    }

    /// The documents that name the endpoints to recompute: the task's execution-projection
    /// documents and the asset documents one of its close runs decided. Pages sort on
    /// (ip, port, transport) and resume strictly after the last one, so an endpoint that
    /// several of them name is taken once per page and never again after it.
    pub fn filter(&self) -> Value {
        let mut should = vec![json!({ "term": { "task_id": self.task_id.to_string() } })];
        if !self.closers.is_empty() {
            should.push(json!({ "terms": { "closed_by": self.closers } }));
        }
        json!([{ "bool": { "should": should, "minimum_should_match": 1 } }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(closers: &[&str]) -> ForgetRun {
        ForgetRun {
            task_id: Uuid::from_u128(1),
            owner_id: Uuid::from_u128(2),
            closers: closers.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn a_task_that_closed_nothing_pages_its_projection_only() {
        let targets = AssetIndices::version("s", 3);
        assert_eq!(run(&[]).source("s", &targets), "s-execution-endpoints");
        let filter = run(&[]).filter().to_string();
        assert!(!filter.contains("closed_by"), "{filter}");
        assert_eq!(
            run(&["e1"]).source("s", &targets),
            "s-execution-endpoints,s-assets-global-v3,s-assets-user-v3"
        );
        let filter = run(&["e1"]).filter().to_string();
        assert!(
            filter.contains(r#"{"terms":{"closed_by":["e1"]}}"#),
            "{filter}"
        );
        assert!(filter.contains(&Uuid::from_u128(1).to_string()), "{filter}");
    }
}
