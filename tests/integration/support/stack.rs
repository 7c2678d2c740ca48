//! A whole scanstore stack for one test: a fresh database, an ES target (the emulator, or
//! a real cluster when `STORAGE_TEST_ES_URL` is set and the test needs no faults), an
//! in-process server, and an owner, a scanner and a running execution.

use postgres::Client;
use uuid::Uuid;

use scanstore::config::Config;

use super::db::{self, TestDb};
use super::emulator::{self, Emulator, Es, Target};
use super::factory::{self, Principal, TaskRun};
use super::server::{config, TestServer};

pub struct Stack {
    pub server: TestServer,
    pub target: Target,
    pub owner: Principal,
    pub scanner: Principal,
    pub run: TaskRun,
    pub db: TestDb,
}

impl Stack {
    /// A stack on the ES target of the suite (emulator or real cluster).
    pub fn new(kind: &str) -> Stack {
        Stack::build(emulator::target(), kind, |_| {})
    }

    /// A stack on a fresh emulator, or `None` (skip, reason printed) on a real cluster.
    pub fn with_faults(test: &str, kind: &str, adjust: impl FnOnce(&mut Config)) -> Option<Stack> {
        emulator::emulator_for_faults(test).map(|e| Stack::build(Target::Emulator(e), kind, adjust))
    }

    pub fn build(target: Target, kind: &str, adjust: impl FnOnce(&mut Config)) -> Stack {
        let db = db::fresh();
        let mut c = db.connect();
        let owner = factory::owner(&mut c, false);
        let scanner = factory::scanner(&mut c, None);
        let run = factory::task(&mut c, owner.id, scanner.id, kind, "running");
        let mut cfg = config(&db.url, target.es().url());
        adjust(&mut cfg);
        let server = TestServer::start(cfg);
        Stack {
            server,
            target,
            owner,
            scanner,
            run,
            db,
        }
    }

    pub fn emulator(&self) -> &Emulator {
        match &self.target {
            Target::Emulator(e) => e,
            Target::Real(_) => panic!("this test needs the emulator"),
        }
    }

    pub fn es(&self) -> Es {
        self.target.es()
    }

    pub fn sql(&self) -> Client {
        self.db.connect()
    }

    pub fn base(&self) -> &str {
        &self.server.base
    }

    pub fn prefix(&self) -> String {
        self.server.app().config.elasticsearch.index_prefix.clone()
    }

    pub fn execution(&self) -> Uuid {
        self.run.execution_id
    }

    /// Facts of this execution visible after a refresh, over every fact index.
    pub fn fact_count(&self) -> u64 {
        self.es().refreshed_count(
            &format!("{}-facts-*", self.prefix()),
            serde_json::json!({"term": {"execution_id": self.execution().to_string()}}),
        )
    }

    /// Execution-projection documents of this execution.
    pub fn endpoint_docs(&self) -> u64 {
        self.es().refreshed_count(
            &format!("{}-execution-endpoints", self.prefix()),
            serde_json::json!({"term": {"execution_id": self.execution().to_string()}}),
        )
    }

    /// (status, confirmed?) of every receipt of the execution, by stream and index.
    pub fn receipts(&self) -> Vec<(String, i32, String)> {
        self.sql()
            .query(
                "SELECT stream, batch_index, status FROM scan_upload_receipts WHERE execution_id = $1
                 ORDER BY stream, batch_index",
                &[&self.execution()],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    pub fn execution_status(&self) -> String {
        self.sql()
            .query_one(
                "SELECT status FROM executions WHERE id = $1",
                &[&self.execution()],
            )
            .unwrap()
            .get(0)
    }

    /// The stack's execution's `observation_count` (set by its final).
    pub fn observation_count(&self) -> i64 {
        self.sql()
            .query_one(
                "SELECT observation_count FROM executions WHERE id = $1",
                &[&self.execution()],
            )
            .unwrap()
            .get(0)
    }
}
