//! An entry's `sandbox`: what a stdio server may read, write and connect to.
//!
//! ```json
//! "sandbox": {"read": ["~/notes"], "write": ["/tmp/out"], "network": "none"}
//! ```
//!
//! `read` allows reading and running what is under each path, `write` also
//! creating, changing and removing. A path starting with `~/` is under
//! `$HOME`; a relative one is resolved against the config file's
//! directory. `network` is `"all"` (the default), `"none"` (a network
//! namespace of the server's own, with no interface up) or a list of
//! `"HOST:PORT"`, of which only the port is enforced: Landlock's TCP rules
//! know ports, not hosts. The defaults a program needs to start (the
//! system's read-only directories, the package caches, a private temporary
//! directory) are added where the sandbox is applied, not here.
//!
//! The same grammar reads the spec back in the helper that applies it
//! ([`Sandbox::to_json`], [`Sandbox::from_json`]), so what the helper
//! enforces is what the entry said.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// What a sandboxed server may reach, as the entry says (the defaults are
/// added when it is applied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sandbox {
    /// Readable (and runnable), absolute.
    pub read: Vec<PathBuf>,
    /// Readable and writable, absolute.
    pub write: Vec<PathBuf>,
    /// What the server may connect to.
    pub network: Network,
}

/// A sandbox's `network`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Network {
    /// `"all"`: the network is not restricted.
    #[default]
    All,
    /// `"none"`: a network namespace of its own, with no interface up.
    None,
    /// `["HOST:PORT", ...]`: TCP connections to these ports only, and no
    /// listening on TCP. The host is not enforced.
    Ports(Vec<Endpoint>),
}

/// One `"HOST:PORT"` of a port list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// As written (`*`, a name, an IPv4 address or a bracketed IPv6 one).
    pub host: String,
    /// Never zero.
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Network::All => f.write_str("\"all\""),
            Network::None => f.write_str("\"none\""),
            Network::Ports(endpoints) => {
                let list: Vec<String> = endpoints.iter().map(|e| format!("\"{e}\"")).collect();
                write!(f, "[{}]", list.join(", "))
            }
        }
    }
}

const KEYS: &[&str] = &["read", "write", "network"];

impl Sandbox {
    /// Reads an entry's `sandbox` value. Relative paths are resolved
    /// against `base_dir`, `~/` against `home`. The error names the field.
    pub fn parse(value: &Value, base_dir: &Path, home: Option<&Path>) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err(
                "\"sandbox\" must be an object with \"read\", \"write\" and \"network\"".to_owned(),
            );
        };
        if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "\"sandbox\" has unknown key {unknown:?} (expected \"read\", \"write\" or \"network\")"
            ));
        }
        Ok(Self {
            read: paths(map, "read", base_dir, home)?,
            write: paths(map, "write", base_dir, home)?,
            network: network(map.get("network"))?,
        })
    }

    /// The spec as one line of JSON, for the helper that applies it.
    pub fn to_json(&self) -> String {
        let list = |paths: &[PathBuf]| {
            Value::Array(
                paths
                    .iter()
                    .map(|p| Value::String(p.to_string_lossy().into_owned()))
                    .collect(),
            )
        };
        let network = match &self.network {
            Network::All => Value::String("all".to_owned()),
            Network::None => Value::String("none".to_owned()),
            Network::Ports(endpoints) => Value::Array(
                endpoints
                    .iter()
                    .map(|e| Value::String(e.to_string()))
                    .collect(),
            ),
        };
        let mut map = Map::new();
        map.insert("read".to_owned(), list(&self.read));
        map.insert("write".to_owned(), list(&self.write));
        map.insert("network".to_owned(), network);
        Value::Object(map).to_string()
    }

    /// Reads back what [`Sandbox::to_json`] wrote (whose paths are absolute).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("the sandbox spec is not JSON: {e}"))?;
        Self::parse(&value, Path::new("/"), None)
    }
}

fn paths(
    map: &Map<String, Value>,
    key: &str,
    base_dir: &Path,
    home: Option<&Path>,
) -> Result<Vec<PathBuf>, String> {
    let Some(value) = map.get(key) else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = value else {
        return Err(format!("\"sandbox.{key}\" must be a list of paths"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::String(path) = item else {
                return Err(format!("\"sandbox.{key}[{i}]\" must be a string"));
            };
            resolve(path, base_dir, home).map_err(|why| format!("\"sandbox.{key}[{i}]\" {why}"))
        })
        .collect()
}

fn resolve(path: &str, base_dir: &Path, home: Option<&Path>) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if path.contains('\0') {
        return Err("must not contain NUL".to_owned());
    }
    let tilde = path
        .strip_prefix("~/")
        .or_else(|| (path == "~").then_some(""));
    match tilde {
        Some(rest) => {
            let home = home.ok_or_else(|| "starts with ~ but $HOME is not set".to_owned())?;
            Ok(home.join(rest))
        }
        None if path.starts_with('~') => {
            Err("may start with ~/ (the home directory), not ~USER".to_owned())
        }
        None => Ok(base_dir.join(path)),
    }
}

fn network(value: Option<&Value>) -> Result<Network, String> {
    const WHAT: &str = "\"sandbox.network\" must be \"none\", \"all\" or a list of \"HOST:PORT\"";
    match value {
        None => Ok(Network::All),
        Some(Value::String(word)) => match word.as_str() {
            "all" => Ok(Network::All),
            "none" => Ok(Network::None),
            _ => Err(WHAT.to_owned()),
        },
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let Value::String(text) = item else {
                    return Err(format!(
                        "\"sandbox.network[{i}]\" must be a \"HOST:PORT\" string"
                    ));
                };
                endpoint(text).map_err(|why| format!("\"sandbox.network[{i}]\": {why}"))
            })
            .collect::<Result<_, _>>()
            .map(Network::Ports),
        Some(_) => Err(WHAT.to_owned()),
    }
}

/// `HOST:PORT`, where HOST is `*`, a name, an IPv4 address or `[IPv6]`.
fn endpoint(text: &str) -> Result<Endpoint, String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{text:?} has no port from 1 to 65535"))?;
    let bracketed = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
    let plain = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
    if !(host == "*" || bracketed || plain) {
        return Err(format!(
            "{text:?}: the host must be *, a name, an IPv4 address or [an IPv6 address]"
        ));
    }
    Ok(Endpoint {
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<Sandbox, String> {
        Sandbox::parse(&value, Path::new("/etc/mcp"), Some(Path::new("/home/u")))
    }

    #[test]
    fn paths_are_resolved_against_the_file_and_home() {
        let sandbox = parse(json!({"read": ["data", "~/notes", "/abs", "~"], "write": ["~/out"]}))
            .expect("valid");
        assert_eq!(
            sandbox.read,
            [
                PathBuf::from("/etc/mcp/data"),
                PathBuf::from("/home/u/notes"),
                PathBuf::from("/abs"),
                PathBuf::from("/home/u/"),
            ]
        );
        assert_eq!(sandbox.write, [PathBuf::from("/home/u/out")]);
        assert_eq!(sandbox.network, Network::All);
    }

    #[test]
    fn network_words_and_ports() {
        assert_eq!(
            parse(json!({"network": "none"})).expect("none").network,
            Network::None
        );
        assert_eq!(
            parse(json!({"network": "all"})).expect("all").network,
            Network::All
        );
        let ports = parse(
            json!({"network": ["api.example.com:443", "*:80", "[::1]:8080", "127.0.0.1:5432"]}),
        )
        .expect("ports")
        .network;
        let Network::Ports(list) = ports else {
            panic!("a port list: {ports:?}");
        };
        let ports: Vec<u16> = list.iter().map(|e| e.port).collect();
        assert_eq!(ports, [443, 80, 8080, 5432]);
        assert_eq!(list[2].host, "[::1]");
    }

    #[test]
    fn bad_entries_name_the_field() {
        let cases = [
            (json!(true), "\"sandbox\" must be an object"),
            (json!({"reads": []}), "unknown key \"reads\""),
            (json!({"read": "/x"}), "\"sandbox.read\" must be a list"),
            (
                json!({"write": [1]}),
                "\"sandbox.write[0]\" must be a string",
            ),
            (
                json!({"read": [""]}),
                "\"sandbox.read[0]\" must not be empty",
            ),
            (json!({"read": ["~bob/x"]}), "not ~USER"),
            (json!({"network": "some"}), "\"sandbox.network\" must be"),
            (json!({"network": ["host"]}), "is not HOST:PORT"),
            (json!({"network": ["host:0"]}), "no port from 1 to 65535"),
            (
                json!({"network": ["host:99999"]}),
                "no port from 1 to 65535",
            ),
            (json!({"network": [":80"]}), "the host must be"),
            (json!({"network": ["a b:80"]}), "the host must be"),
            (json!({"network": [443]}), "\"sandbox.network[0]\" must be"),
        ];
        for (value, expected) in cases {
            let err = parse(value.clone()).expect_err(&value.to_string());
            assert!(err.contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn home_is_needed_for_a_tilde() {
        let err =
            Sandbox::parse(&json!({"read": ["~/x"]}), Path::new("/"), None).expect_err("no home");
        assert!(err.contains("$HOME is not set"), "{err}");
    }

    #[test]
    fn the_spec_reads_back_as_written() {
        let sandbox = parse(json!({"read": ["a"], "write": ["~/b"], "network": ["x:1", "*:2"]}))
            .expect("valid");
        assert_eq!(Sandbox::from_json(&sandbox.to_json()), Ok(sandbox));
        let none = parse(json!({"network": "none"})).expect("valid");
        assert_eq!(Sandbox::from_json(&none.to_json()), Ok(none));
        assert!(Sandbox::from_json("{").is_err());
    }
}
