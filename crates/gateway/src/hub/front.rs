//! What the front client says, and the answers the gateway gives itself.

use bytes::Bytes;
use mcpvisor_jsonrpc::envelope::{ParamsObject, raw_params};
use mcpvisor_jsonrpc::{
    Envelope, EnvelopeError, INVALID_PARAMS, INVALID_REQUEST, Kind, METHOD_NOT_FOUND, NOT_STARTED,
    PARSE_ERROR, build, rewrite,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::backend::{BackendId, State};
use super::lists::Kind as ListKind;
use super::{FanOut, Hub, Parked, Pending, Private, Timer, Wrap};
use crate::fronts::FrontId;
use crate::raw::{self, RawObject};

/// Protocol revisions the gateway speaks with a front client that
/// initializes, newest first.
const FRONT_PROTOCOLS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The `_meta` key of a 2026-07-28 request's protocol version.
const META_PROTOCOL: &str = "io.modelcontextprotocol/protocolVersion";
/// The gateway's own tools (with `--tool-search`).
pub(crate) const SEARCH_TOOL: &str = "mcpvisor__search_tools";
pub(crate) const CALL_TOOL: &str = "mcpvisor__call_tool";

impl Hub {
    pub(crate) fn on_front_message(&mut self, front: FrontId, line: Bytes) {
        // Most requests are calls whose params the hub edits: they are read
        // in the same pass as the envelope.
        let (env, params) = match Envelope::peek_with_params(&line) {
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
            Kind::Request => self.on_front_request(front, &line, &env, params, false),
            Kind::Notification => self.on_front_notification(front, &line, &env),
            Kind::Response => self.on_front_response(front, &line, &env),
        }
    }

    /// A request from a front. `params`: its params object as the envelope
    /// scan read it (`Some(None)`: it has none), or `None` to read it here.
    fn on_front_request(
        &mut self,
        front: FrontId,
        line: &Bytes,
        env: &Envelope<'_>,
        params: Option<Option<ParamsObject<'_>>>,
        retry: bool,
    ) {
        let Some(raw_id) = env.id else { return };
        let id = Bytes::copy_from_slice(raw_id.get().as_bytes());
        let in_flight = self.by_front_id.contains_key(&(front, id.clone()));
        if in_flight || !retry && self.parked.iter().any(|p| p.front == front && p.id == id) {
            let msg = "Request not started: a request with this id is already in flight. It is safe to retry with another id.";
            self.emit_to(
                front,
                build::error(raw_id.get(), mcpvisor_jsonrpc::NOT_STARTED, msg, None),
                Some(id.clone()),
            );
            return;
        }
        if !retry && self.awaited_by(front) >= self.settings.max_in_flight {
            let msg = format!(
                "Request not started: {} requests are already in flight (--max-in-flight). It is safe to retry.",
                self.settings.max_in_flight
            );
            self.emit_to(
                front,
                build::error(raw_id.get(), mcpvisor_jsonrpc::NOT_STARTED, &msg, None),
                Some(id.clone()),
            );
            return;
        }
        // The params are read once, here: what follows edits this reading.
        // One pass over the line, when the scan behind it vouches for the
        // line (as it nearly always does); two with serde otherwise.
        // Params that are not an object (an array, null) are still
        // forwarded as written: those take the second pass.
        let read = match params {
            Some(read) => read.map(RawObject::from_params),
            None => RawObject::params_of(line),
        };
        let (params, obj) = match read {
            Some((text, obj)) => (Some(text), Some(obj)),
            None => {
                let params = raw_params(line).map(|p| p.get());
                (params, params.and_then(RawObject::parse))
            }
        };
        let modern = is_modern(obj.as_ref());
        if modern {
            if let Some(f) = self.fronts.get_mut(&front) {
                if !f.info.initialized {
                    f.info.modern = true;
                }
            }
        }
        let method = env.method();
        match method {
            "initialize" => {
                self.on_initialize(front, obj.as_ref());
                self.park(front, id, method.to_owned(), None, false);
            }
            "ping" if modern => {
                self.emit_to(
                    front,
                    build::result(raw_id.get(), r#"{"resultType":"complete"}"#),
                    Some(id.clone()),
                );
            }
            "ping" => self.emit_to(front, build::result(raw_id.get(), "{}"), Some(id.clone())),
            "server/discover" => self.park(front, id, method.to_owned(), None, true),
            "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
                let cursor = obj.as_ref().and_then(|o| o.str("cursor"));
                self.park(front, id, method.to_owned(), cursor, modern);
            }
            "tools/call" => {
                let Some(obj) = obj else {
                    return self.invalid_params(front, raw_id.get(), "tools/call needs params");
                };
                let name = obj.str_ref("name").unwrap_or_default();
                if self.settings.tool_search && name == SEARCH_TOOL {
                    return self.search_tools(front, raw_id.get(), &obj);
                }
                if self.settings.tool_search && name == CALL_TOOL {
                    return self.call_found_tool(front, id, env, &obj, modern);
                }
                let target = self.merged.tools.get(name.as_ref());
                let Some((backend, original)) = target.map(|(b, o)| (*b, raw::quote(o))) else {
                    if let Some((message, data)) = self.refused_by_prefix(&name) {
                        let refusal =
                            build::error(raw_id.get(), NOT_STARTED, &message, Some(&data));
                        self.emit_to(front, refusal, Some(id.clone()));
                        return;
                    }
                    if !retry && self.any_settling() {
                        return self.park_line(front, id, line);
                    }
                    let msg = format!("Unknown tool: {name}");
                    return self.invalid_params(front, raw_id.get(), &msg);
                };
                // Only the name changes: it is replaced in the text as it came.
                let text = params.unwrap_or_default();
                let params = Params::renamed(&obj, text, &original);
                self.forward(front, backend, id, "tools/call", params, env, modern);
            }
            "prompts/get" => {
                let Some(obj) = obj else {
                    return self.invalid_params(front, raw_id.get(), "prompts/get needs params");
                };
                let name = obj.str_ref("name").unwrap_or_default();
                let target = self.merged.prompts.get(name.as_ref());
                let Some((backend, original)) = target.map(|(b, o)| (*b, raw::quote(o))) else {
                    if let Some((message, data)) = self.refused_by_prefix(&name) {
                        let refusal =
                            build::error(raw_id.get(), NOT_STARTED, &message, Some(&data));
                        self.emit_to(front, refusal, Some(id.clone()));
                        return;
                    }
                    if !retry && self.any_settling() {
                        return self.park_line(front, id, line);
                    }
                    let msg = format!("Unknown prompt: {name}");
                    return self.invalid_params(front, raw_id.get(), &msg);
                };
                let text = params.unwrap_or_default();
                let params = Params::renamed(&obj, text, &original);
                self.forward(front, backend, id, "prompts/get", params, env, modern);
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let Some(obj) = obj else {
                    return self.invalid_params(front, raw_id.get(), "the request needs params");
                };
                let uri = obj.str("uri").unwrap_or_default();
                let Some(backend) = self.backend_for_uri(&uri) else {
                    if !retry && self.any_settling() {
                        return self.park_line(front, id, line);
                    }
                    let msg = format!("Resource not found: {uri}");
                    let data = json!({"uri": uri});
                    // 2026-07-28 (SEP-2164) says -32602 where earlier
                    // revisions said -32002.
                    let code = if modern {
                        INVALID_PARAMS
                    } else {
                        RESOURCE_NOT_FOUND
                    };
                    self.emit_to(
                        front,
                        build::error(raw_id.get(), code, &msg, Some(&data)),
                        Some(id.clone()),
                    );
                    return;
                };
                // Subscriptions are counted: the server sees one subscribe
                // per URI, and the unsubscribe when the last client leaves.
                // A per-client server's process is the front's own: it is
                // told of every subscription.
                let shared = !self.backends[&backend].plan.per_client;
                let needed = match method {
                    "resources/subscribe" if shared => self.hold_subscription(front, &uri),
                    "resources/unsubscribe" if shared => self.drop_subscription(front, &uri),
                    _ => true,
                };
                if !needed {
                    self.emit_to(front, build::result(raw_id.get(), "{}"), Some(id.clone()));
                    return;
                }
                let params = Params::Text(params.unwrap_or_default().to_owned());
                self.forward(front, backend, id, method, params, env, modern);
            }
            "completion/complete" => {
                let Some(obj) = obj else {
                    return self.invalid_params(
                        front,
                        raw_id.get(),
                        "completion/complete needs params",
                    );
                };
                match self.completion_target(&obj) {
                    Some((backend, params)) => {
                        let params = Params::Text(params);
                        self.forward(front, backend, id, method, params, env, modern);
                    }
                    None => {
                        // Nothing to complete from: an empty completion.
                        let result = if modern {
                            r#"{"completion":{"values":[],"hasMore":false},"resultType":"complete"}"#
                        } else {
                            r#"{"completion":{"values":[],"hasMore":false}}"#
                        };
                        self.emit_to(front, build::result(raw_id.get(), result), Some(id.clone()));
                    }
                }
            }
            "logging/setLevel" => {
                let level = obj
                    .as_ref()
                    .and_then(|o| o.str("level"))
                    .and_then(|l| LogLevel::parse(&l));
                let Some(level) = level else {
                    let msg = format!(
                        "logging/setLevel needs params.level, one of {}",
                        LogLevel::NAMES.join(", ")
                    );
                    return self.invalid_params(front, raw_id.get(), &msg);
                };
                if let Some(f) = self.fronts.get_mut(&front) {
                    f.log_level = Some(level);
                }
                // The shared servers log at the most verbose level any
                // client asked for; each client gets only what its own level
                // admits.
                self.fan_out(front, id, "logging/setLevel");
            }
            m if m.starts_with("tasks/") => {
                let msg = format!(
                    "Method not found: {m}. mcpvisor's gateway does not route task-augmented requests; call the tool without a task."
                );
                self.emit_to(
                    front,
                    build::error(raw_id.get(), METHOD_NOT_FOUND, &msg, None),
                    Some(id.clone()),
                );
            }
            m => {
                let msg = format!("Method not found: {m}");
                self.emit_to(
                    front,
                    build::error(raw_id.get(), METHOD_NOT_FOUND, &msg, None),
                    Some(id.clone()),
                );
            }
        }
    }

    fn invalid_params(&mut self, front: FrontId, id: &str, message: &str) {
        self.emit_to(
            front,
            build::error(id, INVALID_PARAMS, message, None),
            Some(Bytes::copy_from_slice(id.as_bytes())),
        );
    }

    /// For a name under the prefix of a configured server that refuses
    /// requests (failing, waiting for authorization, disabled, stopped):
    /// that server's refusal, with its crash report or its authorization
    /// link. Its tools are withdrawn or not known yet, but a client that
    /// holds the name is told why, not "unknown".
    fn refused_by_prefix(&self, name: &str) -> Option<(String, Value)> {
        self.order.iter().find_map(|id| {
            let b = &self.backends[id];
            let refusal = b.refusal()?;
            // The prefix its names get: the exposed name of a one-letter
            // name, less that letter.
            let probe = crate::naming::exposed_name(&self.settings.separator, b.name(), "x");
            let prefix = probe.strip_suffix('x').unwrap_or(&probe);
            name.starts_with(prefix).then_some(refusal)
        })
    }

    /// Records what the front client declared.
    fn on_initialize(&mut self, front: FrontId, obj: Option<&RawObject<'_>>) {
        let caps: Value = obj
            .and_then(|o| o.get("capabilities"))
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or(Value::Null);
        let has = |k: &str| caps.get(k).is_some_and(|v| !v.is_null());
        let Some(f) = self.fronts.get_mut(&front) else {
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
        f.info.modern = false;
    }

    /// Counts a front's subscription to `uri`; whether the server must be
    /// told (the first front to subscribe).
    fn hold_subscription(&mut self, front: FrontId, uri: &str) -> bool {
        let Some(f) = self.fronts.get_mut(&front) else {
            return false;
        };
        if !f.subscriptions.insert(uri.to_owned()) {
            return false;
        }
        let count = self.subscribed.entry(uri.to_owned()).or_insert(0);
        *count += 1;
        *count == 1
    }

    /// Ends a front's subscription to `uri`; whether the server must be
    /// told (the last front left).
    fn drop_subscription(&mut self, front: FrontId, uri: &str) -> bool {
        let Some(f) = self.fronts.get_mut(&front) else {
            return false;
        };
        if !f.subscriptions.remove(uri) {
            return false;
        }
        self.unsubscribed(uri)
    }

    /// One front fewer holds `uri`; whether that was the last.
    fn unsubscribed(&mut self, uri: &str) -> bool {
        match self.subscribed.get_mut(uri) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                self.subscribed.remove(uri);
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
            self.send_private(
                backend,
                Private::Quiet,
                "resources/unsubscribe",
                Some(&params),
            );
        }
    }

    /// Holds a routed request whose target is not known yet, while servers
    /// are still starting.
    fn park_line(&mut self, front: FrontId, id: Bytes, line: &Bytes) {
        let wait = self.settings.list_timeout;
        self.parked.push_back(Parked {
            front,
            id,
            method: String::new(),
            params: None,
            deadline: Instant::now() + wait,
            line: Some(line.clone()),
            modern: false,
        });
        self.timers.insert(Timer::Parked, wait);
    }

    /// Holds a request the gateway answers itself until the servers that
    /// are starting have settled, at most `--list-timeout`.
    fn park(
        &mut self,
        front: FrontId,
        id: Bytes,
        method: String,
        cursor: Option<String>,
        modern: bool,
    ) {
        let wait = self.settings.list_timeout;
        self.parked.push_back(Parked {
            front,
            id,
            method,
            params: cursor,
            deadline: Instant::now() + wait,
            line: None,
            modern,
        });
        self.timers.insert(Timer::Parked, wait);
    }

    pub(crate) fn any_settling(&self) -> bool {
        self.backends.values().any(|b| b.settling())
    }

    pub(crate) fn answer_parked(&mut self, p: Parked) {
        if let Some(line) = &p.line {
            if let Ok(env) = Envelope::peek(line) {
                self.on_front_request(p.front, line, &env, None, true);
            }
            return;
        }
        let id = String::from_utf8_lossy(&p.id).into_owned();
        let result = match p.method.as_str() {
            "initialize" => Ok(self.initialize_result(p.front)),
            "server/discover" => Ok(self.discover_result()),
            "tools/list" if self.settings.tool_search => Ok(search_tools_list()),
            m => match ListKind::of_method(m) {
                Some(kind) => self.list_page(kind, p.params.as_deref()),
                None => Err(format!("Method not found: {m}")),
            },
        };
        let result = match result {
            Ok(r) if p.modern => Ok(modern_result(&r, true)),
            other => other,
        };
        match result {
            Ok(result) => self.emit_to(p.front, build::result(&id, &result), Some(p.id.clone())),
            Err(msg) => {
                self.emit_to(
                    p.front,
                    build::error(&id, INVALID_PARAMS, &msg, None),
                    Some(p.id.clone()),
                );
            }
        }
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

    fn initialize_result(&mut self, front: FrontId) -> String {
        let requested = self
            .fronts
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
        let mut result = json!({
            "protocolVersion": version,
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

    /// In transparent mode, the one server's own `initialize` result, with
    /// the version agreed with this client and `listChanged` set on every
    /// list it declares (as `run` does).
    fn transparent_result(&self, version: &str) -> Option<String> {
        if !self.settings.transparent {
            return None;
        }
        let init = self
            .order
            .first()
            .and_then(|id| self.backends[id].init.clone())?;
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

    fn discover_result(&self) -> String {
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
        for id in &self.order {
            let b = &self.backends[id];
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

    /// Sends a front request on to a backend under a fresh gateway id, with
    /// its progress token (if any) rewritten to that id. `modern`: the
    /// request is in the 2026-07-28 style (as its params said when read).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        front: FrontId,
        backend: BackendId,
        front_id: Bytes,
        method: &str,
        params: Params<'_>,
        env: &Envelope<'_>,
        modern: bool,
    ) {
        let backend = self.serving(backend, front);
        let gid = self.next_id();
        let token = env
            .progress_token
            .map(|t| Bytes::copy_from_slice(t.get().as_bytes()));
        let mut spans = None;
        let line = match params {
            // Only a name changed: the params are written once, into the line.
            Params::Parts(parts) if token.is_none() && !modern => {
                // The params came as they were read, so they hold no
                // routing member when the front's line had none.
                if env.request_id.is_none() {
                    spans = raw::request_spans(gid, method);
                }
                raw::request_parts(gid, method, Some(&parts))
            }
            params => {
                let params = params.into_text();
                let params = match &token {
                    Some(_) => with_progress_token(&params, gid),
                    None => params,
                };
                // Backends are initialized in the handshake era: the
                // 2026-07-28 envelope (`_meta` protocol version, client
                // capabilities) is the gateway's to read, not theirs; some
                // refuse a request carrying it.
                let params = if modern {
                    without_envelope(&params)
                } else {
                    params
                };
                raw::request(gid, method, Some(&params))
            }
        };
        let wrap = if modern {
            Wrap::Modern {
                cacheable: method == "resources/read",
            }
        } else {
            Wrap::AsIs
        };
        self.by_front_id.insert((front, front_id.clone()), gid);
        if let Some(f) = self.fronts.get_mut(&front) {
            f.awaiting += 1;
        }
        self.pending.insert(
            gid,
            Pending::Front {
                front,
                backend,
                id: front_id.clone(),
                token,
                wrap,
                at: Instant::now(),
            },
        );
        self.route(front, backend, gid, line, spans, front_id);
    }

    /// Sends `logging/setLevel` to every ready backend that serves `front`
    /// and declares `logging` (a per-client server through the front's own
    /// process): each gets the level it should log at (see
    /// [`Hub::level_for`]); the front gets one answer when all have
    /// answered.
    fn fan_out(&mut self, front: FrontId, front_id: Bytes, method: &str) {
        let targets: Vec<BackendId> = self
            .order
            .iter()
            .map(|id| *self.instances.get(&(*id, front)).unwrap_or(id))
            .filter(|id| self.logs(*id))
            .collect();
        let fid = self.next_fanout;
        self.next_fanout += 1;
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
        self.fanouts.insert(
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
            .values()
            .filter(|f| f.closing.is_none())
            .filter_map(|f| f.log_level)
            .min()
    }

    /// Whether a backend is ready and declares `logging`.
    fn logs(&self, id: BackendId) -> bool {
        self.backends.get(&id).is_some_and(|b| {
            b.state == State::Ready
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
        match self.backends.get(&id)?.owner {
            Some(owner) => self.fronts.get(&owner)?.log_level,
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
            .iter()
            .filter(|(id, b)| b.owner.is_none() && self.logs(**id))
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
        let Some(f) = self.fanouts.get_mut(&fid) else {
            return;
        };
        f.waiting = f.waiting.saturating_sub(1);
        if f.waiting == 0 {
            self.fanout_done_now(fid);
        }
    }

    fn fanout_done_now(&mut self, fid: u64) {
        if let Some(f) = self.fanouts.remove(&fid) {
            let id = String::from_utf8_lossy(&f.id).into_owned();
            self.emit_to(f.front, build::result(&id, "{}"), Some(f.id.clone()));
        }
    }

    /// The backend and rewritten params of a `completion/complete`.
    fn completion_target(&self, obj: &RawObject<'_>) -> Option<(BackendId, String)> {
        let reference = RawObject::parse(obj.get("ref")?.get())?;
        match reference.str("type")?.as_str() {
            "ref/prompt" => {
                let name = reference.str("name")?;
                let (backend, original) = self.merged.prompts.get(&name)?;
                let new_ref = reference.with("name", &raw::quote(original));
                Some((*backend, obj.with("ref", &new_ref)))
            }
            "ref/resource" => {
                let uri = reference.str("uri")?;
                let backend = self
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
                if let Some(f) = self.fronts.get_mut(&front) {
                    f.info.initialized = true;
                }
                for (backend, held) in std::mem::take(&mut self.early) {
                    if let Ok(env) = Envelope::peek(&held) {
                        self.on_server_request(backend, &held, &env);
                    }
                }
            }
            "notifications/cancelled" => {
                let Some(rid) = env.request_id else { return };
                let key = Bytes::copy_from_slice(rid.get().as_bytes());
                let Some(gid) = self.by_front_id.get(&(front, key.clone())).copied() else {
                    // A parked request: drop it without an answer.
                    self.parked.retain(|p| p.front != front || p.id != key);
                    return;
                };
                // The backend's session gives a cancelled request no answer,
                // so its entry ends here.
                if let Some(Pending::Front { backend, .. }) = self.take_pending(gid) {
                    let reason = raw_params(line)
                        .and_then(|p| RawObject::parse(p.get()))
                        .and_then(|o| o.str("reason"))
                        .unwrap_or_else(|| "cancelled by the client".into());
                    let queued = self.backends.get_mut(&backend).and_then(|b| {
                        let at = b.queue.iter().position(|(q, _)| *q == gid)?;
                        Some(b.queue.remove(at))
                    });
                    if queued.is_none() {
                        self.cancel_on_backend(backend, gid, &reason);
                    }
                }
            }
            "notifications/roots/list_changed" => {
                for b in self.backends.values() {
                    if b.state == State::Ready {
                        if let Some(link) = &b.link {
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
        let known = fid.filter(|f| self.server_reqs.get(f).is_some_and(|r| r.front == front));
        let Some(req) = known.and_then(|f| self.server_reqs.remove(&f)) else {
            tracing::debug!("an answer for no pending server request dropped");
            return;
        };
        let out = rewrite::splice(line, raw_id, &req.id);
        if let Some(link) = self
            .backends
            .get(&req.backend)
            .and_then(|b| b.link.as_ref())
        {
            link.try_send(out);
        }
    }

    // === tool search ===

    fn search_tools(&mut self, front: FrontId, id: &str, obj: &RawObject<'_>) {
        let args: Value = obj
            .get("arguments")
            .and_then(|a| serde_json::from_str(a.get()).ok())
            .unwrap_or(Value::Null);
        let query = args["query"].as_str().unwrap_or_default().to_owned();
        let limit = args["limit"].as_u64().unwrap_or(10).clamp(1, 50) as usize;
        let tools: Vec<Value> = self.merged.items[ListKind::Tools.index()]
            .iter()
            .map(|t| serde_json::from_str(t).unwrap_or(Value::Null))
            .collect();
        let hits = self
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

    fn call_found_tool(
        &mut self,
        front: FrontId,
        id: Bytes,
        env: &Envelope<'_>,
        obj: &RawObject<'_>,
        modern: bool,
    ) {
        let raw_id = String::from_utf8_lossy(&id).into_owned();
        let args = obj.get("arguments").and_then(|a| RawObject::parse(a.get()));
        let Some(args) = args else {
            return self.invalid_params(
                front,
                &raw_id,
                "mcpvisor__call_tool needs {name, arguments}",
            );
        };
        let name = args.str("name").unwrap_or_default();
        let Some((backend, original)) = self.merged.tools.get(&name).cloned() else {
            let msg = format!("Unknown tool: {name}; use mcpvisor__search_tools to find one");
            return self.invalid_params(front, &raw_id, &msg);
        };
        let arguments = args.get("arguments").map(|a| a.get()).unwrap_or("{}");
        let params = obj.write(&[
            ("name", Some(&raw::quote(&original))),
            ("arguments", Some(arguments)),
        ]);
        let params = Params::Text(params);
        self.forward(front, backend, id, "tools/call", params, env, modern);
    }
}

/// The tool list in `--tool-search` mode.
fn search_tools_list() -> String {
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
const RESOURCE_NOT_FOUND: i64 = -32002;

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
    const NAMES: [&'static str; 8] = [
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
enum Params<'a> {
    Text(String),
    Parts([&'a str; 3]),
}

impl<'a> Params<'a> {
    /// `text` (read as `obj`) with its `name` replaced by `name` (JSON).
    fn renamed(obj: &RawObject<'_>, text: &'a str, name: &'a str) -> Self {
        match obj.replaced_parts(text, "name", name) {
            Some(parts) => Params::Parts(parts),
            None => Params::Text(obj.with("name", name)),
        }
    }

    fn into_text(self) -> String {
        match self {
            Params::Text(text) => text,
            Params::Parts(parts) => parts.concat(),
        }
    }
}

/// Whether a request is in the 2026-07-28 style (protocol version in `_meta`).
fn is_modern(params: Option<&RawObject<'_>>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| RawObject::parse(m.get()))
        .and_then(|m| m.str(META_PROTOCOL))
        .is_some_and(|v| v.as_str() >= "2026-07-28")
}

/// `params` without the 2026-07-28 envelope members of `_meta`
/// (`io.modelcontextprotocol/…`); an emptied `_meta` is dropped.
fn without_envelope(params: &str) -> String {
    let Some(obj) = RawObject::parse(params) else {
        return params.to_owned();
    };
    let Some(meta) = obj.get("_meta").and_then(|m| RawObject::parse(m.get())) else {
        return params.to_owned();
    };
    let drop: Vec<(&str, Option<&str>)> = meta
        .keys()
        .filter(|k| k.starts_with(ENVELOPE_PREFIX))
        .map(|k| (k, None))
        .collect();
    let kept = meta.write(&drop);
    if kept == "{}" {
        obj.write(&[("_meta", None)])
    } else {
        obj.with("_meta", &kept)
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
    let mut edits: Vec<(&str, Option<&str>)> = Vec::new();
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
    if edits.is_empty() {
        return result.to_owned();
    }
    obj.write(&edits)
}

/// `params` with `_meta.progressToken` set to the gateway's id.
fn with_progress_token(params: &str, gid: u64) -> String {
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
