//! A pooled connection's session: its client and the statements prepared on it, each
//! once for the connection's life, so the named SQL constants (claims, checkpoints, tag
//! lookups, the write path's transactions) cost one round trip and no parse or plan
//! instead of two round trips and both.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use postgres::types::ToSql;
use postgres::{Client, GenericClient, Row, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;
use tokio_postgres_rustls::MakeRustlsConnect;

/// Statements by SQL text; a few dozen per connection.
pub type Prepared = HashMap<&'static str, Statement>;

/// One PostgreSQL connection as the pool keeps it.
pub struct Session {
    pub(super) client: Client,
    prepared: Prepared,
    /// When the session last came back to the pool from a checkout.
    returned: Option<Instant>,
}

impl Session {
    /// Records that a checkout has ended (see [`Manager::is_valid`]).
    pub(super) fn returned_now(&mut self) {
        self.returned = Some(Instant::now());
    }

    /// A transaction whose statements come from (and go into) this session's cache.
    pub(super) fn transaction(&mut self, read_only: bool) -> Result<Tx<'_>, postgres::Error> {
        let Session {
            client, prepared, ..
        } = self;
        let builder = client.build_transaction();
        let builder = if read_only {
            builder.read_only(true)
        } else {
            builder
        };
        Ok(Tx {
            tx: builder.start()?,
            prepared,
        })
    }
}

/// A transaction on a pooled session (see [`crate::db::Db::in_tx`]).
pub struct Tx<'a> {
    tx: Transaction<'a>,
    prepared: &'a mut Prepared,
}

impl Tx<'_> {
    pub fn commit(self) -> Result<(), postgres::Error> {
        self.tx.commit()
    }
}

/// Runs `sql` as the cached statement, preparing it on first use. A statement that failed
/// is prepared afresh next time: after a schema change under a running server a cached
/// plan can fail ("cached plan must not change result type") until it is replaced.
fn cached<C: GenericClient, T>(
    client: &mut C,
    prepared: &mut Prepared,
    sql: &'static str,
    run: impl FnOnce(&mut C, &Statement) -> Result<T, postgres::Error>,
) -> Result<T, postgres::Error> {
    let statement = match prepared.get(sql) {
        Some(s) => s.clone(),
        None => {
            let s = client.prepare(sql)?;
            prepared.insert(sql, s.clone());
            s
        }
    };
    let result = run(client, &statement);
    if result.is_err() {
        prepared.remove(sql);
    }
    result
}

pub type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

/// Where the named SQL constants run: a pooled connection or a transaction on one, through
/// the session's statement cache.
pub trait Queries {
    fn query(&mut self, sql: &'static str, params: Params) -> Result<Vec<Row>, postgres::Error>;

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: Params,
    ) -> Result<Option<Row>, postgres::Error>;

    fn query_one(&mut self, sql: &'static str, params: Params) -> Result<Row, postgres::Error>;

    fn execute(&mut self, sql: &'static str, params: Params) -> Result<u64, postgres::Error>;
}

/// A client with its session's statement cache: what [`Queries`] runs on.
pub trait Cached {
    type Client: GenericClient;
    fn parts(&mut self) -> (&mut Self::Client, &mut Prepared);
}

impl Cached for super::Conn {
    type Client = Client;
    fn parts(&mut self) -> (&mut Client, &mut Prepared) {
        let s: &mut Session = &mut self.inner;
        (&mut s.client, &mut s.prepared)
    }
}

impl<'a> Cached for Tx<'a> {
    type Client = Transaction<'a>;
    fn parts(&mut self) -> (&mut Transaction<'a>, &mut Prepared) {
        (&mut self.tx, &mut *self.prepared)
    }
}

impl<T: Cached> Queries for T {
    fn query(&mut self, sql: &'static str, p: Params) -> Result<Vec<Row>, postgres::Error> {
        let (c, prepared) = self.parts();
        cached(c, prepared, sql, |c, s| c.query(s, p))
    }

    fn query_opt(&mut self, sql: &'static str, p: Params) -> Result<Option<Row>, postgres::Error> {
        let (c, prepared) = self.parts();
        cached(c, prepared, sql, |c, s| c.query_opt(s, p))
    }

    fn query_one(&mut self, sql: &'static str, p: Params) -> Result<Row, postgres::Error> {
        let (c, prepared) = self.parts();
        cached(c, prepared, sql, |c, s| c.query_one(s, p))
    }

    fn execute(&mut self, sql: &'static str, p: Params) -> Result<u64, postgres::Error> {
        let (c, prepared) = self.parts();
        cached(c, prepared, sql, |c, s| c.execute(s, p))
    }
}

/// How recently a session must have been in use to be checked out without a check
/// (HikariCP's default `aliveBypassWindowMs`).
const CHECKED_BY_USE: Duration = Duration::from_millis(500);

/// r2d2's manager for [`Session`]s: `r2d2_postgres`'s connect and health checks, plus an
/// empty statement cache per connection.
pub struct Manager(pub PostgresConnectionManager<MakeRustlsConnect>);

/// Why a connection could not be opened or checked, with every cause in the chain
/// (`error performing TLS handshake: invalid peer certificate: UnknownIssuer`), which r2d2
/// keeps for the checkout that times out because of it.
#[derive(Debug)]
pub struct ConnectError(String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

impl From<postgres::Error> for ConnectError {
    fn from(e: postgres::Error) -> ConnectError {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            let part = cause.to_string();
            // tokio-postgres often repeats its own message as the first source.
            if !text.ends_with(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            source = cause.source();
        }
        ConnectError(text)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Session;
    type Error = ConnectError;

    fn connect(&self) -> Result<Session, ConnectError> {
        Ok(Session {
            client: self.0.connect()?,
            prepared: HashMap::new(),
            returned: None,
        })
    }

    /// r2d2 checks every checkout; `r2d2_postgres` checks with an empty query, one more
    /// round trip for each of a request's or a publication page's short transactions. A
    /// session back from use less than [`CHECKED_BY_USE`] ago is taken as alive, as
    /// HikariCP's `aliveBypassWindowMs` does: had its server gone since, its first
    /// statement fails, the pool drops the session on return (`has_broken`), and the request
    /// or claim fails as one that met the outage a moment later would.
    fn is_valid(&self, s: &mut Session) -> Result<(), ConnectError> {
        match s.returned {
            Some(t) if t.elapsed() < CHECKED_BY_USE => Ok(()),
            _ => Ok(self.0.is_valid(&mut s.client)?),
        }
    }

    fn has_broken(&self, s: &mut Session) -> bool {
        self.0.has_broken(&mut s.client)
    }
}
