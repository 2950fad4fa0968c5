//! From a server definition to a process spawner.

use std::ffi::OsString;
use std::sync::Arc;

use mcpvisor_config::ServerDef;
use mcpvisor_config::secrets::resolve_env;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_process::{Spec, StopTimeouts};
use mcpvisor_session::ProcessSpawner;

/// A server to run: its definition plus `--env` overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct ServerSpec {
    pub def: ServerDef,
    /// `--env KEY=VAL`, layered over everything else.
    pub env_overrides: Vec<(String, String)>,
}

/// A spawner for `spec`. The env file is read at every spawn, so a key added
/// later reaches the next restart; its values never appear in errors.
pub fn spawner(spec: &ServerSpec, stop: StopTimeouts, stderr: Passthrough) -> ProcessSpawner {
    let def = &spec.def;
    let process = Spec {
        program: OsString::from(&def.command),
        args: def.args.iter().map(OsString::from).collect(),
        env: def
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        cwd: def.cwd.clone(),
    };
    let mut spawner = ProcessSpawner::new(process, stop, stderr);
    if def.env_file.is_some() {
        let def = def.clone();
        spawner.env_source = Some(Arc::new(move || {
            resolve_env(&def).map_err(|e| e.to_string())
        }));
    }
    spawner.env_overrides = spec
        .env_overrides
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    spawner
}
