//! Reliability and security: crashes of the real binary at chosen points of the
//! write path and the publisher, ES faults and PostgreSQL outages under concurrent load,
//! pool exhaustion, slow clients, a hostile-input corpus, and who may see and write what.
//! Every test checks the data afterwards — receipts, streams, counts, ES documents —
//! against what was sent. Longer runs of the same scenarios: `scripts/chaos.sh`.

mod child;
mod crash;
mod front_door;
mod hostile;
mod lifecycle;
mod load;
mod security;
mod tls;

use std::time::Duration;

use postgres::Client;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::support::emulator::Es;
use crate::support::scan::{self, dns, endpoints, Batch};

use crate::support::scan::t0;
use crate::support::wait_for;

/// Fixed identities, so that two databases can hold the same owner/task/execution and a
/// faulty run can be compared with a fault-free one document for document.
#[derive(Clone)]
pub struct Ids {
    pub owner: Uuid,
    pub owner_token: String,
    pub scanner: Uuid,
    pub scanner_token: String,
    pub task: Uuid,
    pub execution: Uuid,
    pub upload: Uuid,
}

impl Ids {
    pub fn new() -> Ids {
        Ids {
            owner: Uuid::new_v4(),
            owner_token: format!("own_{}", Uuid::new_v4().simple()),
            scanner: Uuid::new_v4(),
            scanner_token: format!("scn_{}", Uuid::new_v4().simple()),
            task: Uuid::new_v4(),
            execution: Uuid::new_v4(),
            upload: Uuid::new_v4(),
        }
    }

    /// Inserts the owner, scanner, task and running execution with these ids.
    pub fn seed(&self, c: &mut Client) {
        c.execute(
            "INSERT INTO owners (id, name, token_sha256) VALUES ($1, $2, sha256(convert_to($3, 'UTF8')))",
            &[&self.owner, &format!("o-{}", self.owner.simple()), &self.owner_token],
        )
        .unwrap();
        c.execute(
            "INSERT INTO scanners (id, name, token_sha256) VALUES ($1, $2, sha256(convert_to($3, 'UTF8')))",
            &[&self.scanner, &format!("s-{}", self.scanner.simple()), &self.scanner_token],
        )
        .unwrap();
        c.execute(
            "INSERT INTO tasks (id, owner_id, kind, status, executions_total) VALUES ($1, $2, 'mixed', 'running', 1)",
            &[&self.task, &self.owner],
        )
        .unwrap();
        c.execute(
            "INSERT INTO task_targets (task_id, kind, value) VALUES ($1, 'cidr', '10.0.0.0/8'), ($1, 'domain', 'example.com')",
            &[&self.task],
        )
        .unwrap();
        c.execute(
            "INSERT INTO executions (id, task_id, scanner_id, status, started_at) VALUES ($1, $2, $3, 'running', now())",
            &[&self.execution, &self.task, &self.scanner],
        )
        .unwrap();
    }

    /// The upload of this (mixed) execution: three batches over three weeks and a final
    /// with observations that overlap batch 0 later in time (so the asset merge matters);
    /// batch 1 and the final carry A answers (one repeated), which become the child task.
    pub fn plan(&self) -> Vec<Batch> {
        let up = self.upload;
        let earlier = scan::t0_plus(-21 * 24 - 2);
        let later = scan::t0_plus(2);
        let mut batch1 = endpoints(20, 20, &earlier);
        batch1.push(dns("a.example.com", "192.0.2.7", &earlier));
        batch1.push(dns("b.example.com", "192.0.2.8", &earlier));
        let mut last = endpoints(0, 5, &later);
        for o in &mut last {
            o["product"] = json!("caddy");
        }
        last.push(dns("c.example.com", "192.0.2.7", &later));
        vec![
            Batch::main(up, 0, endpoints(0, 20, t0())),
            Batch::main(up, 1, batch1),
            Batch::main(up, 2, endpoints(40, 10, t0())),
            Batch::final_(up, 3, last),
        ]
    }
}

/// Fields that are defined to change between two runs of the same upload: wall-clock
/// times, serial ids, and the publisher's bookkeeping (attempts and errors of a crashed
/// claim, lease tokens).
const VOLATILE: &[&str] = &[
    "id",
    "attempts",
    "last_error",
    "last_error_class",
    "claim_token",
    "lease_expires_at",
    "available_at",
];

fn strip(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.retain(|k, _| !k.ends_with("_at") && !VOLATILE.contains(&k.as_str()));
    }
    v
}

/// Rows as JSON without volatile fields; the index prefix (in `storage_references`) is
/// written as `P` so that two runs on two prefixes compare.
fn rows(c: &mut Client, sql: &str, exec: Uuid, prefix: &str) -> Vec<Value> {
    c.query(sql, &[&exec])
        .unwrap()
        .iter()
        .map(|r| {
            let text = r.get::<_, &str>(0).replace(prefix, "P");
            strip(serde_json::from_str(&text).unwrap())
        })
        .collect()
}

/// The durable state of one execution: PostgreSQL rows and every ES document under the
/// prefix (index name without the prefix, id, source).
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    pub pg: Vec<(String, Vec<Value>)>,
    pub es: Vec<(String, String, String)>,
}

pub fn snapshot(c: &mut Client, es: &Es, prefix: &str, exec: Uuid) -> Snapshot {
    let q = |t: &str, order: &str| {
        format!("SELECT row_to_json(x)::text FROM {t} x WHERE execution_id = $1 ORDER BY {order}")
    };
    let pg = vec![
        (
            "receipts".to_string(),
            rows(c, &q("scan_upload_receipts", "stream, batch_index"), exec, prefix),
        ),
        (
            "streams".into(),
            rows(c, &q("scan_upload_stream", "upload_id"), exec, prefix),
        ),
        (
            "execution".into(),
            rows(
                c,
                "SELECT row_to_json(x)::text FROM executions x WHERE id = $1",
                exec, prefix,
            ),
        ),
        (
            "task".into(),
            rows(
                c,
                "SELECT row_to_json(x)::text FROM tasks x WHERE id = (SELECT task_id FROM executions WHERE id = $1)",
                exec, prefix,
            ),
        ),
        (
            "outbox".into(),
            rows(c, &q("scan_projection_outbox", "kind"), exec, prefix),
        ),
        (
            "analysis".into(),
            rows(c, &q("scan_analysis_queue", "execution_id"), exec, prefix),
        ),
        (
            "child targets".into(),
            rows(
                c,
                "SELECT row_to_json(x)::text FROM (
                     SELECT t.kind, t.status, t.parent_task_id, tt.kind AS target_kind, tt.value
                       FROM tasks t JOIN task_targets tt ON tt.task_id = t.id
                      WHERE t.source_execution_id = $1 ORDER BY tt.value) x",
                exec,
                prefix,
            ),
        ),
        (
            "dns answers left".into(),
            rows(c, &q("execution_dns_answers", "address"), exec, prefix),
        ),
    ];
    es.post(&format!("/{prefix}-*/_refresh"), &json!({}));
    let (status, body) = es.post(
        &format!("/{prefix}-*/_search"),
        &json!({"size": 10000, "query": {"match_all": {}}}),
    );
    assert_eq!(status, 200, "{body}");
    let mut docs: Vec<(String, String, String)> = body["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["_index"].as_str().unwrap().replacen(prefix, "P", 1),
                h["_id"].as_str().unwrap().to_string(),
                serde_json::to_string(&h["_source"]).unwrap(),
            )
        })
        .collect();
    docs.sort();
    Snapshot { pg, es: docs }
}

/// Polls until the execution's outbox row is processed.
pub fn wait_published(c: &mut Client, exec: Uuid, limit: Duration) {
    wait_for(&format!("execution {exec} to be published"), limit, || {
        c.query_one(
            "SELECT coalesce(bool_and(processed_at IS NOT NULL), false) FROM scan_projection_outbox WHERE execution_id = $1",
            &[&exec],
        )
        .unwrap()
        .get(0)
    });
}

/// A prefix unique to this run.
pub fn prefix(tag: &str) -> String {
    crate::support::emulator::es_prefix(tag)
}
