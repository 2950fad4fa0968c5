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

/// Starts real worker processes from a command line.
#[derive(Debug, Clone)]
pub struct ProcessSpawner {
    pub spec: Spec,
    pub timeouts: StopTimeouts,
    pub stderr: Passthrough,
}

impl ProcessSpawner {
    pub fn new(spec: Spec, timeouts: StopTimeouts, stderr: Passthrough) -> Self {
        Self {
            spec,
            timeouts,
            stderr,
        }
    }
}

impl Spawner for ProcessSpawner {
    fn spawn(&mut self, generation: u64) -> Result<WorkerIo, SpawnFailure> {
        let mut spec = self.spec.clone();
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
        tokio::spawn(stderr::pump(spawned.stderr, self.stderr, move |line| {
            if let Ok(mut t) = tail.lock() {
                t.push_line(line);
            }
        }));
        Ok(WorkerIo {
            stdin: Box::pin(spawned.stdin),
            stdout: Box::pin(spawned.stdout),
            pid: Some(pid),
            stop: Box::new(move || stopper.stop()),
            exited: Box::pin(async move { process.wait().await }),
            stderr_tail,
        })
    }
}
