//! What the front client says, and the answers the gateway gives itself.

use bytes::Bytes;
use mcpvisor_jsonrpc::envelope::raw_params;
use mcpvisor_jsonrpc::{
    Envelope, EnvelopeError, INVALID_REQUEST, Kind, PARSE_ERROR, build, rewrite,
};
use serde_json::{Value, json};

use super::backend::{Backend, BackendId};
use super::lists::Kind as ListKind;
use super::request::Era;
use super::{FanOut, Hub, Pending, Private};
use crate::fronts::FrontId;
use crate::raw::RawObject;

/// Protocol revisions the gateway speaks with a front client that
/// initializes, newest first.
const FRONT_PROTOCOLS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The `_meta` key of a 2026-07-28 request's protocol version.
const META_PROTOCOL: &str = "io.modelcontextprotocol/protocolVersion";
/// The gateway's own tools (with `--tool-search`).
pub(crate) const SEARCH_TOOL: &str = "mcpvisor__search_tools";
pub(crate) const CALL_TOOL: &str = "mcpvisor__call_tool";

impl Hub {
    pub(crate) fn on_front_message(
        &mut self,
        front: FrontId,
        line: Bytes,
        scan: Option<Box<mcpvisor_jsonrpc::Scanned>>,
    ) {
        // Most requests are calls whose params the hub edits: they are read
        // in the same pass as the envelope, or were, by the front.
        let read = scan.and_then(|scan| (*scan).read(&line));
        let peeked = match read {
            Some(read) => Ok(read),
            None => Envelope::peek_with_params(&line),
        };
        let (env, params) = match peeked {
            Ok(peeked) => peeked,
            Err(EnvelopeError::Json(e)) => {
                let msg = format!("Parse error: {e}");
                self.emit_to(front, build::error("null", PARSE_ERROR, &msg, None), None);
                return;
            }
            Err(e) => {
                let msg = format!("Invalid request: {e}");
                self.emit_to(
                    front,
                    build::error("null", INVALID_REQUEST, &msg, None),
                    None,
                );
                return;
            }
        };
        match env.kind {
            Kind::Request => self.on_front_request(front, &line, &env, params),
            Kind::Notification => self.on_front_notification(front, &line, &env),
            Kind::Response => self.on_front_response(front, &line, &env),
        }
    }

    /// For a name under the prefix of a configured server that refuses
    /// requests (failing, waiting for authorization, disabled, stopped):
    /// that server's refusal, with its crash report or its authorization
    /// link. Its tools are withdrawn or not known yet, but a client that
    /// holds the name is told why, not "unknown".
    pub(super) fn refused_by_prefix(&self, name: &str) -> Option<(String, Value)> {
        self.backends.order.iter().find_map(|id| {
            let b = &self.backends.by_id[id];
            let refusal = b.refusal()?;
            // The prefix its names get: the exposed name of a one-letter
            // name, less that letter.
            let probe = crate::naming::exposed_name(&self.settings.separator, b.name(), "x");
            let prefix = probe.strip_suffix('x').unwrap_or(&probe);
            name.starts_with(prefix).then_some(refusal)
        })
    }

    /// Records what the front client declared.
    pub(super) fn on_initialize(&mut self, front: FrontId, obj: Option<&RawObject<'_>>) {
        let caps: Value = obj
            .and_then(|o| o.get("capabilities"))
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or(Value::Null);
        let has = |k: &str| caps.get(k).is_some_and(|v| !v.is_null());
        let Some(f) = self.fronts.open.get_mut(&front) else {
            return;
        };
        f.info.sampling = has("sampling");
        f.info.elicitation = has("elicitation");
        f.info.roots = has("roots");
        f.info.elicitation_url = caps
            .get("elicitation")
            .and_then(|e| e.get("url"))
            .is_some_and(|u| !u.is_null());
        f.info.protocol = obj.and_then(|o| o.str("protocolVersion"));
        f.info.client = obj
            .and_then(|o| o.get("clientInfo"))
            .and_then(|info| RawObject::parse(info.get())?.str("name"));
        f.info.era = Era::Handshake;
        let init = json!({
            "capabilities": caps,
            "clientInfo": obj
                .and_then(|o| o.get("clientInfo"))
                .and_then(|i| serde_json::from_str::<Value>(i.get()).ok()),
        });
        let envelope =
            mcpvisor_jsonrpc::era::client_meta(Some(&init), mcpvisor_jsonrpc::era::MODERN);
        f.info.envelope = Some(envelope.to_string().into());
    }

    /// Counts a front's subscription to `uri`; whether the server must be
    /// told (the first front to subscribe).
    pub(super) fn hold_subscription(&mut self, front: FrontId, uri: &str) -> bool {
        let Some(f) = self.fronts.open.get_mut(&front) else {
            return false;
        };
        if !f.subscriptions.insert(uri.to_owned()) {
            return false;
        }
        let count = self.fronts.subscribed.entry(uri.to_owned()).or_insert(0);
        *count += 1;
        *count == 1
    }

    /// Ends a front's subscription to `uri`; whether the server must be
    /// told (the last front left).
    pub(super) fn drop_subscription(&mut self, front: FrontId, uri: &str) -> bool {
        let Some(f) = self.fronts.open.get_mut(&front) else {
            return false;
        };
        if !f.subscriptions.remove(uri) {
            return false;
        }
        self.unsubscribed(uri)
    }

    /// One front fewer holds `uri`; whether that was the last.
    fn unsubscribed(&mut self, uri: &str) -> bool {
        match self.fronts.subscribed.get_mut(uri) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                self.fronts.subscribed.remove(uri);
                true
            }
            None => false,
        }
    }

    /// A front that held `uri` has gone: the server is told when it was the
    /// last.
    pub(crate) fn release_subscription(&mut self, uri: &str) {
        if !self.unsubscribed(uri) {
            return;
        }
        if let Some(backend) = self.backend_for_uri(uri) {
            let params = json!({ "uri": uri }).to_string();
            // A server of both eras holds its handshake-era clients' at its
            // twin.
            if let Some(twin) = self.backends.twins.get(&backend).copied() {
                self.send_private(twin, Private::Quiet, "resources/unsubscribe", Some(&params));
            }
            if self.driven(backend) == Some(super::backend::Driven::Modern) {
                return self.relisten(backend);
            }
            self.send_private(
                backend,
                Private::Quiet,
                "resources/unsubscribe",
                Some(&params),
            );
        }
    }

    pub(crate) fn any_settling(&self) -> bool {
        self.backends.by_id.values().any(|b| b.settling())
    }

    fn capabilities() -> Value {
        json!({
            "tools": {"listChanged": true},
            "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "logging": {},
            "completions": {},
        })
    }

    pub(super) fn initialize_result(&mut self, front: FrontId) -> String {
        let requested = self
            .fronts
            .open
            .get(&front)
            .and_then(|f| f.info.protocol.clone())
            .unwrap_or_else(|| FRONT_PROTOCOLS[0].to_owned());
        let version = FRONT_PROTOCOLS
            .iter()
            .find(|v| **v == requested.as_str())
            .copied()
            .unwrap_or(FRONT_PROTOCOLS[0]);
        if let Some(own) = self.transparent_result(version) {
            return own;
        }
        let mut capabilities = Self::capabilities();
        if let Some(tasks) = self.task_capabilities() {
            capabilities["tasks"] = tasks;
        }
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": {"name": "mcpvisor", "title": "mcpvisor gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        // Where 2026-07-28 has a server name itself on its results.
        result["_meta"] =
            json!({"io.modelcontextprotocol/serverInfo": result["serverInfo"].clone()});
        if let Some(text) = self.instructions() {
            result["instructions"] = Value::String(text);
        }
        result.to_string()
    }

    /// In transparent mode, the one server's own `initialize` result, with
    /// the version agreed with this client and `listChanged` set on every
    /// list it declares (as `run` does).
    fn transparent_result(&self, version: &str) -> Option<String> {
        if !self.settings.transparent {
            return None;
        }
        let init = self
            .backends
            .order
            .first()
            .and_then(|id| self.backends.by_id[id].init.clone())?;
        let mut result = init;
        result["protocolVersion"] = Value::String(version.to_owned());
        if let Some(caps) = result
            .get_mut("capabilities")
            .and_then(Value::as_object_mut)
        {
            for list in ["tools", "prompts", "resources"] {
                if let Some(cap) = caps.get_mut(list).and_then(Value::as_object_mut) {
                    cap.insert("listChanged".into(), Value::Bool(true));
                }
            }
        }
        Some(result.to_string())
    }

    pub(super) fn discover_result(&self) -> String {
        let mut result = json!({
            "supportedVersions": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"],
            "capabilities": Self::capabilities(),
            "serverInfo": {"name": "mcpvisor", "title": "mcpvisor gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        // Where 2026-07-28 has a server name itself on its results.
        result["_meta"] =
            json!({"io.modelcontextprotocol/serverInfo": result["serverInfo"].clone()});
        if let Some(text) = self.instructions() {
            result["instructions"] = Value::String(text);
        }
        result.to_string()
    }

    /// Each started server's instructions, under its name.
    fn instructions(&self) -> Option<String> {
        let mut parts = Vec::new();
        for id in &self.backends.order {
            let b = &self.backends.by_id[id];
            let text = b
                .init
                .as_ref()
                .and_then(|i| i.get("instructions"))
                .and_then(Value::as_str);
            if let Some(text) = text.filter(|t| !t.trim().is_empty()) {
                parts.push(format!("## {}\n{}", b.name(), text.trim()));
            }
        }
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// Sends `logging/setLevel` to every ready backend that serves `front`
    /// and declares `logging` (a per-client server through the front's own
    /// process): each gets the level it should log at (see
    /// [`Hub::level_for`]); the front gets one answer when all have
    /// answered.
    pub(super) fn fan_out(&mut self, front: FrontId, front_id: Bytes, method: &str) {
        let targets: Vec<BackendId> = self
            .backends
            .order
            .iter()
            .map(|id| self.served_now(*id, front))
            .filter(|id| self.logs(*id))
            .collect();
        let fid = self.calls.next_fanout();
        let mut sent = 0;
        for b in targets {
            let Some(level) = self.level_for(b) else {
                continue;
            };
            let params = format!(r#"{{"level":"{}"}}"#, level.as_str());
            if self
                .send_private(b, Private::SetLevel(fid), method, Some(&params))
                .is_some()
            {
                sent += 1;
            }
        }
        self.calls.fanouts.insert(
            fid,
            FanOut {
                front,
                id: front_id,
                waiting: sent,
            },
        );
        if sent == 0 {
            self.fanout_done_now(fid);
        }
    }

    /// The most verbose level any open front asked for.
    pub(crate) fn wanted_log_level(&self) -> Option<LogLevel> {
        self.fronts
            .open
            .values()
            .filter(|f| f.closing.is_none())
            .filter_map(|f| f.log_level)
            .min()
    }

    /// Whether a backend is ready and declares `logging`.
    fn logs(&self, id: BackendId) -> bool {
        // 2026-07-28 removed `logging/setLevel`.
        self.backends.by_id.get(&id).is_some_and(|b| {
            b.is_ready()
                && !b.is_modern()
                && b.init
                    .as_ref()
                    .and_then(|i| i.get("capabilities"))
                    .and_then(|c| c.get("logging"))
                    .is_some()
        })
    }

    /// The level a backend should log at: a per-client process its own
    /// client's, a shared one the most verbose any client asked for.
    pub(crate) fn level_for(&self, id: BackendId) -> Option<LogLevel> {
        match self.backends.by_id.get(&id)?.owner() {
            Some(owner) => self.fronts.open.get(&owner)?.log_level,
            None => self.wanted_log_level(),
        }
    }

    /// A front with a log level left (it held `was`): when no remaining
    /// front wants messages that verbose, the shared servers are told the
    /// level that is still wanted. With no level wanted at all they keep
    /// theirs.
    pub(crate) fn relax_log_level(&mut self, was: Option<LogLevel>) {
        let Some(now) = self.wanted_log_level() else {
            return;
        };
        if was.is_some_and(|was| was >= now) {
            return;
        }
        let params = format!(r#"{{"level":"{}"}}"#, now.as_str());
        let shared: Vec<BackendId> = self
            .backends
            .by_id
            .iter()
            .filter(|(id, b)| b.owner().is_none() && self.logs(**id))
            .map(|(id, _)| *id)
            .collect();
        for b in shared {
            self.send_private(b, Private::Quiet, "logging/setLevel", Some(&params));
        }
    }

    /// A backend that has just been initialized logs at the level its
    /// clients want, if they asked.
    pub(crate) fn sync_log_level(&mut self, backend: BackendId) {
        let Some(level) = self.level_for(backend) else {
            return;
        };
        if !self.logs(backend) {
            return;
        }
        let params = format!(r#"{{"level":"{}"}}"#, level.as_str());
        self.send_private(backend, Private::Quiet, "logging/setLevel", Some(&params));
    }

    pub(crate) fn fanout_done(&mut self, fid: u64) {
        let Some(f) = self.calls.fanouts.get_mut(&fid) else {
            return;
        };
        f.waiting = f.waiting.saturating_sub(1);
        if f.waiting == 0 {
            self.fanout_done_now(fid);
        }
    }

    fn fanout_done_now(&mut self, fid: u64) {
        if let Some(f) = self.calls.fanouts.remove(&fid) {
            let id = String::from_utf8_lossy(&f.id).into_owned();
            self.emit_to(f.front, build::result(&id, "{}"), Some(f.id.clone()));
        }
    }

    /// The backend and rewritten params of a `completion/complete`.
    pub(super) fn completion_target(&self, obj: &RawObject<'_>) -> Option<(BackendId, String)> {
        let reference = RawObject::parse(obj.get("ref")?.get())?;
        match reference.str("type")?.as_str() {
            "ref/prompt" => {
                let name = reference.str("name")?;
                let (backend, original) = self.catalog.merged.prompts.get(&name)?;
                let new_ref = reference.with("name", original);
                Some((*backend, obj.with("ref", &new_ref)))
            }
            "ref/resource" => {
                let uri = reference.str("uri")?;
                let backend = self
                    .catalog
                    .merged
                    .templates
                    .iter()
                    .find(|(t, _)| *t == uri)
                    .map(|(_, b)| *b)
                    .or_else(|| self.backend_for_uri(&uri))?;
                Some((backend, obj.write(&[])))
            }
            _ => None,
        }
    }

    fn on_front_notification(&mut self, front: FrontId, line: &Bytes, env: &Envelope<'_>) {
        match env.method() {
            "notifications/initialized" => {
                if let Some(f) = self.fronts.open.get_mut(&front) {
                    f.info.initialized = true;
                }
                for (backend, held) in std::mem::take(&mut self.calls.early) {
                    if let Ok(env) = Envelope::peek(&held) {
                        self.on_server_request(backend, &held, &env);
                    }
                }
            }
            "notifications/cancelled" => {
                let Some(rid) = env.request_id else { return };
                let key = Bytes::copy_from_slice(rid.get().as_bytes());
                if self.end_listen(front, &key) {
                    return;
                }
                let Some(gid) = self.calls.by_front_id.get(&(front, key.clone())).copied() else {
                    // A parked request: drop it without an answer.
                    self.calls
                        .parked
                        .retain(|p| p.front != front || p.id != key);
                    return;
                };
                // The backend's session gives a cancelled request no answer,
                // so its entry ends here.
                if let Some(Pending::Front { backend, .. }) = self.take_pending(gid) {
                    let reason = raw_params(line)
                        .and_then(|p| RawObject::parse(p.get()))
                        .and_then(|o| o.str("reason"))
                        .unwrap_or_else(|| "cancelled by the client".into());
                    let queued = self.backends.by_id.get_mut(&backend).and_then(|b| {
                        let at = b.queue.iter().position(|(q, _)| *q == gid)?;
                        Some(b.queue.remove(at))
                    });
                    if queued.is_none() {
                        self.cancel_on_backend(backend, gid, &reason);
                    }
                }
            }
            "notifications/roots/list_changed" => {
                for b in self.backends.by_id.values() {
                    if b.is_ready() {
                        if let Some(link) = b.link() {
                            link.try_send(line.clone());
                        }
                    }
                }
            }
            other => tracing::debug!(method = other, "front notification not routed"),
        }
    }

    /// The front's answer to a backend's request goes back to the backend
    /// (and its session generation) that asked, under the backend's id.
    fn on_front_response(&mut self, front: FrontId, line: &Bytes, env: &Envelope<'_>) {
        let Some(raw_id) = env.id else { return };
        let fid = serde_json::from_str::<String>(raw_id.get())
            .ok()
            .and_then(|s| {
                s.strip_prefix("mcpvisor-")
                    .and_then(|n| n.parse::<u64>().ok())
            });
        if let Some(fid) = fid.filter(|f| self.is_asked(*f)) {
            return self.on_asked_answer(front, fid, line);
        }
        let known = fid.filter(|f| {
            self.calls
                .server_reqs
                .get(f)
                .is_some_and(|r| r.front == front)
        });
        let Some(req) = known.and_then(|f| self.calls.server_reqs.remove(&f)) else {
            tracing::debug!("an answer for no pending server request dropped");
            return;
        };
        let out = rewrite::splice(line, raw_id, &req.id);
        if let Some(link) = self
            .backends
            .by_id
            .get(&req.backend)
            .and_then(Backend::link)
        {
            link.try_send(out);
        }
    }

    // === tool search ===

    pub(super) fn search_tools(&mut self, front: FrontId, id: &str, obj: &RawObject<'_>) {
        let args: Value = obj
            .get("arguments")
            .and_then(|a| serde_json::from_str(a.get()).ok())
            .unwrap_or(Value::Null);
        let query = args["query"].as_str().unwrap_or_default().to_owned();
        let limit = args["limit"].as_u64().unwrap_or(10).clamp(1, 50) as usize;
        let tools: Vec<Value> = self.catalog.merged.items[ListKind::Tools.index()]
            .iter()
            .map(|t| serde_json::from_str(t).unwrap_or(Value::Null))
            .collect();
        let hits = self
            .catalog
            .merged
            .search
            .as_ref()
            .map(|ix| ix.search(&query, limit))
            .unwrap_or_default();
        let found: Vec<Value> = hits
            .into_iter()
            .filter_map(|(i, _)| tools.get(i))
            .map(|t| {
                json!({
                    "name": t["name"],
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "inputSchema": t.get("inputSchema").cloned().unwrap_or(json!({"type": "object"})),
                })
            })
            .collect();
        let text = json!({ "tools": found }).to_string();
        let result = json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"tools": found},
        });
        self.emit_to(
            front,
            build::result(id, &result.to_string()),
            Some(Bytes::copy_from_slice(id.as_bytes())),
        );
    }
}

/// The tool list in `--tool-search` mode.
pub(super) fn search_tools_list() -> String {
    json!({"tools": [
        {
            "name": SEARCH_TOOL,
            "description": "Search every tool of every server behind this gateway by what it does. Returns the best matches with their names, descriptions and input schemas; call one with mcpvisor__call_tool.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, in a few words"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "How many tools to return (default 10)"}
                },
                "required": ["query"]
            }
        },
        {
            "name": CALL_TOOL,
            "description": "Call a tool found with mcpvisor__search_tools, by its full name.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's full name, as search returned it"},
                    "arguments": {"type": "object", "description": "The tool's arguments"}
                },
                "required": ["name"]
            }
        }
    ]})
    .to_string()
}

/// MCP's "resource not found".
pub(super) const RESOURCE_NOT_FOUND: i64 = -32002;

/// A level of `logging/setLevel` and `notifications/message` (syslog's,
/// RFC 5424), ordered from the most verbose to the most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];
    pub(super) const NAMES: [&'static str; 8] = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];

    pub(crate) fn parse(name: &str) -> Option<Self> {
        let at = Self::NAMES.iter().position(|n| *n == name)?;
        Some(Self::ALL[at])
    }

    pub(crate) fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The level of a `notifications/message`'s params, if it names one.
    pub(crate) fn of_message(params: Option<&RawObject<'_>>) -> Option<Self> {
        Self::parse(&params?.str("level")?)
    }
}

/// A request's params on their way to a backend: as text, or as the text
/// they came in with one member's value replaced, still in pieces.
pub(crate) enum Params<'a> {
    Text(String),
    Parts([&'a str; 3]),
}

impl<'a> Params<'a> {
    /// `text` (read as `obj`) with its `name` replaced by `name` (JSON).
    pub(super) fn renamed(obj: &RawObject<'_>, text: &'a str, name: &'a str) -> Self {
        match obj.replaced_parts(text, "name", name) {
            Some(parts) => Params::Parts(parts),
            None => Params::Text(obj.with("name", name)),
        }
    }

    pub(super) fn into_text(self) -> String {
        match self {
            Params::Text(text) => text,
            Params::Parts(parts) => parts.concat(),
        }
    }
}

/// Whether a request is in the 2026-07-28 style (protocol version in `_meta`).
#[cfg(test)]
pub(super) fn is_modern(params: Option<&RawObject<'_>>) -> bool {
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| RawObject::parse(m.get()));
    meta_is_modern(meta.as_ref())
}

/// Whether a request's `_meta` (read as `meta`) names a 2026-07-28 (or
/// later) protocol version.
pub(super) fn meta_is_modern(meta: Option<&RawObject<'_>>) -> bool {
    meta.and_then(|m| m.str_ref(META_PROTOCOL))
        .is_some_and(|v| v.as_ref() >= "2026-07-28")
}

/// A 2026-07-28 request's `_meta` (read as `meta`) as its backend gets it:
/// without the envelope members, with `progressToken` set to `token` when
/// given; `None` when nothing is left, so that `_meta` goes.
pub(super) fn without_envelope_of(meta: &RawObject<'_>, token: Option<&str>) -> Option<String> {
    // The usual `_meta` is the envelope alone: nothing is left of it.
    if token.is_none() && meta.keys().all(|k| k.starts_with(ENVELOPE_PREFIX)) {
        return None;
    }
    let mut edits: Vec<(&str, Option<&str>)> = meta
        .keys()
        .filter(|k| k.starts_with(ENVELOPE_PREFIX))
        .map(|k| (k, None))
        .collect();
    if let Some(token) = token {
        edits.push(("progressToken", Some(token)));
    }
    let kept = meta.write(&edits);
    (kept != "{}").then_some(kept)
}

/// `params` without the 2026-07-28 envelope members of `_meta`
/// (`io.modelcontextprotocol/…`); an emptied `_meta` is dropped.
pub(super) fn without_envelope(params: &str) -> String {
    let Some(obj) = RawObject::parse(params) else {
        return params.to_owned();
    };
    let Some(meta) = obj.get("_meta").and_then(|m| RawObject::parse(m.get())) else {
        return params.to_owned();
    };
    match without_envelope_of(&meta, None) {
        Some(kept) => obj.with("_meta", &kept),
        None => obj.write(&[("_meta", None)]),
    }
}

/// The prefix of the 2026-07-28 envelope's `_meta` keys.
const ENVELOPE_PREFIX: &str = "io.modelcontextprotocol/";

/// A result with the members a 2026-07-28 client requires: `resultType`
/// (always `complete`: the gateway answers nothing else), and for a
/// cacheable result `ttlMs` (0: lists change as servers come and go) and
/// `cacheScope` (`private`: what a gateway serves depends on who runs it).
pub(crate) fn modern_result(result: &str, cacheable: bool) -> String {
    let Some(obj) = RawObject::parse(result) else {
        return result.to_owned();
    };
    let edits = modern_edits(&obj, cacheable);
    if edits.is_empty() {
        return result.to_owned();
    }
    obj.write(&edits)
}

/// The members [`modern_result`] adds to `result`, written as they are
/// appended (`"resultType":"complete"`, …; empty when it has them all), and
/// how many members `result` has. `None` when it is not an object.
pub(crate) fn modern_members(result: &str, cacheable: bool) -> Option<(String, usize)> {
    let obj = RawObject::parse(result)?;
    let mut added = String::new();
    for (key, value) in modern_edits(&obj, cacheable) {
        if !added.is_empty() {
            added.push(',');
        }
        added.push('"');
        added.push_str(key);
        added.push_str("\":");
        added.push_str(value.unwrap_or_default());
    }
    Some((added, obj.keys().count()))
}

/// The members a 2026-07-28 result lacks (see [`modern_result`]).
fn modern_edits(obj: &RawObject<'_>, cacheable: bool) -> Vec<(&'static str, Option<&'static str>)> {
    let mut edits = Vec::new();
    if obj.get("resultType").is_none() {
        edits.push(("resultType", Some("\"complete\"")));
    }
    if cacheable {
        if obj.get("ttlMs").is_none() {
            edits.push(("ttlMs", Some("0")));
        }
        if obj.get("cacheScope").is_none() {
            edits.push(("cacheScope", Some("\"private\"")));
        }
    }
    edits
}

/// `params` with `_meta.progressToken` set to the gateway's id.
pub(super) fn with_progress_token(params: &str, gid: u64) -> String {
    let Some(obj) = RawObject::parse(params) else {
        return params.to_owned();
    };
    let meta = obj
        .get("_meta")
        .and_then(|m| RawObject::parse(m.get()))
        .map(|m| m.with("progressToken", &gid.to_string()))
        .unwrap_or_else(|| format!("{{\"progressToken\":{gid}}}"));
    obj.with("_meta", &meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_tokens_are_rewritten_in_place() {
        let p = r#"{"name":"x","arguments":{"a":1},"_meta":{"progressToken":"t-1","other":true}}"#;
        assert_eq!(
            with_progress_token(p, 42),
            r#"{"name":"x","arguments":{"a":1},"_meta":{"progressToken":42,"other":true}}"#
        );
    }

    #[test]
    fn the_modern_envelope_is_taken_off_for_a_legacy_backend() {
        let p = r#"{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":3}}"#;
        assert_eq!(
            without_envelope(p),
            r#"{"name":"x","_meta":{"progressToken":3}}"#
        );
        let p = r#"{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#;
        assert_eq!(without_envelope(p), r#"{"name":"x"}"#);
    }

    #[test]
    fn log_levels_order_from_verbose_to_severe() {
        assert!(LogLevel::Debug < LogLevel::Info);
        assert!(LogLevel::Error < LogLevel::Emergency);
        for name in LogLevel::NAMES {
            assert_eq!(LogLevel::parse(name).map(LogLevel::as_str), Some(name));
        }
        assert_eq!(LogLevel::parse("verbose"), None);
        let p = RawObject::parse(r#"{"level":"warning","data":"x"}"#);
        assert_eq!(LogLevel::of_message(p.as_ref()), Some(LogLevel::Warning));
    }

    #[test]
    fn modern_requests_are_recognised() {
        let p = RawObject::parse(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#,
        );
        assert!(is_modern(p.as_ref()));
        let p = RawObject::parse(r#"{"_meta":{}}"#);
        assert!(!is_modern(p.as_ref()));
    }
}
