//! The session's named states: what takes new client traffic, and the
//! client's side of the connection.
//!
//! | from | event | to |
//! | --- | --- | --- |
//! | `Idle` | a request arrives | `Running` (a failed spawn: `Idle`, or `Failed` in a crash loop) |
//! | `Starting` | the current event is handled | `Running`; `Idle` if the client has left and nothing waits |
//! | `Running` | it crashes | `Starting`, or `Restarting` from the second quick exit in a row on; `Idle` if the client has left, or with `--restart on-demand` if nothing waits |
//! | `Running` | it crashes: crash loop, or `--restart never` | `Failed` |
//! | `Running` | reload while it holds requests | `Draining` |
//! | `Running` | reload while it is idle or in its handshake | `Starting` (it is retired) |
//! | `Draining` | it is idle, the drain timeout, or it crashes | `Starting` (it is retired) |
//! | `Restarting` | the backoff timer | `Starting` |
//! | `Failed` | the cooldown | `Starting` (`--restart always`) or `Idle` |
//! | `Idle`, `Starting`, `Restarting`, `Failed` | reload | `Starting` |
//!
//! The client is `Open`, then `Closing` once it closes our stdin (the
//! session ends when nothing it awaits is in flight), or `Gone` as soon as
//! it stops reading our stdout.

use mcpvisor_config::report::ErrorData;
use tokio::time::Instant;
use tokio_util::time::delay_queue::Key;

/// What takes new client traffic, and what happens while nothing does.
///
/// At most one generation is live besides those being stopped: the one
/// `Running` or the one `Draining`, never both.
#[derive(Debug)]
pub(crate) enum WorkerState {
    /// No generation and none on the way: the next request starts one.
    /// (A start that just failed has answered its reason to whoever
    /// waited.)
    Idle,
    /// A start is decided; it happens once the current event is handled.
    /// `reload`: when the reload that asked for it was asked, if one did.
    Starting { reload: Option<Instant> },
    /// This generation takes new traffic (from its handshake on).
    Running(u64),
    /// A reload waits for this generation to finish what it holds (bounded
    /// by `timer`); new traffic waits for its successor.
    Draining {
        generation: u64,
        timer: Key,
        since: Instant,
    },
    /// A pause before starting again after a crash.
    Restarting { timer: Key },
    /// Crash-looping (or ended with `--restart never`): requests are refused
    /// with `report` as `error.data` until a reload, SIGHUP, or the cooldown
    /// (`timer`; none with `--restart never`).
    Failed {
        report: ErrorData,
        timer: Option<Key>,
    },
}

impl WorkerState {
    /// The timer this state waits on, to cancel when it is left early.
    pub(crate) fn timer(&self) -> Option<Key> {
        match self {
            WorkerState::Draining { timer, .. } | WorkerState::Restarting { timer } => Some(*timer),
            WorkerState::Failed { timer, .. } => *timer,
            WorkerState::Idle | WorkerState::Starting { .. } | WorkerState::Running(_) => None,
        }
    }
}

/// The client's side of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientState {
    /// Reading requests.
    Open,
    /// It closed our stdin: no more requests; those in flight may finish.
    Closing,
    /// It stopped reading our stdout: the session ends.
    Gone,
}
