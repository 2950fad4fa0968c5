//! The calls in flight: every request the gateway holds for someone, each
//! answered exactly once.
//!
//! [`Calls`] owns the tables; the hub's handlers take from them. A request
//! leaves its table when it is answered (or, for one whose asker left, when
//! it is dropped), and the entry taken is what answers it: an entry that is
//! gone cannot be answered twice.

use std::collections::VecDeque;

use bytes::Bytes;
use rustc_hash::FxHashMap as HashMap;
use tokio::time::Instant;

use super::backend::BackendId;
use super::lists;
use super::request::Era;
use crate::fronts::FrontId;

/// The requests in flight through the gateway.
///
/// Invariants, which every handler keeps:
/// - a gateway id (`pending`'s key) is used once, for one request towards
///   one backend; its answer is passed back only while the id is in
///   `pending`, and taking it out is what passes it back or fails it;
/// - `by_front_id` maps (front, the front's id) to the gateway id of that
///   front's request in `pending`, and holds no other key: a front id in
///   flight is refused again until answered;
/// - a front's [`Front::awaiting`](super::Front) counts its
///   [`Pending::Front`] entries;
/// - a server's request to a front is in `server_reqs` until the front
///   answers it, the server withdraws it, or either side leaves (then the
///   other side is told, once);
/// - a fan-out is in `fanouts` until its last backend answered or failed,
///   and then answers its front once;
/// - a parked request is in `parked` until the servers settle or its
///   deadline passes, and is then answered or handled again, once;
/// - a bridged call is in `bridges` until it is answered or its round runs
///   out; while a round is out its entry holds the call's [`Pending`], which
///   is then in `pending` under no key;
/// - `early` holds at most [`MAX_EARLY`](super::backend) servers' requests
///   that came before any front could take them.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    next_id: u64,
    next_server_req: u64,
    next_fanout: u64,
    /// Requests towards backends, by gateway id.
    pub pending: HashMap<u64, Pending>,
    /// A front's request id → gateway id, for cancellation.
    pub by_front_id: HashMap<(FrontId, Bytes), u64>,
    /// Servers' requests to fronts, by the id the front sees.
    pub server_reqs: HashMap<u64, ServerReq>,
    /// Front requests answered once several backends have.
    pub fanouts: HashMap<u64, FanOut>,
    /// Front requests waiting for servers that are starting.
    pub parked: VecDeque<Parked>,
    /// Backends' requests that arrived before any client initialized.
    pub early: Vec<(BackendId, Bytes)>,
    /// 2026-07-28 calls whose servers asked their clients something.
    pub bridges: super::bridge::Bridges,
    /// Requests of clients of the handshake era whose 2026-07-28 server
    /// asked for input, until the client has answered (`inputs.rs`).
    pub asking: HashMap<u64, super::inputs::Asking>,
    /// Their input requests to fronts: the id the front sees → its entry
    /// in `asking`.
    pub asking_reqs: HashMap<u64, u64>,
    /// Where the calls' request lines are written (see [`crate::raw::Room`]).
    pub room: crate::raw::Room,
}

impl Calls {
    /// A fresh gateway id for a request towards a backend.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A fresh id for a server's request, as a front sees it.
    pub fn next_server_req(&mut self) -> u64 {
        self.next_server_req += 1;
        self.next_server_req
    }

    pub fn next_fanout(&mut self) -> u64 {
        self.next_fanout += 1;
        self.next_fanout
    }

    /// A front's parked requests and fan-outs (its requests in `pending`
    /// are counted on the front itself).
    pub fn held_for(&self, front: FrontId) -> usize {
        self.parked.iter().filter(|p| p.front == front).count()
            + self.fanouts.values().filter(|f| f.front == front).count()
    }

    /// Forgets what a front that left was waiting for: its parked requests
    /// and fan-outs need no answer any more.
    pub fn forget_held_for(&mut self, front: FrontId) {
        self.parked.retain(|p| p.front != front);
        self.fanouts.retain(|_, fo| fo.front != front);
    }
}

/// A front request held until the servers that are starting have settled,
/// at most `--list-timeout`.
#[derive(Debug)]
pub(crate) struct Parked {
    pub front: FrontId,
    /// The front's id, as written.
    pub id: Bytes,
    pub deadline: Instant,
    pub held: Held,
}

/// What a parked request is, for its answer.
#[derive(Debug)]
pub(crate) enum Held {
    /// The front's `initialize`: answered with what the servers declared.
    Initialize,
    /// `server/discover` (2026-07-28).
    Discover,
    /// A page of a merged list, in the era the request was made in.
    List {
        kind: lists::Kind,
        cursor: Option<String>,
        era: Era,
    },
    /// A routed request whose target was not known yet: the whole line,
    /// handled again once servers have settled.
    Line(Bytes),
}

/// A request towards a backend, by the gateway-side id it was sent under.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A front client's request.
    Front {
        front: FrontId,
        backend: BackendId,
        /// The front's id, as written.
        id: Bytes,
        /// The front's progress token, as written, if it asked for progress.
        token: Option<Bytes>,
        /// How its answer is passed back.
        wrap: Wrap,
        /// Its answer may hand out or describe a task, whose ids are
        /// namespaced on the way back (`tasks.rs`).
        tasks: bool,
        /// When it was sent on, for its latency.
        at: Instant,
        /// A 2026-07-28 call whose server may ask its client something
        /// through the bridge (`bridge.rs`): what the call declared.
        modern: Option<super::bridge::Caps>,
        /// Its audit record, begun (an audited method with the audit on).
        audit: Option<Box<crate::audit::Call>>,
        /// The 2026-07-28 envelope it carries to a server of that era (a
        /// JSON object of `io.modelcontextprotocol/…` members): a
        /// 2026-07-28 client's own, or one made from a client's
        /// `initialize`.
        envelope: std::sync::Arc<str>,
        /// The request as a 2026-07-28 server got it from a client of the
        /// handshake era: sent again, with the client's answers, when the
        /// server asks for input (see `inputs.rs`).
        sent: Option<Bytes>,
    },
    /// The gateway's own request.
    Private { backend: BackendId, what: Private },
}

/// How a routed answer is passed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrap {
    AsIs,
    /// A 2026-07-28 request to a backend of an earlier era: its result gets
    /// the members that era requires (`resultType`, and for a cacheable
    /// result `ttlMs` and `cacheScope`).
    Modern {
        cacheable: bool,
    },
}

/// The gateway's own requests to a backend.
#[derive(Debug)]
pub(crate) enum Private {
    /// `server/discover`, to find the era of a backend's process: at its
    /// start, or `again` when its session started a new process.
    Discover {
        again: bool,
    },
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
    /// The gateway's `subscriptions/listen` at a 2026-07-28 server (see
    /// `upstream.rs`): answered only when it ends.
    Listen,
    /// A request whose answer nobody waits for (an unsubscribe after the
    /// last client left).
    Quiet,
}

/// A fan-out request: one front request, several backend answers.
#[derive(Debug)]
pub(crate) struct FanOut {
    pub front: FrontId,
    pub id: Bytes,
    pub waiting: usize,
}

/// A backend's request to the front client, by the front-side id.
#[derive(Debug)]
pub(crate) struct ServerReq {
    pub backend: BackendId,
    /// The backend session's id, as written.
    pub id: Bytes,
    /// The front it was sent to.
    pub front: FrontId,
}
