//! `Secret<T>`: a value that never prints itself, so tokens cannot reach a log line by
//! accident (`{:?}` and `{}` both show `**REDACTED**`).

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Self {
        Secret(value)
    }

    /// The only way to the value; grep for it to audit every use.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("**REDACTED**")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("**REDACTED**")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_the_value() {
        let s = Secret::new("tok_abc".to_string());
        assert_eq!(format!("{s} {s:?}"), "**REDACTED** **REDACTED**");
        assert_eq!(s.expose(), "tok_abc");
    }
}
