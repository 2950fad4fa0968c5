//! Worker generations: start, handshake, reload, end, restart.
//!
//! A generation moves `Handshake -> Ready -> Dead`. The session's
//! [`WorkerState`] says which generation takes new traffic: the one
//! `Running`. A reload turns it `Draining`: it keeps serving what it holds
//! while new traffic waits; when it is idle, or the drain timeout passes, it
//! is retired and its successor starts. A generation that ends without being
//! asked counts towards crash-loop detection and is restarted per the policy.

use std::sync::{Arc, Mutex};

use crate::WorkerExit as Exit;
use mcpvisor_config::report::{CrashPhase, ErrorData, ExitKind, StderrTail};
use mcpvisor_jsonrpc::build;
use tokio::time::Instant;

use super::{
    ClientState, Generation, Phase, Session, Waiting, WorkerEvent, WorkerState, display_status,
};
use crate::events::SessionEvent;
use crate::reply;
use crate::spawner::{Spawner, WorkerIo, WorkerReporter};
use crate::table::{Owner, Req, Timer};
use crate::writer;

/// Why a generation is being retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// It ended or broke on its own (or mcpvisor stopped it as broken).
    Crash,
    /// A reload replaces it; the caller has already decided its successor.
    Reload,
}

/// Where new client traffic goes right now.
pub(crate) enum Route {
    Send(u64),
    Wait,
    /// Refused: the reason and the `error.data` to answer with.
    Refuse(String, ErrorData),
}

impl<S: Spawner> Session<S> {
    /// Decides where new traffic goes, starting a generation when none is
    /// running and nothing else is about to start one.
    pub(crate) fn route(&mut self) -> Route {
        let startable = matches!(
            self.worker,
            WorkerState::Idle | WorkerState::Starting { .. }
        );
        if startable {
            if let Err(reason) = self.start_generation() {
                return refuse_spawn(&reason);
            }
        }
        match &self.worker {
            WorkerState::Failed { report, .. } => {
                Route::Refuse(report.reason.clone(), report.clone())
            }
            WorkerState::Running(id)
                if self.waiting.is_empty()
                    && matches!(self.gens.get(id).map(|g| &g.phase), Some(Phase::Ready)) =>
            {
                Route::Send(*id)
            }
            WorkerState::Idle if startable => refuse_spawn("the MCP server is unavailable"),
            _ => Route::Wait,
        }
    }

    /// Moves to `next`, cancelling the timer the state left behind waited
    /// on. Not for the handler of that timer: a fired key may be reused.
    pub(crate) fn replace_worker(&mut self, next: WorkerState) {
        if let Some(key) = std::mem::replace(&mut self.worker, next).timer() {
            let _ = self.timers.try_remove(&key);
        }
    }

    /// Starts a generation (from `Idle` or `Starting`). A spawn failure is
    /// answered to everything waiting and returned for the request that
    /// asked, if any.
    pub(crate) fn start_generation(&mut self) -> Result<(), String> {
        let reload = match self.worker {
            WorkerState::Starting { reload } => reload,
            _ => None,
        };
        let id = self.next_generation;
        self.next_generation += 1;
        let reporter = WorkerReporter::new(id, self.events_tx.clone());
        let io = match self.spawner.spawn(id, reporter) {
            Ok(io) => io,
            Err(e) => {
                tracing::error!(generation = id, error = %e, "cannot start the MCP server");
                self.worker = WorkerState::Idle;
                self.quick_exits += 1;
                let data = ErrorData::spawn(e.0.clone(), Some(id));
                let exited = SessionEvent::Exited {
                    generation: id,
                    data: data.clone(),
                };
                self.report(exited);
                if self.quick_exits >= self.cfg.crash_loop_exits {
                    self.enter_failed(data);
                } else {
                    self.fail_waiting(data);
                }
                return Err(e.0);
            }
        };
        tracing::info!(generation = id, pid = io.pid, "started worker");
        self.report(SessionEvent::Starting {
            generation: id,
            pid: io.pid,
        });
        let mut generation = self.wire_up(id, io);
        generation.reload = reload;
        self.gens.insert(id, generation);
        self.replace_worker(WorkerState::Running(id));
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
                    g.phase = Phase::Handshake;
                }
                self.send_to(id, msg);
            }
            None => self.become_ready(id),
        }
        Ok(())
    }

    /// Starts the helper tasks of a new generation.
    fn wire_up(&mut self, id: u64, io: WorkerIo) -> Generation {
        let WorkerIo {
            stdin,
            stdout,
            pid,
            stop,
            exited,
            stderr_tail,
            unread,
        } = io;
        let stdin = writer::Outlet::new(stdin, Some(self.cfg.write_timeout));
        self.stdouts.push(id, stdout, self.cfg.max_message_bytes);
        let events = self.events_tx.clone();
        let watch = async move {
            let exit = exited.await;
            let _ = events.send((id, WorkerEvent::Exited(exit))).await;
        };
        tokio::spawn(tracing::Instrument::in_current_span(watch));
        Generation {
            phase: Phase::Ready,
            stdin,
            queued: 0,
            unread,
            unread_at_close: None,
            stop,
            pid,
            acks: false,
            stdout_closed: false,
            exit: None,
            exit_wait: None,
            started: Instant::now(),
            reload: None,
            stderr_tail,
            stray_stdout: Default::default(),
            init_result: None,
            auth: None,
            reported_ready: false,
            shook_hands: false,
            ready_at: None,
        }
    }

    /// The generation has its handshake (or needs none): release what waits.
    pub(crate) fn become_ready(&mut self, id: u64) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        g.phase = Phase::Ready;
        tracing::debug!(generation = id, "worker ready");
        while let Some(item) = self.waiting.pop_front() {
            match item {
                Waiting::Notification(msg) => {
                    self.send_to(id, msg);
                }
                Waiting::Request(wid) => {
                    if !self.dispatch(wid, id) {
                        // It waits again, and so does the rest.
                        return;
                    }
                }
            }
            if !matches!(self.worker, WorkerState::Running(g) if g == id) {
                // Sending failed and retired the generation; the rest waits.
                return;
            }
        }
        self.report_ready(id);
        if self.handshake.initialized {
            self.fetch_lists(id);
        }
    }

    /// Answers everything waiting for a worker with -32011 and `data`.
    pub(crate) fn fail_waiting(&mut self, data: ErrorData) {
        let reason = data.reason.clone();
        let items: Vec<_> = self.waiting.drain(..).collect();
        for item in items {
            if let Waiting::Request(wid) = item {
                if let Some(id) = self
                    .remove_req(wid)
                    .and_then(|r| r.client().map(|c| c.id.clone()))
                {
                    self.emit(reply::not_started(&id, &reason, Some(data.clone())));
                }
            }
        }
    }

    /// Fences generation `id`, stops its process, fails what it held and,
    /// when it ended on its own, decides what takes new traffic next. A
    /// reload decides that itself before it retires the old generation.
    pub(crate) fn retire(&mut self, id: u64, cause: String, exit: Option<Exit>, why: Why) {
        let Some(loss) = self.fence(id, cause, exit, why) else {
            return;
        };
        self.take_back(id);
        self.fail_held(id, &loss);
        self.withdraw_server_requests(id);
        if why == Why::Crash {
            self.after_loss(id, &loss);
        }
    }

    /// Marks generation `id` dead and asks its process to stop. Returns
    /// what its requests are failed with; `None` if it was already dead.
    fn fence(&mut self, id: u64, cause: String, exit: Option<Exit>, why: Why) -> Option<ErrorData> {
        let g = self.gens.get_mut(&id)?;
        let phase = match g.phase {
            Phase::Handshake => CrashPhase::Initialize,
            Phase::Ready => CrashPhase::Serving,
            Phase::Dead => return None,
        };
        // The first generation answers the client's own initialize. One
        // that never took it (its write failed, so it waits for the next
        // generation) still ended before the handshake was done.
        let handshake_done = self.init_result.is_some();
        let client_init_in_flight = self.reqs.values().any(|r| {
            (r.generation == Some(id) || !handshake_done && r.generation.is_none())
                && r.client().is_some_and(|c| c.initialize.is_some())
        });
        // A client of the handshake era whose `initialize` this worker
        // never accepted: it did not get past the handshake.
        let never_shook_hands = self.handshake.asked && !g.shook_hands;
        let phase = if client_init_in_flight || never_shook_hands {
            CrashPhase::Initialize
        } else {
            phase
        };
        g.phase = Phase::Dead;
        g.close_stdin();
        (g.stop)();
        if let Some(key) = g.exit_wait.take() {
            let _ = self.timers.try_remove(&key);
        }
        let exit = exit.or_else(|| g.exit.clone());
        let uptime = g.started.elapsed();
        let stray_stdout = std::mem::take(&mut g.stray_stdout);
        let stderr = self
            .cfg
            .stderr_in_errors
            .then(|| tail_lines(&g.stderr_tail));
        let requested = why == Why::Reload || exit.as_ref().is_some_and(|e| e.requested);
        if requested {
            tracing::info!(generation = id, pid = g.pid, cause = %cause, "worker stopped");
        } else {
            tracing::warn!(generation = id, pid = g.pid, cause = %cause, "worker stopped");
        }
        let tail = (!requested && self.status.is_active())
            .then(|| stderr.clone().unwrap_or_else(|| tail_lines(&g.stderr_tail)));
        let loss = ErrorData {
            generation: Some(id),
            reason: cause,
            phase: Some(phase),
            exit: Some(exit.map_or(ExitKind::Unknown, |e| e.status)),
            uptime_ms: Some(u64::try_from(uptime.as_millis()).unwrap_or(u64::MAX)),
            stderr,
            stray_stdout,
        };
        if let Some(lines) = tail {
            self.report(SessionEvent::StderrTail {
                generation: id,
                lines,
            });
        }
        self.report(SessionEvent::Exited {
            generation: id,
            data: loss.clone(),
        });
        Some(loss)
    }

    /// Closes generation `id`'s stdin outlet. The client requests that
    /// never reached it (none ever will now) wait for the next
    /// generation, ahead of what already waits, in the order they were sent:
    /// the server never saw them, so this is no replay. A cancelled one is
    /// done.
    pub(crate) fn take_back(&mut self, id: u64) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        let reached = g.close_stdin();
        let mut unsent: Vec<(u64, u64)> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.generation == Some(id))
            .filter_map(|(wid, r)| Some((r.client()?.seq, *wid)))
            .filter(|(seq, _)| *seq > reached)
            .collect();
        unsent.sort_unstable();
        for (_, wid) in unsent.into_iter().rev() {
            let Some(req) = self.reqs.get_mut(&wid) else {
                continue;
            };
            if req.client().is_some_and(|c| c.cancelled) {
                self.remove_req(wid);
                continue;
            }
            req.generation = None;
            if let Some(c) = req.client_mut() {
                c.seq = 0;
            }
            self.waiting.push_front(Waiting::Request(wid));
        }
    }

    /// Generation `id`'s worker says request `wid` never reached its server:
    /// [`Session::take_back`] will treat it as unsent when the generation
    /// is retired.
    pub(crate) fn on_undelivered(&mut self, id: u64, wid: u64) {
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        if req.generation != Some(id) {
            return;
        }
        if let Some(c) = req.client_mut() {
            c.seq = u64::MAX;
        }
    }

    /// Fails each request generation `id` held exactly once: -32010 to the
    /// client's, nothing for cancelled or private ones.
    fn fail_held(&mut self, id: u64, loss: &ErrorData) {
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
                    self.emit(reply::lost(&c.id, loss));
                }
            }
        }
        if self.fetch.as_ref().is_some_and(|f| f.generation == id) {
            self.fetch = None;
        }
    }

    /// Cancels, towards the client, the requests generation `id` asked it.
    fn withdraw_server_requests(&mut self, id: u64) {
        let asked: Vec<u64> = self
            .server_reqs
            .iter()
            .filter(|(_, r)| r.generation == id)
            .map(|(cid, _)| *cid)
            .collect();
        for cid in asked {
            self.server_reqs.remove(&cid);
            let note = build::cancelled(&cid.to_string(), "the MCP server that asked has stopped");
            self.emit(note);
        }
    }

    /// Generation `id` ended on its own: what takes new traffic now.
    fn after_loss(&mut self, id: u64, loss: &ErrorData) {
        match self.worker {
            WorkerState::Running(g) if g == id => {
                self.worker = WorkerState::Idle;
                let uptime = std::time::Duration::from_millis(loss.uptime_ms.unwrap_or(0));
                let served = self
                    .gens
                    .get(&id)
                    .and_then(|g| g.ready_at)
                    .map(|at| at.elapsed());
                self.after_crash(loss, uptime, served);
            }
            WorkerState::Draining {
                generation, since, ..
            } if generation == id => {
                // It was being replaced anyway: start the successor now.
                self.replace_worker(WorkerState::Starting {
                    reload: Some(since),
                });
            }
            _ => {}
        }
    }

    /// Client requests (and private ones) a generation still holds. A
    /// standing request is not held: a reload does not wait for a
    /// subscription that lasts as long as the server does.
    pub(crate) fn held_by(&self, id: u64) -> usize {
        self.reqs
            .values()
            .filter(|r| r.generation == Some(id))
            .filter(|r| r.client().is_none_or(|c| !c.standing))
            .count()
    }

    /// Runs after every event: finishes a drained reload and starts a
    /// generation that was decided on while handling the event.
    pub(crate) fn settle(&mut self) {
        if let WorkerState::Draining {
            generation, since, ..
        } = self.worker
        {
            if self.held_by(generation) == 0 {
                self.replace_worker(WorkerState::Starting {
                    reload: Some(since),
                });
                let cause = "reloading (its requests are done)".into();
                self.retire(generation, cause, None, Why::Reload);
            }
        }
        if let WorkerState::Starting { .. } = self.worker {
            if self.client == ClientState::Closing && self.waiting.is_empty() {
                // The client has left: nothing will need a new worker.
                self.worker = WorkerState::Idle;
            } else {
                // A failure was answered to everything waiting.
                let _ = self.start_generation();
            }
        }
    }

    /// Records one half of a generation's end; retires it when both halves
    /// are in or the other is overdue.
    pub(crate) fn on_end(&mut self, id: u64, exit: Option<Exit>) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        if exit.is_some() {
            g.exit = exit;
        } else {
            g.stdout_closed = true;
        }
        if matches!(g.phase, Phase::Dead) {
            if g.exit.is_some() {
                if let Some(key) = g.exit_wait.take() {
                    let _ = self.timers.try_remove(&key);
                }
                self.gens.remove(&id);
            }
            return;
        }
        if g.stdout_closed && g.exit.is_some() {
            let exit = g.exit.clone();
            let cause = exit
                .as_ref()
                .map(|e| match &e.status {
                    ExitKind::Http(end) => format!("the remote server {end}"),
                    _ => format!("it exited with {}", display_status(e)),
                })
                .unwrap_or_else(|| "it exited".into());
            self.retire(id, cause, exit, Why::Crash);
            self.gens.remove(&id);
        } else if g.exit_wait.is_none() {
            g.exit_wait = Some(self.timers.insert(Timer::ExitWait(id), super::EXIT_WAIT));
        }
    }
}

fn tail_lines(tail: &Arc<Mutex<StderrTail>>) -> Vec<String> {
    tail.lock()
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn refuse_spawn(reason: &str) -> Route {
    let text = format!("cannot start the MCP server: {reason}");
    Route::Refuse(text, ErrorData::spawn(reason.to_owned(), None))
}
