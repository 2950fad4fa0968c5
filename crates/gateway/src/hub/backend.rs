//! One backend: a supervised session per configured server, and what the
//! gateway knows of it.

use std::collections::hash_map::Entry;
use std::ops::Range;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_config::{EraChoice, ServerDef};
use mcpvisor_jsonrpc::{Envelope, Kind, NOT_STARTED, Spans, build, rewrite};
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_runner::{Inlet, Link, ServerSpawner};
use mcpvisor_session::writer::{Digits, Message, Piece};
use mcpvisor_session::{SpawnFailure, Spawner, WorkerIo, WorkerReporter};
use memchr::memmem;
use rustc_hash::FxHashMap as HashMap;
use serde_json::Value;
use tokio::time::Instant;

use super::lists::{Item, KINDS, Kind as ListKind};
use super::observe::Observed;
use super::request::Era;
use super::{Effect, FromSession, Hub, Incoming, Pending, Private, ServerReq, Timer, Wrap};
use crate::fronts::FrontId;
use crate::monitor::EventKind;
use crate::raw::{self, RawObject};

/// A backend's identity for the life of the gateway (names can be reused
/// after a config edit; ids are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(pub(crate) u64);

/// How to run one configured server behind the gateway.
#[derive(Debug, Clone)]
pub struct ServerPlan {
    /// Its name in the config: the prefix of its tools and prompts.
    pub name: String,
    pub def: ServerDef,
    /// `run`'s supervision settings, with the entry's own overrides applied.
    pub session: mcpvisor_session::Config,
    pub stderr: Passthrough,
    /// Start on first use, serving lists from the cache until then.
    pub lazy: bool,
    /// Stop the server after this long without a request.
    pub idle_timeout: Option<Duration>,
    /// Ping it this often while it is idle (`None`: never).
    pub health_interval: Option<Duration>,
    /// This many unanswered pings in a row restart it.
    pub health_misses: u32,
    /// The lists cached from an earlier run, for a lazy server.
    pub cached: Option<crate::hub::lists::Cached>,
    /// Where its lists are cached, when the cache is on.
    pub cache_key: Option<crate::cache::Key>,
    /// `--env KEY=VAL` from the command line, over everything else.
    pub env_overrides: Vec<(String, String)>,
    /// `"sessions": "per-client"`: each front gets a process of its own.
    pub per_client: bool,
}

/// Makes the spawner of a backend's session from its plan, in place of
/// the configured command or URL: each start of a backend asks it once.
/// Tests script their servers in-process with it, on paused time.
#[doc(hidden)]
#[derive(Clone)]
pub struct Spawners(pub Arc<MakeSpawner>);

/// What [`Spawners`] holds.
#[doc(hidden)]
pub type MakeSpawner = dyn Fn(&ServerPlan) -> Box<dyn Spawner> + Send + Sync;

impl std::fmt::Debug for Spawners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spawners(..)")
    }
}

/// A backend session's spawner: as configured, or as [`Spawners`] made it.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per start of a backend and moved into its session"
)]
pub(super) enum BackendSpawner {
    Configured(ServerSpawner),
    Given(Box<dyn Spawner>),
}

impl Spawner for BackendSpawner {
    fn spawn(
        &mut self,
        generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure> {
        match self {
            BackendSpawner::Configured(s) => s.spawn(generation, reporter),
            BackendSpawner::Given(s) => s.spawn(generation, reporter),
        }
    }
}

impl ServerPlan {
    /// The plan a backend's session is started from: all of it but the
    /// cached lists, which stay with the backend.
    pub(crate) fn for_session(&self) -> ServerPlan {
        ServerPlan {
            name: self.name.clone(),
            def: self.def.clone(),
            session: self.session.clone(),
            stderr: self.stderr,
            lazy: self.lazy,
            idle_timeout: self.idle_timeout,
            health_interval: self.health_interval,
            health_misses: self.health_misses,
            cached: None,
            cache_key: self.cache_key,
            env_overrides: self.env_overrides.clone(),
            per_client: self.per_client,
        }
    }
}

/// What a backend is to the fronts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A server every front shares.
    Shared,
    /// A per-client server as configured: it is listed, and never serves a
    /// front itself (see `per_client.rs`).
    Template,
    /// One front's own process of a per-client server.
    Instance {
        /// The one front it serves.
        owner: FrontId,
        /// The configured server it was made from.
        template: BackendId,
    },
    /// The second process of a shared server of both eras, driven in the
    /// handshake era for the fronts of that era (see `per_client.rs`).
    Twin {
        /// The configured server, driven in 2026-07-28.
        primary: BackendId,
    },
}

/// Whether a backend runs. A backend has a session ([`Live`]) exactly when
/// it is live; an off one has none.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per backend, kept in place in the backends' table: boxing the live state would add an indirection to every routed call to save a few hundred bytes per server"
)]
pub(crate) enum Run {
    Off(Off),
    Live(Live),
}

/// Why a backend has no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Off {
    /// Not started: lazy, stopped after being idle, or its session ended.
    /// Its lists come from the cache, and its next call starts it; how its
    /// next generation counts is carried to that start.
    Idle(Start),
    /// Disabled in the config (or removed from it).
    Disabled,
    /// Stopped by a person (the monitor's `stop` action) until `start`.
    Stopped,
}

/// How a backend's next generation counts: a first start (the first
/// ever, a lazy start, a start after an idle stop or a person's stop or
/// start) or a restart (one that replaces a generation that ended in
/// service). See `ServerStatus::restarts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    Fresh,
    Restart,
}

/// A backend with a running session.
///
/// Invariants: it exists exactly while the backend has a session, and
/// everything here is that session's: its link, the gateway's view of it
/// (`phase`), what the session said of its worker (`worker`), its health
/// checks; none of it outlives the session, so a stop leaves nothing stale.
pub(crate) struct Live {
    /// The session's input: the shell runs the session itself.
    pub link: Inlet,
    pub phase: Phase,
    /// When the session was started, for the log's "ready in".
    pub started: Instant,
    /// The gateway's list reads in flight in this session.
    pub reading: usize,
    pub health: Health,
    /// What the session said last of its worker.
    pub worker: Worker,
    /// How the session's next generation counts: [`Start::Fresh`] until
    /// its first generation starts, then [`Start::Restart`].
    pub next: Start,
    /// Added to the session's generation numbers: the backend's generation
    /// when the session started, so numbers go on across sessions.
    pub base: u64,
    /// The stderr tail the session reported of a generation that is
    /// ending, held until that generation's exit arrives to go with its
    /// crash record.
    pub tail: Option<Tail>,
    /// The era its process is driven in.
    pub driven: Driven,
    /// The `server/discover` in flight to find it, if any.
    pub probe: Option<Probe>,
    /// How many of the session's generations became ready: each after the
    /// first is a new process (a restart, a reload), whose era is found
    /// again.
    pub readies: u64,
    /// The gateway's `subscriptions/listen` at it, when it is of
    /// 2026-07-28 (see `upstream.rs`).
    pub upstream: super::upstream::Upstream,
}

/// The protocol era a live backend's process is driven in.
///
/// A stdio server is asked `server/discover` first: a result naming
/// 2026-07-28 among its versions makes it [`Driven::Modern`]; any other
/// answer (an error of any code, a result of another shape) or none within
/// [`PROBE_TIMEOUT`] sends it the gateway's `initialize`, as servers of
/// the handshake era expect. A server of both eras is driven in the
/// newest: its discovery names 2026-07-28, and the SDKs that serve both
/// choose the era per connection (a process that answered a discovery
/// refuses `initialize`), so one process cannot be driven in both. Its
/// entry may choose instead ([`EraChoice`]): `"2025-11-25"` is never
/// probed and always initialized; `"2026-07-28"` is probed, and fails to
/// start when it does not answer as 2026-07-28. A remote server is always sent `initialize`:
/// its session finds its era itself (see `mcpvisor-remote`) and presents it
/// to the gateway in the handshake era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Not known yet: its `server/discover` is in flight.
    Probing,
    /// 2024-11-05 to 2025-11-25: the gateway's `initialize` was sent, and
    /// its session replays it to every later process.
    Handshake,
    /// 2026-07-28: every request carries the `_meta` envelope, its health
    /// check is `server/discover`, and it has no handshake to replay.
    Modern,
}

/// A `server/discover` in flight to find a process's era.
#[derive(Debug)]
pub(crate) struct Probe {
    /// Its gateway id.
    pub gid: u64,
    /// The armed [`Timer::Probe`].
    pub timer: super::TimerKey,
}

/// How long a server may take to answer `server/discover` before it is
/// taken to be of the handshake era. A server of either era answers at
/// once when it runs (a handshake-era one with an error); a process still
/// importing its libraries may take seconds, and a server that ignores
/// unknown methods never answers: ten seconds waits out a slow start
/// without holding a silent one's `initialize` back for long. The same
/// bound as a remote server's discovery.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The stderr tail of one ending generation (the session's own number).
#[derive(Debug)]
pub(crate) struct Tail {
    pub generation: u64,
    pub lines: Vec<String>,
}

/// A live backend's worker, as its session's events told.
///
/// Invariant: a pid or a ready time is only that of a worker that runs
/// (starting or ready); a worker that is down has neither.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) enum Worker {
    /// No generation yet.
    #[default]
    None,
    Starting {
        pid: Option<u32>,
    },
    /// `since_ms`: when it became ready (Unix ms); neither it nor the pid
    /// once its session has failed.
    Ready {
        pid: Option<u32>,
        since_ms: Option<u64>,
    },
    /// It ended on its own: why, in one line, and whether (and when) the
    /// session starts the next one by itself.
    Down {
        detail: String,
        restarting: bool,
        next_try_at_ms: Option<u64>,
    },
    /// A reload was asked for: the worker it replaces, as the session goes
    /// on telling of it. Over when the next generation starts. Never holds
    /// another `Reloading`.
    Reloading(Box<Worker>),
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("phase", &self.phase)
            .field("worker", &self.worker)
            .field("reading", &self.reading)
            .finish_non_exhaustive()
    }
}

// === impl Worker ===

impl Worker {
    /// The worker itself, through a reload in progress.
    pub fn current(&self) -> &Worker {
        match self {
            Worker::Reloading(worker) => worker,
            worker => worker,
        }
    }

    /// Replaces the worker the session tells of, keeping a reload in
    /// progress.
    pub fn set(&mut self, worker: Worker) {
        match self {
            Worker::Reloading(inner) => **inner = worker,
            this => *this = worker,
        }
    }

    /// A reload was asked for (once: a second ask changes nothing).
    pub fn reload(&mut self) {
        if !matches!(self, Worker::Reloading(_)) {
            *self = Worker::Reloading(Box::new(std::mem::take(self)));
        }
    }

    /// Its process is gone: no pid, no ready time.
    pub fn gone(&mut self) {
        match self {
            Worker::Reloading(inner) => inner.gone(),
            Worker::Starting { pid } => *pid = None,
            Worker::Ready { pid, since_ms } => {
                *pid = None;
                *since_ms = None;
            }
            Worker::None | Worker::Down { .. } => {}
        }
    }

    pub fn pid(&self) -> Option<u32> {
        match self.current() {
            Worker::Starting { pid } | Worker::Ready { pid, .. } => *pid,
            _ => None,
        }
    }

    /// When it became ready (Unix ms).
    pub fn since_ms(&self) -> Option<u64> {
        match self.current() {
            Worker::Ready { since_ms, .. } => *since_ms,
            _ => None,
        }
    }

    /// Why it went down, when it is down.
    pub fn down(&self) -> Option<&str> {
        match self.current() {
            Worker::Down { detail, .. } => Some(detail),
            _ => None,
        }
    }

    /// Down, and the session starts the next one by itself.
    pub fn restarting(&self) -> bool {
        matches!(
            self.current(),
            Worker::Down {
                restarting: true,
                ..
            }
        )
    }

    /// When the session tries the next one, if it said.
    pub fn next_try_at_ms(&self) -> Option<u64> {
        match self.current() {
            Worker::Down { next_try_at_ms, .. } => *next_try_at_ms,
            _ => None,
        }
    }
}

/// Where a live backend's session is, as the gateway sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Phase {
    /// Its era is being found (see [`Driven`]), or the gateway's
    /// `initialize` is in flight.
    Starting,
    Ready,
    /// The server printed an authorization link and waits for a person.
    WaitingAuth(AuthWait),
    /// It cannot be started, or it crash-loops: the session's report. Its
    /// session refuses requests until the server answers again.
    Failed(Value),
}

/// What a server waiting for authorization asks of a person.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AuthWait {
    /// The authorization link.
    pub url: String,
    /// Why it needs authorizing (redacted), when its OAuth flow said.
    pub reason: Option<String>,
}

/// A live backend's health checks.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// The gateway id of the ping in flight.
    pub ping: Option<u64>,
    /// Pings unanswered in a row.
    pub misses: u32,
    /// The armed [`Timer::Health`].
    pub timer: Option<super::TimerKey>,
}

/// The backends.
///
/// Invariants: `order` holds the configured backends (shared servers and
/// per-client templates), each once, in config order, and each is in
/// `by_id`; a per-client instance is in `by_id` and in `instances` under
/// (its template, its owner), and never in `order`; an id is never used
/// again, so a late report of a removed backend finds nothing.
#[derive(Debug, Default)]
pub(crate) struct Backends {
    pub by_id: HashMap<BackendId, Backend>,
    /// Config order: the first server offering a URI wins.
    pub order: Vec<BackendId>,
    /// Per-client servers' instances, by (configured server, front).
    pub instances: HashMap<(BackendId, FrontId), BackendId>,
    /// The twins of shared servers of both eras, by configured server.
    pub twins: HashMap<BackendId, BackendId>,
    next: u64,
}

impl Backends {
    /// A fresh id.
    pub fn next_id(&mut self) -> BackendId {
        self.next += 1;
        BackendId(self.next)
    }
}

pub(crate) struct Backend {
    pub plan: ServerPlan,
    pub role: Role,
    pub run: Run,
    /// Its `initialize` result (from the cache until it has answered one).
    pub init: Option<Value>,
    /// Its lists, by [`ListKind`] index; `None` where not (yet) read.
    pub lists: [Option<Vec<Item>>; 4],
    /// Requests waiting for it to be ready, already addressed to it.
    pub queue: Vec<(u64, Bytes)>,
    /// Front requests it holds.
    pub in_flight: usize,
    pub last_used: Instant,
    /// Bumped at each start, to fence late list pages of an older one.
    pub epoch: u64,
    /// What the monitor shows of it.
    pub obs: Observed,
    /// Its definitions held back from the merged lists (see `pinning`),
    /// as of the last merge of each list.
    pub held: Vec<super::pinning::HeldDef>,
    /// Driven in 2026-07-28 and not known to be of that era alone: the
    /// fronts of the handshake era are served by its twin.
    pub both_eras: bool,
    /// A twin of it could not be initialized: it is of 2026-07-28 alone,
    /// and no twin is tried again for this definition.
    pub one_era: bool,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.plan.name)
            .field("role", &self.role)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

/// The capabilities the gateway declares to every backend: it can route
/// all of them to a front client that has them, and declines clearly when
/// the front client has not.
const BACKEND_CAPABILITIES: &str =
    r#"{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}}}"#;
/// The protocol the gateway speaks to its backends of the handshake era.
const BACKEND_PROTOCOL: &str = "2025-11-25";
/// The gateway's `clientInfo`.
const CLIENT_INFO: &str = concat!(
    r#"{"name":"mcpvisor","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""}"#
);

/// The gateway's own 2026-07-28 envelope, on its own requests (discovery,
/// lists, health checks) to a server of that era: its capabilities and
/// info, as its `initialize` declares them to the others.
pub(crate) static GATEWAY_ENVELOPE: std::sync::LazyLock<std::sync::Arc<str>> =
    std::sync::LazyLock::new(|| {
        use mcpvisor_jsonrpc::era;
        format!(
            r#"{{"{}":"{}","{}":{BACKEND_CAPABILITIES},"{}":{CLIENT_INFO}}}"#,
            era::META_VERSION,
            era::MODERN,
            era::META_CAPABILITIES,
            era::META_CLIENT_INFO,
        )
        .into()
    });

impl Backend {
    pub fn new(plan: ServerPlan) -> Self {
        let off = if plan.def.disabled {
            Off::Disabled
        } else {
            Off::Idle(Start::Fresh)
        };
        let role = if plan.per_client {
            Role::Template
        } else {
            Role::Shared
        };
        let mut lists: [Option<Vec<Item>>; 4] = Default::default();
        let mut init = None;
        if let Some(cached) = &plan.cached {
            lists = cached.lists.clone();
            init = cached.init.clone();
        }
        Self {
            plan,
            role,
            run: Run::Off(off),
            init,
            lists,
            queue: Vec::new(),
            in_flight: 0,
            last_used: Instant::now(),
            epoch: 0,
            obs: Observed::default(),
            held: Vec::new(),
            both_eras: false,
            one_era: false,
        }
    }

    /// Its session, when it is live.
    pub fn live(&self) -> Option<&Live> {
        match &self.run {
            Run::Live(live) => Some(live),
            Run::Off(_) => None,
        }
    }

    pub fn live_mut(&mut self) -> Option<&mut Live> {
        match &mut self.run {
            Run::Live(live) => Some(live),
            Run::Off(_) => None,
        }
    }

    /// Its session's input, when it is live.
    pub fn link(&self) -> Option<&Inlet> {
        self.live().map(|l| &l.link)
    }

    /// Its session's phase, when it is live.
    pub fn phase(&self) -> Option<&Phase> {
        self.live().map(|l| &l.phase)
    }

    /// The gateway's list reads in flight (none when it is off).
    pub fn reading(&self) -> usize {
        self.live().map_or(0, |l| l.reading)
    }

    /// Live and ready.
    pub fn is_ready(&self) -> bool {
        self.phase() == Some(&Phase::Ready)
    }

    /// Live, and failing.
    pub fn is_failed(&self) -> bool {
        matches!(self.phase(), Some(Phase::Failed(_)))
    }

    /// How its next generation counts if it is stopped to rest now: as
    /// its session's next would (an off one's as it was).
    pub fn next_start(&self) -> Start {
        match &self.run {
            Run::Live(live) => live.next,
            Run::Off(Off::Idle(start)) => *start,
            Run::Off(Off::Disabled | Off::Stopped) => Start::Fresh,
        }
    }

    /// The one front a per-client instance serves.
    pub fn owner(&self) -> Option<FrontId> {
        match self.role {
            Role::Instance { owner, .. } => Some(owner),
            Role::Shared | Role::Template | Role::Twin { .. } => None,
        }
    }

    /// The backend whose row counts its calls: its template for a
    /// per-client instance, its configured server for a twin, else itself.
    pub fn counted_as(&self, id: BackendId) -> BackendId {
        match self.role {
            Role::Instance { template, .. } => template,
            Role::Twin { primary } => primary,
            Role::Shared | Role::Template => id,
        }
    }

    pub fn name(&self) -> &str {
        &self.plan.name
    }

    /// Whether its lists count in the merged lists. A stopped server's
    /// stay, as an idle one's do: its calls get a refusal that says why.
    pub fn serves_lists(&self) -> bool {
        !matches!(self.run, Run::Off(Off::Disabled)) && !self.is_failed()
    }

    /// Whether a front request should wait for it (bounded).
    pub fn settling(&self) -> bool {
        self.live()
            .is_some_and(|l| l.phase == Phase::Starting || l.reading > 0)
    }

    /// Why a request for it is refused before it is sent, with the
    /// refusal's `error.data`: it is failing (its crash report), waits for
    /// authorization (the link), is disabled or was stopped by a person.
    /// `None` when it takes requests (at once, or once it has started).
    pub fn refusal(&self) -> Option<(String, Value)> {
        match &self.run {
            Run::Live(Live {
                phase: Phase::Failed(data),
                ..
            }) => Some((
                format!(
                    "Request not started: the server `{}` is failing ({}{}). It is safe to retry once it recovers.",
                    self.plan.name,
                    data.get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("it keeps exiting"),
                    mcpvisor_config::ErrorData::last_words(data),
                ),
                data.clone(),
            )),
            Run::Live(Live {
                phase: Phase::WaitingAuth(AuthWait { url, reason }),
                ..
            }) => Some((
                format!(
                    "Request not started: the server `{}` waits for you to authorize it{}. Open this link, then retry: {url}",
                    self.plan.name,
                    reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default(),
                ),
                serde_json::json!({"reason": "waiting for authorization", "server": self.plan.name, "authorization_url": url, "auth_reason": reason}),
            )),
            Run::Off(Off::Disabled) => Some((
                format!(
                    "Request not started: the server `{}` is disabled.",
                    self.plan.name
                ),
                serde_json::json!({"reason": "disabled", "server": self.plan.name}),
            )),
            Run::Off(Off::Stopped) => Some((
                format!(
                    "Request not started: the server `{}` was stopped by a person, and stays stopped until someone starts it again. It is safe to retry then.",
                    self.plan.name
                ),
                serde_json::json!({"reason": "stopped by a person", "server": self.plan.name}),
            )),
            Run::Off(Off::Idle(_))
            | Run::Live(Live {
                phase: Phase::Starting | Phase::Ready,
                ..
            }) => None,
        }
    }

    /// Live, and driven in the 2026-07-28 era.
    pub fn is_modern(&self) -> bool {
        self.live().is_some_and(|l| l.driven == Driven::Modern)
    }

    /// Whether it is ready and driven in the handshake era: a request
    /// routed to it now goes to its server as it is.
    pub fn is_ready_in_handshake(&self) -> bool {
        self.live()
            .is_some_and(|l| l.driven == Driven::Handshake && l.phase == Phase::Ready)
    }

    fn declares(&self, capability: &str) -> bool {
        self.init
            .as_ref()
            .and_then(|i| i.get("capabilities"))
            .and_then(|c| c.get(capability))
            .is_some_and(|c| !c.is_null())
    }
}

impl Hub {
    // === lifecycle ===

    pub(crate) fn add_backend(&mut self, plan: ServerPlan) -> BackendId {
        self.add_backend_with(plan, Observed::default(), Start::Fresh)
    }

    /// Adds a backend that goes on with what `obs` has seen, its first
    /// generation counted as `start` says.
    fn add_backend_with(&mut self, plan: ServerPlan, obs: Observed, start: Start) -> BackendId {
        let id = self.backends.next_id();
        let mut backend = Backend::new(plan);
        backend.obs = obs;
        if let Run::Off(Off::Idle(first)) = &mut backend.run {
            *first = start;
        }
        let eager = !backend.plan.lazy && matches!(backend.run, Run::Off(Off::Idle(_)));
        let needs_fill = backend.plan.lazy && backend.plan.cached.is_none();
        self.backends.by_id.insert(id, backend);
        self.backends.order.push(id);
        if eager || needs_fill {
            if needs_fill {
                tracing::info!(server = %self.backends.by_id[&id].name(), "no cached lists yet: starting it once to read them");
            }
            self.start_backend(id);
        }
        id
    }

    /// Starts a backend's session (the shell runs it: [`Effect::Start`])
    /// and finds its era: `server/discover` first for a stdio server, the
    /// gateway's `initialize` for a remote one (see [`Driven`]).
    pub(crate) fn start_backend(&mut self, id: BackendId) {
        let for_handshake_client = self.instance_for_handshake_client(id);
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        // Only an idle backend starts: a live one runs already, and a
        // disabled or stopped one waits for its config or a person.
        let Run::Off(Off::Idle(next)) = b.run else {
            return;
        };
        b.epoch += 1;
        let (link, session) = Link::prepare(b.plan.session.clone());
        self.effects
            .list
            .push(Effect::Start(Box::new(super::StartSession {
                backend: id,
                epoch: b.epoch,
                plan: b.plan.for_session(),
                session,
            })));
        b.run = Run::Live(Live {
            link,
            phase: Phase::Starting,
            started: Instant::now(),
            reading: 0,
            health: Health::default(),
            worker: Worker::None,
            next,
            base: b.obs.generation.unwrap_or(0),
            tail: None,
            driven: Driven::Probing,
            probe: None,
            readies: 0,
            upstream: super::upstream::Upstream::Closed,
        });
        tracing::info!(server = %b.plan.name, "starting");
        // An entry may keep a server of both eras in the handshake era,
        // for what it does only there (its own requests to the client); a
        // twin is that process for the clients of that era, and so is a
        // per-client process of such a client.
        let handshake = matches!(b.role, Role::Twin { .. })
            || for_handshake_client
            || b.plan.def.is_remote()
            || b.plan.def.era == EraChoice::Handshake;
        if handshake {
            self.send_initialize(id);
        } else {
            self.send_probe(id, false);
        }
    }

    /// Sends a live backend the gateway's `initialize`: from now on it is
    /// driven in the handshake era.
    fn send_initialize(&mut self, id: BackendId) {
        if let Some(b) = self.backends.by_id.get_mut(&id) {
            // Driven in the handshake era, it serves the clients of both.
            b.both_eras = false;
            if let Some(live) = b.live_mut() {
                live.driven = Driven::Handshake;
            }
        }
        self.drop_twin(id, "its server is driven in the handshake era");
        let params = format!(
            r#"{{"protocolVersion":"{BACKEND_PROTOCOL}","capabilities":{BACKEND_CAPABILITIES},"clientInfo":{CLIENT_INFO}}}"#,
        );
        self.send_private(id, Private::Initialize, "initialize", Some(&params));
    }

    /// Asks a live backend `server/discover`, bounded by [`PROBE_TIMEOUT`]:
    /// at its start, or `again` for a new process of a 2026-07-28 one.
    fn send_probe(&mut self, id: BackendId, again: bool) {
        let gid = self.send_private(id, Private::Discover { again }, "server/discover", None);
        let Some(gid) = gid else {
            // Its session's queue is full (it cannot be, at a start): the
            // handshake era is the one that needs nothing more.
            if !again {
                self.send_initialize(id);
            }
            return;
        };
        let timer = self
            .effects
            .arm(Timer::Probe(id, gid), Instant::now() + PROBE_TIMEOUT);
        if let Some(live) = self.backends.by_id.get_mut(&id).and_then(Backend::live_mut) {
            live.probe = Some(Probe { gid, timer });
        }
    }

    /// A probe's bound ran out: its answer, if it ever comes, is dropped,
    /// and the server is taken to be of the handshake era (a new process
    /// of a 2026-07-28 one is started afresh).
    pub(crate) fn on_probe_timeout(&mut self, id: BackendId, gid: u64) {
        let Some(live) = self.backends.by_id.get_mut(&id).and_then(Backend::live_mut) else {
            return;
        };
        if live.probe.as_ref().is_none_or(|p| p.gid != gid) {
            return;
        }
        live.probe = None;
        let again = match self.take_pending(gid) {
            Some(Pending::Private {
                what: Private::Discover { again },
                ..
            }) => again,
            _ => false,
        };
        self.cancel_on_backend(id, gid, "server/discover went unanswered");
        let name = self.backend_name(id);
        if again {
            self.restart_backend(
                id,
                "its new process did not answer server/discover within 10 s",
            );
        } else if self.era_choice(id) == EraChoice::Modern {
            self.not_modern(id, "it did not answer server/discover within 10 s");
        } else {
            tracing::info!(server = %name, "no answer to server/discover within {PROBE_TIMEOUT:?}: sending initialize");
            self.send_initialize(id);
        }
    }

    /// The answer to a probe: a 2026-07-28 server is ready as it is;
    /// anything else gets `initialize` (a new process that no longer
    /// speaks 2026-07-28 is started afresh).
    fn on_discovered(&mut self, id: BackendId, again: bool, answer: &Value) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let name = b.plan.name.clone();
        let choice = b.plan.def.era;
        let Run::Live(live) = &mut b.run else {
            return;
        };
        if let Some(probe) = live.probe.take() {
            self.effects.list.push(Effect::Disarm(probe.timer));
        }
        let init = answer
            .get("result")
            .and_then(|r| mcpvisor_jsonrpc::era::discovered(r, mcpvisor_jsonrpc::era::MODERN));
        // A server of 2026-07-28 may serve the handshake era too, in
        // another process: its clients of that era get a twin (see
        // `per_client.rs`), unless a twin's `initialize` was refused. Its
        // discovery does not tell: the SDKs of both eras list only the
        // versions of 2026-07-28 there. An entry that chose its era keeps
        // it for every client.
        let both = init.is_some() && choice == EraChoice::Auto && !b.one_era;
        b.both_eras = both;
        if !both {
            self.drop_twin(id, "its server no longer speaks 2026-07-28");
        }
        match (init, again) {
            (None, false) if choice == EraChoice::Modern => {
                let why = match answer.get("error").and_then(|e| e.get("code")) {
                    Some(code) => format!("it answered server/discover with error {code}"),
                    None => "its server/discover result does not offer 2026-07-28".to_owned(),
                };
                self.not_modern(id, &why);
            }
            (Some(init), false) => self.ready_modern(id, init),
            (Some(init), true) => {
                if let Some(b) = self.backends.by_id.get_mut(&id) {
                    b.init = Some(init);
                }
                self.read_lists(id);
                self.listen_upstream(id);
            }
            (None, false) => {
                tracing::debug!(server = %name, "not a 2026-07-28 server: sending initialize");
                self.send_initialize(id);
            }
            (None, true) => {
                self.restart_backend(id, "its new process does not speak 2026-07-28");
            }
        }
    }

    /// A backend found to be of 2026-07-28 alone is ready, its discovery
    /// standing for its `initialize` result.
    fn ready_modern(&mut self, id: BackendId, init: Value) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let Run::Live(live) = &mut b.run else {
            return;
        };
        b.init = Some(init);
        live.driven = Driven::Modern;
        live.phase = Phase::Ready;
        let took = live.started.elapsed().as_millis();
        tracing::info!(server = %b.plan.name, "ready in {took} ms (2026-07-28)");
        self.flush_queue(id);
        self.read_lists(id);
        self.listen_upstream(id);
        self.arm_health(id);
        self.arm_idle(id);
    }

    /// Stops a backend's session (bounded, in the background) and fails
    /// whatever it held, once.
    pub(crate) fn stop_backend(&mut self, id: BackendId, why: &str, next: Off) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        if let Run::Live(live) = std::mem::replace(&mut b.run, Run::Off(next)) {
            if let Some(key) = live.health.timer {
                self.effects.list.push(Effect::Disarm(key));
            }
            if let Some(probe) = live.probe {
                self.effects.list.push(Effect::Disarm(probe.timer));
            }
            self.effects.list.push(Effect::Stop {
                backend: id,
                epoch: b.epoch,
                inlet: live.link,
            });
        }
        self.fail_backend_requests(id, why);
    }

    /// Restarts a backend at once (a failed health check, a changed
    /// definition, a reload asked for by hand).
    pub(crate) fn restart_backend(&mut self, id: BackendId, why: &str) {
        tracing::warn!(server = %self.backend_name(id), "restarting: {why}");
        self.record(id, EventKind::Restarting, format!("restarting: {why}"));
        let next = self.resting(id);
        self.stop_backend(id, why, next);
        self.start_backend(id);
    }

    /// Reloads every running process of that server (a per-client
    /// server's too): each session replaces its worker once it holds
    /// nothing. `why` is for its events; returns how many.
    pub(crate) fn reload_backend(&mut self, name: &str, cause: &crate::hub::ReloadCause) -> usize {
        let running: Vec<BackendId> = self
            .backends
            .by_id
            .iter()
            .filter(|(_, b)| b.plan.name == name && b.live().is_some())
            .map(|(id, _)| *id)
            .collect();
        if !running.is_empty() {
            tracing::info!(server = name, "reloading: {}", cause.describe());
        }
        for id in &running {
            if let Some(link) = self.backends.by_id.get(id).and_then(Backend::link) {
                link.control(mcpvisor_session::Control::Reload(cause.label()));
            }
            self.observe_reload(*id, cause.describe());
        }
        running.len()
    }

    /// The state a backend rests in when its session is stopped to be
    /// started again later: idle, its next generation counted as its
    /// session's next would have been.
    pub(crate) fn resting(&self, id: BackendId) -> Off {
        Off::Idle(
            self.backends
                .by_id
                .get(&id)
                .map_or(Start::Fresh, Backend::next_start),
        )
    }

    /// Where a backend's calls are counted: its own row, or for a
    /// per-client instance its configured server's.
    fn counted(&mut self, id: BackendId) -> Option<&mut Observed> {
        let at = self.backends.by_id.get(&id)?.counted_as(id);
        let b = self.backends.by_id.get_mut(&at)?;
        b.obs.dirty = true;
        Some(&mut b.obs)
    }

    fn count_call(&mut self, id: BackendId) {
        if let Some(obs) = self.counted(id) {
            obs.stats.calls += 1;
        }
    }

    /// Counts an error answered for a backend (by itself, its session or
    /// the gateway).
    pub(crate) fn count_error(&mut self, id: BackendId, code: i64) {
        if let Some(obs) = self.counted(id) {
            obs.stats.error(code);
        }
    }

    /// The era its entry asks for (`"era"`).
    fn era_choice(&self, id: BackendId) -> EraChoice {
        self.backends
            .by_id
            .get(&id)
            .map_or(EraChoice::Auto, |b| b.plan.def.era)
    }

    pub(crate) fn backend_name(&self, id: BackendId) -> String {
        self.backends
            .by_id
            .get(&id)
            .map(|b| b.plan.name.clone())
            .unwrap_or_default()
    }

    /// Applies a new configuration: new servers start, removed ones stop,
    /// changed ones restart, the rest are left alone.
    pub(crate) fn reconfigure(&mut self, plans: Vec<crate::hub::ServerPlan>) {
        let mut keep = Vec::new();
        let mut added = 0;
        let mut changed = 0;
        for plan in plans {
            let existing = self
                .backends
                .order
                .iter()
                .copied()
                .find(|id| self.backends.by_id[id].plan.name == plan.name);
            match existing {
                Some(id) if self.backends.by_id[&id].plan.def == plan.def => keep.push(id),
                Some(id) => {
                    changed += 1;
                    let was_disabled = self.backends.by_id[&id].plan.def.disabled;
                    let (kind, why) = match (was_disabled, plan.def.disabled) {
                        (false, true) => (EventKind::Disabled, "disabled in its config entry"),
                        (true, false) => (EventKind::Enabled, "enabled in its config entry"),
                        _ => (
                            EventKind::Restarting,
                            "restarting: its config entry changed",
                        ),
                    };
                    self.record(id, kind, why);
                    self.drop_instances_from(id, "its configuration changed");
                    self.stop_backend(id, "its configuration changed", Off::Idle(Start::Restart));
                    let old = self.backends.by_id.remove(&id).map(|b| {
                        let mut b = b;
                        std::mem::take(&mut b.obs)
                    });
                    self.backends.order.retain(|o| *o != id);
                    let obs = old.map_or_else(Observed::default, Observed::carry_over);
                    // Enabling starts it afresh; any other change replaces it.
                    let start = if kind == EventKind::Enabled {
                        Start::Fresh
                    } else {
                        Start::Restart
                    };
                    keep.push(self.add_backend_with(plan, obs, start));
                }
                None => {
                    added += 1;
                    let from = plan
                        .def
                        .source
                        .as_ref()
                        .map(|p| format!(" from {}", p.display()))
                        .unwrap_or_default();
                    let new = self.add_backend(plan);
                    self.record(new, EventKind::Added, format!("added{from}"));
                    keep.push(new);
                }
            }
        }
        let removed: Vec<BackendId> = self
            .backends
            .order
            .iter()
            .copied()
            .filter(|id| !keep.contains(id))
            .collect();
        for id in &removed {
            self.record(*id, EventKind::Removed, "removed from the configuration");
            self.drop_instances_from(*id, "it was removed from the configuration");
            self.stop_backend(*id, "it was removed from the configuration", Off::Disabled);
            if let Some(b) = self.backends.by_id.remove(id) {
                self.publish_removed(&b.plan.name);
            }
        }
        self.backends.order = keep;
        tracing::info!(
            added,
            changed,
            removed = removed.len(),
            "configuration reloaded"
        );
        self.remerge_all();
    }

    // === sending ===

    /// Sends the gateway's own request to a backend.
    pub(crate) fn send_private(
        &mut self,
        id: BackendId,
        what: Private,
        method: &str,
        params: Option<&str>,
    ) -> Option<u64> {
        let gid = self.calls.next_id();
        let b = self.backends.by_id.get_mut(&id)?;
        let Run::Live(live) = &mut b.run else {
            return None;
        };
        // A 2026-07-28 server (or one whose era is being found) reads the
        // gateway's own envelope on each of its requests.
        let modern = live.driven == Driven::Modern || matches!(what, Private::Discover { .. });
        let line = match params {
            Some(params) if modern => raw::request(
                gid,
                method,
                Some(&raw::with_envelope(params, &GATEWAY_ENVELOPE)),
            ),
            None if modern => {
                let params = format!("{{\"_meta\":{}}}", &*GATEWAY_ENVELOPE);
                raw::request(gid, method, Some(&params))
            }
            params => raw::request(gid, method, params),
        };
        if !live.link.try_send(line) {
            tracing::debug!(server = %b.plan.name, "backend queue full; private request dropped");
            return None;
        }
        if matches!(what, Private::List { .. }) {
            live.reading += 1;
        }
        self.calls
            .pending
            .insert(gid, Pending::Private { backend: id, what });
        Some(gid)
    }

    /// Routes a front request, already addressed to the backend under
    /// gateway id `gid`, starting the backend or queueing as its state says.
    /// `spans` (where the line's envelope lies) go with it to a ready
    /// backend's session, which then does not scan it again.
    pub(crate) fn route(
        &mut self,
        front: FrontId,
        id: BackendId,
        gid: u64,
        line: Bytes,
        spans: Option<Spans>,
        front_id: Bytes,
    ) {
        self.count_call(id);
        let now = self.now();
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        b.last_used = now;
        let refusal = b.refusal();
        if let Some((message, data)) = refusal {
            self.count_error(id, NOT_STARTED);
            let (audit, at) = match self.calls.pending.get_mut(&gid) {
                Some(Pending::Front { audit, at, .. }) => (audit.take(), *at),
                _ => (None, Instant::now()),
            };
            self.forget_front(gid);
            let text = String::from_utf8_lossy(&front_id).into_owned();
            let refusal = build::error(&text, NOT_STARTED, &message, Some(&data));
            self.audit_answer(audit, at, &refusal);
            self.emit_to(front, refusal, Some(front_id));
            return;
        }
        b.in_flight += 1;
        match &b.run {
            Run::Live(Live {
                phase: Phase::Ready,
                link,
                driven,
                ..
            }) => {
                let sent = match (for_era(&mut self.calls, gid, &line, *driven), spans) {
                    (Some(line), _) => link.try_send(line),
                    (None, Some(spans)) => link.try_send_peeked(line, spans),
                    (None, None) => link.try_send(line),
                };
                if !sent {
                    self.answer_not_started(gid, "the server's queue is full");
                }
            }
            Run::Live(Live {
                phase: Phase::Starting,
                ..
            }) => b.queue.push((gid, line)),
            Run::Off(Off::Idle(_)) => {
                b.queue.push((gid, line));
                self.start_backend(id);
            }
            // Refused above.
            Run::Off(Off::Disabled | Off::Stopped)
            | Run::Live(Live {
                phase: Phase::WaitingAuth(_) | Phase::Failed(_),
                ..
            }) => {}
        }
    }

    /// Routes a request that waited for another backend, where it was
    /// counted already (see `Hub::queued_to_twin`): sent when the backend
    /// is ready, queued while it starts, refused as it says when it
    /// refuses.
    pub(crate) fn route_moved(&mut self, id: BackendId, gid: u64, line: Bytes) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return self.answer_not_started(gid, "its server was removed");
        };
        b.last_used = Instant::now();
        b.in_flight += 1;
        b.queue.push((gid, line));
        match &b.run {
            Run::Live(Live {
                phase: Phase::Ready,
                ..
            }) => self.flush_queue(id),
            Run::Live(Live {
                phase: Phase::Starting,
                ..
            }) => {}
            Run::Off(Off::Idle(_)) => self.start_backend(id),
            Run::Off(Off::Disabled | Off::Stopped)
            | Run::Live(Live {
                phase: Phase::WaitingAuth(_) | Phase::Failed(_),
                ..
            }) => {
                b.queue.retain(|(g, _)| *g != gid);
                self.refuse_queued(id, gid);
            }
        }
    }

    /// Answers a front request held for a backend with `result`, the
    /// gateway's own.
    pub(crate) fn answer_held(&mut self, gid: u64, result: &str) {
        if let Some(Pending::Front {
            front,
            id,
            at,
            audit,
            ..
        }) = self.take_pending(gid)
        {
            let text = String::from_utf8_lossy(&id).into_owned();
            let answer = build::result(&text, result);
            self.audit_answer(audit, at, &answer);
            self.emit_to(front, answer, Some(id));
        }
    }

    /// Answers a front request that never reached its server.
    pub(crate) fn answer_not_started(&mut self, gid: u64, reason: &str) {
        if let Some(Pending::Front {
            front,
            id,
            backend,
            at,
            audit,
            ..
        }) = self.take_pending(gid)
        {
            self.count_error(backend, NOT_STARTED);
            let message = format!("Request not started: {reason}. It is safe to retry.");
            let data = serde_json::json!({"reason": reason, "server": self.backend_name(backend)});
            let text = String::from_utf8_lossy(&id).into_owned();
            let refusal = build::error(&text, NOT_STARTED, &message, Some(&data));
            self.audit_answer(audit, at, &refusal);
            self.emit_to(front, refusal, Some(id));
        }
    }

    /// Fails every front request a stopped backend held or queued, once.
    fn fail_backend_requests(&mut self, id: BackendId, why: &str) {
        let queued: Vec<u64> = self
            .backends
            .by_id
            .get_mut(&id)
            .map(|b| b.queue.drain(..).map(|(gid, _)| gid).collect())
            .unwrap_or_default();
        for gid in queued {
            self.answer_not_started(gid, why);
        }
        let held: Vec<u64> = self
            .calls
            .pending
            .iter()
            .filter(|(_, p)| match p {
                Pending::Front { backend, .. } | Pending::Private { backend, .. } => *backend == id,
            })
            .map(|(gid, _)| *gid)
            .collect();
        for gid in held {
            match self.take_pending(gid) {
                Some(Pending::Front {
                    front,
                    id: front_id,
                    at,
                    audit,
                    ..
                }) => {
                    self.count_error(id, mcpvisor_jsonrpc::WORKER_LOST);
                    let message = format!(
                        "The MCP server `{}` stopped before answering ({why}). The request may or may not have taken effect: inspect state before retrying a mutation.",
                        self.backend_name(id)
                    );
                    let data = serde_json::json!({"reason": why, "server": self.backend_name(id)});
                    let text = String::from_utf8_lossy(&front_id).into_owned();
                    let lost =
                        build::error(&text, mcpvisor_jsonrpc::WORKER_LOST, &message, Some(&data));
                    self.audit_answer(audit, at, &lost);
                    self.emit_to(front, lost, Some(front_id));
                }
                Some(Pending::Private {
                    what: Private::SetLevel(f),
                    ..
                }) => self.fanout_done(f),
                _ => {}
            }
        }
        // Its requests to the front are moot now.
        let asked: Vec<u64> = self
            .calls
            .server_reqs
            .iter()
            .filter(|(_, r)| r.backend == id)
            .map(|(k, _)| *k)
            .collect();
        for fid in asked {
            if let Some(req) = self.calls.server_reqs.remove(&fid) {
                let fid = format!("\"mcpvisor-{fid}\"");
                let note = build::cancelled(&fid, "the server stopped");
                self.emit_to(req.front, note, None);
            }
        }
    }

    /// Removes a pending request and its indexes.
    pub(crate) fn take_pending(&mut self, gid: u64) -> Option<Pending> {
        let p = self.calls.pending.remove(&gid)?;
        let now = self.now();
        // A bridged call that is answered or dropped ends its bridge.
        self.calls.bridges.calls.remove(&gid);
        match &p {
            Pending::Front {
                front, id, backend, ..
            } => {
                // Unless the client has used its id again since.
                if let Entry::Occupied(known) = self.calls.by_front_id.entry((*front, id.clone())) {
                    if *known.get() == gid {
                        known.remove();
                    }
                }
                if let Some(f) = self.fronts.open.get_mut(front) {
                    f.awaiting = f.awaiting.saturating_sub(1);
                }
                if let Some(b) = self.backends.by_id.get_mut(backend) {
                    b.in_flight = b.in_flight.saturating_sub(1);
                    b.last_used = now;
                    b.obs.dirty = true;
                }
            }
            Pending::Private { backend, what } => {
                if matches!(what, Private::List { .. }) {
                    let live = self
                        .backends
                        .by_id
                        .get_mut(backend)
                        .and_then(Backend::live_mut);
                    if let Some(live) = live {
                        live.reading = live.reading.saturating_sub(1);
                    }
                }
            }
        }
        Some(p)
    }

    fn forget_front(&mut self, gid: u64) {
        if let Some(Pending::Front { front, id, .. }) = self.calls.pending.remove(&gid) {
            if let Some(f) = self.fronts.open.get_mut(&front) {
                f.awaiting = f.awaiting.saturating_sub(1);
            }
            self.calls.by_front_id.remove(&(front, id));
        }
    }

    /// Tells a backend's session that the request it knows as `gid` is
    /// cancelled. A request still queued for a backend that is starting
    /// was never sent: it leaves the queue, and nothing is sent at all.
    pub(crate) fn cancel_on_backend(&mut self, backend: BackendId, gid: u64, reason: &str) {
        let Some(b) = self.backends.by_id.get_mut(&backend) else {
            return;
        };
        let queued = b.queue.len();
        b.queue.retain(|(g, _)| *g != gid);
        if b.queue.len() != queued {
            return;
        }
        if let Some(link) = b.link() {
            link.try_send(build::cancelled(&gid.to_string(), reason));
        }
    }

    // === what backends say ===

    pub(crate) fn on_backend(&mut self, id: BackendId, incoming: Incoming) {
        let msg = match incoming {
            Incoming::Session(epoch, msg) => {
                // A session stopped earlier may still report: fence it off.
                if self
                    .backends
                    .by_id
                    .get(&id)
                    .is_none_or(|b| b.epoch != epoch)
                {
                    return;
                }
                msg
            }
        };
        match msg {
            FromSession::Line(line, spans) => self.on_backend_line(id, line, spans),
            FromSession::Status(event) => self.on_status(id, *event),
            FromSession::Closed => {
                let live = self
                    .backends
                    .by_id
                    .get(&id)
                    .is_some_and(|b| b.live().is_some());
                if live {
                    tracing::warn!(server = %self.backend_name(id), "its session ended");
                    self.record(id, EventKind::Exited, "its session ended");
                    let next = self.resting(id);
                    self.stop_backend(id, "its session ended", next);
                    self.remerge_all();
                }
            }
        }
    }

    /// What the backend's session says of its worker.
    fn on_status(&mut self, id: BackendId, event: mcpvisor_session::SessionEvent) {
        use mcpvisor_session::SessionEvent as E;
        if self
            .backends
            .by_id
            .get(&id)
            .is_none_or(|b| b.live().is_none())
        {
            return;
        }
        // A process tried in the handshake era for that era's clients whose
        // first process could not be initialized: a server of 2026-07-28
        // alone, whose session gave up on the handshake.
        let untried = self.tried_for_handshake_clients(id)
            && self
                .backends
                .by_id
                .get(&id)
                .is_some_and(|b| b.init.is_none());
        if untried && matches!(event, E::Failed { .. }) {
            self.observe_session(id, &event);
            return self.refused_for_handshake_clients(id, "it could not be initialized");
        }
        self.observe_session(id, &event);
        if matches!(event, E::Ready { .. }) {
            // Each ready generation after the first is a new process: a
            // 2026-07-28 one is asked its era again (it has no handshake
            // for its session to replay; a handshake-era one gets the
            // gateway's `initialize` replayed by its session).
            let again = self
                .backends
                .by_id
                .get_mut(&id)
                .and_then(Backend::live_mut)
                .is_some_and(|live| {
                    live.readies += 1;
                    live.readies > 1 && live.driven == Driven::Modern && live.probe.is_none()
                });
            if again {
                self.send_probe(id, true);
            }
        }
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let known = b.init.is_some();
        let Run::Live(live) = &mut b.run else {
            return;
        };
        let name = b.plan.name.clone();
        match event {
            E::AuthPending { url, reason, .. } => {
                tracing::warn!(server = %name, "waiting for authorization: open {url}");
                live.phase = Phase::WaitingAuth(AuthWait { url, reason });
                b.obs.revision += 1;
                // Requests queued for it would wait on a person: refuse them
                // now with the link.
                let queued: Vec<(u64, Bytes)> = b.queue.drain(..).collect();
                for (gid, _) in queued {
                    self.refuse_queued(id, gid);
                }
            }
            E::Authorized { .. } => {
                tracing::info!(server = %name, "authorized");
                if matches!(live.phase, Phase::WaitingAuth(_)) {
                    live.phase = if known { Phase::Ready } else { Phase::Starting };
                }
            }
            // Already failing (its initialize failed): the session's
            // report says more.
            E::Failed { data } if matches!(live.phase, Phase::Failed(_)) => {
                live.phase = Phase::Failed(serde_json::to_value(&data).unwrap_or(Value::Null));
                b.obs.revision += 1;
            }
            E::Failed { data } => {
                tracing::warn!(server = %name, "failing; its tools are withdrawn until it recovers");
                live.phase = Phase::Failed(serde_json::to_value(&data).unwrap_or(Value::Null));
                let queued: Vec<u64> = b.queue.drain(..).map(|(gid, _)| gid).collect();
                for gid in queued {
                    self.answer_not_started(gid, &format!("the server `{name}` is failing"));
                }
                self.remerge_all();
            }
            E::Ready { .. }
                if matches!(live.phase, Phase::Failed(_) | Phase::WaitingAuth(_)) && known =>
            {
                tracing::info!(server = %name, "ready again: its tools are back");
                live.phase = Phase::Ready;
                self.flush_queue(id);
                self.read_lists(id);
            }
            _ => {}
        }
    }

    /// Refuses a queued front request with the backend's refusal (it waits
    /// for authorization).
    fn refuse_queued(&mut self, id: BackendId, gid: u64) {
        let Some(Pending::Front {
            front,
            id: front_id,
            at,
            audit,
            ..
        }) = self.take_pending(gid)
        else {
            return;
        };
        self.count_error(id, NOT_STARTED);
        let refusal = self.backends.by_id.get(&id).and_then(Backend::refusal);
        if let Some((message, data)) = refusal {
            let text = String::from_utf8_lossy(&front_id).into_owned();
            let refusal = build::error(&text, NOT_STARTED, &message, Some(&data));
            self.audit_answer(audit, at, &refusal);
            self.emit_to(front, refusal, Some(front_id));
        }
    }

    /// The error a client of the handshake era gets in place of a
    /// 2026-07-28 server's `input_required` result (request `id`) that
    /// asks for `what`, which that era has no request for.
    pub(crate) fn input_required_refusal(
        &self,
        id: BackendId,
        request_id: &str,
        what: &str,
    ) -> Bytes {
        let name = self.backend_name(id);
        let message = format!(
            "The MCP server `{name}` speaks the 2026-07-28 protocol and asked for more input before it can answer ({what}), which mcpvisor cannot put to a client of the protocol your client speaks. The request did not complete. Use a client of the 2026-07-28 protocol for this tool."
        );
        let data = serde_json::json!({"reason": "input required", "server": name});
        build::error(request_id, INPUT_NOT_BRIDGED, &message, Some(&data))
    }

    /// Finishes a call's audit record with the answer it got: its server's,
    /// or the gateway's on its behalf.
    pub(super) fn audit_answer(
        &self,
        audit: Option<Box<crate::audit::Call>>,
        at: Instant,
        answer: &[u8],
    ) {
        self.audit_sized(audit, at, answer, answer.len());
    }

    /// [`Hub::audit_answer`], with the answer's size as the session wrote
    /// it: `answer` may be its line before the gateway's id went in.
    fn audit_sized(
        &self,
        audit: Option<Box<crate::audit::Call>>,
        at: Instant,
        answer: &[u8],
        len: usize,
    ) {
        if let (Some(call), Some(log)) = (audit, &self.settings.audit) {
            log.finish(*call, self.now().saturating_duration_since(at), answer, len);
        }
    }

    fn on_backend_line(&mut self, id: BackendId, msg: Message, spans: Option<Spans>) {
        // An answer whose id the session set, as the session read it: the
        // client's id goes where the session's went, in one copy.
        if let Some((gid, answer)) = Answer::spliced(&msg, spans.as_ref()) {
            return self.on_response(id, gid, answer);
        }
        let (line, spans) = match msg {
            Message::Line(line) => (line, spans),
            Message::Spliced {
                start,
                end,
                ref with,
                ..
            } => {
                // The spans move with the id; another member spliced
                // (a server's cancellation naming its request) is peeked.
                let at_id = spans.filter(|s| s.id() == Some(start..end));
                let spans = at_id.map(|s| s.with_id_len(with.as_bytes().len()));
                (msg.to_bytes(), spans)
            }
        };
        let known = spans.and_then(|spans| spans.envelope(&line));
        let env = match known.map_or_else(|| Envelope::peek(&line), Ok) {
            Ok(env) => env,
            Err(e) => {
                tracing::debug!(server = %self.backend_name(id), error = %e, "unroutable line from a server dropped");
                return;
            }
        };
        match env.kind {
            Kind::Response => {
                let gid = env.id.and_then(|i| gateway_id(i.get().as_bytes()));
                let Some(gid) = gid else { return };
                let Some(answer) = Answer::read(&line, &env) else {
                    return;
                };
                self.on_response(id, gid, answer);
            }
            Kind::Request => self.on_server_request(id, &line, &env),
            Kind::Notification => self.on_server_notification(id, &line, &env),
        }
    }

    pub(super) fn on_response(&mut self, id: BackendId, gid: u64, answer: Answer<'_>) {
        let line = answer.line;
        match self.take_pending(gid) {
            Some(Pending::Front {
                front,
                id: front_id,
                wrap,
                tasks,
                at,
                audit,
                token,
                envelope,
                sent,
                ..
            }) => {
                self.audit_sized(audit, at, line, answer.len);
                let took = self.now().saturating_duration_since(at);
                // A result where the reader found one: no error to look for.
                let code = match answer.result {
                    Some(_) => None,
                    None => mcpvisor_jsonrpc::envelope::error_code(line),
                };
                if let Some(obs) = self.counted(id) {
                    obs.stats.latency(took);
                    if let Some(code) = code {
                        obs.stats.error(code);
                    }
                }
                if code == Some(NOT_STARTED) {
                    self.note_refusal(id, line);
                }
                let modern = self.backends.by_id.get(&id).is_some_and(Backend::is_modern);
                // A 2026-07-28 server asks for input in its result; a client
                // of the handshake era cannot read that.
                if wrap == Wrap::AsIs && modern && asks_for_input(line) {
                    if let Some(sent) = sent {
                        let call = super::inputs::Handed {
                            front,
                            front_id,
                            backend: id,
                            token,
                            envelope,
                            sent,
                            at,
                        };
                        return self.ask_for_input(call, line);
                    }
                    let text = String::from_utf8_lossy(&front_id).into_owned();
                    let refusal = self.input_required_refusal(id, &text, "input");
                    self.count_error(id, INPUT_NOT_BRIDGED);
                    return self.emit_to(front, refusal, Some(front_id));
                }
                // The usual answer goes out as the server wrote it, the
                // client's id in place: spliced as it is written to a pipe,
                // copied once for a front that takes whole lines.
                if wrap == Wrap::AsIs && !tasks {
                    let msg = Message::Spliced {
                        line: line.clone(),
                        start: answer.id.start,
                        end: answer.id.end,
                        with: Piece::Bytes(front_id.clone()),
                    };
                    return self.answer_to(front, msg, front_id);
                }
                let with_id = |line: &Bytes| rewrite::splice_at(line, answer.id.clone(), &front_id);
                let out = match wrap {
                    Wrap::AsIs => with_id(line),
                    // A 2026-07-28 server's own state goes out inside the
                    // gateway's (see `bridge.rs`).
                    Wrap::Modern { cacheable } if modern && asks_for_input(line) => {
                        match self.wrap_server_state(id, with_id(line)) {
                            Ok(out) => modern_answer(&out, cacheable),
                            Err(refusal) => return self.emit_to(front, refusal, Some(front_id)),
                        }
                    }
                    // The client's id and the members its era requires, in
                    // one copy of the line when the result's place is known.
                    Wrap::Modern { cacheable } => answer
                        .result
                        .clone()
                        .and_then(|result| {
                            let id = answer.id.clone();
                            modern_answer_at(line, (id, &front_id), result, cacheable)
                        })
                        .unwrap_or_else(|| modern_answer(&with_id(line), cacheable)),
                };
                let out = match tasks {
                    true => self.expose_tasks_to(front, id, &out).unwrap_or(out),
                    false => out,
                };
                self.answer_to(front, Message::Line(out), front_id);
            }
            Some(Pending::Private {
                what: Private::Listen,
                ..
            }) => self.upstream_answered(id, gid, line),
            Some(Pending::Private { what, .. }) => self.on_private_answer(id, what, line),
            // A call waiting for its client's retry keeps the answer, as a
            // copy of its own with the gateway's id in it (not a slice of
            // the session's read buffer with the worker's id).
            None if self.calls.bridges.calls.contains_key(&gid) => {
                let whole =
                    rewrite::splice_at(line, answer.id.clone(), Digits::new(gid).as_bytes());
                self.bridge_answered(gid, &whole);
            }
            // An answer to a call that is over.
            None => {}
        }
    }

    /// A "not started" answer that carries a crash report means the
    /// backend's session is in its failed state (a crash loop): its tools are
    /// withdrawn until a health ping gets an answer from the server again.
    fn note_refusal(&mut self, id: BackendId, line: &Bytes) {
        let answer: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        let error = &answer["error"];
        let failing = error["code"].as_i64() == Some(NOT_STARTED)
            && error["data"].get("phase").is_some_and(|p| !p.is_null());
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let Run::Live(live) = &mut b.run else {
            return;
        };
        if failing && live.phase == Phase::Ready {
            tracing::warn!(server = %b.plan.name, "failing; its tools are withdrawn until it recovers");
            live.phase = Phase::Failed(error["data"].clone());
            self.remerge_all();
        }
    }

    fn on_private_answer(&mut self, id: BackendId, what: Private, line: &Bytes) {
        let answer: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        match what {
            Private::Discover { again } => self.on_discovered(id, again, &answer),
            Private::Initialize => self.on_initialized(id, answer),
            Private::List {
                kind,
                items,
                pages,
                epoch,
            } => self.on_list_page(id, kind, items, pages, epoch, line),
            Private::Ping => {
                // Any answer from the server itself counts, even an error;
                // mcpvisor's own refusals and timeouts do not.
                let ours = answer
                    .get("error")
                    .and_then(|e| e.get("code"))
                    .and_then(Value::as_i64)
                    .is_some_and(|c| {
                        matches!(
                            c,
                            mcpvisor_jsonrpc::REQUEST_TIMEOUT
                                | mcpvisor_jsonrpc::WORKER_LOST
                                | mcpvisor_jsonrpc::NOT_STARTED
                        )
                    });
                let mut recovered = false;
                if let Some(b) = self.backends.by_id.get_mut(&id) {
                    let known = b.init.is_some();
                    if let Run::Live(live) = &mut b.run {
                        live.health.ping = None;
                        if !ours {
                            live.health.misses = 0;
                            if matches!(live.phase, Phase::Failed(_)) && known {
                                tracing::info!(server = %b.plan.name, "answers again: its tools are back");
                                live.phase = Phase::Ready;
                                recovered = true;
                            }
                        }
                    }
                }
                if recovered {
                    self.record(id, EventKind::Recovered, "it answers again");
                    self.read_lists(id);
                }
            }
            Private::SetLevel(f) => self.fanout_done(f),
            // Answered in `on_response`.
            Private::Listen | Private::Quiet => {}
        }
    }

    fn on_initialized(&mut self, id: BackendId, answer: Value) {
        let refused_for_clients =
            answer.get("result").is_none() && self.tried_for_handshake_clients(id);
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let name = b.plan.name.clone();
        let Run::Live(live) = &mut b.run else {
            return;
        };
        match answer.get("result") {
            Some(result) => {
                b.init = Some(result.clone());
                live.phase = Phase::Ready;
                live.link
                    .try_send(build::notification("notifications/initialized", None));
                let took = live.started.elapsed().as_millis();
                tracing::info!(server = %name, "ready in {took} ms");
                self.sync_log_level(id);
                self.resubscribe(id);
                self.flush_queue(id);
                self.read_lists(id);
                self.arm_health(id);
                self.arm_idle(id);
            }
            // A process for the handshake era's clients that its server, of
            // 2026-07-28 alone, refused.
            None if refused_for_clients => {
                let why = answer
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given");
                let why = format!("its initialize was refused: {why}");
                self.refused_for_handshake_clients(id, &why);
            }
            None => {
                let data = answer
                    .get("error")
                    .and_then(|e| e.get("data"))
                    .cloned()
                    .unwrap_or_else(|| {
                        serde_json::json!({"reason": answer.get("error").and_then(|e| e.get("message")).cloned().unwrap_or(Value::Null)})
                    });
                tracing::warn!(server = %name, "could not be initialized; its tools are withdrawn");
                let reason = data.get("reason").and_then(Value::as_str).map_or_else(
                    || "its initialize failed".to_owned(),
                    |r| format!("its initialize failed: {r}"),
                );
                self.start_failed(id, data, reason);
            }
        }
    }

    /// A backend that could not be started as asked: its tools are
    /// withdrawn, what waited for it is refused, and `reason` is recorded
    /// (`data` is the refusal's `error.data` until it is retried).
    fn start_failed(&mut self, id: BackendId, data: Value, reason: String) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let name = b.plan.name.clone();
        let Run::Live(live) = &mut b.run else {
            return;
        };
        // A session that failed has said so itself, and its report is the
        // better one.
        let told = matches!(live.phase, Phase::Failed(_));
        if !told {
            live.phase = Phase::Failed(data);
        }
        let queued: Vec<u64> = b.queue.drain(..).map(|(gid, _)| gid).collect();
        if !told {
            self.record(id, EventKind::Failed, reason);
        }
        self.arm_health(id);
        for gid in queued {
            self.answer_not_started(gid, &format!("the server `{name}` could not start"));
        }
        self.remerge_all();
    }

    /// A server whose entry asks for 2026-07-28 (`"era": "2026-07-28"`)
    /// that did not answer its probe as one: it fails to start, saying
    /// `why`, rather than being initialized in the handshake era.
    fn not_modern(&mut self, id: BackendId, why: &str) {
        let name = self.backend_name(id);
        let reason = format!(
            "its entry asks for era 2026-07-28, but {why}; set \"era\" to \"auto\" or \"2025-11-25\" to drive it in the handshake era"
        );
        tracing::warn!(server = %name, "{reason}; its tools are withdrawn");
        let data = serde_json::json!({"reason": reason, "server": name});
        self.start_failed(id, data, reason);
    }

    /// Sends what waited for the backend to be ready. A request its
    /// session's queue cannot take is refused as not started, never lost.
    fn flush_queue(&mut self, id: BackendId) {
        self.queued_to_twin(id);
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let queued: Vec<(u64, Bytes)> = b.queue.drain(..).collect();
        let driven = b.live().map_or(Driven::Handshake, |l| l.driven);
        let link = b.link();
        let mut refused = Vec::new();
        for (gid, line) in queued {
            let line = for_era(&mut self.calls, gid, &line, driven).unwrap_or(line);
            if !link.is_some_and(|link| link.try_send(line)) {
                refused.push(gid);
            }
        }
        for gid in refused {
            self.answer_not_started(gid, "the server's queue is full");
        }
    }

    /// Reads every list the backend declares, from the first page. A
    /// twin's are not read: the merged lists are its configured server's.
    pub(crate) fn read_lists(&mut self, id: BackendId) {
        if self.twin_s_primary(id).is_some() {
            return;
        }
        for kind in KINDS {
            self.read_list(id, kind);
        }
    }

    /// A server said one of its lists changed: it is read again. Served
    /// as itself, the server's word is passed on even if the list reads
    /// the same (its clients hear what it said); a gateway tells its
    /// clients only of what changes in the merged list.
    fn list_announced(&mut self, id: BackendId, kind: ListKind) {
        if self.settings.transparent {
            self.catalog.announced[kind.index()] = true;
        }
        self.read_list(id, kind);
    }

    /// Reads one list again from the first page (a twin's change is read
    /// from its configured server, whose lists are the merged ones).
    pub(crate) fn read_list(&mut self, id: BackendId, kind: ListKind) {
        let id = self.twin_s_primary(id).unwrap_or(id);
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        if !b.declares(kind.capability()) {
            return;
        }
        let epoch = b.epoch;
        self.send_private(
            id,
            Private::List {
                kind,
                items: Vec::new(),
                pages: 0,
                epoch,
            },
            kind.method(),
            None,
        );
    }

    pub(crate) fn on_server_request(&mut self, id: BackendId, line: &Bytes, env: &Envelope<'_>) {
        let Some(raw_id) = env.id else { return };
        let method = env.method();
        if method == "ping" {
            let reply = build::result(raw_id.get(), "{}");
            if let Some(link) = self.backends.by_id.get(&id).and_then(Backend::link) {
                link.try_send(reply);
            }
            return;
        }
        let any_ready =
            self.fronts.open.values().any(|f| {
                f.closing.is_none() && (f.info.initialized || f.info.era == Era::Stateless)
            });
        if !any_ready && self.calls.early.len() < MAX_EARLY {
            // Until a client has initialized, what it can take is unknown,
            // and nothing may be sent to it: hold the request (bounded).
            self.calls.early.push((id, line.clone()));
            return;
        }
        // On behalf of a 2026-07-28 client's call: the bridge's.
        let call = match self.attribute(id) {
            Ok((front, Some(related))) => self.calls.by_front_id.get(&(front, related)).copied(),
            _ => None,
        };
        if self.bridge_ask(id, call, line, env) {
            return;
        }
        let (target, declined) = match self.attribute(id) {
            Err(why) => (None, Some(why)),
            Ok((front, related)) => {
                let info = &self.fronts.open[&front].info;
                let needs = match method {
                    "sampling/createMessage" => Some(("sampling", info.sampling)),
                    "elicitation/create" if is_url_mode(line) => {
                        Some(("elicitation.url", info.elicitation_url))
                    }
                    "elicitation/create" => Some(("elicitation", info.elicitation)),
                    "roots/list" => Some(("roots", info.roots)),
                    _ => None,
                };
                let declined = if info.era == Era::Stateless {
                    Some(format!(
                        "the client connected to mcpvisor uses the 2026-07-28 protocol, which has no server-to-client requests on stdio; `{method}` cannot be delivered"
                    ))
                } else {
                    match needs {
                        Some((cap, false)) => Some(format!(
                            "the client connected to mcpvisor did not declare the `{cap}` capability, so `{method}` cannot be delivered"
                        )),
                        _ => None,
                    }
                };
                (Some((front, related)), declined)
            }
        };
        if let Some(message) = declined {
            tracing::info!(server = %self.backend_name(id), "declined {method}: {message}");
            let data = required_capabilities(method, line);
            let reply = build::error(raw_id.get(), MISSING_CAPABILITY, &message, data.as_ref());
            if let Some(link) = self.backends.by_id.get(&id).and_then(Backend::link) {
                link.try_send(reply);
            }
            return;
        }
        let Some((front, related)) = target else {
            return;
        };
        let fid = self.calls.next_server_req();
        self.calls.server_reqs.insert(
            fid,
            ServerReq {
                backend: id,
                id: Bytes::copy_from_slice(raw_id.get().as_bytes()),
                front,
            },
        );
        let out = rewrite::splice(line, raw_id, format!("\"mcpvisor-{fid}\"").as_bytes());
        let out = self.expose_related_in_request(id, &out).unwrap_or(out);
        self.emit_to(front, out, related);
    }

    /// The front a backend's request is for: the only client there is, or
    /// else the only one with requests in flight at that backend (with the
    /// oldest of them, the request this one most likely serves). Anything
    /// else is a guess, and a guess sends one person's question to another.
    fn attribute(&self, backend: BackendId) -> Result<(FrontId, Option<Bytes>), String> {
        let owner = self.backends.by_id.get(&backend).and_then(Backend::owner);
        let open: Vec<FrontId> = self
            .fronts
            .open
            .iter()
            .filter(|(id, f)| f.closing.is_none() && owner.is_none_or(|o| o == **id))
            .map(|(id, _)| *id)
            .collect();
        let mut asking: Vec<(u64, FrontId, Bytes)> = self
            .calls
            .pending
            .iter()
            .filter_map(|(gid, p)| match p {
                Pending::Front {
                    front,
                    backend: b,
                    id,
                    ..
                } if *b == backend => Some((*gid, *front, id.clone())),
                _ => None,
            })
            .collect();
        asking.sort_by_key(|(gid, _, _)| *gid);
        let related = |front: FrontId| {
            asking
                .iter()
                .find(|(_, f, _)| *f == front)
                .map(|(_, _, id)| id.clone())
        };
        if let [only] = open.as_slice() {
            return Ok((*only, related(*only)));
        }
        let mut fronts: Vec<FrontId> = asking.iter().map(|(_, f, _)| *f).collect();
        fronts.dedup();
        fronts.sort();
        fronts.dedup();
        match fronts.as_slice() {
            [only] => Ok((*only, related(*only))),
            [] => Err("no client of mcpvisor has a request in flight at this server, so the request cannot be attributed to one".into()),
            _ => Err("several clients of mcpvisor have requests in flight at this server, so the request cannot be attributed to one; use `\"sessions\": \"per-client\"` for servers that ask their clients things".into()),
        }
    }

    fn on_server_notification(&mut self, id: BackendId, line: &Bytes, env: &Envelope<'_>) {
        match env.method() {
            "notifications/progress" => {
                let Some(token) = env.progress_token else {
                    return;
                };
                let Ok(gid) = token.get().parse::<u64>() else {
                    return;
                };
                if let Some(Pending::Front {
                    front,
                    id: front_id,
                    token: Some(front_token),
                    ..
                }) = self.calls.pending.get(&gid)
                {
                    let out = rewrite::splice(line, token, front_token);
                    let (front, related) = (*front, Some(front_id.clone()));
                    self.emit_to(front, out, related);
                }
            }
            "notifications/tools/list_changed" => self.list_announced(id, ListKind::Tools),
            "notifications/prompts/list_changed" => self.list_announced(id, ListKind::Prompts),
            "notifications/resources/list_changed" => {
                self.list_announced(id, ListKind::Resources);
                self.read_list(id, ListKind::Templates);
            }
            // Served as itself, the server's log lines keep their own logger.
            "notifications/message" => {
                let Some(params) = mcpvisor_jsonrpc::envelope::raw_params(line) else {
                    return;
                };
                let Some(obj) = RawObject::parse(params.get()) else {
                    return;
                };
                let level = super::front::LogLevel::of_message(Some(&obj));
                let out = if self.settings.transparent {
                    line.clone()
                } else {
                    let name = self.backend_name(id);
                    let params = obj.with("logger", &raw::quote(&name));
                    build::notification("notifications/message", Some(&params))
                };
                self.broadcast_log(id, out, level);
            }
            "notifications/resources/updated" => {
                let Some(params) = mcpvisor_jsonrpc::envelope::raw_params(line)
                    .and_then(|p| RawObject::parse(p.get()))
                else {
                    return;
                };
                let Some(uri) = params.str("uri") else { return };
                let owner = self.backends.by_id.get(&id).and_then(Backend::owner);
                self.tell_listens_updated(owner, &uri, &params);
                // Heard on the gateway's own listen: its subscription id
                // is the gateway's, not the fronts'.
                let line = super::upstream::without_subscription(line, &params);
                // A 2026-07-28 front hears of it through its listens only.
                let to: Vec<FrontId> = self
                    .fronts
                    .open
                    .iter()
                    .filter(|(front, f)| match owner {
                        Some(owner) => **front == owner && f.info.era == Era::Handshake,
                        None => f.subscriptions.contains(&uri),
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for front in to {
                    self.emit_to(front, line.clone(), None);
                }
            }
            "notifications/tasks/status" | "notifications/tasks" => self.on_task_status(id, line),
            // What a 2026-07-28 server grants of the gateway's own listen.
            "notifications/subscriptions/acknowledged" => self.upstream_acknowledged(id, line),
            "notifications/cancelled" => {
                // The backend withdrew one of its requests to the front.
                let Some(rid) = env.request_id else { return };
                let found = self
                    .calls
                    .server_reqs
                    .iter()
                    .find(|(_, r)| r.backend == id && r.id.as_ref() == rid.get().as_bytes())
                    .map(|(k, _)| *k);
                if let Some(req) =
                    found.and_then(|fid| Some((fid, self.calls.server_reqs.remove(&fid)?)))
                {
                    let (fid, req) = req;
                    let out = rewrite::splice(line, rid, format!("\"mcpvisor-{fid}\"").as_bytes());
                    self.emit_to(req.front, out, None);
                } else {
                    // Or one a 2026-07-28 client has yet to be offered or answer.
                    self.bridge_withdrawn(id, rid.get().as_bytes());
                }
            }
            _ => self.broadcast_from(id, line.clone()),
        }
    }

    // === health and idleness ===

    /// Arms a live backend's next health check (when it has them).
    fn arm_health(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let Some(interval) = b.plan.health_interval else {
            return;
        };
        let Run::Live(live) = &mut b.run else {
            return;
        };
        if let Some(key) = live.health.timer.take() {
            self.effects.list.push(Effect::Disarm(key));
        }
        let at = Instant::now() + interval;
        live.health.timer = Some(self.effects.arm(Timer::Health(id), at));
    }

    /// Records the health ping just sent to a live backend.
    fn set_ping(&mut self, id: BackendId, ping: Option<u64>) {
        if let Some(live) = self.backends.by_id.get_mut(&id).and_then(Backend::live_mut) {
            live.health.ping = ping;
        }
    }

    pub(crate) fn on_health(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let misses_allowed = b.plan.health_misses.max(1);
        let known = b.init.is_some();
        let Run::Live(live) = &mut b.run else {
            return;
        };
        live.health.timer = None;
        match live.phase {
            Phase::Ready => {}
            // Its session refuses while it crash-loops; a ping tells when
            // the server answers again.
            Phase::Failed(_) if known => {
                if live.health.ping.is_none() {
                    let method = health_method(live.driven);
                    let ping = self.send_private(id, Private::Ping, method, None);
                    self.set_ping(id, ping);
                } else {
                    // The refusal answers at once; an unanswered ping here
                    // is one the session still holds.
                    live.health.ping = None;
                }
                self.arm_health(id);
                return;
            }
            // It never finished a handshake: try a fresh start.
            Phase::Failed(_) => {
                self.restart_backend(id, "retrying a server that could not start");
                return;
            }
            Phase::Starting | Phase::WaitingAuth(_) => return,
        }
        if live.health.ping.is_some() {
            live.health.misses += 1;
            let misses = live.health.misses;
            tracing::debug!(server = %b.plan.name, misses, "health ping unanswered");
            if misses >= misses_allowed {
                let why = format!("{misses} health checks in a row went unanswered");
                self.restart_backend(id, &why);
                return;
            }
        } else if b.in_flight == 0 {
            // A server busy with a call is not pinged: a long call is not a hang.
            let method = health_method(live.driven);
            let ping = self.send_private(id, Private::Ping, method, None);
            self.set_ping(id, ping);
        }
        self.arm_health(id);
    }

    pub(crate) fn arm_idle(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        if let Some(idle) = b.plan.idle_timeout {
            self.effects.arm(Timer::Idle(id), Instant::now() + idle);
        }
    }

    pub(crate) fn on_idle(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        let Some(idle) = b.plan.idle_timeout else {
            return;
        };
        if !b.is_ready() {
            return;
        }
        let quiet = b.last_used.elapsed();
        // A server that holds a client's subscription is listened to, not
        // idle: stopped, it would tell nobody of its resources' updates.
        if !self.subscribed_at(id).is_empty() {
            self.effects.arm(Timer::Idle(id), Instant::now() + idle);
            return;
        }
        if b.in_flight == 0 && quiet >= idle {
            tracing::info!(server = %b.plan.name, "idle for {quiet:?}: stopping it until it is used again");
            self.stop_backend(id, "it was idle", Off::Idle(Start::Fresh));
            self.record(
                id,
                EventKind::Stopped,
                format!(
                    "stopped after {} idle",
                    mcpvisor_config::report::format_uptime(quiet)
                ),
            );
        } else {
            let left = idle.saturating_sub(quiet).max(Duration::from_millis(10));
            self.effects.arm(Timer::Idle(id), Instant::now() + left);
        }
    }
}

/// The health check of a server driven in `driven`: 2026-07-28 has no
/// `ping`, and its servers must answer `server/discover`.
fn health_method(driven: Driven) -> &'static str {
    match driven {
        Driven::Modern => "server/discover",
        Driven::Probing | Driven::Handshake => "ping",
    }
}

/// A routed answer for a 2026-07-28 client: its result gets that era's
/// required members; an error passes as it is. The members are added at the
/// end of the result, every other byte of the line kept.
fn modern_answer(line: &Bytes, cacheable: bool) -> Bytes {
    let Some(text) = std::str::from_utf8(line).ok() else {
        return line.clone();
    };
    let Some(obj) = RawObject::parse(text) else {
        return line.clone();
    };
    let Some(result) = obj.get("result") else {
        return line.clone();
    };
    let Some((added, members)) = super::front::modern_members(result.get(), cacheable) else {
        return line.clone();
    };
    if added.is_empty() {
        return line.clone();
    }
    // The result's closing brace, in the line.
    let result = result.get();
    let start = (result.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize);
    let close = start.saturating_add(result.len()).saturating_sub(1);
    if text.get(start..=close) != Some(result) {
        let result = super::front::modern_result(result, cacheable);
        return Bytes::from(obj.with("result", &result));
    }
    let mut out = Vec::with_capacity(line.len() + added.len() + 1);
    out.extend_from_slice(&line[..close]);
    if members > 0 {
        out.push(b',');
    }
    out.extend_from_slice(added.as_bytes());
    out.extend_from_slice(&line[close..]);
    Bytes::from(out)
}

/// [`modern_answer`] of `line` with its id (where it lies, and the id to
/// put there) replaced as well, in one copy, without reading the result's
/// members: for the usual result, an object in which no name of a member
/// to add occurs at all, even quoted inside a value, and no `\u` escape
/// (which could spell one). Then it lacks them all, and they go before its
/// closing brace. `result`: where the result lies in `line`. `None` leaves
/// the answer to [`modern_answer`].
fn modern_answer_at(
    line: &[u8],
    (id, new_id): (Range<usize>, &[u8]),
    result: Range<usize>,
    cacheable: bool,
) -> Option<Bytes> {
    let text = line.get(result.clone())?;
    if text.first() != Some(&b'{') || text.last() != Some(&b'}') {
        return None;
    }
    static RESULT_TYPE: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(br#""resultType""#));
    static TTL: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(br#""ttlMs""#));
    static SCOPE: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(br#""cacheScope""#));
    let (added, names): (&[u8], &[&LazyLock<memmem::Finder<'static>>]) = match cacheable {
        false => (br#","resultType":"complete""#, &[&RESULT_TYPE]),
        true => (
            br#","resultType":"complete","ttlMs":0,"cacheScope":"private""#,
            &[&RESULT_TYPE, &TTL, &SCOPE],
        ),
    };
    let clear = !has_unicode_escape(text) && names.iter().all(|name| name.find(text).is_none());
    // The id lies outside the result, before or after it.
    if !clear || (id.end > result.start && id.start < result.end) {
        return None;
    }
    // Without the comma when the result has no member to follow.
    let empty = text[1..text.len() - 1].iter().all(u8::is_ascii_whitespace);
    let added = if empty { &added[1..] } else { added };
    let close = result.end - 1;
    let mut cuts = [(id.clone(), new_id), (close..close, added)];
    cuts.sort_unstable_by_key(|(at, _)| at.start);
    let mut out = Vec::with_capacity(line.len() + new_id.len() + added.len());
    let mut from = 0;
    for (at, with) in cuts {
        out.extend_from_slice(&line[from..at.start]);
        out.extend_from_slice(with);
        from = at.end;
    }
    out.extend_from_slice(&line[from..]);
    Some(Bytes::from(out))
}

/// A front request's line as a backend driven as `driven` gets it, when
/// that is not the line as it is: for a 2026-07-28 server, with the
/// envelope its [`Pending::Front`] carries (the client's). What a client
/// of the handshake era sent such a server is kept with it, for the
/// server's input requests (`inputs.rs`).
fn for_era(calls: &mut super::Calls, gid: u64, line: &Bytes, driven: Driven) -> Option<Bytes> {
    if driven != Driven::Modern {
        return None;
    }
    match calls.pending.get_mut(&gid) {
        Some(Pending::Front {
            envelope,
            wrap,
            sent,
            ..
        }) => {
            let line = raw::request_with_envelope(line, envelope);
            if *wrap == Wrap::AsIs {
                *sent = Some(line.clone());
            }
            Some(line)
        }
        _ => Some(raw::request_with_envelope(line, &GATEWAY_ENVELOPE)),
    }
}

/// The 2026-07-28 envelope members of a request's `_meta` (read as `meta`),
/// as an object of them, each value as it came; `None` when it has none.
pub(crate) fn envelope_of(meta: &RawObject<'_>) -> Option<std::sync::Arc<str>> {
    let others: Vec<(&str, Option<&str>)> = meta
        .keys()
        .filter(|k| !k.starts_with(mcpvisor_jsonrpc::era::META_PREFIX))
        .map(|k| (k, None))
        .collect();
    let kept = meta.write(&others);
    (kept != "{}").then(|| kept.into())
}

/// Whether `text` holds a `\u` escape (or a backslash before a `u` at all).
fn has_unicode_escape(text: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', text).any(|at| text.get(at + 1) == Some(&b'u'))
}

/// Whether a server's answer is a 2026-07-28 `input_required` result.
fn asks_for_input(line: &[u8]) -> bool {
    // Nearly every answer asks for nothing: one fast scan says so, and the
    // answer (then its result) is not read member by member. The value
    // `input_required` is in the line as written unless a `\u` escape
    // spells it, the only escape that makes a letter or `_`.
    static INPUT_REQUIRED: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"input_required"));
    if INPUT_REQUIRED.find(line).is_none() && !has_unicode_escape(line) {
        return false;
    }
    std::str::from_utf8(line)
        .ok()
        .and_then(RawObject::parse)
        .and_then(|o| o.get("result"))
        .and_then(|r| RawObject::parse(r.get()))
        .and_then(|r| r.str_ref("resultType"))
        .is_some_and(|t| t == "input_required")
}

/// mcpvisor: a 2026-07-28 server asked a client of the handshake era for
/// input (an `input_required` result), which mcpvisor does not turn into
/// that era's requests yet.
pub(crate) const INPUT_NOT_BRIDGED: i64 = -32013;

/// Whether an `elicitation/create` asks for URL mode (2025-11-25).
pub(super) fn is_url_mode(line: &[u8]) -> bool {
    mcpvisor_jsonrpc::envelope::raw_params(line)
        .and_then(|p| RawObject::parse(p.get()))
        .and_then(|o| o.str("mode"))
        .is_some_and(|m| m == "url")
}

/// Server requests held until the client has initialized.
const MAX_EARLY: usize = 64;

/// MCP's code for a request that needs a capability the client lacks.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;

/// The `data` of a -32021 refusal of a server's request: the client
/// capabilities it needs, as a `ClientCapabilities` object.
pub(super) fn required_capabilities(method: &str, line: &[u8]) -> Option<serde_json::Value> {
    let needed = match method {
        "sampling/createMessage" => serde_json::json!({"sampling": {}}),
        "elicitation/create" if is_url_mode(line) => {
            serde_json::json!({"elicitation": {"url": {}}})
        }
        "elicitation/create" => serde_json::json!({"elicitation": {}}),
        "roots/list" => serde_json::json!({"roots": {}}),
        _ => return None,
    };
    Some(serde_json::json!({ "requiredCapabilities": needed }))
}

/// A server's answer as the hub reads it: its line, and where the id lies
/// in it. The line may be the one the session read, the worker's id still
/// in it ([`Answer::spliced`]): only the id's place matters, as the
/// client's id goes there.
pub(super) struct Answer<'a> {
    pub line: &'a Bytes,
    pub id: Range<usize>,
    /// Where the `result` value lies, when the reader found one.
    pub result: Option<Range<usize>>,
    /// Its size as the session wrote it, the gateway's id in place.
    pub len: usize,
}

impl<'a> Answer<'a> {
    /// The answer in `line`, read whole as `env`; `None` without an id.
    pub fn read(line: &'a Bytes, env: &Envelope<'_>) -> Option<Self> {
        Some(Self {
            line,
            id: rewrite::span(line, env.id?),
            result: env.result.clone(),
            len: line.len(),
        })
    }

    /// A response into which the session spliced the gateway's id, read
    /// from the line as the session read it (`spans` are that line's): the
    /// gateway's id, and the answer. `None` for any other message.
    pub fn spliced(msg: &'a Message, spans: Option<&Spans>) -> Option<(u64, Self)> {
        let Message::Spliced {
            line,
            start,
            end,
            with,
        } = msg
        else {
            return None;
        };
        let spans = spans.filter(|s| s.kind() == Kind::Response)?;
        let id = spans.id().filter(|id| *id == (*start..*end))?;
        // Spans of another line (a bug in their maker) are not trusted:
        // the line is read whole instead.
        let result = spans.result();
        if id.end > line.len() || result.as_ref().is_some_and(|r| r.end > line.len()) {
            return None;
        }
        let gid = gateway_id(with.as_bytes())?;
        let answer = Self {
            line,
            id,
            result,
            len: msg.len(),
        };
        Some((gid, answer))
    }
}

/// A call's gateway id as the gateway writes it: decimal digits without a
/// leading zero. `None` for anything else (then the line is read whole).
fn gateway_id(text: &[u8]) -> Option<u64> {
    match text {
        [b'0'] => Some(0),
        [b'1'..=b'9', ..] => text.iter().try_fold(0u64, |n, &b| {
            let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
            n.checked_mul(10)?.checked_add(u64::from(digit))
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{Answer, asks_for_input, gateway_id, modern_answer, modern_answer_at};
    use bytes::Bytes;
    use mcpvisor_jsonrpc::rewrite;
    use mcpvisor_jsonrpc::{Envelope, Spans};
    use mcpvisor_session::writer::{Digits, Message, Piece};

    /// A worker's line as a session hands it to the hub: the member at
    /// `at` (`"id"` or `"requestId"`) spliced with `with`, the spans read
    /// from the line as it came.
    fn handed(line: &'static str, with: Piece, at_request_id: bool) -> (Message, Option<Spans>) {
        let line = Bytes::from_static(line.as_bytes());
        let env = Envelope::peek(&line).expect("a message");
        let spans = Spans::of(&line, &env);
        let part = match at_request_id {
            true => env.request_id.expect("requestId"),
            false => env.id.expect("id"),
        };
        (Message::spliced(&line, part, with), spans)
    }

    #[test]
    fn an_answer_spliced_with_the_gateway_id_is_read_from_the_workers_line() {
        let worker = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[]}}"#;
        let (msg, spans) = handed(worker, Piece::Bytes(Bytes::from_static(b"1234")), false);
        let (gid, answer) = Answer::spliced(&msg, spans.as_ref()).expect("read as spliced");
        assert_eq!(gid, 1234);
        // The id's place is the worker's, where the client's id goes; the
        // size is the line's with the gateway's id in it.
        assert_eq!(&answer.line[answer.id.clone()], b"7");
        assert_eq!(answer.len, worker.len() + 3);
        let result = answer.result.clone().expect("a result");
        assert_eq!(&answer.line[result], br#"{"content":[]}"#);
        let client = rewrite::splice_at(answer.line, answer.id.clone(), b"\"c-1\"");
        assert_eq!(
            &client[..],
            br#"{"jsonrpc":"2.0","id":"c-1","result":{"content":[]}}"#
        );
        // What the hub would have read from the whole line agrees.
        let whole = msg.to_bytes();
        let env = Envelope::peek(&whole).expect("a message");
        let read = Answer::read(&whole, &env).expect("an id");
        assert_eq!(&whole[read.id.clone()], b"1234");
        assert_eq!(read.len, answer.len);
    }

    #[test]
    fn anything_but_an_answer_spliced_at_its_id_with_a_gateway_id_is_read_whole() {
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        // An id the gateway never writes.
        for with in [&b"\"12\""[..], b"012"] {
            let (msg, spans) = handed(answer, Piece::Bytes(Bytes::from_static(with)), false);
            assert!(Answer::spliced(&msg, spans.as_ref()).is_none());
        }
        // No spans, a line not spliced, a server's cancellation spliced
        // at its `requestId`, a server's request spliced at its id.
        let (msg, _) = handed(answer, Piece::Bytes(Bytes::from_static(b"5")), false);
        assert!(Answer::spliced(&msg, None).is_none());
        let line = Message::Line(Bytes::from_static(answer.as_bytes()));
        let env_spans = {
            let env = Envelope::peek(answer.as_bytes()).expect("a message");
            Spans::of(answer.as_bytes(), &env)
        };
        assert!(Answer::spliced(&line, env_spans.as_ref()).is_none());
        let cancelled =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#;
        let (msg, spans) = handed(cancelled, Piece::Number(Digits::new(9)), true);
        assert!(Answer::spliced(&msg, spans.as_ref()).is_none());
        let asked = r#"{"jsonrpc":"2.0","id":3,"method":"roots/list"}"#;
        let (msg, spans) = handed(asked, Piece::Number(Digits::new(9)), false);
        assert!(Answer::spliced(&msg, spans.as_ref()).is_none());
        // Spans of a longer line, its id at the same place: not trusted.
        let longer = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text"}]}}"#;
        let (_, spans) = handed(longer, Piece::Bytes(Bytes::from_static(b"5")), false);
        let (msg, _) = handed(answer, Piece::Bytes(Bytes::from_static(b"5")), false);
        assert!(Answer::spliced(&msg, spans.as_ref()).is_none());
    }

    #[test]
    fn a_gateway_id_is_plain_decimal_digits_within_a_u64() {
        assert_eq!(gateway_id(b"0"), Some(0));
        assert_eq!(gateway_id(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"01",
            b"-1",
            b"+1",
            b"1.0",
            b"\"1\"",
            b"18446744073709551616",
            b"1a",
        ] {
            assert_eq!(gateway_id(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn an_answer_asks_for_input_by_its_result_type_however_it_is_written() {
        let asks = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{}}}"#;
        assert!(asks_for_input(asks));
        // Spelled with an escape, it still asks.
        let escaped = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input\u005frequired"}}"#;
        assert!(asks_for_input(escaped));
        let done = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a\nb"}],"resultType":"complete"}}"#;
        assert!(!asks_for_input(done));
        // The words in a tool's text are not its result type.
        let told = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"input_required"}]}}"#;
        assert!(!asks_for_input(told));
    }

    #[test]
    fn a_result_gets_the_same_members_whether_or_not_its_place_is_known() {
        // Each line, and whether it takes the one-copy way (for a result
        // that is not cacheable, and one that is); the rest are read.
        let lines: &[(&str, [bool; 2])] = &[
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}"#,
                [true, true],
            ),
            (
                r#"{"result":{"content":[]},"jsonrpc":"2.0","id":"abc"}"#,
                [true, true],
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, [true, true]),
            (r#"{"jsonrpc":"2.0","id":1,"result":{ }}"#, [true, true]),
            (
                r#"{"jsonrpc":"2.0","id":1,"result": {"a":1} ,"x":2}"#,
                [true, true],
            ),
            // A name inside a string value is escaped, never the member's.
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\"resultType\""}]}}"#,
                [true, true],
            ),
            // Has it already, or may have it: read member by member.
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#,
                [false, false],
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"result\u0054ype":"complete"}}"#,
                [false, false],
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"tags":["resultType"]}}"#,
                [false, false],
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"result":{"ttlMs":5,"contents":[]}}"#,
                [true, false],
            ),
            // Not an object: as it is.
            (r#"{"jsonrpc":"2.0","id":1,"result":[1]}"#, [false, false]),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#,
                [false, false],
            ),
        ];
        let front_id = br#""client-7""#;
        for (line, once_way) in lines {
            let line = Bytes::copy_from_slice(line.as_bytes());
            let env = Envelope::peek(&line).expect("a message");
            let id = env.id.expect("an id");
            for (cacheable, expected) in [false, true].into_iter().zip(once_way) {
                let read = modern_answer(&rewrite::splice(&line, id, front_id), cacheable);
                let once = env.result.clone().and_then(|result| {
                    let at = rewrite::span(&line, id);
                    modern_answer_at(&line, (at, front_id), result, cacheable)
                });
                assert_eq!(once.is_some(), *expected, "{line:?} cacheable {cacheable}");
                if let Some(once) = once {
                    assert_eq!(once, read, "{line:?} cacheable {cacheable}");
                }
                let value: serde_json::Value = serde_json::from_slice(&read).expect("JSON");
                assert_eq!(value["id"], "client-7", "{read:?}");
                if value["result"].is_object() {
                    assert!(value["result"]["resultType"].is_string(), "{read:?}");
                }
            }
        }
    }
}
