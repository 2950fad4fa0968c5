//! From a server definition to a spawner: a process for a stdio server, a
//! remote session for a server with a `url`.

use std::ffi::OsString;
use std::sync::Arc;

use crate::sandbox;

use mcpvisor_config::ServerDef;
use mcpvisor_config::secrets::resolve_env;
use mcpvisor_process::Spec;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_remote::RemoteSpawner;
use mcpvisor_session::{Config, ProcessSpawner, SpawnFailure, Spawner, WorkerIo, WorkerReporter};

/// A server to run: its definition plus `--env` overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct ServerSpec {
    pub def: ServerDef,
    /// `--env KEY=VAL`, layered over everything else.
    pub env_overrides: Vec<(String, String)>,
}

/// Makes the generations of one server, local or remote.
#[derive(Debug)]
pub enum ServerSpawner {
    /// A stdio server: each generation is a process.
    Process(ProcessSpawner),
    /// A remote server: each generation is a Streamable HTTP session.
    Remote(RemoteSpawner),
    /// A remote definition that cannot be used: every start fails with
    /// this reason.
    Broken(String),
}

impl ServerSpawner {
    /// Puts `[name] ` before each stderr line its processes pass through,
    /// for a stderr that several servers share.
    pub fn with_stderr_named(mut self, name: &str) -> Self {
        if let ServerSpawner::Process(p) = &mut self {
            p.stderr_prefix = format!("[{name}] ");
        }
        self
    }
}

impl Spawner for ServerSpawner {
    fn spawn(
        &mut self,
        generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure> {
        match self {
            ServerSpawner::Process(p) => p.spawn(generation, reporter),
            ServerSpawner::Remote(r) => r.spawn(generation, reporter),
            ServerSpawner::Broken(reason) => Err(SpawnFailure(reason.clone())),
        }
    }
}

/// A spawner for `spec`, stopped and bounded as `cfg` says. The env file is
/// read at every spawn (a remote server's headers are filled from it at
/// every connect), so a key added later reaches the next restart; its
/// values never appear in errors.
pub fn spawner(spec: &ServerSpec, cfg: &Config, stderr: Passthrough) -> ServerSpawner {
    let def = &spec.def;
    mcpvisor_config::secrets::learn_entry(def, &spec.env_overrides);
    if def.is_remote() {
        return match RemoteSpawner::new(def, cfg.max_message_bytes, cfg.request_ceiling) {
            Ok(remote) => ServerSpawner::Remote(remote),
            Err(e) => ServerSpawner::Broken(e.to_string()),
        };
    }
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
    let sandboxed = match &def.sandbox {
        None => None,
        Some(rules) => match sandbox::wrap(process.clone(), &def.name, rules) {
            Ok(wrapped) => Some(wrapped),
            Err(reason) => return ServerSpawner::Broken(reason),
        },
    };
    let mut spawner = match sandboxed {
        None => ProcessSpawner::new(process, cfg.stop, stderr),
        Some(wrapped) => {
            let mut spawner = ProcessSpawner::new(wrapped, cfg.stop, stderr);
            spawner.private_tmp = true;
            spawner.preflight = Some(sandbox::preflight());
            spawner
        }
    };
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
    ServerSpawner::Process(spawner)
}
