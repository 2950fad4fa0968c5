//! Keeping the client's tool, prompt and resource lists fresh.
//!
//! The client saw `listChanged: true` for each list its server declares
//! (mcpvisor sets it in the `initialize` result). After each generation is
//! ready, mcpvisor reads the lists it declares under private ids, following
//! pagination, and compares them with the previous generation's. A list that
//! differs gets its `notifications/*/list_changed`; one that does not, none.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use mcpvisor_jsonrpc::build;
use serde_json::Value;
use tokio::time::Instant;

use super::Session;
use crate::spawner::Spawner;
use crate::table::{Owner, Req, Timer};

/// The three lists a server may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
}

const KINDS: [ListKind; 3] = [ListKind::Tools, ListKind::Prompts, ListKind::Resources];
/// A server with more pages than this is not read to the end.
const MAX_PAGES: usize = 100;

impl ListKind {
    pub fn capability(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
        }
    }

    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
        }
    }

    fn item_name(self) -> &'static str {
        match self {
            ListKind::Resources => "uri",
            _ => "name",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Each item of a list by name, with its definition as canonical JSON.
pub(crate) type Listing = BTreeMap<String, String>;

/// The lists of one generation (`None`: not declared).
#[derive(Debug, Default, Clone)]
pub(crate) struct Snapshot([Option<Listing>; 3]);

/// A list read in progress.
#[derive(Debug)]
pub(crate) struct Fetch {
    pub generation: u64,
    lists: Snapshot,
    pending: usize,
    pages: usize,
}

impl<S: Spawner> Session<S> {
    /// Reads every list generation `id` declares.
    pub(crate) fn fetch_lists(&mut self, id: u64) {
        let Some(caps) = self.gen_capabilities(id) else {
            tracing::debug!(generation = id, "no initialize result: lists not read");
            return;
        };
        let kinds: Vec<ListKind> = KINDS
            .into_iter()
            .filter(|k| caps.get(k.capability()).is_some_and(Value::is_object))
            .collect();
        tracing::debug!(
            generation = id,
            lists = kinds.len(),
            "reading the server's lists"
        );
        let mut fetch = Fetch {
            generation: id,
            lists: Snapshot::default(),
            pending: kinds.len(),
            pages: 0,
        };
        for k in &kinds {
            fetch.lists.0[k.index()] = Some(Listing::new());
        }
        self.fetch = Some(fetch);
        if kinds.is_empty() {
            self.finish_fetch();
            return;
        }
        for kind in kinds {
            self.request_page(id, kind, None);
        }
    }

    /// Reads the first generation's lists, the baseline for later ones, once
    /// both halves of the client's handshake are through (they may arrive in
    /// either order: a client need not wait for the answer to `initialize`
    /// before it sends `notifications/initialized`).
    pub(crate) fn fetch_baseline(&mut self, generation: u64) {
        if self.handshake.initialized
            && self.init_result.is_some()
            && self.snapshot.is_none()
            && self.fetch.is_none()
        {
            self.fetch_lists(generation);
        }
    }

    /// The capabilities a generation declared in its `initialize` answer.
    fn gen_capabilities(&self, id: u64) -> Option<Value> {
        let result = self
            .gens
            .get(&id)?
            .init_result
            .as_ref()
            .or(self.init_result.as_ref())?;
        Some(result.get("capabilities").cloned().unwrap_or(Value::Null))
    }

    fn request_page(&mut self, generation: u64, kind: ListKind, cursor: Option<&Value>) {
        let wid = self.next_worker_id();
        let params = cursor.map(|c| serde_json::json!({ "cursor": c }).to_string());
        let raw = params.and_then(|p| serde_json::value::RawValue::from_string(p).ok());
        let msg = build::request(&wid.to_string(), kind.method(), raw.as_deref());
        let key = self
            .timers
            .insert(Timer::Request(wid), self.cfg.init_timeout);
        self.reqs.insert(
            wid,
            Req {
                owner: Owner::List(kind),
                generation: Some(generation),
                timer: Some(key),
            },
        );
        self.send_to(generation, msg);
    }

    /// One page of a list arrived (or an error).
    pub(crate) fn on_list_page(&mut self, generation: u64, kind: ListKind, line: &Bytes) {
        let Some(fetch) = self.fetch.as_mut().filter(|f| f.generation == generation) else {
            return;
        };
        let result: Option<Value> = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|mut v| v.get_mut("result").map(Value::take));
        let Some(result) = result else {
            tracing::warn!(
                generation,
                list = kind.method(),
                "the server refused a list request"
            );
            self.abandon_fetch();
            return;
        };
        let listing = fetch.lists.0[kind.index()].get_or_insert_default();
        if let Some(items) = result.get(kind.capability()).and_then(Value::as_array) {
            for item in items {
                let name = item
                    .get(kind.item_name())
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if kind == ListKind::Tools && !self.cfg.tools.permits(name) {
                    continue;
                }
                listing.insert(name.to_owned(), item.to_string());
            }
        }
        fetch.pages += 1;
        let next = result.get("nextCursor").filter(|c| !c.is_null()).cloned();
        match next {
            Some(cursor) if fetch.pages < MAX_PAGES => {
                self.request_page(generation, kind, Some(&cursor));
            }
            _ => {
                fetch.pending -= 1;
                if fetch.pending == 0 {
                    self.finish_fetch();
                }
            }
        }
    }

    pub(crate) fn abandon_fetch(&mut self) {
        if let Some(f) = self.fetch.take() {
            let stale: Vec<u64> = self
                .reqs
                .iter()
                .filter(|(_, r)| {
                    r.generation == Some(f.generation) && matches!(r.owner, Owner::List(_))
                })
                .map(|(wid, _)| *wid)
                .collect();
            for wid in stale {
                self.remove_req(wid);
            }
        }
    }

    /// Compares with the previous generation and tells the client.
    fn finish_fetch(&mut self) {
        let Some(fetch) = self.fetch.take() else {
            return;
        };
        tracing::debug!(generation = fetch.generation, "read the server's lists");
        let previous = self.snapshot.replace(fetch.lists.clone());
        let Some(previous) = previous else {
            // The first generation: this is the baseline.
            return;
        };
        let mut summary = String::new();
        for kind in KINDS {
            let (old, new) = (&previous.0[kind.index()], &fetch.lists.0[kind.index()]);
            let Some(new) = new else { continue };
            let old = old.clone().unwrap_or_default();
            if &old == new {
                continue;
            }
            let _ = write!(summary, " {}", kind.capability());
            for name in new.keys().filter(|n| !old.contains_key(*n)) {
                let _ = write!(summary, " +{name}");
            }
            for name in old.keys().filter(|n| !new.contains_key(*n)) {
                let _ = write!(summary, " -{name}");
            }
            for name in new
                .keys()
                .filter(|n| old.get(*n).is_some_and(|d| d != &new[*n]))
            {
                let _ = write!(summary, " ~{name}");
            }
            let note = format!("notifications/{}/list_changed", kind.capability());
            self.emit(build::notification(&note, None));
        }
        let took = self
            .gens
            .get(&fetch.generation)
            .and_then(|g| g.reload)
            .map(|t| Instant::now() - t);
        let what = if took.is_some() {
            "reloaded"
        } else {
            "restarted"
        };
        let summary = if summary.is_empty() {
            " lists unchanged".to_owned()
        } else {
            summary
        };
        match took {
            Some(t) => tracing::info!(
                "{what} worker (generation {}):{summary}, {} ms",
                fetch.generation,
                t.as_millis()
            ),
            None => tracing::info!("{what} worker (generation {}):{summary}", fetch.generation),
        }
    }
}
