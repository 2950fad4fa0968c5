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
//! A server driven in 2026-07-28 is heard through the gateway's own
//! listen there (see `upstream.rs`).
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
pub(crate) const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

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
    pub(super) fn may_subscribe(&self, backend: BackendId) -> bool {
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
        match b.role {
            // An instance: what its front's listens hold there, and the
            // subscriptions the gateway holds for its front (see
            // `Hub::hold_at_own_instance`).
            super::backend::Role::Instance { owner, template } => self
                .fronts
                .open
                .get(&owner)
                .map(|f| {
                    let mut uris: Vec<String> = f
                        .listens
                        .iter()
                        .flat_map(|l| &l.uris)
                        .filter(|(_, at, _)| *at == backend)
                        .map(|(u, _, _)| u.clone())
                        .collect();
                    for uri in &f.subscriptions {
                        let there = self.backend_for_uri(uri) == Some(template);
                        if there && !uris.contains(uri) {
                            uris.push(uri.clone());
                        }
                    }
                    uris
                })
                .unwrap_or_default(),
            // A twin holds what its configured server serves.
            super::backend::Role::Shared
            | super::backend::Role::Template
            | super::backend::Role::Twin { .. } => self
                .fronts
                .subscribed
                .keys()
                .filter(|u| {
                    self.backend_for_uri(u) == Some(self.twin_s_primary(backend).unwrap_or(backend))
                })
                .cloned()
                .collect(),
        }
    }
}
