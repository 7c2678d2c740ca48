//! Captured log lines: the test process's logger writes every line to stderr (shown on
//! failure) and to an in-memory buffer that tests search.

use std::io::Write;
use std::sync::{Mutex, Once};

static LINES: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static INIT: Once = Once::new();

struct Tee;

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LINES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        if std::env::var_os("SCANSTORE_TEST_LOG").is_some() {
            std::io::stderr().write_all(buf)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing logger once per process (level info for scanstore).
pub fn capture() {
    INIT.call_once(|| {
        let _ = env_logger::Builder::new()
            .parse_filters("info,ureq=warn,r2d2=warn")
            .target(env_logger::Target::Pipe(Box::new(Tee)))
            .try_init();
    });
}

/// Every captured line containing all of `needles`.
pub fn lines_with(needles: &[&str]) -> Vec<String> {
    let all = LINES.lock().unwrap_or_else(|p| p.into_inner());
    String::from_utf8_lossy(&all)
        .lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}

/// Everything captured so far.
pub fn all() -> String {
    String::from_utf8_lossy(&LINES.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}

/// The stage `foundation::pool` holds on purpose while sending an ES request; nothing else
/// does Elasticsearch I/O near it.
pub const HELD_STAGE: &str = "stage=health";

/// Every report of an ES request sent while a connection was held, except the deliberate
/// one of `foundation::pool`: the suite's own check that no code path does it.
pub fn connection_held_across_es_requests() -> Vec<String> {
    lines_with(&["event=ElasticsearchRequestWithConnectionHeld"])
        .into_iter()
        .filter(|l| !l.contains(HELD_STAGE))
        .collect()
}
