//! The client end of an in-process session.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpvisor_config::report::{CrashReport, ErrorData};
use mcpvisor_jsonrpc::{INTERNAL_ERROR, NOT_STARTED, WORKER_LOST};
use mcpvisor_session::{Config, Control, EventSink, Outcome, SessionEvent, Spawner};
use serde::Deserialize as _;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::driver::{Command, Driver, Outputs};
use crate::link::{ChannelSink, Link};

/// Status events the session may queue before the connection's task reads
/// them, and that a caller may leave unread before they are dropped.
const EVENTS: usize = 64;

/// Lines of the session's output that wait for the connection's task; the
/// session's own bounded queue holds more behind them.
const FROM_SESSION: usize = 64;

/// Why a request got no result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server ended (or could not start): what the session reported.
    #[error("{0}")]
    Crashed(Box<CrashReport>),
    /// The server answered with a JSON-RPC error.
    #[error("error {code}: {message}")]
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the connection to the server closed")]
    Closed,
}

/// A notification from the server (progress, logging, list changes).
#[derive(Debug, Clone)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

/// What the server said about itself in `initialize`.
#[derive(Debug, Clone)]
pub struct InitInfo {
    pub protocol_version: String,
    pub server_info: Value,
    pub capabilities: Value,
    pub instructions: Option<String>,
}

/// A running server, spoken to as its client.
#[derive(Debug)]
pub struct Connection {
    /// To the task that owns the requests in flight ([`Driver`]).
    commands: mpsc::Sender<Command>,
    next_id: AtomicU64,
    notes: Option<mpsc::Receiver<Notification>>,
    events: Option<mpsc::Receiver<SessionEvent>>,
    closer: Closer,
    /// The authorization link the server waits on, kept by the task from
    /// the session's events.
    auth: watch::Receiver<Option<String>>,
}

/// Stops a connection's session from elsewhere (Ctrl-C, a timeout), even
/// after the [`Connection`] itself was dropped.
#[derive(Debug, Clone)]
pub struct Closer {
    control: mpsc::Sender<Control>,
    session: Arc<Mutex<Option<JoinHandle<Outcome>>>>,
    stop_bound: Duration,
}

impl Closer {
    /// Stops the server at once (in layers) and waits, bounded, until it is gone.
    pub async fn abort(&self) {
        let _ = self.control.send(Control::Shutdown).await;
        self.wait().await;
    }

    async fn wait(&self) {
        let session = self.session.lock().ok().and_then(|mut s| s.take());
        if let Some(session) = session {
            if tokio::time::timeout(self.stop_bound, session)
                .await
                .is_err()
            {
                tracing::warn!("the server did not stop in time");
            }
        }
    }
}

/// Settings for a session that a person drives from the shell.
pub fn runner_config(mut cfg: Config) -> Config {
    // The runner applies its own deadlines; the session only backs them up.
    cfg.request_timeout = Duration::from_secs(24 * 3600);
    cfg.request_ceiling = Duration::from_secs(24 * 3600);
    cfg.restart = mcpvisor_session::RestartMode::Never;
    cfg.stderr_in_errors = true;
    cfg.shutdown_drain = Duration::from_millis(500);
    cfg
}

impl Connection {
    /// Starts a session for `spawner`; the server itself starts with the
    /// first request.
    pub fn start<S: Spawner>(spawner: S, cfg: Config, roots: Option<PathBuf>) -> Self {
        let cfg = runner_config(cfg);
        let (status, status_rx) = EventSink::channel(EVENTS);
        // The session runs as the gateway's backends run it: lines in over
        // the link's queue, lines out through a sink, no pipe between.
        let (sink, from_session) = ChannelSink::channel(FROM_SESSION);
        let link = Link::start(spawner, cfg, status, Box::new(sink));
        let (out, control, session, stop_bound) = link.into_parts();
        let (notes_tx, notes) = mpsc::channel(1024);
        let (observer, events) = mpsc::channel(EVENTS);
        let (auth_tx, auth) = watch::channel(None);
        let (commands, commands_rx) = mpsc::channel(64);
        let outputs = Outputs {
            notes: notes_tx,
            auth: auth_tx,
            observer,
        };
        let driver = Driver::new(out, outputs, roots);
        tokio::spawn(driver.run(from_session, commands_rx, status_rx));
        Self {
            commands,
            next_id: AtomicU64::new(1),
            notes: Some(notes),
            events: Some(events),
            closer: Closer {
                control,
                session: Arc::new(Mutex::new(Some(session))),
                stop_bound,
            },
            auth,
        }
    }

    /// Notifications from the server, in order (once: the receiver is moved out).
    pub fn take_notifications(&mut self) -> Option<mpsc::Receiver<Notification>> {
        self.notes.take()
    }

    /// The session's status events, in order (once: the receiver is moved
    /// out): the server starting, waiting for authorization at a link,
    /// authorized, exited. Events nobody reads in time are dropped; the
    /// stream ends with the session.
    pub fn take_events(&mut self) -> Option<mpsc::Receiver<SessionEvent>> {
        self.events.take()
    }

    /// Sends a request and waits for its result, at most `limit`.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, CallError> {
        self.request_until(method, params, limit, None).await
    }

    /// Like [`Connection::request`], but while the server waits on an
    /// authorization link the wait is `auth_limit` (`initialize` waiting on
    /// a person who authorizes in a browser).
    async fn request_until(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
        auth_limit: Option<Duration>,
    ) -> Result<Value, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (reply, mut rx) = oneshot::channel();
        let msg = bytes::Bytes::from(msg.to_string());
        self.command(Command::Request { id, msg, reply }).await?;
        let started = Instant::now();
        let mut deadline = started + limit;
        let mut auth = self.auth.clone();
        let answer = loop {
            if let Some(longer) = auth_limit {
                if auth.borrow_and_update().is_some() {
                    deadline = deadline.max(started + longer);
                }
            }
            tokio::select! {
                answer = &mut rx => break answer.unwrap_or(Err(CallError::Closed))?,
                // A prompt appeared or cleared: look at the deadline again.
                Ok(()) = auth.changed(), if auth_limit.is_some() => {}
                () = tokio::time::sleep_until(deadline) => {
                    // Best effort: a closed connection has nothing to cancel.
                    let _ = self.command(Command::Cancel { id }).await;
                    return Err(CallError::Timeout(deadline - started));
                }
            }
        };
        if let Some(result) = answer.get("result") {
            return Ok(result.clone());
        }
        Err(error_of(&answer))
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), CallError> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let (reply, rx) = oneshot::channel();
        let msg = bytes::Bytes::from(msg.to_string());
        self.command(Command::Notify { msg, reply }).await?;
        rx.await.unwrap_or(Err(CallError::Closed))
    }

    async fn command(&self, command: Command) -> Result<(), CallError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| CallError::Closed)
    }

    /// The handshake: `initialize`, then `notifications/initialized`. While the
    /// server waits on an authorization link, the wait is `auth_timeout`.
    pub async fn initialize(
        &self,
        init_timeout: Duration,
        auth_timeout: Duration,
    ) -> Result<InitInfo, CallError> {
        let params = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"roots": {"listChanged": false}},
            "clientInfo": {"name": "mcpvisor", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self
            .request_until("initialize", params, init_timeout, Some(auth_timeout))
            .await?;
        self.notify("notifications/initialized", json!({})).await?;
        Ok(InitInfo {
            protocol_version: result["protocolVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            server_info: result.get("serverInfo").cloned().unwrap_or(Value::Null),
            capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// Every item of a paginated list (`tools/list` → `tools`, ...).
    pub async fn list_all(
        &self,
        method: &str,
        key: &str,
        limit: Duration,
    ) -> Result<Vec<Value>, CallError> {
        let mut items = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..1000 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request(method, params, limit).await?;
            if let Some(list) = page.get(key).and_then(Value::as_array) {
                items.extend(list.iter().cloned());
            }
            match page.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => break,
            }
        }
        Ok(items)
    }

    /// A handle that can stop this connection's server from elsewhere.
    pub fn closer(&self) -> Closer {
        self.closer.clone()
    }

    /// Ends the session: the server is stopped in layers, bounded.
    pub async fn close(self) {
        let Self {
            commands, closer, ..
        } = self;
        // The last caller is gone: the task closes the session's input.
        drop(commands);
        closer.wait().await;
    }
}

/// Turns an error answer into a [`CallError`]: mcpvisor's own codes carry
/// an [`ErrorData`] in `error.data`, which says what the server did.
fn error_of(answer: &Value) -> CallError {
    #[derive(serde::Deserialize)]
    struct RpcError {
        #[serde(default)]
        code: i64,
        #[serde(default)]
        message: String,
        #[serde(default)]
        data: Option<Value>,
    }
    let err = RpcError::deserialize(&answer["error"]).unwrap_or(RpcError {
        code: INTERNAL_ERROR,
        message: "the answer had neither a result nor a valid error".into(),
        data: None,
    });
    let report = matches!(err.code, WORKER_LOST | NOT_STARTED)
        .then(|| ErrorData::deserialize(err.data.as_ref()?).ok())
        .flatten()
        .and_then(|data| data.crash_report());
    match report {
        Some(report) => CallError::Crashed(Box::new(report)),
        None => CallError::Rpc {
            code: err.code,
            message: err.message,
            data: err.data,
        },
    }
}
