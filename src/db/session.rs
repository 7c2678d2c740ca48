//! A pooled connection's session: its client and the statements prepared on it, each
//! once for the connection's life, so the hot statements (claims, checkpoints, tag
//! lookups) cost one round trip and no parse or plan instead of two round trips and both.

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;

/// One PostgreSQL connection as the pool keeps it.
pub struct Session {
    pub(super) client: Client,
    /// Keyed by SQL text; a handful per connection.
    prepared: HashMap<&'static str, Statement>,
}

impl Session {
    /// The statement for `sql`, prepared on first use.
    fn statement(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }

    /// Runs a cached statement. A statement that failed is prepared afresh next time: after
    /// a schema change under a running server, a cached plan can fail ("cached plan must not
    /// change result type") until it is replaced.
    fn run<T>(
        &mut self,
        sql: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let statement = self.statement(sql)?;
        let result = f(&mut self.client, &statement);
        if result.is_err() {
            self.prepared.remove(sql);
        }
        result
    }
}

/// Where the named SQL constants run: a pooled connection (statements cached) or a
/// transaction (prepared per call, as `postgres` does for text).
pub trait Queries {
    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error>;

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error>;

    fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error>;
}

impl Queries for Session {
    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        self.run(sql, |c, s| c.query(s, params))
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        self.run(sql, |c, s| c.query_opt(s, params))
    }

    fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        self.run(sql, |c, s| c.execute(s, params))
    }
}

impl Queries for Transaction<'_> {
    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        Transaction::query(self, sql, params)
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        Transaction::query_opt(self, sql, params)
    }

    fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        Transaction::execute(self, sql, params)
    }
}

/// r2d2's manager for [`Session`]s: `r2d2_postgres`'s connect and health checks, plus an
/// empty statement cache per connection.
pub struct Manager(pub PostgresConnectionManager<NoTls>);

impl r2d2::ManageConnection for Manager {
    type Connection = Session;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Session, postgres::Error> {
        Ok(Session {
            client: self.0.connect()?,
            prepared: HashMap::new(),
        })
    }

    fn is_valid(&self, s: &mut Session) -> Result<(), postgres::Error> {
        self.0.is_valid(&mut s.client)
    }

    fn has_broken(&self, s: &mut Session) -> bool {
        self.0.has_broken(&mut s.client)
    }
}
