//! Where each entry's `command` and `args` are in a config file's text.
//!
//! Wrapping changes a few tokens and leaves every other byte where it was,
//! so it needs positions, not a value tree. JSON is located on the text with
//! its comments and trailing commas blanked out (the same blanking the
//! loader does, which keeps every byte's position): serde_json's borrowed
//! [`RawValue`]s are slices of that text, and a slice's address gives its
//! offset. TOML is located with `toml_edit`'s parsed document, which keeps
//! the span of every value.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::server::{Dialect, Format, document};

/// Where one entry's fields are.
#[derive(Debug, Clone)]
pub(super) struct EntrySpans {
    /// The `command` value's token, quotes included.
    pub command: Range<usize>,
    /// The `args` array, when there is one.
    pub args: Option<ArgsSpans>,
    /// Where a new `args` field goes: right after the command's value in
    /// JSON and inline tables, at the end of the command's line in a TOML
    /// table.
    pub insert_at: usize,
    /// How a new field is written at `insert_at`.
    pub style: Style,
}

/// An `args` array: the whole of it, brackets included, and each item.
#[derive(Debug, Clone)]
pub(super) struct ArgsSpans {
    pub whole: Range<usize>,
    pub items: Vec<Range<usize>>,
}

/// The syntax a new `args` field is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Style {
    /// `, "args": [...]`
    Json,
    /// `, args = [...]` (an inline table)
    TomlInline,
    /// `\nargs = [...]` (a table of its own), with the file's line ending.
    TomlTable { crlf: bool },
}

impl Style {
    /// The text that adds `args` holding `items` (already tokens).
    pub fn new_field(self, items: &str) -> String {
        match self {
            Style::Json => format!(", \"args\": [{items}]"),
            Style::TomlInline => format!(", args = [{items}]"),
            Style::TomlTable { crlf: false } => format!("\nargs = [{items}]"),
            Style::TomlTable { crlf: true } => format!("\r\nargs = [{items}]"),
        }
    }
}

/// The spans of every entry with a string `command`, by name. `text` has
/// loaded as a config file of `format` and `dialect` already.
pub(super) fn locate(
    text: &str,
    format: Format,
    dialect: Dialect,
) -> Result<BTreeMap<String, EntrySpans>, String> {
    // A byte-order mark is not part of the document; positions count it.
    let (skip, body) = match text.strip_prefix('\u{feff}') {
        Some(body) => (text.len() - body.len(), body),
        None => (0, text),
    };
    let mut spans = match format {
        Format::Json => locate_json(body, dialect)?,
        Format::Toml => locate_toml(body)?,
    };
    if skip > 0 {
        for entry in spans.values_mut() {
            entry.shift(skip);
        }
    }
    Ok(spans)
}

impl EntrySpans {
    fn shift(&mut self, by: usize) {
        let move_range = |range: &mut Range<usize>| *range = range.start + by..range.end + by;
        move_range(&mut self.command);
        if let Some(args) = &mut self.args {
            move_range(&mut args.whole);
            args.items.iter_mut().for_each(move_range);
        }
        self.insert_at += by;
    }
}

// === JSON ===

/// An object's members in the order written, values as raw slices.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'a> Members<'a> {
    fn get(&self, key: &str) -> Option<&'a RawValue> {
        // A repeated key means its last value, as serde_json reads it.
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// An array's items as raw slices.
struct Items<'a>(Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for Items<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ItemsVisitor;
        impl<'de> Visitor<'de> for ItemsVisitor {
            type Value = Items<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'de>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<&'de RawValue>()? {
                    items.push(item);
                }
                Ok(Items(items))
            }
        }
        deserializer.deserialize_seq(ItemsVisitor)
    }
}

fn locate_json(text: &str, dialect: Dialect) -> Result<BTreeMap<String, EntrySpans>, String> {
    let mut bytes = document::strip_comments(text.as_bytes());
    document::blank_trailing_commas(&mut bytes);
    // Blanking writes ASCII spaces over whole comments, so the bytes stay
    // UTF-8.
    let plain = std::str::from_utf8(&bytes).map_err(|e| e.to_string())?;
    let span = |raw: &RawValue| {
        let start = raw.get().as_ptr() as usize - plain.as_ptr() as usize;
        start..start + raw.get().len()
    };
    fn object(raw: &RawValue) -> Option<Members<'_>> {
        serde_json::from_str(raw.get()).ok()
    }
    let root: Members<'_> = serde_json::from_str(plain).map_err(|e| e.to_string())?;
    let table = match dialect {
        Dialect::McpServers => root.get("mcpServers"),
        Dialect::VsCode => root.get("servers").or_else(|| {
            root.get("mcp")
                .and_then(object)
                .and_then(|m| m.get("servers"))
        }),
        Dialect::Codex => None,
    }
    .and_then(object)
    .ok_or("the servers table was not found")?;

    let mut spans = BTreeMap::new();
    for (name, value) in &table.0 {
        let Some(entry) = object(value) else { continue };
        let Some(command) = entry.get("command") else {
            continue;
        };
        if !command.get().starts_with('"') {
            continue;
        }
        let args = match entry.get("args") {
            Some(raw) => match serde_json::from_str::<Items<'_>>(raw.get()) {
                Ok(items) => Some(ArgsSpans {
                    whole: span(raw),
                    items: items.0.into_iter().map(span).collect(),
                }),
                Err(_) => continue,
            },
            None => None,
        };
        let command = span(command);
        spans.insert(
            name.clone(),
            EntrySpans {
                insert_at: command.end,
                command,
                args,
                style: Style::Json,
            },
        );
    }
    Ok(spans)
}

// === TOML ===

fn locate_toml(text: &str) -> Result<BTreeMap<String, EntrySpans>, String> {
    let doc = toml_edit::Document::parse(text).map_err(|e| e.message().to_owned())?;
    let table = doc
        .as_table()
        .get("mcp_servers")
        .and_then(|t| t.as_table_like())
        .ok_or("no [mcp_servers] table")?;
    let mut spans = BTreeMap::new();
    for (name, item) in table.iter() {
        let inline = matches!(
            item,
            toml_edit::Item::Value(toml_edit::Value::InlineTable(_))
        );
        let Some(entry) = item.as_table_like() else {
            continue;
        };
        let Some(command) = entry.get("command").and_then(|c| c.as_value()) else {
            continue;
        };
        let Some(command_span) = command.span().filter(|_| command.is_str()) else {
            continue;
        };
        let args = match entry.get("args").map(|a| a.as_array()) {
            Some(Some(array)) => {
                let Some(whole) = array.span() else { continue };
                let items: Option<Vec<Range<usize>>> = array.iter().map(|v| v.span()).collect();
                let Some(items) = items else { continue };
                Some(ArgsSpans { whole, items })
            }
            Some(None) => continue,
            None => None,
        };
        let (insert_at, style) = if inline {
            (command_span.end, Style::TomlInline)
        } else {
            let line_end = text[command_span.end..]
                .find('\n')
                .map_or(text.len(), |at| command_span.end + at);
            // A CRLF file keeps its `\r` before the line's end.
            let crlf = text[..line_end].ends_with('\r');
            let line_end = if crlf { line_end - 1 } else { line_end };
            (line_end, Style::TomlTable { crlf })
        };
        spans.insert(
            name.to_owned(),
            EntrySpans {
                command: command_span,
                args,
                insert_at,
                style,
            },
        );
    }
    Ok(spans)
}
