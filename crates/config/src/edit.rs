//! Changing config files and env files in place, the way a person would.
//!
//! Every edit keeps what it does not touch: the other entries, fields
//! mcpvisor does not know, the order of keys, and in TOML the comments and
//! formatting (through `toml_edit`). A JSON file is rewritten from its
//! value tree (keys in their order, the file's indentation), so a JSON file
//! with comments (VS Code's, Cursor's) is refused rather than stripped of
//! them. A new entry takes the shape of the file's existing ones (VS Code's
//! `"type": "stdio"`, `envFile`).
//!
//! Every write is atomic: a temporary file in the same folder, then a
//! rename over the original, which keeps its mode (an env file is always
//! 0600). A symlinked file is written where the link points. The edited
//! config is loaded again before it is written: an edit that would leave
//! the file unloadable is refused.
//!
//! Errors never quote a value: env values are secrets, and config values
//! may be.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::server::{self, Dialect, Format};

mod ordered;
use ordered::Ordered;

/// An edit that was not made; the file is as it was.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: cannot write: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file does not load now, or would not after the edit.
    #[error(transparent)]
    Config(#[from] server::ConfigError),
    #[error(
        "{}: the file has comments, which rewriting it would lose; edit it by hand",
        path.display()
    )]
    Comments { path: PathBuf },
    #[error("{}: no server named {name:?}", path.display())]
    NoSuchServer { path: PathBuf, name: String },
    #[error("{}: a server named {name:?} is already there", path.display())]
    Exists { path: PathBuf, name: String },
    /// The file's layout is not one this module can change.
    #[error("{}: {message}", path.display())]
    Layout { path: PathBuf, message: String },
    /// An env file line or key that cannot be written.
    #[error("{}: {message}", path.display())]
    Env { path: PathBuf, message: String },
}

/// Adds the server `name` with the fields of `entry` (as in a JSON entry:
/// `command`, `args`, `env`, `env_file`, `env_keys`, `tools`, ...) to the
/// config file at `path`, after its other entries.
pub fn add_server(path: &Path, name: &str, entry: &Map<String, Value>) -> Result<(), EditError> {
    edit_config(path, |doc| doc.add(name, entry))
}

/// Sets one field of the server `name`'s entry (`env_file`, `disabled`,
/// ...), adding it when absent.
pub fn set_server_field(
    path: &Path,
    name: &str,
    key: &str,
    value: &Value,
) -> Result<(), EditError> {
    edit_config(path, |doc| doc.set(name, key, value))
}

/// Marks the server `name` disabled or enabled: `"disabled": true/false`,
/// and Codex's `enabled` flipped too when the entry uses it.
pub fn set_disabled(path: &Path, name: &str, disabled: bool) -> Result<(), EditError> {
    edit_config(path, |doc| {
        if doc.has_field(name, "enabled")? {
            doc.set(name, "enabled", &Value::Bool(!disabled))?;
            if doc.has_field(name, "disabled")? {
                doc.set(name, "disabled", &Value::Bool(disabled))?;
            }
            Ok(())
        } else {
            doc.set(name, "disabled", &Value::Bool(disabled))
        }
    })
}

/// The name of the env-file field in the file at `path`'s dialect:
/// `envFile` for VS Code, `env_file` otherwise.
pub fn env_file_field(path: &Path) -> Result<&'static str, EditError> {
    let file = server::load(path)?;
    Ok(match file.dialect() {
        Dialect::VsCode => "envFile",
        Dialect::McpServers | Dialect::Codex => "env_file",
    })
}

/// Sets `key=value` in the env file at `path` (created when missing),
/// keeping its other lines and comments; the file ends up mode 0600.
pub fn set_env_var(path: &Path, key: &str, value: &str) -> Result<(), EditError> {
    let env_error = |message: String| EditError::Env {
        path: path.to_owned(),
        message,
    };
    if !valid_env_key(key) {
        return Err(env_error(format!(
            "{key:?} is not a variable name (letters, digits and _, not starting with a digit)"
        )));
    }
    if value.contains('\0') {
        return Err(env_error(format!(
            "the value of {key:?} contains a NUL byte"
        )));
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => {
            return Err(EditError::Read {
                path: path.to_owned(),
                error,
            });
        }
    };
    let line = format!("{key}={}", quote_env(value));
    let mut out = String::with_capacity(text.len() + line.len() + 1);
    let mut replaced = false;
    for span in env_spans(&text) {
        match span {
            EnvSpan::Assign { key: k, .. } if k == key => {
                // The first assignment becomes the new one; later ones go.
                if !replaced {
                    out.push_str(&line);
                    out.push('\n');
                    replaced = true;
                }
            }
            EnvSpan::Assign { text, .. } | EnvSpan::Other(text) => {
                out.push_str(text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
    }
    if !replaced {
        out.push_str(&line);
        out.push('\n');
    }
    // The result must read back as the value written.
    let parsed = crate::secrets::parse_dotenv(&out, path).map_err(|e| env_error(e.to_string()))?;
    let back = parsed
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.expose());
    if back != Some(value) {
        return Err(env_error(format!(
            "the value of {key:?} would not read back as written"
        )));
    }
    write_atomic(path, out.as_bytes(), Some(0o600))
}

/// Whether `key` is a portable environment variable name.
pub fn valid_env_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && key.len() <= 256
}

/// The keys an env file sets, in order (never their values); a missing
/// file sets none.
pub fn env_keys(path: &Path) -> Result<Vec<String>, crate::SecretsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(crate::SecretsError::Read {
                path: path.to_owned(),
                error,
            });
        }
    };
    Ok(crate::secrets::parse_dotenv(&text, path)?
        .into_iter()
        .map(|(key, _)| key)
        .collect())
}

/// A value as dotenv text: bare when that reads back the same, else in
/// double quotes with `\`, `"`, `$` and newlines escaped.
fn quote_env(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.,:/+@%=~".contains(&b));
    if bare {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '$' => out.push_str("\\$"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A piece of an env file: one assignment (with the lines a quoted value
/// spans), or any other line.
enum EnvSpan<'a> {
    Assign { key: &'a str, text: &'a str },
    Other(&'a str),
}

fn env_spans(text: &str) -> Vec<EnvSpan<'_>> {
    let mut spans = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let line_end = rest.find('\n').map_or(rest.len(), |at| at + 1);
        let line = &rest[..line_end];
        let trimmed = line.trim();
        let assign = (!trimmed.starts_with('#'))
            .then(|| line.split_once('='))
            .flatten();
        let Some((lhs, _)) = assign else {
            spans.push(EnvSpan::Other(line));
            rest = &rest[line_end..];
            continue;
        };
        let key = lhs.trim();
        let key = key
            .strip_prefix("export")
            .filter(|k| k.starts_with(char::is_whitespace))
            .map_or(key, str::trim_start);
        // A quoted value may span lines: the span ends with the line of
        // its closing quote.
        let value_start = lhs.len() + 1;
        let value = rest[value_start..].trim_start_matches([' ', '\t']);
        let offset = rest.len() - value.len();
        let end = match value.chars().next() {
            Some(quote @ ('"' | '\'')) => closing_quote(&value[1..], quote)
                .map(|at| offset + 1 + at + 1)
                .map(|after| {
                    after
                        + rest[after..]
                            .find('\n')
                            .map_or(rest.len() - after, |at| at + 1)
                })
                .unwrap_or(line_end),
            _ => line_end,
        };
        spans.push(EnvSpan::Assign {
            key,
            text: &rest[..end],
        });
        rest = &rest[end..];
    }
    spans
}

/// The byte offset of the closing `quote` in `text` (escapes count in
/// double quotes only).
fn closing_quote(text: &str, quote: char) -> Option<usize> {
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if quote == '"' && c == '\\' && !escaped {
            escaped = true;
            continue;
        }
        if c == quote && !escaped {
            return Some(at);
        }
        escaped = false;
    }
    None
}

// === config files ===

/// A config file open for editing, in its own syntax.
enum Doc {
    Json {
        root: Ordered,
        at: &'static [&'static str],
        indent: String,
    },
    Toml(toml_edit::DocumentMut),
}

fn edit_config(
    path: &Path,
    change: impl FnOnce(&mut Editing<'_>) -> Result<(), EditError>,
) -> Result<(), EditError> {
    let real = real_path(path);
    let text = std::fs::read_to_string(&real).map_err(|error| EditError::Read {
        path: path.to_owned(),
        error,
    })?;
    let out = edit_text(&text, path, change)?;
    write_atomic(&real, out.as_bytes(), None)
}

/// `text` (a config file as if read from `path`) with the server `name`
/// added as [`add_server`] would write it; nothing is written.
pub fn add_server_text(
    text: &str,
    path: &Path,
    name: &str,
    entry: &Map<String, Value>,
) -> Result<String, EditError> {
    edit_text(text, path, |doc| doc.add(name, entry))
}

/// `text` (a config file as if read from `path`) without the server
/// `name`; nothing is written.
pub fn remove_server_text(text: &str, path: &Path, name: &str) -> Result<String, EditError> {
    edit_text(text, path, |doc| doc.remove(name))
}

fn edit_text(
    text: &str,
    path: &Path,
    change: impl FnOnce(&mut Editing<'_>) -> Result<(), EditError>,
) -> Result<String, EditError> {
    // It must load now: the edit then starts from a valid file.
    let loaded = server::parse(text, path)?;
    let format = server::document::detect(path, text);
    let doc = match format {
        Format::Json => open_json(text, path, loaded.dialect())?,
        Format::Toml => {
            Doc::Toml(
                text.parse()
                    .map_err(|e: toml_edit::TomlError| EditError::Layout {
                        path: path.to_owned(),
                        message: e.message().to_owned(),
                    })?,
            )
        }
    };
    let mut editing = Editing { doc, path };
    change(&mut editing)?;
    let mut out = editing.render()?;
    if text.ends_with('\n') && !out.ends_with('\n') {
        out.push('\n');
    }
    server::parse(&out, path)?;
    Ok(out)
}

fn open_json(text: &str, path: &Path, dialect: Dialect) -> Result<Doc, EditError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let stripped = server::document::strip_comments(text.as_bytes());
    if stripped != text.as_bytes() {
        return Err(EditError::Comments {
            path: path.to_owned(),
        });
    }
    let mut bytes = stripped;
    server::document::blank_trailing_commas(&mut bytes);
    let root: Ordered = serde_json::from_slice(&bytes).map_err(|e| EditError::Layout {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let at: &'static [&'static str] = match dialect {
        Dialect::McpServers => &["mcpServers"],
        Dialect::VsCode if root.get("servers").is_some() => &["servers"],
        Dialect::VsCode => &["mcp", "servers"],
        Dialect::Codex => {
            return Err(EditError::Layout {
                path: path.to_owned(),
                message: "a JSON file with a Codex table".to_owned(),
            });
        }
    };
    let indent = text
        .lines()
        .find_map(|line| {
            let spaces = line.len() - line.trim_start_matches([' ', '\t']).len();
            (spaces > 0 && !line.trim().is_empty()).then(|| line[..spaces].to_owned())
        })
        .unwrap_or_else(|| "  ".to_owned());
    Ok(Doc::Json { root, at, indent })
}

struct Editing<'a> {
    doc: Doc,
    path: &'a Path,
}

impl Editing<'_> {
    fn no_such(&self, name: &str) -> EditError {
        EditError::NoSuchServer {
            path: self.path.to_owned(),
            name: name.to_owned(),
        }
    }

    fn has_field(&mut self, name: &str, key: &str) -> Result<bool, EditError> {
        match &mut self.doc {
            Doc::Json { root, at, .. } => match json_table(root, at).and_then(|t| t.get(name)) {
                Some(entry @ Ordered::Object(_)) => Ok(entry.contains_key(key)),
                _ => Err(self.no_such(name)),
            },
            Doc::Toml(doc) => {
                let entry = doc
                    .get("mcp_servers")
                    .and_then(|t| t.as_table_like())
                    .and_then(|t| t.get(name))
                    .and_then(|e| e.as_table_like());
                match entry {
                    Some(entry) => Ok(entry.contains_key(key)),
                    None => Err(self.no_such(name)),
                }
            }
        }
    }

    fn set(&mut self, name: &str, key: &str, value: &Value) -> Result<(), EditError> {
        let no_such = self.no_such(name);
        match &mut self.doc {
            Doc::Json { root, at, .. } => {
                let entry = json_table(root, at)
                    .and_then(|t| t.get_mut(name))
                    .ok_or(no_such)?;
                if entry.insert(key, Ordered::from(value)) {
                    Ok(())
                } else {
                    Err(EditError::Layout {
                        path: self.path.to_owned(),
                        message: format!("server {name:?} is not an object"),
                    })
                }
            }
            Doc::Toml(doc) => {
                let entry = doc
                    .get_mut("mcp_servers")
                    .and_then(|t| t.as_table_like_mut())
                    .and_then(|t| t.get_mut(name))
                    .and_then(|e| e.as_table_like_mut())
                    .ok_or(no_such)?;
                let Some(value) = toml_value(value) else {
                    return Err(EditError::Layout {
                        path: self.path.to_owned(),
                        message: format!("{key:?} cannot be written in TOML"),
                    });
                };
                match entry.get_mut(key) {
                    // Keep the field's place and its comments.
                    Some(toml_edit::Item::Value(old)) => {
                        let decor = old.decor().clone();
                        *old = value;
                        *old.decor_mut() = decor;
                    }
                    _ => {
                        entry.insert(key, toml_edit::Item::Value(value));
                    }
                }
                Ok(())
            }
        }
    }

    fn add(&mut self, name: &str, entry: &Map<String, Value>) -> Result<(), EditError> {
        let exists = EditError::Exists {
            path: self.path.to_owned(),
            name: name.to_owned(),
        };
        match &mut self.doc {
            Doc::Json { root, at, .. } => {
                let table = json_table(root, at)
                    .filter(|t| matches!(t, Ordered::Object(_)))
                    .ok_or_else(|| EditError::Layout {
                        path: self.path.to_owned(),
                        message: "the servers table is not an object".to_owned(),
                    })?;
                if table.contains_key(name) {
                    return Err(exists);
                }
                let entry = json_shape(table, entry);
                table.insert(name, entry);
                Ok(())
            }
            Doc::Toml(doc) => {
                let root = doc.as_table_mut();
                if !root.contains_key("mcp_servers") {
                    let mut servers = toml_edit::Table::new();
                    servers.set_implicit(true);
                    root.insert("mcp_servers", toml_edit::Item::Table(servers));
                }
                let layout = self_layout(self.path);
                let servers = root
                    .get_mut("mcp_servers")
                    .and_then(|t| t.as_table_like_mut())
                    .ok_or_else(|| layout("[mcp_servers] is not a table"))?;
                if servers.contains_key(name) {
                    return Err(exists);
                }
                let mut table = toml_edit::Table::new();
                for (key, value) in in_order(entry) {
                    let value = toml_value(value)
                        .ok_or_else(|| layout("a field cannot be written in TOML"))?;
                    table.insert(key, toml_edit::Item::Value(value));
                }
                table.decor_mut().set_prefix("\n");
                servers.insert(name, toml_edit::Item::Table(table));
                Ok(())
            }
        }
    }

    fn remove(&mut self, name: &str) -> Result<(), EditError> {
        let no_such = self.no_such(name);
        match &mut self.doc {
            Doc::Json { root, at, .. } => match json_table(root, at) {
                Some(Ordered::Object(members)) if members.iter().any(|(k, _)| k == name) => {
                    members.retain(|(k, _)| k != name);
                    Ok(())
                }
                _ => Err(no_such),
            },
            Doc::Toml(doc) => doc
                .get_mut("mcp_servers")
                .and_then(|t| t.as_table_like_mut())
                .and_then(|t| t.remove(name))
                .map(drop)
                .ok_or(no_such),
        }
    }

    fn render(self) -> Result<String, EditError> {
        match self.doc {
            Doc::Json { root, indent, .. } => {
                let mut out = Vec::new();
                let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
                let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
                serde::Serialize::serialize(&root, &mut ser)
                    .map_err(|e| self_layout(self.path)(&e.to_string()))?;
                String::from_utf8(out).map_err(|e| self_layout(self.path)(&e.to_string()))
            }
            Doc::Toml(doc) => Ok(doc.to_string()),
        }
    }
}

fn self_layout(path: &Path) -> impl Fn(&str) -> EditError + '_ {
    move |message| EditError::Layout {
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

fn json_table<'a>(root: &'a mut Ordered, at: &[&str]) -> Option<&'a mut Ordered> {
    at.iter().try_fold(root, |node, key| node.get_mut(key))
}

/// The fields of a new entry in the order people write them: what runs
/// first, mcpvisor's own fields after, anything else last.
fn in_order(entry: &Map<String, Value>) -> Vec<(&String, &Value)> {
    const ORDER: [&str; 9] = [
        "type", "command", "args", "env", "cwd", "env_file", "envFile", "env_keys", "tools",
    ];
    let rank = |key: &str| ORDER.iter().position(|k| *k == key).unwrap_or(ORDER.len());
    let mut fields: Vec<(&String, &Value)> = entry.iter().collect();
    fields.sort_by_key(|(key, _)| rank(key));
    fields
}

/// `entry` in the shape of the table's stdio entries: VS Code's
/// `"type": "stdio"` first when they carry it, and `envFile` when they
/// spell it so.
fn json_shape(table: &Ordered, entry: &Map<String, Value>) -> Ordered {
    let stdio: Vec<&Ordered> = table
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, e)| e)
        .filter(|e| e.contains_key("command"))
        .collect();
    let stdio_type = Ordered::String("stdio".to_owned());
    let typed = !stdio.is_empty() && stdio.iter().all(|e| e.get("type") == Some(&stdio_type));
    let camel = stdio.iter().any(|e| e.contains_key("envFile"));
    let mut out = Ordered::Object(Vec::new());
    if typed && !entry.contains_key("type") {
        out.insert("type", stdio_type);
    }
    for (key, value) in in_order(entry) {
        let key = if camel && key == "env_file" {
            "envFile"
        } else {
            key
        };
        out.insert(key, Ordered::from(value));
    }
    out
}

/// A JSON value as TOML (objects as inline tables); `None` for `null`.
fn toml_value(value: &Value) -> Option<toml_edit::Value> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(items) => {
            let mut array = toml_edit::Array::new();
            for item in items {
                array.push(toml_value(item)?);
            }
            toml_edit::Value::Array(array)
        }
        Value::Object(map) => {
            let mut table = toml_edit::InlineTable::new();
            for (key, item) in map {
                table.insert(key, toml_value(item)?);
            }
            toml_edit::Value::InlineTable(table)
        }
    })
}

/// Where a write to `path` lands: the file a symlink points to.
fn real_path(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

/// Writes `bytes` to `path` through a temporary file in the same folder
/// and a rename. The file keeps its mode, or gets `mode` when given.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<(), EditError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = real_path(path);
    let write_error = |error: std::io::Error| EditError::Write {
        path: path.clone(),
        error,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let mode = match mode {
        Some(mode) => mode,
        None => std::fs::metadata(&path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".mcpvisor-edit-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(&dir)
        .map_err(write_error)?;
    temp.write_all(bytes).map_err(write_error)?;
    temp.as_file().sync_all().map_err(write_error)?;
    temp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(write_error)?;
    temp.persist(&path).map_err(|e| write_error(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests;
