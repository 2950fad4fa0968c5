//! Exposed names: `SERVER{separator}NAME`, valid for the strictest client.
//!
//! Claude Desktop accepts only `^[A-Za-z0-9_-]{1,64}$`, while MCP allows
//! `.` and 128 characters, and server names in config files can be
//! anything. So every exposed name is built the same way:
//!
//! 1. Join the server's name, the separator (default `__`) and the
//!    original name. The prefix is there even with one server, so that
//!    adding a second server renames nothing.
//! 2. Replace every character outside `A-Z a-z 0-9 _ -` with `_`.
//! 3. Over 64 characters, keep the first 55 and add `_` and 8 hex digits of
//!    the SHA-256 of `server \0 name` (the originals, so two long names that
//!    share a beginning still differ).
//!
//! The result depends only on the server's name and the original name, so
//! it is stable across runs, platforms, and servers added or removed. The
//! one exception is a collision: two originals that come out the same
//! (`a.b` and `a_b`). One keeps the name, chosen the same way whatever the
//! order the lists arrived in: a name that needed no change beats one that
//! did, then the server first in config order, then the name that sorts
//! first. Each other one gets a hash suffix, and the collision is reported.
//!
//! Nothing ever parses an exposed name: a [`NameTable`] maps it back to the
//! server and the original name.

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::fmt;

use sha2::{Digest, Sha256};

/// The separator used unless configured otherwise.
pub const DEFAULT_SEPARATOR: &str = "__";

/// The longest exposed name.
pub const MAX_LEN: usize = 64;

/// Hex digits of a hash suffix.
const HASH_LEN: usize = 8;

/// The longest separator accepted.
const MAX_SEPARATOR_LEN: usize = 8;

/// What goes between a server's name and the original name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Separator(String);

/// A separator that would make names some clients refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    /// The separator is empty.
    #[error("the name separator must not be empty")]
    EmptySeparator,
    /// The separator has a character outside `A-Z a-z 0-9 _ -`.
    #[error("the name separator {0:?} may only use the characters A-Z, a-z, 0-9, _ and -")]
    SeparatorCharacters(String),
    /// The separator is longer than 8 characters.
    #[error("the name separator {0:?} is longer than {MAX_SEPARATOR_LEN} characters")]
    SeparatorTooLong(String),
}

/// Where an exposed name leads: the server (its index in config order, as
/// given to [`NameTableBuilder::server`]) and the name the server uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Original {
    /// The server's index.
    pub server: usize,
    /// The name as the server spells it.
    pub name: String,
}

/// Originals that came out as the same exposed name, and how that was
/// settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The name all of them would have had.
    pub exposed: String,
    /// The one that keeps it.
    pub kept: Original,
    /// The others, each with the name it got instead.
    pub renamed: Vec<(Original, String)>,
}

/// Exposed names of one kind (tools, or prompts) mapped both ways.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NameTable {
    servers: Vec<String>,
    /// In config order: each server's names in the order it listed them.
    entries: Vec<(Original, String)>,
    /// Exposed name -> index in `entries`.
    by_exposed: HashMap<String, usize>,
    /// Per server: original name -> index in `entries`.
    by_original: Vec<HashMap<String, usize>>,
}

/// Collects every server's names, then builds a [`NameTable`].
#[derive(Debug, Clone)]
pub struct NameTableBuilder {
    separator: Separator,
    servers: Vec<(String, Vec<String>)>,
}

/// The exposed name of `name` on `server`, before collisions: what it will
/// be unless another original comes out the same.
pub fn exposed_name(separator: &Separator, server: &str, name: &str) -> String {
    plain(separator, server, name).0
}

/// The exposed name before collisions, and whether it is the join exactly
/// as written (nothing replaced or shortened).
fn plain(separator: &Separator, server: &str, name: &str) -> (String, bool) {
    let mut exact = true;
    let mut out = String::with_capacity(server.len() + separator.0.len() + name.len());
    for c in server
        .chars()
        .chain(separator.0.chars())
        .chain(name.chars())
    {
        if is_allowed(c) {
            out.push(c);
        } else {
            out.push('_');
            exact = false;
        }
    }
    if out.len() > MAX_LEN {
        out = with_suffix(&out, &hash_hex(server, name, 0));
        exact = false;
    }
    (out, exact)
}

fn is_allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `base` shortened as needed and followed by `_` and `suffix`, within
/// [`MAX_LEN`]. `base` is ASCII by construction, so any cut is a char
/// boundary.
fn with_suffix(base: &str, suffix: &str) -> String {
    let keep = base.len().min(MAX_LEN - 1 - suffix.len());
    let mut out = String::with_capacity(MAX_LEN);
    out.push_str(base.get(..keep).unwrap_or(base));
    out.push('_');
    out.push_str(suffix);
    out
}

/// Eight hex digits of SHA-256 over `server \0 name`, and `\0 round` after
/// the first round (used only when a suffixed name is itself taken).
fn hash_hex(server: &str, name: &str, round: u32) -> String {
    let mut hasher = Sha256::new();
    hasher.update(server.as_bytes());
    hasher.update([0]);
    hasher.update(name.as_bytes());
    if round > 0 {
        hasher.update([0]);
        hasher.update(round.to_string().as_bytes());
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(HASH_LEN);
    for byte in digest.iter().take(HASH_LEN / 2) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

// === impl Separator ===

impl Separator {
    /// Checks a separator: 1 to 8 characters from `A-Z a-z 0-9 _ -`.
    pub fn new(separator: impl Into<String>) -> Result<Separator, NamingError> {
        let separator = separator.into();
        if separator.is_empty() {
            return Err(NamingError::EmptySeparator);
        }
        if !separator.chars().all(is_allowed) {
            return Err(NamingError::SeparatorCharacters(separator));
        }
        if separator.len() > MAX_SEPARATOR_LEN {
            return Err(NamingError::SeparatorTooLong(separator));
        }
        Ok(Separator(separator))
    }

    /// The separator's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Separator {
    fn default() -> Self {
        Separator(DEFAULT_SEPARATOR.to_owned())
    }
}

impl fmt::Display for Separator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// === impl NameTableBuilder ===

impl NameTableBuilder {
    /// Adds the next server in config order with the names it lists, and
    /// returns its index. A name listed twice counts once.
    pub fn server<N: Into<String>>(
        &mut self,
        server: impl Into<String>,
        names: impl IntoIterator<Item = N>,
    ) -> usize {
        let mut seen = HashSet::new();
        let names = names
            .into_iter()
            .map(Into::into)
            .filter(|name: &String| seen.insert(name.clone()))
            .collect();
        self.servers.push((server.into(), names));
        self.servers.len() - 1
    }

    /// Assigns every exposed name, and reports the collisions it settled
    /// (sorted by the contested name).
    pub fn build(self) -> (NameTable, Vec<Collision>) {
        struct Candidate {
            original: Original,
            base: String,
            exact: bool,
        }
        let mut candidates = Vec::new();
        for (index, (server, names)) in self.servers.iter().enumerate() {
            for name in names {
                let (base, exact) = plain(&self.separator, server, name);
                candidates.push(Candidate {
                    original: Original {
                        server: index,
                        name: name.clone(),
                    },
                    base,
                    exact,
                });
            }
        }

        // Group by plain name. Within a group the order decides who keeps
        // it: unchanged names first, then config order, then the name.
        let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, candidate) in candidates.iter().enumerate() {
            groups.entry(&candidate.base).or_default().push(i);
        }
        let rank = |&i: &usize| {
            let c = &candidates[i];
            (!c.exact, c.original.server, c.original.name.as_str())
        };
        let mut groups: Vec<(&str, Vec<usize>)> = groups.into_iter().collect();
        groups.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (_, members) in &mut groups {
            members.sort_unstable_by(|a, b| rank(a).cmp(&rank(b)));
        }

        let mut exposed: Vec<String> = vec![String::new(); candidates.len()];
        // Every kept plain name is taken before any suffixed name is chosen,
        // so a suffix can never steal a plain name.
        let mut taken: HashSet<String> = HashSet::new();
        for (base, members) in &groups {
            if let Some(&first) = members.first() {
                exposed[first] = (*base).to_owned();
                taken.insert((*base).to_owned());
            }
        }
        let mut collisions = Vec::new();
        for (base, members) in &groups {
            let [kept, others @ ..] = members.as_slice() else {
                continue;
            };
            if others.is_empty() {
                continue;
            }
            let mut renamed = Vec::with_capacity(others.len());
            for &i in others {
                let original = &candidates[i].original;
                let server = &self.servers[original.server].0;
                // Round 0 is the plain hash suffix; a later round is needed
                // only if that name is taken (a shortened name already ends
                // in it, or by sheer chance).
                let mut round = 0;
                let name = loop {
                    let name = with_suffix(base, &hash_hex(server, &original.name, round));
                    if !taken.contains(&name) {
                        break name;
                    }
                    round += 1;
                };
                taken.insert(name.clone());
                exposed[i] = name.clone();
                renamed.push((original.clone(), name));
            }
            collisions.push(Collision {
                exposed: (*base).to_owned(),
                kept: candidates[*kept].original.clone(),
                renamed,
            });
        }

        let mut table = NameTable {
            servers: self.servers.iter().map(|(name, _)| name.clone()).collect(),
            entries: Vec::with_capacity(candidates.len()),
            by_exposed: HashMap::with_capacity(candidates.len()),
            by_original: vec![HashMap::new(); self.servers.len()],
        };
        for (candidate, name) in candidates.into_iter().zip(exposed) {
            let index = table.entries.len();
            table.by_exposed.insert(name.clone(), index);
            if let Some(names) = table.by_original.get_mut(candidate.original.server) {
                names.insert(candidate.original.name.clone(), index);
            }
            table.entries.push((candidate.original, name));
        }
        (table, collisions)
    }
}

// === impl NameTable ===

impl NameTable {
    /// Starts a table whose names use `separator`.
    pub fn builder(separator: Separator) -> NameTableBuilder {
        NameTableBuilder {
            separator,
            servers: Vec::new(),
        }
    }

    /// The server and original name behind an exposed name.
    pub fn resolve(&self, exposed: &str) -> Option<&Original> {
        self.by_exposed
            .get(exposed)
            .and_then(|&i| self.entries.get(i))
            .map(|(original, _)| original)
    }

    /// The exposed name of `name` on server `server`.
    pub fn exposed(&self, server: usize, name: &str) -> Option<&str> {
        self.by_original
            .get(server)?
            .get(name)
            .and_then(|&i| self.entries.get(i))
            .map(|(_, exposed)| exposed.as_str())
    }

    /// The name of server `server`, as given to the builder.
    pub fn server_name(&self, server: usize) -> Option<&str> {
        self.servers.get(server).map(String::as_str)
    }

    /// Every entry as `(original, exposed)`, in config order and, within a
    /// server, in the order it listed its names.
    pub fn iter(&self) -> impl Iterator<Item = (&Original, &str)> {
        self.entries
            .iter()
            .map(|(original, exposed)| (original, exposed.as_str()))
    }

    /// How many names the table holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no names.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
