//! The client's one error type, and the exit status each kind of failure ends with.

use std::fmt;

#[derive(Debug)]
pub enum Error {
    /// The command line, environment or a file named by them.
    Usage(String),
    /// Scanner output that cannot be read.
    Input(String),
    /// The local journal of an import.
    Journal(String),
    /// The server refused a request for good (4xx): retrying the same request cannot help.
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// The server could not be reached or kept failing for longer than the retry budget.
    Unavailable(String),
    /// The execution is no longer this scanner's to work on (its lease lapsed, it was
    /// failed or finished elsewhere).
    Lost(String),
    /// The scanner program failed.
    Scanner(String),
}

impl Error {
    /// 2 for what the user must fix before a re-run, 1 for what a re-run may get past.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) | Error::Input(_) | Error::Journal(_) | Error::Refused { .. } => 2,
            Error::Unavailable(_) | Error::Lost(_) | Error::Scanner(_) => 1,
        }
    }

    /// The server's error code, when it refused.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Refused { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) => write!(f, "{m}"),
            Error::Input(m) => write!(f, "input: {m}"),
            Error::Journal(m) => write!(f, "journal: {m}"),
            Error::Refused {
                status,
                code,
                message,
            } => write!(
                f,
                "the server refused the request ({status} {code}): {message}"
            ),
            Error::Unavailable(m) => write!(f, "the server is unavailable: {m}"),
            Error::Lost(m) => write!(f, "{m}"),
            Error::Scanner(m) => write!(f, "scanner: {m}"),
        }
    }
}

impl std::error::Error for Error {}
