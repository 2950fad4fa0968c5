//! The front connections: who they are, what they asked for, and where
//! their messages go.

use std::collections::VecDeque;

use mcpvisor_session::writer::Message;
use rustc_hash::{FxHashMap as HashMap, FxHashSet};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Outcome;
use super::request::Era;
use crate::fronts::{FrontId, Outbound};

/// The open fronts.
///
/// Invariants, which every handler keeps:
/// - a front in `leaving` is still in `open`, and gets nothing more; it is
///   dropped at the end of the turn, once;
/// - `subscribed` counts, for each URI of a shared server, the open fronts
///   whose [`Front::subscriptions`] hold it and the open listens
///   ([`Front::listens`]) that hold it there, and holds no URI at 0;
/// - `stdio_queue.len() + stdio_backlog` stays within
///   [`FRONT_QUEUE`](super::FRONT_QUEUE): a stdio client that leaves it
///   full is dropped;
/// - `ended` is set once, when the primary front is dropped.
#[derive(Debug, Default)]
pub(crate) struct Fronts {
    pub open: HashMap<FrontId, Front>,
    /// Subscribed resource URIs, with how many fronts and listens hold
    /// each: a backend sees one subscribe per URI and one unsubscribe when
    /// the last leaves.
    pub subscribed: HashMap<String, usize>,
    /// The one front whose end ends the hub (stdio), if any.
    pub primary: Option<FrontId>,
    /// How the primary front ended.
    pub ended: Option<Outcome>,
    /// Lines for the stdio client (the primary front, when it is one),
    /// which the loop hands to its pipe's writer at the end of each turn.
    pub stdio_queue: VecDeque<Message>,
    /// How many lines the stdio client's writer has not written yet.
    pub stdio_backlog: usize,
    /// Fronts found gone while a message was queued for them, dropped at
    /// the end of the turn.
    pub leaving: Vec<(FrontId, Outcome)>,
    /// Task ids (as clients see them) handed to a client of the handshake
    /// era, by the front that got them: a `tasks/*` request naming one
    /// from any other front is answered as for an id no server gave, and
    /// after its front ends, from every front (see `tasks.rs`).
    pub task_owners: HashMap<String, FrontId>,
    /// `task_owners`' ids, oldest first: past
    /// [`MAX_BOUND_TASKS`](super::tasks::MAX_BOUND_TASKS), the oldest is
    /// forgotten (no longer bound).
    pub task_order: VecDeque<String>,
}

/// One front connection: what its client declared, where its messages go,
/// what it subscribed to.
#[derive(Debug)]
pub(crate) struct Front {
    pub info: FrontInfo,
    pub out: FrontOut,
    /// The resources it subscribed to with `resources/subscribe`: a shared
    /// server's (counted in `Fronts::subscribed`), or a per-client server's
    /// that the gateway holds for its instance (see `upstream.rs`).
    pub subscriptions: FxHashSet<String>,
    /// Its open `subscriptions/listen` requests (2026-07-28), at most
    /// [`LISTENS_PER_FRONT`](super::listen::LISTENS_PER_FRONT).
    pub listens: Vec<super::listen::Listen>,
    /// Its input ended: requests in flight may still finish, until this.
    pub closing: Option<Instant>,
    /// Its requests in `pending` (counted as they come and go, so that the
    /// in-flight limit is not a walk over every pending request).
    pub awaiting: usize,
    /// The least severe log level it asked for with `logging/setLevel`;
    /// `None` (never asked): every log message the servers send.
    pub log_level: Option<super::front::LogLevel>,
}

/// Where a front's messages go.
#[derive(Debug)]
pub(crate) enum FrontOut {
    /// To its transport's task (an HTTP session).
    Channel(mpsc::Sender<Outbound>),
    /// Written by the hub itself, to the stdio client (`Hub::stdio`).
    Stdio,
}

/// What a front client said about itself in `initialize`.
#[derive(Debug, Default)]
pub(crate) struct FrontInfo {
    pub initialized: bool,
    pub protocol: Option<String>,
    pub sampling: bool,
    pub elicitation: bool,
    /// URL-mode elicitation (2025-11-25).
    pub elicitation_url: bool,
    pub roots: bool,
    /// Its `clientInfo.name`, for the audit trail.
    pub client: Option<String>,
    /// Its protocol era: a front that sends a 2026-07-28 request before
    /// any `initialize` is a 2026-07-28 client (no handshake, and on stdio
    /// no requests to it).
    pub era: Era,
    /// The 2026-07-28 envelope its requests carry to a server of that era,
    /// made from its `initialize` (its capabilities and info).
    pub envelope: Option<std::sync::Arc<str>>,
}
