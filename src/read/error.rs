//! `ReadError`: how an owner-side read fails. Mapped to statuses only in `http/error.rs`.

use crate::db::DbError;
use crate::es::EsError;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A parameter the caller must fix (bad cursor, bad CIDR, size out of range, …).
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    /// Unknown id, or an id of another owner: both look the same to the caller.
    #[error("not found")]
    NotFound,
    /// The search backend answered, but not completely (`timed_out`, failed shards): the
    /// page would be silently partial, so it is not served.
    #[error("{0}")]
    Partial(Partial),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Es(#[from] EsError),
}

/// Why a search answer was incomplete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Partial {
    #[error("search timed out before every shard answered")]
    TimedOut,
    #[error("{failed} of {total} search shards failed")]
    ShardsFailed { failed: u64, total: u64 },
}

impl ReadError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> ReadError {
        ReadError::Invalid {
            code,
            message: message.into(),
        }
    }
}

impl From<postgres::Error> for ReadError {
    fn from(e: postgres::Error) -> Self {
        ReadError::Db(DbError::from(e))
    }
}
