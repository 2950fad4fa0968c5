//! Messages and events from worker generations.

use bytes::Bytes;
use mcpvisor_jsonrpc::envelope::scan_id;
use mcpvisor_jsonrpc::{Envelope, Frame, INTERNAL_ERROR, Kind, NOT_STARTED, Spans, build};
use tokio::time::Instant;

use super::lifecycle::Why;
use super::{ClientState, Phase, Session, WorkerEvent};
use crate::config::GarbagePolicy;
use crate::spawner::Spawner;
use crate::table::{Owner, Req, ServerReq, StateChange, Timer};
use crate::writer::{Digits, Message, Piece};
use serde_json::Value;

impl<S: Spawner> Session<S> {
    pub(crate) fn on_worker_event(&mut self, generation: u64, event: WorkerEvent) {
        match event {
            WorkerEvent::Frame(frame) => {
                let live = self
                    .gens
                    .get(&generation)
                    .is_some_and(|g| !matches!(g.phase, Phase::Dead));
                if live {
                    self.on_worker_frame(generation, frame);
                }
            }
            WorkerEvent::StdoutClosed => self.on_end(generation, None),
            WorkerEvent::AuthPrompt(url, reason) => {
                self.on_auth_prompt(generation, url, reason);
            }
            WorkerEvent::Undelivered(wid) => self.on_undelivered(generation, wid),
            WorkerEvent::Exited(exit) => self.on_end(generation, Some(exit)),
            WorkerEvent::WriteFailed { closed: true, .. } => {
                self.take_back(generation);
                // The worker is ending: stop sending, and let its exit status
                // and the rest of its stdout arrive (bounded by the exit wait).
                if let Some(g) = self.gens.get_mut(&generation) {
                    g.close_stdin();
                    if g.exit_wait.is_none() && !matches!(g.phase, Phase::Dead) {
                        g.exit_wait = Some(
                            self.timers
                                .insert(Timer::ExitWait(generation), super::EXIT_WAIT),
                        );
                    }
                }
            }
            WorkerEvent::WriteFailed {
                closed: false,
                error,
            } => {
                self.take_back(generation);
                let cause = format!("writing to its stdin failed: {error}");
                self.retire(generation, cause, None, Why::Crash);
            }
        }
    }

    fn on_worker_frame(&mut self, generation: u64, frame: Frame) {
        let line = match frame {
            Frame::Line(line) => line,
            Frame::Oversize { len, head } => {
                return self.on_worker_oversize(generation, len, &head);
            }
        };
        let env = match Envelope::peek(&line) {
            Ok(env) => env,
            Err(e) => {
                tracing::warn!(
                    generation,
                    bytes = line.len(),
                    error = %e,
                    "server wrote a stdout line that is not a JSON-RPC message"
                );
                if let Some(g) = self.gens.get_mut(&generation) {
                    g.stray_stdout.record(&line, self.cfg.stdout_in_errors);
                }
                if self.cfg.on_garbage == GarbagePolicy::Restart {
                    let cause = "it wrote a stdout line that is not JSON-RPC".into();
                    self.retire(generation, cause, None, Why::Crash);
                }
                return;
            }
        };
        match env.kind {
            Kind::Response => self.on_worker_response(generation, &line, &env),
            Kind::Notification => self.on_worker_notification(generation, &line, &env),
            Kind::Request => self.on_worker_request(generation, &line, &env),
        }
    }

    fn on_worker_response(&mut self, generation: u64, line: &Bytes, env: &Envelope<'_>) {
        let Some(raw_id) = env.id else { return };
        let Some(wid) = raw_id.get().parse::<u64>().ok() else {
            tracing::debug!(
                generation,
                "response with an id mcpvisor never sent; dropped"
            );
            return;
        };
        if self
            .reqs
            .get(&wid)
            .is_none_or(|r| r.generation != Some(generation))
        {
            tracing::debug!(
                generation,
                "response for no request in flight on this generation; dropped"
            );
            return;
        }
        let Some(mut req) = self.remove_req(wid) else {
            return;
        };
        let handshake = matches!(&req.owner, Owner::Replay)
            || req.client().is_some_and(|c| c.initialize.is_some());
        if !handshake && self.gens.get(&generation).is_some_and(|g| g.auth.is_some()) {
            // It answered after its authorization prompt (a bridge that
            // authorized again in the middle of a session): the person has
            // done what it waited for.
            if result_of(line).is_some() {
                self.on_authorized(generation);
            }
        }
        if handshake {
            let replay = matches!(&req.owner, Owner::Replay);
            let accepted = result_of(line).is_some();
            self.on_initialize_answered(generation, replay, accepted);
        }
        match req.owner {
            Owner::Replay => self.on_replayed_initialize(generation, line),
            Owner::List(kind) => self.on_list_page(generation, kind, line),
            Owner::Restore(what) => {
                if result_of(line).is_none() {
                    tracing::warn!(
                        generation,
                        what,
                        "the restarted server refused the client's state replayed to it"
                    );
                }
            }
            // Its fields are taken in place: moving the record out would
            // copy all of it.
            Owner::Client(ref mut c) => {
                if let Some(change) = c.state.take() {
                    if result_of(line).is_some() {
                        self.keep_state(*change);
                    }
                }
                if c.cancelled {
                    return;
                }
                let mut edited = None;
                if let Some(params) = c.initialize.take() {
                    edited = self.on_client_initialized(line, &c.id, params);
                } else if c.filter_tools {
                    edited = self.filtered_tool_list(line, &c.id);
                }
                match edited {
                    Some(edited) => self.emit(Message::Line(edited)),
                    None => {
                        // Where the envelope lies in the worker's line, for
                        // a client in this process: the id's place is where
                        // the client's id goes.
                        let spans = Spans::of(line, env);
                        let msg =
                            Message::spliced(line, raw_id, Piece::Bytes(std::mem::take(&mut c.id)));
                        self.emit_peeked(msg, spans);
                    }
                }
                if self.init_result.is_some() {
                    self.fetch_baseline(generation);
                }
            }
        }
    }

    /// The answer to mcpvisor's replay of `initialize` to a new generation.
    fn on_replayed_initialize(&mut self, generation: u64, line: &Bytes) {
        let Some(result) = result_of(line) else {
            let cause = "it rejected the replayed initialize".into();
            self.retire(generation, cause, None, Why::Crash);
            return;
        };
        if let Some(seen) = &self.init_result {
            for what in differences(seen, &result) {
                tracing::warn!(
                    generation,
                    "the restarted server {what}; the client must reconnect to see it"
                );
            }
        }
        if let Some(g) = self.gens.get_mut(&generation) {
            g.init_result = Some(result);
        }
        if self.handshake.initialized {
            let note = build::notification("notifications/initialized", None);
            self.send_to(generation, note);
            self.restore_state(generation);
        }
        tracing::debug!(generation, "replayed the client's handshake");
        self.become_ready(generation);
    }

    /// A change of the session's state that the server accepted: kept for
    /// the generations to come.
    fn keep_state(&mut self, change: StateChange) {
        match change {
            StateChange::LogLevel(params) => self.handshake.log_level = Some(params),
            StateChange::Subscribe(uri, params) => {
                self.handshake.subscriptions.insert(uri, params);
            }
            StateChange::Unsubscribe(uri) => {
                self.handshake.subscriptions.remove(&uri);
            }
        }
    }

    /// Puts a new generation back in the state the client set with the
    /// earlier ones, right after the replayed handshake and before anything
    /// that waits for it: its log level and its resource subscriptions.
    /// The answers are mcpvisor's own; a refusal is logged.
    fn restore_state(&mut self, generation: u64) {
        let level = self
            .handshake
            .log_level
            .iter()
            .map(|params| ("logging/setLevel", params.clone()));
        let subscriptions = self
            .handshake
            .subscriptions
            .values()
            .map(|params| ("resources/subscribe", params.clone()));
        let replays: Vec<_> = level.chain(subscriptions).collect();
        for (method, params) in replays {
            let wid = self.next_worker_id();
            let msg = build::request(&wid.to_string(), method, Some(&params));
            self.reqs.insert(
                wid,
                Req {
                    owner: Owner::Restore(method),
                    generation: Some(generation),
                    timer: None,
                },
            );
            self.send_to(generation, msg);
        }
    }

    /// The client's own `initialize` succeeded: keep what a replay needs, and
    /// advertise `listChanged` for each list the server declares, since
    /// mcpvisor will announce changes across restarts. Returns the answer to
    /// send instead of the server's, or `None` to forward it unchanged.
    fn on_client_initialized(
        &mut self,
        line: &Bytes,
        client_id: &Bytes,
        params: Box<serde_json::value::RawValue>,
    ) -> Option<Bytes> {
        let result = result_of(line)?;
        self.handshake.init_params = Some(params);
        let mut edited = result.clone();
        self.init_result = Some(result);
        let caps = edited.get_mut("capabilities")?.as_object_mut()?;
        let mut changed = false;
        for key in ["tools", "prompts", "resources"] {
            if let Some(cap) = caps.get_mut(key).and_then(Value::as_object_mut) {
                if cap.get("listChanged") != Some(&Value::Bool(true)) {
                    cap.insert("listChanged".into(), Value::Bool(true));
                    changed = true;
                }
            }
        }
        if !changed {
            return None;
        }
        let body = serde_json::to_string(&edited).ok()?;
        Some(build::result(std::str::from_utf8(client_id).ok()?, &body))
    }

    fn on_worker_notification(&mut self, generation: u64, line: &Bytes, env: &Envelope<'_>) {
        let method = env.method();
        if method == self.cfg.cancel_ack_method {
            if let Some(g) = self.gens.get_mut(&generation) {
                g.acks = true;
            }
            let wid = env.request_id.and_then(|r| r.get().parse::<u64>().ok());
            if let Some(wid) = wid {
                let done = self.reqs.get(&wid).is_some_and(|r| {
                    r.generation == Some(generation) && r.client().is_some_and(|c| c.cancelled)
                });
                if done {
                    self.remove_req(wid);
                }
            }
            return;
        }
        match method {
            "notifications/progress" => {
                let Some(token) = env.progress_token else {
                    return;
                };
                let wid = self.by_token.get(token.get().as_bytes()).copied();
                let live = wid.and_then(|wid| {
                    let req = self.reqs.get_mut(&wid)?;
                    if req.generation != Some(generation) {
                        return None;
                    }
                    let c = req.client_mut()?;
                    if c.cancelled {
                        return None;
                    }
                    c.idle_deadline = Instant::now() + self.cfg.request_timeout;
                    Some(())
                });
                if live.is_none() {
                    tracing::debug!(generation, "progress for no live request; dropped");
                    return;
                }
                self.emit(line.clone());
            }
            "notifications/cancelled" => {
                // The server withdrew one of its own requests to the client.
                let Some(target) = env.request_id else { return };
                let found = self
                    .server_reqs
                    .iter()
                    .find(|(_, r)| {
                        r.generation == generation && r.worker_id == target.get().as_bytes()
                    })
                    .map(|(cid, _)| *cid);
                if let Some(cid) = found {
                    self.server_reqs.remove(&cid);
                    let msg = Message::spliced(line, target, Piece::Number(Digits::new(cid)));
                    self.emit(msg);
                }
            }
            _ => self.emit(line.clone()),
        }
    }

    fn on_worker_request(&mut self, generation: u64, line: &Bytes, env: &Envelope<'_>) {
        let Some(raw_id) = env.id else { return };
        if self.client == ClientState::Closing {
            // The client closed stdin: it cannot answer. Say so at once
            // rather than leave the worker waiting.
            let msg = build::error(
                raw_id.get(),
                NOT_STARTED,
                "The client has disconnected; it cannot answer.",
                None,
            );
            self.send_to(generation, msg);
            return;
        }
        if self.server_reqs.len() >= super::MAX_SERVER_REQUESTS {
            let msg = build::error(
                raw_id.get(),
                NOT_STARTED,
                "Too many requests to the client are unanswered; not forwarded. Retry later.",
                None,
            );
            self.send_to(generation, msg);
            return;
        }
        let cid = self.next_server_id();
        self.server_reqs.insert(
            cid,
            ServerReq {
                generation,
                worker_id: Bytes::copy_from_slice(raw_id.get().as_bytes()),
            },
        );
        let msg = Message::spliced(line, raw_id, Piece::Number(Digits::new(cid)));
        self.emit(msg);
    }

    fn on_worker_oversize(&mut self, generation: u64, len: usize, head: &[u8]) {
        tracing::warn!(
            generation,
            bytes = len,
            "server message over --max-message-bytes; dropped"
        );
        let Some(wid) = scan_id(head).and_then(|id| id.parse::<u64>().ok()) else {
            return;
        };
        let owned = self.reqs.get(&wid).is_some_and(|r| {
            r.generation == Some(generation) && r.client().is_some_and(|c| !c.cancelled)
        });
        if !owned {
            return;
        }
        if let Some(c) = self.remove_req(wid).and_then(|r| match r.owner {
            Owner::Client(c) => Some(c),
            _ => None,
        }) {
            let message = format!(
                "The server's response was {len} bytes, over the limit of {} bytes (--max-message-bytes), \
                 and was dropped. The request did run.",
                self.cfg.max_message_bytes
            );
            let id = std::str::from_utf8(&c.id).unwrap_or("null");
            self.emit(build::error(id, INTERNAL_ERROR, &message, None));
        }
    }
}

impl<S: Spawner> Session<S> {
    /// A `tools/list` answer without the tools the filter hides.
    fn filtered_tool_list(&self, line: &Bytes, client_id: &Bytes) -> Option<Bytes> {
        let mut result = result_of(line)?;
        let tools = result.get_mut("tools")?.as_array_mut()?;
        tools.retain(|t| {
            t["name"]
                .as_str()
                .is_some_and(|n| self.cfg.tools.permits(n))
        });
        let body = serde_json::to_string(&result).ok()?;
        Some(build::result(std::str::from_utf8(client_id).ok()?, &body))
    }
}

/// The `result` of a successful response.
fn result_of(line: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Probe {
        #[serde(default)]
        result: Option<Value>,
    }
    serde_json::from_slice::<Probe>(line)
        .ok()?
        .result
        .filter(Value::is_object)
}

/// What a new generation's `initialize` answer changes from the one the
/// client saw: protocol version and declared capabilities.
fn differences(seen: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if seen.get("protocolVersion") != new.get("protocolVersion") {
        out.push(format!(
            "answered initialize with protocol version {} instead of {}",
            new.get("protocolVersion").unwrap_or(&Value::Null),
            seen.get("protocolVersion").unwrap_or(&Value::Null)
        ));
    }
    let keys = |v: &Value| -> Vec<String> {
        v.get("capabilities")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (old, fresh) = (keys(seen), keys(new));
    let added: Vec<&String> = fresh.iter().filter(|k| !old.contains(k)).collect();
    let removed: Vec<&String> = old.iter().filter(|k| !fresh.contains(k)).collect();
    if !added.is_empty() || !removed.is_empty() {
        out.push(format!(
            "declares capabilities added {added:?} removed {removed:?}"
        ));
    }
    out
}
