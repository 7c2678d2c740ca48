//! `EsError`: how an Elasticsearch request failed, and whether retrying can help
//! (429/5xx/timeouts are transient; mapping rejections and other 4xx permanent).

#[derive(Debug, Clone, thiserror::Error)]
pub enum EsError {
    /// Connect failure, timeout, reset, truncated body: nothing answered.
    #[error("elasticsearch transport error: {0}")]
    Transport(String),
    /// The cluster answered with an error status.
    #[error("elasticsearch answered {status} {error_type}: {reason}")]
    Status {
        status: u16,
        error_type: String,
        reason: String,
    },
    /// The cluster answered 2xx but the body does not say what it must (unparseable JSON,
    /// a bulk item count/order/id/index that does not match the request).
    #[error("elasticsearch response rejected: {0}")]
    BadResponse(String),
    /// Some bulk items failed; `status`/`error_type` are those of the deciding item (a
    /// permanent failure if there is one).
    #[error("{failed} of {total} bulk items failed, e.g. {status} {error_type}: {reason}")]
    ItemsFailed {
        failed: usize,
        total: usize,
        status: u16,
        error_type: String,
        reason: String,
    },
    /// A request that must never be sent: over the byte limit, a request line over budget.
    #[error("elasticsearch request refused locally: {0}")]
    Refused(String),
}

/// Whether a retry of the same request may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Transient,
    Permanent,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
        }
    }
}

impl EsError {
    pub fn class(&self) -> ErrorClass {
        match self {
            EsError::Transport(_) | EsError::BadResponse(_) => ErrorClass::Transient,
            EsError::Status { status, .. } => status_class(*status),
            EsError::ItemsFailed {
                status, error_type, ..
            } => item_class(*status, error_type),
            EsError::Refused(_) => ErrorClass::Permanent,
        }
    }
}

impl EsError {
    /// The cluster refused to compile a stored script (`PUT _scripts/{id}/{context}`).
    pub fn is_script_rejected(&self) -> bool {
        matches!(
            self,
            EsError::Status {
                status: 400,
                error_type,
                ..
            } if error_type == "script_exception"
        )
    }

    /// The cluster refused scanstore's credentials (401) or their rights (403): a
    /// configuration problem, permanent until an operator fixes it.
    pub fn is_unauthorized(&self) -> bool {
        matches!(
            self,
            EsError::Status {
                status: 401 | 403,
                ..
            }
        )
    }
}

/// A failed bulk item's class: as its status says, except a version conflict that outlasted
/// the item's `retry_on_conflict` — another writer merged the same document at that moment
/// (two publishers on one global asset), and merging again later succeeds.
pub fn item_class(status: u16, error_type: &str) -> ErrorClass {
    if status == 409 && error_type == "version_conflict_engine_exception" {
        ErrorClass::Transient
    } else {
        status_class(status)
    }
}

/// 429 and 5xx are load or outage; any other 4xx is a request the cluster will refuse
/// again. (A 408 from a proxy is a timeout, so transient too.)
pub fn status_class(status: u16) -> ErrorClass {
    if status == 429 || status == 408 || status >= 500 {
        ErrorClass::Transient
    } else {
        ErrorClass::Permanent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_spec() {
        assert_eq!(status_class(429), ErrorClass::Transient);
        assert_eq!(status_class(500), ErrorClass::Transient);
        assert_eq!(status_class(503), ErrorClass::Transient);
        assert_eq!(status_class(400), ErrorClass::Permanent);
        assert_eq!(status_class(404), ErrorClass::Permanent);
        assert_eq!(status_class(409), ErrorClass::Permanent);
        assert_eq!(
            item_class(409, "version_conflict_engine_exception"),
            ErrorClass::Transient
        );
        assert_eq!(item_class(409, "other_exception"), ErrorClass::Permanent);
        assert_eq!(
            item_class(400, "mapper_parsing_exception"),
            ErrorClass::Permanent
        );
        assert_eq!(
            EsError::Transport("reset".into()).class(),
            ErrorClass::Transient
        );
        assert_eq!(
            EsError::Refused("too big".into()).class(),
            ErrorClass::Permanent
        );
    }
}
