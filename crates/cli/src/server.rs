//! Which server a command runs: `--config FILE NAME` or `-- CMD ARGS...`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcpvisor_config::ServerDef;
use mcpvisor_runner::ServerSpec;

/// A server, resolved and checked.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub spec: ServerSpec,
    /// Shown to the person: the config entry or the command line.
    pub label: String,
}

/// Resolves the server from `--config FILE NAME` or an inline command.
pub fn choose(
    config: Option<&Path>,
    name: Option<&str>,
    command: &[OsString],
    url: Option<&str>,
    headers: &[(String, String)],
    cwd: Option<&Path>,
    env: &[(String, String)],
) -> Result<Chosen, String> {
    if let Some(url) = url {
        if config.is_some() || !command.is_empty() {
            return Err("give one of --url URL, --config FILE NAME or a command after `--`".into());
        }
        if let Some(extra) = name {
            return Err(format!(
                "unexpected argument `{extra}` (with --url there is no NAME)"
            ));
        }
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .filter(|rest| !rest.is_empty() && !rest.starts_with('/'))
            .ok_or_else(|| "--url must be an http:// or https:// URL with a host".to_owned())?;
        let mut def = ServerDef::remote("remote", url);
        def.headers = headers.iter().cloned().collect();
        // The host only: a query may carry a key.
        let host = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let label = host.to_owned();
        return Ok(Chosen {
            spec: ServerSpec {
                def,
                env_overrides: env.to_vec(),
            },
            label,
        });
    }
    let (mut def, label) = match (config, name, command.is_empty()) {
        (Some(file), Some(name), true) => {
            let loaded = mcpvisor_config::server::load(file).map_err(|e| e.to_string())?;
            let def = loaded.get(name).map_err(|e| e.to_string())?.clone();
            if def.disabled {
                tracing::warn!(
                    "server {name:?} is disabled in {}; running it anyway",
                    file.display()
                );
            }
            (def, format!("{name} ({})", file.display()))
        }
        (Some(_), None, _) => return Err("--config FILE needs the NAME of a server in it".into()),
        (Some(_), Some(_), false) => {
            return Err("give either --config FILE NAME or a command after `--`, not both".into());
        }
        (None, Some(extra), _) => {
            return Err(format!(
                "unexpected argument `{extra}` (a server NAME needs --config FILE)"
            ));
        }
        (None, None, true) => {
            return Err(
                "no server given: use --config FILE NAME or put the command after `--`".into(),
            );
        }
        (None, None, false) => {
            let program = command[0].to_string_lossy().into_owned();
            let mut def = ServerDef::new("inline", program);
            def.args = command[1..]
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let label = command
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            (def, label)
        }
    };
    if let Some(cwd) = cwd {
        if !cwd.is_dir() {
            return Err(format!("--cwd {}: not a directory", cwd.display()));
        }
        def.cwd = Some(cwd.to_path_buf());
    }
    if def.is_remote() {
        def.headers.extend(headers.iter().cloned());
    } else {
        if !headers.is_empty() {
            return Err("--header is for a remote server (--url, or an entry with a url)".into());
        }
        check_program(Path::new(&def.command), def.cwd.as_deref())?;
    }
    Ok(Chosen {
        spec: ServerSpec {
            def,
            env_overrides: env.to_vec(),
        },
        label,
    })
}

impl Chosen {
    pub fn init_timeout(&self, default: Duration) -> Duration {
        self.spec.def.init_timeout.unwrap_or(default)
    }

    pub fn auth_timeout(&self, default: Duration) -> Duration {
        self.spec.def.auth_timeout.unwrap_or(default)
    }

    /// The directory offered to the server as its root.
    pub fn root(&self) -> Option<PathBuf> {
        self.spec
            .def
            .cwd
            .clone()
            .or_else(|| std::env::current_dir().ok())
    }
}

/// Fails early, with one clear line, for a command that cannot be started.
pub fn check_program(program: &Path, cwd: Option<&Path>) -> Result<(), String> {
    let path_var = std::env::var_os("PATH");
    mcpvisor_config::find_program(program, cwd, path_var.as_deref())
        .map(drop)
        .map_err(|e| format!("cannot run `{}`: {e}", program.display()))
}
