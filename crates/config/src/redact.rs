//! Known secrets, replaced by `[redacted:NAME]` in what mcpvisor shows.
//!
//! mcpvisor learns secret values as it reads them: the values of an
//! `env_file` ([`crate::secrets::resolve_env`]), the entry's `env` and
//! `--env` values whose names look secret ([`is_secret_name`]), the values
//! that fill a remote server's headers ([`crate::secrets::expand_headers`]),
//! and the OAuth access tokens it sends. A [`Redactor`] holds them, grouped
//! by where they came from (a *source*: one env file, one entry's `env`, one
//! server's headers), so that reading a source again replaces what it held
//! before. Everything mcpvisor writes for people goes through one: its log
//! (a [`Writer`] under the tracing subscriber), the stderr it passes through
//! and keeps for crash reports, `error.data`, the web UI's API, `/metrics`,
//! and what `inspect` and `call` print. The bytes of the protocol it
//! forwards between a client and a server are never rewritten.
//!
//! A value is replaced wherever it occurs, also in the forms it takes
//! inside a JSON string: escaped as serde_json escapes (`"`, `\`, control
//! characters), with `\uXXXX` for every non-ASCII character (Python's
//! `json.dumps`), with `\/`, and escaped twice (a JSON document quoted in a
//! string). A value of several lines is also replaced line by line, since a
//! stderr line holds at most one of them. Values shorter than [`MIN_LEN`]
//! characters are not replaced: they would mostly hit ordinary words and
//! numbers (`true`, `8080`), and are too short to be worth a credential.
//!
//! Matching is one pass of an Aho-Corasick automaton over every form of
//! every value. Where matches overlap (two values that share text, or one
//! that is a prefix of another), the longest match at the leftmost position
//! wins and every byte covered by any match is replaced, so no part of a
//! value survives next to a placeholder.
//!
//! The process has one shared redactor, [`global`]: the log writer and the
//! stderr pumps need it before any server is read, and a secret of one
//! server may show up in what another prints. Its lock is held only to swap
//! an `Arc`, never across an `.await`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::{Arc, OnceLock, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};

/// Values shorter than this many characters are not redacted.
pub const MIN_LEN: usize = 6;

/// Parts of a variable or header name (matched case-insensitively,
/// anywhere in the name) that make its value a secret.
pub const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASS",
    "PWD",
    "AUTH",
    "CREDENTIAL",
    "PRIVATE",
    "COOKIE",
    "SESSION",
    "DSN",
];

/// The longest pending line a [`Writer`] holds before it writes it anyway.
pub const WRITER_MAX_PENDING: usize = 256 * 1024;

/// Whether a variable (or header) called `name` holds a secret by its name:
/// it contains one of [`SECRET_NAME_PARTS`], in any case (`GITHUB_TOKEN`,
/// `api_key`, `DB_PASSWORD`, `Authorization`). `PWD` alone (the working
/// directory of a shell) is not one.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if upper == "PWD" || upper == "OLDPWD" {
        return false;
    }
    SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
}

/// The process's one redactor. Everything that reads a secret teaches it
/// here; everything that writes for people asks it.
pub fn global() -> &'static Redactor {
    static GLOBAL: OnceLock<Redactor> = OnceLock::new();
    GLOBAL.get_or_init(Redactor::new)
}

/// Known secret values, and the replacing of them.
#[derive(Debug, Default)]
pub struct Redactor {
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per source, its `(name, value)` pairs.
    sources: BTreeMap<String, Vec<(String, String)>>,
    matcher: Arc<Matcher>,
}

/// The compiled automaton over every form of every value.
#[derive(Debug, Default)]
struct Matcher {
    automaton: Option<AhoCorasick>,
    /// The placeholder for each pattern of the automaton, by pattern id.
    placeholders: Vec<Arc<str>>,
}

// === impl Redactor ===

impl Redactor {
    /// A redactor that knows nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets what `source` holds: its `(NAME, value)` pairs replace the ones
    /// it held before. Values shorter than [`MIN_LEN`] are kept out.
    pub fn learn<N, V>(&self, source: &str, secrets: impl IntoIterator<Item = (N, V)>)
    where
        N: AsRef<str>,
        V: AsRef<str>,
    {
        let mut pairs: Vec<(String, String)> = secrets
            .into_iter()
            .filter(|(_, value)| value.as_ref().chars().count() >= MIN_LEN)
            .map(|(name, value)| (name.as_ref().to_owned(), value.as_ref().to_owned()))
            .collect();
        pairs.sort();
        pairs.dedup();
        let Ok(mut state) = self.state.write() else {
            return;
        };
        let unchanged = match state.sources.get(source) {
            Some(held) => *held == pairs,
            None => pairs.is_empty(),
        };
        if unchanged {
            return;
        }
        if pairs.is_empty() {
            state.sources.remove(source);
        } else {
            state.sources.insert(source.to_owned(), pairs);
        }
        state.matcher = Arc::new(Matcher::build(&state.sources));
    }

    /// Forgets what `source` held.
    pub fn forget(&self, source: &str) {
        self.learn::<&str, &str>(source, []);
    }

    /// Whether no value is known.
    pub fn is_empty(&self) -> bool {
        self.matcher().automaton.is_none()
    }

    /// `text` with every known value replaced by `[redacted:NAME]`;
    /// borrowed when nothing matched.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Matches of UTF-8 patterns in UTF-8 text fall on character
            // boundaries, and placeholders are UTF-8.
            Cow::Owned(bytes) => Cow::Owned(
                String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            ),
        }
    }

    /// [`Redactor::redact`] for bytes that need not be UTF-8 (a worker's
    /// stderr as it came).
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        self.matcher().apply(bytes)
    }

    /// Redacts, in place, every string of a JSON value (object keys
    /// included).
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        let matcher = self.matcher();
        if matcher.automaton.is_some() {
            redact_value(&matcher, value);
        }
    }

    /// Redacts each string in place.
    pub fn redact_all<'s>(&self, texts: impl IntoIterator<Item = &'s mut String>) {
        let matcher = self.matcher();
        if matcher.automaton.is_none() {
            return;
        }
        for text in texts {
            redact_string(&matcher, text);
        }
    }

    fn matcher(&self) -> Arc<Matcher> {
        self.state
            .read()
            .map(|state| Arc::clone(&state.matcher))
            .unwrap_or_default()
    }
}

fn redact_string(matcher: &Matcher, text: &mut String) {
    if let Cow::Owned(bytes) = matcher.apply(text.as_bytes()) {
        *text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    }
}

fn redact_value(matcher: &Matcher, value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(text) => redact_string(matcher, text),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value(matcher, v)),
        Value::Object(map) => {
            let redacted_key = map
                .keys()
                .any(|k| matches!(matcher.apply(k.as_bytes()), Cow::Owned(_)));
            if redacted_key {
                let old = std::mem::take(map);
                for (mut key, v) in old {
                    redact_string(matcher, &mut key);
                    map.insert(key, v);
                }
            }
            map.values_mut().for_each(|v| redact_value(matcher, v));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

// === impl Matcher ===

impl Matcher {
    fn build(sources: &BTreeMap<String, Vec<(String, String)>>) -> Self {
        let mut patterns: Vec<String> = Vec::new();
        let mut placeholders: Vec<Arc<str>> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, value) in sources.values().flatten() {
            let placeholder: Arc<str> = Arc::from(format!("[redacted:{name}]"));
            for form in forms(value) {
                if form.chars().count() >= MIN_LEN && seen.insert(form.clone()) {
                    patterns.push(form);
                    placeholders.push(Arc::clone(&placeholder));
                }
            }
        }
        if patterns.is_empty() {
            return Self::default();
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .ok();
        Self {
            automaton,
            placeholders,
        }
    }

    fn apply<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(automaton) = &self.automaton else {
            return Cow::Borrowed(bytes);
        };
        let mut found: Vec<(usize, usize, usize)> = automaton
            .find_overlapping_iter(bytes)
            .map(|m| (m.start(), m.end(), m.pattern().as_usize()))
            .collect();
        if found.is_empty() {
            return Cow::Borrowed(bytes);
        }
        // Leftmost first, and at one position the longest first.
        found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out = Vec::with_capacity(bytes.len());
        let mut covered = 0;
        for (start, end, pattern) in found {
            if end <= covered {
                continue;
            }
            if start >= covered {
                out.extend_from_slice(&bytes[covered..start]);
            }
            out.extend_from_slice(self.placeholders[pattern].as_bytes());
            covered = end;
        }
        out.extend_from_slice(&bytes[covered..]);
        Cow::Owned(out)
    }
}

/// The forms `value` may take in text: as it is, each of its lines, and
/// escaped inside a JSON string in the ways encoders do it.
fn forms(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    if value.contains('\n') {
        forms.extend(
            value
                .lines()
                .map(|line| line.trim_end_matches('\r').trim().to_owned()),
        );
    }
    let escaped = json_escape(value, false);
    forms.push(json_escape(value, true));
    if value.contains('/') {
        forms.push(escaped.replace('/', "\\/"));
    }
    forms.push(json_escape(&escaped, false));
    forms.push(escaped);
    forms.sort();
    forms.dedup();
    forms
}

/// The inside of a JSON string holding `value` (without the quotes), as
/// serde_json writes it, or with every non-ASCII character as `\uXXXX`.
fn json_escape(value: &str, ascii: bool) -> String {
    let quoted = serde_json::to_string(value).unwrap_or_default();
    let inner = quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(&quoted);
    if !ascii || inner.is_ascii() {
        return inner.to_owned();
    }
    let mut out = String::with_capacity(inner.len() * 2);
    for c in inner.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

// === impl Writer ===

/// An [`io::Write`] that redacts what goes through it, a line at a time, so
/// that a value split across two writes is still found. What is left of a
/// line is written on [`Write::flush`] and on drop; a line longer than
/// [`WRITER_MAX_PENDING`] is written in pieces of that size.
#[derive(Debug)]
pub struct Writer<'r, W: Write> {
    inner: W,
    redactor: &'r Redactor,
    pending: Vec<u8>,
}

impl<W: Write> Writer<'static, W> {
    /// A writer redacting with the [`global`] redactor.
    pub fn global(inner: W) -> Self {
        Self::new(inner, global())
    }
}

impl<'r, W: Write> Writer<'r, W> {
    /// A writer redacting with `redactor`.
    pub fn new(inner: W, redactor: &'r Redactor) -> Self {
        Self {
            inner,
            redactor,
            pending: Vec::new(),
        }
    }

    /// Writes the pending bytes up to and including `end`.
    fn write_out(&mut self, end: usize) -> io::Result<()> {
        let piece: Vec<u8> = self.pending.drain(..end).collect();
        let redacted = self.redactor.redact_bytes(&piece);
        self.inner.write_all(&redacted)
    }
}

impl<W: Write> Write for Writer<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(last) = self.pending.iter().rposition(|&b| b == b'\n') {
            self.write_out(last + 1)?;
        }
        while self.pending.len() > WRITER_MAX_PENDING {
            self.write_out(WRITER_MAX_PENDING)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.write_out(self.pending.len())?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for Writer<'_, W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests;
