//! What a web UI, `mcpvisor status` and `/metrics` see of a running
//! gateway, and what they may ask of it.
//!
//! The hub stays the one owner of every backend's state: a [`Monitor`] only
//! sends it a [`Query`] on its control channel and waits (bounded) for the
//! answer, and listens to the [`MonitorEvent`]s the hub publishes on a
//! broadcast channel. A slow observer misses events (it is told how many,
//! and reads a fresh snapshot); it never slows the hub.
//!
//! Everything here is serialized as the JSON API of the UI: field names and
//! the `snake_case` state names are part of that API. No value of a secret
//! is ever in any of these types: env files are named, their keys listed as
//! set or unset, never read out.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::hub::Control;

/// How long a query waits for the hub before it gives up.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an approval waits for its answer: the hub answers once the pin
/// store has it, which may wait for another process's edit
/// (`pins::LOCK_WAIT`).
pub const APPROVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Events kept per server for its page.
pub const EVENTS_KEPT: usize = 100;
/// Crashes kept per server for its page, each with its stderr tail.
pub const CRASHES_KEPT: usize = 5;
/// Room in the broadcast channel of [`MonitorEvent`]s.
pub const EVENTS_CHANNEL: usize = 1024;
/// Upper bounds of the latency histogram's buckets, in seconds (Prometheus'
/// `le`); the last bucket is `+Inf`.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// A server's state as a person reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// Its process is starting, or the gateway's `initialize` is in flight.
    Starting,
    Ready,
    /// Its files changed; it is replaced once nothing is in flight.
    Reloading,
    /// It exited and will be started again at [`ServerStatus::next_try_at_ms`].
    Restarting,
    /// It crash-loops or cannot be started: see [`ServerStatus::detail`].
    Failed,
    /// It printed an authorization link and waits for a person.
    WaitingAuth,
    /// Lazy and not started yet, or stopped after being idle.
    Idle,
    /// Stopped by a person (the `stop` action) until `start`.
    Stopped,
    /// Disabled in its config entry.
    Disabled,
}

/// One server's row on the servers page.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    /// One line on why it is in that state ("exited with code 3; restarting
    /// in 2s", "crash loop: 5 exits in 60s"); never stderr, never payloads.
    pub detail: Option<String>,
    /// When a restarting server's next start is due (Unix ms).
    pub next_try_at_ms: Option<u64>,
    /// The authorization link a waiting server printed.
    pub auth_url: Option<String>,
    /// Why a waiting server needs authorizing ("not authorized yet", "its
    /// refresh was refused: invalid_grant"), when its OAuth flow said;
    /// known secrets redacted.
    pub auth_reason: Option<String>,
    pub lazy: bool,
    /// `"stdio"`, `"http"` (Streamable HTTP; an entry without a `type`
    /// that falls back to the old transport is still shown so) or `"sse"`
    /// (the old HTTP+SSE transport).
    pub transport: &'static str,
    /// Its command line (program and arguments, never its environment), or
    /// a remote server's scheme and host (its path or query may carry a key).
    pub command: String,
    /// Its current (or last) worker generation, counted over the server's
    /// whole life in this gateway (a new session goes on from the last).
    pub generation: Option<u64>,
    pub pid: Option<u32>,
    /// When its current generation became ready (Unix ms).
    pub started_at_ms: Option<u64>,
    /// Generations started to replace one that ended while in service: a
    /// crash or unrequested exit, a reload (file change or the `reload`
    /// action), a `restart` action, a failed health check, a changed config
    /// entry. Not counted: the first start, a lazy start, a start after an
    /// idle stop or after the `stop` action.
    pub restarts: u64,
    /// Front requests routed to it (answered or not, refused included).
    pub calls: u64,
    /// Those answered with a JSON-RPC error: its own, its session's
    /// (`-32001` timeout, `-32010` lost, `-32011` not started) and the
    /// gateway's refusals on its behalf (not started, stopped, failing).
    pub errors: u64,
    /// Requests in flight at it (for a per-client server, at all of its
    /// clients' processes).
    pub in_flight: usize,
    pub latency: Latency,
    /// For a server with `"sessions": "per-client"`, the process of each
    /// client that has one, by client (oldest client first); empty for any
    /// other server. Such a server's own row has no process: it is the
    /// template they are made from, and its counters are theirs together.
    pub instances: Vec<InstanceStatus>,
    /// For a shared server of both eras, the second process that serves
    /// the clients of the handshake era, once one of them used it.
    pub twin: Option<TwinStatus>,
    /// While it is failed, restarting, or idle after it ended by itself:
    /// the last [`ROW_STDERR_LINES`] lines its last crash wrote to stderr,
    /// with every known secret replaced by `[redacted:NAME]`; empty
    /// otherwise.
    pub stderr: Vec<String>,
    /// Its definitions held back until a person approves them
    /// ([`ServerDetail::quarantine`]).
    pub quarantined: usize,
}

/// Most stderr lines a row ([`ServerStatus::stderr`]) shows.
pub const ROW_STDERR_LINES: usize = 3;

/// The second process of a server of both eras, driven in 2025-11-25
/// for the clients of that era (the row's own is driven in 2026-07-28).
#[derive(Debug, Clone, Serialize)]
pub struct TwinStatus {
    pub state: ServerState,
    pub pid: Option<u32>,
}

/// One client's own process of a per-client server.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceStatus {
    /// The client's front session, as the gateway numbers them.
    pub client: u64,
    pub state: ServerState,
    pub generation: Option<u64>,
    pub pid: Option<u32>,
    /// When its current generation became ready (Unix ms).
    pub started_at_ms: Option<u64>,
    pub restarts: u64,
    pub in_flight: usize,
}

/// A server's latency figures, over every call its session answered
/// (results and errors) since the gateway started; refusals the gateway
/// gives itself are counted as errors but not timed. The quantiles are
/// estimated from the histogram: linear within the bucket that holds them,
/// the `+Inf` bucket topped by the slowest answer seen.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Counts per bucket of [`LATENCY_BUCKETS`], then `+Inf` (not
    /// cumulative), for `/metrics`.
    pub buckets: Vec<u64>,
    /// The sum of every latency, in seconds.
    pub sum_seconds: f64,
    pub count: u64,
}

/// A server's own page.
#[derive(Debug, Clone, Serialize)]
pub struct ServerDetail {
    #[serde(flatten)]
    pub status: ServerStatus,
    /// Its tools, prompts and resources as the server listed them (its own
    /// names, not the prefixed ones), or from the cache while it is idle.
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    /// Errors by JSON-RPC code.
    pub errors_by_code: BTreeMap<i64, u64>,
    /// Its recent events, oldest first, at most [`EVENTS_KEPT`].
    pub events: Vec<EventRecord>,
    /// The report of its last exit that was not asked for (a crash), as the
    /// `error.data` its requests got, without the stderr tail, and with
    /// `at_ms`, when it exited.
    pub last_crash: Option<Value>,
    /// Its last crashes, newest first, at most [`CRASHES_KEPT`], each as
    /// [`ServerDetail::last_crash`] is (the first is that one). The stderr
    /// tail of each is asked for by its `generation`
    /// ([`Monitor::stderr`]).
    pub crashes: Vec<Value>,
    /// The config file its entry is in.
    pub config_file: Option<std::path::PathBuf>,
    pub env_file: Option<std::path::PathBuf>,
    /// Its `env_keys`, each set or not in the env file (values never leave
    /// the file).
    pub env_keys: Vec<EnvKey>,
    /// Its definitions the gateway holds back (left out of the lists its
    /// clients see) until a person approves them ([`Monitor::approve`]), in
    /// the order the server lists them: tools, prompts, resource templates.
    pub quarantine: Vec<Quarantined>,
}

/// A definition held back: offered by the server, not (or no longer) the
/// one a person approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quarantined {
    pub kind: DefinitionKind,
    /// Its name as the server gives it (a resource template's URI
    /// template), not the prefixed one.
    pub name: String,
    pub change: Change,
    /// What changed, as `mcpvisor tools diff` prints it: the approved and
    /// the offered definition as pretty-printed JSON, each line of the one
    /// marked `-`, of the other `+`, the lines they share with two spaces
    /// (a new definition: every line `+`).
    pub diff: String,
    /// The offered definition's [`crate::pins::digest`]: an approval that
    /// gives it back ([`Pick::digest`]) approves this definition only.
    pub digest: String,
}

/// One held-back definition a person approves: by name (a resource
/// template's URI template), and with the digest they were shown, so that
/// a definition that changed again since is refused, not approved unseen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub name: String,
    /// The [`Quarantined::digest`] shown; `None` approves whatever is held
    /// under the name.
    pub digest: Option<String>,
}

impl Pick {
    /// The definition `name` as shown: its digest `digest`.
    pub fn seen(name: impl Into<String>, digest: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            digest: Some(digest.into()),
        }
    }
}

impl From<String> for Pick {
    fn from(name: String) -> Self {
        Self { name, digest: None }
    }
}

impl From<&str> for Pick {
    fn from(name: &str) -> Self {
        name.to_owned().into()
    }
}

/// What a pinned definition is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DefinitionKind {
    Tool,
    Prompt,
    ResourceTemplate,
}

/// Why a definition is held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// It differs from the approved definition of that name.
    Changed,
    /// No definition of that name was approved: it appeared after the
    /// server's definitions were approved, or the server's policy is
    /// `strict` and nothing of it is approved yet.
    New,
}

/// One key of a server's env file.
#[derive(Debug, Clone, Serialize)]
pub struct EnvKey {
    pub key: String,
    pub set: bool,
}

/// Something that happened to a server.
#[derive(Debug, Clone, Serialize)]
pub struct EventRecord {
    /// Unix ms.
    pub at_ms: u64,
    pub kind: EventKind,
    pub generation: Option<u64>,
    /// One line for a person ("exited with code 1 (crash)", "reloaded:
    /// server.py changed", "tools list changed: +2 −1").
    pub message: String,
}

/// The kinds of [`EventRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Starting,
    Ready,
    Exited,
    Restarting,
    Reloading,
    Failed,
    Recovered,
    AuthPending,
    Authorized,
    ListChanged,
    Stopped,
    Started,
    Added,
    Removed,
    Enabled,
    Disabled,
    SecretSet,
    /// Something in its entry does not fit what the server offers (a tool
    /// override for a tool it does not list).
    Warning,
    /// A definition it offers is held back until a person approves it.
    Quarantined,
    /// A person approved definitions it had held back.
    Approved,
}

/// What the hub publishes to its observers.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MonitorEvent {
    /// A server's row changed (state, counters, generation). Boxed: a row
    /// is far larger than the other events, and goes out at most every
    /// few hundred milliseconds per server.
    Server { status: Box<ServerStatus> },
    /// Something happened to a server.
    Event { server: String, event: EventRecord },
    /// A server left the configuration.
    Removed { server: String },
    /// The number of front sessions changed.
    Fronts { sessions: usize },
}

/// A whole picture of the gateway.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub servers: Vec<ServerStatus>,
    /// Front sessions open now.
    pub sessions: usize,
}

/// What a person may ask of one server at run time (enable, disable and add
/// change the config file, and reach the hub as a reconfiguration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Stop its process and start a new one now; an idle, failed or stopped
    /// server is started.
    Restart,
    /// Replace it once nothing is in flight, as a change of its files would.
    Reload,
    /// Stop it; requests are refused as not started until `Start`.
    Stop,
    /// Start a stopped, idle or failed server now (a running one is left
    /// alone).
    Start,
}

/// A question for the hub, answered on its oneshot.
#[derive(Debug)]
pub enum Query {
    Snapshot(oneshot::Sender<Snapshot>),
    Server(String, oneshot::Sender<Option<ServerDetail>>),
    Act(String, Action, oneshot::Sender<Result<(), ActionError>>),
    /// The stderr tail of one of the server's kept crashes: the crash of
    /// that generation, or the last one (empty when there is none);
    /// `None` for an unknown name.
    Stderr(String, Option<u64>, oneshot::Sender<Option<Vec<String>>>),
    /// Adds an event to a server's ring (something done outside the hub,
    /// such as a secret written to its env file); `false` for an unknown
    /// name.
    Record(String, EventKind, String, oneshot::Sender<bool>),
    /// Approves the server's held-back definitions picked (every one of
    /// them when empty): see [`Monitor::approve`].
    Approve(
        String,
        Vec<Pick>,
        oneshot::Sender<Result<Vec<String>, ActionError>>,
    ),
}

/// Why an action was not taken.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ActionError {
    #[error("no server is named {0:?}")]
    NoSuchServer(String),
    #[error("{0}")]
    Refused(String),
    #[error("the gateway is not answering")]
    Gone,
}

/// A handle on a running gateway: cheap to clone, one per observer.
#[derive(Debug, Clone)]
pub struct Monitor {
    control: mpsc::Sender<Control>,
    events: broadcast::Sender<MonitorEvent>,
    activity: crate::audit::Audit,
}

/// The hub's side of a [`Monitor`]: where it publishes its events. Goes into
/// [`crate::Settings::monitor`].
#[derive(Debug, Clone)]
pub struct Tap(pub(crate) broadcast::Sender<MonitorEvent>);

impl Monitor {
    /// A monitor that asks the hub listening on `control`, and the tap the
    /// hub publishes through.
    pub fn new(control: mpsc::Sender<Control>) -> (Self, Tap) {
        let (events, _) = broadcast::channel(EVENTS_CHANNEL);
        (
            Self {
                control,
                events: events.clone(),
                activity: crate::audit::Audit::new(),
            },
            Tap(events),
        )
    }

    /// This monitor with the gateway's audit trail (the one in its
    /// [`crate::Settings::audit`]), for the Activity view and `/metrics`.
    pub fn with_activity(self, activity: crate::audit::Audit) -> Self {
        Self { activity, ..self }
    }

    /// The gateway's audit trail: the calls, prompt gets and resource reads
    /// of its clients, and figures per tool.
    pub fn activity(&self) -> &crate::audit::Audit {
        &self.activity
    }

    /// Every server's row, and the number of front sessions.
    pub async fn snapshot(&self) -> Result<Snapshot, ActionError> {
        self.ask(Query::Snapshot).await
    }

    /// One server's page; `None` for an unknown name.
    pub async fn server(&self, name: &str) -> Result<Option<ServerDetail>, ActionError> {
        let name = name.to_owned();
        self.ask(|tx| Query::Server(name, tx)).await
    }

    /// The last lines its stderr printed before a crash: its last crash,
    /// or the kept crash of `generation`. Empty when there is no such
    /// crash, `None` for an unknown name. They may hold secrets: show them
    /// only to a person who asks.
    pub async fn stderr(
        &self,
        name: &str,
        generation: Option<u64>,
    ) -> Result<Option<Vec<String>>, ActionError> {
        let name = name.to_owned();
        self.ask(|tx| Query::Stderr(name, generation, tx)).await
    }

    /// Adds an event to a server's ring and publishes it, for what is done
    /// to a server outside the hub (`secret_set` when a key of its env file
    /// was written). `message` is one line for people: never a secret's
    /// value. `false` for an unknown name.
    pub async fn record(
        &self,
        name: &str,
        kind: EventKind,
        message: &str,
    ) -> Result<bool, ActionError> {
        let (name, message) = (name.to_owned(), message.to_owned());
        self.ask(|tx| Query::Record(name, kind, message, tx)).await
    }

    /// Asks the hub to act on one server.
    pub async fn act(&self, name: &str, action: Action) -> Result<(), ActionError> {
        let name = name.to_owned();
        self.ask(|tx| Query::Act(name, action, tx)).await?
    }

    /// Approves what the server offers under the names picked (every
    /// held-back definition of it when `picks` is empty), as `mcpvisor
    /// tools approve` does: the hub writes the approvals to the pin store
    /// and lets the definitions through, its clients told once per list
    /// that changed. Answers the names approved, once the pin store has
    /// them (one that could not be written is undone and refused). A name that is not held
    /// back, or whose definition's digest is not the one picked (it
    /// changed again since it was shown), is refused
    /// ([`ActionError::Refused`]) and nothing is approved.
    pub async fn approve(
        &self,
        server: &str,
        picks: Vec<Pick>,
    ) -> Result<Vec<String>, ActionError> {
        let server = server.to_owned();
        self.ask_within(APPROVE_TIMEOUT, |tx| Query::Approve(server, picks, tx))
            .await?
    }

    /// The hub's events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<MonitorEvent> {
        self.events.subscribe()
    }

    async fn ask<T>(
        &self,
        query: impl FnOnce(oneshot::Sender<T>) -> Query,
    ) -> Result<T, ActionError> {
        self.ask_within(QUERY_TIMEOUT, query).await
    }

    /// [`Monitor::ask`], waiting up to `limit` for the answer.
    async fn ask_within<T>(
        &self,
        limit: Duration,
        query: impl FnOnce(oneshot::Sender<T>) -> Query,
    ) -> Result<T, ActionError> {
        let (tx, rx) = oneshot::channel();
        let sent = self
            .control
            .send_timeout(Control::Query(query(tx)), QUERY_TIMEOUT);
        sent.await.map_err(|_| ActionError::Gone)?;
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            _ => Err(ActionError::Gone),
        }
    }
}

impl Tap {
    /// Publishes without waiting: with no observer, or a full channel, the
    /// event is simply not seen (observers that fell behind are told).
    pub(crate) fn publish(&self, event: MonitorEvent) {
        let _ = self.0.send(event);
    }
}
