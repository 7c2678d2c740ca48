//! The one-pass reading of a batch's observations array in its common shape: every
//! object read straight into one flat struct (no buffering of each object until its
//! `type` is found, as an internally tagged enum must), then checked to hold exactly the
//! fields its type allows. Anything else — a syntax error, an unknown or misplaced field,
//! a missing one — is not judged here: the general reading in `batch` decides, with its
//! exact errors.

use serde::{Deserialize, Deserializer};

use super::batch::RawObservation;
use super::details::{Hostname, OsGuess, Script};

/// A field as sent: absent (`None`), `null` (`Some(None)`) or a value.
type Sent<T> = Option<Option<T>>;

fn sent<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Sent<T>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Every field any observation type has.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Flat<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(default, deserialize_with = "sent")]
    ip: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    port: Sent<i64>,
    #[serde(default, deserialize_with = "sent")]
    transport: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    service: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    product: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    version: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    banner: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    observed_at: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    state: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    hostnames: Sent<Vec<Hostname>>,
    #[serde(default, deserialize_with = "sent")]
    cpe: Sent<Vec<String>>,
    #[serde(default, deserialize_with = "sent")]
    extra_info: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    tunnel: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    confidence: Sent<i64>,
    #[serde(default, deserialize_with = "sent")]
    scripts: Sent<Vec<Script>>,
    #[serde(default, deserialize_with = "sent")]
    os: Sent<Vec<OsGuess>>,
    #[serde(default, deserialize_with = "sent")]
    name: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    record_type: Sent<String>,
    #[serde(default, deserialize_with = "sent")]
    value: Sent<String>,
}

/// `Some(())` when none of the fields was sent, not even as `null`.
fn none_sent(sent: &[bool]) -> Option<()> {
    (!sent.iter().any(|s| *s)).then_some(())
}

impl Flat<'_> {
    /// The observation as the general reading reads it, when this is one it accepts.
    fn into_raw(self) -> Option<RawObservation> {
        match self.kind {
            "endpoint" => {
                none_sent(&[
                    self.os.is_some(),
                    self.name.is_some(),
                    self.record_type.is_some(),
                    self.value.is_some(),
                ])?;
                Some(RawObservation::Endpoint {
                    ip: self.ip??,
                    port: self.port??,
                    transport: self.transport??,
                    service: self.service.flatten(),
                    product: self.product.flatten(),
                    version: self.version.flatten(),
                    banner: self.banner.flatten(),
                    observed_at: self.observed_at??,
                    state: self.state.flatten(),
                    hostnames: self.hostnames.flatten(),
                    cpe: self.cpe.flatten(),
                    extra_info: self.extra_info.flatten(),
                    tunnel: self.tunnel.flatten(),
                    confidence: self.confidence.flatten(),
                    scripts: self.scripts.flatten(),
                })
            }
            "host" => {
                none_sent(&[
                    self.port.is_some(),
                    self.transport.is_some(),
                    self.service.is_some(),
                    self.product.is_some(),
                    self.version.is_some(),
                    self.banner.is_some(),
                    self.state.is_some(),
                    self.cpe.is_some(),
                    self.extra_info.is_some(),
                    self.tunnel.is_some(),
                    self.confidence.is_some(),
                    self.scripts.is_some(),
                    self.name.is_some(),
                    self.record_type.is_some(),
                    self.value.is_some(),
                ])?;
                Some(RawObservation::Host {
                    ip: self.ip??,
                    os: self.os.flatten(),
                    hostnames: self.hostnames.flatten(),
                    observed_at: self.observed_at??,
                })
            }
            "dns" => {
                none_sent(&[
                    self.ip.is_some(),
                    self.port.is_some(),
                    self.transport.is_some(),
                    self.service.is_some(),
                    self.product.is_some(),
                    self.version.is_some(),
                    self.banner.is_some(),
                    self.state.is_some(),
                    self.hostnames.is_some(),
                    self.cpe.is_some(),
                    self.extra_info.is_some(),
                    self.tunnel.is_some(),
                    self.confidence.is_some(),
                    self.scripts.is_some(),
                    self.os.is_some(),
                ])?;
                Some(RawObservation::Dns {
                    name: self.name??,
                    record_type: self.record_type??,
                    value: self.value??,
                    observed_at: self.observed_at??,
                })
            }
            _ => None,
        }
    }
}

/// The observations of the array text `observations`, when every one is of the common
/// shape; `None` leaves the array to the general reading.
pub fn read(observations: &str) -> Option<Vec<RawObservation>> {
    let flat: Vec<Flat> = serde_json::from_str(observations).ok()?;
    flat.into_iter().map(Flat::into_raw).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::value::RawValue;

    /// The general reading of each item, as `batch::parse` does it.
    fn general(observations: &str) -> Option<Vec<Result<RawObservation, String>>> {
        let raw: Vec<&RawValue> = serde_json::from_str(observations).ok()?;
        Some(
            raw.into_iter()
                .map(|r| serde_json::from_str(r.get()).map_err(|e| e.to_string()))
                .collect(),
        )
    }

    /// What the one-pass reading accepts, the general one reads the same way.
    fn agrees(observations: &str) -> bool {
        let fast = read(observations);
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
