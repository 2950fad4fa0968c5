//! Everything the session's single timer queue fires, and cancellation.

use std::time::Duration;

use tokio::time::Instant;

/// How often the deadlines of client requests are checked while any are in
/// flight: timeouts fire within this much of their time.
pub(crate) const SWEEP: Duration = Duration::from_millis(100);

use super::lifecycle::Why;
use super::{Session, Waiting, WorkerState, display_status};
use crate::config::CancelAckPolicy;
use crate::reply;
use crate::spawner::Spawner;
use crate::table::{Owner, Req, Timer};
use mcpvisor_jsonrpc::build;

/// The timer of the deadline sweep. Once a poll has found it pending,
/// tokio's timer wheel holds the task's waker until it fires; until then
/// (and until it is reset) the loop does not poll it again on every turn.
/// Its polls ignore tokio's cooperative budget, so that a pending poll
/// always means it is in the wheel.
pub(crate) struct Sweep {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    armed: bool,
    /// Polled pending since it was last reset.
    waiting: bool,
}

impl Default for Sweep {
    fn default() -> Self {
        Self {
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: false,
            waiting: false,
        }
    }
}

impl std::fmt::Debug for Sweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweep")
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

impl Sweep {
    pub fn is_armed(&self) -> bool {
        self.armed
    }

    pub fn arm(&mut self, at: Instant) {
        self.sleep.as_mut().reset(at);
        self.armed = true;
        self.waiting = false;
    }

    pub fn disarm(&mut self) {
        self.armed = false;
        self.waiting = false;
    }

    /// Resolves when the sweep is due.
    pub async fn fired(&mut self) {
        std::future::poll_fn(|cx| {
            if self.waiting && !self.sleep.is_elapsed() {
                return std::task::Poll::Pending;
            }
            super::gate::poll_registering(&mut self.waiting, self.sleep.as_mut(), cx)
        })
        .await
    }
}

impl<S: Spawner> Session<S> {
    pub(crate) fn on_timer(&mut self, timer: Timer) {
        match timer {
            Timer::Request(wid) => self.on_request_timer(wid),
            Timer::CancelGrace(wid) => self.on_cancel_grace(wid),
            Timer::Handshake(generation) => self.on_handshake_timeout(generation),
            Timer::ExitWait(generation) => self.on_exit_wait(generation),
            Timer::ReloadDrain(generation) => self.on_drain_timeout(generation),
            Timer::Restart => self.on_restart_timer(),
            Timer::Cooldown => self.leave_failed(),
            Timer::Closing => self.on_closing_timeout(),
        }
    }

    /// A replayed `initialize` went unanswered: retire the generation,
    /// unless it waits on an authorization link and may wait longer.
    fn on_handshake_timeout(&mut self, generation: u64) {
        // The fired key must not be removed again: it may be reused.
        let mut replay = None;
        for (wid, req) in self.reqs.iter_mut() {
            if req.generation == Some(generation) && matches!(req.owner, Owner::Replay) {
                req.timer = None;
                replay = Some(*wid);
            }
        }
        let waiting_on_auth = self
            .gens
            .get(&generation)
            .and_then(|g| g.auth_url().map(|u| (u, g.started)));
        if let (Some(wid), Some((url, started))) = (replay, waiting_on_auth) {
            let until = started + self.cfg.auth_timeout;
            if Instant::now() < until {
                tracing::warn!(generation, "initialize waits for authorization at {url}");
                let key = self.timers.insert_at(Timer::Handshake(generation), until);
                if let Some(req) = self.reqs.get_mut(&wid) {
                    req.timer = Some(key);
                }
                return;
            }
        }
        let cause = format!(
            "it did not answer the replayed initialize within {:?}",
            self.cfg.init_timeout
        );
        self.retire(generation, cause, None, Why::Crash);
    }

    /// One half of a generation's end came and the other did not follow.
    fn on_exit_wait(&mut self, generation: u64) {
        let Some(g) = self.gens.get_mut(&generation) else {
            return;
        };
        g.exit_wait = None;
        let exit = g.exit.clone();
        let cause = match &exit {
            Some(e) => format!("it exited with {}", display_status(e)),
            None if g.stdout_closed => "it closed its stdout".into(),
            None => "it closed its stdin".into(),
        };
        self.retire(generation, cause, exit, Why::Crash);
    }

    /// A draining generation's time is up: its leftovers fail, its
    /// successor starts.
    fn on_drain_timeout(&mut self, generation: u64) {
        let since = match self.worker {
            WorkerState::Draining {
                generation: g,
                since,
                ..
            } if g == generation => since,
            _ => return,
        };
        // The fired timer is gone: the state is replaced, not left.
        self.worker = WorkerState::Starting {
            reload: Some(since),
        };
        let cause = format!(
            "reloading: its requests did not finish within --reload-drain-timeout ({:?})",
            self.cfg.reload_drain_timeout
        );
        self.retire(generation, cause, None, Why::Reload);
    }

    fn on_restart_timer(&mut self) {
        if let WorkerState::Restarting { .. } = self.worker {
            // The fired timer is gone: the state is replaced, not left.
            self.worker = WorkerState::Starting { reload: None };
        }
    }

    /// The client closed stdin and its requests in flight had their time.
    fn on_closing_timeout(&mut self) {
        tracing::info!(
            in_flight = self.reqs.len(),
            "client closed stdin; drain time is up"
        );
        let all: Vec<u64> = self.reqs.keys().copied().collect();
        for wid in all {
            self.remove_req(wid);
        }
    }

    /// A private request's timer (a list read) ran out.
    fn on_request_timer(&mut self, wid: u64) {
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        req.timer = None;
        if matches!(req.owner, Owner::List(_)) {
            tracing::warn!(
                generation = req.generation,
                "the server did not answer a list request in time"
            );
            self.remove_req(wid);
            self.abandon_fetch();
        }
    }

    /// The periodic sweep of client requests' deadlines. One coarse timer
    /// for all of them instead of a timer each: arming a timer per request
    /// costs a wake-up of the time driver per request.
    pub(crate) fn on_sweep(&mut self) {
        let now = Instant::now();
        let due: Vec<u64> = self
            .reqs
            .iter()
            .filter_map(|(wid, r)| {
                let c = r.client()?;
                let due = !c.cancelled && !c.standing && now >= c.idle_deadline.min(c.ceiling);
                due.then_some(*wid)
            })
            .collect();
        for wid in due {
            self.on_request_deadline(wid, now);
        }
        if self.reqs.is_empty() {
            self.sweep.disarm();
        } else {
            self.sweep.arm(now + SWEEP);
        }
    }

    /// Makes sure the sweep runs while requests are in flight.
    pub(crate) fn arm_sweep(&mut self) {
        if !self.sweep.is_armed() {
            self.sweep.arm(Instant::now() + SWEEP);
        }
    }

    fn on_request_deadline(&mut self, wid: u64, now: Instant) {
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        let generation = req.generation;
        let Some(c) = req.client_mut() else { return };
        let ceiling = now >= c.ceiling;
        let id = c.id.clone();
        let after = if ceiling {
            self.cfg.request_ceiling
        } else {
            self.cfg.request_timeout
        };
        let initialize = c.initialize.is_some();
        let ceiling_at = c.ceiling;
        match generation {
            None => {
                // It never reached a worker.
                self.waiting
                    .retain(|w| !matches!(w, Waiting::Request(x) if *x == wid));
                self.remove_req(wid);
                let reason = format!("no MCP server became ready within {after:?}");
                self.emit(reply::not_started(&id, &reason, None));
            }
            Some(generation) if initialize && self.auth_extends(generation, ceiling_at) => {
                let until = ceiling_at - self.cfg.request_ceiling + self.cfg.auth_timeout;
                if let Some(c) = self.reqs.get_mut(&wid).and_then(Req::client_mut) {
                    c.idle_deadline = until;
                }
            }
            Some(generation) if initialize => {
                // initialize is never cancelled; a stuck one costs the generation.
                self.emit(reply::timed_out(&id, after, ceiling));
                if let Some(c) = self.reqs.get_mut(&wid).and_then(Req::client_mut) {
                    c.cancelled = true;
                }
                let cause = format!("it did not answer initialize within {after:?}");
                self.retire(generation, cause, None, Why::Crash);
            }
            Some(_) => {
                self.emit(reply::timed_out(&id, after, ceiling));
                self.cancel(wid, "request timed out");
            }
        }
    }

    /// Whether an `initialize` started at `ceiling - request_ceiling` may keep
    /// waiting because its worker waits on an authorization link.
    fn auth_extends(&self, generation: u64, ceiling: Instant) -> bool {
        let started = ceiling - self.cfg.request_ceiling;
        self.gens
            .get(&generation)
            .is_some_and(|g| g.auth_url().is_some())
            && Instant::now() < started + self.cfg.auth_timeout
    }

    fn on_cancel_grace(&mut self, wid: u64) {
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
            CancelAckPolicy::Stop => true,
            CancelAckPolicy::Release => false,
            CancelAckPolicy::Auto => acks,
        };
        self.remove_req(wid);
        if stop {
            let cause = format!(
                "it did not finish a cancelled request within {:?}",
                self.cfg.cancel_grace
            );
            self.retire(generation, cause, None, Why::Crash);
        } else {
            tracing::debug!(generation, "cancel grace over; slot released");
        }
    }

    /// Marks a client request cancelled, tells its worker, and starts its
    /// grace. The client will get no response for it.
    pub(crate) fn cancel(&mut self, wid: u64, reason: &str) {
        let Some(req) = self.reqs.get_mut(&wid) else {
            return;
        };
        let Some(c) = req.client_mut() else { return };
        if c.cancelled || c.initialize.is_some() {
            return;
        }
        c.cancelled = true;
        let standing = c.standing;
        if let Some(key) = req.timer.take() {
            let _ = self.timers.try_remove(&key);
        }
        match req.generation {
            None => {
                self.waiting
                    .retain(|w| !matches!(w, Waiting::Request(x) if *x == wid));
                self.remove_req(wid);
            }
            // A cancelled subscription is over: its server owes no
            // answer, so there is no grace to wait out.
            Some(generation) if standing => {
                self.remove_req(wid);
                let note = build::cancelled(&wid.to_string(), reason);
                self.send_to(generation, note);
            }
            Some(generation) => {
                req.timer = Some(
                    self.timers
                        .insert(Timer::CancelGrace(wid), self.cfg.cancel_grace),
                );
                let note = build::cancelled(&wid.to_string(), reason);
                self.send_to(generation, note);
            }
        }
    }
}
