//! Rows with sensible defaults for tests (River's test factory): owners, scanners, tasks
//! with an execution, created directly in SQL. Tokens are returned in clear once, stored
//! as SHA-256 like the admin script does.

use postgres::Client;
use uuid::Uuid;

pub struct Principal {
    pub id: Uuid,
    pub token: String,
}

fn token(kind: &str) -> String {
    format!(
        "{kind}_{}{}",
        Uuid::new_v4().simple(),
        Uuid::new_v4().simple()
    )
}

pub fn owner(c: &mut Client, admin: bool) -> Principal {
    let token = token("own");
    let id: Uuid = c
        .query_one(
            "INSERT INTO owners (name, token_sha256, is_admin) VALUES ($1, sha256(convert_to($2, 'UTF8')), $3) RETURNING id",
            &[&format!("owner-{}", Uuid::new_v4().simple()), &token, &admin],
        )
        .unwrap()
        .get(0);
    Principal { id, token }
}

pub fn scanner(c: &mut Client, owner: Option<Uuid>) -> Principal {
    let token = token("scn");
    let id: Uuid = c
        .query_one(
            "INSERT INTO scanners (name, token_sha256, owner_id) VALUES ($1, sha256(convert_to($2, 'UTF8')), $3) RETURNING id",
            &[&format!("scanner-{}", Uuid::new_v4().simple()), &token, &owner],
        )
        .unwrap()
        .get(0);
    Principal { id, token }
}

pub struct TaskRun {
    pub task_id: Uuid,
    pub execution_id: Uuid,
}

/// A task of `kind` with one execution of `scanner` in `status` (`queued` or `running`).
pub fn task(c: &mut Client, owner: Uuid, scanner: Uuid, kind: &str, status: &str) -> TaskRun {
    let task_id: Uuid = c
        .query_one(
            "INSERT INTO tasks (owner_id, kind, status, executions_total) VALUES ($1, $2, 'running', 1) RETURNING id",
            &[&owner, &kind],
        )
        .unwrap()
        .get(0);
    // Every network the tests' observations use, and for DNS kinds the domains their
    // records name: observations outside a task's targets are refused.
    c.execute(
        "INSERT INTO task_targets (task_id, kind, value)
         SELECT $1::uuid, 'cidr', n FROM unnest(ARRAY['10.0.0.0/8', '192.0.2.0/24', '198.51.100.0/24',
                                                '203.0.113.0/24', '2001:db8::/32']) AS n
         UNION ALL
         SELECT $1::uuid, 'domain', d FROM unnest(ARRAY['example.com', 'example.org']) AS d
          WHERE $2::text <> 'port_scan'",
        &[&task_id, &kind],
    )
    .unwrap();
    let execution_id: Uuid = c
        .query_one(
            "INSERT INTO executions (task_id, scanner_id, status, started_at)
             VALUES ($1, $2, $3, CASE WHEN $3 = 'running' THEN now() END) RETURNING id",
            &[&task_id, &scanner, &status],
        )
        .unwrap()
        .get(0);
    TaskRun {
        task_id,
        execution_id,
    }
}

/// A task of `kind` in `status` whose targets are exactly `targets` (kind, value).
pub fn task_with_targets(
    c: &mut Client,
    owner: Uuid,
    scanner: Uuid,
    kind: &str,
    status: &str,
    targets: &[(&str, &str)],
) -> TaskRun {
    let run = task(c, owner, scanner, kind, status);
    c.execute(
        "DELETE FROM task_targets WHERE task_id = $1",
        &[&run.task_id],
    )
    .unwrap();
    for (k, v) in targets {
        c.execute(
            "INSERT INTO task_targets (task_id, kind, value) VALUES ($1, $2, $3)",
            &[&run.task_id, k, v],
        )
        .unwrap();
    }
    run
}
