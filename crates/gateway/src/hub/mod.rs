//! The gateway's owner: a synchronous core in an async shell.
//!
//! The core ([`Hub`]) holds every piece of routing state: the backends and
//! their lifecycle (`backend.rs`), the calls in flight towards them and the
//! servers' requests to the fronts (`calls.rs`), the fronts
//! (`front_table.rs`), the merged lists and the cache (`lists.rs`). It takes
//! one [`Input`] at a time ([`Hub::handle`]: a front's message, a stdio
//! client's frame, a backend session's line or status event, a timer, a
//! control), settles at the end of the turn ([`Hub::end_turn`]: parked
//! requests, closed fronts, the monitor's rows), and leaves what the turn
//! asks of the world in its [`Effect`]s: sessions to start and stop, timers
//! to arm and disarm, rows and events to publish, lists to write to the
//! cache, an env file to read for a monitor's question. No handler awaits, spawns, or touches a file, and
//! none calls back into the loop: a front found gone is dropped at the end
//! of the turn, never from inside the handler that found it.
//!
//! The shell (`shell.rs`) owns the `select!`, the stdio client's pipes,
//! the backends' sessions (futures polled in its own task, `sessions.rs`)
//! and what they write, the channel their events arrive on, the timers'
//! queue and the files. After each
//! input it carries out the core's effects in order, then writes what the
//! core queued for the stdio client.
//!
//! Kept in the core on purpose, because each is a non-blocking push onto a
//! bounded queue whose refusal must change the core's state in the same
//! turn: a line to a backend's session ([`mcpvisor_runner::Inlet`]'s
//! `try_send`: a full queue fails the request at once, "not started"), a
//! line to an HTTP front (`try_send` on its channel: a full one drops the
//! front), a session's reload control, a monitor's one-shot answer, and an
//! answered call's audit record (`crate::audit`: a short lock on its ledger
//! and a `try_send` to its writer thread, which drops the record from the
//! file when its queue is full).
//! The stdio client's lines are queued in the core (`Fronts::stdio_queue`)
//! and written by the shell.
//!
//! A test drives the core with [`Hub::new`], [`Hub::add_servers`],
//! [`Hub::handle`] and [`Hub::end_turn`], and reads what it asked for with
//! [`Hub::take_effects`]; a backend's session started by a
//! [`Effect::Start`] reports through [`Input::Backend`] with the epoch the
//! effect names.

mod backend;
mod bridge;
mod calls;
mod front;
mod front_table;
mod inputs;
mod listen;
mod lists;
mod observe;
mod per_client;
mod pinning;
mod request;
mod sessions;
mod shell;
mod stdio;
mod tasks;
mod upstream;

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_jsonrpc::Spans;
use mcpvisor_session::writer::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;

use backend::{Backend, BackendId, Backends};
pub use backend::{ServerPlan, Spawners};
pub use bridge::{check_replica_id, random_replica_id};
use calls::{Calls, FanOut, Held, Parked, Pending, Private, ServerReq, Wrap};
use front_table::{Front, FrontInfo, FrontOut, Fronts};
pub use lists::Cached;
use lists::{Catalog, Merged};
use request::Era;

use crate::fronts::{FrontCommand, FrontId, Outbound};

/// Gateway-wide settings (the per-server ones are in [`ServerPlan`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Between the server's name and a tool's or prompt's own name.
    pub separator: crate::naming::Separator,
    /// The longest the front's `initialize` or a list waits for servers
    /// that are still starting.
    pub list_timeout: Duration,
    /// Most front requests in flight at once.
    pub max_in_flight: usize,
    /// Longest message from the front client.
    pub max_message_bytes: usize,
    /// Replace the tool list with a search tool and a call tool.
    pub tool_search: bool,
    /// Where lazy servers' lists are cached; `None` turns the cache off.
    pub cache_dir: Option<std::path::PathBuf>,
    /// One server served as itself (`run --http`): no name prefixes, and
    /// its own `initialize` result (with `listChanged` set) passed through.
    pub transparent: bool,
    /// Where the hub publishes what a [`crate::monitor::Monitor`] sees.
    pub monitor: Option<crate::monitor::Tap>,
    /// Makes each backend session's spawner in place of the configured
    /// command or URL (`None`: as configured). Tests script their servers
    /// in-process with it.
    #[doc(hidden)]
    pub spawners: Option<Spawners>,
    /// Where each `tools/call`, `prompts/get` and `resources/read` is
    /// recorded (`None`: nowhere).
    pub audit: Option<crate::audit::Audit>,
    /// Where approved definitions are kept (`None`: nothing is pinned,
    /// whatever the entries say).
    pub pins: Option<crate::pins::PinStore>,
    /// The pin policy of entries that do not name one (`serve --pin`).
    pub pin_default: mcpvisor_config::PinPolicy,
    /// This process's id in the `requestState`s it signs, which a balancer
    /// routes a multi-round call's retry on (`serve --replica-id`; checked
    /// by [`check_replica_id`]). `None`: a random one.
    pub replica_id: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            separator: crate::naming::Separator::default(),
            list_timeout: Duration::from_secs(5),
            max_in_flight: 1024,
            max_message_bytes: 64 * 1024 * 1024,
            tool_search: false,
            cache_dir: None,
            transparent: false,
            monitor: None,
            spawners: None,
            audit: None,
            pins: None,
            pin_default: mcpvisor_config::PinPolicy::Tofu,
            replica_id: None,
        }
    }
}

/// Asks a running gateway to do something.
#[derive(Debug)]
pub enum Control {
    /// Stop every server and end (SIGTERM, SIGINT).
    Shutdown,
    /// The configuration changed: start new servers, stop removed ones,
    /// restart changed ones, leave the rest alone.
    Reconfigure(Vec<ServerPlan>),
    /// Reload every running process of one server: each replaces its
    /// worker once it holds nothing.
    Reload {
        /// The server's name in the config.
        server: String,
        cause: ReloadCause,
    },
    /// A [`crate::monitor::Monitor`]'s question.
    Query(crate::monitor::Query),
    /// The pin store's file changed (another process approved something):
    /// the hub reads it again and lets through what is now approved.
    PinsChanged,
}

/// Why a server is reloaded, for its log and its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadCause {
    /// Its files changed: what changed, for a person ("server.py changed").
    FilesChanged(String),
    /// A person asked for it (the web UI, a signal, an HTTP reload).
    Asked,
}

impl ReloadCause {
    /// The cause in a few words.
    pub(crate) fn describe(&self) -> &str {
        match self {
            ReloadCause::FilesChanged(what) => what,
            ReloadCause::Asked => "asked for by a person",
        }
    }

    /// The label the backend's session logs its reload with.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            ReloadCause::FilesChanged(_) => "file change",
            ReloadCause::Asked => "asked for",
        }
    }
}

/// How the gateway ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The front client closed its input.
    ClientClosed,
    /// The front client stopped reading.
    ClientGone,
    /// A [`Control::Shutdown`] arrived.
    Shutdown,
}

/// What a backend's helper tasks report.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// From one session of the backend: its epoch fences off what a session
    /// stopped earlier still reports.
    Session(u64, FromSession),
}

/// What one backend session reports.
#[derive(Debug)]
pub(crate) enum FromSession {
    /// One message the session wrote, with where its envelope lies in its
    /// line as read (before its splice) when the session knows.
    Line(Message, Option<Spans>),
    /// The session ended its output.
    Closed,
    /// The session's lifecycle news.
    Status(Box<mcpvisor_session::SessionEvent>),
}

/// Timers of the owning task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A parked front request's `--list-timeout`.
    Parked,
    /// Time for an idle server's health ping.
    Health(BackendId),
    /// A server's `server/discover` probe (by its gateway id) may have
    /// gone unanswered too long.
    Probe(BackendId, u64),
    /// A client's answers to a 2026-07-28 server's input requests (by
    /// their entry in `Calls::asking`) may be overdue.
    Asking(u64),
    /// A server's `idle_timeout` may have run out.
    Idle(BackendId),
    /// A server's throttled row may be published.
    Publish(BackendId),
    /// A bridged call's round may have run out (its gateway id).
    Bridge(u64),
}

/// One input of the core: everything the shell hands it.
#[derive(Debug)]
pub(crate) enum Input {
    /// An HTTP front's command.
    Front(FrontCommand),
    /// What the stdio client's pipes gave.
    Stdio(StdioInput),
    /// What a backend's session reported.
    Backend(BackendId, Incoming),
    /// A timer the core armed ran out.
    Timer(Timer),
    /// A control other than [`Control::Shutdown`], which the shell handles.
    Control(Control),
    /// A closing front's drain may be over: nothing more than the end of
    /// the turn.
    Drain,
    /// The shell read or wrote the pin store.
    Pins(Box<pinning::PinsRead>),
}

/// What the stdio client's pipes gave.
#[derive(Debug)]
pub(crate) enum StdioInput {
    /// A line it sent.
    Line(Bytes),
    /// A line over `--max-message-bytes`: its length and its first bytes.
    Oversize { len: usize, head: Bytes },
    /// Its input ended (or failed).
    Ended,
    /// A write to it failed, or made no progress for too long.
    Gone,
}

/// Names one timer the core armed, so that it can disarm it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TimerKey(u64);

/// What a turn of the core asks the shell to do, in order.
pub(crate) enum Effect {
    /// Start a backend's session (its lines already go to `start.inlet`'s
    /// other end); its lines and events report with `epoch`.
    Start(Box<StartSession>),
    /// Stop the session a backend ran under `epoch`, in the background and
    /// bounded, giving up its input.
    Stop {
        backend: BackendId,
        epoch: u64,
        inlet: mcpvisor_runner::Inlet,
    },
    /// Hand `timer` back as an input at `at`.
    Arm {
        key: TimerKey,
        timer: Timer,
        at: Instant,
    },
    /// The timer `key` is not wanted any more (nothing if it ran out).
    Disarm(TimerKey),
    /// Tell the monitor's observers.
    Publish(crate::monitor::MonitorEvent),
    /// Write a server's lists to the list cache.
    StoreCache(Box<StoreCache>),
    /// Answer a monitor's question about a server, once the keys of its
    /// env file (when it has one) are read.
    EnvKeys {
        detail: Box<crate::monitor::ServerDetail>,
        file: Option<std::path::PathBuf>,
        wanted: Vec<String>,
        reply: tokio::sync::oneshot::Sender<Option<crate::monitor::ServerDetail>>,
    },
    /// Read or edit the pin store, after the jobs asked for before.
    Pins(pinning::PinJob),
}

impl std::fmt::Debug for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Effect::Start(s) => f
                .debug_struct("Start")
                .field("backend", &s.backend)
                .field("epoch", &s.epoch)
                .finish_non_exhaustive(),
            Effect::Stop { backend, epoch, .. } => f
                .debug_struct("Stop")
                .field("backend", backend)
                .field("epoch", epoch)
                .finish_non_exhaustive(),
            Effect::Arm { key, timer, at } => f
                .debug_struct("Arm")
                .field("key", key)
                .field("timer", timer)
                .field("at", at)
                .finish(),
            Effect::Disarm(key) => f.debug_tuple("Disarm").field(key).finish(),
            Effect::Publish(event) => f.debug_tuple("Publish").field(event).finish(),
            Effect::StoreCache(store) => f
                .debug_struct("StoreCache")
                .field("server", &store.server)
                .finish_non_exhaustive(),
            Effect::EnvKeys { file, .. } => f
                .debug_struct("EnvKeys")
                .field("file", file)
                .finish_non_exhaustive(),
            Effect::Pins(job) => f.debug_tuple("Pins").field(job).finish(),
        }
    }
}

/// A backend session to start: what [`Effect::Start`] carries.
pub(crate) struct StartSession {
    pub backend: BackendId,
    pub epoch: u64,
    /// The backend's plan, without its cached lists.
    pub plan: ServerPlan,
    /// The session, whose input the backend already holds.
    pub session: mcpvisor_runner::Unstarted,
}

/// A server's lists to write to the cache: what [`Effect::StoreCache`]
/// carries.
pub(crate) struct StoreCache {
    pub cache: crate::cache::Cache,
    pub key: crate::cache::Key,
    pub lists: crate::cache::Lists,
    /// The server's name, for the log.
    pub server: String,
}

/// The effects a turn accumulated, and the timer keys handed out.
///
/// Invariant: the shell takes every effect after each input, before the
/// next; a key is never handed out twice.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub list: Vec<Effect>,
    next_key: u64,
}

impl Effects {
    /// Arms `timer` to run out at `at`; its key disarms it.
    pub fn arm(&mut self, timer: Timer, at: Instant) -> TimerKey {
        self.next_key += 1;
        let key = TimerKey(self.next_key);
        self.list.push(Effect::Arm { key, timer, at });
        key
    }

    pub fn publish(&mut self, event: crate::monitor::MonitorEvent) {
        self.list.push(Effect::Publish(event));
    }
}

/// The gateway's core. See the module docs.
pub struct Hub {
    settings: Settings,
    /// The backends (see `Backends`).
    backends: Backends,
    /// Every request held for someone (see `Calls`).
    calls: Calls,
    /// The open fronts (see `Fronts`).
    fronts: Fronts,
    /// The merged lists and the cache (see `Catalog`).
    catalog: Catalog,
    /// What this turn asks of the shell.
    effects: Effects,
    /// When the input being handled came: the clock is read once a turn
    /// (see [`Hub::now`]), not at each step of it.
    turn_at: Option<Instant>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("backends", &self.backends.by_id.len())
            .field("in_flight", &self.calls.pending.len())
            .finish_non_exhaustive()
    }
}

/// How long, after a front closed its input, answers may still arrive.
const DRAIN: Duration = Duration::from_secs(5);
/// Room in a front's queue; a front that leaves it full is closed.
pub(crate) const FRONT_QUEUE: usize = 4096;

impl Hub {
    /// Serves `servers` as one MCP server on stdio: `input` and `output` are
    /// the one front client's, and the hub ends when it leaves or a
    /// shutdown is asked for, then stops every server.
    pub async fn run<R, W>(
        settings: Settings,
        servers: Vec<ServerPlan>,
        input: R,
        output: W,
        control: mpsc::Receiver<Control>,
    ) -> Outcome
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let front = FrontId(0);
        let stdio = stdio::Stdio::new(front, input, output, settings.max_message_bytes);
        // No other front opens.
        let (_, fronts) = mpsc::channel(1);
        Self::serve_inner(settings, servers, fronts, control, Some(front), Some(stdio)).await
    }

    /// Serves `servers` as one MCP server to every front that opens on
    /// `fronts`, until a shutdown is asked for (or, with a `primary`
    /// front, until that one ends), then stops every server.
    pub async fn serve(
        settings: Settings,
        servers: Vec<ServerPlan>,
        fronts: mpsc::Receiver<FrontCommand>,
        control: mpsc::Receiver<Control>,
        primary: Option<FrontId>,
    ) -> Outcome {
        Self::serve_inner(settings, servers, fronts, control, primary, None).await
    }

    /// [`Hub::serve`], with the stdio client's pipes read and written by
    /// the hub itself when `stdio` is given (then it is the primary front).
    async fn serve_inner(
        settings: Settings,
        servers: Vec<ServerPlan>,
        fronts: mpsc::Receiver<FrontCommand>,
        control: mpsc::Receiver<Control>,
        primary: Option<FrontId>,
        stdio: Option<stdio::Stdio>,
    ) -> Outcome {
        shell::serve(settings, servers, fronts, control, primary, stdio).await
    }

    // === the core's turns ===

    /// A core with no backend and no front yet; `primary` is the front
    /// whose end ends it.
    pub(crate) fn new(settings: Settings, primary: Option<FrontId>) -> Self {
        let cache = settings.cache_dir.clone().map(crate::cache::Cache::at);
        let mut calls = Calls::default();
        if let Some(id) = &settings.replica_id {
            calls.bridges.set_replica(id);
        }
        Hub {
            settings,
            backends: Backends::default(),
            calls,
            fronts: Fronts {
                primary,
                ..Fronts::default()
            },
            catalog: Catalog {
                merged: Merged::default(),
                cache,
                pins: pinning::Pinning::default(),
                announced: [false; 4],
            },
            effects: Effects::default(),
            turn_at: None,
        }
    }

    /// Opens the stdio client's front, whose lines the shell writes.
    pub(crate) fn open_stdio(&mut self, front: FrontId) {
        self.open_front(front, FrontOut::Stdio);
    }

    /// Adds the configured servers (eager ones start) and merges their
    /// lists, lazy servers' from the cache.
    pub(crate) fn add_servers(&mut self, servers: Vec<ServerPlan>) {
        for plan in servers {
            self.add_backend(plan);
        }
        self.remerge_all();
    }

    /// Handles one input. Call [`Hub::end_turn`] after it.
    pub(crate) fn handle(&mut self, input: Input) {
        self.turn_at = Some(Instant::now());
        match input {
            Input::Front(command) => self.on_front_command(command),
            Input::Stdio(input) => self.on_stdio(input),
            Input::Backend(backend, incoming) => self.on_backend(backend, incoming),
            Input::Timer(timer) => self.on_timer(timer),
            Input::Control(control) => match control {
                // The shell ends the loop on it before it gets here.
                Control::Shutdown => {}
                Control::Reconfigure(plans) => self.reconfigure(plans),
                Control::Reload { server, cause } => {
                    self.reload_backend(&server, &cause);
                }
                Control::Query(query) => self.on_query(query),
                Control::PinsChanged => self.on_pins_changed(),
            },
            Input::Drain => {}
            Input::Pins(read) => self.on_pins(*read),
        }
    }

    /// Settles what a turn left: fronts found gone are dropped, parked
    /// requests whose wait is over are answered, closed fronts with nothing
    /// left are forgotten, changed rows are published.
    pub(crate) fn end_turn(&mut self) {
        self.finish_leaving();
        self.settle();
        self.finish_closed_fronts();
        self.finish_leaving();
        self.publish_changes();
        self.turn_at = None;
    }

    /// The time of the input being handled; outside a turn, the clock's.
    pub(crate) fn now(&self) -> Instant {
        self.turn_at.unwrap_or_else(Instant::now)
    }

    /// What the turns so far asked of the shell, in order; `into` (empty)
    /// takes them, so that its room is used again. `false` when there was
    /// nothing (most turns ask nothing of the shell): `into` is left alone.
    pub(crate) fn take_effects(&mut self, into: &mut Vec<Effect>) -> bool {
        if self.effects.list.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.effects.list, into);
        true
    }

    /// How the core ended, if it has: its primary front ended, or (once
    /// no more fronts can open) the last front closed.
    pub(crate) fn ended(&self, fronts_open: bool) -> Option<Outcome> {
        if let Some(outcome) = self.fronts.ended {
            return Some(outcome);
        }
        (!fronts_open && self.fronts.primary.is_some() && self.fronts.open.is_empty())
            .then_some(Outcome::ClientClosed)
    }

    /// Stops every backend's session, for the end: each leaves a
    /// [`Effect::Stop`].
    pub(crate) fn stop_all(&mut self) {
        for (id, b) in &mut self.backends.by_id {
            let run = std::mem::replace(
                &mut b.run,
                backend::Run::Off(backend::Off::Idle(backend::Start::Fresh)),
            );
            if let backend::Run::Live(live) = run {
                self.effects.list.push(Effect::Stop {
                    backend: *id,
                    epoch: b.epoch,
                    inlet: live.link,
                });
            }
        }
    }

    // === fronts ===

    fn on_front_command(&mut self, command: FrontCommand) {
        match command {
            FrontCommand::Open { front, out } => self.open_front(front, FrontOut::Channel(out)),
            FrontCommand::Message { front, line, scan } => {
                if self
                    .fronts
                    .open
                    .get(&front)
                    .is_some_and(|f| f.closing.is_none())
                {
                    self.on_front_message(front, line, scan);
                }
            }
            FrontCommand::Close { front } => {
                if let Some(f) = self.fronts.open.get_mut(&front) {
                    f.closing.get_or_insert_with(|| Instant::now() + DRAIN);
                }
            }
            FrontCommand::Abandon { front } => self.drop_front(front, Outcome::ClientGone),
        }
    }

    fn open_front(&mut self, front: FrontId, out: FrontOut) {
        self.fronts.open.insert(
            front,
            Front {
                info: FrontInfo::default(),
                out,
                subscriptions: Default::default(),
                listens: Vec::new(),
                closing: None,
                awaiting: 0,
                log_level: None,
            },
        );
        self.publish_sessions();
    }

    /// The earliest drain deadline of a closing front.
    fn next_drain_deadline(&self) -> Option<Instant> {
        self.fronts.open.values().filter_map(|f| f.closing).min()
    }

    /// Forgets closing fronts whose requests are all answered or whose
    /// drain is over.
    fn finish_closed_fronts(&mut self) {
        // Most turns have no front closing: no clock read for them.
        if self.fronts.open.values().all(|f| f.closing.is_none()) {
            return;
        }
        let now = Instant::now();
        let done: Vec<FrontId> = self
            .fronts
            .open
            .iter()
            .filter(|(id, f)| {
                f.closing
                    .is_some_and(|at| now >= at || self.awaited_by(**id) == 0)
            })
            .map(|(id, _)| *id)
            .collect();
        for front in done {
            self.drop_front(front, Outcome::ClientClosed);
        }
    }

    /// Ends a front: its requests are cancelled towards their servers, the
    /// servers' requests to it are refused, its subscriptions end.
    pub(crate) fn drop_front(&mut self, front: FrontId, why: Outcome) {
        let Some(f) = self.fronts.open.remove(&front) else {
            return;
        };
        self.publish_sessions();
        if self.fronts.primary == Some(front) {
            self.fronts.ended = Some(why);
        }
        self.calls.forget_held_for(front);
        // Most fronts that end have nothing in flight (a stateless
        // request's, once answered): no walk over every pending call then.
        debug_assert!(
            f.awaiting > 0
                || !self
                    .calls
                    .pending
                    .values()
                    .any(|p| matches!(p, Pending::Front { front: g, .. } if *g == front)),
            "a front with nothing awaiting holds a pending call"
        );
        let held: Vec<u64> = if f.awaiting == 0 {
            Vec::new()
        } else {
            self.calls
                .pending
                .iter()
                .filter(|(_, p)| matches!(p, Pending::Front { front: f, .. } if *f == front))
                .map(|(gid, _)| *gid)
                .collect()
        };
        for gid in held {
            if let Some(Pending::Front { backend, .. }) = self.take_pending(gid) {
                self.cancel_on_backend(backend, gid, "the client left");
            }
        }
        let asked: Vec<u64> = self
            .calls
            .server_reqs
            .iter()
            .filter(|(_, r)| r.front == front)
            .map(|(k, _)| *k)
            .collect();
        for fid in asked {
            if let Some(req) = self.calls.server_reqs.remove(&fid) {
                let id = String::from_utf8_lossy(&req.id).into_owned();
                let reply = mcpvisor_jsonrpc::build::error(
                    &id,
                    mcpvisor_jsonrpc::INTERNAL_ERROR,
                    "the client this request was sent to has left",
                    None,
                );
                if let Some(link) = self
                    .backends
                    .by_id
                    .get(&req.backend)
                    .and_then(Backend::link)
                {
                    link.try_send(reply);
                }
            }
        }
        for uri in f.subscriptions {
            self.release_subscription(&uri);
        }
        for listen in f.listens {
            self.release_listen(listen);
        }
        self.drop_instances_of(front);
        if f.log_level.is_some() {
            self.relax_log_level(f.log_level);
        }
    }

    /// Queues a message for one front. A front that leaves its whole queue
    /// unread, or has gone, is dropped: one slow client never stalls another.
    /// The front is dropped at the end of the turn ([`Hub::finish_leaving`]),
    /// not here: a drop answers other fronts, and so would recurse.
    pub(crate) fn emit_to(&mut self, front: FrontId, line: Bytes, related: Option<Bytes>) {
        self.emit(front, Message::Line(line), related, false);
    }

    /// Sends `line`, the response to the front's request `id`, to the front
    /// (see [`Hub::emit_to`]), saying it is the response.
    pub(crate) fn answer_to(&mut self, front: FrontId, answer: Message, id: Bytes) {
        self.emit(front, answer, Some(id), true);
    }

    /// A spliced message goes to the stdio client as it is (its pipe's
    /// writer puts it together) and to any other front in one buffer.
    fn emit(&mut self, front: FrontId, msg: Message, related: Option<Bytes>, response: bool) {
        let Some(f) = self.fronts.open.get(&front) else {
            return;
        };
        if !self.fronts.leaving.is_empty() && self.fronts.leaving.iter().any(|(l, _)| *l == front) {
            return;
        }
        let sent = match &f.out {
            FrontOut::Channel(out) => out.try_send(Outbound {
                line: msg.to_bytes(),
                related,
                response,
            }),
            FrontOut::Stdio
                if self.fronts.stdio_queue.len() + self.fronts.stdio_backlog < FRONT_QUEUE =>
            {
                self.fronts.stdio_queue.push_back(msg);
                Ok(())
            }
            FrontOut::Stdio => Err(mpsc::error::TrySendError::Full(Outbound {
                line: Bytes::new(),
                related: None,
                response: false,
            })),
        };
        let gone = match sent {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    front = front.0,
                    "a client left its queue full: it is dropped"
                );
                Outcome::ClientGone
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Outcome::ClientGone,
        };
        self.fronts.leaving.push((front, gone));
    }

    /// Drops the fronts found gone during this turn, and those that their
    /// drops found gone in turn.
    fn finish_leaving(&mut self) {
        while let Some((front, why)) = self.fronts.leaving.pop() {
            self.drop_front(front, why);
        }
    }

    /// Queues a message for every front that has initialized (a 2026-07-28
    /// client gets no notifications of this kind).
    pub(crate) fn broadcast(&mut self, line: Bytes) {
        let to: Vec<FrontId> = self
            .fronts
            .open
            .iter()
            .filter(|(_, f)| {
                f.closing.is_none() && f.info.initialized && f.info.era == Era::Handshake
            })
            .map(|(id, _)| *id)
            .collect();
        for front in to {
            self.emit_to(front, line.clone(), None);
        }
    }

    /// A backend's notification for every front: a per-client instance's
    /// goes to its own front only.
    pub(crate) fn broadcast_from(&mut self, backend: BackendId, line: Bytes) {
        match self.backends.by_id.get(&backend).and_then(Backend::owner) {
            Some(owner) => self.emit_to(owner, line, None),
            None => self.broadcast(line),
        }
    }

    /// Queues a server's log message (`notifications/message` at `level`)
    /// for every initialized front whose `logging/setLevel` admits it (a
    /// per-client instance's for its own front only); a front that never
    /// set a level gets it whatever its level.
    pub(crate) fn broadcast_log(
        &mut self,
        backend: BackendId,
        line: Bytes,
        level: Option<front::LogLevel>,
    ) {
        let owner = self.backends.by_id.get(&backend).and_then(Backend::owner);
        let to: Vec<FrontId> = self
            .fronts
            .open
            .iter()
            .filter(|(id, f)| match owner {
                Some(owner) => **id == owner,
                None => f.closing.is_none() && f.info.initialized && f.info.era == Era::Handshake,
            })
            .filter(|(_, f)| match (f.log_level, level) {
                (Some(wanted), Some(level)) => level >= wanted,
                // A level this gateway does not know is passed on.
                _ => true,
            })
            .map(|(id, _)| *id)
            .collect();
        for front in to {
            self.emit_to(front, line.clone(), None);
        }
    }

    /// A front's requests still waiting for an answer.
    pub(crate) fn awaited_by(&self, front: FrontId) -> usize {
        self.fronts.open.get(&front).map_or(0, |f| f.awaiting) + self.calls.held_for(front)
    }

    // === timers ===

    fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Parked => {}
            Timer::Health(b) => self.on_health(b),
            Timer::Probe(b, gid) => self.on_probe_timeout(b, gid),
            Timer::Asking(bid) => self.on_asking_timeout(bid),
            Timer::Idle(b) => self.on_idle(b),
            Timer::Publish(b) => self.on_publish_timer(b),
            Timer::Bridge(gid) => self.on_bridge_timer(gid),
        }
    }

    /// After every event: answer parked requests whose wait is over.
    fn settle(&mut self) {
        if self.calls.parked.is_empty() {
            return;
        }
        let settled = !self.any_settling();
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut keep = VecDeque::new();
        while let Some(p) = self.calls.parked.pop_front() {
            if settled || now >= p.deadline {
                ready.push(p);
            } else {
                keep.push_back(p);
            }
        }
        self.calls.parked = keep;
        for p in ready {
            self.answer_parked(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(name: &str, disabled: bool) -> ServerPlan {
        ServerPlan {
            name: name.to_owned(),
            def: mcpvisor_config::ServerDef {
                disabled,
                ..mcpvisor_config::ServerDef::new(name, "server")
            },
            session: mcpvisor_session::Config::default(),
            stderr: mcpvisor_process::stderr::Passthrough::Discard,
            lazy: false,
            idle_timeout: None,
            health_interval: None,
            health_misses: 3,
            cached: None,
            cache_key: None,
            env_overrides: Vec::new(),
            per_client: false,
        }
    }

    fn effects(hub: &mut Hub) -> Vec<Effect> {
        let mut taken = Vec::new();
        hub.take_effects(&mut taken);
        taken
    }

    #[test]
    fn the_core_starts_and_stops_sessions_through_effects_and_fences_off_an_old_epoch() {
        let mut hub = Hub::new(Settings::default(), None);
        hub.add_servers(vec![plan("on", false), plan("off", true)]);
        let started: Vec<(BackendId, u64)> = effects(&mut hub)
            .iter()
            .filter_map(|e| match e {
                Effect::Start(s) => Some((s.backend, s.epoch)),
                _ => None,
            })
            .collect();
        // The disabled server does not start.
        let [(id, epoch)] = started[..] else {
            panic!("one start: {started:?}");
        };
        // What an earlier session of it reports changes nothing.
        hub.handle(Input::Backend(
            id,
            Incoming::Session(epoch - 1, FromSession::Closed),
        ));
        hub.end_turn();
        assert!(effects(&mut hub).is_empty());
        assert!(hub.backends.by_id[&id].live().is_some());
        // Its own session's end stops it, under its epoch.
        hub.handle(Input::Backend(
            id,
            Incoming::Session(epoch, FromSession::Closed),
        ));
        hub.end_turn();
        let stopped = effects(&mut hub);
        // (Its probe's timer, still armed, is disarmed with it.)
        let stops: Vec<&Effect> = stopped
            .iter()
            .filter(|e| !matches!(e, Effect::Disarm(_)))
            .collect();
        assert!(
            matches!(stops[..], [Effect::Stop { backend, epoch: e, .. }] if *backend == id && *e == epoch),
            "{stopped:?}"
        );
        assert!(hub.backends.by_id[&id].live().is_none());
    }
}
