//! Turning config text into a [`serde_json::Value`] tree.
//!
//! Both JSON and TOML become the same tree so that one validator
//! ([`super::entry`]) checks every dialect and words its errors the same way.
//! Syntax errors carry a line and column; nothing after this stage does,
//! because the value tree has no spans.
//!
//! The value tree sorts object keys, so the order in which the file lists
//! its servers is kept beside it as a [`KeyOrder`]: the gateway's "first in
//! config order wins" must mean the file's order, not the alphabet's.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{ConfigError, Format};

/// Chooses the syntax: by extension when it says, otherwise by content (a
/// JSON config starts with `{`; a TOML one never does).
pub(crate) fn detect(path: &Path, text: &str) -> Format {
    match path.extension().and_then(|ext| ext.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("toml") => Format::Toml,
        Some(ext) if ext.eq_ignore_ascii_case("json") || ext.eq_ignore_ascii_case("jsonc") => {
            Format::Json
        }
        _ => {
            let stripped = strip_comments(text.as_bytes());
            match stripped.iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'{') => Format::Json,
                _ => Format::Toml,
            }
        }
    }
}

/// The keys of every object in a document, in the order they were written.
///
/// Only objects have children; any other value is an empty `KeyOrder`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct KeyOrder(Vec<(String, KeyOrder)>);

/// Parses `text` in `format`, naming `path` in any syntax error; returns
/// the value tree and the order in which its keys were written.
pub(super) fn parse(
    text: &str,
    path: &Path,
    format: Format,
) -> Result<(Value, KeyOrder), ConfigError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match format {
        Format::Json => parse_json(text, path),
        Format::Toml => parse_toml(text, path),
    }
}

fn parse_json(text: &str, path: &Path) -> Result<(Value, KeyOrder), ConfigError> {
    // VS Code's and Cursor's files are JSON with comments and trailing
    // commas. Blanking those out byte for byte keeps every position, so
    // serde_json's line and column still point into the user's file.
    let mut bytes = strip_comments(text.as_bytes());
    blank_trailing_commas(&mut bytes);
    let syntax_error = |err: serde_json::Error| {
        let full = err.to_string();
        let suffix = format!(" at line {} column {}", err.line(), err.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
        ConfigError::Syntax {
            path: path.to_owned(),
            line: err.line().max(1),
            column: err.column().max(1),
            message,
            format: Format::Json,
        }
    };
    let value = serde_json::from_slice(&bytes).map_err(syntax_error)?;
    // A second, cheaper pass over the same bytes: it builds no values, only
    // the keys. Both passes accept the same text, so this cannot fail once
    // the first has succeeded.
    let order = serde_json::from_slice(&bytes).map_err(syntax_error)?;
    Ok((value, order))
}

fn parse_toml(text: &str, path: &Path) -> Result<(Value, KeyOrder), ConfigError> {
    let table: toml::Table = text.parse().map_err(|err: toml::de::Error| {
        let offset = err.span().map_or(0, |span| span.start);
        let (line, column) = line_column(text, offset);
        ConfigError::Syntax {
            path: path.to_owned(),
            line,
            column,
            message: one_line(err.message()),
            format: Format::Toml,
        }
    })?;
    // With toml's `preserve_order`, a table iterates in the file's order.
    let value = toml::Value::Table(table);
    let order = toml_key_order(&value);
    Ok((toml_to_json(value), order))
}

/// Joins a parser message's lines so that every error stays on one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

fn toml_key_order(value: &toml::Value) -> KeyOrder {
    match value {
        toml::Value::Table(table) => KeyOrder(
            table
                .iter()
                .map(|(key, value)| (key.clone(), toml_key_order(value)))
                .collect(),
        ),
        _ => KeyOrder::default(),
    }
}

fn toml_to_json(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::Number(i.into()),
        toml::Value::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(key, value)| (key, toml_to_json(value)))
                .collect::<Map<_, _>>(),
        ),
    }
}

// === impl KeyOrder ===

impl KeyOrder {
    /// The object found by following `path` from here, if every step is one.
    pub(super) fn at(&self, path: &[&str]) -> Option<&KeyOrder> {
        path.iter().try_fold(self, |node, key| {
            // A repeated JSON key counts where it first appeared.
            node.0
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, child)| child)
        })
    }

    /// This object's keys as written, each once.
    pub(super) fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = Vec::with_capacity(self.0.len());
        for (key, _) in &self.0 {
            if !keys.contains(&key.as_str()) {
                keys.push(key);
            }
        }
        keys
    }
}

impl<'de> Deserialize<'de> for KeyOrder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyOrderVisitor)
    }
}

/// Records object keys and skips every other value.
struct KeyOrderVisitor;

impl<'de> Visitor<'de> for KeyOrderVisitor {
    type Value = KeyOrder;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyOrder, A::Error> {
        let mut keys = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            keys.push((key, map.next_value::<KeyOrder>()?));
        }
        Ok(KeyOrder(keys))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyOrder, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(KeyOrder::default())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<KeyOrder, E> {
        Ok(KeyOrder::default())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<KeyOrder, E> {
        Ok(KeyOrder::default())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<KeyOrder, E> {
        Ok(KeyOrder::default())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<KeyOrder, E> {
        Ok(KeyOrder::default())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<KeyOrder, E> {
        Ok(KeyOrder::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<KeyOrder, E> {
        Ok(KeyOrder::default())
    }
}

/// Replaces `//` and `/* */` comments outside strings with spaces, keeping
/// newlines so that positions do not move.
pub(crate) fn strip_comments(input: &[u8]) -> Vec<u8> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Code,
        String { escaped: bool },
        LineComment,
        BlockComment,
    }
    let mut out = input.to_vec();
    let mut state = State::Code;
    let mut i = 0;
    while i < out.len() {
        let byte = out[i];
        let next = out.get(i + 1).copied();
        match state {
            State::Code => match (byte, next) {
                (b'"', _) => state = State::String { escaped: false },
                (b'/', Some(b'/')) => {
                    state = State::LineComment;
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 1;
                }
                (b'/', Some(b'*')) => {
                    state = State::BlockComment;
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 1;
                }
                _ => {}
            },
            State::String { escaped } => {
                state = match byte {
                    b'\\' if !escaped => State::String { escaped: true },
                    b'"' if !escaped => State::Code,
                    _ => State::String { escaped: false },
                };
            }
            State::LineComment => {
                if byte == b'\n' {
                    state = State::Code;
                } else {
                    out[i] = b' ';
                }
            }
            State::BlockComment => {
                if byte == b'*' && next == Some(b'/') {
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 1;
                    state = State::Code;
                } else if byte != b'\n' {
                    out[i] = b' ';
                }
            }
        }
        i += 1;
    }
    out
}

/// Blanks a `,` that is followed (after whitespace) by `}` or `]`.
pub(crate) fn blank_trailing_commas(bytes: &mut [u8]) {
    let mut in_string = false;
    let mut escaped = false;
    for i in 0..bytes.len() {
        let byte = bytes[i];
        if in_string {
            match byte {
                b'\\' if !escaped => escaped = true,
                b'"' if !escaped => in_string = false,
                _ => escaped = false,
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b',' => {
                let closes = bytes[i + 1..]
                    .iter()
                    .find(|b| !b.is_ascii_whitespace())
                    .is_some_and(|b| matches!(b, b'}' | b']'));
                if closes {
                    bytes[i] = b' ';
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripped(text: &str) -> String {
        let mut bytes = strip_comments(text.as_bytes());
        blank_trailing_commas(&mut bytes);
        String::from_utf8(bytes).expect("stripping keeps UTF-8")
    }

    #[test]
    fn comments_and_trailing_commas_become_spaces() {
        assert_eq!(stripped("{\"a\": 1, // hi\n}"), "{\"a\": 1       \n}");
        assert_eq!(stripped("[1, /* x\ny */ 2,]"), "[1,     \n     2 ]");
        // Inside strings nothing changes, escaped quotes included.
        assert_eq!(
            stripped(r#"{"u": "http://x/*y*/", "q": "a\"//b",}"#),
            r#"{"u": "http://x/*y*/", "q": "a\"//b" }"#
        );
    }

    #[test]
    fn detect_by_extension_then_content() {
        assert_eq!(detect(Path::new("a.toml"), "{"), Format::Toml);
        assert_eq!(detect(Path::new("a.JSON"), "x = 1"), Format::Json);
        assert_eq!(detect(Path::new("config"), "// c\n {}"), Format::Json);
        assert_eq!(detect(Path::new("config"), "[mcp_servers.a]"), Format::Toml);
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncdé\nf", 0), (1, 1));
        assert_eq!(line_column("ab\ncdé\nf", 3), (2, 1));
        assert_eq!(line_column("ab\ncdé\nf", 8), (3, 1));
        assert_eq!(line_column("ab\ncdé\nf", 7), (2, 4));
    }

    #[test]
    fn toml_becomes_json_values() {
        let (value, _) = parse(
            "a = 1\nb = 1.5\nc = [true, \"x\"]\nd = 1979-05-27\n[t]\nk = \"v\"\n",
            Path::new("c.toml"),
            Format::Toml,
        )
        .expect("valid TOML");
        assert_eq!(
            value,
            serde_json::json!({"a": 1, "b": 1.5, "c": [true, "x"], "d": "1979-05-27", "t": {"k": "v"}})
        );
    }

    #[test]
    fn key_order_is_the_file_order() {
        let json = r#"{"z": 1, "mcpServers": {"b": {"command": "x", "y": {"k": 1}}, "a": [], "c": null, "b": 2}}"#;
        let (_, order) = parse(json, Path::new("c.json"), Format::Json).expect("valid JSON");
        assert_eq!(order.keys(), ["z", "mcpServers"]);
        let servers = order.at(&["mcpServers"]).expect("an object");
        assert_eq!(
            servers.keys(),
            ["b", "a", "c"],
            "a repeated key counts once"
        );
        assert_eq!(servers.at(&["b", "y"]).map(KeyOrder::keys), Some(vec!["k"]));
        assert_eq!(order.at(&["nope"]), None);

        let toml = "[mcp_servers.zeta]\ncommand = \"z\"\n[mcp_servers.alpha]\ncommand = \"a\"\n\
                    [mcp_servers.mid]\ncommand = \"m\"\n";
        let (_, order) = parse(toml, Path::new("c.toml"), Format::Toml).expect("valid TOML");
        assert_eq!(
            order.at(&["mcp_servers"]).map(KeyOrder::keys),
            Some(vec!["zeta", "alpha", "mid"])
        );
    }
}
