//! The merged lists: every backend's tools, prompts, resources and
//! resource templates as one server's, and the tables that route a name or
//! a URI back to the backend that offered it.

use rustc_hash::FxHashMap as HashMap;

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use super::backend::BackendId;
use super::pinning::HeldDef;
use super::{Hub, Private};
use crate::naming::NameTable;
use crate::raw::{self, RawObject};

/// The four lists a server may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

pub(crate) const KINDS: [Kind; 4] = [Kind::Tools, Kind::Prompts, Kind::Resources, Kind::Templates];
/// A server with more pages than this is not read to the end.
const MAX_PAGES: usize = 100;
/// Items per page of a merged list.
pub(crate) const PAGE: usize = 500;

impl Kind {
    pub fn capability(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Prompts => "prompts",
            Kind::Resources | Kind::Templates => "resources",
        }
    }

    pub fn method(self) -> &'static str {
        match self {
            Kind::Tools => "tools/list",
            Kind::Prompts => "prompts/list",
            Kind::Resources => "resources/list",
            Kind::Templates => "resources/templates/list",
        }
    }

    /// The member of a list result that holds the items.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Prompts => "prompts",
            Kind::Resources => "resources",
            Kind::Templates => "resourceTemplates",
        }
    }

    /// The member of an item that names it.
    fn item_name(self) -> &'static str {
        match self {
            Kind::Tools | Kind::Prompts => "name",
            Kind::Resources => "uri",
            Kind::Templates => "uriTemplate",
        }
    }

    pub(crate) fn changed(self) -> &'static str {
        match self {
            Kind::Tools => "notifications/tools/list_changed",
            Kind::Prompts => "notifications/prompts/list_changed",
            Kind::Resources | Kind::Templates => "notifications/resources/list_changed",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn of_method(method: &str) -> Option<Self> {
        KINDS.into_iter().find(|k| k.method() == method)
    }
}

/// One item of a backend's list, as the backend wrote it.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// Its name (tools, prompts) or URI (resources, templates).
    pub name: String,
    pub raw: Box<RawValue>,
}

impl Item {
    fn read(kind: Kind, raw: Box<RawValue>) -> Option<Self> {
        let name = RawObject::parse(raw.get())?.str(kind.item_name())?;
        Some(Self { name, raw })
    }
}

/// How a backend's list changed, in one line ("tools list changed: +2
/// −1"), or `None` when it is the same.
fn list_change(kind: Kind, old: &[Item], new: &[Item]) -> Option<String> {
    let before: HashMap<&str, &str> = old.iter().map(|o| (o.name.as_str(), o.raw.get())).collect();
    let mut added = 0;
    let mut edited = 0;
    let mut kept = 0;
    for n in new {
        match before.get(n.name.as_str()) {
            None => added += 1,
            Some(raw) => {
                kept += 1;
                if *raw != n.raw.get() {
                    edited += 1;
                }
            }
        }
    }
    let removed = before.len().saturating_sub(kept);
    if added + removed + edited == 0 {
        return None;
    }
    let what = match kind {
        Kind::Tools => "tools",
        Kind::Prompts => "prompts",
        Kind::Resources => "resources",
        Kind::Templates => "resource templates",
    };
    let mut line = format!("{what} list changed: +{added} \u{2212}{removed}");
    if edited > 0 {
        line.push_str(&format!(", {edited} edited"));
    }
    Some(line)
}

/// Lists read on an earlier run, for a server not started yet.
#[derive(Debug, Clone, Default)]
pub struct Cached {
    pub(crate) lists: [Option<Vec<Item>>; 4],
    pub(crate) init: Option<Value>,
}

impl Cached {
    /// From the list cache's record; unreadable items are left out.
    pub fn from_lists(lists: &crate::cache::Lists) -> Self {
        let mut cached = Cached {
            init: Some(lists.initialize.clone()).filter(|v| !v.is_null()),
            ..Cached::default()
        };
        let by_kind = [
            (Kind::Tools, &lists.tools),
            (Kind::Prompts, &lists.prompts),
            (Kind::Resources, &lists.resources),
            (Kind::Templates, &lists.resource_templates),
        ];
        for (kind, items) in by_kind {
            let list = items
                .iter()
                .filter_map(|v| serde_json::value::to_raw_value(v).ok())
                .filter_map(|raw| Item::read(kind, raw))
                .collect();
            cached.lists[kind.index()] = Some(list);
        }
        cached
    }

    /// The list cache's record of a backend's lists.
    pub(crate) fn to_lists(
        lists: &[Option<Vec<Item>>; 4],
        init: Option<&Value>,
    ) -> crate::cache::Lists {
        let values = |kind: Kind| -> Vec<Value> {
            lists[kind.index()]
                .iter()
                .flatten()
                .filter_map(|i| serde_json::from_str(i.raw.get()).ok())
                .collect()
        };
        crate::cache::Lists {
            initialize: init.cloned().unwrap_or(Value::Null),
            tools: values(Kind::Tools),
            prompts: values(Kind::Prompts),
            resources: values(Kind::Resources),
            resource_templates: values(Kind::Templates),
        }
    }
}

/// What the fronts are offered: the merged lists with their routing
/// tables, and the cache that keeps lazy servers' lists between runs.
///
/// Invariant: `merged` is computed from the lists of the configured
/// backends that serve lists ([`Backend::serves_lists`]), in config order,
/// and computed again ([`Hub::remerge`]) when one of those lists, a
/// backend's state or the configuration changes: a name in `merged.tools`
/// or `merged.prompts` routes to the backend whose item the front was
/// shown under that name.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    pub merged: Merged,
    /// Where lazy servers' lists are kept; `None` with the cache off.
    pub cache: Option<crate::cache::Cache>,
    /// What is approved of each server's definitions.
    pub pins: super::pinning::Pinning,
    /// Served as itself (transparent), the lists whose change the server
    /// announced and that are being read again: their next merge tells
    /// the fronts even when the list reads the same, as the server did.
    pub announced: [bool; 4],
}

/// The merged lists and their routing tables.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    /// Each list's items as the front sees them (JSON text).
    pub items: [Vec<String>; 4],
    /// Exposed tool name → backend and original name, as JSON (quoted
    /// once here, not on every call).
    pub tools: HashMap<String, (BackendId, std::sync::Arc<str>)>,
    /// Exposed prompt name → backend and original name, as JSON.
    pub prompts: HashMap<String, (BackendId, std::sync::Arc<str>)>,
    /// Resource URI → the first backend in config order that lists it.
    pub uris: HashMap<String, BackendId>,
    /// Resource templates in config order.
    pub templates: Vec<(String, BackendId)>,
    /// Tool descriptions, for tool search: (exposed name, item index).
    pub search: Option<crate::search::Index>,
    /// Held-back tools (left out of `items`) by the exposed name they
    /// would have: backend, own name, why.
    pub held_tools: HashMap<String, (BackendId, String, crate::monitor::Change)>,
    /// Held-back prompts, as `held_tools`.
    pub held_prompts: HashMap<String, (BackendId, String, crate::monitor::Change)>,
}

/// Tools or prompts merged: the items as the front sees them, and the
/// routes of those listed and of those held back.
struct Named {
    items: Vec<String>,
    routes: HashMap<String, (BackendId, std::sync::Arc<str>)>,
    held: HashMap<String, (BackendId, String, crate::monitor::Change)>,
}

/// The items listed (not held back) of one kind, each with its backend, in
/// config order.
type Listed<'a> = Vec<(BackendId, &'a Item)>;

/// One list merged, before it is kept.
enum Merge {
    Named(Named),
    Resources {
        items: Vec<String>,
        uris: HashMap<String, BackendId>,
    },
    /// Each template's URI, backend and text, in config order.
    Templates(Vec<(String, BackendId, String)>),
}

impl Merged {
    /// Keeps a merge's routes and hands back its items.
    fn keep(&mut self, kind: Kind, merge: Merge) -> Vec<String> {
        match merge {
            Merge::Named(named) if kind == Kind::Tools => {
                self.search = Some(search_index(&named.items));
                self.tools = named.routes;
                self.held_tools = named.held;
                named.items
            }
            Merge::Named(named) => {
                self.prompts = named.routes;
                self.held_prompts = named.held;
                named.items
            }
            Merge::Resources { items, uris } => {
                self.uris = uris;
                items
            }
            Merge::Templates(templates) => {
                let (routes, items) = templates
                    .into_iter()
                    .map(|(uri, id, text)| ((uri, id), text))
                    .unzip();
                self.templates = routes;
                items
            }
        }
    }
}

/// The index tool search reads: each merged tool's name and description.
fn search_index(tools: &[String]) -> crate::search::Index {
    let described: Vec<(String, String)> = tools
        .iter()
        .map(|t| {
            let v: Value = serde_json::from_str(t).unwrap_or(Value::Null);
            (
                v["name"].as_str().unwrap_or_default().to_owned(),
                v["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    crate::search::Index::new(&described)
}

/// Resources merged by URI: the first backend in config order that lists
/// one serves it.
fn merge_resources(entries: &[(BackendId, &Item)]) -> Merge {
    let mut uris: HashMap<String, BackendId> = HashMap::default();
    let mut items = Vec::with_capacity(entries.len());
    for (id, item) in entries {
        if let Some(first) = uris.get(&item.name) {
            if first != id {
                tracing::info!(uri = %item.name, "two servers offer the same resource URI; the first in config order serves it");
            }
            continue;
        }
        uris.insert(item.name.clone(), *id);
        items.push(item.raw.get().to_owned());
    }
    Merge::Resources { items, uris }
}

impl Hub {
    pub(crate) fn on_list_page(
        &mut self,
        id: BackendId,
        kind: Kind,
        mut items: Vec<Box<RawValue>>,
        pages: usize,
        epoch: u64,
        line: &Bytes,
    ) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        if b.epoch != epoch {
            return;
        }
        let name = b.plan.name.clone();
        #[derive(serde::Deserialize)]
        struct Page {
            result: Option<Box<RawValue>>,
        }
        let result = serde_json::from_slice::<Page>(line)
            .ok()
            .and_then(|p| p.result);
        let Some(result) = result else {
            tracing::debug!(server = %name, "{} failed", kind.method());
            return;
        };
        let Some(obj) = RawObject::parse(result.get()) else {
            return;
        };
        if let Some(list) = obj.get(kind.key()) {
            if let Ok(more) = serde_json::from_str::<Vec<Box<RawValue>>>(list.get()) {
                items.extend(more);
            }
        }
        let cursor = obj.get("nextCursor").filter(|c| c.get() != "null");
        if let Some(cursor) = cursor {
            if pages + 1 < MAX_PAGES {
                let params = format!("{{\"cursor\":{}}}", cursor.get());
                self.send_private(
                    id,
                    Private::List {
                        kind,
                        items,
                        pages: pages + 1,
                        epoch,
                    },
                    kind.method(),
                    Some(&params),
                );
                return;
            }
            tracing::warn!(server = %name, "{} has more than {MAX_PAGES} pages; the rest is left out", kind.method());
        }
        if kind == Kind::Tools {
            self.override_tools(id, &mut items);
        }
        let list: Vec<Item> = items
            .into_iter()
            .filter_map(|raw| Item::read(kind, raw))
            .collect();
        let mut change = None;
        if let Some(b) = self.backends.by_id.get_mut(&id) {
            change = b.lists[kind.index()]
                .as_ref()
                .and_then(|old| list_change(kind, old, &list));
            b.lists[kind.index()] = Some(list);
            if b.reading() == 0 {
                self.store_cache(id);
            }
        }
        if let Some(message) = change {
            self.record(id, crate::monitor::EventKind::ListChanged, message);
        }
        self.remerge(kind);
        self.after_lists_read(id);
    }

    /// Applies the entry's tool overrides to a backend's whole `tools/list`;
    /// an override for a tool the server does not list is a warning, in the
    /// log and among the server's events.
    fn override_tools(&mut self, id: BackendId, tools: &mut [Box<RawValue>]) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        let unseen = crate::overrides::apply(&b.plan.def.tools.overrides, tools);
        if unseen.is_empty() {
            return;
        }
        let message = format!(
            "tools.override names tools the server does not list: {}",
            unseen.join(", ")
        );
        tracing::warn!(server = %b.plan.name, "{message}");
        self.record(id, crate::monitor::EventKind::Warning, message);
    }

    /// Recomputes every merged list.
    pub(crate) fn remerge_all(&mut self) {
        for kind in [Kind::Tools, Kind::Prompts, Kind::Resources, Kind::Templates] {
            self.remerge(kind);
        }
    }

    /// Recomputes one merged list; tells the front once if it changed.
    /// Definitions not approved (see `pinning`) are held back: named, but
    /// not listed.
    pub(crate) fn remerge(&mut self, kind: Kind) {
        self.pin_first_sight(kind);
        let (entries, held) = self.gather(kind);
        let merge = match kind {
            Kind::Tools | Kind::Prompts => Merge::Named(self.merge_named(kind, &entries, &held)),
            Kind::Resources => merge_resources(&entries),
            Kind::Templates => Merge::Templates(
                entries
                    .iter()
                    .map(|(id, item)| (item.name.clone(), *id, item.raw.get().to_owned()))
                    .collect(),
            ),
        };
        let items = self.catalog.merged.keep(kind, merge);
        self.hold(kind, held);
        self.announce(kind, items);
    }

    /// Every listing backend's items of one kind in config order: those
    /// listed, and those held back.
    fn gather(&self, kind: Kind) -> (Listed<'_>, Vec<(BackendId, HeldDef)>) {
        let mut entries = Vec::new();
        let mut held = Vec::new();
        for id in &self.backends.order {
            let Some(b) = self.backends.by_id.get(id) else {
                continue;
            };
            if !b.serves_lists() {
                continue;
            }
            for item in b.lists[kind.index()].iter().flatten() {
                match self.classify(*id, kind, item) {
                    None => entries.push((*id, item)),
                    Some(h) => held.push((*id, h)),
                }
            }
        }
        (entries, held)
    }

    /// Tools or prompts under the names the front sees. Held ones keep
    /// their place in the name table: a call to one is refused under the
    /// name it will have.
    fn merge_named(
        &self,
        kind: Kind,
        entries: &[(BackendId, &Item)],
        held: &[(BackendId, HeldDef)],
    ) -> Named {
        let held_items: Vec<(BackendId, &Item)> = held
            .iter()
            .filter_map(|(id, h)| {
                let list = self.backends.by_id.get(id)?.lists[kind.index()].as_ref()?;
                Some((*id, list.iter().find(|i| i.name == h.name)?))
            })
            .collect();
        let mut builder = NameTable::builder(self.settings.separator.clone());
        let mut index_of: HashMap<BackendId, usize> = HashMap::default();
        for id in &self.backends.order {
            let names: Vec<String> = entries
                .iter()
                .chain(held_items.iter())
                .filter(|(b, _)| b == id)
                .map(|(_, item)| item.name.clone())
                .collect();
            if names.is_empty() {
                continue;
            }
            let server = builder.server(self.backends.by_id[id].plan.name.clone(), names);
            index_of.insert(*id, server);
        }
        let (table, collisions) = builder.build();
        for c in collisions {
            tracing::warn!(
                "name collision: {} is kept by {:?}; renamed: {:?}",
                c.exposed,
                c.kept.name,
                c.renamed
                    .iter()
                    .map(|(o, n)| format!("{} -> {n}", o.name))
                    .collect::<Vec<_>>()
            );
        }
        let transparent = self.settings.transparent;
        let mut routes = HashMap::default();
        let mut items = Vec::with_capacity(entries.len());
        for (id, item) in entries {
            // One server served as itself keeps its own names.
            let exposed = if transparent {
                item.name.clone()
            } else {
                let Some(exposed) = table.exposed(index_of[id], &item.name) else {
                    continue;
                };
                exposed.to_owned()
            };
            if routes.contains_key(&exposed) {
                continue;
            }
            let text = if transparent {
                item.raw.get().to_owned()
            } else {
                RawObject::parse(item.raw.get())
                    .map(|o| o.with("name", &raw::quote(&exposed)))
                    .unwrap_or_else(|| item.raw.get().to_owned())
            };
            routes.insert(exposed, (*id, raw::quote(&item.name).into()));
            items.push(text);
        }
        let mut held_routes = HashMap::default();
        for (id, h) in held {
            if let Some(exposed) = index_of
                .get(id)
                .and_then(|i| table.exposed(*i, &h.name))
                .filter(|e| !routes.contains_key(*e))
            {
                held_routes.insert(exposed.to_owned(), (*id, h.name.clone(), h.change));
            }
        }
        Named {
            items,
            routes,
            held: held_routes,
        }
    }

    /// Keeps a recomputed list, and tells the fronts if it changed (or a
    /// change is owed to them).
    fn announce(&mut self, kind: Kind, items: Vec<String>) {
        let announced = std::mem::take(&mut self.catalog.announced[kind.index()]);
        let slot = &mut self.catalog.merged.items[kind.index()];
        if *slot == items && !announced {
            return;
        }
        *slot = items;
        let search_hides = kind == Kind::Tools && self.settings.tool_search;
        if !search_hides {
            tracing::info!("{} changed", kind.method());
            self.broadcast(mcpvisor_jsonrpc::build::notification(kind.changed(), None));
            self.tell_listens_changed(kind);
        }
    }

    /// One page of a merged list, as a result object.
    pub(crate) fn list_page(&self, kind: Kind, cursor: Option<&str>) -> Result<String, String> {
        let items = &self.catalog.merged.items[kind.index()];
        let start = match cursor {
            None => 0,
            Some(c) => decode_cursor(c).ok_or_else(|| format!("unknown cursor {c:?}"))?,
        };
        let end = (start + PAGE).min(items.len());
        let page = items.get(start..end).unwrap_or_default();
        let mut out = format!("{{\"{}\":[{}]", kind.key(), page.join(","));
        if end < items.len() {
            out.push_str(&format!(
                ",\"nextCursor\":{}",
                raw::quote(&encode_cursor(end))
            ));
        }
        out.push('}');
        Ok(out)
    }

    /// The backend that serves a resource URI: the one that listed it, or
    /// the first whose template matches.
    pub(crate) fn backend_for_uri(&self, uri: &str) -> Option<BackendId> {
        if let Some(id) = self.catalog.merged.uris.get(uri) {
            return Some(*id);
        }
        self.catalog
            .merged
            .templates
            .iter()
            .find(|(t, _)| template_matches(t, uri))
            .map(|(_, id)| *id)
    }

    /// Writes a backend's lists to the list cache.
    pub(crate) fn store_cache(&mut self, id: BackendId) {
        let Some(b) = self.backends.by_id.get(&id) else {
            return;
        };
        let Some(cache) = &self.catalog.cache else {
            return;
        };
        let Some(key) = b.plan.cache_key else { return };
        let lists = Cached::to_lists(&b.lists, b.init.as_ref());
        // The shell writes it.
        self.effects
            .list
            .push(super::Effect::StoreCache(Box::new(super::StoreCache {
                cache: cache.clone(),
                key,
                lists,
                server: b.plan.name.clone(),
            })));
    }
}

fn encode_cursor(offset: usize) -> String {
    format!("mcpvisor:{offset}")
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    cursor.strip_prefix("mcpvisor:")?.parse().ok()
}

/// Whether `uri` fits an RFC 6570 template (level 1: each `{var}` stands for
/// one or more characters; `{+var}` and the like are treated the same).
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        parts.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return template == uri,
        }
    }
    parts.push(rest);
    // parts: literal, var, literal, var, ..., literal
    let Some((first, tail)) = parts.split_first() else {
        return false;
    };
    let Some(mut at) = uri.strip_prefix(first) else {
        return false;
    };
    let count = tail.len();
    for (i, lit) in tail.iter().enumerate() {
        let last = i + 1 == count;
        if last {
            return at.len() > lit.len() && at.ends_with(lit);
        }
        if lit.is_empty() {
            // Two variables in a row: anything goes for the first.
            continue;
        }
        match at.get(1..).and_then(|s| s.find(lit)) {
            Some(pos) => at = &at[1 + pos + lit.len()..],
            None => return false,
        }
    }
    at.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_level_one() {
        assert!(template_matches(
            "test://template/{id}/data",
            "test://template/42/data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!template_matches(
            "test://template/{id}/data",
            "test://other/42/data"
        ));
        assert!(template_matches("file:///{path}", "file:///a/b/c"));
        assert!(template_matches("static://x", "static://x"));
        assert!(!template_matches("static://x", "static://y"));
    }

    #[test]
    fn cursors_round_trip() {
        assert_eq!(decode_cursor(&encode_cursor(500)), Some(500));
        assert_eq!(decode_cursor("nope"), None);
    }
}
