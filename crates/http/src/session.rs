//! One HTTP session: the task that owns its streams.
//!
//! A session is one front of the hub. Its task owns everything about it:
//! which of the client's requests are in flight and on which stream their
//! related messages go, each stream's replay buffer, and the connection (if
//! any) attached to each stream. Request handlers talk to it with
//! [`Command`]s; the hub's [`Outbound`] messages arrive on the front's
//! channel. The task never waits on a connection: each attached connection
//! has a bounded queue, and a connection whose queue is full is dropped,
//! its events left in the buffer for the client to resume. So the hub's
//! channel is always drained and one stalled reader slows nobody.
//!
//! Event ids are `<stream>-<seq>`, `seq` counting events in the session,
//! so an id names the one stream a resumption may replay.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use mcpvisor_gateway::fronts::{FrontCommand, FrontId, Outbound};
use mcpvisor_jsonrpc::{Envelope, Kind};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::server::Shared;

/// One SSE event (or, for a request answered as JSON, its one message).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub id: String,
    pub line: Bytes,
    /// The response that ends a request's stream.
    pub response: bool,
}

/// What a request handler asks of its session.
#[derive(Debug)]
pub(crate) enum Command {
    /// A client request is about to be handed to the hub: route its related
    /// messages to the returned queue. `sse`: the client accepts a stream,
    /// so messages before the response may go to it.
    Request {
        id: Bytes,
        sse: bool,
        reply: oneshot::Sender<Result<Attached, Refusal>>,
    },
    /// The hub refused the request's hand-over; forget it.
    Abandon { id: Bytes },
    /// GET: attach to the standalone stream, or resume the stream that
    /// sent `last_event_id`.
    Listen {
        last_event_id: Option<String>,
        reply: oneshot::Sender<Result<Attached, Refusal>>,
    },
    /// A notification or response went to the hub: the client is alive.
    Touch,
    /// DELETE: the client ends the session.
    End,
}

/// A connection's place on a stream: the stream's number (the first part
/// of its event ids) and the queue of its events.
#[derive(Debug)]
pub(crate) struct Attached {
    pub stream: u64,
    /// Whether it is a request's stream (which ends with the response),
    /// not the standalone one.
    pub request: bool,
    pub rx: mpsc::Receiver<Event>,
}

impl Attached {
    /// The event id of a stream's priming event: resuming after it replays
    /// every event the stream still keeps.
    pub fn priming_id(&self) -> String {
        format!("{}-0", self.stream)
    }
}

/// Why a session refused a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    TooManyInFlight,
    DuplicateId,
    /// A standalone stream is already attached.
    Busy,
    /// `Last-Event-ID` names no stream this session still keeps.
    UnknownEvent,
    Draining,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamKind {
    Request { sse: bool },
    Standalone,
}

#[derive(Debug)]
struct Stream {
    kind: StreamKind,
    tx: Option<mpsc::Sender<Event>>,
    replay: VecDeque<(u64, Event)>,
    /// The last seq handed to a connection's queue.
    delivered: u64,
    /// The response went in; nothing more comes.
    done: bool,
}

impl Stream {
    fn new(kind: StreamKind) -> Self {
        Stream {
            kind,
            tx: None,
            replay: VecDeque::new(),
            delivered: 0,
            done: false,
        }
    }

    fn attached(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    /// Keeps the event for replay and hands it to the attached connection.
    fn push(&mut self, seq: u64, ev: Event, keep: usize) {
        self.replay.push_back((seq, ev.clone()));
        if self.replay.len() > keep {
            self.replay.pop_front();
        }
        if let Some(tx) = &self.tx {
            match tx.try_send(ev) {
                Ok(()) => self.delivered = seq,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!("an SSE reader fell behind; its stream is cut for resumption");
                    self.tx = None;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => self.tx = None,
            }
        }
        if self.done {
            // Ends the connection once its queue is read.
            self.tx = None;
        }
    }

    /// A queue for a new connection, holding the kept events after `after`.
    fn attach(&mut self, after: u64, queue: usize) -> mpsc::Receiver<Event> {
        let backlog: Vec<_> = self.replay.iter().filter(|(s, _)| *s > after).collect();
        let (tx, rx) = mpsc::channel(backlog.len() + queue);
        for (seq, ev) in backlog {
            // Cannot fail: the queue was made to hold the backlog.
            if tx.try_send(ev.clone()).is_ok() {
                self.delivered = self.delivered.max(*seq);
            }
        }
        self.tx = (!self.done).then_some(tx);
        rx
    }
}

/// The session task's state.
#[derive(Debug)]
pub(crate) struct Session {
    front: FrontId,
    key: Arc<str>,
    shared: Arc<Shared>,
    streams: BTreeMap<u64, Stream>,
    /// The client's requests in flight, by id as written: their stream.
    requests: HashMap<Bytes, u64>,
    standalone: u64,
    next_stream: u64,
    next_seq: u64,
    last_active: Instant,
    draining: bool,
    /// A session of the 2024-11-05 HTTP+SSE transport: everything goes on
    /// its one stream, and the session ends with that stream's connection.
    legacy: bool,
}

/// The handle the registry keeps.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    pub front: FrontId,
    pub commands: mpsc::Sender<Command>,
    /// Of the 2024-11-05 HTTP+SSE transport (its id is not an
    /// `Mcp-Session-Id`).
    pub legacy: bool,
}

/// Why a session task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Deleted,
    /// A legacy session's one stream was cut off or closed.
    Abandoned,
    Expired,
    HubGone,
    Shutdown,
}

impl Session {
    /// Spawns a session's task; the caller sends the hub `Open` with the
    /// returned sender before any message. A `legacy` session's one stream
    /// is attached at once: the third value is its connection's queue.
    pub fn spawn(
        shared: &Arc<Shared>,
        key: Arc<str>,
        front: FrontId,
        legacy: bool,
    ) -> (
        Handle,
        mpsc::Sender<Outbound>,
        Option<mpsc::Receiver<Event>>,
    ) {
        let cfg = &shared.cfg.cfg;
        let (out_tx, out_rx) = mpsc::channel(cfg.front_queue);
        let (cmd_tx, cmd_rx) = mpsc::channel(64);
        let mut streams = BTreeMap::new();
        let mut standalone = Stream::new(StreamKind::Standalone);
        let events = legacy.then(|| standalone.attach(0, cfg.stream_queue));
        streams.insert(0, standalone);
        let session = Session {
            front,
            key,
            shared: shared.clone(),
            streams,
            requests: HashMap::new(),
            standalone: 0,
            next_stream: 1,
            next_seq: 1,
            last_active: Instant::now(),
            draining: false,
            legacy,
        };
        shared.tasks.spawn(session.run(out_rx, cmd_rx));
        let handle = Handle {
            front,
            commands: cmd_tx,
            legacy,
        };
        (handle, out_tx, events)
    }

    async fn run(mut self, mut out: mpsc::Receiver<Outbound>, mut cmds: mpsc::Receiver<Command>) {
        let shared = self.shared.clone();
        let idle = shared.cfg.cfg.session_idle_timeout;
        let end = loop {
            let deadline = self.last_active + idle;
            // A legacy session's one stream: whether its reader is gone.
            let watched = if self.legacy {
                let tx = self
                    .streams
                    .get(&self.standalone)
                    .and_then(|s| s.tx.clone());
                if tx.is_none() {
                    // Cut off (it fell behind): a legacy stream cannot be
                    // resumed, so the session is over.
                    break End::Abandoned;
                }
                tx
            } else {
                None
            };
            tokio::select! {
                () = async {
                    match &watched {
                        Some(tx) => tx.closed().await,
                        None => std::future::pending().await,
                    }
                }, if watched.is_some() => break End::Abandoned,
                msg = out.recv() => match msg {
                    Some(msg) => self.route(msg),
                    None => break End::HubGone,
                },
                cmd = cmds.recv() => match cmd {
                    Some(Command::End) | None => break End::Deleted,
                    Some(cmd) => self.command(cmd),
                },
                () = tokio::time::sleep_until(deadline) => {
                    if self.busy() {
                        self.last_active = Instant::now();
                    } else {
                        break End::Expired;
                    }
                }
                () = shared.draining.cancelled(), if !self.draining => self.drain(),
                () = shared.stop.cancelled() => break End::Shutdown,
            }
        };
        tracing::debug!(front = self.front.0, ?end, "HTTP session ends");
        shared.forget(&self.key);
        if end != End::HubGone {
            let close = match end {
                // The client has gone: its requests are cancelled now.
                End::Deleted | End::Abandoned => FrontCommand::Abandon { front: self.front },
                _ => FrontCommand::Close { front: self.front },
            };
            let bound = shared.cfg.cfg.hub_send_timeout;
            if tokio::time::timeout(bound, shared.hub.send(close))
                .await
                .is_err()
            {
                tracing::warn!(
                    front = self.front.0,
                    "the hub took no Close for an ended session"
                );
            }
        }
    }

    fn busy(&self) -> bool {
        !self.requests.is_empty() || self.streams.values().any(Stream::attached)
    }

    fn command(&mut self, cmd: Command) {
        self.last_active = Instant::now();
        match cmd {
            Command::Request { id, sse, reply } => {
                let _ = reply.send(self.request(id, sse));
            }
            Command::Abandon { id } => {
                if let Some(stream) = self.requests.remove(&id) {
                    self.streams.remove(&stream);
                }
            }
            Command::Listen {
                last_event_id,
                reply,
            } => {
                let _ = reply.send(self.listen(last_event_id.as_deref()));
            }
            Command::Touch | Command::End => {}
        }
    }

    fn request(&mut self, id: Bytes, sse: bool) -> Result<Attached, Refusal> {
        let cfg = &self.shared.cfg.cfg;
        if self.draining {
            return Err(Refusal::Draining);
        }
        if self.requests.contains_key(&id) {
            return Err(Refusal::DuplicateId);
        }
        if self.requests.len() >= cfg.max_in_flight {
            return Err(Refusal::TooManyInFlight);
        }
        let n = self.next_stream;
        self.next_stream += 1;
        let mut stream = Stream::new(StreamKind::Request { sse });
        let rx = stream.attach(0, cfg.stream_queue);
        self.streams.insert(n, stream);
        self.requests.insert(id, n);
        self.prune();
        Ok(Attached {
            stream: n,
            request: true,
            rx,
        })
    }

    /// Forgets the oldest finished request streams past the bound.
    fn prune(&mut self) {
        let keep = self.shared.cfg.cfg.retained_streams;
        let done: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.done)
            .map(|(n, _)| *n)
            .collect();
        for n in done.iter().take(done.len().saturating_sub(keep)) {
            self.streams.remove(n);
        }
    }

    fn listen(&mut self, last_event_id: Option<&str>) -> Result<Attached, Refusal> {
        if self.draining {
            return Err(Refusal::Draining);
        }
        let queue = self.shared.cfg.cfg.stream_queue;
        let Some(last) = last_event_id else {
            let n = self.standalone;
            let stream = self.streams.get_mut(&n).ok_or(Refusal::UnknownEvent)?;
            if stream.attached() {
                return Err(Refusal::Busy);
            }
            let after = stream.delivered;
            let rx = stream.attach(after, queue);
            return Ok(Attached {
                stream: n,
                request: false,
                rx,
            });
        };
        let (n, seq) = parse_event_id(last).ok_or(Refusal::UnknownEvent)?;
        let stream = self.streams.get_mut(&n).ok_or(Refusal::UnknownEvent)?;
        // The client resumes because it lost the old connection, even if
        // this end has not noticed yet: the new one replaces it.
        let rx = stream.attach(seq, queue);
        Ok(Attached {
            stream: n,
            request: n != self.standalone,
            rx,
        })
    }

    fn drain(&mut self) {
        self.draining = true;
        if self.legacy {
            // Its responses come on its one stream: it stays until the stop.
            return;
        }
        // The standalone stream never ends by itself; request streams end
        // with their responses.
        if let Some(s) = self.streams.get_mut(&self.standalone) {
            s.tx = None;
        }
    }

    /// Puts one of the hub's messages on the one stream it belongs to.
    fn route(&mut self, msg: Outbound) {
        if self.legacy {
            // No ids and no replay: the old transport has no resumption.
            let seq = self.next_seq;
            self.next_seq += 1;
            if let Some(stream) = self.streams.get_mut(&self.standalone) {
                let ev = Event {
                    id: String::new(),
                    line: msg.line,
                    response: false,
                };
                stream.push(seq, ev, 0);
            }
            return;
        }
        let response =
            msg.response || Envelope::peek(&msg.line).is_ok_and(|e| e.kind == Kind::Response);
        let target = msg
            .related
            .as_ref()
            .and_then(|id| self.requests.get(id).copied())
            .filter(|n| {
                // A client that takes only JSON gets its request's other
                // messages on the standalone stream.
                response
                    || self
                        .streams
                        .get(n)
                        .is_some_and(|s| s.kind == StreamKind::Request { sse: true })
            });
        let n = match target {
            Some(n) => {
                if response && let Some(id) = &msg.related {
                    self.requests.remove(id);
                }
                n
            }
            None => {
                if response {
                    tracing::debug!(
                        front = self.front.0,
                        "a response for no request in flight is dropped"
                    );
                    return;
                }
                self.standalone
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let keep = self.shared.cfg.cfg.replay_events;
        if let Some(stream) = self.streams.get_mut(&n) {
            stream.done |= response;
            let ev = Event {
                id: format!("{n}-{seq}"),
                line: msg.line,
                response,
            };
            stream.push(seq, ev, keep);
        }
        if response {
            self.prune();
        }
    }
}

fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, seq) = id.trim().split_once('-')?;
    Some((stream.parse().ok()?, seq.parse().ok()?))
}
