//! The lists of lazily started servers, kept on disk.
//!
//! A server started at first use must still show its tools before that
//! use, so the gateway answers `tools/list` (and the other lists, and the
//! capabilities of `initialize`) from what the server said last time, and
//! checks it once the server runs.
//!
//! An entry is found by a [`Key`]: a SHA-256 over everything that could
//! change what the server offers (its command, arguments, environment,
//! working directory, the modification time of its entry file, and this
//! mcpvisor's version). Environment values are hashed with the rest so
//! that a changed token makes a new entry, but nothing written to the
//! cache holds any of them in clear: a file holds only the key's digest
//! and the lists.
//!
//! The cache is an optimisation, never a source of errors: a file that is
//! missing, unreadable, truncated, too large, of another format or for
//! another key is treated as absent. Writes go to a temporary file in the
//! same directory, renamed over the entry, so a reader sees the old entry
//! or the new one, never half of one. Files are private to the user (0600,
//! in directories created 0700).
//!
//! Where: `$MCPVISOR_CACHE_DIR/lists` if that is set, else
//! `$XDG_CACHE_HOME/mcpvisor/lists`, else `$HOME/.cache/mcpvisor/lists`.

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use mcpvisor_config::ServerDef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Overrides where mcpvisor keeps its caches (tests, sandboxes).
pub const CACHE_DIR_VAR: &str = "MCPVISOR_CACHE_DIR";

/// The layout of a cache file. Bump it when [`Lists`] or [`Key`] change
/// meaning: old files then read as absent.
const FORMAT: u32 = 1;

/// A cache file larger than this is not read.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The on-disk cache of server lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    dir: PathBuf,
}

/// What identifies one server's lists: a digest of its definition and its
/// entry file's modification time.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key([u8; 32]);

/// What a server offers: its `initialize` result and its lists, as the
/// server sent them (unfiltered, with its own names), the entry's tool
/// overrides applied.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lists {
    /// The `initialize` result: `protocolVersion`, `capabilities`,
    /// `serverInfo`, `instructions`.
    pub initialize: Value,
    /// `tools/list`'s tools, every page.
    #[serde(default)]
    pub tools: Vec<Value>,
    /// `prompts/list`'s prompts.
    #[serde(default)]
    pub prompts: Vec<Value>,
    /// `resources/list`'s resources.
    #[serde(default)]
    pub resources: Vec<Value>,
    /// `resources/templates/list`'s resource templates.
    #[serde(default)]
    pub resource_templates: Vec<Value>,
}

/// A cache file as written (`L` is `&Lists` when writing, `Lists` when
/// reading).
#[derive(Serialize, Deserialize)]
struct Stored<L> {
    format: u32,
    /// The key in hex, checked on read: a file renamed or copied over
    /// another entry is not taken for it.
    key: String,
    lists: L,
}

/// The directory for list files, from the environment (see the module
/// docs); `None` if neither variable gives one.
pub fn default_dir() -> Option<PathBuf> {
    dir_from(|name| std::env::var_os(name))
}

/// [`default_dir`] with the environment passed in.
fn dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| {
        var(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = set(CACHE_DIR_VAR) {
        return Some(dir.join("lists"));
    }
    // The XDG spec says to ignore a relative XDG_CACHE_HOME.
    if let Some(dir) = set("XDG_CACHE_HOME").filter(|dir| dir.is_absolute()) {
        return Some(dir.join("mcpvisor").join("lists"));
    }
    set("HOME").map(|home| home.join(".cache").join("mcpvisor").join("lists"))
}

// === impl Cache ===

impl Cache {
    /// A cache whose files live in `dir` (created on the first write).
    pub fn at(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    /// The cache at [`default_dir`], if the environment names one.
    pub fn from_env() -> Option<Cache> {
        default_dir().map(Cache::at)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The lists stored for `key`, if there are any that can be read.
    pub fn get(&self, key: &Key) -> Option<Lists> {
        let path = self.path(key);
        if fs::metadata(&path).ok()?.len() > MAX_FILE_BYTES {
            return None;
        }
        let bytes = fs::read(&path).ok()?;
        let stored: Stored<Lists> = serde_json::from_slice(&bytes).ok()?;
        (stored.format == FORMAT && stored.key == key.to_string()).then_some(stored.lists)
    }

    /// Stores `lists` for `key`, replacing what was there at once.
    pub fn put(&self, key: &Key, lists: &Lists) -> io::Result<()> {
        create_private_dir(&self.dir)?;
        let stored = Stored {
            format: FORMAT,
            key: key.to_string(),
            lists,
        };
        let bytes = serde_json::to_vec(&stored).map_err(io::Error::other)?;
        // tempfile creates the file 0600, with a name no one else can
        // predict, in the same directory so that the rename is atomic.
        let mut file = tempfile::Builder::new()
            .prefix(".tmp-")
            .suffix(".json")
            .tempfile_in(&self.dir)?;
        file.write_all(&bytes)?;
        file.flush()?;
        file.persist(self.path(key)).map_err(|err| err.error)?;
        Ok(())
    }

    /// Forgets the lists stored for `key`; absent is not an error.
    pub fn remove(&self, key: &Key) -> io::Result<()> {
        match fs::remove_file(self.path(key)) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

// === impl Key ===

impl Key {
    /// The key of `def`'s lists while its entry file was last modified at
    /// `entry_mtime` (`None` when it has no entry file, e.g. a package
    /// that `npx` fetches).
    ///
    /// What goes in: the command, arguments, environment (names and
    /// values), working directory, `env_file` and `env_keys`, a remote
    /// server's URL and headers (as written), the entry's tool overrides
    /// (applied as lists are taken in, so the lists kept carry them), the
    /// mtime, and this mcpvisor's version. What does not: the entry's name,
    /// tool filter, timeouts and supervision, which change what the gateway
    /// does with the lists, not what the server offers.
    pub fn new(def: &ServerDef, entry_mtime: Option<SystemTime>) -> Key {
        let mut hash = Hasher(Sha256::new());
        hash.bytes(b"mcpvisor list cache");
        hash.u64(u64::from(FORMAT));
        hash.bytes(env!("CARGO_PKG_VERSION").as_bytes());
        hash.bytes(def.command.as_bytes());
        hash.u64(def.args.len() as u64);
        for arg in &def.args {
            hash.bytes(arg.as_bytes());
        }
        hash.u64(def.env.len() as u64);
        for (name, value) in &def.env {
            hash.bytes(name.as_bytes());
            hash.bytes(value.as_bytes());
        }
        hash.path(def.cwd.as_deref());
        hash.path(def.env_file.as_deref());
        hash.u64(def.env_keys.len() as u64);
        for key in &def.env_keys {
            hash.bytes(key.as_bytes());
        }
        hash.bytes(def.url.as_deref().unwrap_or_default().as_bytes());
        hash.u64(def.headers.len() as u64);
        for (name, value) in &def.headers {
            hash.bytes(name.as_bytes());
            hash.bytes(value.as_bytes());
        }
        hash.u64(def.tools.overrides.len() as u64);
        for (tool, over) in &def.tools.overrides {
            hash.bytes(tool.as_bytes());
            for text in [&over.title, &over.description] {
                hash.bytes(text.as_deref().unwrap_or("\u{0}").as_bytes());
            }
            hash.bytes(
                Value::Object(over.annotations.clone())
                    .to_string()
                    .as_bytes(),
            );
        }
        match entry_mtime.map(|time| time.duration_since(UNIX_EPOCH)) {
            None => hash.u64(0),
            Some(Ok(after)) => {
                hash.u64(1);
                hash.u64(after.as_secs());
                hash.u64(u64::from(after.subsec_nanos()));
            }
            Some(Err(before)) => {
                let before = before.duration();
                hash.u64(2);
                hash.u64(before.as_secs());
                hash.u64(u64::from(before.subsec_nanos()));
            }
        }
        Key(hash.0.finalize().into())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// Feeds values into a hash unambiguously: every variable-length value is
/// preceded by its length, so `["ab", "c"]` and `["a", "bc"]` differ.
struct Hasher(Sha256);

impl Hasher {
    fn u64(&mut self, value: u64) {
        self.0.update(value.to_le_bytes());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        self.0.update(bytes);
    }

    fn path(&mut self, path: Option<&Path>) {
        match path {
            None => self.u64(0),
            Some(path) => {
                self.u64(1);
                self.bytes(path.as_os_str().as_encoded_bytes());
            }
        }
    }
}
