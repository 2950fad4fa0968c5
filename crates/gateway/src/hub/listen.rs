//! `subscriptions/listen` (2026-07-28): a front's long-lived requests whose
//! stream carries the merged lists' changes and the updates of the
//! resources they name.
//!
//! A listen is held on its front ([`Front::listens`](super::Front)) until
//! the client cancels it (`notifications/cancelled` naming its id), its
//! front ends (an HTTP client closing the stream ends its front), or the
//! gateway shuts down (then it is answered, a graceful end). It is never a
//! request in flight towards a server: it is fed from what the servers
//! already tell the gateway.
//!
//! - The merged lists: when one changes, every listen that asked for that
//!   list gets its `list_changed`, as a handshake-era client does.
//! - Resources: each URI a listen names is subscribed at its server with
//!   `resources/subscribe`, counted per URI across every front and listen
//!   (`Fronts::subscribed`), so the server sees one subscribe however many
//!   listen, and the unsubscribe when the last one goes. A server whose
//!   session is new (a lazy start, a restart) is subscribed again to what
//!   is held when it is ready. A per-client server's URIs are subscribed at
//!   the front's own instance, uncounted.
//!
//! A server driven in 2026-07-28 has no `resources/subscribe` and tells of
//! changes only on a listen of its own: when it is ready (at its start and
//! at each new process) the gateway opens one `subscriptions/listen` there
//! ([`Upstream`]), asking for the lists whose `listChanged` its discovery
//! declares and, when it declares `resources.subscribe`, for the URIs held
//! at it (the fronts' subscriptions and the listens', as counted above).
//! What arrives on it is handled as a handshake-era server's notifications
//! (a list read again and merged, an update for its holders). When the
//! URIs held there change, the listen is replaced: the old one cancelled,
//! a new one opened. One the server ends or refuses is not asked again
//! until the server is next ready. It is never a call in flight: its
//! session neither times it out nor waits for it to reload or stop, and
//! it keeps no server from its idle stop.
//!
//! Every message on a listen's stream carries its request id in `_meta`
//! (`io.modelcontextprotocol/subscriptionId`) and is queued as related to
//! it, so an HTTP front puts it on that request's stream. A front holds at
//! most [`LISTENS_PER_FRONT`] listens of at most [`URIS_PER_LISTEN`] URIs;
//! an HTTP listen is a front of its own, counted against `--max-sessions`.

use bytes::Bytes;
use mcpvisor_jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND, NOT_STARTED, build};
use serde::Deserialize;
use serde_json::json;

use super::backend::{Backend, BackendId, Driven, Phase, Run};
use super::lists::Kind as ListKind;
use super::request::{Attempt, Era, FrontRequest};
use super::{Held, Hub, Private};
use crate::fronts::FrontId;
use crate::raw::RawObject;

/// Most listens open at once on one front.
pub(crate) const LISTENS_PER_FRONT: usize = 16;
/// Most resource URIs one listen may name.
pub(crate) const URIS_PER_LISTEN: usize = 256;
/// The `_meta` key naming the listen a message belongs to.
const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

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

/// One open `subscriptions/listen`, as acknowledged.
#[derive(Debug)]
pub(crate) struct Listen {
    /// Its request id, as written: its subscription id.
    pub id: Bytes,
    /// Which lists' changes it gets: tools, prompts, resources.
    lists: [bool; 3],
    /// The resources whose updates it gets, each with the server it was
    /// subscribed at (a per-client server's: the front's own instance).
    uris: Vec<(String, BackendId, Hold)>,
}

/// How a listen holds one URI at its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Counted in `Fronts::subscribed`, with the fronts' own subscriptions.
    Counted,
    /// At the front's own instance of a per-client server.
    Own,
}

/// The filter a listen asks for (its `params.notifications`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    tools_list_changed: Option<bool>,
    prompts_list_changed: Option<bool>,
    resources_list_changed: Option<bool>,
    resource_subscriptions: Option<Vec<String>>,
}

impl Listen {
    fn wants_list(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => self.lists[0],
            ListKind::Prompts => self.lists[1],
            ListKind::Resources | ListKind::Templates => self.lists[2],
        }
    }

    fn holds(&self, uri: &str) -> bool {
        self.uris.iter().any(|(u, _, _)| u == uri)
    }

    /// The `_meta` of its messages.
    fn meta(&self) -> String {
        format!(
            "{{{}:{}}}",
            crate::raw::quote(META_SUBSCRIPTION),
            String::from_utf8_lossy(&self.id)
        )
    }
}

impl Hub {
    /// `subscriptions/listen`: acknowledges what the gateway will send,
    /// subscribes at the servers of the URIs it names, and holds the
    /// request open.
    pub(super) fn listen(&mut self, front: FrontId, req: &FrontRequest<'_>, attempt: Attempt) {
        if req.era != Era::Stateless {
            let msg = "Method not found: subscriptions/listen is a 2026-07-28 request; a client that initialized subscribes with resources/subscribe and gets list_changed notifications as they come";
            return self.reply_error(front, req, METHOD_NOT_FOUND, msg);
        }
        let filter = match req.params.as_ref().and_then(|p| p.get("notifications")) {
            None => Filter::default(),
            Some(raw) if raw.is_null() => Filter::default(),
            Some(raw) => match serde_json::from_str::<Filter>(raw.get()) {
                Ok(filter) => filter,
                Err(e) => {
                    let msg = format!(
                        "params.notifications must be an object {{toolsListChanged?, promptsListChanged?, resourcesListChanged?: boolean, resourceSubscriptions?: [uri]}}: {e}"
                    );
                    return self.reply_error(front, req, INVALID_PARAMS, &msg);
                }
            },
        };
        let asked_uris = filter.resource_subscriptions.is_some();
        let mut asked = filter.resource_subscriptions.unwrap_or_default();
        if asked.len() > URIS_PER_LISTEN {
            let msg = format!(
                "params.notifications.resourceSubscriptions names {} URIs; at most {URIS_PER_LISTEN} per subscription: split them over several",
                asked.len()
            );
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        }
        let open = self.fronts.open.get(&front).map_or(0, |f| f.listens.len());
        if open >= LISTENS_PER_FRONT {
            let msg = format!(
                "Request not started: {LISTENS_PER_FRONT} subscriptions are already open on this connection; cancel one and retry"
            );
            return self.reply_error(front, req, NOT_STARTED, &msg);
        }
        // A URI no server lists may be one a starting server will.
        let unknown = asked.iter().any(|u| self.backend_for_uri(u).is_none());
        if unknown && attempt == Attempt::First && self.any_settling() {
            return self.park(front, req.id.clone(), Held::Line(req.line.clone()));
        }
        let mut seen = rustc_hash::FxHashSet::default();
        asked.retain(|u| seen.insert(u.clone()));
        let mut uris = Vec::with_capacity(asked.len());
        // The front's own instances it subscribes at (their listens are
        // replaced once this one is held).
        let mut own = Vec::new();
        for uri in asked {
            let Some(backend) = self.backend_for_uri(&uri) else {
                continue;
            };
            if !self.may_subscribe(backend) {
                continue;
            }
            let held = if self.backends.by_id[&backend].plan.per_client {
                let instance = self.serving(backend, front);
                self.subscribe_at(instance, &uri);
                if !own.contains(&instance) {
                    own.push(instance);
                }
                (uri, instance, Hold::Own)
            } else {
                self.hold_uri(backend, &uri);
                (uri, backend, Hold::Counted)
            };
            uris.push(held);
        }
        let listen = Listen {
            id: req.id.clone(),
            lists: [
                filter.tools_list_changed == Some(true),
                filter.prompts_list_changed == Some(true),
                filter.resources_list_changed == Some(true),
            ],
            uris,
        };
        // What is honoured: the lists asked for (the gateway tells of
        // every change of its merged lists), and the URIs a server that
        // takes subscriptions lists.
        let mut granted = serde_json::Map::new();
        let names = [
            "toolsListChanged",
            "promptsListChanged",
            "resourcesListChanged",
        ];
        for (name, on) in names.iter().zip(listen.lists) {
            if on {
                granted.insert((*name).to_owned(), json!(true));
            }
        }
        if asked_uris {
            let list: Vec<&str> = listen.uris.iter().map(|(u, _, _)| u.as_str()).collect();
            granted.insert("resourceSubscriptions".to_owned(), json!(list));
        }
        let params = format!(
            "{{\"_meta\":{},\"notifications\":{}}}",
            listen.meta(),
            serde_json::Value::Object(granted)
        );
        let ack = build::notification("notifications/subscriptions/acknowledged", Some(&params));
        self.emit_to(front, ack, Some(req.id.clone()));
        if let Some(f) = self.fronts.open.get_mut(&front) {
            f.listens.push(listen);
        }
        for instance in own {
            self.relisten(instance);
        }
    }

    /// Whether a front's id is that of one of its open listens.
    pub(super) fn listening_as(&self, front: FrontId, id: &[u8]) -> bool {
        self.fronts
            .open
            .get(&front)
            .is_some_and(|f| f.listens.iter().any(|l| l.id.as_ref() == id))
    }

    /// Ends a front's listen (its client cancelled it): no answer, as for
    /// any cancelled request. Whether there was one.
    pub(super) fn end_listen(&mut self, front: FrontId, id: &[u8]) -> bool {
        let Some(f) = self.fronts.open.get_mut(&front) else {
            return false;
        };
        let Some(at) = f.listens.iter().position(|l| l.id.as_ref() == id) else {
            return false;
        };
        let listen = f.listens.remove(at);
        self.release_listen(listen);
        true
    }

    /// What a listen held at the servers is let go.
    pub(super) fn release_listen(&mut self, listen: Listen) {
        for (uri, backend, held) in listen.uris {
            match held {
                Hold::Counted => self.release_subscription(&uri),
                // The instance is the front's alone: it is told when no
                // other listen of the front holds the URI there, and not
                // at all when the front has gone (it stops with it).
                Hold::Own => {
                    let owner = self.backends.by_id.get(&backend).and_then(Backend::owner);
                    let front_open = owner.is_some_and(|o| self.fronts.open.contains_key(&o));
                    if !front_open || self.subscribed_at(backend).contains(&uri) {
                        continue;
                    }
                    if self.driven(backend) == Some(Driven::Modern) {
                        self.relisten(backend);
                        continue;
                    }
                    let params = json!({ "uri": uri }).to_string();
                    self.send_private(
                        backend,
                        Private::Quiet,
                        "resources/unsubscribe",
                        Some(&params),
                    );
                }
            }
        }
    }

    /// Answers every open listen, a graceful end (the gateway is shutting
    /// down: its servers stop, so nothing is unsubscribed).
    pub(crate) fn close_listens(&mut self) {
        let fronts: Vec<FrontId> = self
            .fronts
            .open
            .iter()
            .filter(|(_, f)| !f.listens.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for front in fronts {
            let listens = self
                .fronts
                .open
                .get_mut(&front)
                .map(|f| std::mem::take(&mut f.listens))
                .unwrap_or_default();
            for listen in listens {
                let result = format!(
                    "{{\"resultType\":\"complete\",\"_meta\":{}}}",
                    listen.meta()
                );
                let id = String::from_utf8_lossy(&listen.id).into_owned();
                self.emit_to(front, build::result(&id, &result), Some(listen.id));
            }
        }
    }

    /// A merged list changed: each listen that asked for it is told.
    pub(crate) fn tell_listens_changed(&mut self, kind: ListKind) {
        let mut out = Vec::new();
        for (front, f) in &self.fronts.open {
            if f.closing.is_some() {
                continue;
            }
            for l in f.listens.iter().filter(|l| l.wants_list(kind)) {
                let params = format!("{{\"_meta\":{}}}", l.meta());
                let line = build::notification(kind.changed(), Some(&params));
                out.push((*front, line, l.id.clone()));
            }
        }
        for (front, line, id) in out {
            self.emit_to(front, line, Some(id));
        }
    }

    /// A server said `uri` changed (`params`: its notification's params):
    /// each listen that holds it is told. `owner`: a per-client instance's
    /// front, whose listens alone hear it.
    pub(crate) fn tell_listens_updated(
        &mut self,
        owner: Option<FrontId>,
        uri: &str,
        params: &RawObject<'_>,
    ) {
        let mut out = Vec::new();
        for (front, f) in &self.fronts.open {
            if owner.is_some_and(|o| o != *front) {
                continue;
            }
            for l in f.listens.iter().filter(|l| l.holds(uri)) {
                let meta = match params.get("_meta").and_then(|m| RawObject::parse(m.get())) {
                    Some(theirs) => theirs.with(META_SUBSCRIPTION, &String::from_utf8_lossy(&l.id)),
                    None => l.meta(),
                };
                let line = build::notification(
                    "notifications/resources/updated",
                    Some(&params.with("_meta", &meta)),
                );
                out.push((*front, line, l.id.clone()));
            }
        }
        for (front, line, id) in out {
            self.emit_to(front, line, Some(id));
        }
    }

    /// Whether a server may be asked to subscribe: it declared
    /// `resources.subscribe`, or has not said yet (a lazy server never
    /// started).
    fn may_subscribe(&self, backend: BackendId) -> bool {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return false;
        };
        match &b.init {
            Some(init) => init
                .pointer("/capabilities/resources/subscribe")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
            None => true,
        }
    }

    /// Counts one more holder of `uri` at a shared server; the first one
    /// subscribes there.
    fn hold_uri(&mut self, backend: BackendId, uri: &str) {
        let count = self.fronts.subscribed.entry(uri.to_owned()).or_insert(0);
        *count += 1;
        if *count == 1 {
            self.subscribe_at(backend, uri);
            self.relisten(backend);
        }
    }

    /// Subscribes `uri` at a backend: now when it is ready, when it is
    /// ready when it is starting (see [`Hub::resubscribe`]), and an idle
    /// one is started for it. A server that refuses requests (stopped,
    /// disabled, failing) is subscribed when a new session of it is ready.
    fn subscribe_at(&mut self, backend: BackendId, uri: &str) {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return;
        };
        match &b.run {
            // Its listen is replaced by the caller, once the URI is held.
            Run::Live(live) if live.phase == Phase::Ready && live.driven == Driven::Modern => {}
            Run::Live(live) if live.phase == Phase::Ready => {
                let params = json!({ "uri": uri }).to_string();
                self.send_private(
                    backend,
                    Private::Quiet,
                    "resources/subscribe",
                    Some(&params),
                );
            }
            Run::Off(super::backend::Off::Idle(_)) => self.start_backend(backend),
            _ => {}
        }
    }

    /// A backend's new session is ready: it is subscribed to every URI the
    /// gateway holds there (a restarted or lazily started server knows
    /// nothing of them).
    pub(crate) fn resubscribe(&mut self, backend: BackendId) {
        for uri in self.subscribed_at(backend) {
            let params = json!({ "uri": uri }).to_string();
            self.send_private(
                backend,
                Private::Quiet,
                "resources/subscribe",
                Some(&params),
            );
        }
    }

    /// The URIs the gateway holds subscribed at a backend: for a shared
    /// server, those the fronts and listens hold that it serves; for a
    /// per-client instance, those its front's listens hold there.
    pub(crate) fn subscribed_at(&self, backend: BackendId) -> Vec<String> {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return Vec::new();
        };
        match Backend::owner(b) {
            // An instance: what its front's listens hold there.
            Some(owner) => self
                .fronts
                .open
                .get(&owner)
                .map(|f| {
                    f.listens
                        .iter()
                        .flat_map(|l| &l.uris)
                        .filter(|(_, at, _)| *at == backend)
                        .map(|(u, _, _)| u.clone())
                        .collect()
                })
                .unwrap_or_default(),
            None => self
                .fronts
                .subscribed
                .keys()
                .filter(|u| self.backend_for_uri(u) == Some(backend))
                .cloned()
                .collect(),
        }
    }
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
    /// gateway's is logged (a URI it leaves out is not heard of); one of
    /// an earlier listen is dropped.
    pub(crate) fn upstream_acknowledged(&self, backend: BackendId, line: &[u8]) {
        let Some(params) =
            mcpvisor_jsonrpc::envelope::raw_params(line).and_then(|p| RawObject::parse(p.get()))
        else {
            return;
        };
        let of = params
            .get("_meta")
            .and_then(|m| RawObject::parse(m.get()))
            .and_then(|m| m.get(META_SUBSCRIPTION))
            .and_then(|id| id.get().parse::<u64>().ok());
        let Some(Upstream::Open { gid, uris }) = self
            .backends
            .by_id
            .get(&backend)
            .and_then(Backend::live)
            .map(|l| &l.upstream)
        else {
            return;
        };
        if of != Some(*gid) || !self.calls.pending.contains_key(gid) {
            return;
        }
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
