//! [`Raw`]: a member's value as written in its line, borrowed.

use serde_json::value::RawValue;

/// The text of one JSON value inside a line (an id, a `requestId`, a
/// progress token, a member of `params`) exactly as written, borrowed from
/// the line.
///
/// Only a pass that has checked the text as one JSON value makes one: the
/// envelope's scan, serde, or spans taken from such a pass and checked
/// again by shape (`Raw::recut`). Borrowing serde's `&RawValue`
/// instead would parse each value again just to wrap it, and an id is read
/// twice per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// Wraps text the caller has just checked as one JSON value.
    pub(crate) fn checked(text: &'a str) -> Self {
        Self(text)
    }

    /// Checks `text` as one JSON value (surrounding whitespace included, as
    /// serde takes it) and wraps it; `None` when it is not one.
    pub(crate) fn parse(text: &'a str) -> Option<Self> {
        serde_json::from_str::<&RawValue>(text).ok().map(Self::from)
    }

    /// Text cut again from a line at a span that a checking pass recorded
    /// for it. The usual shapes are taken on their bytes alone: an integer
    /// without a leading zero, a string without escapes or control
    /// characters, each of them one whole JSON value. That guards against a
    /// span that no longer lies where it should; any other text is checked
    /// again by serde.
    pub(crate) fn recut(text: &'a str) -> Option<Self> {
        let plain = match text.as_bytes() {
            [b'"', inner @ .., b'"'] => !inner.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20),
            [b'-', digits @ ..] | digits @ [b'0'..=b'9', ..] => match digits {
                [b'0'] => true,
                [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
                _ => false,
            },
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
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(value: &'a RawValue) -> Self {
        Self(value.get())
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
            assert_eq!(Raw::parse(text).map(Raw::get), Some(text));
        }
        assert_eq!(Raw::parse("null").map(Raw::is_null), Some(true));
        assert_eq!(Raw::parse("\"null\"").map(Raw::is_null), Some(false));
        for bad in ["", "1 2", "{", "nul", "\"a"] {
            assert_eq!(Raw::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn recut_takes_plain_shapes_and_checks_the_rest() {
        for text in [
            "7",
            "0",
            "-0",
            "-12",
            "\"abc\"",
            "\"\"",
            "1.5",
            "\"a\\\"b\"",
            "null",
        ] {
            assert_eq!(Raw::recut(text).map(Raw::get), Some(text), "{text:?}");
        }
        // Serde refuses each of these too: no shape lets one through.
        for bad in [
            "",
            "-",
            "\"",
            "{\"j",
            "7,",
            "\"a\"b\"",
            "\"a\\\"",
            "01",
            "-01",
            "00",
            "\"\u{1}\"",
        ] {
            assert!(serde_json::from_str::<&RawValue>(bad).is_err(), "{bad:?}");
            assert_eq!(Raw::recut(bad), None, "{bad:?}");
        }
    }
}
