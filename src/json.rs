//! Reading JSON texts without copying them: a string borrowed from the input where it
//! holds no escapes.

use std::borrow::Cow;
use std::ops::Deref;

use serde::Deserialize;

/// A JSON string, borrowed from the input unless it has escapes. serde borrows a `Cow`
/// only as a field (or newtype) of its own, never inside an `Option` or another wrapper,
/// so wrappers hold this instead.
#[derive(Deserialize)]
pub struct Text<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_string_is_borrowed_and_an_escaped_one_owned() {
        let plain: Option<Text> = serde_json::from_str(r#""abc""#).unwrap();
        assert!(matches!(plain.map(|t| t.0), Some(Cow::Borrowed("abc"))));
        let escaped: Text = serde_json::from_str(r#""a\"c""#).unwrap();
        assert!(matches!(escaped.0, Cow::Owned(ref s) if s == "a\"c"));
    }
}
