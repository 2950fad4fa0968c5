//! Worker generations: start, handshake, reload, end, restart.
//!
//! A generation moves `Handshake -> Ready -> (Draining ->) Dead`. Exactly one
//! generation at a time is `current` and takes new traffic. A reload turns the
//! current generation `Draining`: it keeps serving what it holds while new
//! traffic waits; when it is idle, or the drain timeout passes, it is retired
//! and its successor starts. A generation that ends without being asked
//! counts towards crash-loop detection and is restarted per the policy.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use mcpvisor_config::report::{CrashPhase, ErrorData, ExitKind, StderrTail};
use mcpvisor_jsonrpc::{LineCodec, build};
use mcpvisor_process::Exit;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::{Generation, Phase, Session, WORKER_QUEUE, Waiting, WorkerEvent, display_status};
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
    /// A reload replaces it; the successor is started by the caller.
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
    pub(crate) async fn route(&mut self) -> Route {
        if let Some(data) = &self.failed {
            return Route::Refuse(data.reason.clone(), data.clone());
        }
        if self.current.is_none()
            && self.restart_timer.is_none()
            && self.draining_generation().is_none()
        {
            self.start_generation().await;
            if self.current.is_none() {
                let reason = self
                    .unavailable
                    .clone()
                    .unwrap_or_else(|| "the MCP server is unavailable".into());
                let text = format!("cannot start the MCP server: {reason}");
                return Route::Refuse(text, ErrorData::spawn(reason, None));
            }
        }
        match self.current {
            Some(id)
                if self.waiting.is_empty()
                    && matches!(self.gens.get(&id).map(|g| &g.phase), Some(Phase::Ready)) =>
            {
                Route::Send(id)
            }
            _ => Route::Wait,
        }
    }

    pub(crate) fn draining_generation(&self) -> Option<u64> {
        self.gens
            .iter()
            .find(|(_, g)| matches!(g.phase, Phase::Draining))
            .map(|(id, _)| *id)
    }

    pub(crate) async fn start_generation(&mut self) {
        let id = self.next_generation;
        self.next_generation += 1;
        let reporter = WorkerReporter::new(id, self.events_tx.clone());
        let io = match self.spawner.spawn(id, reporter) {
            Ok(io) => io,
            Err(e) => {
                tracing::error!(generation = id, error = %e, "cannot start the MCP server");
                self.unavailable = Some(e.0.clone());
                self.quick_exits += 1;
                let data = ErrorData::spawn(e.0, Some(id));
                let exited = SessionEvent::Exited {
                    generation: id,
                    data: data.clone(),
                };
                self.report(exited);
                if self.quick_exits >= self.cfg.crash_loop_exits {
                    self.enter_failed(data).await;
                } else {
                    self.fail_waiting(data).await;
                }
                return;
            }
        };
        self.unavailable = None;
        tracing::info!(generation = id, pid = io.pid, "started worker");
        self.report(SessionEvent::Starting {
            generation: id,
            pid: io.pid,
        });
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
                    g.phase = Phase::Handshake;
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
            stderr_tail,
        } = io;
        let (tx, rx) = mpsc::channel(WORKER_QUEUE);
        let events = self.events_tx.clone();
        let stall = self.cfg.write_timeout;
        tokio::spawn(async move {
            if let Err(e) = writer::write_lines(stdin, rx, Some(stall)).await {
                let _ = events
                    .send((
                        id,
                        WorkerEvent::WriteFailed {
                            closed: e.is_closed_pipe(),
                            error: e.to_string(),
                        },
                    ))
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
            drain_timer: None,
            started: Instant::now(),
            stderr_tail,
            stray_stdout: Default::default(),
            init_result: None,
            auth: None,
            reported_ready: false,
        }
    }

    /// The generation has its handshake (or needs none): release what waits.
    pub(crate) async fn become_ready(&mut self, id: u64) {
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
        self.report_ready(id);
        if self.handshake.initialized {
            self.fetch_lists(id).await;
        }
    }

    /// Answers everything waiting for a worker with -32011 and `data`.
    pub(crate) async fn fail_waiting(&mut self, data: ErrorData) {
        let reason = data.reason.clone();
        let items: Vec<_> = self.waiting.drain(..).collect();
        for item in items {
            if let Waiting::Request(wid) = item {
                if let Some(id) = self
                    .remove_req(wid)
                    .and_then(|r| r.client().map(|c| c.id.clone()))
                {
                    self.emit(reply::not_started(&id, &reason, Some(data.clone())))
                        .await;
                }
            }
        }
    }

    /// Fences generation `id`, stops its process and fails what it held.
    pub(crate) async fn retire(&mut self, id: u64, cause: String, exit: Option<Exit>, why: Why) {
        let Some(g) = self.gens.get_mut(&id) else {
            return;
        };
        let phase = match g.phase {
            Phase::Handshake => CrashPhase::Initialize,
            Phase::Ready | Phase::Draining => CrashPhase::Serving,
            Phase::Dead => return,
        };
        // The first generation answers the client's own initialize.
        let client_init_in_flight = self.reqs.values().any(|r| {
            r.generation == Some(id) && r.client().is_some_and(|c| c.initialize.is_some())
        });
        let phase = if client_init_in_flight {
            CrashPhase::Initialize
        } else {
            phase
        };
        let was_draining = matches!(g.phase, Phase::Draining);
        g.phase = Phase::Dead;
        g.tx = None;
        (g.stop)();
        if let Some(key) = g.exit_wait.take() {
            let _ = self.timers.try_remove(&key);
        }
        if let Some(key) = g.drain_timer.take() {
            let _ = self.timers.try_remove(&key);
        }
        let exit = exit.or_else(|| g.exit.clone());
        let uptime = g.started.elapsed();
        let stray_stdout = std::mem::take(&mut g.stray_stdout);
        let stderr = self
            .cfg
            .stderr_in_errors
            .then(|| tail_lines(&g.stderr_tail));
        if why == Why::Reload || exit.as_ref().is_some_and(|e| e.requested) {
            tracing::info!(generation = id, pid = g.pid, cause = %cause, "worker stopped");
        } else {
            tracing::warn!(generation = id, pid = g.pid, cause = %cause, "worker stopped");
        }
        if self.current == Some(id) {
            self.current = None;
        }
        let loss = ErrorData {
            generation: Some(id),
            reason: cause,
            phase: Some(phase),
            exit: Some(exit.map_or(ExitKind::Unknown, |e| e.status)),
            uptime_ms: Some(u64::try_from(uptime.as_millis()).unwrap_or(u64::MAX)),
            stderr,
            stray_stdout,
        };
        self.report(SessionEvent::Exited {
            generation: id,
            data: loss.clone(),
        });
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
        if self.fetch.as_ref().is_some_and(|f| f.generation == id) {
            self.fetch = None;
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
        if why == Why::Crash && was_draining {
            // It was being replaced anyway: start the successor now.
            self.start_pending = true;
        } else if why == Why::Crash {
            self.after_crash(&loss, uptime).await;
        }
    }

    /// Client requests (and private ones) a generation still holds.
    pub(crate) fn held_by(&self, id: u64) -> usize {
        self.reqs
            .values()
            .filter(|r| r.generation == Some(id))
            .count()
    }

    /// Runs after every event: finishes a drained reload and starts a
    /// generation that was decided on while handling the event.
    pub(crate) async fn settle(&mut self) {
        if let Some(id) = self.draining_generation() {
            if self.held_by(id) == 0 {
                self.retire(
                    id,
                    "reloading (its requests are done)".into(),
                    None,
                    Why::Reload,
                )
                .await;
                self.start_pending = true;
            }
        }
        if std::mem::take(&mut self.start_pending)
            && !(self.closing && self.waiting.is_empty())
            && self.current.is_none()
            && self.failed.is_none()
            && self.draining_generation().is_none()
        {
            self.start_generation().await;
        }
    }

    /// Records one half of a generation's end; retires it when both halves
    /// are in or the other is overdue.
    pub(crate) async fn on_end(&mut self, id: u64, exit: Option<Exit>) {
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
                .map(|e| format!("it exited with {}", display_status(e)))
                .unwrap_or_else(|| "it exited".into());
            self.retire(id, cause, exit, Why::Crash).await;
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
