//! A fact or execution-endpoint document's `_source` written straight into its bulk line:
//! its fields in ascending key order, encoded exactly as serialising the same
//! `serde_json::Value` object would (a map without `preserve_order` is a `BTreeMap`),
//! without building that tree.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde_json::Value;

/// Declares [`Key`]: each variant with its field name, in ascending name order.
macro_rules! keys {
    ($($key:ident => $name:literal,)*) => {
        /// Every field those documents have, declared in ascending name order: a field's
        /// place in a document is its discriminant, so writing one needs no sorting.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Key {
            $($key,)*
        }

        impl Key {
            /// Every key, in declaration (and so name) order.
            pub const ALL: [Key; [$($name),*].len()] = [$(Key::$key),*];

            /// The field's name in the document.
            pub fn name(self) -> &'static str {
                match self {
                    $(Key::$key => $name,)*
                }
            }

            /// `,"<name>":`, what precedes the field's value in a document (without the
            /// comma for the first field).
            fn member(self) -> &'static [u8] {
                match self {
                    $(Key::$key => concat!(",\"", $name, "\":").as_bytes(),)*
                }
            }
        }
    };
}

keys! {
    Banner => "banner",
    BatchIndex => "batch_index",
    Confidence => "confidence",
    Cpe => "cpe",
    DetailsDigest => "details_digest",
    ExecutionId => "execution_id",
    ExtraInfo => "extra_info",
    Hostnames => "hostnames",
    Ip => "ip",
    Name => "name",
    ObservedAt => "observed_at",
    Os => "os",
    OwnerId => "owner_id",
    Port => "port",
    Product => "product",
    RecordType => "record_type",
    ScannerId => "scanner_id",
    Scripts => "scripts",
    Service => "service",
    State => "state",
    Stream => "stream",
    Tags => "tags",
    TaskId => "task_id",
    Transport => "transport",
    Tunnel => "tunnel",
    Type => "type",
    UploadId => "upload_id",
    Value => "value",
    Version => "version",
}

/// One field's value.
pub enum Field<'a> {
    /// Any string: escaped as JSON requires.
    Text(&'a str),
    /// A string scanstore formatted or validated with no byte JSON escapes (UUIDs,
    /// canonical IP addresses, times, transports, stream names): copied as it is.
    Plain(&'a str),
    Number(u64),
    /// A time, as [`write_time`] writes it.
    Time(&'a DateTime<Utc>),
    /// An array of strings.
    Texts(&'a [String]),
    /// Anything else (details, OS guesses), as its `Value` serialises.
    Json(Value),
}

/// The fields of one document, pushed in any order.
pub struct Source<'a> {
    fields: [Option<Field<'a>>; Key::ALL.len()],
}

impl Default for Source<'_> {
    fn default() -> Self {
        Source {
            fields: [const { None }; Key::ALL.len()],
        }
    }
}

impl<'a> Source<'a> {
    /// Sets field `key` (a second push of one key replaces the first).
    pub fn push(&mut self, key: Key, value: Field<'a>) {
        self.fields[key as usize] = Some(value);
    }

    /// Appends the document as one JSON object, keys ascending.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        for (key, value) in Key::ALL.into_iter().zip(&self.fields) {
            let Some(value) = value else { continue };
            out.extend_from_slice(&key.member()[usize::from(first)..]);
            first = false;
            write_value(out, value);
        }
        out.push(b'}');
    }
}

fn write_value(out: &mut Vec<u8>, value: &Field<'_>) {
    // Writing into memory cannot fail.
    match value {
        Field::Text(s) => {
            let _ = serde_json::to_writer(&mut *out, s);
        }
        Field::Plain(s) => {
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
        }
        Field::Number(n) => out.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes()),
        Field::Time(t) => {
            out.push(b'"');
            write_time(out, t);
            out.push(b'"');
        }
        Field::Texts(v) => {
            let _ = serde_json::to_writer(&mut *out, v);
        }
        Field::Json(v) => {
            let _ = serde_json::to_writer(&mut *out, v);
        }
    }
}

/// Appends `t` in RFC 3339 UTC with milliseconds, the one time format of every document,
/// digit by digit as chrono writes it: every observation's documents have one, and chrono's
/// `fmt` machinery cost more than the rest of the field. Years beyond four digits and leap
/// seconds, which no batch passes, are left to chrono.
pub fn write_time(out: &mut Vec<u8>, t: &DateTime<Utc>) {
    // `DateTime`'s own accessors add the (zero) offset on every call.
    let n = t.naive_utc();
    let (year, nanos) = (n.year(), n.nanosecond());
    let year = match u32::try_from(year) {
        Ok(year @ 0..=9999) if nanos < 1_000_000_000 => year,
        _ => {
            out.extend_from_slice(t.to_rfc3339_opts(SecondsFormat::Millis, true).as_bytes());
            return;
        }
    };
    let mut put = |n: u32, width: u32, after: u8| {
        for place in (0..width).rev() {
            out.push(b'0' + (n / 10u32.pow(place) % 10) as u8);
        }
        out.push(after);
    };
    put(year, 4, b'-');
    put(n.month(), 2, b'-');
    put(n.day(), 2, b'T');
    put(n.hour(), 2, b':');
    put(n.minute(), 2, b':');
    put(n.second(), 2, b'.');
    put(nanos / 1_000_000, 3, b'Z');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_declared_in_name_order() {
        for (i, k) in Key::ALL.into_iter().enumerate() {
            assert_eq!(k as usize, i, "{k:?} out of place in ALL");
            assert_eq!(k.member(), format!(",\"{}\":", k.name()).as_bytes());
        }
        for pair in Key::ALL.windows(2) {
            assert!(
                pair[0].name() < pair[1].name(),
                "{:?} before {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn fields_are_written_as_the_value_tree_serialises() {
        let tags = vec!["b\"q".to_string(), "ü".to_string()];
        let mut s = Source::default();
        s.push(Key::Type, Field::Plain("endpoint"));
        s.push(Key::Banner, Field::Text("HTTP/1.1 200\r\n\"x\"\u{1}é"));
        s.push(Key::Port, Field::Number(443));
        s.push(Key::Tags, Field::Texts(&tags));
        s.push(
            Key::Os,
            Field::Json(json!([{"name": "Linux", "accuracy": 9}])),
        );
        s.push(Key::Hostnames, Field::Texts(&[]));
        s.push(Key::ExtraInfo, Field::Number(1));
        s.push(Key::ExecutionId, Field::Number(2));
        s.push(Key::Value, Field::Number(3));
        let mut out = Vec::new();
        s.write(&mut out);
        let want = json!({
            "type": "endpoint", "banner": "HTTP/1.1 200\r\n\"x\"\u{1}é", "port": 443,
            "tags": tags, "os": [{"name": "Linux", "accuracy": 9}], "hostnames": [],
            "extra_info": 1, "execution_id": 2, "value": 3,
        });
        assert_eq!(String::from_utf8(out).unwrap(), want.to_string());
    }
}
