//! [`Raw`]: a member's value as written in its line, borrowed.

use serde_json::value::RawValue;

/// The text of one JSON value inside a line (an id, a `requestId`, a
/// progress token) exactly as written, borrowed from the line.
///
/// Only a pass that has checked the text as JSON makes one: the envelope's
/// scan, serde, or spans taken from such a pass. Borrowing serde's
/// `&RawValue` instead would parse each value again just to wrap it, and an
/// id is read twice per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// Wraps text already checked as one JSON value.
    pub(crate) fn checked(text: &'a str) -> Self {
        Self(text)
    }

    /// Checks `text` as one JSON value (surrounding whitespace included, as
    /// serde takes it) and wraps it; `None` when it is not one.
    pub fn parse(text: &'a str) -> Option<Self> {
        serde_json::from_str::<&RawValue>(text).ok().map(Self::from)
    }

    /// Text cut again from a line at a span that a checking pass recorded
    /// for it. The usual shapes (an integer, a string without escapes) are
    /// taken as they are: the pass checked them, and the shape only guards
    /// against a span that no longer lies where it should. Anything else is
    /// checked again.
    pub(crate) fn recut(text: &'a str) -> Option<Self> {
        let plain = match text.as_bytes() {
            [b'"', inner @ .., b'"'] => !inner.iter().any(|&b| b == b'"' || b == b'\\'),
            [b'-', digits @ ..] | digits @ [b'0'..=b'9', ..] => {
                !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
            }
            _ => false,
        };
        if plain {
            Some(Self(text))
        } else {
            Self::parse(text)
        }
    }

    /// The value's text, as written.
    pub fn get(self) -> &'a str {
        self.0
    }

    /// Whether the value is `null`.
    pub fn is_null(self) -> bool {
        self.0 == "null"
    }

    /// An owned copy, for a message built later.
    pub fn to_owned(self) -> Box<RawValue> {
        RawValue::from_string(self.0.to_owned())
            .unwrap_or_else(|e| unreachable!("a Raw holds checked JSON, but serde refused it: {e}"))
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(value: &'a RawValue) -> Self {
        Self(value.get())
    }
}

impl std::fmt::Display for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_takes_one_value_and_keeps_its_spelling() {
        for text in [
            "1",
            "1.0",
            "-0",
            "1e3",
            "\"a\\u0062\"",
            "null",
            "{\"a\":[1]}",
        ] {
            let raw = Raw::parse(text).expect("a value");
            assert_eq!(raw.get(), text);
            assert_eq!(raw.to_owned().get(), text);
        }
        assert_eq!(Raw::parse("null").map(Raw::is_null), Some(true));
        assert_eq!(Raw::parse("\"null\"").map(Raw::is_null), Some(false));
        for bad in ["", "1 2", "{", "nul", "\"a"] {
            assert_eq!(Raw::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn recut_takes_plain_shapes_and_checks_the_rest() {
        for text in ["7", "-12", "\"abc\"", "\"\"", "1.5", "\"a\\\"b\"", "null"] {
            assert_eq!(Raw::recut(text).map(Raw::get), Some(text), "{text:?}");
        }
        for bad in ["", "-", "\"", "{\"j", "7,", "\"a\"b\"", "\"a\\\""] {
            assert_eq!(Raw::recut(bad), None, "{bad:?}");
        }
    }
}
