//! Status events ([`SessionEvent`]) about generations, and the authorization
//! prompt a generation waits on.

use super::{Phase, Session};
use crate::events::SessionEvent;
use crate::spawner::Spawner;

impl<S: Spawner> Session<S> {
    /// Reports a status event to the session's owner; never waits.
    pub(crate) fn report(&self, event: SessionEvent) {
        self.status.send(event);
    }

    /// The generation's stderr pump saw an authorization link.
    pub(crate) fn on_auth_prompt(&mut self, generation: u64, url: String, reason: Option<String>) {
        let Some(g) = self.gens.get_mut(&generation) else {
            return;
        };
        if matches!(g.phase, Phase::Dead) || g.auth.as_deref() == Some(url.as_str()) {
            return;
        }
        tracing::warn!(
            generation,
            "the server is waiting for authorization: open {url}"
        );
        g.auth = Some(url.clone());
        // The reason is an authorization server's words: known secrets
        // are taken out before anyone sees it.
        let reason = reason.map(|r| mcpvisor_config::redact::global().redact(&r).into_owned());
        self.report(SessionEvent::AuthPending {
            generation,
            url,
            reason,
        });
    }

    /// The generation answered an `initialize`, the client's own or a
    /// replay: whatever it was waiting on is over, and after the client's
    /// own it is ready (a replay's answer makes it ready by `become_ready`).
    /// `accepted`: it answered with a result, so it has shaken hands.
    pub(crate) fn on_initialize_answered(&mut self, generation: u64, replay: bool, accepted: bool) {
        let Some(g) = self.gens.get_mut(&generation) else {
            return;
        };
        g.shook_hands |= accepted;
        self.on_authorized(generation);
        if !replay {
            self.report_ready(generation);
        }
    }

    /// The generation answered after its authorization prompt: the prompt
    /// is over.
    pub(crate) fn on_authorized(&mut self, generation: u64) {
        if let Some(g) = self.gens.get_mut(&generation) {
            if g.auth.take().is_some() {
                self.report(SessionEvent::Authorized { generation });
            }
        }
    }

    /// Reports the generation ready, once, unless the client's own
    /// `initialize` is on its way to it or in flight there: then its answer
    /// makes it ready.
    pub(crate) fn report_ready(&mut self, generation: u64) {
        let client_init = self.reqs.values().any(|r| {
            r.generation.is_none_or(|g| g == generation)
                && r.client()
                    .is_some_and(|c| c.initialize.is_some() && !c.cancelled)
        });
        if client_init {
            return;
        }
        let Some(g) = self.gens.get_mut(&generation) else {
            return;
        };
        // A client of the handshake era none of whose `initialize` this
        // worker accepted (it failed on an earlier one, and the client
        // sent no other): it has not shaken hands, and is not ready.
        if self.handshake.asked && !g.shook_hands {
            return;
        }
        if g.reported_ready || !matches!(g.phase, Phase::Ready) {
            return;
        }
        g.reported_ready = true;
        g.ready_at = Some(tokio::time::Instant::now());
        let pid = g.pid;
        self.report(SessionEvent::Ready { generation, pid });
    }
}
