//! Secrets for a server's environment: dotenv files and `--env KEY=VALUE`.
//!
//! A server's `env_file` is read again at every spawn by [`resolve_env`], so
//! a token added to the file is used by the next restart without reloading
//! anything. `env_keys` picks the keys to pass; when it is empty every key
//! of the file is passed. A listed key the file does not set is an error
//! rather than a silently missing variable, because a server started without
//! its token tends to fail later and less clearly.
//!
//! Values travel as [`Secret`], whose `Debug` and `Display` print `***`.
//! No error in this module contains a value: they name the file, the line
//! and the key.
//!
//! The dotenv dialect is the common one: `KEY=value`, optional `export `,
//! `#` comments (a `#` inside an unquoted value starts a comment only after
//! whitespace), single quotes taken literally, double quotes with `\n`,
//! `\t`, `\r`, `\"`, `\\` and `\$` escapes, and quoted values that span
//! lines (PEM keys). `$VAR` references are not expanded.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::server::ServerDef;

/// A value that must not appear in logs. `Debug` and `Display` print `***`;
/// [`Secret::expose`] is the one way to the text.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

/// Reading secrets failed. Messages never contain a secret's value.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The env file could not be read.
    #[error("{}: cannot read env file: {error}", path.display())]
    Read {
        /// The env file.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// A line of the env file is not `KEY=VALUE`.
    #[error("{}:{line}: {message}", path.display())]
    Syntax {
        /// The env file.
        path: PathBuf,
        /// 1-based line where the entry starts (or where the problem is).
        line: usize,
        /// What is wrong, without the line's text.
        message: String,
    },
    /// Keys listed in `env_keys` that the file does not set.
    #[error("{}: {} (listed in env_keys) {} not set in this file", path.display(), quote_all(keys), if keys.len() == 1 { "is" } else { "are" })]
    MissingKeys {
        /// The env file.
        path: PathBuf,
        /// The missing keys, in `env_keys` order.
        keys: Vec<String>,
    },
    /// A remote server's header cannot be filled in.
    #[error("header {header:?} {problem}")]
    Header {
        /// The header's name.
        header: String,
        /// What is wrong, without any value.
        problem: String,
    },
    /// A `--env` argument is not `KEY=VALUE`.
    #[error("--env: {0}")]
    Inline(String),
}

/// The variables that `def.env_file` contributes, read from disk now:
/// the keys in `def.env_keys` in that order, or every key of the file (in
/// file order) when `env_keys` is empty. Without an `env_file`, nothing.
/// Every value of the file is a secret from now on: the
/// [`crate::redact::global`] redactor learns them (replacing what it held
/// for that file).
pub fn resolve_env(def: &ServerDef) -> Result<Vec<(String, Secret)>, SecretsError> {
    let Some(path) = &def.env_file else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(path).map_err(|error| SecretsError::Read {
        path: path.clone(),
        error,
    })?;
    let vars = parse_dotenv(&text, path)?;
    crate::redact::global().learn(
        &format!("env_file:{}", path.display()),
        vars.iter().map(|(name, value)| (name, value.expose())),
    );
    if def.env_keys.is_empty() {
        return Ok(vars);
    }
    let mut picked = Vec::with_capacity(def.env_keys.len());
    let mut missing = Vec::new();
    for key in &def.env_keys {
        match vars.iter().find(|(name, _)| name == key) {
            Some((name, value)) => picked.push((name.clone(), value.clone())),
            None => missing.push(key.clone()),
        }
    }
    if missing.is_empty() {
        Ok(picked)
    } else {
        Err(SecretsError::MissingKeys {
            path: path.clone(),
            keys: missing,
        })
    }
}

/// A remote server's headers with their `${VAR}` (or VS Code's
/// `${env:VAR}`) placeholders filled, read now: from `def.env_file` (as
/// [`resolve_env`] reads it), then the entry's `env`, then mcpvisor's own
/// environment. A `$` not followed by `{` is kept as it is. A variable set
/// nowhere is an error that names the header and the variable, never a
/// value. The redactor learns each variable used, and each whole value
/// that was filled in or whose header's name says it is secret.
pub fn expand_headers(def: &ServerDef) -> Result<Vec<(String, Secret)>, SecretsError> {
    let needs_vars = def.headers.values().any(|v| v.contains("${"));
    let file = if needs_vars {
        resolve_env(def)?
    } else {
        Vec::new()
    };
    let mut used: Vec<(String, String)> = Vec::new();
    let lookup = |var: &str| -> Option<String> {
        if let Some((_, value)) = file.iter().find(|(name, _)| name == var) {
            return Some(value.expose().to_owned());
        }
        if let Some(value) = def.env.get(var) {
            return Some(value.clone());
        }
        std::env::var(var).ok()
    };
    let mut filled = Vec::with_capacity(def.headers.len());
    for (name, template) in &def.headers {
        let value =
            expand(template, &lookup, &mut used).map_err(|problem| SecretsError::Header {
                header: name.clone(),
                problem,
            })?;
        filled.push((name.clone(), Secret::new(value)));
    }
    // The variables used, and each whole value that came from one or is
    // secret by its header's name, are secrets from now on.
    let whole = def
        .headers
        .iter()
        .zip(&filled)
        .filter(|((name, template), _)| {
            template.contains("${") || crate::redact::is_secret_name(name)
        })
        .map(|((name, _), (_, value))| (name.clone(), value.expose().to_owned()));
    let learned: Vec<(String, String)> = used.into_iter().chain(whole).collect();
    crate::redact::global().learn(&headers_source(def), learned);
    Ok(filled)
}

/// Teaches the [`crate::redact::global`] redactor the values of `def`'s
/// `env` whose names say they are secret ([`crate::redact::is_secret_name`]),
/// and the values of `overrides` (`--env KEY=VALUE`) likewise.
pub fn learn_entry(def: &ServerDef, overrides: &[(String, String)]) {
    let entry = def
        .env
        .iter()
        .chain(overrides.iter().map(|(name, value)| (name, value)))
        .filter(|(name, _)| crate::redact::is_secret_name(name));
    crate::redact::global().learn(&entry_source(def), entry);
}

/// The redactor's source for `def`'s own `env`.
fn entry_source(def: &ServerDef) -> String {
    let file = def.source.as_deref().map(Path::display);
    match file {
        Some(file) => format!("env:{file}:{}", def.name),
        None => format!("env::{}", def.name),
    }
}

/// The redactor's source for `def`'s filled headers.
fn headers_source(def: &ServerDef) -> String {
    let file = def.source.as_deref().map(Path::display);
    match file {
        Some(file) => format!("headers:{file}:{}", def.name),
        None => format!("headers::{}", def.name),
    }
}

/// Fills `${VAR}` and `${env:VAR}` in `template`.
/// Each variable filled in is added to `used` with its value.
fn expand(
    template: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    used: &mut Vec<(String, String)>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| "has a \"${\" without its closing \"}\"".to_owned())?;
        let name = after[..end].trim();
        let name = name.strip_prefix("env:").unwrap_or(name);
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "has a placeholder that is not a variable name: {name:?}"
            ));
        }
        let value = lookup(name).ok_or_else(|| {
            format!("needs ${{{name}}}, which is set neither in env_file, env, nor the environment")
        })?;
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(format!("${{{name}}} holds a line break or NUL"));
        }
        out.push_str(&value);
        used.push((name.to_owned(), value));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Splits a `--env KEY=VALUE` argument. The value may contain `=` and may
/// be empty.
pub fn parse_inline(arg: &str) -> Result<(String, Secret), SecretsError> {
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| SecretsError::Inline("expected KEY=VALUE (no \"=\" found)".to_owned()))?;
    check_key(key).map_err(SecretsError::Inline)?;
    if value.contains('\0') {
        return Err(SecretsError::Inline(format!(
            "the value of {key:?} contains a NUL byte"
        )));
    }
    Ok((key.to_owned(), Secret::new(value)))
}

/// Parses dotenv `text` read from `path` (used only in errors). A key set
/// twice keeps its first position and its last value.
pub fn parse_dotenv(text: &str, path: &Path) -> Result<Vec<(String, Secret)>, SecretsError> {
    let syntax = |line: usize, message: String| SecretsError::Syntax {
        path: path.to_owned(),
        line,
        message,
    };
    let mut vars: Vec<(String, Secret)> = Vec::new();
    let mut rest = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut line_no = 0;
    while !rest.is_empty() {
        line_no += 1;
        let line_end = rest.find('\n').unwrap_or(rest.len());
        let line = &rest[..line_end];
        let after_line = rest.get(line_end + 1..).unwrap_or("");
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            rest = after_line;
            continue;
        }
        let eq = line
            .find('=')
            .ok_or_else(|| syntax(line_no, "expected KEY=VALUE".to_owned()))?;
        let key = line[..eq].trim();
        let key = key
            .strip_prefix("export")
            .filter(|k| k.starts_with(char::is_whitespace))
            .map_or(key, str::trim_start);
        check_key(key).map_err(|message| syntax(line_no, message))?;

        let value_text = rest[eq + 1..].trim_start_matches([' ', '\t']);
        let (value, next) = match value_text.chars().next() {
            Some(quote @ ('"' | '\'')) => {
                let start_line = line_no;
                let (value, after_quote) = unquote(&value_text[1..], quote).ok_or_else(|| {
                    syntax(start_line, format!("unterminated {quote} quote in {key:?}"))
                })?;
                let quoted = &value_text[..value_text.len() - after_quote.len()];
                line_no += quoted.matches('\n').count();
                let tail_end = after_quote.find('\n').unwrap_or(after_quote.len());
                let tail = after_quote[..tail_end].trim();
                if !(tail.is_empty() || tail.starts_with('#')) {
                    return Err(syntax(
                        line_no,
                        format!("unexpected text after the closing quote of {key:?}"),
                    ));
                }
                (value, after_quote.get(tail_end + 1..).unwrap_or(""))
            }
            _ => {
                let raw = &rest[eq + 1..line_end];
                (strip_comment(raw).trim().to_owned(), after_line)
            }
        };
        if value.contains('\0') {
            return Err(syntax(
                line_no,
                format!("the value of {key:?} contains a NUL byte"),
            ));
        }
        let value = Secret(value);
        match vars.iter_mut().find(|(name, _)| name == key) {
            Some(existing) => existing.1 = value,
            None => vars.push((key.to_owned(), value)),
        }
        rest = next;
    }
    Ok(vars)
}

/// The text up to the closing `quote` (unescaped for `"`), and what follows
/// the quote; `None` if it never closes.
fn unquote(text: &str, quote: char) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c == quote => {
                return Some((value.replace("\r\n", "\n"), &text[at + c.len_utf8()..]));
            }
            '\\' if quote == '"' => match chars.next()?.1 {
                'n' => value.push('\n'),
                'r' => value.push('\r'),
                't' => value.push('\t'),
                escaped @ ('"' | '\\' | '$') => value.push(escaped),
                other => {
                    value.push('\\');
                    value.push(other);
                }
            },
            c => value.push(c),
        }
    }
    None
}

/// Cuts an unquoted value at a `#` that follows whitespace.
fn strip_comment(raw: &str) -> &str {
    let mut previous_blank = true;
    for (at, c) in raw.char_indices() {
        if c == '#' && previous_blank {
            return &raw[..at];
        }
        previous_blank = c.is_whitespace();
    }
    raw
}

/// A variable name must be non-empty and free of `=`, NUL and whitespace.
fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        Err("the variable name is empty".to_owned())
    } else if key.contains(|c: char| c == '=' || c == '\0' || c.is_whitespace()) {
        Err(format!("invalid variable name {key:?}"))
    } else {
        Ok(())
    }
}

fn quote_all(keys: &[String]) -> String {
    keys.iter()
        .map(|key| format!("{key:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// === impl Secret ===

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for handing to the child process.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Unwraps the value.
    pub fn into_inner(self) -> String {
        self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Lets `Command::env(key, &secret)` take a secret directly.
impl AsRef<OsStr> for Secret {
    fn as_ref(&self) -> &OsStr {
        OsStr::new(&self.0)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

#[cfg(test)]
mod tests;
