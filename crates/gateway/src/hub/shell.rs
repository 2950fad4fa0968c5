//! The hub's async shell: it owns the `select!`, the stdio client's pipes,
//! the backends' sessions (polled in this task: `sessions.rs`) and the
//! channel their status events come on, the timers' queue, the list
//! cache's writes and the env file reads, and carries out what each turn
//! of the core asks for (see the module docs of `hub`).

use mcpvisor_runner::ServerSpec;
use mcpvisor_session::Gate;
use mcpvisor_session::writer::{Streaks, Won};
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::mpsc;
use tokio_util::time::{DelayQueue, delay_queue};

use super::backend::{BackendId, BackendSpawner};
use super::pinning::{PinJob, PinsRead};
use super::sessions::Sessions;
use super::{
    Control, Effect, FromSession, Hub, Incoming, Input, Outcome, ServerPlan, Settings,
    StartSession, Timer, TimerKey, stdio,
};
use crate::fronts::FrontCommand;
use crate::monitor::{EnvKey, Tap};

/// Room in the channel the backends' sessions report on.
const EVENTS: usize = 4096;
/// The largest env file read to list its keys.
const ENV_FILE_MAX: u64 = 1024 * 1024;

/// What the shell owns beside the core.
///
/// Invariants: `sessions` runs a session from the core's
/// [`Effect::Start`] until its [`Effect::Stop`] of the same epoch, and then
/// until it ends or its stop bound passes (the core stops every live
/// session before it ends, and the shell waits for them: no server
/// outlives the gateway); `armed` holds each armed timer until it runs out
/// or is disarmed.
struct Shell {
    /// The sessions' status events, the pin task's reads and the
    /// controls, in one channel: the loop's `select!` polls one receiver
    /// for them, not three. (The sessions' lines come from `sessions`.)
    events_tx: mpsc::Sender<Input>,
    events_rx: mpsc::Receiver<Input>,
    timers: DelayQueue<(TimerKey, Timer)>,
    /// The armed timers' places in `timers`, to disarm them.
    armed: HashMap<TimerKey, delay_queue::Key>,
    /// The backends' sessions, polled in this task.
    sessions: Sessions,
    monitor: Option<Tap>,
    /// Makes the sessions' spawners in place of the configured commands.
    spawners: Option<super::Spawners>,
    /// The room the core's effects are taken into, used again each turn.
    effects: Vec<Effect>,
    /// The pin store's jobs, done one at a time by a task of their own
    /// (`None`: nothing is pinned).
    pin_jobs: Option<mpsc::Sender<PinJob>>,
    /// Results of jobs the pin task could not take (its queue was full),
    /// handed to the core before anything else.
    pins_refused: std::collections::VecDeque<PinsRead>,
    /// `events_rx` and `timers` are polled only when they may have
    /// something (see [`Gate`]): the loop's `select!` goes through every
    /// branch each time the task waits, twice a call.
    events_gate: Gate,
    timers_gate: Gate,
}

/// Room in the pin task's queue of jobs.
const PIN_JOBS: usize = 256;

/// Runs the core until it ends or a shutdown is asked for, then stops
/// every server. With `stdio`, the stdio client's pipes are read and
/// written here (it is then the primary front).
pub(super) async fn serve(
    settings: Settings,
    servers: Vec<ServerPlan>,
    mut fronts: mpsc::Receiver<FrontCommand>,
    control: mpsc::Receiver<Control>,
    primary: Option<super::FrontId>,
    stdio: Option<stdio::Stdio>,
) -> Outcome {
    let (mut shell, mut hub) = Shell::open(settings, control, primary);
    // The stdio client's pipes are the loop's own, not the core's: they
    // are neither `Sync` nor needed anywhere else.
    let mut stdio = stdio;
    if let Some(front) = stdio.as_ref().map(|s| s.front) {
        hub.open_stdio(front);
    }
    hub.add_servers(servers);
    shell.carry_out(&mut hub);
    let mut fronts_open = true;
    let mut slices = mcpvisor_session::writer::Slices::default();
    let mut streaks = Streaks::default();
    let mut fronts_gate = Gate::default();
    let outcome = loop {
        if let Some(outcome) = hub.ended(fronts_open) {
            break outcome;
        }
        let drain = hub.next_drain_deadline();
        let stdio_readable = stdio.as_ref().is_some_and(stdio::Stdio::readable);
        let stdio_blocked = stdio.as_ref().is_some_and(|s| s.out.is_blocked());
        let refused = shell.pins_refused.pop_front();
        let mut won = Won::Other;
        let input = if let Some(read) = refused {
            Some(Input::Pins(Box::new(read)))
        } else {
            // In a fixed order, the likeliest first: the sessions' lines
            // (answers go out before more is read), the stdio client, then
            // the rest; `Streaks` keeps the first two from starving the
            // others.
            tokio::select! {
                biased;
                input = std::future::poll_fn(|cx| shell.sessions.poll_next(cx)), if streaks.first_open() => {
                    won = Won::First;
                    Some(input)
                }
                event = stdio::next(&mut stdio, stdio_readable, stdio_blocked), if (stdio_readable || stdio_blocked) && streaks.second_open() => {
                    won = Won::Second;
                    match (stdio.as_mut(), event) {
                        (Some(s), stdio::Event::Read(frame)) => Some(Input::Stdio(s.input(frame))),
                        (Some(s), stdio::Event::Written(written)) => s.written(written).map(Input::Stdio),
                        (None, _) => None,
                    }
                }
                command = std::future::poll_fn(|cx| fronts_gate.poll(cx, |cx| fronts.poll_recv(cx))), if fronts_open => match command {
                    Some(command) => Some(Input::Front(command)),
                    None => {
                        fronts_open = false;
                        None
                    }
                },
                Some(event) = std::future::poll_fn(|cx| shell.events_gate.poll(cx, |cx| shell.events_rx.poll_recv(cx))) => match event {
                    Input::Control(Control::Shutdown) => break Outcome::Shutdown,
                    event => Some(event),
                },
                Some(expired) = std::future::poll_fn(|cx| shell.timers_gate.poll(cx, |cx| shell.timers.poll_expired(cx))), if !shell.timers.is_empty() => {
                    let (key, timer) = expired.into_inner();
                    shell.armed.remove(&key);
                    Some(Input::Timer(timer))
                }
                () = async { if let Some(at) = drain { tokio::time::sleep_until(at).await } }, if drain.is_some() => Some(Input::Drain),
                // Only when a streak held a branch back and nothing else
                // was ready: the streaks start again.
                () = std::future::ready(()), if streaks.held() => None,
            }
        };
        streaks.took(won);
        // Until the next wait, what wakes a session only marks it for the
        // next pass of the `select!`.
        shell.sessions.enter();
        if let Some(input) = input {
            hub.handle(input);
        }
        hub.end_turn();
        shell.carry_out(&mut hub);
        // A burst is handled in slices (see `Slices`): while more input
        // waits (a line in the stdio client's buffer, a front's command, a
        // backend's line), what is queued for the stdio client goes out
        // and the runtime's other tasks (the HTTP fronts) get their turn
        // every few inputs. (The sessions are polled first in each pass, so
        // a server works on a burst's first lines while the rest is read.)
        let stdio_line = stdio.as_ref().is_some_and(|s| s.readable() && s.has_line());
        let backend_lines = shell.sessions.has_output() || !shell.events_rx.is_empty();
        let waiting = stdio_line || backend_lines || (fronts_open && !fronts.is_empty());
        let slice_done = slices.turn(waiting);
        // What is queued for the stdio client is written once no more of
        // what was read from it, or of the backends' lines, waits to be
        // handled, or at the end of a slice: a burst goes out in a few
        // writes.
        if let Some(s) = stdio.as_mut() {
            if slice_done || !(stdio_line || backend_lines) {
                s.write(&mut hub).await;
                shell.carry_out(&mut hub);
            }
        }
        if slice_done {
            shell.sessions.leave();
            tokio::task::yield_now().await;
        }
    };
    // Open listens end gracefully: answered, before the servers stop.
    hub.close_listens();
    hub.stop_all();
    shell.carry_out(&mut hub);
    // Each stop is bounded by its session's own stop timeouts.
    shell.sessions.finished().await;
    if let Some(s) = stdio.as_mut() {
        s.flush(&mut hub).await;
    }
    outcome
}

// === impl Shell ===

impl Shell {
    /// The shell and its core before any server is added: the controls'
    /// relay, and the pin store read and its task started.
    fn open(
        settings: Settings,
        control: mpsc::Receiver<Control>,
        primary: Option<super::FrontId>,
    ) -> (Shell, Hub) {
        let (events_tx, events_rx) = mpsc::channel(EVENTS);
        // Controls are few: a task hands them to the one channel.
        tokio::spawn(relay_controls(control, events_tx.clone()));
        let pin_store = settings.pins.clone();
        let mut shell = Shell {
            events_tx,
            events_rx,
            timers: DelayQueue::new(),
            armed: HashMap::default(),
            sessions: Sessions::default(),
            monitor: settings.monitor.clone(),
            spawners: settings.spawners.clone(),
            effects: Vec::new(),
            pin_jobs: None,
            pins_refused: Default::default(),
            events_gate: Gate::default(),
            timers_gate: Gate::default(),
        };
        let mut hub = Hub::new(settings, primary);
        if let Some(store) = pin_store {
            // Read before the first merge: the lists cached for lazy servers
            // are merged at once, and must be held back as the store says.
            hub.load_pins(store.load());
            let (jobs_tx, jobs_rx) = mpsc::channel(PIN_JOBS);
            tokio::spawn(pin_task(store, jobs_rx, shell.events_tx.clone()));
            shell.pin_jobs = Some(jobs_tx);
        }
        (shell, hub)
    }

    /// Carries out what the core asked for since the last call, in order.
    fn carry_out(&mut self, hub: &mut Hub) {
        if !hub.take_effects(&mut self.effects) {
            return;
        }
        let mut effects = std::mem::take(&mut self.effects);
        for effect in effects.drain(..) {
            match effect {
                Effect::Start(start) => self.start(*start),
                Effect::Stop {
                    backend,
                    epoch,
                    inlet,
                } => self.sessions.stop(backend, epoch, || inlet.shut()),
                Effect::Arm { key, timer, at } => {
                    let place = self.timers.insert_at((key, timer), at);
                    self.armed.insert(key, place);
                    self.timers_gate.open();
                }
                Effect::Disarm(key) => {
                    if let Some(place) = self.armed.remove(&key) {
                        self.timers.try_remove(&place);
                        self.timers_gate.open();
                    }
                }
                Effect::Publish(event) => {
                    if let Some(tap) = &self.monitor {
                        tap.publish(event);
                    }
                }
                // Written in the loop, as small as a server's lists are:
                // the next start of a lazy server reads what was written.
                Effect::StoreCache(store) => {
                    if let Err(e) = store.cache.put(&store.key, &store.lists) {
                        tracing::debug!(server = %store.server, error = %e, "list cache not written");
                    }
                }
                Effect::Pins(job) => self.pin_job(job),
                Effect::EnvKeys {
                    mut detail,
                    file,
                    wanted,
                    reply,
                } => {
                    // Read beside the loop, never in it: a slow disk does
                    // not hold up a single call.
                    tokio::spawn(async move {
                        if let Some(path) = file {
                            detail.env_keys = env_keys(&path, &wanted).await;
                        }
                        let _ = reply.send(Some(*detail));
                    });
                }
            }
        }
        self.effects = effects;
    }

    /// Hands a pin store job to the pin task; one it has no room for
    /// fails (an edit is not written, and the core is told).
    fn pin_job(&mut self, job: PinJob) {
        let Some(jobs) = &self.pin_jobs else {
            // Nothing is pinned (the core makes no edit then).
            return;
        };
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job)) => {
                if let PinJob::Edit(seq, edit) = job {
                    let why = "the pin store is behind: the edit is dropped".to_owned();
                    self.pins_refused.push_back(PinsRead {
                        through: 0,
                        file: Err(why.clone()),
                        failed: Some((seq, edit, why)),
                    });
                }
            }
        }
    }

    /// Starts a backend's session: its spawner from its plan, its lines
    /// and events into the shell's channel tagged with its epoch.
    fn start(&mut self, start: StartSession) {
        let StartSession {
            backend,
            epoch,
            plan,
            session,
        } = start;
        let spawner = match &self.spawners {
            Some(super::Spawners(make)) => BackendSpawner::Given(make(&plan)),
            None => {
                let spec = ServerSpec {
                    def: plan.def.clone(),
                    env_overrides: plan.env_overrides.clone(),
                };
                BackendSpawner::Configured(
                    mcpvisor_runner::spawner(&spec, &plan.session, plan.stderr)
                        .with_stderr_named(&plan.name),
                )
            }
        };
        let (sink, status) = mcpvisor_session::EventSink::channel(64);
        let output = Box::new(self.sessions.sink(backend, epoch));
        let (session, bound) = session.into_future(spawner, sink, output);
        // Every line the backend's session (and its processes) log names it.
        let span = tracing::info_span!("server", name = %plan.name);
        let session = tracing::Instrument::instrument(
            async move {
                session.await;
            },
            span,
        );
        self.sessions.insert(backend, epoch, session, bound);
        tokio::spawn(relay_status(backend, epoch, status, self.events_tx.clone()));
    }
}

/// Does the pin store's jobs in order and answers them with the store as
/// it is after them. Jobs queued while one is done are done before the
/// store is handed over, so that one parsed store answers them all (at a
/// many-server start each server's first approval is an edit: handed over
/// one by one, the parsed stores pile up while the hub takes the servers'
/// lines first). An edit that fails is answered at once, with the store as
/// it is. Ends when the shell drops its queue.
async fn pin_task(
    store: crate::pins::PinStore,
    mut jobs: mpsc::Receiver<PinJob>,
    done: mpsc::Sender<Input>,
) {
    let mut through = 0;
    while let Some(first) = jobs.recv().await {
        let mut job = Some(first);
        // The store after the jobs done so far, once one needs handing over.
        let mut file = None;
        while let Some(next) = job.take() {
            match next {
                PinJob::Read => file = Some(store.load()),
                PinJob::Edit(seq, edit) => {
                    through = seq;
                    match store.update(|file| file.apply(&edit)).await {
                        Ok((updated, ())) => file = Some(Ok(updated)),
                        Err(why) => {
                            let read = PinsRead {
                                through,
                                file: store.load(),
                                failed: Some((seq, edit, why)),
                            };
                            if done.send(Input::Pins(Box::new(read))).await.is_err() {
                                return;
                            }
                            file = None;
                        }
                    }
                }
            }
            job = jobs.try_recv().ok();
        }
        let Some(file) = file else { continue };
        let read = PinsRead {
            through,
            file,
            failed: None,
        };
        if done.send(Input::Pins(Box::new(read))).await.is_err() {
            return;
        }
    }
}

/// Hands the controls to the shell's channel, until their senders are gone
/// or the shell is.
async fn relay_controls(mut control: mpsc::Receiver<Control>, events: mpsc::Sender<Input>) {
    while let Some(control) = control.recv().await {
        if events.send(Input::Control(control)).await.is_err() {
            return;
        }
    }
}

/// Forwards one backend session's lifecycle events to the hub.
pub(crate) async fn relay_status(
    id: BackendId,
    epoch: u64,
    mut status: mpsc::Receiver<mcpvisor_session::SessionEvent>,
    events: mpsc::Sender<Input>,
) {
    while let Some(event) = status.recv().await {
        if events
            .send(Input::Backend(
                id,
                Incoming::Session(epoch, FromSession::Status(Box::new(event))),
            ))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The keys of an env file, each set or not: `wanted` (the entry's
/// `env_keys`) when there are any, else every key in the file. Values are
/// read by the parser and dropped here; none leaves this function.
async fn env_keys(path: &std::path::Path, wanted: &[String]) -> Vec<EnvKey> {
    let present: Vec<(String, bool)> = match read_small(path).await {
        Some(text) => match mcpvisor_config::secrets::parse_dotenv(&text, path) {
            Ok(pairs) => pairs
                .into_iter()
                .map(|(key, value)| {
                    let set = !value.expose().is_empty();
                    (key, set)
                })
                .collect(),
            Err(e) => {
                tracing::debug!(file = %path.display(), "env file not readable for its keys: {e}");
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    if wanted.is_empty() {
        return present
            .into_iter()
            .map(|(key, set)| EnvKey { key, set })
            .collect();
    }
    wanted
        .iter()
        .map(|key| EnvKey {
            key: key.clone(),
            set: present.iter().any(|(k, set)| k == key && *set),
        })
        .collect()
}

async fn read_small(path: &std::path::Path) -> Option<String> {
    let meta = tokio::fs::metadata(path).await.ok()?;
    if meta.len() > ENV_FILE_MAX {
        return None;
    }
    tokio::fs::read_to_string(path).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::DefinitionKind;
    use crate::pins::{Edit, PinStore};

    fn approve(tool: &str) -> Edit {
        Edit::Approve {
            server: "s".into(),
            defs: vec![(
                DefinitionKind::Tool,
                tool.into(),
                serde_json::json!({ "name": tool }),
            )],
            seen: vec![],
        }
    }

    fn read(input: Input) -> PinsRead {
        match input {
            Input::Pins(read) => *read,
            _ => panic!("not a pin store read"),
        }
    }

    #[tokio::test]
    async fn edits_queued_together_are_answered_by_one_read_and_a_failure_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = PinStore::at(dir.path().join("state"));
        let (jobs_tx, jobs_rx) = mpsc::channel(16);
        let (done_tx, mut done_rx) = mpsc::channel(16);
        for (seq, tool) in (1..).zip(["a", "b", "c"]) {
            jobs_tx
                .send(PinJob::Edit(seq, approve(tool)))
                .await
                .expect("queued");
        }
        let task = tokio::spawn(pin_task(store.clone(), jobs_rx, done_tx));
        let first = read(done_rx.recv().await.expect("a read"));
        assert_eq!(first.through, 3);
        assert!(first.failed.is_none());
        let approved = first.file.expect("readable").servers["s"]
            .approved
            .iter()
            .count();
        assert_eq!(approved, 3, "one read after all three edits");
        // A store that cannot be written: the failed edit is answered at
        // once, on its own.
        std::fs::remove_dir_all(dir.path().join("state")).expect("rm");
        std::fs::write(dir.path().join("state"), "not a directory").expect("write");
        jobs_tx
            .send(PinJob::Edit(4, approve("d")))
            .await
            .expect("queued");
        let failed = read(done_rx.recv().await.expect("a read"));
        assert_eq!(failed.through, 4);
        assert_eq!(failed.failed.as_ref().map(|(seq, _, _)| *seq), Some(4));
        assert!(done_rx.try_recv().is_err(), "nothing more for that edit");
        drop(jobs_tx);
        task.await.expect("ends once its queue is dropped");
    }
}
