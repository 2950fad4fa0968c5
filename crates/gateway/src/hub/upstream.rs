//! The gateway's own `subscriptions/listen` at servers driven in 2026-07-28.
//!
//! A server driven in 2026-07-28 has no `resources/subscribe` and tells of
//! changes only on a listen of its own: when it is ready (at its start and
//! at each new process) the gateway opens one `subscriptions/listen` there
//! ([`Upstream`]), asking for the lists whose `listChanged` its discovery
//! declares and, when it declares `resources.subscribe`, for the URIs held
//! at it (the fronts' subscriptions and the listens', as `listen.rs`
//! counts them).
//! What arrives on it is handled as a handshake-era server's notifications
//! (a list read again and merged, an update for its holders). When the
//! URIs held there change, the listen is replaced: the old one cancelled,
//! a new one opened. One the server ends or refuses is not asked again
//! until the server is next ready. It is never a call in flight: its
//! session neither times it out nor waits for it to reload or stop, and
//! it keeps no server from its idle stop.

use bytes::Bytes;
use mcpvisor_jsonrpc::build;
use serde::Deserialize;
use serde_json::json;

use super::backend::{Backend, BackendId, Driven, Phase};
use super::listen::META_SUBSCRIPTION;
use super::{Hub, Private};
use crate::fronts::FrontId;
use crate::raw::RawObject;

/// The gateway's own `subscriptions/listen` at a server driven in
/// 2026-07-28, one per process of it (kept in its `Live`, so that a stop
/// leaves none behind).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum Upstream {
    /// None open: the server is not of 2026-07-28, not ready yet, or
    /// declares nothing to listen for.
    #[default]
    Closed,
    /// Open under gateway id `gid`, asking for these URIs (sorted).
    Open { gid: u64, uris: Vec<String> },
    /// The server ended or refused it: not asked again until it is next
    /// ready (a new process, a restart), so that a server that refuses
    /// is not asked in a loop.
    Ended,
}

impl Hub {
    // === the gateway's own listens at 2026-07-28 servers ===

    /// The era a live backend is driven in.
    pub(crate) fn driven(&self, backend: BackendId) -> Option<Driven> {
        self.backends
            .by_id
            .get(&backend)
            .and_then(Backend::live)
            .map(|l| l.driven)
    }

    /// A 2026-07-28 backend's process is ready (its first readiness, or a
    /// new process's discovery): its listen is opened afresh, whatever
    /// became of the last one.
    pub(crate) fn listen_upstream(&mut self, backend: BackendId) {
        let ended = self
            .backends
            .by_id
            .get_mut(&backend)
            .and_then(Backend::live_mut)
            .is_some_and(|live| {
                let ended = live.upstream == Upstream::Ended;
                if ended {
                    live.upstream = Upstream::Closed;
                }
                ended
            });
        if ended {
            tracing::debug!(server = %self.backend_name(backend), "ready again: its subscriptions/listen is opened again");
        }
        self.open_upstream(backend, true);
    }

    /// A handshake-era client's `resources/subscribe` or `unsubscribe` to
    /// a shared server, already counted: whether the gateway answers it
    /// itself. A ready server of the handshake era is sent it (its answer
    /// is the client's); one driven in 2026-07-28 has its listen replaced;
    /// one not ready yet (idle, starting, its era being found) is told of
    /// what is held when it is ready, as a listen's URIs are (an idle one
    /// is started for a `subscribe`). A server that refuses requests, or
    /// says it takes no subscriptions, is sent it too: its refusal is the
    /// client's answer.
    pub(crate) fn hold_for_server(&mut self, backend: BackendId, subscribe: bool) -> bool {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return false;
        };
        if b.refusal().is_some() || !self.may_subscribe(backend) {
            return false;
        }
        match b.live().map(|l| (&l.phase, l.driven)) {
            Some((Phase::Ready, Driven::Handshake)) => false,
            Some((Phase::Ready, _)) => {
                self.relisten(backend);
                true
            }
            Some(_) => true,
            None => {
                if subscribe {
                    self.start_backend(backend);
                }
                true
            }
        }
    }

    /// A handshake-era client's `resources/subscribe` or `unsubscribe` to
    /// a per-client server (`template`): its own instance's. Whether the
    /// gateway answers it itself, as [`Hub::hold_for_server`] says for a
    /// shared server; what it holds is kept in the front's own
    /// subscriptions (uncounted: no other front shares the process), which
    /// its instance is told of when it is ready. An unsubscribe always
    /// leaves that set.
    pub(crate) fn hold_at_own_instance(
        &mut self,
        front: FrontId,
        template: BackendId,
        uri: &str,
        subscribe: bool,
    ) -> bool {
        let instance = self.serving(template, front);
        if instance == template {
            return false;
        }
        if !subscribe {
            if let Some(f) = self.fronts.open.get_mut(&front) {
                f.subscriptions.remove(uri);
            }
        }
        let Some(b) = self.backends.by_id.get(&instance) else {
            return false;
        };
        if b.refusal().is_some() || !self.may_subscribe(instance) {
            return false;
        }
        let hold = |hub: &mut Hub| {
            if let Some(f) = hub.fronts.open.get_mut(&front) {
                f.subscriptions.insert(uri.to_owned());
            }
        };
        match b.live().map(|l| (&l.phase, l.driven)) {
            Some((Phase::Ready, Driven::Handshake)) => false,
            Some((Phase::Ready, _)) => {
                if subscribe {
                    hold(self);
                }
                self.relisten(instance);
                true
            }
            Some(_) => {
                if subscribe {
                    hold(self);
                }
                true
            }
            None => {
                if subscribe {
                    hold(self);
                    self.start_backend(instance);
                }
                true
            }
        }
    }

    /// The URIs held at a backend may have changed: its listen is
    /// replaced when they did (one the server ended stays ended).
    pub(crate) fn relisten(&mut self, backend: BackendId) {
        self.open_upstream(backend, false);
    }

    /// Opens a ready 2026-07-28 backend's listen, or replaces it when what
    /// it asks for changed (`fresh`: a new process, where the old one is
    /// gone with the process that held it).
    fn open_upstream(&mut self, backend: BackendId, fresh: bool) {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return;
        };
        let Some(live) = b.live() else { return };
        if live.driven != Driven::Modern || live.phase != Phase::Ready {
            return;
        }
        let declared = |pointer: &str| {
            b.init
                .as_ref()
                .and_then(|i| i.pointer(pointer))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false)
        };
        let lists = [
            (
                "toolsListChanged",
                declared("/capabilities/tools/listChanged"),
            ),
            (
                "promptsListChanged",
                declared("/capabilities/prompts/listChanged"),
            ),
            (
                "resourcesListChanged",
                declared("/capabilities/resources/listChanged"),
            ),
        ];
        let subscribes = declared("/capabilities/resources/subscribe");
        let mut uris = if subscribes {
            self.subscribed_at(backend)
        } else {
            Vec::new()
        };
        uris.sort();
        let old = match &live.upstream {
            Upstream::Ended => return,
            Upstream::Open { gid, uris: held } if !fresh && *held == uris => return,
            Upstream::Open { gid, .. } => Some(*gid),
            Upstream::Closed => None,
        };
        let wanted = lists.iter().any(|(_, on)| *on) || !uris.is_empty();
        if let Some(gid) = old {
            // Forgotten first: whatever it still brings is not waited for.
            self.take_pending(gid);
            if !fresh {
                self.cancel_on_backend(backend, gid, "the subscription is replaced");
            }
        }
        let mut upstream = Upstream::Closed;
        if wanted {
            let mut filter = serde_json::Map::new();
            for (name, on) in lists {
                if on {
                    filter.insert(name.to_owned(), json!(true));
                }
            }
            if subscribes {
                filter.insert("resourceSubscriptions".to_owned(), json!(uris));
            }
            let params = json!({ "notifications": filter }).to_string();
            let sent = self.send_private(
                backend,
                Private::Listen,
                "subscriptions/listen",
                Some(&params),
            );
            upstream = match sent {
                Some(gid) => Upstream::Open { gid, uris },
                // Its session's queue is full: tried again at its next
                // change or readiness.
                None => Upstream::Closed,
            };
        }
        if let Some(live) = self
            .backends
            .by_id
            .get_mut(&backend)
            .and_then(Backend::live_mut)
        {
            live.upstream = upstream;
        }
    }

    /// The answer to the gateway's listen `gid` at a backend: the server
    /// ended it (a result), refused it (an error), or its process ended
    /// (the session's error). Said once; asked again at its next
    /// readiness.
    pub(crate) fn upstream_answered(&mut self, backend: BackendId, gid: u64, line: &[u8]) {
        let name = self.backend_name(backend);
        let Some(live) = self
            .backends
            .by_id
            .get_mut(&backend)
            .and_then(Backend::live_mut)
        else {
            return;
        };
        if !matches!(live.upstream, Upstream::Open { gid: open, .. } if open == gid) {
            return;
        }
        live.upstream = Upstream::Ended;
        match mcpvisor_jsonrpc::envelope::error_code(line) {
            // Its process ended: the next one is listened to when ready.
            Some(mcpvisor_jsonrpc::WORKER_LOST) => {
                tracing::debug!(server = %name, "its subscriptions/listen ended with its process");
            }
            Some(code) => {
                tracing::warn!(server = %name, code, "refused subscriptions/listen: its list changes and resource updates are not heard until it is ready again");
            }
            None => {
                tracing::info!(server = %name, "ended its subscriptions/listen: its list changes and resource updates are not heard until it is ready again");
            }
        }
    }

    /// A 2026-07-28 server acknowledged a listen: what it grants of the
    /// gateway's open one is logged (a URI it leaves out is not heard of).
    /// Its subscription id is the one the server's session gave the
    /// request, not the gateway's, so it is not matched: the
    /// acknowledgment of a listen just replaced may be read as the new
    /// one's, which costs at most a log line.
    pub(crate) fn upstream_acknowledged(&self, backend: BackendId, line: &[u8]) {
        let Some(params) =
            mcpvisor_jsonrpc::envelope::raw_params(line).and_then(|p| RawObject::parse(p.get()))
        else {
            return;
        };
        let Some(Upstream::Open { uris, .. }) = self
            .backends
            .by_id
            .get(&backend)
            .and_then(Backend::live)
            .map(|l| &l.upstream)
        else {
            return;
        };
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Granted {
            resource_subscriptions: Option<Vec<String>>,
        }
        let granted: Granted = params
            .get("notifications")
            .and_then(|n| serde_json::from_str(n.get()).ok())
            .unwrap_or_default();
        let kept = granted.resource_subscriptions.unwrap_or_default();
        let left_out = uris.iter().filter(|u| !kept.contains(u)).count();
        let name = self.backend_name(backend);
        if left_out > 0 {
            tracing::info!(server = %name, left_out, "its subscriptions/listen leaves out resources held there: their updates are not heard");
        } else {
            tracing::debug!(server = %name, "subscriptions/listen acknowledged");
        }
    }
}

/// A server's `notifications/resources/updated` as the handshake-era fronts
/// get it: without the subscription id of the gateway's own listen, which
/// means nothing to them (the line as it came when it has none).
pub(crate) fn without_subscription(line: &Bytes, params: &RawObject<'_>) -> Bytes {
    let Some(meta) = params.get("_meta").and_then(|m| RawObject::parse(m.get())) else {
        return line.clone();
    };
    if meta.get(META_SUBSCRIPTION).is_none() {
        return line.clone();
    }
    let rest = meta.write(&[(META_SUBSCRIPTION, None)]);
    let meta = (rest != "{}").then_some(rest.as_str());
    let params = params.write(&[("_meta", meta)]);
    build::notification("notifications/resources/updated", Some(&params))
}
