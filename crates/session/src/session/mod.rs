//! The owning task and the lifecycle of worker generations.

mod client;
mod worker;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_jsonrpc::{Frame, LineCodec, build};
use mcpvisor_process::Exit;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::time::DelayQueue;

use crate::config::Config;
use crate::reply::{self, Loss};
use crate::spawner::{Spawner, WorkerIo};
use crate::table::{Owner, Req, ServerReq, Timer};
use crate::writer;

/// Asks a running session to do something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Stop the worker and end the session (SIGTERM, SIGINT).
    Shutdown,
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
    WriteFailed(String),
}

#[derive(Debug)]
pub(crate) enum Phase {
    /// Waiting for the answer to the replayed `initialize` (worker-side id).
    Handshake(u64),
    Ready,
    /// Fenced: nothing more is sent to or taken from it.
    Dead,
}

/// One worker generation.
pub(crate) struct Generation {
    pub phase: Phase,
    /// Dropping it closes the worker's stdin (the first layer of a stop).
    pub tx: Option<mpsc::Sender<Bytes>>,
    pub stop: Box<dyn Fn() + Send>,
    pub pid: Option<u32>,
    /// Whether it has ever sent the cancel acknowledgement.
    pub acks: bool,
    pub stdout_closed: bool,
    pub exit: Option<Exit>,
    pub exit_wait: Option<tokio_util::time::delay_queue::Key>,
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
    /// The generation new traffic goes to.
    current: Option<u64>,
    /// Why the last start failed, while no worker is running.
    unavailable: Option<String>,
    reqs: HashMap<u64, Req>,
    by_client_id: HashMap<Bytes, u64>,
    by_token: HashMap<Bytes, u64>,
    server_reqs: HashMap<u64, ServerReq>,
    waiting: VecDeque<Waiting>,
    handshake: Handshake,
    timers: DelayQueue<Timer>,
    events_tx: mpsc::Sender<(u64, WorkerEvent)>,
    events_rx: mpsc::Receiver<(u64, WorkerEvent)>,
    client_tx: mpsc::Sender<Bytes>,
    client_gone: bool,
    draining: bool,
    /// Traffic waits for a generation that must be started.
    restart_pending: bool,
}

impl<S> std::fmt::Debug for Session<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("current", &self.current)
            .field("in_flight", &self.reqs.len())
            .finish_non_exhaustive()
    }
}

/// The most server-to-client requests the client may hold at once.
const MAX_SERVER_REQUESTS: usize = 1024;
/// Capacity of each worker's stdin queue; a worker this far behind is stuck.
const WORKER_QUEUE: usize = 1024;
/// How long one half of a generation's end waits for the other (stdout closed
/// and process exited).
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

impl<S: Spawner> Session<S> {
    /// Runs a session over the client's pipes until the client leaves or a
    /// shutdown is asked for, then stops every worker.
    pub async fn run<R, W>(
        cfg: Config,
        spawner: S,
        client_in: R,
        client_out: W,
        mut control: mpsc::Receiver<Control>,
    ) -> Outcome
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (events_tx, events_rx) = mpsc::channel(1024);
        let (client_tx, client_rx) = mpsc::channel(1024);
        let client_done_tx = events_tx.clone();
        let client_writer = tokio::spawn(async move {
            let result = writer::write_lines(client_out, client_rx, None).await;
            if let Err(e) = result {
                tracing::debug!(error = %e, "client stdout closed");
                let _ = client_done_tx
                    .send((0, WorkerEvent::WriteFailed(e.to_string())))
                    .await;
            }
        });
        let mut input = FramedRead::new(client_in, LineCodec::new(cfg.max_message_bytes));
        let mut s = Session {
            cfg: Arc::new(cfg),
            spawner,
            next_generation: 1,
            next_worker_id: 1,
            next_server_id: 1,
            gens: HashMap::new(),
            current: None,
            unavailable: None,
            reqs: HashMap::new(),
            by_client_id: HashMap::new(),
            by_token: HashMap::new(),
            server_reqs: HashMap::new(),
            waiting: VecDeque::new(),
            handshake: Handshake::default(),
            timers: DelayQueue::new(),
            events_tx,
            events_rx,
            client_tx,
            client_gone: false,
            draining: false,
            restart_pending: false,
        };
        let outcome = loop {
            if s.client_gone {
                break Outcome::ClientGone;
            }
            if s.draining && s.reqs.is_empty() {
                break Outcome::ClientClosed;
            }
            tokio::select! {
                frame = input.next(), if !s.draining => match frame {
                    Some(Ok(frame)) => s.on_client_frame(frame).await,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "client stdin failed");
                        s.start_drain();
                    }
                    None => s.start_drain(),
                },
                Some((generation, event)) = s.events_rx.recv() => s.on_worker_event(generation, event).await,
                Some(expired) = s.timers.next(), if !s.timers.is_empty() => {
                    s.on_timer(expired.into_inner()).await;
                }
                Some(Control::Shutdown) = control.recv() => break Outcome::Shutdown,
                else => break Outcome::ClientClosed,
            }
            if std::mem::take(&mut s.restart_pending)
                && s.current.is_none()
                && !s.waiting.is_empty()
            {
                s.start_generation().await;
            }
        };
        s.shutdown().await;
        // Closing the channel lets the writer flush what is queued and end.
        drop(s);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), client_writer).await;
        outcome
    }

    // === output ===

    /// Queues a message for the client.
    async fn emit(&mut self, msg: Bytes) {
        if self.client_gone {
            return;
        }
        if self.client_tx.send(msg).await.is_err() {
            self.client_gone = true;
        }
    }

    /// Queues a message for a generation's stdin. A worker that has fallen
    /// a whole queue behind is stuck and is stopped.
    async fn send_to(&mut self, generation: u64, msg: Bytes) -> bool {
        let Some(g) = self.gens.get(&generation) else {
            return false;
        };
        let Some(tx) = &g.tx else { return false };
        match tx.try_send(msg) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.retire(
                    generation,
                    "the server stopped reading its stdin".into(),
                    None,
                )
                .await;
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    // === generations ===

    /// The generation that can take traffic now, starting one if none is
    /// running. `None` while a generation is still in its handshake or when
    /// no worker can be started.
    async fn ready_generation(&mut self) -> Option<u64> {
        if self.current.is_none() {
            self.start_generation().await;
        }
        let id = self.current?;
        matches!(self.gens.get(&id)?.phase, Phase::Ready).then_some(id)
    }

    async fn start_generation(&mut self) {
        let id = self.next_generation;
        self.next_generation += 1;
        let io = match self.spawner.spawn(id) {
            Ok(io) => io,
            Err(e) => {
                tracing::error!(generation = id, error = %e, "cannot start the MCP server");
                self.unavailable = Some(e.0);
                self.fail_waiting().await;
                return;
            }
        };
        self.unavailable = None;
        tracing::info!(generation = id, pid = io.pid, "started worker");
        let generation = self.wire_up(id, io);
        self.gens.insert(id, generation);
        self.current = Some(id);
        let wid = self.next_worker_id;
        match self.handshake.init_params.as_deref() {
            Some(params) => {
                let msg = build::request(&wid.to_string(), "initialize", Some(params));
                self.next_worker_id += 1;
                let key = self
                    .timers
                    .insert(Timer::Handshake(id), self.cfg.init_timeout);
                self.reqs.insert(
                    wid,
                    Req {
                        owner: Owner::Replay,
                        generation: Some(id),
                        timer: Some(key),
                    },
                );
                if let Some(g) = self.gens.get_mut(&id) {
                    g.phase = Phase::Handshake(wid);
                }
                self.send_to(id, msg).await;
            }
            None => self.become_ready(id).await,
        }
    }

    /// Starts the helper tasks of a new generation.
    fn wire_up(&mut self, id: u64, io: WorkerIo) -> Generation {
        let WorkerIo {
            stdin,
            stdout,
            pid,
            stop,
            exited,
        } = io;
        let (tx, rx) = mpsc::channel(WORKER_QUEUE);
        let events = self.events_tx.clone();
        let stall = self.cfg.write_timeout;
        tokio::spawn(async move {
            if let Err(e) = writer::write_lines(stdin, rx, Some(stall)).await {
                let _ = events
                    .send((id, WorkerEvent::WriteFailed(e.to_string())))
                    .await;
            }
        });
        let events = self.events_tx.clone();
        let max = self.cfg.max_message_bytes;
        tokio::spawn(async move {
            let mut frames = FramedRead::new(stdout, LineCodec::new(max));
            while let Some(Ok(frame)) = frames.next().await {
                if events.send((id, WorkerEvent::Frame(frame))).await.is_err() {
                    return;
                }
            }
            let _ = events.send((id, WorkerEvent::StdoutClosed)).await;
        });
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let exit = exited.await;
            let _ = events.send((id, WorkerEvent::Exited(exit))).await;
        });
        Generation {
            phase: Phase::Ready,
            tx: Some(tx),
            stop,
            pid,
            acks: false,
            stdout_closed: false,
            exit: None,
            exit_wait: None,
        }
    }

    async fn become_ready(&mut self, id: u64) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        g.phase = Phase::Ready;
        tracing::debug!(generation = id, "worker ready");
        while let Some(item) = self.waiting.pop_front() {
            match item {
                Waiting::Notification(msg) => {
                    self.send_to(id, msg).await;
                }
                Waiting::Request(wid) => {
                    let Some(req) = self.reqs.get_mut(&wid) else {
                        continue;
                    };
                    let Some(msg) = req.client_mut().and_then(|c| c.unsent.take()) else {
                        continue;
                    };
                    req.generation = Some(id);
                    self.send_to(id, msg).await;
                }
            }
            if self.current != Some(id) {
                // Sending failed and retired the generation; the rest waits.
                return;
            }
        }
    }

    /// Fails everything waiting for a worker that could not be started.
    async fn fail_waiting(&mut self) {
        let reason = self
            .unavailable
            .clone()
            .unwrap_or_else(|| "the MCP server is unavailable".into());
        let items: Vec<_> = self.waiting.drain(..).collect();
        for item in items {
            if let Waiting::Request(wid) = item {
                if let Some(id) = self.remove_req(wid).and_then(|r| client_id(&r)) {
                    let data = serde_json::json!({ "reason": reason });
                    self.emit(reply::not_started(
                        &id,
                        &format!("cannot start the MCP server: {reason}"),
                        Some(data),
                    ))
                    .await;
                }
            }
        }
    }

    /// Fences generation `id`, stops its process and fails what it held.
    pub(crate) async fn retire(&mut self, id: u64, cause: String, exit: Option<Exit>) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        let phase_name = match g.phase {
            Phase::Handshake(_) => "initialize",
            Phase::Ready => "serving",
            Phase::Dead => return,
        };
        let was_handshake = matches!(g.phase, Phase::Handshake(_));
        g.phase = Phase::Dead;
        g.tx = None;
        (g.stop)();
        if let Some(key) = g.exit_wait.take() {
            self.timers.remove(&key);
        }
        let exit = exit.or_else(|| g.exit.clone());
        let pid = g.pid;
        if exit.as_ref().is_some_and(|e| e.requested) {
            tracing::info!(generation = id, pid, cause = %cause, "worker stopped");
        } else {
            tracing::warn!(generation = id, pid, cause = %cause, "worker stopped");
        }
        if self.current == Some(id) {
            self.current = None;
        }
        let loss = Loss {
            generation: id,
            cause,
            phase: phase_name,
            exit: exit.and_then(|e| e.status),
        };
        let held: Vec<u64> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.generation == Some(id))
            .map(|(wid, _)| *wid)
            .collect();
        for wid in held {
            let Some(req) = self.remove_req(wid) else {
                continue;
            };
            if let Owner::Client(c) = req.owner {
                if !c.cancelled {
                    self.emit(reply::lost(&c.id, &loss)).await;
                }
            }
        }
        let asked: Vec<u64> = self
            .server_reqs
            .iter()
            .filter(|(_, r)| r.generation == id)
            .map(|(cid, _)| *cid)
            .collect();
        for cid in asked {
            self.server_reqs.remove(&cid);
            let note = build::cancelled(&cid.to_string(), "the MCP server that asked has stopped");
            self.emit(note).await;
        }
        if was_handshake && !self.waiting.is_empty() {
            // The replacement could not even be initialized: do not spin on
            // it. What waits was never started and may be retried.
            self.unavailable = Some(format!(
                "the restarted server failed its handshake ({})",
                loss.cause
            ));
            self.fail_waiting().await;
        } else if !self.waiting.is_empty() {
            // Started from the main loop, after this event is handled.
            self.restart_pending = true;
        }
    }

    /// Records one half of a generation's end; retires it when both halves
    /// are in or the other is overdue.
    async fn on_end(&mut self, id: u64, exit: Option<Exit>) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        if exit.is_some() {
            g.exit = exit;
        } else {
            g.stdout_closed = true;
        }
        let dead = matches!(g.phase, Phase::Dead);
        let both = g.stdout_closed && g.exit.is_some();
        if dead {
            if g.exit.is_some() {
                // Fully gone: forget it.
                if let Some(key) = g.exit_wait.take() {
                    self.timers.remove(&key);
                }
                self.gens.remove(&id);
            }
            return;
        }
        if both {
            let exit = g.exit.clone();
            let cause = exit
                .as_ref()
                .map(|e| format!("it exited with {}", display_status(e)))
                .unwrap_or_else(|| "it exited".into());
            self.retire(id, cause, exit).await;
            if self.gens.get(&id).is_some_and(|g| g.exit.is_some()) {
                self.gens.remove(&id);
            }
        } else if g.exit_wait.is_none() {
            g.exit_wait = Some(self.timers.insert(Timer::ExitWait(id), EXIT_WAIT));
        }
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
            self.timers.remove(key);
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

    // === timers ===

    async fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Request(wid) => self.on_request_timer(wid).await,
            Timer::CancelGrace(wid) => self.on_cancel_grace(wid).await,
            Timer::Handshake(generation) => {
                if let Some(req) = self
                    .reqs
                    .get_mut(&self.handshake_id(generation).unwrap_or(0))
                {
                    req.timer = None;
                }
                self.retire(
                    generation,
                    format!(
                        "it did not answer the replayed initialize within {:?}",
                        self.cfg.init_timeout
                    ),
                    None,
                )
                .await;
            }
            Timer::ExitWait(generation) => {
                let Some(g) = self.gens.get_mut(&generation) else {
                    return;
                };
                g.exit_wait = None;
                let exit = g.exit.clone();
                let cause = match &exit {
                    Some(e) => format!("it exited with {}", display_status(e)),
                    None => "it closed its stdout".into(),
                };
                self.retire(generation, cause, exit).await;
            }
            Timer::Drain => {
                tracing::info!(
                    in_flight = self.reqs.len(),
                    "client closed stdin; drain time is up"
                );
                let all: Vec<u64> = self.reqs.keys().copied().collect();
                for wid in all {
                    self.remove_req(wid);
                }
            }
        }
    }

    fn handshake_id(&self, generation: u64) -> Option<u64> {
        match self.gens.get(&generation)?.phase {
            Phase::Handshake(wid) => Some(wid),
            _ => None,
        }
    }

    async fn on_request_timer(&mut self, wid: u64) {
        let now = Instant::now();
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        req.timer = None;
        let generation = req.generation;
        let Some(c) = req.client_mut() else { return };
        let ceiling = now >= c.ceiling;
        if !ceiling && now < c.idle_deadline {
            // Progress moved the deadline after this timer was set.
            let at = c.idle_deadline.min(c.ceiling);
            req.timer = Some(self.timers.insert_at(Timer::Request(wid), at));
            return;
        }
        let id = c.id.clone();
        let after = if ceiling {
            self.cfg.request_ceiling
        } else {
            self.cfg.request_timeout
        };
        let initialize = c.initialize.is_some();
        match generation {
            None => {
                // It never reached a worker.
                self.waiting
                    .retain(|w| !matches!(w, Waiting::Request(x) if *x == wid));
                self.remove_req(wid);
                let reason = format!("no MCP server became ready within {after:?}");
                self.emit(reply::not_started(&id, &reason, None)).await;
            }
            Some(generation) if initialize => {
                // initialize is never cancelled; a stuck one costs the generation.
                self.emit(reply::timed_out(&id, after, ceiling)).await;
                if let Some(c) = self.reqs.get_mut(&wid).and_then(Req::client_mut) {
                    c.cancelled = true;
                }
                self.retire(
                    generation,
                    format!("it did not answer initialize within {after:?}"),
                    None,
                )
                .await;
            }
            Some(_) => {
                self.emit(reply::timed_out(&id, after, ceiling)).await;
                self.cancel(wid, "request timed out").await;
            }
        }
    }

    async fn on_cancel_grace(&mut self, wid: u64) {
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        req.timer = None;
        let Some(generation) = req.generation else {
            self.remove_req(wid);
            return;
        };
        let acks = self.gens.get(&generation).is_some_and(|g| g.acks);
        let stop = match self.cfg.cancel_ack {
            crate::CancelAckPolicy::Stop => true,
            crate::CancelAckPolicy::Release => false,
            crate::CancelAckPolicy::Auto => acks,
        };
        if stop {
            self.remove_req(wid);
            self.retire(
                generation,
                format!(
                    "it did not finish a cancelled request within {:?}",
                    self.cfg.cancel_grace
                ),
                None,
            )
            .await;
        } else {
            tracing::debug!(generation, "cancel grace over; slot released");
            self.remove_req(wid);
        }
    }

    /// Marks a client request cancelled, tells its worker, and starts its
    /// grace. The client will get no response for it.
    async fn cancel(&mut self, wid: u64, reason: &str) {
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        let Some(c) = req.client_mut() else { return };
        if c.cancelled || c.initialize.is_some() {
            return;
        }
        c.cancelled = true;
        if let Some(key) = req.timer.take() {
            self.timers.remove(&key);
        }
        match req.generation {
            None => {
                self.waiting
                    .retain(|w| !matches!(w, Waiting::Request(x) if *x == wid));
                self.remove_req(wid);
            }
            Some(generation) => {
                req.timer = Some(
                    self.timers
                        .insert(Timer::CancelGrace(wid), self.cfg.cancel_grace),
                );
                let note = build::cancelled(&wid.to_string(), reason);
                self.send_to(generation, note).await;
            }
        }
    }

    // === shutdown ===

    fn start_drain(&mut self) {
        if self.draining {
            return;
        }
        self.draining = true;
        if !self.reqs.is_empty() {
            tracing::info!(
                in_flight = self.reqs.len(),
                "client closed stdin; waiting for requests in flight"
            );
            self.timers.insert(Timer::Drain, self.cfg.shutdown_drain);
        }
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
            match tokio::time::timeout_at(deadline, self.events_rx.recv()).await {
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

fn client_id(req: &Req) -> Option<Bytes> {
    req.client().map(|c| c.id.clone())
}

fn display_status(exit: &Exit) -> String {
    match exit.status {
        Some(s) => s.to_string(),
        None => "an unknown status".into(),
    }
}
