//! Reads scanstore's event log (`[<UTC time> INFO  scanstore::event] event=Name k=v …`)
//! back into numbers: pool wait and hold per stage, ES bulk sizes, heartbeat gaps,
//! publication pages and server-side upload durations.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};

/// One parsed event line.
pub struct Event {
    pub at: DateTime<Utc>,
    pub name: String,
    pub fields: BTreeMap<String, String>,
}

impl Event {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }

    pub fn num(&self, k: &str) -> Option<f64> {
        self.get(k)?.parse().ok()
    }
}

/// Splits `k=v k="quoted \" value"` into pairs.
fn fields(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let ks = i;
        while i < b.len() && b[i] != b'=' && b[i] != b' ' {
            i += 1;
        }
        if i >= b.len() || b[i] != b'=' {
            continue;
        }
        let key = s[ks..i].to_string();
        i += 1;
        let value = if i < b.len() && b[i] == b'"' {
            i += 1;
            let mut v = String::new();
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                v.push(b[i] as char);
                i += 1;
            }
            i += 1;
            v
        } else {
            let vs = i;
            while i < b.len() && b[i] != b' ' {
                i += 1;
            }
            s[vs..i].to_string()
        };
        out.insert(key, value);
    }
    out
}

pub fn parse_line(line: &str) -> Option<Event> {
    let rest = line.strip_prefix('[')?;
    let (ts, rest) = rest.split_once(' ')?;
    let at = DateTime::parse_from_rfc3339(ts).ok()?.with_timezone(&Utc);
    let (_, ev) = rest.split_once("] event=")?;
    let (name, tail) = ev.split_once(' ').unwrap_or((ev, ""));
    Some(Event {
        at,
        name: name.to_string(),
        fields: fields(tail),
    })
}

pub fn read(path: &Path) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse_line)
        .collect()
}

/// Numbers derived from one or more logs.
#[derive(Default, Clone)]
pub struct LogStats {
    /// stage → pool waits (ms).
    pub wait_ms: BTreeMap<String, Vec<f64>>,
    /// stage → connection holds (ms).
    pub hold_ms: BTreeMap<String, Vec<f64>>,
    pub upload_bulk_bytes: Vec<f64>,
    pub upload_bulk_ops: Vec<f64>,
    pub publish_bulk_bytes: Vec<f64>,
    pub publish_bulk_ops: Vec<f64>,
    /// Duration of each ES bulk request on the wire (ms), all callers.
    pub bulk_request_ms: Vec<f64>,
    /// How long each ES bulk request waited for a sender's concurrency permit
    /// (`bulk_max_concurrency`) before it went out (ms), all callers.
    pub bulk_queue_wait_ms: Vec<f64>,
    /// Gaps between a claim and its first renewal and between consecutive renewals (ms).
    pub heartbeat_gap_ms: Vec<f64>,
    pub renewals: usize,
    pub lease_lost: usize,
    pub pages: usize,
    pub page_endpoints: u64,
    pub pool_timeouts: usize,
    /// `ElasticsearchRequestWithConnectionHeld`: scanstore's own check, on every ES
    /// request, that the sending thread holds no pooled connection.
    pub es_requests_with_connection_held: usize,
    pub outbox_errors: usize,
    /// class → server-side `ScanResultUpload` durations (ms), status 200 only.
    pub server_upload_ms: BTreeMap<String, Vec<f64>>,
    /// stage → durations (ms) of each run of that stage inside final uploads, from the
    /// reservation on (`ScanWriteStageCompleted` with `class=final`).
    pub final_stage_ms: BTreeMap<String, Vec<f64>>,
}

impl LogStats {
    pub fn from_events(events: &[Event]) -> LogStats {
        let mut s = LogStats::default();
        // outbox id → time of the claim or the last renewal of the current claim.
        let mut last_beat: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        for e in events {
            match e.name.as_str() {
                "ScanWriteConnectionAcquired" => {
                    if let (Some(st), Some(w)) = (e.get("stage"), e.num("wait_ms")) {
                        s.wait_ms.entry(st.to_string()).or_default().push(w);
                    }
                }
                "ScanWriteConnectionReleased" => {
                    if let (Some(st), Some(h)) = (e.get("stage"), e.num("hold_ms")) {
                        s.hold_ms.entry(st.to_string()).or_default().push(h);
                    }
                }
                "ScanWriteConnectionTimedOut" => s.pool_timeouts += 1,
                "ElasticsearchRequestWithConnectionHeld" => s.es_requests_with_connection_held += 1,
                "ElasticsearchBulkCompleted" => {
                    let (bytes, ops) = (
                        e.num("request_bytes").unwrap_or(0.0),
                        e.num("operations").unwrap_or(0.0),
                    );
                    if e.get("trace_id").is_some_and(|t| t.starts_with("outbox-")) {
                        s.publish_bulk_bytes.push(bytes);
                        s.publish_bulk_ops.push(ops);
                    } else {
                        s.upload_bulk_bytes.push(bytes);
                        s.upload_bulk_ops.push(ops);
                    }
                    if let Some(ms) = e.num("request_ms") {
                        s.bulk_request_ms.push(ms);
                    }
                    if let Some(ms) = e.num("queue_wait_ms") {
                        s.bulk_queue_wait_ms.push(ms);
                    }
                }
                "ScanProjectionClaimed" => {
                    if let Some(id) = e.get("outbox_id") {
                        last_beat.insert(id.to_string(), e.at);
                    }
                }
                "ScanProjectionLeaseRenewed" => {
                    s.renewals += 1;
                    if let Some(id) = e.get("outbox_id") {
                        if let Some(prev) = last_beat.insert(id.to_string(), e.at) {
                            s.heartbeat_gap_ms
                                .push((e.at - prev).num_milliseconds() as f64);
                        }
                    }
                }
                "ScanProjectionLeaseLost" => s.lease_lost += 1,
                "ScanProjectionOutboxError" => s.outbox_errors += 1,
                "ScanProjectionPageCompleted" => {
                    s.pages += 1;
                    s.page_endpoints += e.num("endpoints").unwrap_or(0.0) as u64;
                }
                "ScanWriteStageCompleted" => {
                    if let (Some("final"), Some(st), Some(us)) =
                        (e.get("class"), e.get("stage"), e.num("duration_us"))
                    {
                        s.final_stage_ms
                            .entry(st.to_string())
                            .or_default()
                            .push(us / 1000.0);
                    }
                }
                "ScanResultUpload" => {
                    if let (Some(c), Some("200"), Some(us)) =
                        (e.get("class"), e.get("status"), e.num("duration_us"))
                    {
                        s.server_upload_ms
                            .entry(c.to_string())
                            .or_default()
                            .push(us / 1000.0);
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// Checkouts (outside start-up migration) held at least `ms`: the only ones that can
    /// have spanned an Elasticsearch request when every ES request takes at least `ms`.
    pub fn holds_at_least(&self, ms: f64) -> usize {
        self.hold_ms
            .iter()
            .filter(|(st, _)| st.as_str() != "migrate")
            .map(|(_, v)| v.iter().filter(|h| **h >= ms).count())
            .sum()
    }

    /// The same per stage: (stage, checkouts held at least `ms`).
    pub fn long_holds_by_stage(&self, ms: f64) -> Vec<(String, usize)> {
        self.hold_ms
            .iter()
            .filter(|(st, _)| st.as_str() != "migrate")
            .map(|(st, v)| (st.clone(), v.iter().filter(|h| **h >= ms).count()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Stages whose median hold is at least `ms`: a code path that held its connection
    /// across ES I/O would put (nearly) every checkout of its stage there, whatever the load.
    pub fn stages_with_median_hold_at_least(&self, ms: f64) -> Vec<String> {
        self.hold_ms
            .iter()
            .filter(|(st, v)| st.as_str() != "migrate" && pct(v, 50.0) >= ms)
            .map(|(st, _)| st.clone())
            .collect()
    }

    pub fn all_waits(&self) -> Vec<f64> {
        self.wait_ms.values().flatten().copied().collect()
    }

    pub fn max_hold_outside_migrate(&self) -> f64 {
        self.hold_ms
            .iter()
            .filter(|(st, _)| st.as_str() != "migrate")
            .flat_map(|(_, v)| v.iter().copied())
            .fold(0.0, f64::max)
    }
}

/// The p-th percentile (0–100) by nearest rank; 0 for no data.
pub fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_logger_format() {
        let e = parse_line(
            "[2026-11-29T10:00:00.123Z INFO  scanstore::event] event=ScanWriteConnectionReleased stage=confirm wait_ms=2.000 hold_ms=7.000",
        )
        .unwrap();
        assert_eq!(e.name, "ScanWriteConnectionReleased");
        assert_eq!(e.num("hold_ms"), Some(7.0));
        let q = parse_line(r#"[2026-11-29T10:00:00.123Z WARN  scanstore::event] event=X error="bad \"q\" x=1" n=3"#).unwrap();
        assert_eq!(q.get("error"), Some(r#"bad "q" x=1"#));
        assert_eq!(q.get("n"), Some("3"));
    }

    #[test]
    fn heartbeat_gaps_start_at_the_claim() {
        let lines = [
            "[2026-11-29T10:00:00.000Z INFO  scanstore::event] event=ScanProjectionClaimed outbox_id=1",
            "[2026-11-29T10:00:01.010Z INFO  scanstore::event] event=ScanProjectionLeaseRenewed outbox_id=1",
            "[2026-11-29T10:00:02.030Z INFO  scanstore::event] event=ScanProjectionLeaseRenewed outbox_id=1",
        ];
        let ev: Vec<Event> = lines.iter().filter_map(|l| parse_line(l)).collect();
        let s = LogStats::from_events(&ev);
        assert_eq!(s.heartbeat_gap_ms, vec![1010.0, 1020.0]);
    }

    #[test]
    fn requests_sent_holding_a_connection_are_counted() {
        let lines = [
            "[2026-11-29T10:00:00.000Z WARN  scanstore::event] event=ElasticsearchRequestWithConnectionHeld stage=confirm method=POST path=/_bulk",
            "[2026-11-29T10:00:00.001Z INFO  scanstore::event] event=ScanWriteConnectionReleased stage=confirm wait_ms=0.100 hold_ms=250.000",
        ];
        let ev: Vec<Event> = lines.iter().filter_map(|l| parse_line(l)).collect();
        let s = LogStats::from_events(&ev);
        assert_eq!(s.es_requests_with_connection_held, 1);
        assert_eq!(s.holds_at_least(200.0), 1);
    }

    #[test]
    fn final_stages_are_collected_for_finals_only() {
        let lines = [
            "[2026-11-29T10:00:00.000Z INFO  scanstore::event] event=ScanWriteStageCompleted is_final=true class=final stage=refresh_execution_index_chunk duration_us=120500 success=true",
            "[2026-11-29T10:00:00.001Z INFO  scanstore::event] event=ScanWriteStageCompleted is_final=false class=normal stage=refresh_execution_index_chunk duration_us=9000 success=true",
            "[2026-11-29T10:00:00.002Z INFO  scanstore::event] event=ScanWriteStageCompleted is_final=true class=final stage=commit duration_us=1000 success=true",
        ];
        let ev: Vec<Event> = lines.iter().filter_map(|l| parse_line(l)).collect();
        let s = LogStats::from_events(&ev);
        assert_eq!(
            s.final_stage_ms["refresh_execution_index_chunk"],
            vec![120.5]
        );
        assert_eq!(s.final_stage_ms["commit"], vec![1.0]);
        assert_eq!(s.final_stage_ms.len(), 2);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(pct(&v, 50.0), 50.0);
        assert_eq!(pct(&v, 99.0), 99.0);
        assert_eq!(pct(&v, 100.0), 100.0);
        assert_eq!(pct(&[], 99.0), 0.0);
    }
}
