//! The ceiling and the peer's input: the very documents scanstore would write, built by
//! scanstore's own code (`upload::facts::build` for uploads, `projection::page::operations`
//! for publication) under a separate index prefix, split by the same operation and byte
//! limits, and sent as raw `_bulk` requests straight to the same ES target — no
//! PostgreSQL, no queue, no per-item verification beyond the `errors` flag — then one
//! `_refresh` of what they wrote, since scanstore's work too ends with its documents visible.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

use scanstore::es::alias::AssetIndices;
use scanstore::es::bulk::{self, BulkOp};
use scanstore::es::{index, setup};
use scanstore::projection::close::CloseRun;
use scanstore::projection::page;
use scanstore::tags::Tags;
use scanstore::upload::{batch, facts};

use crate::scanner::Job;
use crate::Opts;

/// Pre-built request bodies and what they carry.
#[derive(Default)]
pub struct Requests {
    pub bodies: Vec<Vec<u8>>,
    pub ops: usize,
    pub endpoints: usize,
    /// Every index written, for clean-up.
    pub indices: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Sent {
    pub ops: usize,
    pub endpoints: usize,
    pub requests: usize,
    pub bytes: usize,
    /// The time of each run: one, or the two of [`Sent::bracket`].
    pub runs: Vec<f64>,
    /// When each run began and ended (seconds since the Unix epoch), for its CPU.
    pub spans: Vec<(f64, f64)>,
    /// Seconds the emulator's store lock was held during the runs, in all (`None`: a real
    /// cluster).
    pub lock_held: Option<f64>,
}

impl Sent {
    /// The same requests sent before and after what they are compared with: counted as one
    /// run of their mean time, so the machine's drift between the runs cancels out.
    pub fn bracket(before: Sent, after: Sent) -> Sent {
        Sent {
            runs: [before.runs.as_slice(), after.runs.as_slice()].concat(),
            spans: [before.spans.as_slice(), after.spans.as_slice()].concat(),
            lock_held: before.lock_held.zip(after.lock_held).map(|(a, b)| a + b),
            ..before
        }
    }

    /// The share of the runs' wall time the emulator's store lock was held.
    pub fn lock_share(&self) -> Option<f64> {
        self.lock_held
            .map(|held| held / self.runs.iter().sum::<f64>().max(1e-9))
    }

    /// The mean time of the runs.
    pub fn seconds(&self) -> f64 {
        self.runs.iter().sum::<f64>() / self.runs.len().max(1) as f64
    }

    pub fn endpoints_per_s(&self) -> f64 {
        self.endpoints as f64 / self.seconds().max(1e-9)
    }
}

fn push(
    out: &mut Requests,
    ops: &[BulkOp],
    max_ops: usize,
    max_bytes: usize,
) -> Result<(), String> {
    for r in bulk::split(ops, max_ops, max_bytes).map_err(|e| e.to_string())? {
        out.bodies.push(bulk::body(&ops[r]));
    }
    out.ops += ops.len();
    for op in ops {
        if !out.indices.iter().any(|i| **i == *op.index) {
            out.indices.push(op.index.to_string());
        }
    }
    Ok(())
}

/// The upload's writes: per batch, its facts then its execution-projection documents.
pub fn upload_requests(
    prefix: &str,
    owner: Uuid,
    jobs: &[Job],
    max_ops: usize,
    max_bytes: usize,
) -> Result<Requests, String> {
    let mut out = Requests::default();
    for job in jobs {
        let owning = facts::Owning {
            execution_id: job.execution_id,
            task_id: Uuid::new_v4(),
            owner_id: owner,
            scanner_id: Uuid::new_v4(),
        };
        for b in job.plan.batches(Uuid::new_v4()) {
            let parsed =
                batch::parse(&b.body, 100_000, every_time()).map_err(|e| format!("{e:?}"))?;
            let ops = facts::build(prefix, &owning, &parsed, &Tags::default());
            push(&mut out, &ops.facts, max_ops, max_bytes)?;
            push(&mut out, &ops.endpoints, max_ops, max_bytes)?;
            out.endpoints += b.endpoints;
        }
    }
    Ok(out)
}

/// The execution-projection documents of a job as a publication page reads them
/// (id, source as JSON text).
fn page_docs(job: &Job) -> Vec<(String, String)> {
    (job.plan.first..job.plan.first + job.plan.endpoints)
        .map(|i| {
            let mut e = crate::workload::endpoint(i);
            let obj = e.as_object_mut().expect("object");
            obj.remove("type");
            obj.insert("execution_id".into(), json!(job.execution_id.to_string()));
            (i.to_string(), e.to_string())
        })
        .collect()
}

/// A page's documents as a publication page reads them, from (id, source as JSON text).
fn docs_of(chunk: &[(String, String)]) -> Result<Vec<page::Doc<'_>>, String> {
    chunk
        .iter()
        .map(|(id, text)| {
            Ok(page::Doc {
                id: id.into(),
                source: page::Source::parse(text)?,
            })
        })
        .collect::<Result<Vec<_>, serde_json::Error>>()
        .map_err(|e| e.to_string())
}

/// Publication's writes: per page of `page_size` endpoints, the two merge updates each.
pub fn publication_requests(
    prefix: &str,
    owner: Uuid,
    jobs: &[Job],
    page_size: usize,
    max_ops: usize,
    max_bytes: usize,
) -> Result<Requests, String> {
    let mut out = Requests::default();
    let targets = AssetIndices::version(prefix, setup::ASSETS_VERSION);
    for job in jobs {
        for chunk in page_docs(job).chunks(page_size.max(1)) {
            let docs = docs_of(chunk)?;
            let ops = page::execution_operations(&targets, owner, &docs, &Tags::default(), &[]);
            push(&mut out, &ops, max_ops, max_bytes)?;
            out.endpoints += chunk.len();
        }
    }
    Ok(out)
}

/// A close run's writes over the first `size` endpoints (all of them unseen by the closing
/// execution): per page, the closed observation merged into both views, as
/// `projection::close` builds it (its lookup of what the execution saw is scanstore's own).
pub fn close_requests(
    prefix: &str,
    owner: Uuid,
    size: usize,
    run: &CloseRun,
    (page_size, max_ops, max_bytes): (usize, usize, usize),
) -> Result<Requests, String> {
    let mut out = Requests::default();
    let targets = AssetIndices::version(prefix, setup::ASSETS_VERSION);
    let texts: Vec<(String, String)> = (0..size)
        .map(|i| {
            let e = crate::workload::endpoint(i);
            let ip = e["ip"].as_str().unwrap_or_default();
            let port = e["port"].as_u64().unwrap_or_default() as u16;
            let id = index::user_asset_id(owner, &index::global_asset_id(ip, "tcp", port));
            let source = json!({"ip": ip, "port": port, "transport": "tcp"}).to_string();
            (id, source)
        })
        .collect();
    for chunk in texts.chunks(page_size.max(1)) {
        let docs = docs_of(chunk)?;
        let all: Vec<&page::Doc> = docs.iter().collect();
        let ops = run
            .closes(&targets, owner, &all)
            .map_err(|e| e.to_string())?;
        push(&mut out, &ops, max_ops, max_bytes)?;
        out.endpoints += chunk.len();
    }
    Ok(out)
}

/// The upload ceiling of `jobs`: their documents sent raw into fresh indices under
/// `prefix` (installed first, deleted after), with `--bulk-concurrency` clients.
pub fn upload(
    es_url: &str,
    prefix: &str,
    owner: Uuid,
    jobs: &[Job],
    opts: &Opts,
) -> Result<Sent, String> {
    install(es_url, prefix)?;
    let reqs = upload_requests(
        prefix,
        owner,
        jobs,
        opts.bulk_batch_size,
        opts.bulk_max_bytes,
    )?;
    let sent = send(es_url, &reqs, opts.bulk_concurrency)?;
    delete(es_url, prefix, &reqs.indices);
    Ok(sent)
}

/// Installs scanstore's templates, indices and merge script under `prefix`.
pub fn install(es_url: &str, prefix: &str) -> Result<(), String> {
    let es = crate::stack::es_client(es_url, Duration::from_secs(120))?;
    setup::install(&es, prefix, &Default::default()).map_err(|e| format!("install {prefix}: {e}"))
}

/// Deletes the indices written under `prefix` — by a ceiling or peer run, or by scanstore
/// before an extra round — and its execution projection (by name: real clusters refuse
/// wildcard deletes).
pub fn delete(es_url: &str, prefix: &str, written: &[String]) {
    let Ok(es) = crate::stack::es_client(es_url, Duration::from_secs(120)) else {
        return;
    };
    let mut names: Vec<String> = written.to_vec();
    names.push(index::execution_endpoints(prefix));
    names.sort();
    names.dedup();
    for n in names {
        let _ = es.request("DELETE", &format!("/{}", index::encode_path(&n)), None);
    }
}

/// Sends every body with `threads` concurrent clients; fails on any error response.
pub fn send(es_url: &str, req: &Requests, threads: usize) -> Result<Sent, String> {
    let next = AtomicUsize::new(0);
    let url = format!("{}/_bulk", es_url.trim_end_matches('/'));
    let held = crate::stack::store_lock_held(es_url);
    let (started, from) = (Instant::now(), crate::cpu::now());
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| {
                    let agent = crate::scanner::agent();
                    let authorization = crate::stack::es_authorization();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(body) = req.bodies.get(i) else {
                            return Ok(());
                        };
                        let mut request = agent
                            .post(&url)
                            .header("Content-Type", "application/x-ndjson");
                        if let Some(a) = &authorization {
                            request = request.header("Authorization", a);
                        }
                        let mut r = request.send(&body[..]).map_err(|e| format!("bulk: {e}"))?;
                        let status = r.status().as_u16();
                        let bytes = r
                            .body_mut()
                            .with_config()
                            .limit(1 << 30)
                            .read_to_vec()
                            .map_err(|e| e.to_string())?;
                        let head =
                            String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).to_string();
                        if status != 200 || !head.contains("\"errors\":false") {
                            return Err(format!("bulk failed: {status}: {head}"));
                        }
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panic".into())))
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    // Done means searchable, as for scanstore (whose final and publication end with one).
    if !req.indices.is_empty() {
        let es = crate::stack::es_client(es_url, Duration::from_secs(120))?;
        let names: Vec<String> = req.indices.iter().map(|n| index::encode_path(n)).collect();
        es.request("POST", &format!("/{}/_refresh", names.join(",")), None)
            .and_then(|r| r.ok())
            .map_err(|e| format!("refresh: {e}"))?;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Sent {
        ops: req.ops,
        endpoints: req.endpoints,
        requests: req.bodies.len(),
        bytes: req.bodies.iter().map(Vec::len).sum(),
        runs: vec![seconds],
        spans: vec![(from, crate::cpu::now())],
        lock_held: held
            .zip(crate::stack::store_lock_held(es_url))
            .map(|(before, after)| after - before),
    })
}

/// The bench parses its own bodies only to build the ceiling's requests: no time is refused.
fn every_time() -> batch::Window {
    batch::Window {
        earliest: chrono::DateTime::<Utc>::MIN_UTC,
        latest: chrono::DateTime::<Utc>::MAX_UTC,
    }
}
