//! The owning task of the gateway.
//!
//! [`Hub::run`] owns every piece of routing state: the backends and their
//! lifecycle, the table of requests in flight towards them, the backends'
//! own requests waiting for the front client's answer, the merged lists and
//! the name tables. It reads and writes the stdio client's pipes itself
//! (`stdio.rs`); an HTTP front's session task hands it lines over a
//! channel. Each backend's session writes its lines into the hub's event
//! channel, tagged with the backend's id and the session's epoch
//! ([`ToHub`]). A front's request is read once into a typed request
//! (`request.rs`) and handled by one method per kind.

mod backend;
mod calls;
mod front;
mod front_table;
mod lists;
mod observe;
mod per_client;
mod request;
mod stdio;

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_jsonrpc::Spans;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::time::DelayQueue;

use backend::{Backend, BackendId, Backends};
pub use backend::{ServerPlan, Spawners};
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
    /// One line the session wrote, with where its envelope lies when the
    /// session knows.
    Line(Bytes, Option<Spans>),
    /// The session ended its output.
    Closed,
    /// The session's lifecycle news.
    Status(mcpvisor_session::SessionEvent),
}

/// Timers of the owning task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A parked front request's `--list-timeout`.
    Parked,
    /// Time for an idle server's health ping.
    Health(BackendId),
    /// A server's `idle_timeout` may have run out.
    Idle(BackendId),
    /// A server's throttled row may be published.
    Publish(BackendId),
}

/// The gateway. See the crate docs.
pub struct Hub {
    settings: Settings,
    /// The backends (see `Backends`).
    backends: Backends,
    /// Every request held for someone (see `Calls`).
    calls: Calls,
    /// The open fronts (see `Fronts`).
    fronts: Fronts,
    /// Sessions being stopped in the background; the hub waits for them
    /// before it ends, so that no server outlives the gateway.
    stopping: tokio::task::JoinSet<()>,
    /// The merged lists and the cache (see `Catalog`).
    catalog: Catalog,
    timers: DelayQueue<Timer>,
    events_tx: mpsc::Sender<(BackendId, Incoming)>,
    events_rx: mpsc::Receiver<(BackendId, Incoming)>,
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
        mut fronts: mpsc::Receiver<FrontCommand>,
        mut control: mpsc::Receiver<Control>,
        primary: Option<FrontId>,
        stdio: Option<stdio::Stdio>,
    ) -> Outcome {
        let (events_tx, events_rx) = mpsc::channel(4096);
        let cache = settings.cache_dir.clone().map(crate::cache::Cache::at);
        let mut hub = Hub {
            settings,
            backends: Backends::default(),
            calls: Calls::default(),
            fronts: Fronts {
                primary,
                ..Fronts::default()
            },
            stopping: tokio::task::JoinSet::new(),
            catalog: Catalog {
                merged: Merged::default(),
                cache,
            },
            timers: DelayQueue::new(),
            events_tx,
            events_rx,
        };
        // The stdio client's pipes are the loop's own, not the hub's: they
        // are neither `Sync` nor needed anywhere else.
        let mut stdio = stdio;
        if let Some(front) = stdio.as_ref().map(|s| s.front) {
            hub.open_front(front, FrontOut::Stdio);
        }
        for plan in servers {
            hub.add_backend(plan);
        }
        // Lazy servers' cached lists count from the start.
        hub.remerge_all();
        let mut fronts_open = true;
        let outcome = loop {
            if let Some(outcome) = hub.fronts.ended {
                break outcome;
            }
            if !fronts_open && primary.is_some() && hub.fronts.open.is_empty() {
                break Outcome::ClientClosed;
            }
            let drain = hub.next_drain_deadline();
            let stdio_readable = stdio.as_ref().is_some_and(stdio::Stdio::readable);
            let stdio_blocked = stdio.as_ref().is_some_and(|s| s.out.is_blocked());
            tokio::select! {
                event = stdio::next(&mut stdio, stdio_readable, stdio_blocked), if stdio_readable || stdio_blocked => {
                    if let Some(s) = stdio.as_mut() {
                        match event {
                            stdio::Event::Read(frame) => hub.on_stdio_frame(s, frame),
                            stdio::Event::Written(written) => hub.on_stdio_written(s, written),
                        }
                    }
                }
                command = fronts.recv(), if fronts_open => match command {
                    Some(command) => hub.on_front_command(command),
                    None => fronts_open = false,
                },
                Some((backend, incoming)) = hub.events_rx.recv() => {
                    hub.on_backend(backend, incoming);
                }
                Some(expired) = hub.timers.next(), if !hub.timers.is_empty() => {
                    hub.on_timer(expired.into_inner());
                }
                Some(control) = control.recv() => match control {
                    Control::Shutdown => break Outcome::Shutdown,
                    Control::Reconfigure(plans) => hub.reconfigure(plans),
                    Control::Reload { server, cause } => {
                        hub.reload_backend(&server, &cause);
                    }
                    Control::Query(query) => hub.on_query(query),
                },
                () = async { if let Some(at) = drain { tokio::time::sleep_until(at).await } }, if drain.is_some() => {}
            }
            hub.finish_leaving();
            hub.settle();
            hub.finish_closed_fronts();
            hub.finish_leaving();
            while hub.stopping.try_join_next().is_some() {}
            hub.publish_changes();
            // What is queued for the stdio client is written once no more
            // of what was read from it waits to be handled: a burst goes
            // out in one write.
            if let Some(s) = stdio.as_mut() {
                if !(s.readable() && s.has_line()) {
                    hub.write_stdio(s).await;
                }
            }
        };
        hub.shutdown().await;
        if let Some(s) = stdio.as_mut() {
            hub.flush_stdio(s).await;
        }
        outcome
    }

    // === fronts ===

    fn on_front_command(&mut self, command: FrontCommand) {
        match command {
            FrontCommand::Open { front, out } => self.open_front(front, FrontOut::Channel(out)),
            FrontCommand::Message { front, line } => {
                if self
                    .fronts
                    .open
                    .get(&front)
                    .is_some_and(|f| f.closing.is_none())
                {
                    self.on_front_message(front, line);
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
        let held: Vec<u64> = self
            .calls
            .pending
            .iter()
            .filter(|(_, p)| matches!(p, Pending::Front { front: f, .. } if *f == front))
            .map(|(gid, _)| *gid)
            .collect();
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
        let Some(f) = self.fronts.open.get(&front) else {
            return;
        };
        if !self.fronts.leaving.is_empty() && self.fronts.leaving.iter().any(|(l, _)| *l == front) {
            return;
        }
        let sent = match &f.out {
            FrontOut::Channel(out) => out.try_send(Outbound { line, related }),
            FrontOut::Stdio
                if self.fronts.stdio_queue.len() + self.fronts.stdio_backlog < FRONT_QUEUE =>
            {
                self.fronts.stdio_queue.push_back(line);
                Ok(())
            }
            FrontOut::Stdio => Err(mpsc::error::TrySendError::Full(Outbound {
                line: Bytes::new(),
                related: None,
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
            Timer::Idle(b) => self.on_idle(b),
            Timer::Publish(b) => self.on_publish_timer(b),
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

    async fn shutdown(&mut self) {
        let links: Vec<_> = self
            .backends
            .by_id
            .values_mut()
            .filter_map(|b| {
                match std::mem::replace(
                    &mut b.run,
                    backend::Run::Off(backend::Off::Idle(backend::Start::Fresh)),
                ) {
                    backend::Run::Live(live) => Some(live.link),
                    backend::Run::Off(_) => None,
                }
            })
            .collect();
        let stops = links.into_iter().map(|l| l.stop());
        futures_util::future::join_all(stops).await;
        // Each stop is bounded by its session's own stop timeouts.
        while self.stopping.join_next().await.is_some() {}
    }
}

/// Hands one backend session's output to the hub's event channel, line by
/// line, tagged with the backend and its session's epoch. When the session
/// drops it (its output ended) the hub is told the session closed.
pub(crate) struct ToHub {
    id: BackendId,
    epoch: u64,
    events: tokio_util::sync::PollSender<(BackendId, Incoming)>,
}

impl ToHub {
    pub(crate) fn new(
        id: BackendId,
        epoch: u64,
        events: mpsc::Sender<(BackendId, Incoming)>,
    ) -> Self {
        Self {
            id,
            epoch,
            events: tokio_util::sync::PollSender::new(events),
        }
    }
}

impl mcpvisor_session::writer::LineSink for ToHub {
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), mcpvisor_session::writer::Gone>> {
        self.events
            .poll_reserve(cx)
            .map_err(|_| mcpvisor_session::writer::Gone)
    }

    fn send(
        &mut self,
        line: Bytes,
        spans: Option<Spans>,
    ) -> Result<(), mcpvisor_session::writer::Gone> {
        let event = Incoming::Session(self.epoch, FromSession::Line(line, spans));
        self.events
            .send_item((self.id, event))
            .map_err(|_| mcpvisor_session::writer::Gone)
    }
}

impl Drop for ToHub {
    fn drop(&mut self) {
        let Some(events) = self.events.get_ref().cloned() else {
            return;
        };
        let closed = (self.id, Incoming::Session(self.epoch, FromSession::Closed));
        match events.try_send(closed) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            // The hub is behind: tell it once it has room (the hub reads
            // its channel until it stops, and then nobody waits for this).
            Err(mpsc::error::TrySendError::Full(closed)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { events.send(closed).await });
                }
            }
        }
    }
}

/// Forwards one backend session's lifecycle events to the hub.
pub(crate) async fn relay_status(
    id: BackendId,
    epoch: u64,
    mut status: mpsc::Receiver<mcpvisor_session::SessionEvent>,
    events: mpsc::Sender<(BackendId, Incoming)>,
) {
    while let Some(event) = status.recv().await {
        if events
            .send((id, Incoming::Session(epoch, FromSession::Status(event))))
            .await
            .is_err()
        {
            return;
        }
    }
}
