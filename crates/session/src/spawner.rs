//! How a session gets a new worker generation.
//!
//! The session asks a [`Spawner`] for a worker and gets its pipes plus a way
//! to stop it and to learn of its end. [`ProcessSpawner`] starts real
//! processes; tests plug in workers that live inside the test.

use std::ffi::OsString;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use mcpvisor_config::report::StderrTail;
use mcpvisor_config::{AuthDetector, Secret};
use mcpvisor_process::stderr::{self, Passthrough};
use mcpvisor_process::{Exit, Spec, StopTimeouts};
use tokio::io::{AsyncRead, AsyncWrite};

/// The pipes and controls of one started worker.
pub struct WorkerIo {
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    pub pid: Option<u32>,
    /// Asks the worker to stop in layers; the session closes stdin first.
    pub stop: Box<dyn Fn() + Send>,
    /// Resolves once, when the worker has ended.
    pub exited: BoxFuture<'static, Exit>,
    /// The last lines it wrote to stderr, for crash reports.
    pub stderr_tail: Arc<Mutex<StderrTail>>,
    /// Set while it waits on an authorization link (initialize then waits
    /// up to `Config::auth_timeout`).
    pub auth: Option<Arc<AuthPending>>,
}

impl std::fmt::Debug for WorkerIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerIo")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// A worker could not be started.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SpawnFailure(pub String);

/// Makes worker generations.
pub trait Spawner: Send + 'static {
    /// Starts generation `generation`.
    fn spawn(&mut self, generation: u64) -> Result<WorkerIo, SpawnFailure>;
}

/// Computes extra environment at each spawn (secrets read fresh from an
/// env file). The error says what is wrong without quoting any value.
pub type EnvSource = Arc<dyn Fn() -> Result<Vec<(String, Secret)>, String> + Send + Sync>;

/// Sees each stderr line of each generation (never logged by mcpvisor).
pub type StderrObserver = Arc<dyn Fn(u64, &str) + Send + Sync>;

/// An authorization link a worker printed and is waiting on, if any.
#[derive(Debug, Default)]
pub struct AuthPending(Mutex<Option<String>>);

impl AuthPending {
    /// The link the worker is waiting on.
    pub fn url(&self) -> Option<String> {
        self.0.lock().ok().and_then(|u| u.clone())
    }

    pub(crate) fn set(&self, url: String) {
        if let Ok(mut u) = self.0.lock() {
            *u = Some(url);
        }
    }

    pub(crate) fn clear(&self) {
        if let Ok(mut u) = self.0.lock() {
            *u = None;
        }
    }
}

/// Starts real worker processes from a command line.
#[derive(Clone)]
pub struct ProcessSpawner {
    pub spec: Spec,
    pub timeouts: StopTimeouts,
    pub stderr: Passthrough,
    /// Read at every spawn, layered over `spec.env`.
    pub env_source: Option<EnvSource>,
    /// Layered last (`--env KEY=VAL`).
    pub env_overrides: Vec<(OsString, OsString)>,
    pub observer: Option<StderrObserver>,
    /// Set while the newest generation waits on an authorization link.
    pub auth: Arc<AuthPending>,
}

impl std::fmt::Debug for ProcessSpawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessSpawner")
            .field("program", &self.spec.program)
            .finish_non_exhaustive()
    }
}

impl ProcessSpawner {
    pub fn new(spec: Spec, timeouts: StopTimeouts, stderr: Passthrough) -> Self {
        Self {
            spec,
            timeouts,
            stderr,
            env_source: None,
            env_overrides: Vec::new(),
            observer: None,
            auth: Arc::default(),
        }
    }
}

impl Spawner for ProcessSpawner {
    fn spawn(&mut self, generation: u64) -> Result<WorkerIo, SpawnFailure> {
        let mut spec = self.spec.clone();
        if let Some(source) = &self.env_source {
            let secrets = source().map_err(SpawnFailure)?;
            spec.env.extend(
                secrets
                    .iter()
                    .map(|(k, v)| (OsString::from(k), OsString::from(v.expose()))),
            );
        }
        spec.env.extend(self.env_overrides.iter().cloned());
        spec.env.push((
            OsString::from("MCPVISOR_GENERATION"),
            OsString::from(generation.to_string()),
        ));
        let spawned = mcpvisor_process::spawn(&spec, self.timeouts)
            .map_err(|e| SpawnFailure(e.to_string()))?;
        let mut process = spawned.process;
        let pid = process.pid();
        let stopper = process.stopper();
        let stderr_tail = Arc::new(Mutex::new(StderrTail::new()));
        let tail = Arc::clone(&stderr_tail);
        let observer = self.observer.clone();
        let auth = Arc::clone(&self.auth);
        auth.clear();
        let mut detector = AuthDetector::new();
        tokio::spawn(stderr::pump(spawned.stderr, self.stderr, move |line| {
            if let Ok(mut t) = tail.lock() {
                t.push_line(line);
            }
            if let Some(url) = detector.feed(line) {
                if auth.url().as_deref() != Some(url.as_str()) {
                    tracing::warn!(
                        generation,
                        "the server is waiting for authorization: open {url}"
                    );
                }
                auth.set(url);
            }
            if let Some(observe) = &observer {
                observe(generation, line);
            }
        }));
        Ok(WorkerIo {
            stdin: Box::pin(spawned.stdin),
            stdout: Box::pin(spawned.stdout),
            pid: Some(pid),
            stop: Box::new(move || stopper.stop()),
            exited: Box::pin(async move { process.wait().await }),
            stderr_tail,
            auth: Some(Arc::clone(&self.auth)),
        })
    }
}
