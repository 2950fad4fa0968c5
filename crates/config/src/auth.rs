//! Spotting a worker that waits for someone to authorize it in a browser.
//!
//! OAuth bridges such as `mcp-remote` print an authorization URL on stderr
//! and hold the `initialize` handshake open until the user has been through
//! the browser flow. mcpvisor watches stderr for that URL so that it can show
//! it and wait longer ([`crate::server::ServerDef::auth_timeout`]).
//!
//! [`AuthDetector`] sees stderr one line at a time and knows two shapes:
//!
//! * mcp-remote's: a line `Please authorize this client by visiting:` and
//!   the URL alone on the next line. More generally, a line with an
//!   authorization hint that ends in `:` and has no URL makes the next
//!   non-blank line's URL the answer.
//! * A generic prompt: one line with both a hint and a URL, such as
//!   `Open this link to authorize: https://...`.
//!
//! A hint is `authorize`/`authorise`/`authorization`, `OAuth`, or
//! `visit`/`open` followed by `this` or `the following`. Hints are looked
//! for outside URLs, so a log line that merely requests
//! `https://host/oauth/authorize` is not a prompt. For the one-line shape,
//! URLs that cannot be what a person should open are skipped: loopback
//! addresses (mcp-remote's own callback server) and `/.well-known/`
//! discovery documents. ANSI colour codes and trailing punctuation are
//! removed.

use std::borrow::Cow;

/// Watches a worker's stderr, line by line, for an authorization URL.
#[derive(Debug, Clone, Default)]
pub struct AuthDetector {
    /// The previous line announced a URL on the line after it.
    expect_url: bool,
}

impl AuthDetector {
    /// A detector that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks at the next stderr line (with or without its line ending) and
    /// returns the authorization URL if this line completes a prompt.
    pub fn feed(&mut self, line: &str) -> Option<String> {
        let clean = strip_ansi(line);
        let text = clean.trim();
        if self.expect_url {
            // mcp-remote's message starts with "\n", so blank lines and a
            // bare "[pid]" prefix can sit between the prompt and the URL.
            if is_blank(text) {
                return None;
            }
            self.expect_url = false;
            if let Some(url) = urls(text).next() {
                return Some(url.to_owned());
            }
        }
        if !has_hint(text) {
            return None;
        }
        let mut found = urls(text).peekable();
        if found.peek().is_none() {
            self.expect_url = text.ends_with(':');
            return None;
        }
        found.find(|url| can_be_opened(url)).map(str::to_owned)
    }

    /// Forgets a pending prompt, e.g. when a new worker starts.
    pub fn reset(&mut self) {
        self.expect_url = false;
    }
}

/// Removes ANSI escape sequences: CSI (colours, cursor moves), OSC (titles,
/// hyperlinks), character-set designations and two-character escapes.
pub fn strip_ansi(text: &str) -> Cow<'_, str> {
    if !text.contains('\u{1b}') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // CSI: parameters and intermediates, then one final byte.
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ESC '\'.
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            // Character-set designations carry one more character.
            Some('(' | ')' | '*' | '+') => {
                chars.next();
            }
            _ => {}
        }
    }
    Cow::Owned(out)
}

/// Empty, or only the `[pid]` prefix mcp-remote puts on its messages.
fn is_blank(text: &str) -> bool {
    text.is_empty()
        || text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .is_some_and(|pid| pid.chars().all(|c| c.is_ascii_digit()))
}

/// Whether the text outside URLs asks the reader to authorize.
fn has_hint(text: &str) -> bool {
    let mut prose = text.to_ascii_lowercase();
    for url in urls(text) {
        prose = prose.replace(&url.to_ascii_lowercase(), " ");
    }
    if ["authoriz", "authoris", "oauth"]
        .iter()
        .any(|hint| prose.contains(hint))
    {
        return true;
    }
    let words: Vec<&str> = prose
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    words.iter().enumerate().any(|(i, word)| {
        matches!(*word, "visit" | "open")
            && match words.get(i + 1) {
                Some(&"this") => true,
                Some(&"the") => words.get(i + 2) == Some(&"following"),
                _ => false,
            }
    })
}

/// The http(s) URLs in `text`, with trailing punctuation removed.
fn urls(text: &str) -> impl Iterator<Item = &str> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    std::iter::from_fn(move || {
        loop {
            let at = from + lower.get(from..)?.find("http")?;
            from = at + 4;
            let rest = lower.get(at..)?;
            let Some(scheme) = ["https://", "http://"]
                .into_iter()
                .find(|scheme| rest.starts_with(scheme))
            else {
                continue;
            };
            let boundary = text[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric());
            let len = rest
                .find(|c: char| c.is_whitespace() || c.is_control() || "\"'<>`".contains(c))
                .unwrap_or(rest.len());
            let url = trim_trailing(&text[at..at + len]);
            from = at + len.max(4);
            if boundary && url.len() > scheme.len() {
                return Some(url);
            }
        }
    })
}

/// Drops sentence punctuation after a URL, keeping a `)` or `]` that closes
/// one opened inside it (`https://en.wikipedia.org/wiki/Rust_(language)`).
fn trim_trailing(mut url: &str) -> &str {
    loop {
        let Some(last) = url.chars().next_back() else {
            return url;
        };
        let unbalanced =
            |open: char, close: char| url.matches(close).count() > url.matches(open).count();
        let strip = match last {
            '.' | ',' | ';' | ':' | '!' | '?' | '*' => true,
            ')' => unbalanced('(', ')'),
            ']' => unbalanced('[', ']'),
            _ => false,
        };
        if !strip {
            return url;
        }
        url = &url[..url.len() - 1];
    }
}

/// Whether a URL could be the page a person is asked to open: not on the
/// loopback interface and not a discovery document.
fn can_be_opened(url: &str) -> bool {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (authority, path) = after_scheme
        .find(['/', '?', '#'])
        .map_or((after_scheme, ""), |at| after_scheme.split_at(at));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or(v6)
    } else {
        host.split(':').next().unwrap_or(host)
    }
    .to_ascii_lowercase();
    let loopback = host == "localhost"
        || host.ends_with(".localhost")
        || host.starts_with("127.")
        || host == "::1"
        || host == "0.0.0.0";
    !loopback && !path.contains("/.well-known/")
}

#[cfg(test)]
mod tests;
