//! Several config files read as one set of servers, the way the gateway
//! serves them.
//!
//! Rules, checked once when the set is loaded:
//!
//! * Servers come in config order: the files in the order given, then each
//!   file's entries in the order the file lists them. Wherever "the first
//!   one wins", this is the order meant.
//! * The same name in two files is one server when both entries define the
//!   same thing (fields mcpvisor ignores, [`ServerDef::extra`], may differ);
//!   otherwise it is an error naming both files. Only names that will be
//!   served take part: a name left out by `only`, a skipped entry, never
//!   conflicts.
//! * `only` names that no file defines are an error.
//! * Disabled entries are kept, with [`ServerDef::disabled`] set.
//! * The name `mcpvisor` is reserved for the gateway's own tools.
//! * Entries that cannot be served are skipped and reported as data for the
//!   caller to log: transports mcpvisor does not speak (remote entries
//!   over Streamable HTTP or the old HTTP+SSE are served), and entries
//!   that would start this very gateway (`mcpvisor serve --config F` where
//!   `F` is one of the files being loaded), which would otherwise start
//!   itself over and over.

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::server::{self, ConfigEntry, ConfigError, ServerDef};

/// The name the gateway keeps for its own tools.
pub const RESERVED_NAME: &str = "mcpvisor";

/// The servers of several config files, in config order.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSet {
    servers: Vec<Member>,
    skipped: Vec<Skipped>,
    files: Vec<PathBuf>,
}

/// One server of a [`ServerSet`] and the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The definition. `def.disabled` marks a server that is kept but off.
    pub def: ServerDef,
    /// The first file (in config order) that defines it, as given.
    pub source: PathBuf,
}

/// An entry left out of the set, for the caller to warn about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The entry's name.
    pub name: String,
    /// The file it is in, as given.
    pub source: PathBuf,
    /// Why it was left out.
    pub reason: SkipReason,
}

/// Why an entry was left out of a [`ServerSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// It uses a transport mcpvisor does not speak.
    Remote {
        /// The transport it asks for, e.g. `"ws"`.
        transport: String,
    },
    /// It would start this gateway itself.
    SelfReference {
        /// The loaded file its `--config` names.
        config: PathBuf,
    },
}

/// A set of config files that cannot be served together.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// No file was given.
    #[error("no config file given")]
    NoFiles,
    /// One of the files could not be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An entry uses the gateway's own name.
    #[error(
        "{}: server {RESERVED_NAME:?}: the name is reserved for mcpvisor's own tools; rename the entry",
        path.display()
    )]
    Reserved {
        /// The file.
        path: PathBuf,
    },
    /// Two files define the same name differently.
    #[error(
        "server {name:?} is defined differently in {} and {}; rename one or make them the same",
        first.display(),
        second.display()
    )]
    Conflict {
        /// The entry's name.
        name: String,
        /// The file that defined it first.
        first: PathBuf,
        /// The file that defines it again.
        second: PathBuf,
    },
    /// Names asked for that no file defines.
    #[error(
        "no server named {} in {} ({})",
        quoted(names),
        paths(files),
        available_names(available)
    )]
    UnknownNames {
        /// The names asked for and not found, in the order asked.
        names: Vec<String>,
        /// The files searched.
        files: Vec<PathBuf>,
        /// Every name the files define, sorted.
        available: Vec<String>,
    },
}

// === impl ServerSet ===

impl ServerSet {
    /// Reads `paths` in order as one set. With `only`, the set holds just
    /// the servers it names.
    pub fn load(paths: &[PathBuf], only: Option<&[String]>) -> Result<ServerSet, SetError> {
        if paths.is_empty() {
            return Err(SetError::NoFiles);
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut canonical = Vec::with_capacity(paths.len());
        for path in paths {
            let file = server::load(path)?;
            let real = std::fs::canonicalize(path).map_err(|error| ConfigError::Read {
                path: path.clone(),
                error,
            })?;
            // The same file twice (under two spellings) is read once.
            if !canonical.contains(&real) {
                canonical.push(real);
                files.push(file);
            }
        }

        let asked = only;
        let only: Option<HashSet<&str>> =
            asked.map(|names| names.iter().map(String::as_str).collect());
        let wanted = |name: &str| only.as_ref().is_none_or(|only| only.contains(name));
        let mut set = ServerSet {
            servers: Vec::new(),
            skipped: Vec::new(),
            files: files.iter().map(|file| file.path().to_owned()).collect(),
        };
        // Name -> index in `set.servers`.
        let mut served: HashMap<String, usize> = HashMap::new();
        for file in &files {
            for entry in file.entries() {
                let def = match entry {
                    ConfigEntry::Unsupported(other) => {
                        if wanted(&other.name) {
                            set.skip(
                                &other.name,
                                file.path(),
                                SkipReason::Remote {
                                    transport: other.transport.clone(),
                                },
                            );
                        }
                        continue;
                    }
                    ConfigEntry::Stdio(def) => def,
                };
                if !wanted(&def.name) {
                    continue;
                }
                if let Some(config) = runs_gateway_on(def, &canonical) {
                    set.skip(&def.name, file.path(), SkipReason::SelfReference { config });
                    continue;
                }
                if def.name == RESERVED_NAME {
                    return Err(SetError::Reserved {
                        path: file.path().to_owned(),
                    });
                }
                if let Some(&index) = served.get(&def.name) {
                    let first = &set.servers[index];
                    if !same_server(&first.def, def) {
                        return Err(SetError::Conflict {
                            name: def.name.clone(),
                            first: first.source.clone(),
                            second: file.path().to_owned(),
                        });
                    }
                    continue;
                }
                served.insert(def.name.clone(), set.servers.len());
                set.servers.push(Member {
                    def: def.clone(),
                    source: file.path().to_owned(),
                });
            }
        }

        if let Some(asked) = asked {
            let defined: BTreeSet<&str> = files
                .iter()
                .flat_map(|file| file.entries())
                .map(|entry| match entry {
                    ConfigEntry::Stdio(def) => def.name.as_str(),
                    ConfigEntry::Unsupported(other) => other.name.as_str(),
                })
                .collect();
            let mut missing: Vec<String> = Vec::new();
            for name in asked {
                if !defined.contains(name.as_str()) && !missing.contains(name) {
                    missing.push(name.clone());
                }
            }
            if !missing.is_empty() {
                return Err(SetError::UnknownNames {
                    names: missing,
                    files: set.files,
                    available: defined.into_iter().map(str::to_owned).collect(),
                });
            }
        }
        Ok(set)
    }

    /// Every server, disabled ones included, in config order.
    pub fn servers(&self) -> &[Member] {
        &self.servers
    }

    /// The servers that are not disabled, in config order.
    pub fn enabled(&self) -> impl Iterator<Item = &Member> {
        self.servers.iter().filter(|member| !member.def.disabled)
    }

    /// The server called `name`, disabled or not.
    pub fn get(&self, name: &str) -> Option<&Member> {
        self.servers.iter().find(|member| member.def.name == name)
    }

    /// Entries left out, in config order, for the caller to warn about.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The files read, in order, each once, as given.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    fn skip(&mut self, name: &str, source: &Path, reason: SkipReason) {
        self.skipped.push(Skipped {
            name: name.to_owned(),
            source: source.to_owned(),
            reason,
        });
    }
}

/// Whether two entries of the same name define the same server: everything
/// mcpvisor reads must match; fields it ignores (`extra`) may differ.
fn same_server(a: &ServerDef, b: &ServerDef) -> bool {
    // Spelled out so that a new field has to be placed on one side or the
    // other of this line.
    let ServerDef {
        name,
        command,
        args,
        env,
        cwd,
        env_file,
        env_keys,
        init_timeout,
        auth_timeout,
        disabled,
        tools,
        sandbox,
        supervision,
        url,
        transport,
        headers,
        extra: _,
        source: _,
        pin,
        era,
    } = a;
    *name == b.name
        && *command == b.command
        && *args == b.args
        && *env == b.env
        && *cwd == b.cwd
        && *env_file == b.env_file
        && *env_keys == b.env_keys
        && *init_timeout == b.init_timeout
        && *auth_timeout == b.auth_timeout
        && *disabled == b.disabled
        && *tools == b.tools
        && *sandbox == b.sandbox
        && *supervision == b.supervision
        && *url == b.url
        && *transport == b.transport
        && *headers == b.headers
        && *pin == b.pin
        && *era == b.era
}

/// The loaded file that `def` would serve, if it starts this gateway:
/// a program named `mcpvisor`, run with `serve`, whose `--config` is one of
/// `loaded` (canonical paths).
fn runs_gateway_on(def: &ServerDef, loaded: &[PathBuf]) -> Option<PathBuf> {
    let program = Path::new(&def.command).file_name()?;
    if program != RESERVED_NAME || !def.args.iter().any(|arg| arg == "serve") {
        return None;
    }
    // A relative path in the args is relative to where the process will run.
    let base = match &def.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().ok()?,
    };
    config_args(&def.args).find_map(|config| {
        let real = std::fs::canonicalize(base.join(config)).ok()?;
        loaded.iter().find(|file| **file == real).cloned()
    })
}

/// Every value given to `--config`, as `--config F` or `--config=F`.
fn config_args(args: &[String]) -> impl Iterator<Item = &str> {
    args.iter().enumerate().filter_map(|(i, arg)| {
        if arg == "--config" {
            args.get(i + 1).map(String::as_str)
        } else {
            arg.strip_prefix("--config=")
        }
    })
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("{name:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn paths(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|file| file.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn available_names(names: &[String]) -> String {
    if names.is_empty() {
        "the files define no servers".to_owned()
    } else {
        format!("available: {}", names.join(", "))
    }
}

// === impl Skipped ===

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: server {:?} skipped: {}",
            self.source.display(),
            self.name,
            self.reason
        )
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Remote { transport } => write!(
                f,
                "it uses the {transport:?} transport; mcpvisor serves stdio, Streamable HTTP and HTTP+SSE servers only"
            ),
            SkipReason::SelfReference { config } => write!(
                f,
                "it runs this gateway itself (mcpvisor serve --config {})",
                config.display()
            ),
        }
    }
}
