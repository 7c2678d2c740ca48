//! The kinds of task (`tasks.kind`): what a scanner is asked to do, and so what its
//! observations may hold and what follows an execution (children, publication).

use std::error::Error;
use std::fmt;
use std::str::FromStr;

use postgres::types::{FromSql, Type};

/// `tasks.kind`, whose CHECK constraint allows exactly these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Endpoints (and DNS records as facts only).
    PortScan,
    /// DNS answers; nothing is published, a child port scan follows.
    Dns,
    /// Both.
    Mixed,
}

impl TaskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::PortScan => "port_scan",
            TaskKind::Dns => "dns",
            TaskKind::Mixed => "mixed",
        }
    }

    /// Whether a finished execution's endpoints go to the asset view.
    pub fn publishes(self) -> bool {
        self != TaskKind::Dns
    }

    /// Whether its DNS answers bring addresses into scope and make child port scans (a
    /// port scan's DNS records are facts only).
    pub fn records_answers(self) -> bool {
        self != TaskKind::PortScan
    }
}

impl FromStr for TaskKind {
    type Err = String;

    fn from_str(s: &str) -> Result<TaskKind, String> {
        match s {
            "port_scan" => Ok(TaskKind::PortScan),
            "dns" => Ok(TaskKind::Dns),
            "mixed" => Ok(TaskKind::Mixed),
            other => Err(format!("unknown task kind {other:?}")),
        }
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'a> FromSql<'a> for TaskKind {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<TaskKind, Box<dyn Error + Sync + Send>> {
        Ok(<&str as FromSql>::from_sql(ty, raw)?.parse()?)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_written() {
        for kind in [TaskKind::PortScan, TaskKind::Dns, TaskKind::Mixed] {
            assert_eq!(kind.as_str().parse::<TaskKind>(), Ok(kind));
        }
        assert!("scan".parse::<TaskKind>().is_err());
        assert!(!TaskKind::Dns.publishes() && TaskKind::Mixed.publishes());
        assert!(!TaskKind::PortScan.records_answers() && TaskKind::Dns.records_answers());
    }
}
