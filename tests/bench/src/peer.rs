//! The peer: the official Python `elasticsearch` client's `helpers.streaming_bulk`
//! (`tests/python/peer_bulk.py`) loading the same current-asset operations, written to an
//! NDJSON file, into the same ES target with the same chunking (operations and bytes).

use std::io::Write;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;

use crate::ceiling::Requests;

#[derive(Debug, Clone, Deserialize)]
pub struct PeerResult {
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    pub client: String,
    #[serde(skip)]
    pub endpoints: usize,
}

impl PeerResult {
    pub fn endpoints_per_s(&self) -> f64 {
        self.endpoints as f64 / self.seconds.max(1e-9)
    }
}

/// Writes the bodies (already NDJSON) to `file` and runs the peer on them.
pub fn run(
    python: &str,
    script: &Path,
    es_url: &str,
    req: &Requests,
    chunk_ops: usize,
    chunk_bytes: usize,
    file: &Path,
) -> Result<PeerResult, String> {
    {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(file).map_err(|e| format!("{}: {e}", file.display()))?,
        );
        for b in &req.bodies {
            f.write_all(b).map_err(|e| e.to_string())?;
        }
        f.flush().map_err(|e| e.to_string())?;
    }
    let mut cmd = Command::new(python);
    if let Some(key) = crate::stack::es_api_key() {
        cmd.env("ES_API_KEY", key);
    }
    if let Some(ca) = crate::stack::ca_file() {
        cmd.env("ES_CA_FILE", ca);
    }
    let out = cmd
        .arg(script)
        .arg(es_url)
        .arg(file)
        .arg("--chunk-size")
        .arg(chunk_ops.to_string())
        .arg("--max-chunk-bytes")
        .arg(chunk_bytes.to_string())
        .output()
        .map_err(|e| format!("run {python} {}: {e}", script.display()))?;
    let _ = std::fs::remove_file(file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "peer exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    let last = stdout.lines().last().unwrap_or("");
    let mut r: PeerResult =
        serde_json::from_str(last).map_err(|e| format!("peer output {last:?}: {e}"))?;
    if r.errors > 0 || r.ops as usize != req.ops {
        return Err(format!(
            "peer wrote {} of {} operations with {} errors",
            r.ops, req.ops, r.errors
        ));
    }
    r.endpoints = req.endpoints;
    Ok(r)
}
