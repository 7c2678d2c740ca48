//! The rows a run needs, created directly in SQL as the test factory does: one owner (with
//! its read token when a scenario reads through the API), one scanner per simulated scanner
//! (tokens stored as `sha256(convert_to(token,'UTF8'))`), and a running task execution per
//! planned upload.

use postgres::Client;
use uuid::Uuid;

pub struct ScannerRow {
    pub id: Uuid,
    pub token: String,
}

pub struct ExecutionRow {
    pub execution_id: Uuid,
}

fn token(kind: &str) -> String {
    format!(
        "{kind}_{}{}",
        Uuid::new_v4().simple(),
        Uuid::new_v4().simple()
    )
}

pub fn owner(c: &mut Client) -> Result<Uuid, String> {
    owner_with_token(c).map(|(id, _)| id)
}

/// An owner and the token it reads with (`Authorization: Bearer <token>`).
pub fn owner_with_token(c: &mut Client) -> Result<(Uuid, String), String> {
    with_token(
        c,
        "owner",
        "INSERT INTO owners (name, token_sha256, is_admin)
         VALUES ($1, sha256(convert_to($2, 'UTF8')), false) RETURNING id",
    )
}

pub fn scanner(c: &mut Client) -> Result<ScannerRow, String> {
    let (id, token) = with_token(
        c,
        "scanner",
        "INSERT INTO scanners (name, token_sha256, owner_id)
         VALUES ($1, sha256(convert_to($2, 'UTF8')), NULL) RETURNING id",
    )?;
    Ok(ScannerRow { id, token })
}

/// Inserts a `what` row by `sql` ($1 its name, $2 its token) with a fresh name and token;
/// returns its id and the token.
fn with_token(c: &mut Client, what: &str, sql: &str) -> Result<(Uuid, String), String> {
    let t = token(&what[..3]);
    let name = format!("bench-{what}-{}", Uuid::new_v4().simple());
    let id = c
        .query_one(sql, &[&name, &t])
        .map_err(|e| format!("insert {what}: {e}"))?
        .get(0);
    Ok((id, t))
}

/// A task of `kind` (`port_scan` or `mixed`) with one running execution of `scanner`.
pub fn execution(
    c: &mut Client,
    owner: Uuid,
    scanner: Uuid,
    kind: &str,
) -> Result<ExecutionRow, String> {
    let task_id: Uuid = c
        .query_one(
            "INSERT INTO tasks (owner_id, kind, status, executions_total)
             VALUES ($1, $2, 'running', 1) RETURNING id",
            &[&owner, &kind],
        )
        .map_err(|e| format!("insert task: {e}"))?
        .get(0);
    c.execute(
        "INSERT INTO task_targets (task_id, kind, value)
         SELECT $1::uuid, 'cidr', '10.0.0.0/8'
         UNION ALL SELECT $1::uuid, 'domain', 'bench.example' WHERE $2::text <> 'port_scan'",
        &[&task_id, &kind],
    )
    .map_err(|e| format!("insert target: {e}"))?;
    let execution_id = c
        .query_one(
            "INSERT INTO executions (task_id, scanner_id, status, started_at)
             VALUES ($1, $2, 'running', now()) RETURNING id",
            &[&task_id, &scanner],
        )
        .map_err(|e| format!("insert execution: {e}"))?
        .get(0);
    Ok(ExecutionRow { execution_id })
}
