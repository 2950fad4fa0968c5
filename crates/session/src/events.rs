//! What a session tells its owner about itself.
//!
//! Each change a status line, a gateway or a web UI would show is a typed
//! [`SessionEvent`], sent on a bounded channel that the session's owner
//! provides ([`EventSink`]). The session never waits on an observer: it only
//! ever `try_send`s, and when the channel is full the event is dropped (and
//! logged at debug), so a slow or absent reader cannot stall the data path.
//! The channel closes when the session ends.

use std::time::Duration;

use mcpvisor_config::report::ErrorData;
use tokio::sync::mpsc;

/// A change in a session's state, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// A worker generation was started.
    Starting { generation: u64, pid: Option<u32> },
    /// It is ready for traffic: its handshake is done (the client's own
    /// `initialize` was answered, or the client's handshake was replayed
    /// to it), or, for a client that never sent `initialize`, it was
    /// started.
    Ready { generation: u64, pid: Option<u32> },
    /// It printed an authorization link and waits for a person to open it;
    /// meanwhile `initialize` may take `auth_timeout`. `reason` says why it
    /// needs authorizing, when its OAuth flow knows ("not authorized yet",
    /// "its refresh was refused: invalid_grant"), with known secrets
    /// redacted; a bridge's printed link has none.
    AuthPending {
        generation: u64,
        url: String,
        reason: Option<String>,
    },
    /// `initialize` completed after an authorization prompt; the prompt is
    /// over.
    Authorized { generation: u64 },
    /// It ended, was stopped, or could not be started (then `data.phase` is
    /// `spawn`). `data` is what the requests it held were failed with.
    Exited { generation: u64, data: ErrorData },
    /// Just before the `Exited` of a generation that ended without being
    /// asked to: the last lines of its stderr. They may hold secrets: an
    /// owner shows them only to a person who asks, and never logs them.
    StderrTail { generation: u64, lines: Vec<String> },
    /// After generation `generation` ended on its own, the next one starts
    /// after `delay` (zero: at once).
    Restarting { generation: u64, delay: Duration },
    /// The server keeps failing (a crash loop, or it stopped under
    /// `--restart never`): requests are refused with `data` until a reload,
    /// SIGHUP or the cooldown.
    Failed { data: ErrorData },
    /// The failed state is over: the next request may start a server.
    Recovered,
}

/// Where a session sends its [`SessionEvent`]s: nowhere, or a bounded
/// channel the session never waits on.
#[derive(Debug, Clone, Default)]
pub struct EventSink(Option<mpsc::Sender<SessionEvent>>);

// === impl SessionEvent ===

impl SessionEvent {
    /// The event's name, for logs (its fields may hold links or stderr
    /// lines, which are never logged from here).
    pub fn name(&self) -> &'static str {
        match self {
            SessionEvent::Starting { .. } => "starting",
            SessionEvent::Ready { .. } => "ready",
            SessionEvent::AuthPending { .. } => "auth-pending",
            SessionEvent::Authorized { .. } => "authorized",
            SessionEvent::Exited { .. } => "exited",
            SessionEvent::StderrTail { .. } => "stderr-tail",
            SessionEvent::Restarting { .. } => "restarting",
            SessionEvent::Failed { .. } => "failed",
            SessionEvent::Recovered => "recovered",
        }
    }
}

// === impl EventSink ===

impl EventSink {
    /// Events go nowhere.
    pub fn none() -> Self {
        Self(None)
    }

    /// Events go to `tx`; those that find it full are dropped.
    pub fn new(tx: mpsc::Sender<SessionEvent>) -> Self {
        Self(Some(tx))
    }

    /// A sink and the receiver of its events, holding up to `capacity`
    /// unread events.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<SessionEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (Self::new(tx), rx)
    }

    /// Whether events go anywhere (an event that costs something to build
    /// need not be built otherwise).
    pub(crate) fn is_active(&self) -> bool {
        self.0.is_some()
    }

    /// Sends without waiting: a full channel drops the event.
    pub(crate) fn send(&self, event: SessionEvent) {
        let Some(tx) = &self.0 else { return };
        if let Err(mpsc::error::TrySendError::Full(event)) = tx.try_send(event) {
            tracing::debug!(
                event = event.name(),
                "status event dropped: its observer is behind"
            );
        }
    }
}

impl From<mpsc::Sender<SessionEvent>> for EventSink {
    fn from(tx: mpsc::Sender<SessionEvent>) -> Self {
        Self::new(tx)
    }
}
