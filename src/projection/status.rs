//! `projection_status`: what a user is told about an execution's asset publication,
//! derived in one place from the execution and its outbox row.

use crate::task::TaskKind;
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectionStatus {
    /// Queued, not yet picked up (or released between ticks).
    Pending,
    /// A publisher holds a live lease on it.
    Running,
    /// The last attempt failed; it will be tried again after its backoff.
    Retrying,
    /// Published and refreshed: assets reflect this execution.
    Ready,
    /// The execution has not succeeded (yet): nothing to publish.
    NotStarted,
    /// DNS-only execution: it has no endpoints to publish.
    NotApplicable,
}

impl ProjectionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectionStatus::Pending => "pending",
            ProjectionStatus::Running => "running",
            ProjectionStatus::Retrying => "retrying",
            ProjectionStatus::Ready => "ready",
            ProjectionStatus::NotStarted => "not_started",
            ProjectionStatus::NotApplicable => "not_applicable",
        }
    }

    /// How far from settled, for a task's worst-of rule: higher is worse.
    pub fn severity(self) -> u8 {
        match self {
            ProjectionStatus::NotApplicable => 0,
            ProjectionStatus::Ready => 1,
            ProjectionStatus::NotStarted => 2,
            ProjectionStatus::Pending => 3,
            ProjectionStatus::Running => 4,
            ProjectionStatus::Retrying => 5,
        }
    }
}

/// The outbox row's fields that decide the status.
#[derive(Debug, Clone, Default)]
pub struct OutboxState {
    pub processed_at: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
}

/// The one derivation used by every API. A succeeded non-DNS execution without a row is
/// `pending`: an operator's requeue creates the row.
pub fn derive(
    execution_status: &str,
    task_kind: TaskKind,
    row: Option<&OutboxState>,
    now: DateTime<Utc>,
) -> ProjectionStatus {
    if !task_kind.publishes() {
        return ProjectionStatus::NotApplicable;
    }
    if execution_status != "succeeded" {
        return ProjectionStatus::NotStarted;
    }
    let Some(row) = row else {
        return ProjectionStatus::Pending;
    };
    if row.processed_at.is_some() {
        ProjectionStatus::Ready
    } else if row.lease_expires_at.is_some_and(|t| t > now) {
        ProjectionStatus::Running
    } else if row.last_error.is_some() {
        ProjectionStatus::Retrying
    } else {
        ProjectionStatus::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn every_status() {
        let now = Utc::now();
        let row = |processed: bool, leased: bool, error: bool| OutboxState {
            processed_at: processed.then_some(now),
            lease_expires_at: leased.then(|| now + Duration::seconds(30)),
            last_error: error.then(|| "x".into()),
        };
        assert_eq!(
            derive("succeeded", TaskKind::Dns, None, now),
            ProjectionStatus::NotApplicable
        );
        assert_eq!(
            derive("running", TaskKind::PortScan, None, now),
            ProjectionStatus::NotStarted
        );
        assert_eq!(
            derive("succeeded", TaskKind::PortScan, None, now),
            ProjectionStatus::Pending
        );
        assert_eq!(
            derive(
                "succeeded",
                TaskKind::Mixed,
                Some(&row(false, false, false)),
                now
            ),
            ProjectionStatus::Pending
        );
        assert_eq!(
            derive(
                "succeeded",
                TaskKind::Mixed,
                Some(&row(false, true, true)),
                now
            ),
            ProjectionStatus::Running
        );
        assert_eq!(
            derive(
                "succeeded",
                TaskKind::Mixed,
                Some(&row(false, false, true)),
                now
            ),
            ProjectionStatus::Retrying
        );
        assert_eq!(
            derive(
                "succeeded",
                TaskKind::Mixed,
                Some(&row(true, false, false)),
                now
            ),
            ProjectionStatus::Ready
        );
        let expired = OutboxState {
            lease_expires_at: Some(now - Duration::seconds(1)),
            ..Default::default()
        };
        assert_eq!(
            derive("succeeded", TaskKind::Mixed, Some(&expired), now),
            ProjectionStatus::Pending
        );
    }
}
