//! The records the session keeps per request.

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::time::delay_queue;

/// Who is waiting for the answer to a worker-side request id.
#[derive(Debug)]
pub(crate) enum Owner {
    /// A client request. `id` is the client's id, byte for byte (borrowed
    /// from its request's line).
    Client(ClientReq),
    /// mcpvisor's replay of the client's `initialize` to a new generation.
    Replay,
    /// mcpvisor reading one of a generation's lists.
    List(crate::session::ListKind),
    /// mcpvisor putting a new generation back in the state the client had
    /// set (the method it sends: `logging/setLevel`, `resources/subscribe`).
    Restore(&'static str),
}

/// What a client request changes in the server for the rest of the
/// session. Once the server accepts it, a later generation is put back in
/// that state after the replayed handshake.
#[derive(Debug)]
pub(crate) enum StateChange {
    /// `logging/setLevel`, with its params.
    LogLevel(Box<RawValue>),
    /// `resources/subscribe` to this URI, with its params.
    Subscribe(String, Box<RawValue>),
    /// `resources/unsubscribe` from this URI.
    Unsubscribe(String),
}

#[derive(Debug)]
pub(crate) struct ClientReq {
    pub id: Bytes,
    pub cancelled: bool,
    /// The request is `initialize`; its params are kept for replay if it
    /// succeeds. `initialize` is never cancelled.
    pub initialize: Option<Box<RawValue>>,
    /// A `tools/list` whose answer must pass the configured tool filter.
    pub filter_tools: bool,
    /// What it changes for the session, if the server accepts it.
    pub state: Option<Box<StateChange>>,
    pub progress_token: Option<Bytes>,
    /// A standing request (`subscriptions/listen`, 2026-07-28): it is
    /// answered only when the server ends it, and holds nothing up. It has
    /// no deadline, a reload or the client's leaving does not wait for it,
    /// and once cancelled it is done (a server need not answer it).
    pub standing: bool,
    /// The request as workers see it (mcpvisor's id spliced in), kept until
    /// it ends: one of which no byte reached its generation is sent to the
    /// next.
    pub line: crate::writer::Message,
    /// Its place in its generation's stdin queue (from 1), to tell whether
    /// it got through; 0 while it waits.
    pub seq: u64,
    pub idle_deadline: Instant,
    pub ceiling: Instant,
}

/// One request on the worker side of the session.
#[derive(Debug)]
pub(crate) struct Req {
    pub owner: Owner,
    /// The generation it was sent to; `None` while it waits.
    pub generation: Option<u64>,
    pub timer: Option<delay_queue::Key>,
}

impl Req {
    pub fn client(&self) -> Option<&ClientReq> {
        match &self.owner {
            Owner::Client(c) => Some(c),
            _ => None,
        }
    }

    pub fn client_mut(&mut self) -> Option<&mut ClientReq> {
        match &mut self.owner {
            Owner::Client(c) => Some(c),
            _ => None,
        }
    }
}

/// A server-to-client request the client has not answered yet.
#[derive(Debug)]
pub(crate) struct ServerReq {
    pub generation: u64,
    /// The worker's own id, byte for byte.
    pub worker_id: Bytes,
}

/// What the session's single timer queue can fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A private request's time limit (a list read). Client requests are
    /// swept instead (`Session::on_sweep`).
    Request(u64),
    /// A cancelled request's grace.
    CancelGrace(u64),
    /// A replayed `initialize`.
    Handshake(u64),
    /// A generation's stdout closed or its process ended; the other half has
    /// this long to follow.
    ExitWait(u64),
    /// A draining generation's time is up.
    ReloadDrain(u64),
    /// The pause before an eager restart.
    Restart,
    /// The end of the failed state.
    Cooldown,
    /// The client closed stdin; requests in flight had this long.
    Closing,
}
