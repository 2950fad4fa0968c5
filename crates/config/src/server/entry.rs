//! Validating one server entry of the value tree into a [`ServerDef`].
//!
//! Errors are returned as a message that names the field; the caller adds
//! the file and the entry. Messages never quote a value from the file, since
//! `env` values and headers are often credentials.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::{
    EraChoice, Format, PinPolicy, RemoteTransport, ServerDef, ToolFilter, ToolOverride,
    UnsupportedServer, supervision,
};
use crate::duration::{parse_duration, seconds};
use crate::sandbox::Sandbox;

/// What one entry turned out to be.
#[expect(
    clippy::large_enum_variant,
    reason = "one short-lived value per entry while loading"
)]
pub(super) enum Entry {
    Stdio(ServerDef),
    Unsupported(UnsupportedServer),
}

/// Fields this module interprets; everything else goes to `extra`.
const KNOWN: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "env_file",
    "envFile",
    "env_keys",
    "init_timeout",
    "auth_timeout",
    "disabled",
    "pin",
    "era",
    "tools",
    "sandbox",
    "url",
    // Windsurf's name for `url`.
    "serverUrl",
    "headers",
    // Codex's names.
    "http_headers",
    "env_http_headers",
    "bearer_token_env_var",
    "startup_timeout_sec",
    "startup_timeout_ms",
    "enabled",
    "enabled_tools",
    "disabled_tools",
];

pub(super) fn parse(
    name: &str,
    value: &Value,
    base_dir: &Path,
    format: Format,
) -> Result<Entry, String> {
    let Value::Object(map) = value else {
        return Err(format!("the entry must be {}", format.map_noun()));
    };
    let fields = Fields { map, format };

    let kind = fields.string("type")?;
    let (remote, transport) = match kind {
        None => (
            !map.contains_key("command")
                && (map.contains_key("url") || map.contains_key("serverUrl")),
            RemoteTransport::Auto,
        ),
        Some("http" | "streamable-http" | "streamableHttp") => (true, RemoteTransport::Http),
        Some("sse") => (true, RemoteTransport::Sse),
        Some("stdio") => (false, RemoteTransport::Auto),
        Some(other) => {
            return Ok(Entry::Unsupported(UnsupportedServer {
                name: name.to_owned(),
                transport: other.to_owned(),
                fields: map.clone(),
            }));
        }
    };
    let (command, url) = if remote {
        let url = match fields.string("url")? {
            Some(url) => url,
            None => fields
                .string("serverUrl")?
                .ok_or_else(|| "\"url\" is missing".to_owned())?,
        };
        check_url(url)?;
        if map.contains_key("command") {
            return Err("a remote server (\"url\") has no \"command\"".to_owned());
        }
        (String::new(), Some(url.to_owned()))
    } else {
        let command = fields
            .string("command")?
            .ok_or_else(|| "\"command\" is missing".to_owned())?;
        if command.trim().is_empty() {
            return Err("\"command\" must not be empty".to_owned());
        }
        (command.to_owned(), None)
    };
    let headers = if remote {
        fields.headers()?
    } else {
        BTreeMap::new()
    };

    let env_file = match (
        fields.path("env_file", base_dir)?,
        fields.path("envFile", base_dir)?,
    ) {
        (Some(_), Some(_)) => return Err("both \"env_file\" and \"envFile\" are set".to_owned()),
        (one, other) => one.or(other),
    };
    let env_keys = fields.string_list("env_keys")?.unwrap_or_default();
    if !env_keys.is_empty() && env_file.is_none() {
        return Err("\"env_keys\" needs \"env_file\" to say where the keys are".to_owned());
    }

    let init_timeout = match fields.duration("init_timeout")? {
        Some(timeout) => Some(timeout),
        None => match fields.millis("startup_timeout_ms")? {
            Some(timeout) => Some(timeout),
            None => fields.duration("startup_timeout_sec")?,
        },
    };

    let sandbox = match fields.get("sandbox") {
        None => None,
        Some(_) if remote => {
            return Err(
                "a remote server (\"url\") has no \"sandbox\": it runs elsewhere".to_owned(),
            );
        }
        Some(value) => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            Some(Sandbox::parse(value, base_dir, home.as_deref())?)
        }
    };

    let disabled =
        fields.bool("disabled")?.unwrap_or(false) || fields.bool("enabled")? == Some(false);

    let pin = match fields.string("pin")? {
        None => None,
        Some(name) => Some(PinPolicy::parse(name).ok_or_else(|| {
            format!(
                "\"pin\" is {name:?}; expected one of {}",
                PinPolicy::NAMES.join(", ")
            )
        })?),
    };

    let era = match fields.string("era")? {
        None => EraChoice::Auto,
        Some(_) if remote => {
            return Err(
                "a remote server (\"url\") has no \"era\": its connection finds its era".to_owned(),
            );
        }
        Some(name) => EraChoice::parse(name).ok_or_else(|| {
            format!(
                "\"era\" is {name:?}; expected one of {}",
                EraChoice::NAMES.join(", ")
            )
        })?,
    };

    Ok(Entry::Stdio(ServerDef {
        name: name.to_owned(),
        command,
        args: fields.string_list("args")?.unwrap_or_default(),
        env: fields.string_map("env")?.unwrap_or_default(),
        cwd: fields.path("cwd", base_dir)?,
        env_file,
        env_keys,
        init_timeout,
        auth_timeout: fields.duration("auth_timeout")?,
        disabled,
        tools: fields.tools()?,
        sandbox,
        supervision: supervision::parse(&fields)?,
        url,
        transport,
        headers,
        extra: map
            .iter()
            .filter(|(key, _)| {
                !KNOWN.contains(&key.as_str()) && !supervision::KNOWN.contains(&key.as_str())
            })
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        source: None,
        pin,
        era,
    }))
}

/// A remote server's URL must be `http://` or `https://` with a host. The
/// message never quotes the URL (its query may carry a key).
fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| "\"url\" must start with http:// or https://".to_owned())?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("\"url\" has no host".to_owned());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("\"url\" must not contain spaces or control characters".to_owned());
    }
    Ok(())
}

/// Whether `name` is a valid HTTP header name (RFC 9110 token).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_var_name(var: &str) -> bool {
    !var.is_empty() && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Typed access to an entry's fields, with errors that name the field.
pub(super) struct Fields<'a> {
    map: &'a Map<String, Value>,
    format: Format,
}

impl<'a> Fields<'a> {
    /// The field as written, whatever its type.
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<&'a str>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("{key:?} must be a string")),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(format!("{key:?} must be true or false")),
        }
    }

    fn string_list(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        let Some(value) = self.map.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = value else {
            return Err(format!("{key:?} must be a list of strings"));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                _ => Err(format!("\"{key}[{i}]\" must be a string")),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    fn string_map(&self, key: &str) -> Result<Option<BTreeMap<String, String>>, String> {
        let Some(value) = self.map.get(key) else {
            return Ok(None);
        };
        let Value::Object(entries) = value else {
            return Err(format!("{key:?} must be {}", self.format.map_noun()));
        };
        entries
            .iter()
            .map(|(name, value)| match value {
                Value::String(s) => Ok((name.clone(), s.clone())),
                _ => Err(format!("\"{key}.{name}\" must be a string")),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    fn path(&self, key: &str, base_dir: &Path) -> Result<Option<PathBuf>, String> {
        match self.string(key)? {
            None => Ok(None),
            Some("") => Err(format!("{key:?} must not be empty")),
            Some(path) => Ok(Some(base_dir.join(path))),
        }
    }

    /// A number of seconds or a string such as `"30s"`; never zero.
    pub(super) fn duration(&self, key: &str) -> Result<Option<Duration>, String> {
        let duration = match self.map.get(key) {
            None => return Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .and_then(seconds)
                .ok_or_else(|| format!("{key:?} must be a positive number of seconds"))?,
            Some(Value::String(s)) => parse_duration(s).map_err(|err| format!("{key:?}: {err}"))?,
            Some(_) => {
                return Err(format!(
                    "{key:?} must be a number of seconds or a string like \"30s\""
                ));
            }
        };
        non_zero(key, duration)
    }

    /// A whole number of milliseconds (Codex's `startup_timeout_ms`).
    fn millis(&self, key: &str) -> Result<Option<Duration>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(value) => {
                let millis = value
                    .as_u64()
                    .ok_or_else(|| format!("{key:?} must be a whole number of milliseconds"))?;
                non_zero(key, Duration::from_millis(millis))
            }
        }
    }

    /// `headers` (or Codex's `http_headers`), plus Codex's
    /// `bearer_token_env_var` as `Authorization: Bearer ${VAR}`.
    fn headers(&self) -> Result<BTreeMap<String, String>, String> {
        let mut headers = match (
            self.string_map("headers")?,
            self.string_map("http_headers")?,
        ) {
            (Some(_), Some(_)) => {
                return Err("both \"headers\" and \"http_headers\" are set".to_owned());
            }
            (one, other) => one.or(other).unwrap_or_default(),
        };
        for (header, var) in self.string_map("env_http_headers")?.unwrap_or_default() {
            if !is_var_name(&var) {
                return Err(format!(
                    "\"env_http_headers.{header}\" must be a variable name"
                ));
            }
            headers.insert(header, format!("${{{var}}}"));
        }
        if let Some(var) = self.string("bearer_token_env_var")? {
            if !is_var_name(var) {
                return Err("\"bearer_token_env_var\" must be a variable name".to_owned());
            }
            if headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("authorization"))
            {
                return Err(
                    "both \"bearer_token_env_var\" and an Authorization header are set".to_owned(),
                );
            }
            headers.insert("Authorization".to_owned(), format!("Bearer ${{{var}}}"));
        }
        if let Some(bad) = headers.keys().find(|name| !is_header_name(name)) {
            return Err(format!(
                "header name {bad:?} is not a valid HTTP header name"
            ));
        }
        if let Some(bad) = headers
            .iter()
            .find(|(_, value)| value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0))
        {
            return Err(format!(
                "the value of header {:?} contains a line break or NUL",
                bad.0
            ));
        }
        Ok(headers)
    }

    /// `tools = {allow, deny, override}`, else Codex's
    /// `enabled_tools`/`disabled_tools`.
    fn tools(&self) -> Result<ToolFilter, String> {
        let mut filter = match self.map.get("tools") {
            None => ToolFilter::default(),
            Some(Value::Object(tools)) => {
                if let Some(unknown) = tools
                    .keys()
                    .find(|k| !["allow", "deny", "override"].contains(&k.as_str()))
                {
                    return Err(format!(
                        "\"tools\" has unknown key {unknown:?} (expected \"allow\", \"deny\" or \"override\")"
                    ));
                }
                let tools = Fields {
                    map: tools,
                    format: self.format,
                };
                ToolFilter {
                    allow: tools.string_list("allow").map_err(in_tools)?,
                    deny: tools
                        .string_list("deny")
                        .map_err(in_tools)?
                        .unwrap_or_default(),
                    overrides: tools.overrides()?,
                }
            }
            Some(_) => {
                return Err(format!(
                    "\"tools\" must be {} with \"allow\" and/or \"deny\" lists",
                    self.format.map_noun()
                ));
            }
        };
        if filter.allow.is_none() {
            filter.allow = self.string_list("enabled_tools")?;
        }
        filter
            .deny
            .extend(self.string_list("disabled_tools")?.unwrap_or_default());
        Ok(filter)
    }
}

impl Fields<'_> {
    /// `override = {NAME = {title, description, annotations}}`, inside
    /// `tools`.
    fn overrides(&self) -> Result<BTreeMap<String, ToolOverride>, String> {
        let noun = self.format.map_noun();
        let Some(value) = self.map.get("override") else {
            return Ok(BTreeMap::new());
        };
        let Value::Object(tools) = value else {
            return Err(format!(
                "\"tools.override\" must be {noun} of tool names to {{title, description, annotations}}"
            ));
        };
        let mut overrides = BTreeMap::new();
        for (tool, value) in tools {
            let at = format!("\"tools.override.{tool}");
            let Value::Object(fields) = value else {
                return Err(format!(
                    "{at}\" must be {noun} with \"title\", \"description\" and/or \"annotations\""
                ));
            };
            let mut over = ToolOverride::default();
            for (key, value) in fields {
                match (key.as_str(), value) {
                    ("title", Value::String(s)) => over.title = Some(s.clone()),
                    ("description", Value::String(s)) => over.description = Some(s.clone()),
                    ("annotations", Value::Object(hints)) => over.annotations = hints.clone(),
                    ("title" | "description", _) => {
                        return Err(format!("{at}.{key}\" must be a string"));
                    }
                    ("annotations", _) => {
                        return Err(format!("{at}.annotations\" must be {noun}"));
                    }
                    (unknown, _) => {
                        return Err(format!(
                            "{at}\" has unknown key {unknown:?} (expected \"title\", \"description\" or \"annotations\"; the name, the schemas and the rest stay the server's)"
                        ));
                    }
                }
            }
            overrides.insert(tool.clone(), over);
        }
        Ok(overrides)
    }
}

fn non_zero(key: &str, duration: Duration) -> Result<Option<Duration>, String> {
    if duration.is_zero() {
        Err(format!("{key:?} must be greater than zero"))
    } else {
        Ok(Some(duration))
    }
}

/// Re-words a nested field error: `"allow" ...` becomes `"tools.allow" ...`.
fn in_tools(message: String) -> String {
    format!("\"tools.{}", message.trim_start_matches('"'))
}
