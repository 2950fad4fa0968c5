//! The owning task and the lifecycle of worker generations.

mod client;
mod lifecycle;
mod lists;
mod restart;
mod state;
mod status;
mod stdout;
mod timers;
mod worker;

pub(crate) use lists::ListKind;
use state::{ClientState, WorkerState};

use std::collections::VecDeque;

// Keys are our own counters and the client's ids: a fast hash, not a keyed one.
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_config::report::{StderrTail, StrayStdout};
use mcpvisor_jsonrpc::{Frame, LineCodec};
use mcpvisor_process::Exit;
use serde_json::value::RawValue;
use std::sync::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

use crate::config::Config;
use crate::events::EventSink;
use crate::spawner::Spawner;
use crate::table::{Req, ServerReq, Timer};
use crate::writer::{self, Message};

/// Asks a running session to do something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Stop the worker and end the session (SIGTERM, SIGINT).
    Shutdown,
    /// Replace the worker at the next quiet moment (file change, SIGHUP).
    Reload(&'static str),
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The client closed our stdin.
    ClientClosed,
    /// The client stopped reading our stdout.
    ClientGone,
    /// A [`Control::Shutdown`] arrived.
    Shutdown,
}

/// An event from one generation's helper tasks.
#[derive(Debug)]
pub(crate) enum WorkerEvent {
    Frame(Frame),
    StdoutClosed,
    Exited(Exit),
    /// Writing to the worker's stdin failed. A closed pipe means the worker
    /// is ending (its exit status follows); anything else is a stall.
    WriteFailed {
        closed: bool,
        error: String,
    },
    /// The worker printed an authorization link (seen by its stderr pump).
    AuthPrompt(String),
    /// The worker knows that the request with this worker-side id never
    /// reached its server, and is ending.
    Undelivered(u64),
}

#[derive(Debug)]
pub(crate) enum Phase {
    /// Waiting for the answer to the replayed `initialize` (worker-side id).
    Handshake,
    /// Serving. Whether it takes new traffic is the session's
    /// [`WorkerState`]: a generation being replaced drains instead.
    Ready,
    /// Fenced: nothing more is sent to or taken from it.
    Dead,
}

/// One worker generation.
pub(crate) struct Generation {
    pub phase: Phase,
    /// Dropping it closes the worker's stdin (the first layer of a stop).
    pub tx: Option<mpsc::Sender<Message>>,
    /// Messages put in its stdin queue so far.
    pub queued: u64,
    /// How many of those may have reached it; fences its writer off.
    pub progress: Arc<writer::Progress>,
    pub stop: Box<dyn Fn() + Send>,
    pub pid: Option<u32>,
    /// Whether it has ever sent the cancel acknowledgement.
    pub acks: bool,
    pub stdout_closed: bool,
    pub exit: Option<Exit>,
    pub exit_wait: Option<Key>,
    pub started: Instant,
    /// When the reload that started it was asked, if one did.
    pub reload: Option<Instant>,
    pub stderr_tail: Arc<Mutex<StderrTail>>,
    /// What it wrote to stdout that was not JSON-RPC.
    pub stray_stdout: StrayStdout,
    /// Its answer to the replayed `initialize`.
    pub init_result: Option<serde_json::Value>,
    /// The authorization link it waits on, until `initialize` completes.
    pub auth: Option<String>,
    /// Whether it was reported ready.
    pub reported_ready: bool,
}

impl Generation {
    /// The authorization link it waits on, if any.
    pub fn auth_url(&self) -> Option<String> {
        self.auth.clone()
    }
}

/// Why a generation's stdin queue did not take a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unqueued {
    /// The worker is a whole queue behind.
    Full,
    /// Its writer has stopped, or it is fenced.
    Closed,
}

/// Traffic waiting for a ready generation, in arrival order.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// A request, by worker-side id.
    Request(u64),
    Notification(Bytes),
}

/// What the client's handshake was, for replay to later generations.
#[derive(Debug, Default)]
pub(crate) struct Handshake {
    pub init_params: Option<Box<RawValue>>,
    pub initialized: bool,
}

/// The supervisor session. See the crate docs for the design.
pub struct Session<S> {
    cfg: Arc<Config>,
    spawner: S,
    next_generation: u64,
    next_worker_id: u64,
    next_server_id: u64,
    gens: HashMap<u64, Generation>,
    /// What takes new traffic.
    worker: WorkerState,
    /// Consecutive exits soon after start: a history across worker states,
    /// for crash-loop detection and the restart backoff.
    quick_exits: u32,
    reqs: HashMap<u64, Req>,
    by_client_id: HashMap<Bytes, u64>,
    by_token: HashMap<Bytes, u64>,
    server_reqs: HashMap<u64, ServerReq>,
    waiting: VecDeque<Waiting>,
    handshake: Handshake,
    timers: DelayQueue<Timer>,
    events_tx: mpsc::Sender<(u64, WorkerEvent)>,
    events_rx: mpsc::Receiver<(u64, WorkerEvent)>,
    /// Every generation's stdout until it closes.
    stdouts: stdout::Stdouts,
    client_tx: mpsc::Sender<Message>,
    /// Messages for the client while its queue is full, in order. While any
    /// wait here the session reads no more requests from the client; past
    /// `OUTBOX` it takes no worker events either (timers still run).
    outbox: VecDeque<Message>,
    client: ClientState,
    /// The sweep of client request deadlines (see `timers::on_sweep`).
    sweep: std::pin::Pin<Box<tokio::time::Sleep>>,
    sweep_armed: bool,
    /// The `initialize` result the client saw (before mcpvisor's edits).
    init_result: Option<serde_json::Value>,
    snapshot: Option<lists::Snapshot>,
    fetch: Option<lists::Fetch>,
    /// Where status events go.
    status: EventSink,
}

impl<S> std::fmt::Debug for Session<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("worker", &self.worker)
            .field("client", &self.client)
            .field("in_flight", &self.reqs.len())
            .finish_non_exhaustive()
    }
}

/// The most server-to-client requests the client may hold at once.
const MAX_SERVER_REQUESTS: usize = 1024;
/// Messages that may wait for a client that is behind (beyond its queue)
/// before the session stops taking worker events.
const OUTBOX: usize = 1024;
/// Capacity of each worker's stdin queue; a worker this far behind is stuck.
const WORKER_QUEUE: usize = 1024;
/// How long one half of a generation's end waits for the other (stdout closed
/// and process exited).
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

impl<S: Spawner> Session<S> {
    /// Runs a session over the client's pipes until the client leaves or a
    /// shutdown is asked for, then stops every worker. `control` steers it;
    /// its status events go to `status` (see [`crate::SessionEvent`]).
    pub async fn run<R, W>(
        cfg: Config,
        spawner: S,
        client_in: R,
        client_out: W,
        mut control: mpsc::Receiver<Control>,
        status: EventSink,
    ) -> Outcome
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (events_tx, events_rx) = mpsc::channel(1024);
        let (client_tx, client_rx) = mpsc::channel(1024);
        // Resolves when the client stops reading our stdout.
        let (client_gone_tx, mut client_gone_rx) = tokio::sync::oneshot::channel::<()>();
        let stall = cfg.client_write_timeout;
        let client_writer = tokio::spawn(async move {
            match writer::write_lines(client_out, client_rx, Some(stall)).await {
                Ok(()) => return,
                Err(e @ writer::WriteError::Stalled(_)) => {
                    tracing::warn!(error = %e, "the client stopped reading; ending the session");
                }
                Err(e) => tracing::debug!(error = %e, "client stdout closed"),
            }
            let _ = client_gone_tx.send(());
        });
        let mut input = FramedRead::new(client_in, LineCodec::new(cfg.max_message_bytes));
        let mut s = Session {
            cfg: Arc::new(cfg),
            spawner,
            next_generation: 1,
            next_worker_id: 1,
            next_server_id: 1,
            gens: HashMap::default(),
            worker: WorkerState::Idle,
            quick_exits: 0,
            reqs: HashMap::default(),
            by_client_id: HashMap::default(),
            by_token: HashMap::default(),
            server_reqs: HashMap::default(),
            waiting: VecDeque::new(),
            handshake: Handshake::default(),
            timers: DelayQueue::new(),
            events_tx,
            events_rx,
            stdouts: stdout::Stdouts::default(),
            client_tx,
            outbox: VecDeque::new(),
            client: ClientState::Open,
            sweep: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
            sweep_armed: false,
            init_result: None,
            snapshot: None,
            fetch: None,
            status,
        };
        let outcome = loop {
            match s.client {
                ClientState::Gone => break Outcome::ClientGone,
                ClientState::Closing if s.awaited() == 0 => break Outcome::ClientClosed,
                ClientState::Open | ClientState::Closing => {}
            }
            // A client that is behind sends nothing new until it catches
            // up; far behind, the workers wait too. The timers run on.
            let caught_up = s.outbox.is_empty();
            let far_behind = s.outbox.len() >= OUTBOX;
            tokio::select! {
                frame = input.next(), if s.client == ClientState::Open && caught_up => match frame {
                    Some(Ok(frame)) => s.on_client_frame(frame).await,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "client stdin failed");
                        s.start_drain();
                    }
                    None => s.start_drain(),
                },
                (generation, event) = s.stdouts.next(), if !far_behind && !s.stdouts.is_empty() => {
                    s.on_worker_event(generation, event).await;
                }
                Some((generation, event)) = s.events_rx.recv(), if !far_behind => {
                    s.on_worker_event(generation, event).await;
                }
                open = has_room(&s.client_tx), if !caught_up => {
                    if open {
                        s.flush_outbox();
                    } else {
                        s.client = ClientState::Gone;
                    }
                }
                Ok(()) = &mut client_gone_rx, if s.client != ClientState::Gone => {
                    s.client = ClientState::Gone;
                }
                () = &mut s.sweep, if s.sweep_armed => s.on_sweep().await,
                Some(expired) = s.timers.next(), if !s.timers.is_empty() => {
                    s.on_timer(expired.into_inner()).await;
                }
                Some(control) = control.recv() => match control {
                    Control::Shutdown => break Outcome::Shutdown,
                    Control::Reload(reason) => s.reload(reason).await,
                },
                else => break Outcome::ClientClosed,
            }
            s.settle().await;
        };
        s.shutdown().await;
        // What waits for the client still goes out; closing the channel then
        // lets the writer flush what is queued and end.
        let outbox = std::mem::take(&mut s.outbox);
        let client_tx = s.client_tx.clone();
        drop(s);
        let flushed = async move {
            for msg in outbox {
                if client_tx.send(msg).await.is_err() {
                    break;
                }
            }
            drop(client_tx);
            let _ = client_writer.await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), flushed).await;
        outcome
    }

    // === output ===

    /// Queues a message for the client. Never waits: a client that does not
    /// read must not stop the session's timers. When its queue is full the
    /// message waits in the outbox; a client that stays stuck is gone once
    /// a write to it has made no progress for `client_write_timeout`.
    async fn emit(&mut self, msg: impl Into<Message>) {
        let msg = msg.into();
        if self.client == ClientState::Gone {
            return;
        }
        if !self.outbox.is_empty() {
            self.outbox.push_back(msg);
            return;
        }
        match self.client_tx.try_send(msg) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(msg)) => self.outbox.push_back(msg),
            Err(mpsc::error::TrySendError::Closed(_)) => self.client = ClientState::Gone,
        }
    }

    /// Moves messages from the outbox to the client's queue while it has room.
    fn flush_outbox(&mut self) {
        while let Some(msg) = self.outbox.pop_front() {
            match self.client_tx.try_send(msg) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(msg)) => {
                    self.outbox.push_front(msg);
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.client = ClientState::Gone;
                    self.outbox.clear();
                    return;
                }
            }
        }
    }

    /// Queues a message for a generation's stdin. A worker that has fallen
    /// a whole queue behind is stuck and is stopped.
    async fn send_to(&mut self, generation: u64, msg: impl Into<Message>) -> bool {
        match self.enqueue(generation, msg.into()) {
            Ok(_) => true,
            Err(Unqueued::Full) => {
                self.retire_stuck(generation).await;
                false
            }
            Err(Unqueued::Closed) => false,
        }
    }

    /// Sends client request `wid` to a generation. One that its stdin queue
    /// does not take was never sent: it waits at the head of the queue for
    /// the next generation. Returns whether it was sent.
    async fn dispatch(&mut self, wid: u64, generation: u64) -> bool {
        let Some(line) = self
            .reqs
            .get(&wid)
            .and_then(Req::client)
            .map(|c| c.line.clone())
        else {
            return true;
        };
        match self.enqueue(generation, line) {
            Ok(seq) => {
                if let Some(req) = self.reqs.get_mut(&wid) {
                    req.generation = Some(generation);
                    if let Some(c) = req.client_mut() {
                        c.seq = seq;
                    }
                }
                true
            }
            Err(unqueued) => {
                self.waiting.push_front(Waiting::Request(wid));
                if unqueued == Unqueued::Full {
                    self.retire_stuck(generation).await;
                }
                false
            }
        }
    }

    /// Puts a message in a generation's stdin queue; returns its place
    /// there (from 1).
    fn enqueue(&mut self, generation: u64, msg: Message) -> Result<u64, Unqueued> {
        let g = self.gens.get_mut(&generation).ok_or(Unqueued::Closed)?;
        let tx = g.tx.as_ref().ok_or(Unqueued::Closed)?;
        match tx.try_send(msg) {
            Ok(()) => {
                g.queued += 1;
                Ok(g.queued)
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(Unqueued::Full),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Unqueued::Closed),
        }
    }

    /// A worker that has fallen a whole stdin queue behind is stuck.
    async fn retire_stuck(&mut self, generation: u64) {
        let cause = "the server stopped reading its stdin".into();
        self.retire(generation, cause, None, lifecycle::Why::Crash)
            .await;
    }

    // === requests ===

    fn next_worker_id(&mut self) -> u64 {
        let id = self.next_worker_id;
        self.next_worker_id += 1;
        id
    }

    fn next_server_id(&mut self) -> u64 {
        let id = self.next_server_id;
        self.next_server_id += 1;
        id
    }

    /// Removes a request and every index and timer that points at it.
    fn remove_req(&mut self, wid: u64) -> Option<Req> {
        let req = self.reqs.remove(&wid)?;
        if let Some(key) = &req.timer {
            let _ = self.timers.try_remove(key);
        }
        if let Some(c) = req.client() {
            if self.by_client_id.get(&c.id) == Some(&wid) {
                self.by_client_id.remove(&c.id);
            }
            if let Some(t) = &c.progress_token {
                if self.by_token.get(t) == Some(&wid) {
                    self.by_token.remove(t);
                }
            }
        }
        Some(req)
    }

    // === shutdown ===

    fn start_drain(&mut self) {
        if self.client != ClientState::Open {
            return;
        }
        self.client = ClientState::Closing;
        let awaited = self.awaited();
        if awaited > 0 {
            tracing::info!(
                in_flight = awaited,
                "client closed stdin; waiting for requests in flight"
            );
            self.timers.insert(Timer::Closing, self.cfg.shutdown_drain);
        }
    }

    /// Client requests whose answers the client still waits for. Cancelled
    /// requests and mcpvisor's own (a replay, a list read) do not count: a
    /// client that has closed stdin has no use for them.
    fn awaited(&self) -> usize {
        self.reqs
            .values()
            .filter(|r| r.client().is_some_and(|c| !c.cancelled))
            .count()
    }

    /// Stops every generation in layers and waits (bounded) for them to end.
    async fn shutdown(&mut self) {
        let live: Vec<u64> = self.gens.keys().copied().collect();
        for id in live {
            if let Some(g) = self.gens.get_mut(&id) {
                g.tx = None;
                (g.stop)();
                g.phase = Phase::Dead;
            }
        }
        let bound = self.cfg.stop.after_close
            + self.cfg.stop.after_term
            + std::time::Duration::from_secs(2);
        let deadline = Instant::now() + bound;
        while self.gens.values().any(|g| g.exit.is_none()) {
            // Their stdout is still read (and dropped), so that none blocks
            // on a full pipe while it is asked to stop.
            let (events, stdouts) = (&mut self.events_rx, &mut self.stdouts);
            let next = async {
                loop {
                    tokio::select! {
                        event = events.recv() => return event,
                        _ = stdouts.next(), if !stdouts.is_empty() => {}
                    }
                }
            };
            match tokio::time::timeout_at(deadline, next).await {
                Ok(Some((id, WorkerEvent::Exited(exit)))) => {
                    if let Some(g) = self.gens.get_mut(&id) {
                        g.exit = Some(exit);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
}

/// Resolves once the client's queue has room; false when its writer is gone.
/// (The session is the only sender, so the room is still there after.)
async fn has_room(tx: &mpsc::Sender<Message>) -> bool {
    tx.reserve().await.is_ok()
}

fn display_status(exit: &Exit) -> String {
    use mcpvisor_config::report::ExitKind;
    match &exit.status {
        ExitKind::Code(code) => format!("exit code {code}"),
        ExitKind::Signal(number, name) if name.is_empty() => format!("signal {number}"),
        ExitKind::Signal(number, name) => format!("signal {number} ({name})"),
        ExitKind::Unknown => "an unknown status".into(),
        ExitKind::Http(end) => end.to_string(),
    }
}
