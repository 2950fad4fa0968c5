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

use super::Hub;
use super::backend::{Backend, BackendId, Off, Role, Run};
use crate::fronts::FrontId;

impl Hub {
    /// The backend that serves `front` for `backend`: itself, or, for a
    /// per-client server, the front's own instance (added on first use; the
    /// first request routed to it starts it).
    pub(crate) fn serving(&mut self, backend: BackendId, front: FrontId) -> BackendId {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return backend;
        };
        // A disabled or stopped server refuses for itself.
        if b.role != Role::Template || matches!(b.run, Run::Off(Off::Disabled | Off::Stopped)) {
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

    /// A template changed or left the configuration: its instances stop.
    pub(crate) fn drop_instances_from(&mut self, template: BackendId, why: &str) {
        let gone = self.instances_where(|t, _| t == template);
        self.remove_instances(gone, why);
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
            Role::Shared => {}
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
