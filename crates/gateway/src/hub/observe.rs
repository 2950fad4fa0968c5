//! What the hub shows a [`crate::monitor::Monitor`], and the actions it
//! takes for one.
//!
//! A server's row ([`status_of`]) is a function of its backend alone: its
//! state (off and why, or live with its phase and what its session said of
//! its worker: `backend::Run`) and its [`Observed`], which keeps counters
//! and history only: its generation as people count it, its restarts, its
//! counters and latency histogram, its crashes and its ring of events. The
//! hub updates both where things happen: session events
//! ([`Hub::observe_session`]), the gateway's own decisions (stops, restarts,
//! reloads, list changes: [`Hub::record`]), and the data path (a call
//! routed, answered or refused: a few integer additions, no allocation).
//!
//! After every event of its loop the hub compares each backend's row with
//! the row it last published ([`Hub::publish_changes`]): a new state,
//! generation, pid or restart count goes out at once; a change of counters
//! only, at most every [`THROTTLE`] per server, so a busy server does not
//! flood observers. Nothing is built or compared while nobody listens.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcpvisor_config::RemoteTransport;
use mcpvisor_config::RestartMode;
use mcpvisor_config::report::{CrashPhase, ErrorData, ExitKind, format_uptime};
use mcpvisor_session::SessionEvent;
use serde_json::Value;
use tokio::time::Instant;

use crate::monitor::{
    Action, ActionError, CRASHES_KEPT, EVENTS_KEPT, EventKind, EventRecord, InstanceStatus,
    LATENCY_BUCKETS, Latency, MonitorEvent, Query, ServerDetail, ServerState, ServerStatus,
    Snapshot,
};

use super::backend::{AuthWait, Backend, BackendId, Off, Phase, Run, Start, Tail, Worker};
use super::{Effect, Hub, Timer};

/// The shortest time between two counter-only updates of one server's row.
pub(crate) const THROTTLE: Duration = Duration::from_millis(250);

/// Where a twin's row key is kept among a row's instances' (no front is
/// numbered so).
const TWIN_ROW: u64 = u64::MAX;

/// What the monitor keeps of one backend beyond its state: counters and
/// history, and what was last published of it. Its state (running or not,
/// its worker, a reload in progress) is the backend's own (`Run`), and a
/// row is read from both by [`status_of`].
///
/// Invariant: nothing here decides what the backend does; dropping it
/// would lose history and counts, never change a state.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// The current (or last) generation, counted over the backend's whole
    /// life: a new session of the same server goes on from the last one.
    pub generation: Option<u64>,
    /// Generations started to replace one that ended in service: see
    /// [`ServerStatus::restarts`].
    pub restarts: u64,
    /// Bumped when its row changes in a way its state does not show (a
    /// failing server's report replaced by a better one), so that the
    /// change is published at once.
    pub revision: u64,
    pub stats: Stats,
    pub events: VecDeque<EventRecord>,
    /// Its last unrequested exits, oldest first, at most [`CRASHES_KEPT`].
    pub crashes: VecDeque<Crash>,
    /// The row key last published, to publish only changes.
    published: Option<RowKey>,
    /// A per-client template's instances as last published: (client, key).
    published_instances: Vec<(u64, RowKey)>,
    /// Counters changed since the last publication.
    pub dirty: bool,
    last_published: Option<Instant>,
    /// A [`Timer::Publish`] is pending for it.
    flush_armed: bool,
}

/// One unrequested exit of a server, kept for its page.
#[derive(Debug, Clone)]
pub(crate) struct Crash {
    /// The generation that exited, counted across the server's sessions.
    pub generation: u64,
    /// Its `error.data`, without stderr, with `at_ms`.
    pub report: Value,
    /// The stderr tail the session kept of it.
    pub stderr: Vec<String>,
}

/// A backend's counters. Recording never allocates, except the first time
/// an error code is seen.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub calls: u64,
    pub errors: u64,
    pub by_code: Vec<(i64, u64)>,
    /// Per bucket of [`LATENCY_BUCKETS`], then `+Inf`.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    pub sum: f64,
    pub count: u64,
    /// The slowest answer, seconds: the top of the `+Inf` bucket.
    pub max: f64,
}

/// What decides whether a row goes out at once.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RowKey {
    state: ServerState,
    generation: Option<u64>,
    pid: Option<u32>,
    restarts: u64,
    next_try_at_ms: Option<u64>,
    revision: u64,
}

// === impl Observed ===

impl Observed {
    /// Carries what a replaced backend of the same name had seen (a change
    /// of its config entry is a restart, not a new server).
    pub fn carry_over(old: Observed) -> Self {
        Self {
            generation: old.generation,
            restarts: old.restarts,
            stats: old.stats,
            events: old.events,
            crashes: old.crashes,
            ..Self::default()
        }
    }

    /// Keeps the report of generation `generation`'s crash (without its
    /// stderr, which is asked for apart) and its stderr tail, dropping the
    /// oldest kept one past [`CRASHES_KEPT`].
    fn crashed(&mut self, generation: u64, data: &ErrorData, stderr: Vec<String>) {
        let mut report = data.clone();
        report.generation = Some(generation);
        report.stderr = None;
        report.stray_stdout.heads.clear();
        let Ok(mut report) = serde_json::to_value(&report) else {
            return;
        };
        if let Some(fields) = report.as_object_mut() {
            fields.insert("at_ms".to_owned(), now_ms().into());
        }
        if self.crashes.len() == CRASHES_KEPT {
            self.crashes.pop_front();
        }
        self.crashes.push_back(Crash {
            generation,
            report,
            stderr,
        });
    }
}

// === impl Stats ===

impl Stats {
    pub fn error(&mut self, code: i64) {
        self.errors += 1;
        match self.by_code.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => self.by_code.push((code, 1)),
        }
    }

    pub fn latency(&mut self, took: Duration) {
        let secs = took.as_secs_f64();
        let at = LATENCY_BUCKETS
            .iter()
            .position(|le| secs <= *le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[at] += 1;
        self.sum += secs;
        self.count += 1;
        if secs > self.max {
            self.max = secs;
        }
    }

    /// The `q` quantile, estimated from the histogram: the bucket that
    /// holds it, interpolated linearly between its bounds (the `+Inf`
    /// bucket's top is the slowest answer seen), never above that slowest.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).max(1.0);
        let mut below = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            if (below + n) as f64 >= rank {
                let lo = if i == 0 { 0.0 } else { LATENCY_BUCKETS[i - 1] };
                let hi = LATENCY_BUCKETS
                    .get(i)
                    .copied()
                    .unwrap_or(self.max)
                    .min(self.max);
                let lo = lo.min(hi);
                let within = (rank - below as f64) / *n as f64;
                return Some(lo + (hi - lo) * within);
            }
            below += n;
        }
        Some(self.max)
    }

    fn latency_row(&self) -> Latency {
        let ms = |s: f64| (s * 1e6).round() / 1e3;
        Latency {
            p50_ms: self.quantile(0.5).map(ms),
            p99_ms: self.quantile(0.99).map(ms),
            buckets: self.buckets.to_vec(),
            sum_seconds: self.sum,
            count: self.count,
        }
    }
}

impl Hub {
    pub(crate) fn on_query(&mut self, query: Query) {
        match query {
            Query::Snapshot(tx) => {
                let _ = tx.send(self.snapshot());
            }
            Query::Server(name, tx) => {
                let Some(id) = self.find(&name) else {
                    let _ = tx.send(None);
                    return;
                };
                let detail = Box::new(self.detail(id));
                let def = &self.backends.by_id[&id].plan.def;
                // The shell reads the env file's keys and answers.
                self.effects.list.push(Effect::EnvKeys {
                    detail,
                    file: def.env_file.clone(),
                    wanted: def.env_keys.clone(),
                    reply: tx,
                });
            }
            Query::Stderr(name, generation, tx) => {
                let lines = self.find(&name).map(|id| {
                    let crashes = &self.backends.by_id[&id].obs.crashes;
                    let crash = match generation {
                        Some(g) => crashes.iter().find(|c| c.generation == g),
                        None => crashes.back(),
                    };
                    crash.map(|c| c.stderr.clone()).unwrap_or_default()
                });
                let _ = tx.send(lines);
            }
            Query::Record(name, kind, message, tx) => {
                let found = self.find(&name);
                if let Some(id) = found {
                    self.record(id, kind, message);
                }
                let _ = tx.send(found.is_some());
            }
            Query::Act(name, action, tx) => {
                let answer = self.act(&name, action);
                let _ = tx.send(answer);
            }
            Query::Approve(name, picks, tx) => self.approve(&name, picks, tx),
        }
    }

    /// The configured backend named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<BackendId> {
        self.backends.order.iter().copied().find(|id| {
            self.backends
                .by_id
                .get(id)
                .is_some_and(|b| b.plan.name == name)
        })
    }

    /// Tells observers how many front sessions are open.
    pub(crate) fn publish_sessions(&mut self) {
        if self.settings.monitor.is_some() {
            self.effects.publish(MonitorEvent::Fronts {
                sessions: self.fronts.open.len(),
            });
        }
    }

    /// A configured server's row, with its clients' processes when it is a
    /// per-client server.
    fn status(&self, id: BackendId) -> Option<ServerStatus> {
        let mut status = status_of(self.backends.by_id.get(&id)?);
        let twin = self.backends.twins.get(&id);
        if let Some(twin) = twin.and_then(|t| self.backends.by_id.get(t)) {
            status.in_flight += twin.in_flight;
            status.twin = Some(crate::monitor::TwinStatus {
                state: state_of(twin),
                pid: worker_of(twin).pid(),
            });
        }
        let rows: Vec<(u64, ServerStatus)> = self
            .clients_of(id)
            .into_iter()
            .filter_map(|(client, i)| Some((client, status_of(self.backends.by_id.get(&i)?))))
            .collect();
        for (client, row) in &rows {
            status.in_flight += row.in_flight;
            status.instances.push(InstanceStatus {
                client: *client,
                state: row.state,
                generation: row.generation,
                pid: row.pid,
                started_at_ms: row.started_at_ms,
                restarts: row.restarts,
                in_flight: row.in_flight,
            });
        }
        // The configured server of a per-client one rests while its
        // clients' processes run: the row says how they are. Ready when
        // one of them is; otherwise as the one that most needs a person
        // (waiting for authorization, failed, restarting, starting), with
        // its reason and its authorization link.
        if status.state == ServerState::Idle && !rows.is_empty() {
            let n = rows.len();
            let noun = if n == 1 { "client" } else { "clients" };
            if rows.iter().any(|(_, row)| row.state == ServerState::Ready) {
                status.state = ServerState::Ready;
                status.detail = Some(format!("a process of its own for each client: {n} {noun}"));
            } else if let Some((client, row)) =
                rows.iter().max_by_key(|(_, row)| urgency(row.state))
            {
                status.state = row.state;
                let why = row.detail.clone().unwrap_or_else(|| {
                    serde_json::to_value(row.state)
                        .ok()
                        .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
                        .unwrap_or_default()
                });
                status.detail = Some(format!("client {client}'s process: {why}"));
                status.auth_url.clone_from(&row.auth_url);
                status.auth_reason.clone_from(&row.auth_reason);
                status.next_try_at_ms = row.next_try_at_ms;
            }
        }
        Some(status)
    }

    fn snapshot(&self) -> Snapshot {
        let servers = self
            .backends
            .order
            .iter()
            .filter_map(|id| self.status(*id))
            .collect();
        Snapshot {
            servers,
            sessions: self.fronts.open.len(),
        }
    }

    fn detail(&self, id: BackendId) -> ServerDetail {
        let b = &self.backends.by_id[&id];
        let list = |i: usize| -> Vec<Value> {
            b.lists[i]
                .iter()
                .flatten()
                .filter_map(|item| serde_json::from_str(item.raw.get()).ok())
                .collect()
        };
        ServerDetail {
            status: self.status(id).unwrap_or_else(|| status_of(b)),
            tools: list(0),
            prompts: list(1),
            resources: list(2),
            errors_by_code: b.obs.stats.by_code.iter().copied().collect(),
            events: b.obs.events.iter().cloned().collect(),
            last_crash: b.obs.crashes.back().map(|c| c.report.clone()),
            crashes: b
                .obs
                .crashes
                .iter()
                .rev()
                .map(|c| c.report.clone())
                .collect(),
            config_file: b.plan.def.source.clone(),
            env_file: b.plan.def.env_file.clone(),
            // Read by the caller, off the owning task.
            env_keys: Vec::new(),
            quarantine: self.quarantine_of(id),
        }
    }

    // === actions ===

    fn act(&mut self, name: &str, action: Action) -> Result<(), ActionError> {
        let Some(id) = self.find(name) else {
            return Err(ActionError::NoSuchServer(name.to_owned()));
        };
        let b = &self.backends.by_id[&id];
        if matches!(b.run, Run::Off(Off::Disabled)) {
            return Err(ActionError::Refused(format!(
                "the server `{name}` is disabled in its config entry: enable it first"
            )));
        }
        let running = b.live().is_some();
        match action {
            Action::Reload => {
                if self.reload_backend(name, &crate::hub::ReloadCause::Asked) == 0 {
                    return Err(ActionError::Refused(format!(
                        "the server `{name}` is not running: there is nothing to reload (start it instead)"
                    )));
                }
            }
            Action::Restart if running => {
                self.drop_instances_from(id, "a person asked for a restart");
                self.restart_backend(id, "a person asked for a restart");
            }
            Action::Restart | Action::Start => {
                if running && !b.is_failed() {
                    return Ok(());
                }
                if running {
                    // Failed, with its session refusing: a fresh session.
                    self.stop_backend(id, "a person asked for a start", Off::Idle(Start::Fresh));
                }
                let b = self.backends.by_id.get_mut(&id).expect("found above");
                b.run = Run::Off(Off::Idle(Start::Fresh));
                self.record(id, EventKind::Started, "started by a person");
                self.start_backend(id);
                self.remerge_all();
            }
            Action::Stop => {
                if matches!(b.run, Run::Off(Off::Stopped)) {
                    return Ok(());
                }
                self.drop_instances_from(id, "it was stopped by a person");
                self.stop_backend(id, "it was stopped by a person", Off::Stopped);
                self.record(id, EventKind::Stopped, "stopped by a person");
                self.remerge_all();
            }
        }
        Ok(())
    }

    // === recording ===

    /// Adds an event to a backend's ring and tells observers.
    pub(crate) fn record(&mut self, id: BackendId, kind: EventKind, message: impl Into<String>) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let event = EventRecord {
            at_ms: now_ms(),
            kind,
            generation: b.obs.generation,
            message: one_line(message.into()),
        };
        if b.obs.events.len() == EVENTS_KEPT {
            b.obs.events.pop_front();
        }
        b.obs.events.push_back(event.clone());
        if self.settings.monitor.is_some() {
            self.effects.publish(MonitorEvent::Event {
                server: b.plan.name.clone(),
                event,
            });
        }
    }

    /// What a backend's session said of its worker: the live backend's
    /// worker follows it, and its history records it.
    pub(crate) fn observe_session(&mut self, id: BackendId, event: &SessionEvent) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let Run::Live(live) = &mut b.run else {
            return;
        };
        let obs = &mut b.obs;
        let (kind, message) = match event {
            SessionEvent::Starting { generation, pid } => {
                obs.generation = Some(live.base + generation);
                // A new generation ends a reload.
                live.worker = Worker::Starting { pid: *pid };
                match live.next {
                    Start::Fresh => live.next = Start::Restart,
                    Start::Restart => obs.restarts += 1,
                }
                (EventKind::Starting, format!("starting{}", pid_text(*pid)))
            }
            SessionEvent::Ready { pid, .. } => {
                let pid = pid.or(live.worker.pid());
                live.worker.set(Worker::Ready {
                    pid,
                    since_ms: Some(now_ms()),
                });
                (EventKind::Ready, format!("ready{}", pid_text(pid)))
            }
            SessionEvent::AuthPending { reason, .. } => (
                EventKind::AuthPending,
                match reason {
                    Some(reason) => format!(
                        "waiting for a person to authorize it: {reason} (the link is on its row)"
                    ),
                    None => {
                        "waiting for a person to authorize it (the link is on its row)".to_owned()
                    }
                },
            ),
            SessionEvent::Authorized { .. } => (EventKind::Authorized, "authorized".to_owned()),
            SessionEvent::StderrTail { generation, lines } => {
                live.tail = Some(Tail {
                    generation: *generation,
                    lines: lines.clone(),
                });
                return;
            }
            SessionEvent::Exited { generation, data } => {
                let stderr = live
                    .tail
                    .take()
                    .filter(|t| t.generation == *generation)
                    .map(|t| t.lines)
                    .unwrap_or_default();
                if matches!(live.worker, Worker::Reloading(_)) {
                    live.worker.set(Worker::Starting { pid: None });
                    (EventKind::Exited, "stopped for a reload".to_owned())
                } else {
                    let message = exit_text(data);
                    obs.crashed(live.base + generation, data, stderr);
                    // A session restarts an exit by itself (`always`), but
                    // not a spawn that failed: that waits for a request.
                    let restarting = b.plan.session.restart == RestartMode::Always
                        && data.phase != Some(CrashPhase::Spawn);
                    live.worker = Worker::Down {
                        detail: message.clone(),
                        restarting,
                        next_try_at_ms: None,
                    };
                    (EventKind::Exited, message)
                }
            }
            SessionEvent::Restarting { delay, .. } => {
                let at = now_ms() + u64::try_from(delay.as_millis()).unwrap_or(u64::MAX / 2);
                let detail = live.worker.down().unwrap_or("it exited").to_owned();
                live.worker.set(Worker::Down {
                    detail,
                    restarting: true,
                    next_try_at_ms: (!delay.is_zero()).then_some(at),
                });
                let message = if delay.is_zero() {
                    "restarting now".to_owned()
                } else {
                    format!("restarting in {}", format_uptime(*delay))
                };
                (EventKind::Restarting, message)
            }
            SessionEvent::Failed { data } => {
                // A failed session runs no worker until it recovers.
                live.worker.gone();
                if let Worker::Down { restarting, .. } = match &mut live.worker {
                    Worker::Reloading(inner) => &mut **inner,
                    worker => worker,
                } {
                    *restarting = false;
                }
                (EventKind::Failed, data.reason.clone())
            }
            SessionEvent::Recovered => (
                EventKind::Recovered,
                "its failed state is over: it may be started again".to_owned(),
            ),
            _ => return,
        };
        self.record(id, kind, message);
    }

    /// A reload was asked of a running backend.
    pub(crate) fn observe_reload(&mut self, id: BackendId, why: &str) {
        if let Some(live) = self.backends.by_id.get_mut(&id).and_then(Backend::live_mut) {
            live.worker.reload();
        }
        self.record(id, EventKind::Reloading, format!("reloading: {why}"));
    }

    // === publishing ===

    /// Publishes every row that changed since it was last published: state
    /// changes at once, counter changes at most every [`THROTTLE`].
    pub(crate) fn publish_changes(&mut self) {
        let Some(tap) = self.settings.monitor.clone() else {
            return;
        };
        if tap.0.receiver_count() == 0 {
            return;
        }
        let mut now = None;
        for &id in &self.backends.order {
            let mut instances = self.clients_of(id);
            // A twin's changes show in its server's row too.
            if let Some(twin) = self.backends.twins.get(&id) {
                instances.push((TWIN_ROW, *twin));
            }
            let instance_keys: Vec<(u64, RowKey)> = instances
                .iter()
                .filter_map(|(client, i)| Some((*client, row_key(self.backends.by_id.get(i)?))))
                .collect();
            let instances_dirty = instances
                .iter()
                .any(|(_, i)| self.backends.by_id.get(i).is_some_and(|b| b.obs.dirty));
            let Some(b) = self.backends.by_id.get_mut(&id) else {
                continue;
            };
            let key = row_key(b);
            let changed =
                b.obs.published != Some(key) || b.obs.published_instances != instance_keys;
            if !changed && !b.obs.dirty && !instances_dirty {
                continue;
            }
            let now = *now.get_or_insert_with(Instant::now);
            if !changed {
                let due = b.obs.last_published.map_or(now, |at| at + THROTTLE);
                if due > now {
                    if !b.obs.flush_armed {
                        b.obs.flush_armed = true;
                        self.effects.arm(Timer::Publish(id), due);
                    }
                    continue;
                }
            }
            b.obs.published = Some(key);
            b.obs.published_instances = instance_keys;
            b.obs.dirty = false;
            b.obs.last_published = Some(now);
            for (_, i) in &instances {
                if let Some(instance) = self.backends.by_id.get_mut(i) {
                    instance.obs.dirty = false;
                }
            }
            if let Some(status) = self.status(id) {
                self.effects.publish(MonitorEvent::Server {
                    status: Box::new(status),
                });
            }
        }
    }

    /// A throttled row's time has come; [`Hub::publish_changes`] sends it.
    pub(crate) fn on_publish_timer(&mut self, id: BackendId) {
        if let Some(b) = self.backends.by_id.get_mut(&id) {
            b.obs.flush_armed = false;
        }
    }

    /// A server left the configuration.
    pub(crate) fn publish_removed(&mut self, name: &str) {
        if self.settings.monitor.is_some() {
            self.effects.publish(MonitorEvent::Removed {
                server: name.to_owned(),
            });
        }
    }
}

/// The state a person sees, from the gateway's view of the backend's
/// session and what the session said of its worker.
fn state_of(b: &Backend) -> ServerState {
    match &b.run {
        Run::Off(Off::Disabled) => ServerState::Disabled,
        Run::Off(Off::Stopped) => ServerState::Stopped,
        Run::Off(Off::Idle(_)) => ServerState::Idle,
        Run::Live(live) => match &live.phase {
            // Its initialize failed, but its session restarts it by itself
            // (it has not given up): that is what a person wants to see.
            Phase::Failed(_) if live.worker.restarting() => ServerState::Restarting,
            Phase::Failed(_) => ServerState::Failed,
            Phase::WaitingAuth(_) => ServerState::WaitingAuth,
            Phase::Starting | Phase::Ready => match &live.worker {
                Worker::Reloading(_) => ServerState::Reloading,
                Worker::Down {
                    restarting: true, ..
                } => ServerState::Restarting,
                Worker::Down { .. } => ServerState::Idle,
                Worker::Ready { .. } if live.phase == Phase::Ready => ServerState::Ready,
                Worker::None | Worker::Starting { .. } | Worker::Ready { .. } => {
                    ServerState::Starting
                }
            },
        },
    }
}

/// What a live backend's session said of its worker; nothing when it is
/// off.
fn worker_of(b: &Backend) -> &Worker {
    const NONE: &Worker = &Worker::None;
    b.live().map_or(NONE, |l| &l.worker)
}

/// How much a state needs a person, to pick which of a per-client
/// server's processes its row shows when none is ready.
fn urgency(state: ServerState) -> u8 {
    match state {
        ServerState::WaitingAuth => 4,
        ServerState::Failed => 3,
        ServerState::Restarting => 2,
        ServerState::Starting | ServerState::Reloading => 1,
        ServerState::Ready | ServerState::Idle | ServerState::Stopped | ServerState::Disabled => 0,
    }
}

fn row_key(b: &Backend) -> RowKey {
    RowKey {
        state: state_of(b),
        generation: b.obs.generation,
        pid: worker_of(b).pid(),
        restarts: b.obs.restarts,
        next_try_at_ms: worker_of(b).next_try_at_ms(),
        revision: b.obs.revision,
    }
}

/// [`ServerStatus::transport`] of a definition.
fn transport_name(def: &mcpvisor_config::ServerDef) -> &'static str {
    match (def.is_remote(), def.transport) {
        (false, _) => "stdio",
        (true, RemoteTransport::Sse) => "sse",
        (true, RemoteTransport::Http | RemoteTransport::Auto) => "http",
    }
}

/// What a server waiting for authorization asks, when it waits.
fn auth_wait(b: &Backend) -> Option<&AuthWait> {
    match b.phase() {
        Some(Phase::WaitingAuth(wait)) => Some(wait),
        _ => None,
    }
}

/// A backend's row: a function of the backend alone (its state, its plan,
/// its counters and history).
pub(crate) fn status_of(b: &Backend) -> ServerStatus {
    let state = state_of(b);
    let worker = worker_of(b);
    let (next_try_at_ms, down) = (worker.next_try_at_ms(), worker.down());
    let detail = match (b.phase(), state) {
        (Some(Phase::Failed(data)), ServerState::Failed) => Some(
            data.get("reason")
                .and_then(Value::as_str)
                .unwrap_or("it keeps failing")
                .to_owned(),
        ),
        (_, ServerState::Restarting) => {
            let last = down.unwrap_or("it exited");
            Some(match next_try_at_ms {
                Some(at) => {
                    let wait = Duration::from_millis(at.saturating_sub(now_ms()));
                    format!("{last}; restarting in {}", format_uptime(wait))
                }
                None => format!("{last}; restarting"),
            })
        }
        (_, ServerState::Idle) => match down {
            Some(last) => Some(format!("{last}; starts again on its next call")),
            None if b.plan.lazy => Some("starts on its first call".to_owned()),
            None => None,
        },
        (_, ServerState::Reloading) => {
            Some("reloading: replaced once it has answered what it holds".to_owned())
        }
        (_, ServerState::WaitingAuth) => Some(match auth_wait(b).and_then(|w| w.reason.as_ref()) {
            Some(reason) => format!("waiting for a person to authorize it: {reason}"),
            None => "waiting for a person to authorize it".to_owned(),
        }),
        (_, ServerState::Stopped) => Some("stopped by a person; start it to use it".to_owned()),
        (_, ServerState::Disabled) => Some("disabled in its config entry".to_owned()),
        _ => None,
    }
    .map(one_line);
    let auth_url = auth_wait(b).map(|w| w.url.clone());
    let auth_reason = auth_wait(b).and_then(|w| w.reason.clone());
    let def = &b.plan.def;
    let command = match &def.url {
        // Scheme and host only: a path or query may carry a key.
        Some(url) => {
            let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            format!("{scheme}://{host}")
        }
        None => std::iter::once(def.command.as_str())
            .chain(def.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let next_try_at_ms = (state == ServerState::Restarting)
        .then_some(next_try_at_ms)
        .flatten();
    let crashed = matches!(state, ServerState::Failed | ServerState::Restarting)
        || state == ServerState::Idle && down.is_some();
    let stderr = match b.obs.crashes.back() {
        Some(crash) if crashed => {
            let skip = crash
                .stderr
                .len()
                .saturating_sub(crate::monitor::ROW_STDERR_LINES);
            crash.stderr[skip..].to_vec()
        }
        _ => Vec::new(),
    };
    ServerStatus {
        name: b.plan.name.clone(),
        state,
        detail,
        next_try_at_ms,
        auth_url,
        auth_reason,
        lazy: b.plan.lazy,
        transport: transport_name(def),
        command,
        generation: b.obs.generation,
        pid: worker.pid(),
        started_at_ms: worker.since_ms(),
        restarts: b.obs.restarts,
        calls: b.obs.stats.calls,
        errors: b.obs.stats.errors,
        in_flight: b.in_flight,
        latency: b.obs.stats.latency_row(),
        instances: Vec::new(),
        twin: None,
        stderr,
        quarantined: b.held.len(),
    }
}

/// An exit in one line: "exited with code 3 during serving after 1.2s",
/// "stopped during initialize after 1m00s: it did not answer initialize
/// within 60s".
fn exit_text(data: &ErrorData) -> String {
    if data.phase == Some(CrashPhase::Spawn) {
        return format!("could not start: {}", data.reason);
    }
    let mut line = match &data.exit {
        Some(exit @ (ExitKind::Code(_) | ExitKind::Signal(..))) => exit.to_string(),
        _ => "stopped".to_owned(),
    };
    if let Some(phase) = data.phase {
        line.push_str(&format!(" during {phase}"));
    }
    if let Some(ms) = data.uptime_ms {
        line.push_str(&format!(
            " after {}",
            format_uptime(Duration::from_millis(ms))
        ));
    }
    // "it exited with exit code 3" says again what the exit says.
    if !data.reason.is_empty() && !data.reason.starts_with("it exited") {
        line.push_str(": ");
        line.push_str(&data.reason);
    }
    line
}

fn pid_text(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

/// The first line of `text`, at most 300 characters.
fn one_line(text: String) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.len() == text.len() && line.chars().count() <= 300 {
        return text;
    }
    let mut cut: String = line.chars().take(300).collect();
    if cut.len() < line.len() {
        cut.push('…');
    }
    cut
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_crashes_are_kept_each_with_its_stderr_the_oldest_dropped_first() {
        let mut obs = Observed::default();
        for generation in 1..=CRASHES_KEPT as u64 + 2 {
            let lines = vec![format!("crash {generation}")];
            obs.crashed(generation, &ErrorData::reason("exited"), lines);
        }
        let kept: Vec<u64> = obs.crashes.iter().map(|c| c.generation).collect();
        assert_eq!(kept, (3..=CRASHES_KEPT as u64 + 2).collect::<Vec<_>>());
        for c in &obs.crashes {
            assert_eq!(c.stderr, [format!("crash {}", c.generation)]);
            assert_eq!(c.report["generation"], c.generation);
            assert!(c.report.get("stderr").is_none(), "{}", c.report);
            assert!(c.report["at_ms"].as_u64().is_some(), "{}", c.report);
        }
    }

    #[test]
    fn quantiles_come_from_the_buckets_and_never_pass_the_slowest() {
        let mut s = Stats::default();
        assert_eq!(s.quantile(0.5), None);
        for _ in 0..99 {
            s.latency(Duration::from_micros(1500));
        }
        s.latency(Duration::from_secs(2));
        let p50 = s.quantile(0.5).expect("answers were timed");
        assert!((0.001..=0.0025).contains(&p50), "{p50}");
        let p99 = s.quantile(0.99).expect("answers were timed");
        assert!(p99 <= 0.0025, "{p99}");
        let top = s.quantile(1.0).expect("answers were timed");
        assert!((1.0..=2.0).contains(&top), "{top}");
        assert_eq!(s.count, 100);
        assert_eq!(s.buckets.iter().sum::<u64>(), 100);
        s.latency(Duration::from_secs(60));
        assert_eq!(s.buckets[LATENCY_BUCKETS.len()], 1);
        assert!(s.quantile(1.0).expect("answers were timed") <= 60.0);
    }

    #[test]
    fn a_row_names_the_transport_its_entry_asks_for() {
        use mcpvisor_config::ServerDef;
        let remote = |transport| ServerDef {
            transport,
            ..ServerDef::remote("r", "https://example.com/mcp")
        };
        assert_eq!(transport_name(&ServerDef::new("s", "server")), "stdio");
        assert_eq!(transport_name(&remote(RemoteTransport::Auto)), "http");
        assert_eq!(transport_name(&remote(RemoteTransport::Http)), "http");
        assert_eq!(transport_name(&remote(RemoteTransport::Sse)), "sse");
    }

    #[test]
    fn error_codes_are_counted_each() {
        let mut s = Stats::default();
        s.error(-32010);
        s.error(-32010);
        s.error(-32602);
        assert_eq!(s.errors, 3);
        assert_eq!(s.by_code, vec![(-32010, 2), (-32602, 1)]);
    }

    #[test]
    fn an_exit_is_one_line_with_its_cause_when_the_exit_does_not_say_it() {
        let crash = ErrorData {
            reason: "it exited with exit code 3".into(),
            phase: Some(CrashPhase::Serving),
            exit: Some(ExitKind::Code(3)),
            uptime_ms: Some(1200),
            ..ErrorData::default()
        };
        assert_eq!(
            exit_text(&crash),
            "exited with code 3 during serving after 1.2s"
        );
        let stall = ErrorData {
            reason: "it did not answer initialize within 60s".into(),
            phase: Some(CrashPhase::Initialize),
            exit: None,
            uptime_ms: Some(60_000),
            ..ErrorData::default()
        };
        assert_eq!(
            exit_text(&stall),
            "stopped during initialize after 1m00s: it did not answer initialize within 60s"
        );
        let spawn = ErrorData::spawn("no such program: nope", Some(1));
        assert_eq!(exit_text(&spawn), "could not start: no such program: nope");
    }

    #[test]
    fn one_line_keeps_the_first_line_only() {
        assert_eq!(one_line("a\nb".into()), "a");
        assert_eq!(one_line("short".into()), "short");
        assert_eq!(one_line("x".repeat(400)).chars().count(), 301);
    }
}
