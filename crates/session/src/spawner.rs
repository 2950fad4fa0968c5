//! How a session gets a new worker generation.
//!
//! The session asks a [`Spawner`] for a worker and gets its pipes plus a way
//! to stop it and to learn of its end. What the spawner's own helpers notice
//! on the side (an authorization link on stderr) goes to the session as an
//! event through the generation's [`WorkerReporter`]. [`ProcessSpawner`]
//! starts real processes; tests plug in workers that live inside the test.

use std::ffi::OsString;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use mcpvisor_config::report::{ExitKind, StderrTail};
use mcpvisor_config::{AuthDetector, Secret, redact};
use mcpvisor_process::stderr::{self, Passthrough};
use mcpvisor_process::{Spec, StdinProbe, StopTimeouts};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::session::WorkerEvent;

/// The pipes and controls of one started worker.
pub struct WorkerIo {
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    pub pid: Option<u32>,
    /// Asks the worker to stop in layers; the session closes stdin first.
    pub stop: Box<dyn Fn() + Send>,
    /// Resolves once, when the worker has ended.
    pub exited: BoxFuture<'static, WorkerExit>,
    /// The last lines it wrote to stderr, for crash reports.
    pub stderr_tail: Arc<Mutex<StderrTail>>,
    /// Tells how many bytes written to `stdin` no process will read (see
    /// [`UnreadProbe`]); `None` when it cannot be told.
    pub unread: Option<UnreadProbe>,
}

/// How many of the bytes written to a worker's stdin no process will ever
/// read: `Some` once nothing reads the pipe any more, `None` while
/// something still may. The session asks when it closes the worker's
/// stdin, and drops the probe then: a probe may hold the pipe open.
pub type UnreadProbe = Box<dyn Fn() -> Option<u64> + Send>;

impl std::fmt::Debug for WorkerIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerIo")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// How a worker generation ended: a process's exit, or a remote server's
/// HTTP session's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerExit {
    /// Its exit code or signal, or how its HTTP session ended.
    pub status: ExitKind,
    /// How long it ran.
    pub uptime: std::time::Duration,
    /// Whether mcpvisor asked it to stop (as opposed to it ending on its own).
    pub requested: bool,
}

impl From<mcpvisor_process::Exit> for WorkerExit {
    fn from(exit: mcpvisor_process::Exit) -> Self {
        Self {
            status: exit.status.map_or(ExitKind::Unknown, ExitKind::from),
            uptime: exit.uptime,
            requested: exit.requested,
        }
    }
}

/// A worker could not be started.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SpawnFailure(pub String);

/// Makes worker generations.
pub trait Spawner: Send + 'static {
    /// Starts generation `generation`; what its helpers notice on the side
    /// goes to `reporter`.
    fn spawn(
        &mut self,
        generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure>;
}

/// Reports what one generation's helpers notice on the side (its stderr
/// pump) to the session, as events on that generation's event channel.
#[derive(Debug, Clone)]
pub struct WorkerReporter {
    generation: u64,
    events: mpsc::Sender<(u64, WorkerEvent)>,
}

impl WorkerReporter {
    pub(crate) fn new(generation: u64, events: mpsc::Sender<(u64, WorkerEvent)>) -> Self {
        Self { generation, events }
    }

    /// The worker waits for a person to open the authorization link `url`;
    /// `reason` says why, when known (a refused refresh, "not authorized
    /// yet"). Never blocks: a session a whole queue behind misses it.
    pub fn auth_prompt(&self, url: String, reason: Option<String>) {
        let event = (self.generation, WorkerEvent::AuthPrompt(url, reason));
        if self.events.try_send(event).is_err() {
            tracing::debug!(
                generation = self.generation,
                "authorization prompt not reported: the session is behind"
            );
        }
    }
}

impl WorkerReporter {
    /// The request with worker-side id `wid` never reached the server, and
    /// the worker is ending (a remote server that no longer knows its
    /// session, or cannot be connected to). When the generation ends, the
    /// request waits for the next one, as one of which no byte was written
    /// does. Never blocks: a session a whole queue behind fails it instead.
    pub fn undelivered(&self, wid: u64) {
        let event = (self.generation, WorkerEvent::Undelivered(wid));
        if self.events.try_send(event).is_err() {
            tracing::debug!(
                generation = self.generation,
                "undelivered request not reported: the session is behind"
            );
        }
    }
}

/// How long a worker's end waits for its stderr to be read to the end.
const STDERR_DRAIN: std::time::Duration = std::time::Duration::from_millis(250);

/// A stderr line as it is passed through: without the known secrets.
fn redact_line(line: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    redact::global().redact_bytes(line)
}

/// Computes extra environment at each spawn (secrets read fresh from an
/// env file). The error says what is wrong without quoting any value.
pub type EnvSource = Arc<dyn Fn() -> Result<Vec<(String, Secret)>, String> + Send + Sync>;

/// Sees each stderr line of each generation (never logged by mcpvisor).
pub type StderrObserver = Arc<dyn Fn(u64, &str) + Send + Sync>;

/// Runs before a spawn with the very spec that is about to start, and
/// refuses it with one line (a sandbox the kernel cannot apply).
pub type Preflight = Arc<dyn Fn(&Spec) -> Result<(), String> + Send + Sync>;

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
    /// Written before each stderr line passed through (`[name] ` in a
    /// gateway, where many servers share its stderr).
    pub stderr_prefix: String,
    /// Gives each generation a temporary directory of its own as `TMPDIR`
    /// (mode 0700), removed once it has ended.
    pub private_tmp: bool,
    /// Checked before each spawn; its error is the spawn's failure.
    pub preflight: Option<Preflight>,
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
            stderr_prefix: String::new(),
            private_tmp: false,
            preflight: None,
        }
    }
}

impl Spawner for ProcessSpawner {
    fn spawn(
        &mut self,
        generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure> {
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
        let tmp = if self.private_tmp {
            let dir = tempfile::Builder::new()
                .prefix("mcpvisor-tmp-")
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .tempdir()
                .map_err(|e| {
                    SpawnFailure(format!("cannot make its private temporary directory: {e}"))
                })?;
            spec.env
                .push((OsString::from("TMPDIR"), dir.path().as_os_str().to_owned()));
            Some(dir)
        } else {
            None
        };
        if let Some(check) = &self.preflight {
            check(&spec).map_err(SpawnFailure)?;
        }
        let spawned = mcpvisor_process::spawn(&spec, self.timeouts)
            .map_err(|e| SpawnFailure(e.to_string()))?;
        let mut process = spawned.process;
        let pid = process.pid();
        let stopper = process.stopper();
        let unread = match StdinProbe::new(&spawned.stdin) {
            Ok(probe) => Some(Box::new(move || probe.unread()) as UnreadProbe),
            Err(e) => {
                tracing::debug!(generation, error = %e, "cannot watch the worker's stdin pipe");
                None
            }
        };
        let stderr_tail = Arc::new(Mutex::new(StderrTail::new()));
        let tail = Arc::clone(&stderr_tail);
        let observer = self.observer.clone();
        let mut detector = AuthDetector::new();
        let mut reported: Option<String> = None;
        let (mode, prefix) = (self.stderr, self.stderr_prefix.clone());
        let observe = move |line: &str| {
            // The link is looked for in the line as written; what is kept
            // and shown has the known secrets taken out.
            if let Some(url) = detector.feed(line) {
                if reported.as_deref() != Some(url.as_str()) {
                    reported = Some(url.clone());
                    reporter.auth_prompt(url, None);
                }
            }
            let line = redact::global().redact(line);
            if let Ok(mut t) = tail.lock() {
                t.push_line(&line);
            }
            if let Some(observe) = &observer {
                observe(generation, &line);
            }
        };
        let (drained, stderr_done) = tokio::sync::oneshot::channel::<()>();
        let pump = async move {
            stderr::pump_prefixed(spawned.stderr, mode, &prefix, redact_line, observe).await;
            let _ = drained.send(());
        };
        tokio::spawn(pump.in_current_span());
        Ok(WorkerIo {
            stdin: Box::pin(spawned.stdin),
            stdout: Box::pin(spawned.stdout),
            pid: Some(pid),
            stop: Box::new(move || stopper.stop()),
            exited: Box::pin(async move {
                let exit = process.wait().await.into();
                // What it wrote last is in the pipe still: its crash report
                // (and its last words, shown with it) wait for the pump to
                // read stderr to its end, bounded, since a child it left
                // behind may hold the pipe open.
                let _ = tokio::time::timeout(STDERR_DRAIN, stderr_done).await;
                // The private temporary directory goes with the process.
                drop(tmp);
                exit
            }),
            stderr_tail,
            unread,
        })
    }
}
