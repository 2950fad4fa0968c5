//! A front client's request, read once, and what the gateway does with
//! each kind.
//!
//! [`Hub::on_front_request`] reads a request's envelope and params in one
//! pass into a [`FrontRequest`]: its id, its protocol [`Era`], its params
//! as text and as members, and what it asks ([`Ask`]). Each kind of ask then
//! has one small method, which answers at once, parks the request until the
//! servers that are starting have settled, or forwards it to the one
//! backend that serves it ([`Hub::forward`]).

use bytes::Bytes;
use mcpvisor_jsonrpc::envelope::{ParamsObject, raw_params};
use mcpvisor_jsonrpc::{Envelope, INVALID_PARAMS, METHOD_NOT_FOUND, NOT_STARTED, build};
use serde_json::json;
use tokio::time::Instant;

use super::backend::{Backend, BackendId};
use super::bridge::Retry;
use super::front::{CALL_TOOL, LogLevel, SEARCH_TOOL, meta_is_modern, with_progress_token};
use super::front::{Params, RESOURCE_NOT_FOUND, without_envelope, without_envelope_of};
use super::lists::Kind as ListKind;
use super::{Held, Hub, Parked, Pending, Timer, Wrap};
use crate::fronts::FrontId;
use crate::raw::{self, RawObject};

/// The protocol era a front, or one of its requests, speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2024-11-05 to 2025-11-25: `initialize` first, then requests.
    #[default]
    Handshake,
    /// 2026-07-28: no handshake; each request names its protocol version in
    /// `_meta`, each result carries `resultType`, and on stdio the server
    /// sends the client no requests.
    Stateless,
}

impl Era {
    /// The era of a request, from its params' `_meta`.
    pub(crate) fn of(meta: Option<&RawObject<'_>>) -> Self {
        if meta_is_modern(meta) {
            Era::Stateless
        } else {
            Era::Handshake
        }
    }
}

/// What a front request asks for, by its method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask<'a> {
    Initialize,
    /// `server/discover` (2026-07-28).
    Discover,
    Ping,
    /// A page of one of the merged lists.
    List(ListKind),
    /// `tools/call` or `prompts/get`: routed by the item's exposed name.
    Named(Named),
    /// `resources/read`, `resources/subscribe`, `resources/unsubscribe`:
    /// routed by URI.
    Resource(ResourceOp),
    /// `completion/complete`: routed by its reference.
    Complete,
    SetLevel,
    /// `subscriptions/listen` (2026-07-28): held open, fed with the
    /// changes it asks for (see `listen.rs`).
    Listen,
    /// `tasks/…`: routed by the task id (see `tasks.rs`).
    Task(&'a str),
    Unknown(&'a str),
}

impl<'a> Ask<'a> {
    fn of(method: &'a str) -> Self {
        match method {
            "initialize" => Ask::Initialize,
            "server/discover" => Ask::Discover,
            "ping" => Ask::Ping,
            "tools/call" => Ask::Named(Named::Tool),
            "prompts/get" => Ask::Named(Named::Prompt),
            "resources/read" => Ask::Resource(ResourceOp::Read),
            "resources/subscribe" => Ask::Resource(ResourceOp::Subscribe),
            "resources/unsubscribe" => Ask::Resource(ResourceOp::Unsubscribe),
            "completion/complete" => Ask::Complete,
            "logging/setLevel" => Ask::SetLevel,
            "subscriptions/listen" => Ask::Listen,
            m if m.starts_with("tasks/") => Ask::Task(m),
            m => match ListKind::of_method(m) {
                Some(kind) => Ask::List(kind),
                None => Ask::Unknown(m),
            },
        }
    }
}

/// The items a front calls by their exposed name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    Tool,
    Prompt,
}

impl Named {
    fn noun(self) -> &'static str {
        match self {
            Named::Tool => "tool",
            Named::Prompt => "prompt",
        }
    }

    fn method(self) -> &'static str {
        match self {
            Named::Tool => "tools/call",
            Named::Prompt => "prompts/get",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceOp {
    Read,
    Subscribe,
    Unsubscribe,
}

/// Whether a request may still wait for servers that are starting, or has
/// waited already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// As it came from the front: a name or URI not known yet may wait.
    First,
    /// Handled again once servers settled (or its wait ran out): what is
    /// not known now is not known.
    Settled,
}

/// One front request, read once.
pub(crate) struct FrontRequest<'a> {
    /// Its id as written, for the answer.
    pub id: Bytes,
    /// The same, as text.
    pub raw_id: &'a str,
    pub era: Era,
    pub ask: Ask<'a>,
    pub line: &'a Bytes,
    pub env: &'a Envelope<'a>,
    /// Its params as written (`None`: it has none).
    pub text: Option<&'a str>,
    /// Its params' members, when they are an object.
    pub params: Option<RawObject<'a>>,
    /// The members of its params' `_meta`, when that is an object: read
    /// once, for its era and, from a 2026-07-28 request, for the envelope
    /// the gateway takes off.
    pub meta: Option<RawObject<'a>>,
    /// The server whose own `requestState` the request carries, unwrapped
    /// from the gateway's: it may go to that server alone.
    pub state_of: Option<&'a str>,
}

impl<'a> FrontRequest<'a> {
    /// Reads a request whose envelope is `env`. `scanned`: its params object
    /// as the envelope scan read it (`Some(None)`: it has none), or `None`
    /// to read it here. `None` when the envelope has no id.
    pub(crate) fn read(
        line: &'a Bytes,
        env: &'a Envelope<'a>,
        scanned: Option<Option<ParamsObject<'a>>>,
    ) -> Option<Self> {
        let raw_id = env.id?.get();
        // One pass over the line, when the scan behind the envelope vouches
        // for the line (as it nearly always does); two with serde otherwise.
        // Params that are not an object (an array, null) are still
        // forwarded as written: those take the second pass.
        let (read, meta) = match scanned {
            Some(mut read) => {
                // Its `_meta`'s members, when the scan read them too.
                let meta = read.as_mut().and_then(|p| p.meta.take());
                (read.map(RawObject::from_params), meta)
            }
            None => (RawObject::params_of(line), None),
        };
        let (text, params) = match read {
            Some((text, obj)) => (Some(text), Some(obj)),
            None => {
                let text = raw_params(line).map(|p| p.get());
                (text, text.and_then(RawObject::parse))
            }
        };
        let meta = match meta {
            Some(members) => Some(RawObject::from_members(members)),
            None => params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .and_then(|m| RawObject::parse(m.get())),
        };
        Some(Self {
            id: raw::kept(raw_id.as_bytes()),
            raw_id,
            era: Era::of(meta.as_ref()),
            ask: Ask::of(env.method()),
            line,
            env,
            text,
            params,
            meta,
            state_of: None,
        })
    }

    /// Its method, as written.
    fn method(&self) -> &str {
        self.env.method()
    }

    /// What a 2026-07-28 request's answer is bridged with: the caps its
    /// client declared, for the methods whose answers may need it.
    fn bridged_caps(&self) -> Option<super::bridge::Caps> {
        let method = match self.ask {
            Ask::Named(named) => named.method(),
            Ask::Resource(ResourceOp::Read) => "resources/read",
            Ask::Complete => "completion/complete",
            _ => return None,
        };
        match self.era {
            Era::Stateless => Some(super::bridge::Caps::of(method, self.meta.as_ref())),
            Era::Handshake => None,
        }
    }

    /// Whether its answer may hand out or describe a task: the task ids in
    /// it are namespaced on the way back.
    fn may_hand_out_tasks(&self) -> bool {
        matches!(self.ask, Ask::Task(_))
            || self
                .params
                .as_ref()
                .is_some_and(|p| p.get("task").is_some())
            || (self.era == Era::Stateless && self.ask == Ask::Named(Named::Tool))
    }
}

impl Hub {
    /// A request from a front, as it came. `scanned`: see
    /// [`FrontRequest::read`].
    pub(crate) fn on_front_request(
        &mut self,
        front: FrontId,
        line: &Bytes,
        env: &Envelope<'_>,
        scanned: Option<Option<ParamsObject<'_>>>,
    ) {
        let Some(req) = FrontRequest::read(line, env, scanned) else {
            return;
        };
        let in_flight = self
            .calls
            .by_front_id
            .contains_key(&(front, req.id.clone()));
        if in_flight
            || self.listening_as(front, &req.id)
            || self
                .calls
                .parked
                .iter()
                .any(|p| p.front == front && p.id == req.id)
        {
            let msg = "Request not started: a request with this id is already in flight. It is safe to retry with another id.";
            return self.reply_error(front, &req, NOT_STARTED, msg);
        }
        if self.awaited_by(front) >= self.settings.max_in_flight {
            let msg = format!(
                "Request not started: {} requests are already in flight (--max-in-flight). It is safe to retry.",
                self.settings.max_in_flight
            );
            return self.reply_error(front, &req, NOT_STARTED, &msg);
        }
        self.serve_request(front, &req, Attempt::First);
    }

    /// A parked request whose target was not known, handled again once the
    /// servers have settled.
    fn retry_request(&mut self, front: FrontId, line: &Bytes) {
        let Ok(env) = Envelope::peek(line) else {
            return;
        };
        let Some(req) = FrontRequest::read(line, &env, None) else {
            return;
        };
        if self
            .calls
            .by_front_id
            .contains_key(&(front, req.id.clone()))
            || self.listening_as(front, &req.id)
        {
            let msg = "Request not started: a request with this id is already in flight. It is safe to retry with another id.";
            return self.reply_error(front, &req, NOT_STARTED, msg);
        }
        self.serve_request(front, &req, Attempt::Settled);
    }

    fn serve_request(&mut self, front: FrontId, req: &FrontRequest<'_>, attempt: Attempt) {
        // The retry of a call whose server asked the client something.
        match self.bridge_retry(front, req) {
            Retry::NotOne => {}
            Retry::Done => return,
            Retry::Server { line, server } => {
                return self.serve_unwrapped(front, req, &line, &server, attempt);
            }
        }
        // A 2026-07-28 request before any handshake makes its front a
        // 2026-07-28 client.
        if req.era == Era::Stateless {
            if let Some(f) = self.fronts.open.get_mut(&front) {
                if !f.info.initialized {
                    f.info.era = Era::Stateless;
                }
            }
        }
        match req.ask {
            Ask::Initialize => {
                self.on_initialize(front, req.params.as_ref());
                self.park(front, req.id.clone(), Held::Initialize);
            }
            Ask::Discover => self.park(front, req.id.clone(), Held::Discover),
            Ask::Ping => {
                let result = match req.era {
                    Era::Stateless => r#"{"resultType":"complete"}"#,
                    Era::Handshake => "{}",
                };
                self.reply(front, req, result);
            }
            Ask::List(kind) => {
                let cursor = req.params.as_ref().and_then(|o| o.str("cursor"));
                let held = Held::List {
                    kind,
                    cursor,
                    era: req.era,
                };
                self.park(front, req.id.clone(), held);
            }
            Ask::Named(named) => self.route_named(front, req, named, attempt),
            Ask::Resource(op) => self.route_resource(front, req, op, attempt),
            Ask::Complete => self.route_completion(front, req),
            Ask::SetLevel => self.set_level(front, req),
            Ask::Listen => self.listen(front, req, attempt),
            Ask::Task(m) => self.route_task(front, req, m),
            Ask::Unknown(m) => {
                let msg = format!("Method not found: {m}");
                self.reply_error(front, req, METHOD_NOT_FOUND, &msg);
            }
        }
    }

    /// `req` as `line`, which carries the state it continues as `server`
    /// handed it out. Parked, it waits as it came, to be unwrapped again.
    fn serve_unwrapped(
        &mut self,
        front: FrontId,
        req: &FrontRequest<'_>,
        line: &Bytes,
        server: &str,
        attempt: Attempt,
    ) {
        let Ok(env) = Envelope::peek(line) else {
            return;
        };
        let Some(mut unwrapped) = FrontRequest::read(line, &env, None) else {
            return;
        };
        unwrapped.line = req.line;
        unwrapped.state_of = Some(server);
        self.serve_request(front, &unwrapped, attempt);
    }

    /// `tools/call` and `prompts/get`: to the server whose item has that
    /// exposed name, under the item's own name.
    fn route_named(
        &mut self,
        front: FrontId,
        req: &FrontRequest<'_>,
        named: Named,
        attempt: Attempt,
    ) {
        let Some(obj) = &req.params else {
            let msg = format!("{} needs params", named.method());
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        };
        let name = obj.str_ref("name").unwrap_or_default();
        if named == Named::Tool && self.settings.tool_search {
            if name == SEARCH_TOOL {
                return self.search_tools(front, req.raw_id, obj);
            }
            if name == CALL_TOOL {
                return self.call_found_tool(front, req, obj);
            }
        }
        let table = match named {
            Named::Tool => &self.catalog.merged.tools,
            Named::Prompt => &self.catalog.merged.prompts,
        };
        let Some((backend, original)) = table.get(name.as_ref()).map(|(b, o)| (*b, o.clone()))
        else {
            let kind = match named {
                Named::Tool => crate::monitor::DefinitionKind::Tool,
                Named::Prompt => crate::monitor::DefinitionKind::Prompt,
            };
            if let Some((message, data)) = self.held_refusal(kind, &name) {
                let refusal =
                    build::error(req.raw_id, super::pinning::HELD_BACK, &message, Some(&data));
                return self.emit_to(front, refusal, Some(req.id.clone()));
            }
            if let Some((message, data)) = self.refused_by_prefix(&name) {
                let refusal = build::error(req.raw_id, NOT_STARTED, &message, Some(&data));
                return self.emit_to(front, refusal, Some(req.id.clone()));
            }
            if attempt == Attempt::First && self.any_settling() {
                return self.park(front, req.id.clone(), Held::Line(req.line.clone()));
            }
            let msg = format!("Unknown {}: {name}", named.noun());
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        };
        // Only the name changes: it is replaced in the text as it came.
        let params = Params::renamed(obj, req.text.unwrap_or_default(), &original);
        self.forward(front, backend, req, params);
    }

    /// `resources/read`, `subscribe` and `unsubscribe`: to the first server
    /// that lists the URI.
    fn route_resource(
        &mut self,
        front: FrontId,
        req: &FrontRequest<'_>,
        op: ResourceOp,
        attempt: Attempt,
    ) {
        let Some(obj) = &req.params else {
            return self.reply_error(front, req, INVALID_PARAMS, "the request needs params");
        };
        let uri = obj.str("uri").unwrap_or_default();
        let Some(backend) = self.backend_for_uri(&uri) else {
            if attempt == Attempt::First && self.any_settling() {
                return self.park(front, req.id.clone(), Held::Line(req.line.clone()));
            }
            let msg = format!("Resource not found: {uri}");
            let data = json!({"uri": uri});
            // 2026-07-28 (SEP-2164) says -32602 where earlier revisions
            // said -32002.
            let code = match req.era {
                Era::Stateless => INVALID_PARAMS,
                Era::Handshake => RESOURCE_NOT_FOUND,
            };
            let error = build::error(req.raw_id, code, &msg, Some(&data));
            return self.emit_to(front, error, Some(req.id.clone()));
        };
        // Subscriptions are counted: the server sees one subscribe per URI,
        // and the unsubscribe when the last client leaves. A per-client
        // server's process is the front's own: it is told of every
        // subscription.
        let shared = !self.backends.by_id[&backend].plan.per_client;
        let needed = match op {
            ResourceOp::Subscribe if shared => self.hold_subscription(front, &uri),
            ResourceOp::Unsubscribe if shared => self.drop_subscription(front, &uri),
            _ => true,
        };
        if !needed {
            return self.reply(front, req, "{}");
        }
        // Held by the gateway unless a ready server of the handshake era
        // takes it now (see `upstream.rs`). A handshake-era client of a
        // server of both eras subscribes at its twin, where its calls run.
        let subscribe = op == ResourceOp::Subscribe;
        let at = match self.twin_to_come(backend, front) {
            true => self.serving(backend, front),
            false => backend,
        };
        let held = match op {
            ResourceOp::Read => false,
            _ if shared => self.hold_for_server(at, subscribe),
            _ => self.hold_at_own_instance(front, backend, &uri, subscribe),
        };
        if held {
            return self.reply(front, req, "{}");
        }
        let params = Params::Text(req.text.unwrap_or_default().to_owned());
        self.forward(front, backend, req, params);
    }

    /// `completion/complete`: to the server of the prompt or resource it
    /// refers to; an empty completion when there is none.
    fn route_completion(&mut self, front: FrontId, req: &FrontRequest<'_>) {
        let Some(obj) = &req.params else {
            return self.reply_error(
                front,
                req,
                INVALID_PARAMS,
                "completion/complete needs params",
            );
        };
        match self.completion_target(obj) {
            Some((backend, params)) => self.forward(front, backend, req, Params::Text(params)),
            None => {
                let result = match req.era {
                    Era::Stateless => {
                        r#"{"completion":{"values":[],"hasMore":false},"resultType":"complete"}"#
                    }
                    Era::Handshake => r#"{"completion":{"values":[],"hasMore":false}}"#,
                };
                self.reply(front, req, result);
            }
        }
    }

    /// `logging/setLevel`: the shared servers log at the most verbose level
    /// any client asked for; each client gets only what its own level
    /// admits.
    fn set_level(&mut self, front: FrontId, req: &FrontRequest<'_>) {
        let level = req
            .params
            .as_ref()
            .and_then(|o| o.str("level"))
            .and_then(|l| LogLevel::parse(&l));
        let Some(level) = level else {
            let msg = format!(
                "logging/setLevel needs params.level, one of {}",
                LogLevel::NAMES.join(", ")
            );
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        };
        if let Some(f) = self.fronts.open.get_mut(&front) {
            f.log_level = Some(level);
        }
        self.fan_out(front, req.id.clone(), "logging/setLevel");
    }

    /// `mcpvisor__call_tool` (with `--tool-search`): the tool it names, with
    /// the arguments it gives.
    fn call_found_tool(&mut self, front: FrontId, req: &FrontRequest<'_>, obj: &RawObject<'_>) {
        let args = obj.get("arguments").and_then(|a| RawObject::parse(a.get()));
        let Some(args) = args else {
            let msg = "mcpvisor__call_tool needs {name, arguments}";
            return self.reply_error(front, req, INVALID_PARAMS, msg);
        };
        let name = args.str("name").unwrap_or_default();
        let Some((backend, original)) = self.catalog.merged.tools.get(&name).cloned() else {
            let held = self.held_refusal(crate::monitor::DefinitionKind::Tool, &name);
            if let Some((message, data)) = held {
                let refusal =
                    build::error(req.raw_id, super::pinning::HELD_BACK, &message, Some(&data));
                return self.emit_to(front, refusal, Some(req.id.clone()));
            }
            let msg = format!("Unknown tool: {name}; use mcpvisor__search_tools to find one");
            return self.reply_error(front, req, INVALID_PARAMS, &msg);
        };
        let arguments = args.get("arguments").map(|a| a.get()).unwrap_or("{}");
        let params = obj.write(&[("name", Some(&original)), ("arguments", Some(arguments))]);
        self.forward(front, backend, req, Params::Text(params));
    }

    /// Sends a front request on to a backend (the front's own instance of a
    /// per-client one) under a fresh gateway id, with its progress token
    /// (if any) rewritten to that id and, from a 2026-07-28 request, the
    /// envelope taken off its params.
    pub(crate) fn forward(
        &mut self,
        front: FrontId,
        backend: BackendId,
        req: &FrontRequest<'_>,
        params: Params<'_>,
    ) {
        if let Some(server) = req.state_of {
            let name = self.backend_name(backend);
            if name != server {
                let msg = format!(
                    "requestState continues a call to the server `{server}`, and this request goes to `{name}`: retry with the request it was given for, or start the call over"
                );
                return self.reply_error(front, req, INVALID_PARAMS, &msg);
            }
        }
        let backend = self.serving(backend, front);
        let gid = self.calls.next_id();
        let token = req
            .env
            .progress_token
            .map(|t| raw::kept(t.get().as_bytes()));
        let (line, spans) = request_line(&mut self.calls.room, gid, req, params, token.is_some());
        let envelope = self.envelope_for(front, backend, req);
        let wrap = match req.era {
            Era::Stateless => Wrap::Modern {
                cacheable: req.ask == Ask::Resource(ResourceOp::Read),
            },
            Era::Handshake => Wrap::AsIs,
        };
        self.calls.by_front_id.insert((front, req.id.clone()), gid);
        // Checked here, on the path of every call: the call to
        // `audit_start` is made only with an audit trail to keep.
        let audit = match self.settings.audit {
            Some(_) => self.audit_start(front, backend, req),
            None => None,
        };
        if let Some(f) = self.fronts.open.get_mut(&front) {
            f.awaiting += 1;
        }
        self.calls.pending.insert(
            gid,
            Pending::Front {
                front,
                backend,
                id: req.id.clone(),
                token,
                wrap,
                tasks: req.may_hand_out_tasks(),
                at: self.now(),
                modern: req.bridged_caps(),
                audit,
                envelope,
                sent: None,
            },
        );
        self.route(front, backend, gid, line, spans, req.id.clone());
    }

    /// The envelope a call carries to a 2026-07-28 server: a 2026-07-28
    /// client's own, as it came; a client's of the handshake era made
    /// from its `initialize`.
    fn envelope_for(
        &self,
        front: FrontId,
        backend: BackendId,
        req: &FrontRequest<'_>,
    ) -> std::sync::Arc<str> {
        match (req.era, &req.meta) {
            // A ready server of the handshake era never reads it: the line
            // goes to it as it is, and a call is never sent again.
            (Era::Stateless, Some(_))
                if self
                    .backends
                    .by_id
                    .get(&backend)
                    .is_some_and(Backend::is_ready_in_handshake) =>
            {
                None
            }
            (Era::Stateless, Some(meta)) => super::backend::envelope_of(meta),
            _ => None,
        }
        .or_else(|| self.fronts.open.get(&front)?.info.envelope.clone())
        .unwrap_or_else(|| super::backend::GATEWAY_ENVELOPE.clone())
    }

    /// The audit record a call to `backend` starts, if it is one that is
    /// audited and its front is open.
    fn audit_start(
        &self,
        front: FrontId,
        backend: BackendId,
        req: &FrontRequest<'_>,
    ) -> Option<Box<crate::audit::Call>> {
        let f = self.fronts.open.get(&front)?;
        let server = self
            .backends
            .by_id
            .get(&backend)
            .map(|b| b.plan.name.as_str());
        crate::audit::Audit::start(
            req.method(),
            req.params.as_ref(),
            front.0,
            f.info.client.as_deref(),
            server.unwrap_or_default(),
            req.line.len(),
        )
    }

    /// Holds a request until the servers that are starting have settled, at
    /// most `--list-timeout`.
    pub(super) fn park(&mut self, front: FrontId, id: Bytes, held: Held) {
        let deadline = Instant::now() + self.settings.list_timeout;
        self.calls.parked.push_back(Parked {
            front,
            id,
            deadline,
            held,
        });
        self.effects.arm(Timer::Parked, deadline);
    }

    /// Answers a parked request, or handles its line again.
    pub(crate) fn answer_parked(&mut self, p: Parked) {
        let id = String::from_utf8_lossy(&p.id).into_owned();
        let result = match p.held {
            Held::Line(line) => return self.retry_request(p.front, &line),
            Held::Initialize => Ok(self.initialize_result(p.front)),
            Held::Discover => Ok(super::front::modern_result(&self.discover_result(), true)),
            Held::List { kind, cursor, era } => {
                let page = match kind {
                    ListKind::Tools if self.settings.tool_search => {
                        Ok(super::front::search_tools_list())
                    }
                    kind => self.list_page(kind, cursor.as_deref()),
                };
                match era {
                    Era::Stateless => page.map(|r| super::front::modern_result(&r, true)),
                    Era::Handshake => page,
                }
            }
        };
        let answer = match result {
            Ok(result) => build::result(&id, &result),
            Err(msg) => build::error(&id, INVALID_PARAMS, &msg, None),
        };
        self.emit_to(p.front, answer, Some(p.id));
    }

    fn reply(&mut self, front: FrontId, req: &FrontRequest<'_>, result: &str) {
        let answer = build::result(req.raw_id, result);
        self.emit_to(front, answer, Some(req.id.clone()));
    }

    pub(super) fn reply_error(
        &mut self,
        front: FrontId,
        req: &FrontRequest<'_>,
        code: i64,
        message: &str,
    ) {
        let error = build::error(req.raw_id, code, message, None);
        self.emit_to(front, error, Some(req.id.clone()));
    }
}

/// A front request's line to a backend under the gateway's id `gid`, and
/// where its envelope lies when the line was written from the params as
/// read (see [`raw::request_spanned`]). `has_token`: the request carries
/// a progress token, which becomes `gid`.
fn request_line(
    room: &mut raw::Room,
    gid: u64,
    req: &FrontRequest<'_>,
    params: Params<'_>,
    has_token: bool,
) -> (Bytes, Option<mcpvisor_jsonrpc::Spans>) {
    let method = req.method();
    match (params, &req.params, &req.meta) {
        // Only a name changed: the params are written once, into the line.
        // They came as they were read, so they hold no routing member when
        // the front's line had none.
        (Params::Parts(parts), _, _) if !has_token && req.era == Era::Handshake => {
            let (line, spans) = room.request_parts(gid, method, Some(&parts));
            (line, spans.filter(|_| req.env.request_id.is_none()))
        }
        // A renamed 2026-07-28 request: written once from the members read,
        // with the new name, the envelope off its `_meta` and the progress
        // token (if any) set to the gateway's id.
        (Params::Parts(parts), Some(obj), Some(meta)) if req.era == Era::Stateless => {
            let gid_text = gid.to_string();
            let meta = without_envelope_of(meta, has_token.then_some(gid_text.as_str()));
            let edits = [("name", Some(parts[1])), ("_meta", meta.as_deref())];
            let params = req
                .text
                .and_then(|text| obj.spliced(text, &edits))
                .unwrap_or_else(|| obj.write(&edits));
            let (line, spans) = raw::request_spanned(gid, method, Some(&params));
            (
                line,
                spans.filter(|_| !has_token && req.env.request_id.is_none()),
            )
        }
        (params, _, _) => {
            let params = params.into_text();
            let params = match has_token {
                true => with_progress_token(&params, gid),
                false => params,
            };
            // The envelope comes off here: a backend of the handshake era
            // does not read it (some refuse a request carrying it), and one
            // of 2026-07-28 gets it back as it is sent (see `Hub::route`).
            let params = match req.era {
                Era::Stateless => without_envelope(&params),
                Era::Handshake => params,
            };
            (raw::request(gid, method, Some(&params)), None)
        }
    }
}
