//! Servers with `"sessions": "per-client"`: each front gets a process of
//! its own.
//!
//! The configured server is a *template*: it is listed (from the cache, or
//! from one start that reads its lists and then stops), and it never serves
//! a front request itself. A front's first request for it adds an
//! *instance*: a backend of its own, with the same plan, owned by that
//! front, started on that request. Everything an instance says goes to its
//! owner alone, so its requests to the client (sampling, elicitation,
//! roots) always have a client to go to. The instance stops when its front
//! ends, or when the template is reconfigured or removed; its fresh lists
//! become the template's, so the merged lists follow the server.
//!
//! A shared server of both eras gets a *twin* the same way. Its SDK fixes
//! the era per connection (a process that answered `server/discover`
//! refuses `initialize`), and the configured process is driven in
//! 2026-07-28: what the server does only the handshake era's way (its own
//! requests to the client mid-call, `logging/setLevel`,
//! `resources/subscribe`) would be lost to the clients of that era. So the
//! first request of such a client adds a second process of the same
//! server, initialized in the handshake era as `"era": "2025-11-25"`
//! drives one, and every request of a handshake-era client goes to it;
//! the 2026-07-28 clients stay on the configured process. Nothing is
//! started while only 2026-07-28 clients use the server. The twin is
//! shared by every handshake-era client, as a server of that era is: its
//! requests go to the client that made the call, its notifications to the
//! clients of its era. Its lists are not read: the merged lists are the
//! configured process's (the same server), and routing goes by them to the
//! configured server and from it to the twin by the client's era; a
//! `list_changed` from the twin reads the configured process's list
//! again. It stops and is forgotten when its server is reconfigured,
//! removed, stopped or restarted by a person, or no longer of 2026-07-28.
//!
//! A per-client server of both eras needs no twin: the instance of a
//! handshake-era client is initialized in that era, and a 2026-07-28
//! client's is probed, so each process speaks its one client's era. An
//! instance refused `initialize` (a server of 2026-07-28 alone) is replaced
//! by a probed one, and the template remembers it (`one_era`).
//!
//! A discovery does not say whether the server serves the handshake era
//! too (the SDKs of both eras list only the versions of 2026-07-28 in it),
//! so the twin is how that is found: a server of 2026-07-28 alone refuses
//! its `initialize`, and then its clients of the handshake era are served
//! by the configured process (their input requests bridged), with no twin
//! tried again until its entry changes: one process more, once, for a
//! server of 2026-07-28 alone that a client of the handshake era uses.

use mcpvisor_config::EraChoice;

use super::Hub;
use super::backend::{Backend, BackendId, Off, Role, Run};
use super::request::Era;
use crate::fronts::FrontId;

impl Hub {
    /// The backend that serves `front` for `backend`: itself, or, for a
    /// per-client server, the front's own instance, or, for a server of
    /// both eras and a front of the handshake era, its twin (either added
    /// on first use; the first request routed to it starts it).
    pub(crate) fn serving(&mut self, backend: BackendId, front: FrontId) -> BackendId {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return backend;
        };
        // A disabled or stopped server refuses for itself.
        if matches!(b.run, Run::Off(Off::Disabled | Off::Stopped)) {
            return backend;
        }
        if self.twin_to_come(backend, front) {
            return self.twin(backend);
        }
        if b.role != Role::Template {
            return backend;
        }
        if let Some(instance) = self.backends.instances.get(&(backend, front)) {
            return *instance;
        }
        let mut plan = b.plan.clone();
        // Its template keeps the cache.
        plan.lazy = false;
        plan.cache_key = None;
        let mut instance = Backend::new(plan);
        instance.role = Role::Instance {
            owner: front,
            template: backend,
        };
        let id = self.backends.next_id();
        tracing::info!(server = %instance.plan.name, front = front.0, "a process of its own for this client");
        self.backends.by_id.insert(id, instance);
        self.backends.instances.insert((backend, front), id);
        id
    }

    /// What `serving` would answer, without adding a process: the front's
    /// instance or twin when it has one running or not, else `backend`.
    pub(crate) fn served_now(&self, backend: BackendId, front: FrontId) -> BackendId {
        if let Some(instance) = self.backends.instances.get(&(backend, front)) {
            return *instance;
        }
        match self.backends.twins.get(&backend) {
            Some(twin) if self.of_handshake_era(front) => *twin,
            _ => backend,
        }
    }

    /// Whether `front`'s requests for `backend` go to its twin (started by
    /// the first of them).
    pub(crate) fn twin_to_come(&self, backend: BackendId, front: FrontId) -> bool {
        self.backends.by_id.get(&backend).is_some_and(|b| {
            b.role == Role::Shared
                && b.both_eras
                && !matches!(b.run, Run::Off(Off::Disabled | Off::Stopped))
        }) && self.of_handshake_era(front)
    }

    /// Whether a front speaks the handshake era (a front that has not said
    /// yet is taken to: its requests carry no 2026-07-28 envelope).
    fn of_handshake_era(&self, front: FrontId) -> bool {
        self.fronts
            .open
            .get(&front)
            .is_some_and(|f| f.info.era == Era::Handshake)
    }

    /// The twin of a server of both eras, added when it has none.
    fn twin(&mut self, primary: BackendId) -> BackendId {
        if let Some(twin) = self.backends.twins.get(&primary) {
            return *twin;
        }
        let Some(b) = self.backends.by_id.get(&primary) else {
            return primary;
        };
        let mut plan = b.plan.clone();
        // Its configured server keeps the cache and the lists.
        plan.lazy = false;
        plan.cache_key = None;
        plan.cached = None;
        let mut twin = Backend::new(plan);
        twin.role = Role::Twin { primary };
        let id = self.backends.next_id();
        tracing::info!(server = %twin.plan.name, "a second process, in the 2025-11-25 era, for the clients of that era");
        self.backends.by_id.insert(id, twin);
        self.backends.twins.insert(primary, id);
        id
    }

    /// Whether `id` is a per-client process whose client speaks the
    /// handshake era, of a server left to find its era (`"auto"`) and not
    /// found to be of 2026-07-28 alone: it is initialized in that era, the
    /// newest it shares with its client, so that what the server does only
    /// that way (its requests mid-call, `logging/setLevel`) reaches the
    /// client as it is.
    pub(crate) fn instance_for_handshake_client(&self, id: BackendId) -> bool {
        let Some(b) = self.backends.by_id.get(&id) else {
            return false;
        };
        let Role::Instance { owner, template } = b.role else {
            return false;
        };
        b.plan.def.era == EraChoice::Auto
            && !self
                .backends
                .by_id
                .get(&template)
                .is_some_and(|t| t.one_era)
            && self.of_handshake_era(owner)
    }

    /// Whether `id` was started in the handshake era for that era's clients
    /// of a server that may be of 2026-07-28 alone: a twin, or a per-client
    /// process of a handshake-era client. Its `initialize` refused, it goes
    /// ([`Hub::refused_for_handshake_clients`]).
    pub(crate) fn tried_for_handshake_clients(&self, id: BackendId) -> bool {
        self.twin_s_primary(id).is_some() || self.instance_for_handshake_client(id)
    }

    /// A process tried for the handshake era's clients (see
    /// [`Hub::tried_for_handshake_clients`]) that its server refused: a
    /// twin is forgotten, a per-client process replaced.
    pub(crate) fn refused_for_handshake_clients(&mut self, id: BackendId, why: &str) {
        if self.twin_s_primary(id).is_some() {
            self.twin_refused(id, why);
        } else {
            self.instance_refused(id, why);
        }
    }

    /// A per-client process initialized for a client of the handshake era
    /// refused: its server is of 2026-07-28 alone. A new process takes its
    /// place, found by discovery (that client's input requests bridged),
    /// with the requests that waited for it; so does every such process of
    /// that server after it, until its definition changes.
    fn instance_refused(&mut self, id: BackendId, why: &str) {
        let Some(b) = self.backends.by_id.get_mut(&id) else {
            return;
        };
        let Role::Instance { owner, template } = b.role else {
            return;
        };
        let waiting = std::mem::take(&mut b.queue);
        tracing::info!(server = %b.plan.name, front = owner.0, "of 2026-07-28 alone ({why}): the process of a client of the handshake era is started again and driven in 2026-07-28");
        if let Some(t) = self.backends.by_id.get_mut(&template) {
            t.one_era = true;
        }
        self.backends.instances.remove(&(template, owner));
        let next = self.serving(template, owner);
        self.hand_over(&waiting, next);
        self.stop_backend(id, why, Off::Disabled);
        self.backends.by_id.remove(&id);
        self.send_handed_over(waiting, next);
        // It was started for its client (a call, or a subscription held
        // for it): so is the one in its place.
        self.start_backend(next);
    }

    /// The configured server of a twin; `None` for any other backend.
    pub(crate) fn twin_s_primary(&self, id: BackendId) -> Option<BackendId> {
        match self.backends.by_id.get(&id)?.role {
            Role::Twin { primary } => Some(primary),
            Role::Shared | Role::Template | Role::Instance { .. } => None,
        }
    }

    /// Stops and forgets a server's twin, if it has one: what it held
    /// fails once, with `why`.
    pub(crate) fn drop_twin(&mut self, primary: BackendId, why: &str) {
        let Some(twin) = self.backends.twins.remove(&primary) else {
            return;
        };
        tracing::info!(server = %self.backend_name(twin), "stopping its 2025-11-25 process: {why}");
        self.stop_backend(twin, why, Off::Disabled);
        self.backends.by_id.remove(&twin);
    }

    /// A server found to be of both eras while requests waited for its
    /// start: those of handshake-era clients go to its twin instead.
    pub(crate) fn queued_to_twin(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        if b.role != Role::Shared || !b.both_eras || b.queue.is_empty() {
            return;
        }
        let queued =
            std::mem::take(&mut self.backends.by_id.get_mut(&id).expect("found above").queue);
        let mut kept = Vec::with_capacity(queued.len());
        let mut moved = Vec::new();
        for (gid, line) in queued {
            let front = match self.calls.pending.get(&gid) {
                Some(super::Pending::Front { front, .. }) => *front,
                _ => {
                    kept.push((gid, line));
                    continue;
                }
            };
            let to = self.serving(id, front);
            if to == id {
                kept.push((gid, line));
                continue;
            }
            if let Some(super::Pending::Front { backend, .. }) = self.calls.pending.get_mut(&gid) {
                *backend = to;
            }
            moved.push((to, gid, line));
        }
        if let Some(b) = self.backends.by_id.get_mut(&id) {
            b.in_flight = b.in_flight.saturating_sub(moved.len());
            b.queue = kept;
        }
        for (twin, gid, line) in moved {
            self.route_moved(twin, gid, line);
        }
    }

    /// A twin that could not be initialized: its server is of 2026-07-28
    /// alone. The twin is forgotten, the requests that waited for it go to
    /// the configured process (bridged, as for any server of that era), and
    /// no twin is tried again until its definition changes.
    fn twin_refused(&mut self, twin: BackendId, why: &str) {
        let Some(primary) = self.twin_s_primary(twin) else {
            return;
        };
        let waiting = self
            .backends
            .by_id
            .get_mut(&twin)
            .map(|b| std::mem::take(&mut b.queue))
            .unwrap_or_default();
        tracing::info!(server = %self.backend_name(primary), "of 2026-07-28 alone ({why}): its clients of the handshake era are served by its 2026-07-28 process");
        if let Some(b) = self.backends.by_id.get_mut(&primary) {
            b.both_eras = false;
            b.one_era = true;
        }
        self.hand_over(&waiting, primary);
        self.drop_twin(primary, why);
        self.send_handed_over(waiting, primary);
    }

    /// Points the requests that waited for a refused process at `to`, its
    /// replacement of 2026-07-28, before the refused one stops (so that
    /// its stop does not fail them).
    fn hand_over(&mut self, waiting: &[(u64, bytes::Bytes)], to: BackendId) {
        for (gid, _) in waiting {
            if let Some(super::Pending::Front { backend, .. }) = self.calls.pending.get_mut(gid) {
                *backend = to;
            }
        }
    }

    /// Sends the requests handed over to `to`, a server of 2026-07-28.
    fn send_handed_over(&mut self, waiting: Vec<(u64, bytes::Bytes)>, to: BackendId) {
        for (gid, line) in waiting {
            // A subscription (counted already) is the gateway's own listen
            // at a server of 2026-07-28, as for any client of it.
            let method = mcpvisor_jsonrpc::Envelope::peek(&line).map(|e| e.method().to_owned());
            if matches!(
                method.as_deref(),
                Ok("resources/subscribe" | "resources/unsubscribe")
            ) {
                self.answer_held(gid, "{}");
                continue;
            }
            self.route_moved(to, gid, line);
        }
        // What its clients hold is now held in the gateway's listen there.
        self.relisten(to);
    }

    /// The instances of a per-client template, or of every template that a
    /// front holds.
    fn instances_where(&self, keep: impl Fn(BackendId, FrontId) -> bool) -> Vec<BackendId> {
        self.backends
            .instances
            .iter()
            .filter(|((template, front), _)| keep(*template, *front))
            .map(|(_, instance)| *instance)
            .collect()
    }

    /// Stops and forgets instances (their front ended, or their template
    /// changed): what they held fails once, with `why`.
    fn remove_instances(&mut self, instances: Vec<BackendId>, why: &str) {
        for id in instances {
            self.stop_backend(id, why, Off::Disabled);
            self.backends.instances.retain(|_, i| *i != id);
            self.backends.by_id.remove(&id);
        }
    }

    /// A front ended: its own processes stop.
    pub(crate) fn drop_instances_of(&mut self, front: FrontId) {
        let gone = self.instances_where(|_, f| f == front);
        self.remove_instances(gone, "its client left");
    }

    /// A configured server changed, left the configuration or was stopped
    /// or restarted by a person: its instances (or its twin) stop.
    pub(crate) fn drop_instances_from(&mut self, template: BackendId, why: &str) {
        let gone = self.instances_where(|t, _| t == template);
        self.remove_instances(gone, why);
        self.drop_twin(template, why);
    }

    /// A template's instances with their clients, oldest client first (for
    /// its row).
    pub(crate) fn clients_of(&self, template: BackendId) -> Vec<(u64, BackendId)> {
        let mut found: Vec<(u64, BackendId)> = self
            .backends
            .instances
            .iter()
            .filter(|((t, _), _)| *t == template)
            .map(|((_, front), instance)| (front.0, *instance))
            .collect();
        found.sort_unstable();
        found
    }

    /// An instance read its lists: they become its template's (so that the
    /// merged lists and the cache follow the server). A template that only
    /// started to read its lists stops once they are read.
    pub(crate) fn after_lists_read(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        if b.reading() > 0 {
            return;
        }
        match b.role {
            Role::Shared | Role::Twin { .. } => {}
            Role::Instance { template, .. } => {
                let lists = b.lists.clone();
                let init = b.init.clone();
                if let Some(t) = self.backends.by_id.get_mut(&template) {
                    t.lists = lists;
                    if t.init.is_none() {
                        t.init = init;
                    }
                }
                self.store_cache(template);
                self.remerge_all();
            }
            Role::Template if b.is_ready() => {
                tracing::info!(server = %b.plan.name, "lists read: stopping it until a client uses it");
                let next = self.resting(id);
                self.stop_backend(id, "its lists were read", next);
            }
            Role::Template => {}
        }
    }
}
