//! Native twin of `asset_merge.painless`: folds one endpoint observation into an asset document.
//!
//! Same semantics as the Painless text, statement by statement. Every rule takes a maximum,
//! so the result does not depend on the order observations arrive in: `state` follows the
//! newest observation under (observed_at, state, execution_id of a closing one), missing
//! state = open = "" (a document
//! from before states were stored was open as of its `last_seen`), and with it `status`
//! (`open`, or `closed` for closed and filtered), `closed_at` and `closed_by` (the closing
//! observation's time and execution); open observations alone
//! move `first_seen` (earliest) and `last_seen` (latest), and the service fields follow the
//! newest of them under (observed_at, execution_id, service, product, version, banner,
//! details_digest), missing = empty string. A new document (`ctx.op == "create"`) takes what
//! its one observation gives. Strings compare as Java's `String.compareTo` does (UTF-16 code
//! units). Nothing changed → `ctx.op = "noop"`.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::{ScriptCtx, ScriptError};

/// Hex SHA-256 of `asset_merge.painless`, pinned so an edit of the Painless text without the
/// twin is caught by `pinned_hash_matches_the_painless_file`.
pub const SOURCE_SHA256: &str = "ad5d617ca56b405ec251f4967fadc49ec572232fe8583f49dcf8c58b20993888";

/// Fields replaced together when an observation wins the service order (besides
/// `service_observed_at`).
const SERVICE_FIELDS: [&str; 12] = [
    "service",
    "product",
    "version",
    "banner",
    "extra_info",
    "tunnel",
    "confidence",
    "cpe",
    "hostnames",
    "scripts",
    "details_digest",
    "execution_id",
];
/// Tie-break keys after `observed_at`, in order.
const ORDER_KEYS: [&str; 6] = [
    "execution_id",
    "service",
    "product",
    "version",
    "banner",
    "details_digest",
];

/// Painless `x == null ? '' : x.toString()` for JSON values.
fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Java `String.compareTo`: lexicographic over UTF-16 code units.
fn java_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn field(obs: &Map<String, Value>, key: &str) -> Value {
    obs.get(key).cloned().unwrap_or(Value::Null)
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn take_service(src: &mut Map<String, Value>, obs: &Map<String, Value>, at: &str) {
    for key in SERVICE_FIELDS {
        src.insert(key.to_owned(), field(obs, key));
    }
    src.insert(
        "service_observed_at".to_owned(),
        Value::String(at.to_owned()),
    );
}

/// Painless `setState`: the state, its time, and the status with what closed it.
fn set_state(src: &mut Map<String, Value>, state: &str, at: &str, execution: Value) {
    let open = state.is_empty();
    let (state, status, closed_at, closed_by) = if open {
        (Value::Null, "open", Value::Null, Value::Null)
    } else {
        let at = Value::String(at.to_owned());
        (Value::String(state.to_owned()), "closed", at, execution)
    };
    src.insert("state".to_owned(), state);
    src.insert("state_observed_at".to_owned(), Value::String(at.to_owned()));
    src.insert("status".to_owned(), Value::String(status.to_owned()));
    src.insert("closed_at".to_owned(), closed_at);
    src.insert("closed_by".to_owned(), closed_by);
}

/// Runs the merge with `params.obs`.
pub fn run(ctx: &mut ScriptCtx, params: &Map<String, Value>) -> Result<(), ScriptError> {
    let obs = match params.get("obs") {
        Some(Value::Object(obs)) => obs,
        _ => return Err(ScriptError("params.obs must be an object".to_owned())),
    };
    let at = text(obs.get("observed_at"));
    let mut state = text(obs.get("state"));
    if state == "open" {
        state.clear();
    }
    let open = state.is_empty();
    let src = &mut ctx.source;
    if ctx.op == "create" {
        for key in ["ip", "port", "transport"] {
            src.insert(key.to_owned(), field(obs, key));
        }
        if let Some(owner) = present(obs.get("owner_id")) {
            src.insert("owner_id".to_owned(), owner.clone());
        }
        set_state(src, &state, &at, field(obs, "execution_id"));
        if open {
            src.insert("first_seen".to_owned(), Value::String(at.clone()));
            src.insert("last_seen".to_owned(), Value::String(at.clone()));
            take_service(src, obs, &at);
        }
        return Ok(());
    }
    let mut changed = false;
    let state_seen =
        present(src.get("state_observed_at")).or_else(|| present(src.get("last_seen")));
    let mut state_order = java_cmp(&at, &text(state_seen));
    if state_order == Ordering::Equal {
        state_order = java_cmp(&state, &text(src.get("state")));
    }
    if state_order == Ordering::Equal && !open {
        state_order = java_cmp(&text(obs.get("execution_id")), &text(src.get("closed_by")));
    }
    if state_order == Ordering::Greater {
        set_state(src, &state, &at, field(obs, "execution_id"));
        changed = true;
    }
    if open {
        let first_seen = present(src.get("first_seen")).map(|v| text(Some(v)));
        if first_seen.map_or(true, |fs| java_cmp(&at, &fs) == Ordering::Less) {
            src.insert("first_seen".to_owned(), Value::String(at.clone()));
            changed = true;
        }
        let last_seen = present(src.get("last_seen")).map(|v| text(Some(v)));
        if last_seen.map_or(true, |ls| java_cmp(&at, &ls) == Ordering::Greater) {
            src.insert("last_seen".to_owned(), Value::String(at.clone()));
            changed = true;
        }
        let mut order = java_cmp(&at, &text(src.get("service_observed_at")));
        for key in ORDER_KEYS {
            if order != Ordering::Equal {
                break;
            }
            order = java_cmp(&text(obs.get(key)), &text(src.get(key)));
        }
        if order == Ordering::Greater {
            take_service(src, obs, &at);
            changed = true;
        }
    }
    if !changed {
        ctx.op = "noop".to_owned();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn obs(at: &str, exec: &str, product: Option<&str>) -> Value {
        let mut o = json!({"ip": "203.0.113.7", "port": 443, "transport": "tcp",
            "owner_id": "o1", "service": "https", "version": "1.2", "banner": "b",
            "observed_at": at, "execution_id": exec});
        if let (Some(p), Some(map)) = (product, o.as_object_mut()) {
            map.insert("product".into(), json!(p));
        }
        o
    }

    /// Applies observations the way a scripted_upsert does: create on the first, index after.
    fn apply(doc: Option<Map<String, Value>>, o: &Value) -> (Map<String, Value>, String) {
        let (op, source) = match doc {
            None => ("create".to_owned(), Map::new()),
            Some(d) => ("index".to_owned(), d),
        };
        let mut ctx = ScriptCtx { op, source };
        let mut params = Map::new();
        params.insert("obs".into(), o.clone());
        run(&mut ctx, &params).expect("merge runs");
        (ctx.source, ctx.op)
    }

    fn fold(list: &[Value]) -> Option<Map<String, Value>> {
        list.iter().fold(None, |doc, o| Some(apply(doc, o).0))
    }

    #[test]
    fn new_document_takes_every_field() {
        let (doc, op) = apply(None, &obs("2026-11-29T10:00:00.000Z", "e1", Some("nginx")));
        assert_eq!(op, "create");
        assert_eq!(doc["first_seen"], json!("2026-11-29T10:00:00.000Z"));
        assert_eq!(doc["last_seen"], json!("2026-11-29T10:00:00.000Z"));
        assert_eq!(
            doc["service_observed_at"],
            json!("2026-11-29T10:00:00.000Z")
        );
        assert_eq!(doc["product"], json!("nginx"));
        assert_eq!(doc["owner_id"], json!("o1"));
        assert_eq!(doc["port"], json!(443));
    }

    #[test]
    fn global_document_has_no_owner() {
        let mut o = obs("2026-11-29T10:00:00.000Z", "e1", None);
        if let Some(m) = o.as_object_mut() {
            m.remove("owner_id");
        }
        let (doc, _) = apply(None, &o);
        assert!(!doc.contains_key("owner_id"));
        assert_eq!(doc["product"], Value::Null);
    }

    #[test]
    fn older_observation_moves_first_seen_only() {
        let doc = fold(&[obs("2026-11-29T10:00:00.000Z", "e2", Some("nginx"))]);
        let (doc, op) = apply(doc, &obs("2026-11-28T10:00:00.000Z", "e1", Some("apache")));
        assert_eq!(op, "index");
        assert_eq!(doc["first_seen"], json!("2026-11-28T10:00:00.000Z"));
        assert_eq!(doc["last_seen"], json!("2026-11-29T10:00:00.000Z"));
        assert_eq!(doc["product"], json!("nginx"));
        assert_eq!(doc["execution_id"], json!("e2"));
    }

    #[test]
    fn newer_observation_replaces_service_fields() {
        let doc = fold(&[obs("2026-11-29T10:00:00.000Z", "e1", Some("nginx"))]);
        let (doc, _) = apply(doc, &obs("2026-11-30T10:00:00.000Z", "e2", None));
        assert_eq!(doc["product"], Value::Null);
        assert_eq!(
            doc["service_observed_at"],
            json!("2026-11-30T10:00:00.000Z")
        );
        assert_eq!(doc["first_seen"], json!("2026-11-29T10:00:00.000Z"));
    }

    #[test]
    fn same_time_tie_breaks_on_execution_then_fields() {
        let doc = fold(&[obs("2026-11-29T10:00:00.000Z", "e1", Some("zzz"))]);
        let (doc, _) = apply(doc, &obs("2026-11-29T10:00:00.000Z", "e2", Some("aaa")));
        assert_eq!(doc["product"], json!("aaa"));
        let (doc, op) = apply(
            Some(doc),
            &obs("2026-11-29T10:00:00.000Z", "e1", Some("zzz")),
        );
        assert_eq!(
            (doc["product"].clone(), op.as_str()),
            (json!("aaa"), "noop")
        );
    }

    #[test]
    fn repeating_an_observation_is_a_noop() {
        let o = obs("2026-11-29T10:00:00.000Z", "e1", Some("nginx"));
        let doc = fold(std::slice::from_ref(&o));
        let (again, op) = apply(doc.clone(), &o);
        assert_eq!(op, "noop");
        assert_eq!(Some(again), doc);
    }

    fn with(mut o: Value, key: &str, v: Value) -> Value {
        if let Some(m) = o.as_object_mut() {
            m.insert(key.into(), v);
        }
        o
    }

    #[test]
    fn a_closed_observation_moves_the_state_and_keeps_the_service() {
        let doc = fold(&[obs("2026-11-29T10:00:00.000Z", "e1", Some("nginx"))]);
        assert_eq!(doc.as_ref().unwrap()["state"], Value::Null);
        let closed = with(
            obs("2026-11-30T10:00:00.000Z", "e2", None),
            "state",
            json!("closed"),
        );
        let (doc, _) = apply(doc, &closed);
        assert_eq!(doc["state"], json!("closed"));
        assert_eq!(doc["state_observed_at"], json!("2026-11-30T10:00:00.000Z"));
        assert_eq!(doc["product"], json!("nginx"));
        assert_eq!(doc["last_seen"], json!("2026-11-29T10:00:00.000Z"));
        // Open again later: state and service follow it; first_seen stays.
        let again = with(
            obs("2026-12-01T10:00:00.000Z", "e3", Some("apache")),
            "cpe",
            json!(["cpe:/a:apache:http_server:2.4.58"]),
        );
        let (doc, _) = apply(Some(doc), &again);
        assert_eq!(doc["state"], Value::Null);
        assert_eq!(doc["product"], json!("apache"));
        assert_eq!(doc["cpe"], json!(["cpe:/a:apache:http_server:2.4.58"]));
        assert_eq!(doc["first_seen"], json!("2026-11-29T10:00:00.000Z"));
    }

    #[test]
    fn a_document_from_before_states_was_open_as_of_its_last_seen() {
        let mut legacy = fold(&[obs("2026-11-29T10:00:00.000Z", "e1", Some("nginx"))]).unwrap();
        legacy.remove("state");
        legacy.remove("state_observed_at");
        let replay = obs("2026-11-28T10:00:00.000Z", "e0", Some("nginx"));
        let (doc, _) = apply(Some(legacy.clone()), &replay);
        assert!(
            !doc.contains_key("state"),
            "an older observation leaves the state as it was"
        );
        let closed = with(
            obs("2026-11-29T12:00:00.000Z", "e2", None),
            "state",
            json!("filtered"),
        );
        let (doc, _) = apply(Some(legacy), &closed);
        assert_eq!(doc["state"], json!("filtered"));
    }

    #[test]
    fn missing_obs_is_an_error() {
        let mut ctx = ScriptCtx {
            op: "create".into(),
            source: Map::new(),
        };
        assert!(run(&mut ctx, &Map::new()).is_err());
    }

    #[test]
    fn strings_compare_like_java() {
        // U+FF61 is one UTF-16 unit (0xFF61); U+1F600 starts with surrogate 0xD83D < 0xFF61,
        // while its UTF-8 bytes sort after U+FF61's.
        assert_eq!(java_cmp("\u{1F600}", "\u{FF61}"), Ordering::Less);
        assert_eq!(java_cmp("a", "b"), Ordering::Less);
    }

    fn arb_obs() -> impl Strategy<Value = Value> {
        (
            0u8..4,
            0u8..3,
            proptest::option::of(prop_oneof!["nginx", "apache"]),
            0u8..2,
            proptest::option::of(prop_oneof!["open", "closed", "filtered"]),
            proptest::option::of(prop_oneof!["d1", "d2"]),
        )
            .prop_map(|(day, exec, product, svc, state, digest)| {
                let mut o = obs(
                    &format!("2026-11-2{day}T10:00:00.000Z"),
                    &format!("e{exec}"),
                    product.as_deref(),
                );
                if let Some(m) = o.as_object_mut() {
                    m.insert(
                        "service".into(),
                        json!(if svc == 0 { "http" } else { "https" }),
                    );
                    if let Some(s) = state {
                        m.insert("state".into(), json!(s));
                    }
                    if let Some(d) = digest {
                        m.insert("details_digest".into(), json!(d));
                        m.insert("cpe".into(), json!([format!("cpe:/a:{d}")]));
                    }
                }
                o
            })
    }

    /// A close run's observation: the endpoint, `closed`, the execution's start and id.
    fn close(at: &str, exec: &str) -> Value {
        json!({"ip": "203.0.113.7", "port": 443, "transport": "tcp", "owner_id": "o1",
               "state": "closed", "observed_at": at, "execution_id": exec})
    }

    fn arb_obs_or_close() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => arb_obs(),
            1 => (0u8..4, 0u8..3).prop_map(|(day, exec)| close(
                &format!("2026-11-2{day}T10:00:00.000Z"),
                &format!("c{exec}")
            )),
        ]
    }

    #[test]
    fn a_close_sets_the_status_and_a_newer_open_observation_reopens() {
        let seen = obs("2026-11-20T10:00:00.000Z", "e1", Some("nginx"));
        let doc = fold(std::slice::from_ref(&seen)).unwrap();
        assert_eq!(doc["status"], json!("open"));
        let (closed, op) = apply(Some(doc), &close("2026-11-22T10:00:00.000Z", "c1"));
        assert_eq!(op, "index");
        assert_eq!(
            (
                &closed["status"],
                &closed["closed_at"],
                &closed["closed_by"]
            ),
            (
                &json!("closed"),
                &json!("2026-11-22T10:00:00.000Z"),
                &json!("c1")
            )
        );
        // A close older than what was seen loses; so does a replay of the seen observation.
        let (same, op) = apply(Some(closed.clone()), &seen);
        assert_eq!((op.as_str(), &same), ("noop", &closed));
        let early = fold(&[seen.clone(), close("2026-11-19T10:00:00.000Z", "c0")]).unwrap();
        assert_eq!(early["status"], json!("open"));
        let (reopened, _) = apply(
            Some(closed),
            &obs("2026-11-23T10:00:00.000Z", "e2", Some("nginx")),
        );
        assert_eq!(reopened["status"], json!("open"));
        assert_eq!(reopened["closed_at"], Value::Null);
        assert_eq!(reopened["closed_by"], Value::Null);
        assert_eq!(reopened["first_seen"], json!("2026-11-20T10:00:00.000Z"));
    }

    proptest! {
        #[test]
        fn merge_is_order_independent_and_idempotent(
            list in proptest::collection::vec(arb_obs_or_close(), 1..8),
            seed in any::<u64>(),
            repeats in proptest::collection::vec(0usize..8, 0..6),
        ) {
            let expected = fold(&list);
            // A permutation (deterministic shuffle from the seed) with repetitions appended.
            let mut shuffled = list.clone();
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            for r in repeats {
                shuffled.push(list[r % list.len()].clone());
            }
            prop_assert_eq!(fold(&shuffled), expected.clone());
            // Replaying everything once more changes nothing and every step is a noop.
            let mut doc = expected.clone();
            for o in &list {
                let (next, op) = apply(doc.clone(), o);
                prop_assert_eq!(op, "noop");
                doc = Some(next);
            }
            prop_assert_eq!(doc, expected);
        }
    }
}
