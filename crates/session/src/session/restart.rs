//! What happens after a generation ends on its own, and reloads: restart
//! policy, backoff, crash-loop detection and the failed state.

use std::time::Duration;

use tokio::time::Instant;

use super::lifecycle::Why;
use super::{Phase, Session};
use crate::config::RestartPolicy;
use crate::events::SessionEvent;
use crate::spawner::Spawner;
use crate::table::Timer;
use mcpvisor_config::report::ErrorData;

impl<S: Spawner> Session<S> {
    /// Restart policy and crash-loop detection after an unrequested end.
    pub(crate) async fn after_crash(&mut self, loss: &ErrorData, uptime: Duration) {
        if self.closing && self.waiting.is_empty() {
            // The client has left: nothing will need a new worker.
            return;
        }
        if uptime < self.cfg.crash_loop_window {
            self.quick_exits += 1;
        } else {
            self.quick_exits = 0;
        }
        let mut data = loss.clone();
        if self.cfg.restart == RestartPolicy::Never {
            data.reason = format!(
                "the MCP server stopped ({}) and --restart is never",
                loss.reason
            );
            self.enter_failed(data).await;
            return;
        }
        if self.quick_exits >= self.cfg.crash_loop_exits {
            data.reason = format!(
                "the MCP server is crash-looping: {} exits within {:?} of starting, the last because {}",
                self.quick_exits, self.cfg.crash_loop_window, loss.reason
            );
            self.enter_failed(data).await;
            return;
        }
        if self.cfg.restart == RestartPolicy::Always || !self.waiting.is_empty() {
            let delay = self.backoff();
            if delay.is_zero() {
                self.start_pending = true;
            } else {
                tracing::info!(delay = ?delay, "restarting the MCP server after a pause");
                self.restart_timer = Some(self.timers.insert(Timer::Restart, delay));
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
    pub(crate) async fn enter_failed(&mut self, data: ErrorData) {
        let until = if self.cfg.restart == RestartPolicy::Never {
            "a file changes or SIGHUP".to_owned()
        } else {
            format!(
                "a file changes, SIGHUP, or {:?} pass",
                self.cfg.failed_cooldown
            )
        };
        tracing::error!(reason = data.reason, "failing requests until {until}");
        self.failed = Some(data.clone());
        self.report(SessionEvent::Failed { data: data.clone() });
        if let Some(key) = self.restart_timer.take() {
            let _ = self.timers.try_remove(&key);
        }
        if self.cfg.restart != RestartPolicy::Never {
            self.failed_timer = Some(
                self.timers
                    .insert(Timer::Cooldown, self.cfg.failed_cooldown),
            );
        }
        self.fail_waiting(data).await;
    }

    /// Leaves the failed state: one more quick crash re-enters it.
    pub(crate) async fn leave_failed(&mut self) {
        self.failed_timer = None;
        if self.failed.take().is_some() {
            tracing::info!("retrying the MCP server");
            self.report(SessionEvent::Recovered);
            self.quick_exits = self.cfg.crash_loop_exits.saturating_sub(1);
            if self.cfg.restart == RestartPolicy::Always {
                self.start_pending = true;
            }
        }
    }

    /// A reload was asked for (file change or SIGHUP).
    pub(crate) async fn reload(&mut self, reason: &str) {
        tracing::info!(reason, "reload requested");
        self.reload_started = Some(Instant::now());
        if let Some(key) = self.failed_timer.take() {
            let _ = self.timers.try_remove(&key);
        }
        if self.failed.take().is_some() {
            self.report(SessionEvent::Recovered);
        }
        self.quick_exits = 0;
        if let Some(key) = self.restart_timer.take() {
            let _ = self.timers.try_remove(&key);
        }
        let Some(id) = self.current else {
            if self.draining_generation().is_none() {
                self.start_pending = true;
            }
            return;
        };
        let in_flight = self.held_by(id);
        let ready = matches!(self.gens.get(&id).map(|g| &g.phase), Some(Phase::Ready));
        if ready && in_flight > 0 {
            tracing::info!(
                generation = id,
                in_flight,
                "reload waits for requests in flight"
            );
            self.current = None;
            let key = self
                .timers
                .insert(Timer::ReloadDrain(id), self.cfg.reload_drain_timeout);
            if let Some(g) = self.gens.get_mut(&id) {
                g.phase = Phase::Draining;
                g.drain_timer = Some(key);
            }
        } else {
            self.retire(id, "reloading".into(), None, Why::Reload).await;
            self.start_pending = true;
        }
    }
}
