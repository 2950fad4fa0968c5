//! The owning task of the gateway.
//!
//! [`Hub::run`] owns every piece of routing state: the backends and their
//! lifecycle, the table of requests in flight towards them, the backends'
//! own requests waiting for the front client's answer, the merged lists and
//! the name tables. Helper tasks only move lines: one reader per backend
//! session (its frames arrive tagged with the backend's id and the
//! session's epoch, so that a stopped session still ending is not taken
//! for its successor) and one writer for the front client.

mod backend;
mod front;
mod lists;

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_jsonrpc::{Frame, LineCodec};
use mcpvisor_session::writer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

pub use backend::ServerPlan;
use backend::{Backend, BackendId};
pub use lists::Cached;
use lists::Merged;

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
    /// Reload one server (its files changed).
    Reload(String),
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

/// Which session of which backend a report comes from. A restarted
/// backend's old session may still be ending: what it says is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Source {
    pub backend: BackendId,
    /// The backend's epoch when that session started.
    pub epoch: u64,
}

/// What a backend's helper tasks report.
#[derive(Debug)]
pub(crate) enum Incoming {
    Frame(Frame),
    /// The backend's session ended its output.
    Closed,
    /// The session's lifecycle news.
    Status(mcpvisor_session::SessionEvent),
}

/// A front request the gateway answers itself once servers settle.
#[derive(Debug)]
pub(crate) struct Parked {
    pub id: Bytes,
    pub method: String,
    pub params: Option<String>,
    pub deadline: Instant,
    /// A routed request whose target was not known yet: the whole line,
    /// handled again once servers have settled.
    pub line: Option<Bytes>,
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
}

/// A request towards a backend, by the gateway-side id it was sent under.
#[derive(Debug)]
pub(crate) enum Pending {
    /// The front client's request.
    Front {
        backend: BackendId,
        /// The front's id, as written.
        id: Bytes,
        /// The front's progress token, as written, if it asked for progress.
        token: Option<Bytes>,
        cancelled: bool,
        /// Tool search calls wrap their answer.
        wrap: Wrap,
    },
    /// The gateway's own request.
    Private {
        backend: BackendId,
        what: Private,
        timer: Option<Key>,
    },
}

/// How a routed answer is passed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrap {
    AsIs,
}

/// The gateway's own requests to a backend.
#[derive(Debug)]
pub(crate) enum Private {
    Initialize,
    List {
        kind: lists::Kind,
        items: Vec<Box<serde_json::value::RawValue>>,
        pages: usize,
        /// The session generation of the lists being read.
        epoch: u64,
    },
    Ping,
    /// `logging/setLevel` fanned out; the front's answer goes when all came.
    SetLevel(u64),
}

/// A fan-out request: one front request, several backend answers.
#[derive(Debug)]
pub(crate) struct FanOut {
    pub id: Bytes,
    pub waiting: usize,
}

/// A backend's request to the front client, by the front-side id.
#[derive(Debug)]
pub(crate) struct ServerReq {
    pub backend: BackendId,
    /// The backend session's id, as written.
    pub id: Bytes,
}

/// What the front client said about itself in `initialize`.
#[derive(Debug, Default)]
pub(crate) struct FrontInfo {
    pub initialized: bool,
    pub protocol: Option<String>,
    pub sampling: bool,
    pub elicitation: bool,
    pub roots: bool,
    /// A 2026-07-28 client: no handshake, and on stdio no requests to it.
    pub modern: bool,
}

/// The gateway. See the crate docs.
pub struct Hub {
    settings: Settings,
    backends: HashMap<BackendId, Backend>,
    /// Config order: the first server offering a URI wins.
    order: Vec<BackendId>,
    next_backend: u64,
    next_id: u64,
    next_front_id: u64,
    next_fanout: u64,
    pending: HashMap<u64, Pending>,
    /// Front id → gateway id, for cancellation.
    by_front_id: HashMap<Bytes, u64>,
    server_reqs: HashMap<u64, ServerReq>,
    fanouts: HashMap<u64, FanOut>,
    parked: VecDeque<Parked>,
    front: FrontInfo,
    /// Backends' requests that arrived before the client initialized.
    early: Vec<(BackendId, Bytes)>,
    /// Resource URIs the front subscribed to.
    subscriptions: std::collections::HashSet<String>,
    merged: Merged,
    cache: Option<crate::cache::Cache>,
    timers: DelayQueue<Timer>,
    events_tx: mpsc::Sender<(Source, Incoming)>,
    events_rx: mpsc::Receiver<(Source, Incoming)>,
    front_tx: mpsc::Sender<Bytes>,
    front_gone: bool,
    closing: bool,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("backends", &self.backends.len())
            .field("in_flight", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// How long a front client may leave a full queue unread before it counts
/// as gone.
const FRONT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long, after the front closed its input, answers may still arrive.
const DRAIN: Duration = Duration::from_secs(5);

impl Hub {
    /// Serves `servers` as one MCP server to the client on `input`/`output`
    /// until it leaves or a shutdown is asked for, then stops every server.
    pub async fn run<R, W>(
        settings: Settings,
        servers: Vec<ServerPlan>,
        input: R,
        output: W,
        mut control: mpsc::Receiver<Control>,
    ) -> Outcome
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (events_tx, events_rx) = mpsc::channel(4096);
        let (front_tx, front_rx) = mpsc::channel(4096);
        let (gone_tx, mut gone_rx) = tokio::sync::oneshot::channel::<()>();
        let writer = tokio::spawn(async move {
            if let Err(e) = writer::write_lines(output, front_rx, Some(FRONT_WRITE_TIMEOUT)).await {
                tracing::debug!(error = %e, "front client output closed");
                let _ = gone_tx.send(());
            }
        });
        let mut input = FramedRead::new(input, LineCodec::new(settings.max_message_bytes));
        let cache = settings.cache_dir.clone().map(crate::cache::Cache::at);
        let mut hub = Hub {
            settings,
            backends: HashMap::new(),
            order: Vec::new(),
            next_backend: 1,
            next_id: 1,
            next_front_id: 1,
            next_fanout: 1,
            pending: HashMap::new(),
            by_front_id: HashMap::new(),
            server_reqs: HashMap::new(),
            fanouts: HashMap::new(),
            parked: VecDeque::new(),
            front: FrontInfo::default(),
            early: Vec::new(),
            subscriptions: Default::default(),
            merged: Merged::default(),
            cache,
            timers: DelayQueue::new(),
            events_tx,
            events_rx,
            front_tx,
            front_gone: false,
            closing: false,
        };
        for plan in servers {
            hub.add_backend(plan);
        }
        // Lazy servers' cached lists count from the start.
        hub.remerge_all().await;
        let mut drain_deadline: Option<Instant> = None;
        let outcome = loop {
            if hub.front_gone {
                break Outcome::ClientGone;
            }
            if hub.closing {
                let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN);
                if hub.front_awaited() == 0 || Instant::now() >= deadline {
                    break Outcome::ClientClosed;
                }
            }
            let drain_sleep = drain_deadline.map(tokio::time::sleep_until);
            tokio::select! {
                frame = input.next(), if !hub.closing => match frame {
                    Some(Ok(frame)) => hub.on_front_frame(frame).await,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "front client input failed");
                        hub.closing = true;
                    }
                    None => hub.closing = true,
                },
                Some((source, incoming)) = hub.events_rx.recv() => {
                    hub.on_backend(source, incoming).await;
                }
                Some(expired) = hub.timers.next(), if !hub.timers.is_empty() => {
                    hub.on_timer(expired.into_inner()).await;
                }
                Some(control) = control.recv() => match control {
                    Control::Shutdown => break Outcome::Shutdown,
                    Control::Reconfigure(plans) => hub.reconfigure(plans).await,
                    Control::Reload(name) => hub.reload_backend(&name),
                },
                Ok(()) = &mut gone_rx, if !hub.front_gone => hub.front_gone = true,
                () = async { if let Some(s) = drain_sleep { s.await } }, if drain_sleep.is_some() => {}
            }
            hub.settle().await;
        };
        hub.shutdown().await;
        drop(hub);
        let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
        outcome
    }

    // === output ===

    /// Queues a message for the front client. A client that leaves a whole
    /// queue unread has stopped reading: the writer's timeout ends it.
    pub(crate) async fn emit(&mut self, msg: Bytes) {
        if self.front_gone {
            return;
        }
        match self.front_tx.try_send(msg) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => {
                match tokio::time::timeout(FRONT_WRITE_TIMEOUT, self.front_tx.send(msg)).await {
                    Ok(Ok(())) => {}
                    _ => self.front_gone = true,
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => self.front_gone = true,
        }
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Front requests still waiting for an answer.
    fn front_awaited(&self) -> usize {
        self.pending
            .values()
            .filter(|p| {
                matches!(
                    p,
                    Pending::Front {
                        cancelled: false,
                        ..
                    }
                )
            })
            .count()
            + self.parked.len()
            + self.fanouts.len()
    }

    // === timers ===

    async fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Parked => {}
            Timer::Health(b) => self.on_health(b).await,
            Timer::Idle(b) => self.on_idle(b).await,
        }
    }

    /// After every event: answer parked requests whose wait is over.
    async fn settle(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let settled = !self.any_settling();
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut keep = VecDeque::new();
        while let Some(p) = self.parked.pop_front() {
            if settled || now >= p.deadline {
                ready.push(p);
            } else {
                keep.push_back(p);
            }
        }
        self.parked = keep;
        for p in ready {
            self.answer_parked(p).await;
        }
    }

    async fn shutdown(&mut self) {
        let links: Vec<_> = self
            .backends
            .values_mut()
            .filter_map(|b| b.link.take())
            .collect();
        let stops = links.into_iter().map(|l| l.stop());
        futures_util::future::join_all(stops).await;
    }
}

/// Reads one backend session's output into the hub's event channel.
pub(crate) async fn pump(
    source: Source,
    mut output: mcpvisor_runner::link::Output,
    events: mpsc::Sender<(Source, Incoming)>,
) {
    while let Some(frame) = output.next().await {
        match frame {
            Ok(frame) => {
                if events.send((source, Incoming::Frame(frame))).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "backend session output failed");
                break;
            }
        }
    }
    let _ = events.send((source, Incoming::Closed)).await;
}

/// Forwards one backend session's lifecycle events to the hub.
pub(crate) async fn relay_status(
    source: Source,
    mut status: mpsc::Receiver<mcpvisor_session::SessionEvent>,
    events: mpsc::Sender<(Source, Incoming)>,
) {
    while let Some(event) = status.recv().await {
        if events
            .send((source, Incoming::Status(event)))
            .await
            .is_err()
        {
            return;
        }
    }
}
