//! `DbError`: every way the database layer fails, classified once from the SQLSTATE so
//! that callers and the HTTP mapping never look at raw codes.

use std::time::Duration;

use postgres::error::SqlState;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No pooled connection within `pool_timeout` (r2d2 fails `get` only on timeout);
    /// `cause` is why the last new connection could not be opened, if one failed (a
    /// refused TLS certificate, an unreachable server), as r2d2 reports it.
    #[error("no database connection available after {waited:?} (stage {stage}){}", cause.as_deref().map(|c| format!(": {c}")).unwrap_or_default())]
    PoolTimeout {
        stage: &'static str,
        waited: Duration,
        cause: Option<String>,
    },
    /// The server went away or refused us: connection closed, admin shutdown, I/O.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] postgres::Error),
    /// A concurrent transaction won: serialization failure, deadlock, lock timeout.
    /// Retrying the whole request is safe.
    #[error("database contention: {0}")]
    Contention(#[source] postgres::Error),
    /// A constraint protected the data (unique, foreign key, check, not null, or a trigger
    /// that refuses a change).
    #[error("database constraint: {0}")]
    Constraint(#[source] postgres::Error),
    /// Anything else: a bug or an unexpected schema.
    #[error("database error: {0}")]
    Query(#[source] postgres::Error),
    /// The database URL or its TLS settings cannot be used (never quotes the URL).
    #[error("database settings: {0}")]
    Config(String),
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        let Some(code) = e.code() else {
            // No SQLSTATE: the error came from the connection, not from a statement.
            return if e.is_closed() || e.as_db_error().is_none() {
                DbError::Unavailable(e)
            } else {
                DbError::Query(e)
            };
        };
        let code = code.clone();
        if code == SqlState::T_R_SERIALIZATION_FAILURE
            || code == SqlState::T_R_DEADLOCK_DETECTED
            || code == SqlState::LOCK_NOT_AVAILABLE
            || code == SqlState::QUERY_CANCELED
        {
            DbError::Contention(e)
        } else if code.code().starts_with("23") || code == SqlState::RAISE_EXCEPTION {
            DbError::Constraint(e)
        } else if code.code().starts_with("08")
            || code.code().starts_with("57P")
            || code == SqlState::TOO_MANY_CONNECTIONS
            || code == SqlState::CANNOT_CONNECT_NOW
        {
            DbError::Unavailable(e)
        } else {
            DbError::Query(e)
        }
    }
}

impl DbError {
    /// The SQLSTATE of a statement error, for callers that must tell constraint kinds apart.
    pub fn sql_state(&self) -> Option<&SqlState> {
        match self {
            DbError::PoolTimeout { .. } | DbError::Config(_) => None,
            DbError::Unavailable(e)
            | DbError::Contention(e)
            | DbError::Constraint(e)
            | DbError::Query(e) => e.code(),
        }
    }

    /// The constraint a `Constraint` error names, if any.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            DbError::Constraint(e) => e.as_db_error().and_then(|d| d.constraint()),
            _ => None,
        }
    }
}
