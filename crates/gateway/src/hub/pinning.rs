//! Pinning in the core: which of a server's definitions its clients see.
//!
//! The core goes by a view of the pin store ([`Pinning::view`]): the file
//! as the shell last read or wrote it, with the core's own edits that the
//! shell has not confirmed yet applied on top, so that a read racing an
//! approval never takes it back. Each merge of a list
//! ([`Hub::remerge`]) first approves what a `tofu` server offers of a kind
//! never approved ([`Hub::pin_first_sight`]), then sorts each item into
//! served (its definition is the approved one) or held back
//! ([`Hub::classify`]). Held items keep their place in the name table, so
//! that a call to one gets `-32012` under the name it will have once
//! approved; what a server's backends hold is written to the store as its
//! `pending` part whenever it changes. The core never touches the file:
//! its edits and reads are [`Effect::Pins`] jobs, done by the shell one
//! at a time, and come back as [`Input::Pins`].

use rustc_hash::FxHashMap as HashMap;
use serde_json::Value;

use super::backend::BackendId;
use super::lists::{Item, Kind};
use super::{Effect, Hub};
use crate::monitor::{ActionError, Change, DefinitionKind, EventKind, Pick, Quarantined};
use crate::pins::{Defs, Edit, PinFile};
use mcpvisor_config::PinPolicy;

/// JSON-RPC error code of a call to a held-back tool or prompt.
pub const HELD_BACK: i64 = -32012;
/// Most approvals waiting for the pin store to confirm their write; one
/// past it is answered at once.
const APPROVALS_WAITING: usize = 64;

/// The answer to a person's approval ([`crate::monitor::Monitor::approve`]).
pub(crate) type ApproveReply = tokio::sync::oneshot::Sender<Result<Vec<String>, ActionError>>;

/// What the shell does with the pin store for the core, in order.
#[derive(Debug)]
pub(crate) enum PinJob {
    /// Read the store again (it changed on disk).
    Read,
    /// Apply this edit under the store's lock; `seq` numbers the core's
    /// edits.
    Edit(u64, Edit),
}

/// What a [`PinJob`] gave: the store after every edit up to `through`.
#[derive(Debug)]
pub(crate) struct PinsRead {
    /// The last of the core's edits the shell has carried out (or given
    /// up on) before this.
    pub through: u64,
    /// The store as it is now, or why it could not be read.
    pub file: Result<PinFile, String>,
    /// The edit that could not be written (its number), and why.
    pub failed: Option<(u64, Edit, String)>,
}

/// The core's view of the pin store.
///
/// Invariant: `view` is `base` with every edit of `unconfirmed` applied,
/// in order; an edit leaves `unconfirmed` once a [`PinsRead`] through its
/// number arrives.
#[derive(Debug)]
pub(crate) struct Pinning {
    base: PinFile,
    /// Whether the store could be read: when not, nothing is approved on
    /// first sight (what a server offers waits, as under `strict`), since
    /// the approvals it may hold are unknown.
    readable: bool,
    unconfirmed: Vec<(u64, Edit)>,
    next_seq: u64,
    pub view: PinFile,
    /// What was last written as held back, by server.
    written_pending: HashMap<String, Defs>,
    /// Approvals answered once the store confirms (or refuses) their edit:
    /// its number, the names approved, where the answer goes.
    approvals: Vec<(u64, Vec<String>, ApproveReply)>,
}

impl Default for Pinning {
    fn default() -> Self {
        Self {
            base: PinFile::default(),
            readable: true,
            unconfirmed: Vec::new(),
            next_seq: 0,
            view: PinFile::default(),
            written_pending: HashMap::default(),
            approvals: Vec::new(),
        }
    }
}

/// A definition a backend offers and the core holds back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeldDef {
    pub kind: DefinitionKind,
    pub name: String,
    pub change: Change,
    /// As offered (see [`crate::pins::definition`]).
    pub offered: Value,
}

/// The kind of definition a list holds, for the lists that are pinned.
pub(crate) fn pinned_kind(kind: Kind) -> Option<DefinitionKind> {
    match kind {
        Kind::Tools => Some(DefinitionKind::Tool),
        Kind::Prompts => Some(DefinitionKind::Prompt),
        Kind::Templates => Some(DefinitionKind::ResourceTemplate),
        Kind::Resources => None,
    }
}

impl Hub {
    /// The store as the shell read it before the first servers were
    /// added.
    pub(crate) fn load_pins(&mut self, file: Result<PinFile, String>) {
        let p = &mut self.catalog.pins;
        match file {
            Ok(file) => {
                p.readable = true;
                p.base = file.clone();
                p.view = file;
            }
            Err(e) => {
                tracing::error!(
                    "the pin store cannot be read: {e}; every definition is held back until it can"
                );
                p.readable = false;
            }
        }
    }

    /// How `id`'s definitions are pinned.
    pub(crate) fn policy(&self, id: BackendId) -> PinPolicy {
        if self.settings.pins.is_none() || self.settings.transparent {
            return PinPolicy::Off;
        }
        self.backends
            .by_id
            .get(&id)
            .and_then(|b| b.plan.def.pin)
            .unwrap_or(self.settings.pin_default)
    }

    /// Applies an edit to the view and asks the shell to write it; answers
    /// its number.
    fn edit_pins(&mut self, edit: Edit) -> u64 {
        let p = &mut self.catalog.pins;
        p.next_seq += 1;
        p.view.apply(&edit);
        p.unconfirmed.push((p.next_seq, edit.clone()));
        self.effects
            .list
            .push(Effect::Pins(PinJob::Edit(p.next_seq, edit)));
        p.next_seq
    }

    /// The store changed on disk: read it again.
    pub(crate) fn on_pins_changed(&mut self) {
        if self.settings.pins.is_some() {
            self.effects.list.push(Effect::Pins(PinJob::Read));
        }
    }

    /// The shell read or wrote the store.
    pub(crate) fn on_pins(&mut self, read: PinsRead) {
        let mut dropped = None;
        let failed_why = read
            .failed
            .as_ref()
            .map(|(seq, _, why)| (*seq, why.clone()));
        if let Some((seq, edit, why)) = read.failed {
            let message = format!("the pin store was not written: {why}");
            tracing::warn!(server = %edit.server(), "{message}");
            if let Some(id) = self.find(edit.server()) {
                self.record(id, EventKind::Warning, message);
            }
            dropped = Some(seq);
        }
        let p = &mut self.catalog.pins;
        p.unconfirmed
            .retain(|(seq, _)| *seq > read.through && Some(*seq) != dropped);
        // The approvals whose edit is done are answered: approved, or not
        // written (the view drops it below, so it is held back again).
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut p.approvals)
            .into_iter()
            .partition(|(seq, _, _)| *seq <= read.through || Some(*seq) == dropped);
        p.approvals = waiting;
        for (seq, names, reply) in done {
            let answer = match &failed_why {
                Some((failed, why)) if *failed == seq => Err(ActionError::Refused(format!(
                    "the approval could not be written to the pin store ({why}), so nothing was approved; fix that and approve again"
                ))),
                _ => Ok(names),
            };
            let _ = reply.send(answer);
        }
        match read.file {
            Ok(file) => {
                p.readable = true;
                p.base = file;
            }
            Err(e) => {
                tracing::warn!("the pin store cannot be read: {e}; going by what was read last")
            }
        }
        let mut view = p.base.clone();
        for (_, edit) in &p.unconfirmed {
            view.apply(edit);
        }
        p.view = view;
        self.remerge_all();
    }

    /// Approves what `tofu` servers offer of `kind` when nothing of that
    /// kind was approved for them yet.
    pub(crate) fn pin_first_sight(&mut self, kind: Kind) {
        let Some(dk) = pinned_kind(kind) else {
            return;
        };
        if !self.catalog.pins.readable {
            return;
        }
        let ids: Vec<BackendId> = self.backends.order.clone();
        for id in ids {
            if self.policy(id) != PinPolicy::Tofu {
                continue;
            }
            let Some(b) = self.backends.by_id.get(&id) else {
                continue;
            };
            if !b.serves_lists() || self.catalog.pins.view.approved_any(&b.plan.name, dk) {
                continue;
            }
            let Some(list) = &b.lists[kind.index()] else {
                continue;
            };
            let defs = list
                .iter()
                .filter_map(|item| Some((dk, item.name.clone(), item_definition(dk, item)?)))
                .collect::<Vec<_>>();
            let server = b.plan.name.clone();
            if !defs.is_empty() {
                tracing::info!(server = %server, "{} {}s approved on first sight (pin: tofu)", defs.len(), dk.noun());
            }
            let _ = self.edit_pins(Edit::Approve {
                server,
                defs,
                seen: vec![dk],
            });
        }
    }

    /// Whether `item` of backend `id` is held back, and why.
    pub(crate) fn classify(&self, id: BackendId, kind: Kind, item: &Item) -> Option<HeldDef> {
        let dk = pinned_kind(kind)?;
        if self.policy(id) == PinPolicy::Off {
            return None;
        }
        let server = &self.backends.by_id.get(&id)?.plan.name;
        let offered = item_definition(dk, item)?;
        let approved = self.catalog.pins.view.approved(server, dk, &item.name);
        let change = match approved {
            Some(approved) if *approved == offered => return None,
            Some(_) => Change::Changed,
            None => Change::New,
        };
        Some(HeldDef {
            kind: dk,
            name: item.name.clone(),
            change,
            offered,
        })
    }

    /// Takes a merge's held items of `kind`: each backend's record of
    /// them, its events, and the store's `pending` part.
    pub(crate) fn hold(&mut self, kind: Kind, held: Vec<(BackendId, HeldDef)>) {
        let Some(dk) = pinned_kind(kind) else {
            return;
        };
        let mut by_backend: HashMap<BackendId, Vec<HeldDef>> = HashMap::default();
        for (id, h) in held {
            by_backend.entry(id).or_default().push(h);
        }
        let ids: Vec<BackendId> = self.backends.order.clone();
        let mut touched = Vec::new();
        for id in ids {
            let Some(b) = self.backends.by_id.get_mut(&id) else {
                continue;
            };
            if !b.serves_lists() && !by_backend.contains_key(&id) {
                // Not merged: what it held stays (a stopped server's
                // pending definitions are still to approve).
                continue;
            }
            let now = by_backend.remove(&id).unwrap_or_default();
            let before: Vec<HeldDef> = b.held.iter().filter(|h| h.kind == dk).cloned().collect();
            if before == now {
                // Nothing changed here, but what the store says is held
                // back may not be what is (a gateway that stopped held
                // it): `write_pending` puts it right, and writes nothing
                // when it is.
                if b.serves_lists() && b.lists[kind.index()].is_some() {
                    touched.push(b.plan.name.clone());
                }
                continue;
            }
            let fresh: Vec<HeldDef> = now
                .iter()
                .filter(|h| !before.iter().any(|o| o == *h))
                .cloned()
                .collect();
            b.held.retain(|h| h.kind != dk);
            b.held.extend(now);
            b.obs.revision += 1;
            let server = b.plan.name.clone();
            touched.push(server.clone());
            for h in fresh {
                let why = match h.change {
                    Change::Changed => "changed since it was approved",
                    Change::New => "is not approved yet",
                };
                let message = format!(
                    "{} `{}` {why}: held back until a person approves it (mcpvisor tools diff {server})",
                    h.kind.noun(),
                    h.name
                );
                tracing::warn!(server = %server, "{message}");
                self.record(id, EventKind::Quarantined, message);
            }
        }
        touched.sort();
        touched.dedup();
        for server in touched {
            self.write_pending(&server);
        }
    }

    /// Writes what the backends of `server` hold back, when it differs
    /// from what was last written, or (before this process wrote any) from
    /// what the store holds. A kind none of its backends has listed yet
    /// keeps what the store holds of it.
    fn write_pending(&mut self, server: &str) {
        if self.settings.pins.is_none() {
            return;
        }
        let p = &self.catalog.pins;
        let written = p.written_pending.get(server).cloned().unwrap_or_else(|| {
            p.view
                .server(server)
                .map(|s| s.pending.clone())
                .unwrap_or_default()
        });
        let mut pending = Defs::default();
        let mut listed = [false; 3];
        for b in self.backends.by_id.values() {
            if b.plan.name == server {
                for h in &b.held {
                    pending.insert(h.kind, h.name.clone(), h.offered.clone());
                }
                for (i, dk) in DefinitionKind::ALL.into_iter().enumerate() {
                    listed[i] |= b.serves_lists() && b.lists[list_kind(dk).index()].is_some();
                }
            }
        }
        for (i, dk) in DefinitionKind::ALL.into_iter().enumerate() {
            if !listed[i] {
                pending.of_mut(dk).clone_from(&written.of(dk).cloned());
            }
        }
        if written == pending {
            self.catalog
                .pins
                .written_pending
                .insert(server.to_owned(), pending);
            return;
        }
        self.catalog
            .pins
            .written_pending
            .insert(server.to_owned(), pending.clone());
        let _ = self.edit_pins(Edit::Pending {
            server: server.to_owned(),
            pending,
        });
    }

    /// What a server's page shows of its held definitions.
    pub(crate) fn quarantine_of(&self, id: BackendId) -> Vec<Quarantined> {
        let Some(b) = self.backends.by_id.get(&id) else {
            return Vec::new();
        };
        let mut held: Vec<&HeldDef> = b.held.iter().collect();
        held.sort_by_key(|h| h.kind);
        held.into_iter()
            .map(|h| Quarantined {
                kind: h.kind,
                name: h.name.clone(),
                change: h.change,
                diff: crate::pins::diff(
                    self.catalog
                        .pins
                        .view
                        .approved(&b.plan.name, h.kind, &h.name),
                    &h.offered,
                ),
                digest: crate::pins::digest(&h.offered),
            })
            .collect()
    }

    /// A person approves the definitions `picks` names of `server`:
    /// answered once the pin store has the approval (or could not take
    /// it: then it is undone, and the answer says so).
    pub(crate) fn approve(&mut self, server: &str, picks: Vec<Pick>, reply: ApproveReply) {
        match self.approve_now(server, picks) {
            Ok((names, Some(seq))) if self.catalog.pins.approvals.len() < APPROVALS_WAITING => {
                self.catalog.pins.approvals.push((seq, names, reply));
            }
            Ok((names, _)) => {
                let _ = reply.send(Ok(names));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// Approves the definitions `picks` names of `server` (all it holds
    /// when empty): the view and the store take them, and the lists are
    /// merged again (each changed list told once). A pick with a digest
    /// takes only the held definition of that name and digest; when none
    /// has it (the definition changed again since the person saw it),
    /// nothing is approved. Answers the names, and the number of the
    /// store's edit when one was made.
    fn approve_now(
        &mut self,
        server: &str,
        picks: Vec<Pick>,
    ) -> Result<(Vec<String>, Option<u64>), ActionError> {
        let Some(id) = self.find(server) else {
            return Err(ActionError::NoSuchServer(server.to_owned()));
        };
        let held = &self.backends.by_id[&id].held;
        if let Some(missing) = picks
            .iter()
            .find(|p| !held.iter().any(|h| h.name == p.name))
        {
            let what = if held.is_empty() {
                "nothing is held back".to_owned()
            } else {
                let names: Vec<&str> = held.iter().map(|h| h.name.as_str()).collect();
                format!("held back: {}", names.join(", "))
            };
            return Err(ActionError::Refused(format!(
                "the server `{server}` holds nothing named `{}` back ({what})",
                missing.name
            )));
        }
        let digests: Vec<(&HeldDef, String)> = held
            .iter()
            .map(|h| (h, crate::pins::digest(&h.offered)))
            .collect();
        for pick in &picks {
            let Some(seen) = &pick.digest else { continue };
            if !digests
                .iter()
                .any(|(h, d)| h.name == pick.name && d == seen)
            {
                let now: Vec<&str> = digests
                    .iter()
                    .filter(|(h, _)| h.name == pick.name)
                    .map(|(_, d)| d.as_str())
                    .collect();
                return Err(ActionError::Refused(format!(
                    "`{}` of server `{server}` changed again since it was shown (shown: {seen}, offered now: {}); nothing was approved: look at its diff again (mcpvisor tools diff {server}, or the server's page) and approve what it shows now",
                    pick.name,
                    now.join(", ")
                )));
            }
        }
        // Under a name picked with digests, only the definitions shown.
        let chosen: Vec<HeldDef> = digests
            .iter()
            .filter(|(h, d)| {
                picks.is_empty()
                    || picks
                        .iter()
                        .any(|p| p.name == h.name && p.digest.as_ref().is_none_or(|seen| seen == d))
            })
            .map(|(h, _)| (*h).clone())
            .collect();
        let mut approved: Vec<String> = Vec::new();
        for h in &chosen {
            if !approved.contains(&h.name) {
                approved.push(h.name.clone());
            }
        }
        if chosen.is_empty() {
            return Ok((approved, None));
        }
        let listed: Vec<String> = chosen
            .iter()
            .map(|h| format!("{} `{}`", h.kind.noun(), h.name))
            .collect();
        let seq = self.edit_pins(Edit::Approve {
            server: server.to_owned(),
            defs: chosen
                .into_iter()
                .map(|h| (h.kind, h.name, h.offered))
                .collect(),
            seen: Vec::new(),
        });
        let message = format!("approved by a person: {}", listed.join(", "));
        tracing::info!(server = %server, "{message}");
        self.record(id, EventKind::Approved, message);
        self.remerge_all();
        Ok((approved, Some(seq)))
    }

    /// The refusal of a call to a held-back tool or prompt, by its exposed
    /// name: its message and `error.data`.
    pub(crate) fn held_refusal(
        &self,
        kind: DefinitionKind,
        exposed: &str,
    ) -> Option<(String, Value)> {
        let table = match kind {
            DefinitionKind::Tool => &self.catalog.merged.held_tools,
            DefinitionKind::Prompt => &self.catalog.merged.held_prompts,
            DefinitionKind::ResourceTemplate => return None,
        };
        let (id, name, change) = table.get(exposed)?;
        let server = &self.backends.by_id.get(id)?.plan.name;
        let noun = kind.noun();
        let message = match change {
            Change::Changed => format!(
                "{noun} `{name}` of server `{server}` changed since it was approved and is held back; see `mcpvisor tools diff {server}`, then `mcpvisor tools approve {server} {name}`"
            ),
            Change::New if self.catalog.pins.view.approved_any(server, kind) => format!(
                "{noun} `{name}` of server `{server}` appeared after the server's definitions were approved and is held back; see `mcpvisor tools diff {server}`, then `mcpvisor tools approve {server} {name}`"
            ),
            Change::New => format!(
                "{noun} `{name}` of server `{server}` is not approved yet (pin: strict) and is held back; see `mcpvisor tools diff {server}`, then `mcpvisor tools approve {server} {name}`"
            ),
        };
        let data = serde_json::json!({
            "server": server,
            "name": name,
            "kind": noun,
            "reason": "quarantined",
        });
        Some((message, data))
    }
}

/// The list that holds definitions of `kind`.
fn list_kind(kind: DefinitionKind) -> Kind {
    match kind {
        DefinitionKind::Tool => Kind::Tools,
        DefinitionKind::Prompt => Kind::Prompts,
        DefinitionKind::ResourceTemplate => Kind::Templates,
    }
}

/// The definition of a backend's item.
fn item_definition(kind: DefinitionKind, item: &Item) -> Option<Value> {
    crate::pins::definition(kind, item.raw.get())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::pins::PinStore;

    fn approve(name: &str) -> Edit {
        Edit::Approve {
            server: "s".into(),
            defs: vec![(DefinitionKind::Tool, name.into(), json!({"name": name}))],
            seen: Vec::new(),
        }
    }

    fn approved(hub: &Hub) -> Vec<&String> {
        hub.catalog.pins.view.servers["s"]
            .approved
            .iter()
            .map(|(_, name, _)| name)
            .collect()
    }

    #[test]
    fn a_read_racing_an_unconfirmed_edit_keeps_it_and_a_failed_edit_is_dropped() {
        let settings = crate::Settings {
            pins: Some(PinStore::at("unused")),
            ..crate::Settings::default()
        };
        let mut hub = Hub::new(settings, None);
        hub.load_pins(Ok(PinFile::default()));
        hub.edit_pins(approve("ours"));
        let mut effects = Vec::new();
        hub.take_effects(&mut effects);
        assert!(
            matches!(&effects[..], [Effect::Pins(PinJob::Edit(1, edit))] if *edit == approve("ours")),
            "{effects:?}"
        );
        // A read of the file from before our edit was written, with another
        // process's approval in it: both count.
        let mut theirs = PinFile::default();
        theirs.apply(&approve("theirs"));
        hub.on_pins(PinsRead {
            through: 0,
            file: Ok(theirs.clone()),
            failed: None,
        });
        assert_eq!(approved(&hub), ["ours", "theirs"]);
        // The shell's answer to our edit: the file with both, and nothing
        // left to replay.
        let mut both = theirs;
        both.apply(&approve("ours"));
        hub.on_pins(PinsRead {
            through: 1,
            file: Ok(both.clone()),
            failed: None,
        });
        assert!(hub.catalog.pins.unconfirmed.is_empty());
        assert_eq!(hub.catalog.pins.view, both);
        // An edit that could not be written leaves the view with it.
        hub.edit_pins(approve("lost"));
        assert_eq!(approved(&hub), ["lost", "ours", "theirs"]);
        hub.on_pins(PinsRead {
            through: 0,
            file: Err("the pin store is behind".into()),
            failed: Some((2, approve("lost"), "the pin store is behind".into())),
        });
        assert_eq!(approved(&hub), ["ours", "theirs"]);
        assert!(hub.catalog.pins.unconfirmed.is_empty());
    }
}
