//! The one-pass reading of a batch's observations array in its common shape: every
//! object read straight into one flat struct (no buffering of each object until its
//! `type` is found, as an internally tagged enum must), checked to hold exactly the
//! fields its type allows, and handed on as it is read. Anything else — a syntax error, an
//! unknown or misplaced field, a missing one, one the caller does not accept — is not
//! judged here: the general reading in `batch` decides, with its exact errors.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::batch::RawObservation;
use super::details::{Hostname, OsGuess, Script};
use crate::json::Text;

/// A field as sent: absent, `null`, or a value.
#[derive(Default)]
enum Sent<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Sent<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Sent<T>, D::Error> {
        Ok(Option::<T>::deserialize(d)?.map_or(Sent::Null, Sent::Value))
    }
}

impl<T> Sent<T> {
    fn sent(&self) -> bool {
        !matches!(self, Sent::Absent)
    }

    fn value(self) -> Option<T> {
        match self {
            Sent::Value(v) => Some(v),
            Sent::Absent | Sent::Null => None,
        }
    }
}

/// Every field any observation type has (absent ones are `Sent::Absent`, and an absent
/// `type` is empty).
#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct Flat<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    ip: Sent<Text<'a>>,
    port: Sent<i64>,
    #[serde(borrow)]
    transport: Sent<Text<'a>>,
    service: Sent<String>,
    product: Sent<String>,
    version: Sent<String>,
    banner: Sent<String>,
    #[serde(borrow)]
    observed_at: Sent<Text<'a>>,
    state: Sent<String>,
    hostnames: Sent<Vec<Hostname>>,
    cpe: Sent<Vec<String>>,
    extra_info: Sent<String>,
    tunnel: Sent<String>,
    confidence: Sent<i64>,
    scripts: Sent<Vec<Script>>,
    os: Sent<Vec<OsGuess>>,
    #[serde(borrow)]
    name: Sent<Text<'a>>,
    #[serde(borrow)]
    record_type: Sent<Text<'a>>,
    #[serde(borrow)]
    value: Sent<Text<'a>>,
}

const ENDPOINT_FIELDS: &[&str] = &[
    "ip",
    "port",
    "transport",
    "service",
    "product",
    "version",
    "banner",
    "observed_at",
    "state",
    "hostnames",
    "cpe",
    "extra_info",
    "tunnel",
    "confidence",
    "scripts",
];
const HOST_FIELDS: &[&str] = &["ip", "os", "hostnames", "observed_at"];
const DNS_FIELDS: &[&str] = &["name", "record_type", "value", "observed_at"];

impl<'a> Flat<'a> {
    /// `Some(())` when every field sent (even as `null`) is one of `allowed`.
    fn only(&self, allowed: &[&str]) -> Option<()> {
        let sent = [
            ("ip", self.ip.sent()),
            ("port", self.port.sent()),
            ("transport", self.transport.sent()),
            ("service", self.service.sent()),
            ("product", self.product.sent()),
            ("version", self.version.sent()),
            ("banner", self.banner.sent()),
            ("observed_at", self.observed_at.sent()),
            ("state", self.state.sent()),
            ("hostnames", self.hostnames.sent()),
            ("cpe", self.cpe.sent()),
            ("extra_info", self.extra_info.sent()),
            ("tunnel", self.tunnel.sent()),
            ("confidence", self.confidence.sent()),
            ("scripts", self.scripts.sent()),
            ("os", self.os.sent()),
            ("name", self.name.sent()),
            ("record_type", self.record_type.sent()),
            ("value", self.value.sent()),
        ];
        sent.iter()
            .all(|(field, sent)| !sent || allowed.contains(field))
            .then_some(())
    }

    /// The observation as the general reading reads it, when this is one it accepts.
    fn into_raw(self) -> Option<RawObservation<'a>> {
        match self.kind {
            "endpoint" => {
                self.only(ENDPOINT_FIELDS)?;
                Some(RawObservation::Endpoint {
                    ip: self.ip.value()?.0,
                    port: self.port.value()?,
                    transport: self.transport.value()?.0,
                    service: self.service.value(),
                    product: self.product.value(),
                    version: self.version.value(),
                    banner: self.banner.value(),
                    observed_at: self.observed_at.value()?.0,
                    state: self.state.value(),
                    hostnames: self.hostnames.value(),
                    cpe: self.cpe.value(),
                    extra_info: self.extra_info.value(),
                    tunnel: self.tunnel.value(),
                    confidence: self.confidence.value(),
                    scripts: self.scripts.value(),
                })
            }
            "host" => {
                self.only(HOST_FIELDS)?;
                Some(RawObservation::Host {
                    ip: self.ip.value()?.0,
                    os: self.os.value(),
                    hostnames: self.hostnames.value(),
                    observed_at: self.observed_at.value()?.0,
                })
            }
            "dns" => {
                self.only(DNS_FIELDS)?;
                Some(RawObservation::Dns {
                    name: self.name.value()?.0,
                    record_type: self.record_type.value()?.0,
                    value: self.value.value()?.0,
                    observed_at: self.observed_at.value()?.0,
                })
            }
            _ => None,
        }
    }
}

/// Bytes of the smallest observation a scanner typically sends: the array's length over
/// this bounds its count, so that the observations' vector is allocated once.
const SMALL_OBSERVATION_BYTES: usize = 96;

/// What `accept` makes of each observation of the array text `observations`, when every
/// one is of the common shape, at most `max` are sent and `accept` takes them all; `None`
/// leaves the array to the general reading.
pub fn read<'a, T>(
    observations: &'a str,
    max: usize,
    accept: impl FnMut(RawObservation<'a>) -> Option<T>,
) -> Option<Vec<T>> {
    let mut d = serde_json::Deserializer::from_str(observations);
    let items = Items {
        max,
        capacity: max.min(observations.len() / SMALL_OBSERVATION_BYTES + 1),
        accept,
        read: PhantomData,
    };
    let read = items.deserialize(&mut d).ok()?;
    d.end().ok()?;
    Some(read)
}

/// The array, each observation handed to `accept` as soon as it is read: no array of the
/// (large) flat structs is ever held or moved.
struct Items<'a, F, T> {
    max: usize,
    capacity: usize,
    accept: F,
    read: PhantomData<fn(RawObservation<'a>) -> T>,
}

impl<'a, F, T> DeserializeSeed<'a> for Items<'a, F, T>
where
    F: FnMut(RawObservation<'a>) -> Option<T>,
{
    type Value = Vec<T>;

    fn deserialize<D: Deserializer<'a>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'a, F, T> Visitor<'a> for Items<'a, F, T>
where
    F: FnMut(RawObservation<'a>) -> Option<T>,
{
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of observations")
    }

    fn visit_seq<A: SeqAccess<'a>>(mut self, mut items: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(self.capacity);
        while let Some(flat) = items.next_element::<Flat>()? {
            if out.len() == self.max {
                return Err(de::Error::custom("too many observations"));
            }
            let accepted = flat
                .into_raw()
                .and_then(&mut self.accept)
                .ok_or_else(|| de::Error::custom("not of the common shape"))?;
            out.push(accepted);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::value::RawValue;

    /// The general reading of each item, as `batch::parse` does it.
    fn general(observations: &str) -> Option<Vec<Result<RawObservation<'_>, String>>> {
        let raw: Vec<&RawValue> = serde_json::from_str(observations).ok()?;
        Some(
            raw.into_iter()
                .map(|r| serde_json::from_str(r.get()).map_err(|e| e.to_string()))
                .collect(),
        )
    }

    /// What the one-pass reading accepts, the general one reads the same way.
    fn agrees(observations: &str) -> bool {
        let fast = read(observations, usize::MAX, Some);
        if let Some(fast) = &fast {
            let general = general(observations).expect("an array the general reading reads");
            assert_eq!(
                general,
                fast.iter().cloned().map(Ok).collect::<Vec<_>>(),
                "{observations}"
            );
        }
        fast.is_some()
    }

    #[test]
    fn the_common_shapes_are_read_in_one_pass_and_unusual_ones_deferred() {
        for accepted in [
            "[]",
            r#"[{"banner":"a\"\n☃","ip":"10.0.0.1","observed_at":"t","port":80,"product":"p","service":"http","transport":"tcp","type":"endpoint","version":"1"}]"#,
            r#"[{"type":"endpoint","ip":"::1","port":1,"transport":"udp","observed_at":"t","service":null,"state":"closed","hostnames":[{"name":"a.b","source":"ptr"}],"cpe":["cpe:/a"],"extra_info":"x","tunnel":"ssl","confidence":3,"scripts":[{"id":"i","output":"o"}]}]"#,
            r#"[{"type":"host","ip":"10.0.0.1","os":[{"name":"L","accuracy":9}],"observed_at":"t"},{"type":"host","ip":"10.0.0.2","os":null,"observed_at":"t"}]"#,
            r#"[{"type":"dns","name":"a.b","record_type":"TXT","value":"v","observed_at":"t"}]"#,
        ] {
            assert!(agrees(accepted), "{accepted}");
        }
        for deferred in [
            "{}",
            "[1]",
            r#"[{"ip":"10.0.0.1","port":80,"transport":"tcp","observed_at":"t"}]"#,
            r#"[{"type":"Endpoint","ip":"10.0.0.1","port":80,"transport":"tcp","observed_at":"t"}]"#,
            r#"[{"type":"endp\u006fint","ip":"10.0.0.1","port":80,"transport":"tcp","observed_at":"t"}]"#,
            r#"[{"type":"endpoint","ip":"10.0.0.1","port":80,"transport":"tcp"}]"#,
            r#"[{"type":"endpoint","ip":null,"port":80,"transport":"tcp","observed_at":"t"}]"#,
            r#"[{"type":"endpoint","ip":"10.0.0.1","port":80,"transport":"tcp","observed_at":"t","os":null}]"#,
            r#"[{"type":"endpoint","ip":"10.0.0.1","port":80,"transport":"tcp","observed_at":"t","x":1}]"#,
            r#"[{"type":"endpoint","ip":"10.0.0.1","ip":"10.0.0.2","port":80,"transport":"tcp","observed_at":"t"}]"#,
            r#"[{"type":"endpoint","ip":"10.0.0.1","port":80.0,"transport":"tcp","observed_at":"t"}]"#,
            r#"[{"type":"host","ip":"10.0.0.1","port":80,"observed_at":"t"}]"#,
            r#"[{"type":"dns","name":"a","record_type":"A","value":"v","observed_at":"t","ip":null}]"#,
            r#"[{"type":"dns","name":"a","record_type":"A","observed_at":"t"}]"#,
        ] {
            assert!(!agrees(deferred), "{deferred}");
        }
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("null".to_string()),
            Just("\"10.0.0.1\"".to_string()),
            Just("\"t\\u00e9\\n\"".to_string()),
            Just("80".to_string()),
            Just("-1".to_string()),
            Just("1.5".to_string()),
            Just("true".to_string()),
            Just("[]".to_string()),
            Just(r#"[{"name":"a","source":"ptr"}]"#.to_string()),
            Just(r#"[{"name":"a","accuracy":7}]"#.to_string()),
            Just(r#"[{"id":"a","output":"o"}]"#.to_string()),
            Just(r#"["cpe:/a"]"#.to_string()),
            Just("{}".to_string()),
        ]
    }

    fn field() -> impl Strategy<Value = (String, String)> {
        let key = prop_oneof![
            Just("type"),
            Just("ip"),
            Just("port"),
            Just("transport"),
            Just("service"),
            Just("banner"),
            Just("observed_at"),
            Just("state"),
            Just("hostnames"),
            Just("cpe"),
            Just("confidence"),
            Just("scripts"),
            Just("os"),
            Just("name"),
            Just("record_type"),
            Just("value"),
            Just("other"),
        ];
        let kind = prop_oneof![
            Just("\"endpoint\""),
            Just("\"host\""),
            Just("\"dns\""),
            Just("\"other\"")
        ];
        (key, value(), kind).prop_map(|(k, v, kind)| {
            let v = if k == "type" { kind.to_string() } else { v };
            (k.to_string(), v)
        })
    }

    proptest! {
        /// Generated objects: whatever the one-pass reading accepts, the general one reads
        /// the same way.
        #[test]
        fn one_pass_reading_agrees_or_defers(
            objects in prop::collection::vec(
                (prop::collection::vec(field(), 0..8), prop_oneof![
                    Just("endpoint"), Just("host"), Just("dns")]),
                0..4)
        ) {
            let text = objects
                .iter()
                .map(|(fields, kind)| {
                    let mut base: Vec<(String, String)> = match *kind {
                        "endpoint" => vec![("ip", "\"1\""), ("port", "1"), ("transport", "\"t\"")],
                        "host" => vec![("ip", "\"1\"")],
                        _ => vec![("name", "\"n\""), ("record_type", "\"A\""), ("value", "\"v\"")],
                    }
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                    base.push(("type".into(), format!("\"{kind}\"")));
                    base.push(("observed_at".into(), "\"t\"".into()));
                    // Generated fields replace or join the base ones (duplicates too).
                    for (k, v) in fields {
                        match base.iter_mut().find(|(bk, _)| bk == k) {
                            Some(slot) if v.len() % 2 == 0 => slot.1 = v.clone(),
                            _ => base.push((k.clone(), v.clone())),
                        }
                    }
                    let body: Vec<String> =
                        base.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", body.join(","))
                })
                .collect::<Vec<_>>()
                .join(",");
            agrees(&format!("[{text}]"));
        }
    }
}
