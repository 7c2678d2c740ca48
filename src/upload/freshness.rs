//! Target freshness, run in transaction B of a final: the owner's existing search targets
//! covered by a succeeded task get its scan time — domains by primary key, single IPs and
//! CIDR targets inside a scanned address or network through partial GiST indexes on
//! `target_ip`. IPv4 and IPv6 never match each other (inet containment is per family);
//! domains are never cast to inet; an older scan never overwrites a newer time. A DNS
//! parent task waits until all its child tasks have succeeded, then becomes succeeded and
//! refreshes its own targets.

use uuid::Uuid;

use crate::db::{Queries, Tx};

// The scan time of a task: the start of its latest succeeded execution (the moment the
// targets were looked at), so an execution that started earlier but finished later does
// not move the time backwards. NULL while the task has no succeeded execution. One entry
// of executions_task_scan_time_idx read backwards, however many executions the task had.
pub const SCAN_TIME: &str = "
    SELECT e.id, coalesce(e.started_at, e.created_at)
      FROM executions e
     WHERE e.task_id = $1 AND e.status = 'succeeded'
     ORDER BY coalesce(e.started_at, e.created_at) DESC, e.id DESC
     LIMIT 1";

// Domains: exact keys, through the primary key (owner_id, kind, key).
const FRESHNESS_DOMAINS: &str = "
    UPDATE search_targets s
       SET last_scanned_at = $3, last_execution_id = $4
      FROM task_targets t
     WHERE t.task_id = $2 AND t.kind = 'domain'
       AND s.owner_id = $1 AND s.kind = 'domain' AND s.key = t.value
       AND (s.last_scanned_at IS NULL OR s.last_scanned_at < $3)";

// Single-IP (or CIDR) targets inside, or equal to, a scanned network or address: `<<=` on
// the partial GiST index search_targets_ip_gist (or search_targets_cidr_gist). The kind is
// a literal, as the planner matches a partial index's predicate only against constants.
// Only ip/cidr task targets are cast; domains never are.
macro_rules! freshness_covered {
    ($kind:literal) => {
        concat!(
            "UPDATE search_targets s
                SET last_scanned_at = $3, last_execution_id = $4
               FROM task_targets t
              WHERE t.task_id = $2 AND t.kind IN ('ip', 'cidr')
                AND s.owner_id = $1 AND s.kind = '",
            $kind,
            "' AND s.target_ip <<= t.value::inet
                AND (s.last_scanned_at IS NULL OR s.last_scanned_at < $3)"
        )
    };
}
pub const FRESHNESS_IP: &str = freshness_covered!("ip");
pub const FRESHNESS_CIDR: &str = freshness_covered!("cidr");

// A task is waiting while any of its executions or generated child tasks is unfinished:
// executions_task_unsettled_idx holds only the executions that have not succeeded, so a
// task with a long history costs its final no more than a new one.
pub const TASK_SETTLED: &str = "
    SELECT NOT EXISTS (SELECT 1 FROM executions WHERE task_id = $1 AND status <> 'succeeded')
       AND NOT EXISTS (SELECT 1 FROM tasks WHERE parent_task_id = $1 AND status <> 'succeeded')";

const TASK_SUCCEEDED: &str = "
    UPDATE tasks SET status = 'succeeded' WHERE id = $1 AND status <> 'succeeded'";

const PARENT: &str = "SELECT parent_task_id, owner_id FROM tasks WHERE id = $1";

/// Applies freshness for `task_id` (just succeeded, or with a new succeeded execution)
/// and walks up to its DNS parent. Returns the number of targets updated.
pub fn apply(tx: &mut Tx<'_>, owner_id: Uuid, task_id: Uuid) -> Result<u64, postgres::Error> {
    let mut updated = 0;
    let mut task = task_id;
    // Parents are at most a short chain (DNS → generated port scans); bound it anyway.
    for _ in 0..8 {
        let settled: bool = tx.query_one(TASK_SETTLED, &[&task])?.get(0);
        if !settled {
            break;
        }
        tx.execute(TASK_SUCCEEDED, &[&task])?;
        if let Some(row) = tx.query_opt(SCAN_TIME, &[&task])? {
            let (execution_id, at): (Uuid, chrono::DateTime<chrono::Utc>) =
                (row.get(0), row.get(1));
            updated += tx.execute(FRESHNESS_DOMAINS, &[&owner_id, &task, &at, &execution_id])?;
            for covered in [FRESHNESS_IP, FRESHNESS_CIDR] {
                updated += tx.execute(covered, &[&owner_id, &task, &at, &execution_id])?;
            }
        }
        let parent: Option<Uuid> = tx.query_one(PARENT, &[&task])?.get(0);
        match parent {
            Some(p) => task = p,
            None => break,
        }
    }
    Ok(updated)
}
