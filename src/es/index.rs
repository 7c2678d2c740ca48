//! Index and document naming: every ES name scanstore writes is built here, from the
//! configured prefix, so naming is consistent and deterministic (a retry hits the same ids).

use chrono::{DateTime, Datelike, Utc};
use uuid::Uuid;

/// Monthly raw-fact index of an observation time (UTC): `<prefix>-facts-YYYY.MM`.
pub fn facts_index(prefix: &str, observed_at: &DateTime<Utc>) -> String {
    facts_index_of_month(prefix, observed_at.year(), observed_at.month())
}

/// The facts index of a month (`month` 1..=12).
pub fn facts_index_of_month(prefix: &str, year: i32, month: u32) -> String {
    format!("{prefix}-facts-{year:04}.{month:02}")
}

/// Every fact index, for the legacy all-history scope.
pub fn facts_pattern(prefix: &str) -> String {
    format!("{prefix}-facts-*")
}

/// The execution endpoint projection, one shared index.
pub fn execution_endpoints(prefix: &str) -> String {
    format!("{prefix}-execution-endpoints")
}

/// The read/write alias of the global current-asset view.
pub fn assets_global_alias(prefix: &str) -> String {
    format!("{prefix}-assets-global")
}

/// The read/write alias of the per-owner current-asset view.
pub fn assets_user_alias(prefix: &str) -> String {
    format!("{prefix}-assets-user")
}

/// A versioned physical index behind an alias (`…-v1`); a rebuild creates the next one
/// and switches the alias.
pub fn versioned(alias: &str, version: u32) -> String {
    format!("{alias}-v{version}")
}

/// Global asset document id: one per endpoint, `{ip}-{transport}-{port}`. Built by hand,
/// not with `format!`: publication makes two asset ids per endpoint, and `fmt` was a
/// quarter of building a page's operations.
pub fn global_asset_id(ip: &str, transport: &str, port: u16) -> String {
    let mut digits = itoa::Buffer::new();
    [ip, "-", transport, "-", digits.format(port)].concat()
}

/// Owner asset document id: one per owner and endpoint, the owner's id (simple form)
/// before the endpoint's [`global_asset_id`].
pub fn user_asset_id(owner_id: Uuid, global_id: &str) -> String {
    let mut buf = Uuid::encode_buffer();
    let owner = owner_id.simple().encode_lower(&mut buf);
    [owner, "-", global_id].concat()
}

/// Name of the facts index template.
pub fn facts_template(prefix: &str) -> String {
    format!("{prefix}-facts")
}

/// Ids of one batch's raw facts: the batch identity plus the observation's position in
/// the batch, so a retried batch overwrites its own facts instead of adding new ones. The
/// identity part is encoded once per batch: every observation of every batch has an id.
pub struct FactIds {
    /// `<execution>-<upload>-<stream initial><batch index>-`.
    batch: String,
}

impl FactIds {
    pub fn new(execution_id: Uuid, upload_id: Uuid, stream: &str, batch_index: u32) -> FactIds {
        let (mut execution, mut upload) = (Uuid::encode_buffer(), Uuid::encode_buffer());
        let mut index = itoa::Buffer::new();
        let batch = [
            execution_id.simple().encode_lower(&mut execution),
            "-",
            upload_id.simple().encode_lower(&mut upload),
            "-",
            &stream[..1],
            index.format(batch_index),
            "-",
        ]
        .concat();
        FactIds { batch }
    }

    /// The id of the fact at `position`.
    pub fn at(&self, position: usize) -> String {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(position);
        let mut id = String::with_capacity(self.batch.len() + digits.len());
        id.push_str(&self.batch);
        id.push_str(digits);
        id
    }
}

/// Id of one endpoint in the execution projection: an endpoint seen twice in one
/// execution is one document.
pub fn execution_endpoint_id(execution_id: Uuid, ip: &str, transport: &str, port: u16) -> String {
    let (mut buf, mut digits) = (Uuid::encode_buffer(), itoa::Buffer::new());
    let execution = execution_id.simple().encode_lower(&mut buf);
    [execution, "-", ip, "-", transport, "-", digits.format(port)].concat()
}

/// Percent-encodes an index list for a URL path (ES names are lowercase ASCII without
/// `/`, but `,` `*` and `:` are still escaped as a client must).
pub fn encode_path(indices: &str) -> String {
    let mut out = String::with_capacity(indices.len());
    for b in indices.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn indices_make_encoded_paths_and_count_the_request_line() {
        let i = Indices::of(&["s-facts-2020.01", "s-facts-*"]);
        assert_eq!(i.to_string(), "s-facts-2020.01,s-facts-*");
        assert_eq!(
            i.path(Endpoint::Count),
            "/s-facts-2020.01%2Cs-facts-%2A/_count"
        );
        assert_eq!(
            Indices::one("a").lenient().path(Endpoint::Refresh),
            "/a/_refresh?ignore_unavailable=true&allow_no_indices=true"
        );
        assert_eq!(
            Indices::one("a").request_line_len(Endpoint::Count),
            "POST /a/_count HTTP/1.1".len()
        );
    }

    use super::*;
    use chrono::TimeZone;

    #[test]
    fn monthly_names_use_utc() {
        let t = Utc.with_ymd_and_hms(2026, 1, 31, 23, 59, 59).unwrap();
        assert_eq!(facts_index("scan", &t), "scan-facts-2026.01");
        assert_eq!(facts_pattern("scan"), "scan-facts-*");
    }

    #[test]
    fn ids_are_deterministic() {
        let e = Uuid::nil();
        let u = Uuid::from_u128(1);
        assert_eq!(
            FactIds::new(e, u, "main", 3).at(7),
            "00000000000000000000000000000000-00000000000000000000000000000001-m3-7"
        );
        assert_eq!(
            execution_endpoint_id(e, "2001:db8::1", "tcp", 443),
            "00000000000000000000000000000000-2001:db8::1-tcp-443"
        );
    }

    #[test]
    fn path_encoding() {
        assert_eq!(encode_path("a-facts-2026.01,b*"), "a-facts-2026.01%2Cb%2A");
    }
}

/// The indices one request addresses: their names, joined and encoded for the path once,
/// and whether missing ones are ignored (a wildcard that may match nothing yet, a month
/// whose facts index was never created). Requests build their paths from it in
/// [`super::client`] only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indices {
    names: String,
    encoded: String,
    lenient: bool,
}

/// The per-index endpoints scanstore calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Refresh,
    Count,
    Search,
}

impl Endpoint {
    fn as_str(self) -> &'static str {
        match self {
            Endpoint::Refresh => "_refresh",
            Endpoint::Count => "_count",
            Endpoint::Search => "_search",
        }
    }
}

/// Missing indices, and a wildcard that matches none, are not an error.
const LENIENT: &str = "?ignore_unavailable=true&allow_no_indices=true";

impl Indices {
    pub fn of<S: AsRef<str>>(names: &[S]) -> Indices {
        let names: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
        let names = names.join(",");
        Indices {
            encoded: encode_path(&names),
            names,
            lenient: false,
        }
    }

    pub fn one(name: &str) -> Indices {
        Indices::of(&[name])
    }

    /// The same indices, missing ones ignored.
    pub fn lenient(mut self) -> Indices {
        self.lenient = true;
        self
    }

    /// `/{indices}/{endpoint}` with its query.
    pub(super) fn path(&self, endpoint: Endpoint) -> String {
        let query = if self.lenient { LENIENT } else { "" };
        format!("/{}/{}{query}", self.encoded, endpoint.as_str())
    }

    /// The length of the request line `POST <path> HTTP/1.1` of `endpoint`, which some
    /// proxies and clusters cap.
    pub fn request_line_len(&self, endpoint: Endpoint) -> usize {
        "POST ".len() + self.path(endpoint).len() + " HTTP/1.1".len()
    }
}

impl std::fmt::Display for Indices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.names)
    }
}
