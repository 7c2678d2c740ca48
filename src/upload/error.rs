//! `UploadError`: the write path's failures in domain terms. The HTTP status of each is
//! decided in `http::error`, nowhere else.

use crate::db::DbError;
use crate::es::EsError;

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// Bad input: malformed JSON, a bad field, checksum mismatch, too many observations.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("missing or invalid scanner token")]
    Unauthorized,
    /// Well-formed, but the batch cannot be taken: observations out of the execution's
    /// scope or time window. `details` lists their positions.
    #[error("{message}")]
    Unprocessable {
        code: &'static str,
        message: String,
        details: serde_json::Value,
    },
    /// The scanner may not write this execution.
    #[error("{0}")]
    Forbidden(String),
    #[error("execution not found")]
    NotFound,
    /// Identity conflict, upload closed, final incomplete, execution not running.
    /// `details` is machine-readable context for the client (which batches are missing).
    #[error("{message}")]
    Conflict {
        code: &'static str,
        message: String,
        details: Option<serde_json::Value>,
    },
    /// Elasticsearch answered a count that cannot be true (negative, or a sum overflows).
    #[error("implausible count from the search backend: {0}")]
    BadCount(String),
    /// A single index name does not fit the request-line budget (configuration problem).
    #[error("{0}")]
    IndexNameTooLong(String),
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Es(#[from] EsError),
}

impl UploadError {
    /// Machine-readable context for the client, sent as `error.details`.
    pub fn details(&self) -> Option<&serde_json::Value> {
        match self {
            UploadError::Unprocessable { details, .. } => Some(details),
            UploadError::Conflict { details, .. } => details.as_ref(),
            _ => None,
        }
    }
}

impl From<postgres::Error> for UploadError {
    fn from(e: postgres::Error) -> Self {
        UploadError::Db(DbError::from(e))
    }
}

pub fn conflict(code: &'static str, message: impl Into<String>) -> UploadError {
    UploadError::Conflict {
        code,
        message: message.into(),
        details: None,
    }
}
