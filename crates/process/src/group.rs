//! Spawning into a process group, and the task that owns the child.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};

use crate::exit::Exit;

/// The size asked for the worker's stdin and stdout pipes.
const PIPE_BYTES: i32 = 1024 * 1024;

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Added to (and overriding) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Option<PathBuf>,
}

/// The waits of a layered stop.
#[derive(Debug, Clone, Copy)]
pub struct StopTimeouts {
    /// After stdin is closed, how long the process may take to exit by itself.
    pub after_close: Duration,
    /// After SIGTERM, how long before SIGKILL.
    pub after_term: Duration,
}

impl Default for StopTimeouts {
    fn default() -> Self {
        Self {
            // Short enough to finish inside the grace clients give their
            // own child (the Python SDK's is 2 s) before they signal it.
            after_close: Duration::from_millis(500),
            after_term: Duration::from_secs(3),
        }
    }
}

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("command not found: {0}")]
    NotFound(String),
    #[error("permission denied (not executable?): {0}")]
    PermissionDenied(String),
    #[error("cannot start {program}: {source}")]
    Io {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// A started worker: its pipes and the handle to its owning task.
#[derive(Debug)]
pub struct Spawned {
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: ChildStderr,
    pub process: Process,
}

/// A handle to the task that owns one child process.
#[derive(Debug)]
pub struct Process {
    pid: u32,
    stop: watch::Sender<bool>,
    exit: Option<oneshot::Receiver<Exit>>,
}

/// Starts `spec` in a new process group.
pub fn spawn(spec: &Spec, timeouts: StopTimeouts) -> Result<Spawned, SpawnError> {
    let display = spec.program.to_string_lossy().into_owned();
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn().map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => SpawnError::NotFound(display.clone()),
        std::io::ErrorKind::PermissionDenied => SpawnError::PermissionDenied(display.clone()),
        _ => SpawnError::Io {
            program: display.clone(),
            source,
        },
    })?;
    let pid = child.id().unwrap_or_default();
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("all three pipes were requested");
    };
    // Larger pipes move a big message in fewer wake-ups of either side. The
    // kernel may refuse (a per-user limit): then the default stays.
    for fd in [stdin.as_fd(), stdout.as_fd()] {
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let (exit_tx, exit_rx) = oneshot::channel();
    // Its logs (a stop's layers) belong to whatever the spawner's are about.
    tokio::spawn(tracing::Instrument::in_current_span(own(
        child, pid, stop_rx, exit_tx, timeouts,
    )));
    Ok(Spawned {
        stdin,
        stdout,
        stderr,
        process: Process {
            pid,
            stop: stop_tx,
            exit: Some(exit_rx),
        },
    })
}

// === impl Process ===

impl Process {
    /// The leader's pid, which is also the process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Asks the owning task to stop the process in layers. The caller should
    /// have closed (dropped) stdin first. Idempotent.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits for the process to end. Resolves once; later calls return at once
    /// with an unknown status.
    pub async fn wait(&mut self) -> Exit {
        match self.exit.take() {
            Some(rx) => rx
                .await
                .unwrap_or_else(|_| Exit::unknown(Duration::ZERO, true)),
            None => Exit::unknown(Duration::ZERO, true),
        }
    }

    /// A detached stop handle, for code that must not hold the `Process`.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.stop.clone())
    }
}

/// Asks a process's owning task to stop it; cheap to clone.
#[derive(Debug, Clone)]
pub struct Stopper(watch::Sender<bool>);

impl Stopper {
    /// See [`Process::stop`].
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

/// The owning task: waits for the child, stops it when asked, then clears
/// its process group.
async fn own(
    mut child: Child,
    pid: u32,
    mut stop: watch::Receiver<bool>,
    exit_tx: oneshot::Sender<Exit>,
    timeouts: StopTimeouts,
) {
    let started = Instant::now();
    let group = Pid::from_raw(pid as i32);
    let mut requested = false;
    let status = tokio::select! {
        status = child.wait() => status.ok(),
        () = stop_requested(&mut stop) => {
            requested = true;
            stop_in_layers(&mut child, group, timeouts).await
        }
    };
    let exit = Exit {
        status,
        uptime: started.elapsed(),
        requested,
    };
    let _ = exit_tx.send(exit);
    clear_group(group, timeouts.after_term).await;
}

/// Resolves when a stop is asked for, or when every handle is gone (a worker
/// nobody holds must not outlive its supervisor).
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

async fn stop_in_layers(
    child: &mut Child,
    group: Pid,
    timeouts: StopTimeouts,
) -> Option<std::process::ExitStatus> {
    if let Ok(status) = tokio::time::timeout(timeouts.after_close, child.wait()).await {
        return status.ok();
    }
    tracing::debug!(
        pid = group.as_raw(),
        "worker still running after stdin closed; SIGTERM"
    );
    signal_group(group, Signal::SIGTERM);
    if let Ok(status) = tokio::time::timeout(timeouts.after_term, child.wait()).await {
        return status.ok();
    }
    tracing::warn!(pid = group.as_raw(), "worker ignored SIGTERM; SIGKILL");
    signal_group(group, Signal::SIGKILL);
    // SIGKILL cannot be ignored; the wait is bounded all the same.
    tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .ok()
        .and_then(Result::ok)
}

/// Stops what is left of the group after its leader is gone.
async fn clear_group(group: Pid, grace: Duration) {
    if !group_alive(group) {
        return;
    }
    signal_group(group, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if !group_alive(group) {
            return;
        }
    }
    signal_group(group, Signal::SIGKILL);
}

fn signal_group(group: Pid, signal: Signal) {
    // 0 or 1 would signal our own group or every process: never.
    if group.as_raw() <= 1 {
        return;
    }
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pid = group.as_raw(), error = %e, "cannot signal worker group"),
    }
}

fn group_alive(group: Pid) -> bool {
    if group.as_raw() <= 1 {
        return false;
    }
    // Signal 0 checks for existence. EPERM means a member exists that we may
    // not signal (it changed user), which we cannot clear either.
    matches!(killpg(group, None::<Signal>), Ok(()))
}
