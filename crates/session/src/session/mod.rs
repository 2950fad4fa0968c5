//! The owning task and the lifecycle of worker generations.

mod client;
pub mod gate;
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

use crate::WorkerExit as Exit;
use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_config::report::{StderrTail, StrayStdout};
use mcpvisor_jsonrpc::{Frame, LineCodec};
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
use crate::input::ClientInput;
use crate::spawner::Spawner;
use crate::table::{Req, ServerReq, Timer};
use crate::writer::{self, Message};
use gate::Quiet;

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

/// An event of one generation: from its helper tasks, its stdout, or the
/// session's own writes to its stdin.
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
    /// The worker waits for a person to open an authorization link (seen
    /// by its stderr pump, or said by its OAuth flow with a reason).
    AuthPrompt(String, Option<String>),
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
    /// Its stdin, written by the session. Closing it closes the worker's
    /// stdin (the first layer of a stop) and tells how many of the messages
    /// queued may have reached it.
    pub stdin: writer::Outlet,
    /// Messages put in its stdin queue so far.
    pub queued: u64,
    /// Asked when its stdin is closed, then dropped.
    pub unread: Option<crate::spawner::UnreadProbe>,
    /// What [`Generation::unread`] said when its stdin was closed.
    pub unread_at_close: Option<u64>,
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
    /// An `initialize` (the client's own, or a replay) was answered on it
    /// with a result.
    pub shook_hands: bool,
    pub reported_ready: bool,
    /// When it was reported ready: how long it has served.
    pub ready_at: Option<Instant>,
}

impl Generation {
    /// The authorization link it waits on, if any.
    pub fn auth_url(&self) -> Option<String> {
        self.auth.clone()
    }

    /// Closes its stdin (the first layer of a stop), if still open, and
    /// returns how many of the messages queued for it reached it: a byte
    /// of each was written, and, once nothing reads its pipe any more
    /// (it died), read. A message still whole in the pipe then never
    /// reached it: sent a moment before it died, or after it died while
    /// another process of its group held the pipe open.
    pub fn close_stdin(&mut self) -> u64 {
        if let Some(probe) = self.unread.take() {
            self.unread_at_close = probe();
        }
        self.stdin.close_unread(self.unread_at_close)
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
    /// The client sent an `initialize`, answered or not: it speaks the
    /// handshake era, and a worker no `initialize` was answered on has not
    /// shaken hands with it.
    pub asked: bool,
    pub initialized: bool,
    /// The params of the last `logging/setLevel` the server accepted.
    pub log_level: Option<Box<RawValue>>,
    /// The resources the client is subscribed to, with the params of each
    /// `resources/subscribe` the server accepted, in URI order.
    pub subscriptions: std::collections::BTreeMap<String, Box<RawValue>>,
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
    events_rx: Quiet<(u64, WorkerEvent)>,
    /// Every generation's stdout until it closes.
    stdouts: stdout::Stdouts,
    /// The client's stdout, written by this task. While `CLIENT_QUEUE`
    /// messages or more wait in it the session reads no more requests from
    /// the client; past `CLIENT_QUEUE + OUTBOX` it takes no worker events
    /// either (timers still run).
    client_out: writer::Outlet,
    client: ClientState,
    /// The sweep of client request deadlines (see `timers::on_sweep`).
    sweep: timers::Sweep,
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
/// Messages waiting for the client past which it is behind: the session
/// reads no more of its requests until it catches up.
const CLIENT_QUEUE: usize = 1024;
/// Messages that may wait for a client that is behind (beyond
/// `CLIENT_QUEUE`) before the session stops taking worker events.
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
        control: mpsc::Receiver<Control>,
        status: EventSink,
    ) -> Outcome
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let input = FramedRead::new(client_in, LineCodec::new(cfg.max_message_bytes));
        let client_out = writer::Outlet::new(Box::pin(client_out), Some(cfg.client_write_timeout));
        Self::run_with(cfg, spawner, input, client_out, control, status).await
    }

    /// [`Session::run`] over any client: `input` to read it (a pipe framed
    /// as it is read, or [`crate::input::Lines`] from a task in the same
    /// process), `client_out` to write it (a pipe, or a
    /// [`writer::LineSink`]).
    pub async fn run_with<I: ClientInput>(
        cfg: Config,
        spawner: S,
        mut input: I,
        client_out: writer::Outlet,
        control: mpsc::Receiver<Control>,
        status: EventSink,
    ) -> Outcome {
        let (events_tx, events_rx) = mpsc::channel(1024);
        let mut control = Quiet::new(control);
        let mut input_gate = gate::Gate::default();
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
            events_rx: Quiet::new(events_rx),
            stdouts: stdout::Stdouts::default(),
            client_out,
            client: ClientState::Open,
            sweep: timers::Sweep::default(),
            init_result: None,
            snapshot: None,
            fetch: None,
            status,
        };
        let mut slices = writer::Slices::default();
        let mut streaks = writer::Streaks::default();
        let outcome = loop {
            match s.client {
                ClientState::Gone => break Outcome::ClientGone,
                ClientState::Closing if s.awaited() == 0 => break Outcome::ClientClosed,
                ClientState::Open | ClientState::Closing => {}
            }
            // A client that is behind sends nothing new until it catches
            // up; far behind, the workers wait too. The timers run on.
            let caught_up = s.client_out.queued() < CLIENT_QUEUE;
            let far_behind = s.client_out.queued() >= CLIENT_QUEUE + OUTBOX;
            let blocked = s.client_out.is_blocked();
            let stdin_blocked = s.gens.values().any(|g| g.stdin.is_blocked());
            let mut won = writer::Won::Other;
            // In a fixed order, the likeliest first: the workers' lines
            // (answers go out before more is read), the client, then the
            // rest; `Streaks` keeps the first two from starving the others.
            tokio::select! {
                biased;
                (generation, event) = s.stdouts.next(), if !far_behind && !s.stdouts.is_empty() && streaks.first_open() => {
                    won = writer::Won::First;
                    s.on_worker_event(generation, event);
                }
                frame = std::future::poll_fn(|cx| input_gate.poll(cx, |cx| input.poll_frame(cx))), if s.client == ClientState::Open && caught_up && streaks.second_open() => {
                    won = writer::Won::Second;
                    match frame {
                        Some(Ok((frame, spans))) => s.on_client_frame(frame, spans),
                        Some(Err(e)) => {
                            tracing::debug!(error = %e, "client stdin failed");
                            s.start_drain();
                        }
                        None => s.start_drain(),
                    }
                }
                Some((generation, event)) = s.events_rx.recv(), if !far_behind => {
                    s.on_worker_event(generation, event);
                }
                flushed = s.client_out.flushed(), if blocked && s.client != ClientState::Gone => {
                    s.on_client_written(flushed);
                }
                (generation, written) = stdin_flushed(&mut s.gens), if stdin_blocked => {
                    s.on_stdin_written(generation, written);
                }
                () = s.sweep.fired(), if s.sweep.is_armed() => s.on_sweep(),
                Some(expired) = s.timers.next(), if !s.timers.is_empty() => {
                    s.on_timer(expired.into_inner());
                }
                Some(control) = control.recv() => match control {
                    Control::Shutdown => break Outcome::Shutdown,
                    Control::Reload(reason) => s.reload(reason),
                },
                // Only when a streak held a branch back and nothing else
                // was ready: the streaks start again.
                () = std::future::ready(()), if streaks.held() => {}
                else => break Outcome::ClientClosed,
            }
            streaks.took(won);
            s.settle();
            // What is queued is written once no more of what was read
            // waits to be handled, so that a burst of messages goes out in
            // one write per pipe. (A line whose branch is disabled does not
            // count: it waits for the very writes this would hold back.)
            let more = (s.client == ClientState::Open
                && s.client_out.queued() < CLIENT_QUEUE
                && input.has_frame())
                || (s.client_out.queued() < CLIENT_QUEUE + OUTBOX && s.stdouts.has_line());
            // A long burst goes out in slices, not whole (see `Slices`):
            // the worker starts on its first lines, and a gateway's hub on
            // its first answers, while the session reads the rest.
            let slice_done = slices.turn(more);
            if !more || slice_done {
                std::future::poll_fn(|cx| {
                    s.write_out(cx);
                    std::task::Poll::Ready(())
                })
                .await;
            }
            if slice_done {
                tokio::task::yield_now().await;
            }
        };
        s.shutdown().await;
        // What waits for the client still goes out (bounded).
        if s.client != ClientState::Gone {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.client_out.flushed())
                .await;
        }
        outcome
    }

    /// Writes what is queued for each generation's stdin and for the
    /// client, as far as each pipe takes it now. A full pipe is waited on
    /// in the loop's `select!`.
    fn write_out(&mut self, cx: &mut std::task::Context<'_>) {
        let mut failed = Vec::new();
        for (&generation, g) in self.gens.iter_mut() {
            if !g.stdin.is_idle() && !g.stdin.is_blocked() {
                if let Some(Err(e)) = g.stdin.write_now_in(cx) {
                    failed.push((generation, e));
                }
            }
        }
        // Nearly always none: the loop is not entered at all.
        if !failed.is_empty() {
            for (generation, e) in failed {
                self.on_stdin_written(generation, Err(e));
            }
        }
        if !self.client_out.is_idle() && !self.client_out.is_blocked() {
            if let Some(written) = self.client_out.write_now_in(cx) {
                self.on_client_written(written);
            }
        }
    }

    /// A write to a generation's stdin that waited for room finished,
    /// failed or stalled.
    fn on_stdin_written(&mut self, generation: u64, written: Result<(), writer::WriteError>) {
        if let Err(e) = written {
            let event = WorkerEvent::WriteFailed {
                closed: e.is_closed_pipe(),
                error: e.to_string(),
            };
            self.on_worker_event(generation, event);
        }
    }

    /// A write to the client finished, failed or stalled.
    fn on_client_written(&mut self, written: Result<(), writer::WriteError>) {
        match written {
            Ok(()) => {}
            Err(e @ writer::WriteError::Stalled(_)) => {
                tracing::warn!(error = %e, "the client stopped reading; ending the session");
                self.client = ClientState::Gone;
            }
            Err(e) => {
                tracing::debug!(error = %e, "client stdout closed");
                self.client = ClientState::Gone;
            }
        }
    }

    // === output ===

    /// Queues a message for the client; it is written at the end of the
    /// loop's turn. Never waits: a client that does not read must not stop
    /// the session's timers. A client that stays stuck is gone once a write
    /// to it has made no progress for `client_write_timeout`.
    fn emit(&mut self, msg: impl Into<Message>) {
        if self.client == ClientState::Gone {
            return;
        }
        self.client_out.push(msg.into());
    }

    /// [`Session::emit`], with where the message's envelope lies.
    fn emit_peeked(&mut self, msg: Message, spans: Option<mcpvisor_jsonrpc::Spans>) {
        if self.client != ClientState::Gone {
            self.client_out.push_peeked(msg, spans);
        }
    }

    /// Queues a message for a generation's stdin. A worker that has fallen
    /// a whole queue behind is stuck and is stopped.
    fn send_to(&mut self, generation: u64, msg: impl Into<Message>) -> bool {
        match self.enqueue(generation, msg.into()) {
            Ok(_) => true,
            Err(Unqueued::Full) => {
                self.retire_stuck(generation);
                false
            }
            Err(Unqueued::Closed) => false,
        }
    }

    /// Sends client request `wid` to a generation. One that its stdin queue
    /// does not take was never sent: it waits at the head of the queue for
    /// the next generation. Returns whether it was sent.
    fn dispatch(&mut self, wid: u64, generation: u64) -> bool {
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
                    self.retire_stuck(generation);
                }
                false
            }
        }
    }

    /// Puts a message in a generation's stdin queue; returns its place
    /// there (from 1).
    fn enqueue(&mut self, generation: u64, msg: Message) -> Result<u64, Unqueued> {
        let g = self.gens.get_mut(&generation).ok_or(Unqueued::Closed)?;
        if g.stdin.is_closed() {
            return Err(Unqueued::Closed);
        }
        if g.stdin.queued() >= WORKER_QUEUE {
            return Err(Unqueued::Full);
        }
        g.stdin.push(msg);
        g.queued += 1;
        Ok(g.queued)
    }

    /// A worker that has fallen a whole stdin queue behind is stuck.
    fn retire_stuck(&mut self, generation: u64) {
        let cause = "the server stopped reading its stdin".into();
        self.retire(generation, cause, None, lifecycle::Why::Crash);
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
            // One lookup where the entry is this request's, as it nearly
            // always is; another request's goes back.
            if let Some(other) = self.by_client_id.remove(&c.id).filter(|&w| w != wid) {
                self.by_client_id.insert(c.id.clone(), other);
            }
            if let Some(t) = &c.progress_token {
                if let Some(other) = self.by_token.remove(t).filter(|&w| w != wid) {
                    self.by_token.insert(t.clone(), other);
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
    /// requests, standing ones (a subscription) and mcpvisor's own (a
    /// replay, a list read) do not count: a client that has closed stdin
    /// has no use for them.
    fn awaited(&self) -> usize {
        self.reqs
            .values()
            .filter(|r| r.client().is_some_and(|c| !c.cancelled && !c.standing))
            .count()
    }

    /// Stops every generation in layers and waits (bounded) for them to end.
    async fn shutdown(&mut self) {
        let live: Vec<u64> = self.gens.keys().copied().collect();
        for id in live {
            if let Some(g) = self.gens.get_mut(&id) {
                // What is queued goes out if the pipe takes it now.
                let _ = g.stdin.write_now().await;
                g.close_stdin();
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

/// The first generation whose full stdin has taken everything queued, or
/// failed. Pending while none has.
async fn stdin_flushed(
    gens: &mut HashMap<u64, Generation>,
) -> (u64, Result<(), writer::WriteError>) {
    std::future::poll_fn(|cx| {
        for (&generation, g) in gens.iter_mut() {
            if g.stdin.is_blocked() {
                if let std::task::Poll::Ready(r) = g.stdin.poll_flush(cx) {
                    return std::task::Poll::Ready((generation, r));
                }
            }
        }
        std::task::Poll::Pending
    })
    .await
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
