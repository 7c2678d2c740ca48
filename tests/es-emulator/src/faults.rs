//! Fault injection: the fault list, how requests and bulk items consume faults, and the
//! `/_emulator/…` control endpoints (faults, pauses, request log, reset).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::app::{lock, App};
use crate::error::EsError;
use crate::http::{HandlerResult, Reply, Req};
use crate::store::glob_match;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CorruptMode {
    WrongId,
    WrongIndex,
    MissingItem,
    ExtraItem,
}

/// What a test asks for. `path` is a glob on the URL path (`*` matches anything, also `/`),
/// `method` optional, `count` = how many matches it applies to (absent = until removed).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    Latency {
        path: String,
        method: Option<String>,
        ms: u64,
        count: Option<u64>,
    },
    Fail {
        path: String,
        method: Option<String>,
        status: u16,
        error_type: Option<String>,
        reason: Option<String>,
        count: Option<u64>,
    },
    BulkItemFail {
        id: String,
        status: u16,
        error_type: Option<String>,
        reason: Option<String>,
        count: Option<u64>,
    },
    CorruptBulk {
        mode: CorruptMode,
        count: Option<u64>,
    },
    RefreshFail {
        count: Option<u64>,
    },
    Close {
        path: String,
        method: Option<String>,
        count: Option<u64>,
    },
    Pause {
        path: String,
        method: Option<String>,
        count: Option<u64>,
    },
}

impl FaultSpec {
    /// The next `count` requests whose path matches `path` fail with `status` and an ES
    /// error of `error_type`.
    pub fn fail(path: &str, count: u64, status: u16, error_type: &str) -> FaultSpec {
        FaultSpec::Fail {
            path: path.into(),
            method: None,
            status,
            error_type: Some(error_type.into()),
            reason: None,
            count: Some(count),
        }
    }

    /// The next bulk item whose `_id` matches `id` fails as a mapping error (permanent).
    pub fn item_fails_once(id: String) -> FaultSpec {
        FaultSpec::BulkItemFail {
            id,
            status: 400,
            error_type: Some("mapper_parsing_exception".into()),
            reason: Some("injected".into()),
            count: Some(1),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    pub id: u64,
    pub spec: FaultSpec,
    pub remaining: Option<u64>,
    pub hits: u64,
}

#[derive(Debug, Default)]
pub struct Faults {
    list: Vec<Fault>,
    next_id: u64,
    pub paused_now: usize,
}

/// Faults that apply to one incoming request.
#[derive(Debug, Default)]
pub struct RequestFaults {
    pub latency_ms: u64,
    pub fail: Option<EsError>,
    pub close: bool,
    pub pause: Option<u64>,
}

fn count_of(spec: &FaultSpec) -> Option<u64> {
    match spec {
        FaultSpec::Latency { count, .. }
        | FaultSpec::Fail { count, .. }
        | FaultSpec::BulkItemFail { count, .. }
        | FaultSpec::CorruptBulk { count, .. }
        | FaultSpec::RefreshFail { count }
        | FaultSpec::Close { count, .. }
        | FaultSpec::Pause { count, .. } => *count,
    }
}

fn default_type(status: u16) -> &'static str {
    match status {
        429 => "es_rejected_execution_exception",
        503 => "cluster_block_exception",
        _ => "exception",
    }
}

fn injected(status: u16, error_type: &Option<String>, reason: &Option<String>) -> EsError {
    let kind = error_type
        .clone()
        .unwrap_or_else(|| default_type(status).to_owned());
    EsError::new(
        status,
        &kind,
        reason
            .clone()
            .unwrap_or_else(|| format!("injected fault: {kind}")),
    )
}

fn method_ok(want: &Option<String>, method: &str) -> bool {
    want.as_deref()
        .map_or(true, |m| m.eq_ignore_ascii_case(method))
}

impl Faults {
    pub fn add(&mut self, spec: FaultSpec) -> u64 {
        self.next_id += 1;
        let remaining = count_of(&spec);
        self.list.push(Fault {
            id: self.next_id,
            spec,
            remaining,
            hits: 0,
        });
        self.next_id
    }

    pub fn clear(&mut self) {
        self.list.clear();
    }

    pub fn remove(&mut self, id: u64) -> bool {
        let before = self.list.len();
        self.list.retain(|f| f.id != id);
        before != self.list.len()
    }

    pub fn is_active(&self, id: u64) -> bool {
        self.list.iter().any(|f| f.id == id)
    }

    /// Consumes the first matching fault for which `pick` returns a value.
    fn take<T>(&mut self, mut pick: impl FnMut(&FaultSpec) -> Option<T>) -> Option<(u64, T)> {
        let pos = self
            .list
            .iter()
            .position(|f| f.remaining != Some(0) && pick(&f.spec).is_some())?;
        let f = &mut self.list[pos];
        let value = pick(&f.spec)?;
        f.hits += 1;
        if let Some(r) = f.remaining.as_mut() {
            *r -= 1;
        }
        let id = f.id;
        // Exhausted pause faults stay listed so their paused requests keep waiting.
        if f.remaining == Some(0) && !matches!(f.spec, FaultSpec::Pause { .. }) {
            self.list.remove(pos);
        }
        Some((id, value))
    }

    pub fn for_request(&mut self, method: &str, path: &str) -> RequestFaults {
        let mut rf = RequestFaults::default();
        let hit = |p: &String, m: &Option<String>| glob_match(p, path) && method_ok(m, method);
        if let Some((_, ms)) = self.take(|s| match s {
            FaultSpec::Latency {
                path: p,
                method: m,
                ms,
                ..
            } if hit(p, m) => Some(*ms),
            _ => None,
        }) {
            rf.latency_ms = ms;
        }
        rf.pause = self
            .take(|s| {
                matches!(s, FaultSpec::Pause { path: p, method: m, .. } if hit(p, m)).then_some(())
            })
            .map(|(id, _)| id);
        rf.fail = self
            .take(|s| match s {
                FaultSpec::Fail {
                    path: p,
                    method: m,
                    status,
                    error_type,
                    reason,
                    ..
                } if hit(p, m) => Some(injected(*status, error_type, reason)),
                _ => None,
            })
            .map(|(_, e)| e);
        rf.close = self
            .take(|s| {
                matches!(s, FaultSpec::Close { path: p, method: m, .. } if hit(p, m)).then_some(())
            })
            .is_some();
        rf
    }

    pub fn has_item_faults(&self) -> bool {
        self.list
            .iter()
            .any(|f| matches!(f.spec, FaultSpec::BulkItemFail { .. }))
    }

    pub fn item_failure(&mut self, id: &str) -> Option<EsError> {
        self.take(|s| match s {
            FaultSpec::BulkItemFail {
                id: p,
                status,
                error_type,
                reason,
                ..
            } if glob_match(p, id) => Some(injected(*status, error_type, reason)),
            _ => None,
        })
        .map(|(_, e)| e)
    }

    pub fn corruption(&mut self) -> Option<CorruptMode> {
        self.take(|s| match s {
            FaultSpec::CorruptBulk { mode, .. } => Some(*mode),
            _ => None,
        })
        .map(|(_, m)| m)
    }

    pub fn refresh_failure(&mut self) -> bool {
        self.take(|s| matches!(s, FaultSpec::RefreshFail { .. }).then_some(()))
            .is_some()
    }
}

/// Waits while pause fault `id` is active. Returns when it is released or removed.
pub fn wait_paused(app: &App, id: u64) {
    let mut faults = lock(&app.faults);
    faults.paused_now += 1;
    while faults.is_active(id) {
        faults = match app.released.wait(faults) {
            Ok(g) => g,
            Err(e) => e.into_inner(),
        };
    }
    faults.paused_now -= 1;
}

/// `/_emulator/…` control endpoints.
pub fn control(app: &App, req: &Req) -> HandlerResult {
    let segs: Vec<&str> = req.segments.iter().skip(1).map(String::as_str).collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("POST", ["reset"]) => {
            // The old store is freed once the lock is released (see `indices::delete`).
            let old = std::mem::take(&mut *app.lock_store());
            drop(old);
            lock(&app.faults).clear();
            lock(&app.log).clear();
            app.released.notify_all();
            Ok(Reply::ok(&json!({"acknowledged": true})))
        }
        ("POST", ["faults"]) => {
            let spec: FaultSpec = serde_json::from_slice(&req.body)
                .map_err(|e| EsError::bad_request(format!("bad fault: {e}")))?;
            let id = lock(&app.faults).add(spec);
            Ok(Reply::ok(&json!({"id": id})))
        }
        ("GET", ["faults"]) => Ok(Reply::ok(&json!({"faults": lock(&app.faults).list}))),
        ("DELETE", ["faults"]) | ("POST", ["release"]) => {
            let mut f = lock(&app.faults);
            if req.segments.get(1).map(String::as_str) == Some("release") {
                f.list
                    .retain(|x| !matches!(x.spec, FaultSpec::Pause { .. }));
            } else {
                f.clear();
            }
            drop(f);
            app.released.notify_all();
            Ok(Reply::ok(&json!({"acknowledged": true})))
        }
        ("DELETE", ["faults", id]) | ("POST", ["faults", id, "release"]) => {
            let id: u64 = id
                .parse()
                .map_err(|_| EsError::bad_request("fault id must be a number"))?;
            let removed = lock(&app.faults).remove(id);
            app.released.notify_all();
            Ok(Reply::json(
                if removed { 200 } else { 404 },
                &json!({"removed": removed}),
            ))
        }
        // Proves panic isolation: the handler panics, the server answers 500 and lives on.
        ("POST", ["panic"]) => panic!("panic requested through /_emulator/panic"),
        ("GET", ["store"]) => Ok(Reply::ok(&json!({"lock_held_ns": app.store_held_ns()}))),
        ("GET", ["paused"]) => Ok(Reply::ok(&json!({"paused": lock(&app.faults).paused_now}))),
        ("GET", ["requests"]) => Ok(Reply::ok(
            &lock(&app.log).query(req.param("method"), req.param("path")),
        )),
        ("DELETE", ["requests"]) => {
            lock(&app.log).clear();
            Ok(Reply::ok(&json!({"acknowledged": true})))
        }
        _ => Err(EsError::bad_request(format!(
            "no emulator control endpoint [{} {}]",
            req.method, req.path
        ))),
    }
}

/// Applies a bulk-response corruption to the `items` array.
pub fn corrupt(items: &mut Vec<Value>, mode: CorruptMode) {
    let rename = |items: &mut Vec<Value>, key: &str| {
        if let Some(inner) = items
            .first_mut()
            .and_then(Value::as_object_mut)
            .and_then(|o| o.values_mut().next())
            .and_then(Value::as_object_mut)
        {
            let old = inner
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            inner.insert(key.into(), json!(format!("{old}-corrupted")));
        }
    };
    match mode {
        CorruptMode::WrongId => rename(items, "_id"),
        CorruptMode::WrongIndex => rename(items, "_index"),
        CorruptMode::MissingItem => {
            items.pop();
        }
        CorruptMode::ExtraItem => {
            if let Some(last) = items.last().cloned() {
                items.push(last);
            }
        }
    }
}
