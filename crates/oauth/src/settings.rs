//! What a server entry says about OAuth: its `oauth` object (`[mcp_servers.NAME.oauth]`
//! in Codex's TOML), or the command line's flags.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::Secret;

/// OAuth settings of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `false` turns native OAuth off for the entry (a 401 is then
    /// reported as it is).
    pub enabled: bool,
    /// A pre-registered client's id (`client_id`).
    pub client_id: Option<String>,
    /// Its secret, read from `client_secret_file` or from the env file's
    /// `client_secret_env` key.
    pub client_secret: Option<Secret>,
    /// An https URL naming a client ID metadata document
    /// (`client_metadata_url`), used as the client id where the
    /// authorization server supports them.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for instead of the challenge's or the metadata's
    /// (`scopes`).
    pub scopes: Option<Vec<String>>,
    /// Whether to send the RFC 8707 resource indicator (`resource`,
    /// default true); some providers reject it.
    pub resource: bool,
    /// A fixed port for the loopback redirect (`redirect_port`), for a
    /// client registered with one redirect URI.
    pub redirect_port: Option<u16>,
    /// Tokens and clients go to the OS keyring (`store: "keyring"`;
    /// default `"file"`).
    pub keyring: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: true,
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            scopes: None,
            resource: true,
            redirect_port: None,
            keyring: false,
        }
    }
}

/// An entry's `oauth` field that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// It is not an object of the known fields.
    #[error("server {0:?}: oauth: {1}")]
    Invalid(String, String),
    /// The secret could not be read.
    #[error("server {0:?}: oauth: {1}")]
    Secret(String, String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    enabled: Option<bool>,
    client_id: Option<String>,
    client_secret_file: Option<PathBuf>,
    client_secret_env: Option<String>,
    client_metadata_url: Option<String>,
    scopes: Option<ScopeList>,
    resource: Option<bool>,
    redirect_port: Option<u16>,
    store: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScopeList {
    List(Vec<String>),
    Spaced(String),
}

impl Settings {
    /// The settings of an entry: its `oauth` field (`false` turns OAuth
    /// off; an object sets the fields above). `base` resolves a relative
    /// `client_secret_file`; `env_file` is read for `client_secret_env`.
    pub fn from_entry(
        name: &str,
        extra: &Map<String, Value>,
        base: Option<&std::path::Path>,
        env_lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let invalid = |m: String| SettingsError::Invalid(name.to_owned(), m);
        let raw = match extra.get("oauth") {
            None => return Ok(Self::default()),
            Some(Value::Bool(enabled)) => {
                return Ok(Self {
                    enabled: *enabled,
                    ..Self::default()
                });
            }
            Some(value @ Value::Object(_)) => {
                Raw::deserialize(value).map_err(|e| invalid(e.to_string()))?
            }
            Some(_) => return Err(invalid("must be an object or a boolean".into())),
        };
        let client_secret = match (&raw.client_secret_file, &raw.client_secret_env) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "give client_secret_file or client_secret_env, not both".into(),
                ));
            }
            (Some(path), None) => {
                let path = match base {
                    Some(base) if path.is_relative() => base.join(path),
                    _ => path.clone(),
                };
                Some(read_secret_file(&path).map_err(|e| SettingsError::Secret(name.into(), e))?)
            }
            (None, Some(key)) => Some(Secret::new(env_lookup(key).ok_or_else(|| {
                SettingsError::Secret(
                    name.into(),
                    format!("client_secret_env: {key} is not in the env file or the environment"),
                )
            })?)),
            (None, None) => None,
        };
        let settings = Self {
            enabled: raw.enabled.unwrap_or(true),
            client_id: raw.client_id,
            client_secret,
            client_metadata_url: raw.client_metadata_url,
            scopes: raw.scopes.map(|s| match s {
                ScopeList::List(list) => list,
                ScopeList::Spaced(s) => crate::challenge::split_scopes(&s),
            }),
            resource: raw.resource.unwrap_or(true),
            redirect_port: raw.redirect_port,
            keyring: match raw.store.as_deref() {
                None | Some("file") => false,
                Some("keyring") => true,
                Some(other) => {
                    return Err(invalid(format!(
                        "store must be \"file\" or \"keyring\", not {other:?}"
                    )));
                }
            },
        };
        settings.check().map_err(invalid)?;
        Ok(settings)
    }

    /// Refuses combinations that cannot work.
    pub fn check(&self) -> Result<(), String> {
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err("a client secret needs a client_id".into());
        }
        if let Some(url) = &self.client_metadata_url {
            let ok = reqwest::Url::parse(url)
                .is_ok_and(|u| u.scheme() == "https" && u.path() != "/" && !u.path().is_empty());
            if !ok {
                return Err("client_metadata_url must be an https URL with a path".into());
            }
        }
        Ok(())
    }
}

/// A secret from a file: its first line, trimmed.
pub fn read_secret_file(path: &std::path::Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the client secret file {}: {e}", path.display()))?;
    let secret = text.lines().next().unwrap_or("").trim();
    if secret.is_empty() {
        return Err(format!(
            "the client secret file {} is empty",
            path.display()
        ));
    }
    Ok(Secret::new(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(oauth: Value) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("oauth".into(), oauth);
        map
    }

    #[test]
    fn reads_the_fields() {
        let extra = entry(serde_json::json!({
            "client_id": "abc",
            "client_secret_env": "SECRET",
            "scopes": "a b",
            "resource": false,
            "redirect_port": 7777,
            "store": "keyring",
        }));
        let s = Settings::from_entry("x", &extra, None, &|k| (k == "SECRET").then(|| "s3".into()))
            .expect("settings");
        assert_eq!(s.client_id.as_deref(), Some("abc"));
        assert_eq!(s.client_secret.as_ref().map(Secret::expose), Some("s3"));
        assert_eq!(s.scopes, Some(vec!["a".to_owned(), "b".to_owned()]));
        assert!(!s.resource);
        assert_eq!(s.redirect_port, Some(7777));
        assert!(s.keyring);
        assert!(format!("{s:?}").contains("***") && !format!("{s:?}").contains("s3"));
    }

    #[test]
    fn refuses_bad_entries() {
        let none = |_: &str| None;
        for bad in [
            serde_json::json!({"client_idd": "x"}),
            serde_json::json!("yes"),
            serde_json::json!({"client_secret_env": "K"}),
            serde_json::json!({"client_metadata_url": "http://a.example/c.json"}),
            serde_json::json!({"client_metadata_url": "https://a.example"}),
            serde_json::json!({"store": "vault"}),
        ] {
            assert!(
                Settings::from_entry("x", &entry(bad.clone()), None, &none).is_err(),
                "{bad}"
            );
        }
        let off = Settings::from_entry("x", &entry(Value::Bool(false)), None, &none).expect("off");
        assert!(!off.enabled);
        assert_eq!(
            Settings::from_entry("x", &Map::new(), None, &none).expect("d"),
            Settings::default()
        );
    }
}
