//! What a scanner knows beyond an endpoint's service, product, version and banner — port
//! state, hostnames, CPEs, extra info, TLS tunnel, confidence, script output — and a host's
//! OS guesses: protocol 2's optional fields, validated within their limits. Absent fields
//! keep old scanners' batches exactly as they were.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::batch::{domain, MAX_BANNER, MAX_SHORT_TEXT};

/// Most hostnames, CPEs or scripts on one observation.
pub const MAX_LIST: usize = 32;
/// Most OS guesses on one host observation.
pub const MAX_OS_GUESSES: usize = 8;
/// Longest script id, in bytes.
pub const MAX_SCRIPT_ID: usize = 64;
/// Longest output of one script, in bytes.
pub const MAX_SCRIPT_OUTPUT: usize = MAX_BANNER;
/// Longest CPE, in bytes.
pub const MAX_CPE: usize = MAX_SHORT_TEXT;
/// Longest tunnel name (`ssl`), in bytes.
pub const MAX_TUNNEL: usize = 32;
/// Highest confidence (nmap's `conf`).
pub const MAX_CONFIDENCE: u8 = 10;

/// A port's state as nmap names it. Absent means open: what every scanner reported before
/// states were sent, and what masscan and naabu report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PortState {
    #[serde(rename = "open")]
    Open,
    #[serde(rename = "closed")]
    Closed,
    #[serde(rename = "filtered")]
    Filtered,
    #[serde(rename = "unfiltered")]
    Unfiltered,
    #[serde(rename = "open|filtered")]
    OpenFiltered,
    #[serde(rename = "closed|filtered")]
    ClosedFiltered,
}

impl PortState {
    /// The states, as a message lists them.
    pub const NAMES: &'static str =
        "open, closed, filtered, unfiltered, open|filtered or closed|filtered";

    /// The state nmap (or masscan) names `s`.
    pub fn parse(s: &str) -> Option<PortState> {
        serde_json::from_value(serde_json::Value::from(s)).ok()
    }
}

/// Where a hostname came from: the user's target, or the address's PTR record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameSource {
    User,
    Ptr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hostname {
    pub name: String,
    pub source: NameSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub id: String,
    pub output: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OsGuess {
    pub name: String,
    /// 0..=100, as nmap's `osmatch accuracy`.
    pub accuracy: u8,
}

/// An endpoint's optional fields, in the order they are stored and digested.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Details {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<PortState>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<Hostname>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpe: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_info: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scripts: Vec<Script>,
}

/// An array literal of the given field names with the fields of [`Details`] (as documents
/// store them) between those before and after the `;`: every list of stored endpoint
/// fields names them in one place.
macro_rules! with_detail_fields {
    ($($before:literal),* ; $($after:literal),*) => {
        [$($before,)* "state", "hostnames", "cpe", "extra_info", "tunnel", "confidence", "scripts", $($after),*]
    };
}
pub(crate) use with_detail_fields;

/// The fields of [`Details`] as documents store them (besides `details_digest`).
pub const DETAIL_FIELDS: [&str; 7] = with_detail_fields![;];

impl Details {
    /// Whether the observation is of an open port (the only kind that has a service).
    pub fn is_open(&self) -> bool {
        matches!(self.state, None | Some(PortState::Open))
    }

    /// The hex SHA-256 of the stored form, the last tie-break between two observations of
    /// one endpoint at the same time with the same service; `None` without details, so an
    /// observation without them ranks as it always did.
    pub fn digest(&self) -> Option<String> {
        if *self == Details::default() {
            return None;
        }
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        Some(hex::encode(Sha256::digest(bytes)))
    }
}

/// The optional fields as a scanner sent them, before validation.
#[derive(Debug, Default)]
pub struct RawDetails {
    pub state: Option<String>,
    pub hostnames: Option<Vec<Hostname>>,
    pub cpe: Option<Vec<String>>,
    pub extra_info: Option<String>,
    pub tunnel: Option<String>,
    pub confidence: Option<i64>,
    pub scripts: Option<Vec<Script>>,
}

fn bounded<T>(field: &str, v: Option<Vec<T>>, max: usize) -> Result<Vec<T>, String> {
    let v = v.unwrap_or_default();
    if v.len() > max {
        return Err(format!("{field} has {} entries; at most {max}", v.len()));
    }
    Ok(v)
}

/// Validated hostnames: DNS names, lower-cased, duplicates removed in order.
pub fn hostnames(v: Option<Vec<Hostname>>) -> Result<Vec<Hostname>, String> {
    let mut out: Vec<Hostname> = Vec::new();
    for h in bounded("hostnames", v, MAX_LIST)? {
        let name = domain(&h.name).map_err(|e| format!("hostnames: {e}"))?;
        let h = Hostname { name, ..h };
        if !out.contains(&h) {
            out.push(h);
        }
    }
    Ok(out)
}

/// `cpe:/…` (2.2 URI) or `cpe:2.3:…` (formatted string) of at most [`MAX_CPE`] bytes,
/// printable ASCII without spaces.
pub fn is_cpe(c: &str) -> bool {
    (c.starts_with("cpe:/") || c.starts_with("cpe:2.3:"))
        && c.len() <= MAX_CPE
        && c.bytes().all(|b| b.is_ascii_graphic())
}

/// 1..=`max` bytes of a-z, 0-9, `-`, `_` or `.`: a tunnel name or a script id.
pub fn is_word(v: &str, max: usize) -> bool {
    !v.is_empty()
        && v.len() <= max
        && v.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

fn cpe(c: String) -> Result<String, String> {
    if !is_cpe(&c) {
        return Err(format!(
            "cpe entries must be cpe:/… or cpe:2.3:… of at most {MAX_CPE} printable bytes"
        ));
    }
    Ok(c)
}

fn word(field: &str, v: String, max: usize) -> Result<String, String> {
    if !is_word(&v, max) {
        return Err(format!(
            "{field} must be 1..={max} bytes of a-z, 0-9, '-', '_' or '.'"
        ));
    }
    Ok(v)
}

impl RawDetails {
    pub fn validate(self) -> Result<Details, String> {
        let state = match self.state.as_deref() {
            None => None,
            Some(s) => match PortState::parse(s) {
                // Absent and open are one state: stored the same way.
                Some(PortState::Open) => None,
                Some(other) => Some(other),
                None => return Err(format!("state {s:?} is not {}", PortState::NAMES)),
            },
        };
        let cpe = bounded("cpe", self.cpe, MAX_LIST)?
            .into_iter()
            .map(cpe)
            .collect::<Result<Vec<_>, _>>()?;
        let extra_info = match self.extra_info {
            Some(s) if s.len() > MAX_SHORT_TEXT => {
                return Err(format!("extra_info longer than {MAX_SHORT_TEXT} bytes"))
            }
            Some(s) if s.is_empty() => None,
            other => other,
        };
        let tunnel = self
            .tunnel
            .map(|t| word("tunnel", t, MAX_TUNNEL))
            .transpose()?;
        let confidence = match self.confidence {
            None => None,
            Some(c) => Some(
                u8::try_from(c)
                    .ok()
                    .filter(|c| *c <= MAX_CONFIDENCE)
                    .ok_or_else(|| format!("confidence {c} is not in 0..={MAX_CONFIDENCE}"))?,
            ),
        };
        let scripts = bounded("scripts", self.scripts, MAX_LIST)?
            .into_iter()
            .map(|s| {
                let id = word("scripts[].id", s.id, MAX_SCRIPT_ID)?;
                if s.output.len() > MAX_SCRIPT_OUTPUT {
                    return Err(format!(
                        "scripts[].output longer than {MAX_SCRIPT_OUTPUT} bytes"
                    ));
                }
                Ok(Script {
                    id,
                    output: s.output,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Details {
            state,
            hostnames: hostnames(self.hostnames)?,
            cpe,
            extra_info,
            tunnel,
            confidence,
            scripts,
        })
    }
}

/// OS guesses of a host observation, validated.
pub fn os_guesses(v: Option<Vec<OsGuess>>) -> Result<Vec<OsGuess>, String> {
    let v = bounded("os", v, MAX_OS_GUESSES)?;
    for g in &v {
        if g.name.is_empty() || g.name.len() > MAX_SHORT_TEXT {
            return Err(format!("os[].name must be 1..={MAX_SHORT_TEXT} bytes"));
        }
        if g.accuracy > 100 {
            return Err(format!("os[].accuracy {} is not in 0..=100", g.accuracy));
        }
    }
    Ok(v)
}
