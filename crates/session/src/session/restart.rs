//! What happens after a generation ends on its own, and reloads: restart
//! policy, backoff, crash-loop detection and the failed state.

use std::time::Duration;

use mcpvisor_config::RestartMode;
use tokio::time::Instant;

use super::lifecycle::Why;
use super::{ClientState, Phase, Session, WorkerState};
use crate::events::SessionEvent;
use crate::spawner::Spawner;
use crate::table::Timer;
use mcpvisor_config::report::ErrorData;

/// How long a generation must have been ready for its end not to count as
/// a quick one (see `Session::after_crash`).
pub(crate) const SETTLED: Duration = Duration::from_secs(1);

impl<S: Spawner> Session<S> {
    /// Restart policy and crash-loop detection after an unrequested end of
    /// a generation that ran for `uptime`, the last `served` of it ready.
    ///
    /// An end is quick (it counts towards a crash loop, and makes the
    /// next pause longer) when it comes within `crash_loop_window` of the
    /// start, unless the generation had been ready for [`SETTLED`] by
    /// then: one that was killed while it served (the OOM killer, a
    /// person) is restarted at once however often that happens; one that
    /// dies before it is ready, or as soon as it is, is crash-looping.
    pub(crate) fn after_crash(
        &mut self,
        loss: &ErrorData,
        uptime: Duration,
        served: Option<Duration>,
    ) {
        if self.client == ClientState::Closing && self.waiting.is_empty() {
            // The client has left: nothing will need a new worker.
            return;
        }
        let settled = served.is_some_and(|served| served >= SETTLED);
        if uptime < self.cfg.crash_loop_window && !settled {
            self.quick_exits += 1;
        } else {
            self.quick_exits = 0;
        }
        let mut data = loss.clone();
        if self.cfg.restart == RestartMode::Never {
            data.reason = format!(
                "the MCP server stopped ({}) and --restart is never",
                loss.reason
            );
            self.enter_failed(data);
            return;
        }
        if self.quick_exits >= self.cfg.crash_loop_exits {
            data.reason = format!(
                "the MCP server is crash-looping: {} exits within {:?} of starting, the last because {}",
                self.quick_exits, self.cfg.crash_loop_window, loss.reason
            );
            self.enter_failed(data);
            return;
        }
        if self.cfg.restart == RestartMode::Always || !self.waiting.is_empty() {
            let delay = self.backoff();
            if let Some(generation) = loss.generation {
                self.report(SessionEvent::Restarting { generation, delay });
            }
            if delay.is_zero() {
                self.replace_worker(WorkerState::Starting { reload: None });
            } else {
                tracing::info!(delay = ?delay, "restarting the MCP server after a pause");
                let timer = self.timers.insert(Timer::Restart, delay);
                self.replace_worker(WorkerState::Restarting { timer });
            }
        }
    }

    /// Nothing the first time; then doubling from 250 ms up to the cap.
    fn backoff(&self) -> Duration {
        match self.quick_exits {
            0 | 1 => Duration::ZERO,
            n => Duration::from_millis(250)
                .saturating_mul(1 << (n - 2).min(16))
                .min(self.cfg.restart_backoff_max),
        }
    }

    /// Refuses traffic until a reload, SIGHUP, or the cooldown.
    pub(crate) fn enter_failed(&mut self, data: ErrorData) {
        let until = if self.cfg.restart == RestartMode::Never {
            "a file changes or SIGHUP".to_owned()
        } else {
            format!(
                "a file changes, SIGHUP, or {:?} pass",
                self.cfg.failed_cooldown
            )
        };
        tracing::error!(reason = data.reason, "failing requests until {until}");
        let timer = (self.cfg.restart != RestartMode::Never).then(|| {
            self.timers
                .insert(Timer::Cooldown, self.cfg.failed_cooldown)
        });
        self.replace_worker(WorkerState::Failed {
            report: data.clone(),
            timer,
        });
        self.report(SessionEvent::Failed { data: data.clone() });
        self.fail_waiting(data);
    }

    /// The cooldown is over: one more quick crash re-enters the failed state.
    pub(crate) fn leave_failed(&mut self) {
        if let WorkerState::Failed { .. } = self.worker {
            tracing::info!("retrying the MCP server");
            self.report(SessionEvent::Recovered);
            self.quick_exits = self.cfg.crash_loop_exits.saturating_sub(1);
            // The fired timer is gone: the state is replaced, not left.
            self.worker = if self.cfg.restart == RestartMode::Always {
                WorkerState::Starting { reload: None }
            } else {
                WorkerState::Idle
            };
        }
    }

    /// A reload was asked for (file change or SIGHUP).
    pub(crate) fn reload(&mut self, reason: &str) {
        tracing::info!(reason, "reload requested");
        let asked = Instant::now();
        if matches!(self.worker, WorkerState::Failed { .. }) {
            self.report(SessionEvent::Recovered);
        }
        self.quick_exits = 0;
        match &mut self.worker {
            WorkerState::Running(id) => {
                let id = *id;
                self.reload_running(id, asked);
            }
            // A reload already waits for it; the successor answers this one too.
            WorkerState::Draining { since, .. } => *since = asked,
            WorkerState::Idle
            | WorkerState::Starting { .. }
            | WorkerState::Restarting { .. }
            | WorkerState::Failed { .. } => {
                self.replace_worker(WorkerState::Starting {
                    reload: Some(asked),
                });
            }
        }
    }

    /// Replaces the running generation: at once when it holds nothing (or
    /// is still in its handshake), or once what it holds is done.
    fn reload_running(&mut self, id: u64, asked: Instant) {
        let in_flight = self.held_by(id);
        let ready = matches!(self.gens.get(&id).map(|g| &g.phase), Some(Phase::Ready));
        if ready && in_flight > 0 {
            tracing::info!(
                generation = id,
                in_flight,
                "reload waits for requests in flight"
            );
            let timer = self
                .timers
                .insert(Timer::ReloadDrain(id), self.cfg.reload_drain_timeout);
            self.worker = WorkerState::Draining {
                generation: id,
                timer,
                since: asked,
            };
        } else {
            self.worker = WorkerState::Starting {
                reload: Some(asked),
            };
            self.retire(id, "reloading".into(), None, Why::Reload);
        }
    }
}
