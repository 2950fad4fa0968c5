//! Server definitions and the config files that hold them.
//!
//! One loader reads the three shapes people already have on disk:
//!
//! | dialect | where | servers live in |
//! |---|---|---|
//! | [`Dialect::McpServers`] | Claude Desktop, Claude Code, Cursor (JSON) | `{"mcpServers": {NAME: {...}}}` |
//! | [`Dialect::VsCode`] | VS Code `mcp.json` (JSON with comments) | `{"servers": {NAME: {...}}}` |
//! | [`Dialect::Codex`] | Codex `config.toml` | `[mcp_servers.NAME]` |
//!
//! Each entry has `command`, `args`, `env` and `cwd`, and may carry
//! mcpvisor's own fields: `env_file` (or VS Code's `envFile`), `env_keys`,
//! `init_timeout`, `auth_timeout`, `disabled`, `pin` ([`PinPolicy`]), `era` ([`EraChoice`]), `tools`
//! (`{"allow": [...], "deny": [...], "override": {NAME: {...}}}`, see
//! [`ToolFilter`] and [`ToolOverride`]), `sandbox` ([`crate::sandbox`]) and the supervision overrides of
//! [`Supervision`] (`restart`, `request_timeout`, `idle_timeout`, `start`,
//! `sessions`, ...). Codex's `startup_timeout_sec`, `startup_timeout_ms`,
//! `tool_timeout_sec`, `enabled`, `enabled_tools` and `disabled_tools` are
//! understood too. Any other field is kept in [`ServerDef::extra`] and
//! ignored. Timeouts are a number of seconds or a string such as `"30s"`,
//! `"5m"` or `"1500ms"` ([`crate::duration`]). A relative `cwd` or `env_file` is resolved against
//! the config file's directory. `${VAR}`-style placeholders are expanded only
//! in a remote server's header values.
//!
//! An entry with a `url` and no `command` (Claude and Cursor), `"type":
//! "http"` (VS Code, also `"streamable-http"`), `"type": "sse"` or a Codex
//! `url` is a remote server: [`ServerDef::url`] and [`ServerDef::headers`]
//! (`headers`, Codex's `http_headers`, and Codex's `bearer_token_env_var` as
//! an `Authorization: Bearer ${VAR}` header), spoken to as
//! [`ServerDef::transport`] says. Header values may hold `${VAR}`
//! placeholders, filled at every connect. Entries for other transports
//! (`"type": "ws"`, say) are kept as [`UnsupportedServer`]s, so that asking
//! for one by name says why it cannot run instead of claiming it does not
//! exist.
//!
//! Every [`ConfigError`] is one line that names the file, the entry when
//! there is one, and for syntax errors the line and column.

pub(crate) mod document;
mod entry;
mod supervision;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

pub use supervision::{RestartMode, SessionMode, StartMode, Supervision, Timer};

/// How to start one stdio MCP server, and what mcpvisor should do around it.
#[derive(Clone, Default, PartialEq)]
pub struct ServerDef {
    /// The entry's key in the config file.
    pub name: String,
    /// The program to run, looked up on `PATH` if it has no slash. Empty
    /// for a remote server ([`ServerDef::url`]).
    pub command: String,
    /// Arguments after the program.
    pub args: Vec<String>,
    /// Variables set on top of the inherited environment. Values may be
    /// secrets: this type's `Debug` prints only the names.
    pub env: BTreeMap<String, String>,
    /// Working directory, already resolved against the config file's folder.
    pub cwd: Option<PathBuf>,
    /// A dotenv file re-read at every spawn; see [`crate::secrets`].
    pub env_file: Option<PathBuf>,
    /// Keys taken from `env_file`; empty means every key in it.
    pub env_keys: Vec<String>,
    /// Bound on the `initialize` handshake.
    pub init_timeout: Option<Duration>,
    /// Bound on the handshake once the server has asked the user to
    /// authorize in a browser (see [`crate::auth`]).
    pub auth_timeout: Option<Duration>,
    /// Set by `"disabled": true` (or Codex's `enabled = false`). Loading
    /// keeps disabled servers; whoever starts servers decides what it means.
    pub disabled: bool,
    /// Which tools the server may expose, and what of their definitions
    /// the entry rewrites.
    pub tools: ToolFilter,
    /// What a stdio server may read, write and connect to (`sandbox`);
    /// `None` runs it with mcpvisor's own rights.
    pub sandbox: Option<crate::sandbox::Sandbox>,
    /// How this server wants to be supervised where it differs from the
    /// defaults; see [`Supervision`].
    pub supervision: Supervision,
    /// A remote server's endpoint (`url`); `None` for a stdio server. A
    /// remote server has no `command`, `args`, `cwd` or `env`.
    pub url: Option<String>,
    /// How a remote server is spoken to (`type`); unused for a stdio
    /// server.
    pub transport: RemoteTransport,
    /// Headers sent with every request to a remote server (`headers`, or
    /// Codex's `http_headers`). Values may hold `${VAR}` placeholders,
    /// filled from `env_file` and the environment at every connect (see
    /// [`crate::secrets::expand_headers`]); they are often credentials:
    /// `Debug` prints only the names.
    pub headers: BTreeMap<String, String>,
    /// Fields mcpvisor does not know, kept as they were.
    pub extra: Map<String, Value>,
    /// The config file the entry was read from (`None` for a definition
    /// built from the command line).
    pub source: Option<PathBuf>,
    /// How `serve` pins what the server offers (`pin`); `None` leaves it
    /// to `serve --pin`.
    pub pin: Option<PinPolicy>,
    /// Which protocol era the gateway drives a stdio server in (`era`).
    pub era: EraChoice,
}

/// Which protocol era the gateway drives a stdio server in (`"era"` in an
/// entry, `run --http --era`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EraChoice {
    /// Asked `server/discover` first: a server offering 2026-07-28 is
    /// driven in that era, any other in the handshake era.
    #[default]
    Auto,
    /// Never asked `server/discover`: sent `initialize` and driven in the
    /// handshake era, even when it also serves 2026-07-28.
    Handshake,
    /// Asked `server/discover`, and driven in 2026-07-28; a server that
    /// does not answer as one fails to start rather than being initialized.
    Modern,
}

impl EraChoice {
    /// The names, as written in a config entry and on the command line.
    pub const NAMES: [&'static str; 3] = ["auto", "2025-11-25", "2026-07-28"];

    /// The choice a name stands for.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "auto" => Some(Self::Auto),
            "2025-11-25" => Some(Self::Handshake),
            "2026-07-28" => Some(Self::Modern),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Handshake => "2025-11-25",
            Self::Modern => "2026-07-28",
        }
    }
}

impl fmt::Display for EraChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the gateway treats a server's tool, prompt and resource template
/// definitions (`"pin"` in an entry, `serve --pin` for all of them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PinPolicy {
    /// What the server offers the first time is approved; a definition
    /// that changes later, or appears later, is held back until a person
    /// approves it.
    #[default]
    Tofu,
    /// Even what it offers the first time is held back until approved.
    Strict,
    /// Nothing is pinned or held back.
    Off,
}

impl PinPolicy {
    /// The names, as written in a config entry and on the command line.
    pub const NAMES: [&'static str; 3] = ["tofu", "strict", "off"];

    /// The policy a name stands for.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "tofu" => Some(Self::Tofu),
            "strict" => Some(Self::Strict),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tofu => "tofu",
            Self::Strict => "strict",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for PinPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a remote server is spoken to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RemoteTransport {
    /// Streamable HTTP, or the old HTTP+SSE transport when the server
    /// refuses Streamable HTTP's `initialize` with 400, 404 or 405 (what the
    /// protocol's section on backwards compatibility advises a client to
    /// do): an entry with a `url` and no `type`, and `--url`.
    #[default]
    Auto,
    /// Streamable HTTP only: `"type": "http"` (or `"streamable-http"`).
    Http,
    /// The old HTTP+SSE transport of protocol version 2024-11-05: `"type":
    /// "sse"`. The `url` is the event stream; the server names the endpoint
    /// that takes the messages in its first event.
    Sse,
}

/// Which tools of a server are let through, and how their definitions are
/// rewritten on the way.
///
/// `deny` always wins. With `allow` set, only the tools it names pass; an
/// empty `allow` list therefore lets nothing through. Names match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// When set, the only tools that may pass.
    pub allow: Option<Vec<String>>,
    /// Tools that never pass.
    pub deny: Vec<String>,
    /// `override`: the entry's own title, description and annotations for
    /// tools of the server, by the server's name for the tool.
    pub overrides: BTreeMap<String, ToolOverride>,
}

/// What an entry says of one of its server's tools in place of what the
/// server says (`"tools": {"override": {NAME: {...}}}`).
///
/// `title` and `description` replace the server's; `annotations` are
/// merged into the server's key by key, and a key set to `null` (JSON only)
/// removes the server's hint. The name, the schemas and everything else are
/// the server's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOverride {
    pub title: Option<String>,
    pub description: Option<String>,
    pub annotations: Map<String, Value>,
}

/// An entry for a transport mcpvisor cannot supervise (HTTP, SSE, ...).
#[derive(Clone, PartialEq)]
pub struct UnsupportedServer {
    /// The entry's key in the config file.
    pub name: String,
    /// The transport it asks for, e.g. `"http"` or `"sse"`.
    pub transport: String,
    /// The entry as written. May hold credentials (headers): `Debug` prints
    /// only the field names.
    pub fields: Map<String, Value>,
}

/// The shape of config file a [`ConfigFile`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `{"mcpServers": {...}}`: Claude Desktop, Claude Code, Cursor.
    McpServers,
    /// `{"servers": {...}}`: VS Code.
    VsCode,
    /// `[mcp_servers.NAME]`: Codex.
    Codex,
}

/// The syntax of a config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON, with `//` and `/* */` comments and trailing commas allowed.
    Json,
    /// TOML.
    Toml,
}

/// The servers of one config file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFile {
    path: PathBuf,
    dialect: Dialect,
    servers: BTreeMap<String, ServerDef>,
    unsupported: BTreeMap<String, UnsupportedServer>,
    /// Every entry's name, in the order the file lists them.
    order: Vec<String>,
}

/// One entry of a [`ConfigFile`], of whichever transport.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConfigEntry<'a> {
    /// A server mcpvisor can run: a stdio one, or a remote one with a `url`.
    Stdio(&'a ServerDef),
    /// An entry for another transport.
    Unsupported(&'a UnsupportedServer),
}

/// A config file could not be read, or says something we cannot use.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// The text is not valid JSON or TOML.
    #[error("{}:{line}:{column}: {message} ({format} syntax)", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message, without position.
        message: String,
        /// Which syntax was expected.
        format: Format,
    },
    /// The file parses but its layout is wrong (no servers table, ...).
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One server entry is invalid.
    #[error("{}: server {server:?}: {message}", path.display())]
    Server {
        /// The file.
        path: PathBuf,
        /// The entry's name.
        server: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// [`ConfigFile::get`] was asked for a name the file does not define.
    #[error("{}: no server named {name:?} ({})", path.display(), list_names(available))]
    UnknownServer {
        /// The file.
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// Every name the file defines, sorted.
        available: Vec<String>,
    },
    /// [`ConfigFile::get`] was asked for a server of another transport.
    #[error(
        "{}: server {name:?} uses the {transport:?} transport; mcpvisor runs stdio, Streamable HTTP and HTTP+SSE servers only",
        path.display()
    )]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The entry's name.
        name: String,
        /// The transport it asks for.
        transport: String,
    },
}

/// Reads and validates the config file at `path`.
pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    parse(&text, path)
}

/// Validates config `text` as if it had been read from `path`: the path
/// names the file in errors, picks the syntax by its extension, and is the
/// base for relative `cwd` and `env_file`.
pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
    let format = document::detect(path, text);
    let (root, key_order) = document::parse(text, path, format)?;
    let file_error = |message: String| ConfigError::File {
        path: path.to_owned(),
        message,
    };
    let Value::Object(root) = root else {
        return Err(file_error(format!(
            "the top level must be {}",
            format.map_noun()
        )));
    };
    let (dialect, at, table) = find_servers(&root, format).ok_or_else(|| {
        file_error(match format {
            Format::Json => "no \"mcpServers\" or \"servers\" object found".to_owned(),
            Format::Toml => "no [mcp_servers] table found".to_owned(),
        })
    })?;
    let Value::Object(table) = table else {
        let key = at.join(".");
        return Err(file_error(format!("{key:?} must be {}", format.map_noun())));
    };

    let base_dir = path.parent().unwrap_or(Path::new(""));
    let mut servers = BTreeMap::new();
    let mut unsupported = BTreeMap::new();
    for (name, value) in table {
        let parsed =
            entry::parse(name, value, base_dir, format).map_err(|message| ConfigError::Server {
                path: path.to_owned(),
                server: name.clone(),
                message,
            })?;
        match parsed {
            entry::Entry::Stdio(mut def) => {
                def.source = Some(path.to_owned());
                servers.insert(name.clone(), def);
            }
            entry::Entry::Unsupported(other) => {
                unsupported.insert(name.clone(), other);
            }
        }
    }
    // The file's own order; any name the key pass did not see (it sees
    // every one) goes last, sorted, rather than being lost.
    let mut order: Vec<String> = key_order
        .at(at)
        .map(|keys| keys.keys())
        .unwrap_or_default()
        .into_iter()
        .filter(|name| table.contains_key(*name))
        .map(str::to_owned)
        .collect();
    for name in table.keys() {
        if !order.contains(name) {
            order.push(name.clone());
        }
    }
    Ok(ConfigFile {
        path: path.to_owned(),
        dialect,
        servers,
        unsupported,
        order,
    })
}

/// An entry's name and its fields as written.
pub type RawEntry = (String, Map<String, Value>);

/// Every entry of config `text` (as if read from `path`) with its fields as
/// written (relative paths not resolved), in the file's order: for moving
/// entries from one file to another. The text must load ([`parse`]).
pub fn raw_entries(text: &str, path: &Path) -> Result<Vec<RawEntry>, ConfigError> {
    let format = document::detect(path, text);
    let (root, key_order) = document::parse(text, path, format)?;
    let none = || ConfigError::File {
        path: path.to_owned(),
        message: "no servers table found".to_owned(),
    };
    let Value::Object(root) = root else {
        return Err(none());
    };
    let (_, at, table) = find_servers(&root, format).ok_or_else(none)?;
    let Value::Object(table) = table else {
        return Err(none());
    };
    let order = key_order.at(at).map(|keys| keys.keys()).unwrap_or_default();
    Ok(order
        .into_iter()
        .filter_map(|name| match table.get(name) {
            Some(Value::Object(fields)) => Some((name.to_owned(), fields.clone())),
            _ => None,
        })
        .collect())
}

/// Finds the servers table: the dialect, the keys that lead to it, its value.
fn find_servers(
    root: &Map<String, Value>,
    format: Format,
) -> Option<(Dialect, &'static [&'static str], &Value)> {
    match format {
        Format::Toml => root
            .get("mcp_servers")
            .map(|table| (Dialect::Codex, &["mcp_servers"][..], table)),
        Format::Json => root
            .get("mcpServers")
            .map(|table| (Dialect::McpServers, &["mcpServers"][..], table))
            .or_else(|| {
                root.get("servers")
                    .map(|t| (Dialect::VsCode, &["servers"][..], t))
            })
            // VS Code user settings nest the same table under "mcp".
            .or_else(|| {
                root.get("mcp")
                    .and_then(|mcp| mcp.get("servers"))
                    .map(|t| (Dialect::VsCode, &["mcp", "servers"][..], t))
            }),
    }
}

fn list_names(names: &[String]) -> String {
    if names.is_empty() {
        "the file defines no servers".to_owned()
    } else {
        format!("available: {}", names.join(", "))
    }
}

// === impl ConfigFile ===

impl ConfigFile {
    /// The file these servers came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shape of the file.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The stdio server called `name`, disabled or not.
    pub fn get(&self, name: &str) -> Result<&ServerDef, ConfigError> {
        if let Some(def) = self.servers.get(name) {
            return Ok(def);
        }
        if let Some(other) = self.unsupported.get(name) {
            return Err(ConfigError::Unsupported {
                path: self.path.clone(),
                name: name.to_owned(),
                transport: other.transport.clone(),
            });
        }
        let mut available: Vec<String> = self
            .servers
            .keys()
            .chain(self.unsupported.keys())
            .cloned()
            .collect();
        available.sort();
        Err(ConfigError::UnknownServer {
            path: self.path.clone(),
            name: name.to_owned(),
            available,
        })
    }

    /// The stdio servers, sorted by name.
    pub fn servers(&self) -> impl Iterator<Item = &ServerDef> {
        self.servers.values()
    }

    /// Entries for transports mcpvisor cannot run, sorted by name.
    pub fn unsupported(&self) -> impl Iterator<Item = &UnsupportedServer> {
        self.unsupported.values()
    }

    /// Every entry, stdio or not, in the order the file lists them.
    pub fn entries(&self) -> impl Iterator<Item = ConfigEntry<'_>> {
        self.order.iter().filter_map(|name| {
            self.servers
                .get(name)
                .map(ConfigEntry::Stdio)
                .or_else(|| self.unsupported.get(name).map(ConfigEntry::Unsupported))
        })
    }
}

// === impl ServerDef ===

impl ServerDef {
    /// A server that runs `command` with nothing else set, for callers that
    /// build a definition from the command line rather than a file.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            ..Self::default()
        }
    }

    /// A remote server at `url` with nothing else set.
    pub fn remote(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: Some(url.into()),
            ..Self::default()
        }
    }

    /// Whether this is a remote server (Streamable HTTP or HTTP+SSE).
    pub fn is_remote(&self) -> bool {
        self.url.is_some()
    }
}

impl fmt::Debug for ServerDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Inline `env` values are often tokens; print names only.
        f.debug_struct("ServerDef")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &Redacted(self.env.keys()))
            .field("cwd", &self.cwd)
            .field("env_file", &self.env_file)
            .field("env_keys", &self.env_keys)
            .field("init_timeout", &self.init_timeout)
            .field("auth_timeout", &self.auth_timeout)
            .field("disabled", &self.disabled)
            .field("tools", &self.tools)
            .field("sandbox", &self.sandbox)
            .field("supervision", &self.supervision)
            .field("url", &self.url.as_ref().map(|_| "***"))
            .field("transport", &self.transport)
            .field("headers", &Redacted(self.headers.keys()))
            .field("extra", &Redacted(self.extra.keys()))
            .field("source", &self.source)
            .field("pin", &self.pin)
            .field("era", &self.era)
            .finish()
    }
}

impl fmt::Debug for UnsupportedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnsupportedServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("fields", &Redacted(self.fields.keys()))
            .finish()
    }
}

/// Debug-prints a map's keys with every value shown as `***`.
struct Redacted<I>(I);

impl<'a, I> fmt::Debug for Redacted<I>
where
    I: Iterator<Item = &'a String> + Clone,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.clone().map(|key| (key, format_args!("***"))))
            .finish()
    }
}

// === impl ToolFilter ===

impl ToolFilter {
    /// Whether the tool called `tool` may pass.
    pub fn permits(&self, tool: &str) -> bool {
        if self.deny.iter().any(|denied| denied == tool) {
            return false;
        }
        match &self.allow {
            Some(allowed) => allowed.iter().any(|allowed| allowed == tool),
            None => true,
        }
    }

    /// Whether every tool passes.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }
}

// === impl ToolOverride ===

impl ToolOverride {
    /// Rewrites one tool definition (a `tools/list` item) as the override
    /// says.
    pub fn apply(&self, tool: &mut Map<String, Value>) {
        if let Some(title) = &self.title {
            tool.insert("title".to_owned(), Value::String(title.clone()));
        }
        if let Some(description) = &self.description {
            tool.insert("description".to_owned(), Value::String(description.clone()));
        }
        if self.annotations.is_empty() {
            return;
        }
        let annotations = tool
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !annotations.is_object() {
            *annotations = Value::Object(Map::new());
        }
        if let Value::Object(hints) = annotations {
            for (key, value) in &self.annotations {
                if value.is_null() {
                    hints.remove(key);
                } else {
                    hints.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

// === impl Format ===

impl Format {
    /// What a key-value map is called in this syntax, with its article.
    fn map_noun(self) -> &'static str {
        match self {
            Format::Json => "an object",
            Format::Toml => "a table",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Json => "JSON",
            Format::Toml => "TOML",
        })
    }
}
