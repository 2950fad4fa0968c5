//! Tasks, routed by task id: 2025-11-25's `tasks/get`, `tasks/result`
//! and `tasks/cancel`, and the 2026-07-28 extension's `tasks/get`,
//! `tasks/update` and `tasks/cancel`.
//!
//! Each server makes up its own task ids, so two servers may well give
//! the same one. The gateway hands a client the id namespaced with the
//! server's name and the name separator (`SERVER__ID`, as tool names are),
//! and takes the prefix off again to route a `tasks/*` request: the
//! longest configured server name that the id starts with, followed by the
//! separator, names the server; the rest is the server's own id, passed on
//! as it was given. Ids are rewritten where a task is handed out or
//! described: a `CreateTaskResult` (`result.task.taskId` in 2025-11-25,
//! `result.taskId` beside `resultType: "task"` in the extension), a task's
//! state (`result.taskId`), and the `io.modelcontextprotocol/related-task`
//! of a task's result and of a server's request to the client on a task's
//! behalf (an elicitation while it waits for input). A server's task status notifications go to the
//! client of a per-client server only: with a shared server the gateway
//! cannot tell whose task it is, and the revision lets a client rely on
//! polling alone. Served as itself (transparent), the one server's ids
//! pass untouched.
//!
//! A task belongs to the client it was handed to, where the gateway can
//! tell clients apart: an id handed to a client of the handshake era (an
//! HTTP session, the stdio client) is bound to it, and `tasks/*` naming it
//! from anyone else (another session, a 2026-07-28 request, which carries
//! no session) is answered as an id no server gave; once that client has
//! gone, from everyone. Ids handed to 2026-07-28 requests are not bound:
//! nothing says which client a later request comes from. At most
//! [`MAX_BOUND_TASKS`] ids are bound, the oldest forgotten first.

use std::sync::LazyLock;

use bytes::Bytes;
use mcpvisor_jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND, build};
use memchr::memmem;
use serde_json::json;

use super::Hub;
use super::backend::{Backend, BackendId, Role};
use super::front::Params;
use super::request::FrontRequest;
use crate::fronts::FrontId;
use crate::raw::{self, RawObject};

/// The most task ids bound to the clients they were handed to.
pub(crate) const MAX_BOUND_TASKS: usize = 16_384;

/// The `_meta` key tying a message to a task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// [`RELATED_TASK`]'s searcher, built once.
static RELATED: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(RELATED_TASK.as_bytes()));

impl Hub {
    /// A `tasks/…` request: to the server whose task it names, under the
    /// server's own id.
    pub(super) fn route_task(&mut self, front: FrontId, req: &FrontRequest<'_>, method: &str) {
        if method == "tasks/list" {
            let msg = "Method not found: tasks/list is not served through mcpvisor's gateway, which holds no list of tasks across its servers; use the ids each call gave (tasks/get)";
            return self.reply_error(front, req, METHOD_NOT_FOUND, msg);
        }
        if !matches!(
            method,
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/update"
        ) {
            let msg = format!("Method not found: {method}");
            return self.reply_error(front, req, METHOD_NOT_FOUND, &msg);
        }
        let Some(obj) = &req.params else {
            let msg = format!("{method} needs params.taskId, a string");
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        };
        let Some(exposed) = obj.str_ref("taskId") else {
            let msg = format!("{method} needs params.taskId, a string");
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        };
        let bound_elsewhere = self
            .fronts
            .task_owners
            .get(exposed.as_ref())
            .is_some_and(|owner| *owner != front);
        let target = self.task_target(&exposed).filter(|_| !bound_elsewhere);
        let Some((backend, own)) = target else {
            let msg = format!(
                "Failed to retrieve task: Task not found: no server of this gateway gave the task id {exposed:?} (ids are SERVER{}ID)",
                self.settings.separator.as_str()
            );
            let data = json!({ "taskId": exposed });
            let error = build::error(req.raw_id, INVALID_PARAMS, &msg, Some(&data));
            return self.emit_to(front, error, Some(req.id.clone()));
        };
        let params = obj.with("taskId", &raw::quote(own));
        self.forward(front, backend, req, Params::Text(params));
    }

    /// What a client that initialized is told of tasks: task-augmented
    /// `tools/call` (and `tasks/cancel`) when a server takes them; `None`
    /// when none does.
    pub(super) fn task_capabilities(&self) -> Option<serde_json::Value> {
        let declared = |pointer: &str| {
            self.backends.order.iter().any(|id| {
                self.backends.by_id[id]
                    .init
                    .as_ref()
                    .and_then(|i| i.pointer(pointer))
                    .is_some_and(|v| !v.is_null())
            })
        };
        if !declared("/capabilities/tasks/requests/tools/call") {
            return None;
        }
        let mut tasks = json!({"requests": {"tools": {"call": {}}}});
        if declared("/capabilities/tasks/cancel") {
            tasks["cancel"] = json!({});
        }
        Some(tasks)
    }

    /// The server a namespaced task id names, and the server's own id.
    fn task_target<'x>(&self, exposed: &'x str) -> Option<(BackendId, &'x str)> {
        if self.settings.transparent {
            let only = self.backends.order.first()?;
            return Some((*only, exposed));
        }
        let sep = self.settings.separator.as_str();
        self.backends
            .order
            .iter()
            .filter_map(|id| {
                let b = &self.backends.by_id[id];
                let own = exposed.strip_prefix(b.name())?.strip_prefix(sep)?;
                Some((b.name().len(), *id, own))
            })
            .max_by_key(|(len, _, _)| *len)
            .map(|(_, id, own)| (id, own))
    }

    /// A server's task id as clients see it.
    fn expose_task_id(&self, backend: BackendId, own: &str) -> String {
        if self.settings.transparent {
            return own.to_owned();
        }
        let name = self.backends.by_id.get(&backend).map_or("", Backend::name);
        format!("{name}{}{own}", self.settings.separator.as_str())
    }

    /// An answer from `backend` to `front` with the task ids in its result
    /// exposed, and a task it hands out bound to `front` when that front
    /// is of the handshake era; `None` when it names none (or is an error).
    pub(crate) fn expose_tasks_to(
        &mut self,
        front: FrontId,
        backend: BackendId,
        line: &[u8],
    ) -> Option<Bytes> {
        let (out, handed) = self.expose_tasks_in(backend, line)?;
        let session = self
            .fronts
            .open
            .get(&front)
            .is_some_and(|f| f.info.era == super::request::Era::Handshake);
        if let (Some(id), true) = (handed, session) {
            self.bind_task(id, front);
        }
        Some(out)
    }

    /// Binds a task id handed to `front` to it (see the module docs).
    fn bind_task(&mut self, id: String, front: FrontId) {
        let fronts = &mut self.fronts;
        if fronts.task_owners.contains_key(&id) {
            return;
        }
        if fronts.task_order.len() >= MAX_BOUND_TASKS {
            if let Some(oldest) = fronts.task_order.pop_front() {
                fronts.task_owners.remove(&oldest);
            }
        }
        fronts.task_order.push_back(id.clone());
        fronts.task_owners.insert(id, front);
    }

    /// An answer from `backend` with the task ids in its result exposed,
    /// and the id of the task it creates, if it is a `CreateTaskResult`
    /// (not the id a task's state names); `None` when it names none (or is
    /// an error).
    fn expose_tasks_in(&self, backend: BackendId, line: &[u8]) -> Option<(Bytes, Option<String>)> {
        // Most answers (every plain tool result) name no task: one fast
        // scan says so, and the answer is not read member by member.
        static TASK_ID: LazyLock<memmem::Finder<'static>> =
            LazyLock::new(|| memmem::Finder::new(b"\"taskId\""));
        if self.settings.transparent || TASK_ID.find(line).is_none() {
            return None;
        }
        let text = std::str::from_utf8(line).ok()?;
        let top = RawObject::parse(text)?;
        let result = RawObject::parse(top.get("result")?.get())?;
        // The id of a task this answer creates (a CreateTaskResult), as
        // against one it describes (a task's state).
        let mut handed = None;
        let mut quoted = |own: &str, creates: bool| {
            let exposed = self.expose_task_id(backend, own);
            let text = raw::quote(&exposed);
            if creates {
                handed = Some(exposed);
            }
            text
        };
        let mut edits: Vec<(&str, String)> = Vec::new();
        // A task's state, or the extension's CreateTaskResult.
        if let Some(own) = result.str("taskId") {
            let creates = result.str("resultType").as_deref() == Some("task");
            edits.push(("taskId", quoted(&own, creates)));
        }
        // 2025-11-25's CreateTaskResult.
        if let Some(task) = result.get("task").and_then(|t| RawObject::parse(t.get())) {
            if let Some(own) = task.str("taskId") {
                edits.push(("task", task.with("taskId", &quoted(&own, true))));
            }
        }
        // A task's result, tied to its task.
        if let Some(meta) = result.get("_meta") {
            if let Some(meta) = self.expose_related_task(backend, meta.get()) {
                edits.push(("_meta", meta));
            }
        }
        if edits.is_empty() {
            return None;
        }
        let edits: Vec<(&str, Option<&str>)> =
            edits.iter().map(|(k, v)| (*k, Some(v.as_str()))).collect();
        let result = result.write(&edits);
        Some((Bytes::from(top.with("result", &result)), handed))
    }

    /// `meta` (a `_meta` object's text) with the task id of its
    /// `io.modelcontextprotocol/related-task` exposed; `None` when it has
    /// none.
    fn expose_related_task(&self, backend: BackendId, meta: &str) -> Option<String> {
        let meta = RawObject::parse(meta)?;
        let related = RawObject::parse(meta.get(RELATED_TASK)?.get())?;
        let own = related.str("taskId")?;
        let exposed = raw::quote(&self.expose_task_id(backend, &own));
        Some(meta.with(RELATED_TASK, &related.with("taskId", &exposed)))
    }

    /// A server's request to a client (an elicitation while a task waits
    /// for input) with the task id of its `_meta`'s related task exposed;
    /// `None` when it names none.
    pub(crate) fn expose_related_in_request(
        &self,
        backend: BackendId,
        line: &[u8],
    ) -> Option<Bytes> {
        if self.settings.transparent || RELATED.find(line).is_none() {
            return None;
        }
        let top = RawObject::parse(std::str::from_utf8(line).ok()?)?;
        let params = RawObject::parse(top.get("params")?.get())?;
        let meta = self.expose_related_task(backend, params.get("_meta")?.get())?;
        Some(Bytes::from(
            top.with("params", &params.with("_meta", &meta)),
        ))
    }

    /// A server's `notifications/tasks/status` (or the extension's
    /// `notifications/tasks`): to the client of a per-client server, its
    /// task id exposed; dropped for a shared one (see the module docs).
    pub(crate) fn on_task_status(&mut self, backend: BackendId, line: &Bytes) {
        let Some(b) = self.backends.by_id.get(&backend) else {
            return;
        };
        let Role::Instance { owner, .. } = b.role else {
            return;
        };
        let Some(params) =
            mcpvisor_jsonrpc::envelope::raw_params(line).and_then(|p| RawObject::parse(p.get()))
        else {
            return;
        };
        let Some(own) = params.str("taskId") else {
            return;
        };
        let method = mcpvisor_jsonrpc::Envelope::peek(line)
            .map(|e| e.method().to_owned())
            .unwrap_or_default();
        let params = params.with("taskId", &raw::quote(&self.expose_task_id(backend, &own)));
        self.emit_to(owner, build::notification(&method, Some(&params)), None);
    }
}
