//! Messages from the client.

use bytes::Bytes;
use mcpvisor_jsonrpc::envelope::{raw_params, scan_id};
use mcpvisor_jsonrpc::{Envelope, EnvelopeError, Frame, Kind, Raw, Spans};
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::lifecycle::Route;
use super::{Phase, Session, Waiting};
use crate::reply;
use crate::spawner::Spawner;
use crate::table::{ClientReq, Owner, Req, StateChange};
use crate::writer::{Digits, Message, Piece};
use mcpvisor_config::report::ErrorData;

impl<S: Spawner> Session<S> {
    /// A message from the client; `spans`, when the client (in this
    /// process) says where its envelope lies, spare the scan.
    pub(crate) fn on_client_frame(&mut self, frame: Frame, spans: Option<Spans>) {
        let line = match frame {
            Frame::Line(line) => line,
            Frame::Oversize { len, head } => {
                let id = scan_id(&head).unwrap_or("null").to_owned();
                tracing::warn!(
                    bytes = len,
                    "client message over --max-message-bytes; not forwarded"
                );
                let detail = format!(
                    "the message is {len} bytes, over the limit of {} bytes (--max-message-bytes); it was not forwarded",
                    self.cfg.max_message_bytes
                );
                self.emit(reply::invalid(&id, &detail));
                return;
            }
        };
        let known = spans.and_then(|spans| spans.envelope(&line));
        let env = match known.map_or_else(|| Envelope::peek(&line), Ok) {
            Ok(env) => env,
            Err(EnvelopeError::Json(e)) => {
                tracing::debug!(bytes = line.len(), "client sent a line that is not JSON");
                self.emit(reply::parse_error(&e.to_string()));
                return;
            }
            Err(e @ EnvelopeError::Batch) => {
                self.emit(reply::invalid(
                    "null",
                    &format!("{e}; send each message on its own line"),
                ));
                return;
            }
            Err(EnvelopeError::Invalid(why)) => {
                let id = scan_id(&line).unwrap_or("null").to_owned();
                self.emit(reply::invalid(&id, why));
                return;
            }
        };
        match env.kind {
            Kind::Request => self.on_client_request(&line, &env),
            Kind::Notification => self.on_client_notification(&line, &env),
            Kind::Response => self.on_client_response(&line, &env),
        }
    }

    fn on_client_request(&mut self, line: &Bytes, env: &Envelope<'_>) {
        let Some(raw_id) = env.id else { return };
        let id = line.slice_ref(raw_id.get().as_bytes());
        if let Some(refusal) = self.refusal(&id, line, env) {
            self.emit(refusal);
            return;
        }
        let wid = self.record_request(id, raw_id, env, line);
        match self.route() {
            Route::Send(generation) => {
                self.dispatch(wid, generation);
            }
            Route::Wait => self.waiting.push_back(Waiting::Request(wid)),
            Route::Refuse(reason, data) => self.refuse_request(wid, &reason, data),
        }
    }

    /// The answer to a request that is refused before it is recorded: a
    /// duplicate id, one too many in flight, or a tool the filter hides.
    fn refusal(&self, id: &Bytes, line: &Bytes, env: &Envelope<'_>) -> Option<Bytes> {
        if self.by_client_id.contains_key(id) {
            let reason = "a request with this id is still in flight";
            return Some(reply::not_started(id, reason, None));
        }
        if self.by_client_id.len() >= self.cfg.max_in_flight {
            let reason = format!(
                "{} requests are already in flight (--max-in-flight)",
                self.cfg.max_in_flight
            );
            return Some(reply::not_started(id, &reason, None));
        }
        if !self.cfg.tools.is_open() && env.method() == "tools/call" {
            let name = tool_name(line);
            if !name.as_deref().is_some_and(|n| self.cfg.tools.permits(n)) {
                let message = format!(
                    "Unknown tool: {} (not allowed by this server's tools filter)",
                    name.as_deref().unwrap_or("(none)")
                );
                return Some(mcpvisor_jsonrpc::build::error(
                    std::str::from_utf8(id).unwrap_or("null"),
                    mcpvisor_jsonrpc::INVALID_PARAMS,
                    &message,
                    None,
                ));
            }
        }
        None
    }

    /// Records a client request under a fresh worker-side id, with its
    /// deadlines, not yet sent anywhere.
    fn record_request(
        &mut self,
        id: Bytes,
        raw_id: Raw<'_>,
        env: &Envelope<'_>,
        line: &Bytes,
    ) -> u64 {
        let initialize = (env.method() == "initialize").then(|| {
            raw_params(line)
                .map(RawValue::to_owned)
                .unwrap_or_else(empty_object)
        });
        self.handshake.asked |= initialize.is_some();
        let wid = self.next_worker_id();
        let spliced = Message::spliced(line, raw_id, Piece::Number(Digits::new(wid)));
        let now = Instant::now();
        self.arm_sweep();
        let progress_token = env
            .progress_token
            .map(|t| line.slice_ref(t.get().as_bytes()));
        if let Some(t) = &progress_token {
            self.by_token.insert(t.clone(), wid);
        }
        self.by_client_id.insert(id.clone(), wid);
        self.reqs.insert(
            wid,
            Req {
                owner: Owner::Client(ClientReq {
                    id,
                    cancelled: false,
                    initialize,
                    filter_tools: !self.cfg.tools.is_open() && env.method() == "tools/list",
                    state: state_change(env.method(), line),
                    progress_token,
                    standing: env.method() == STANDING,
                    line: spliced,
                    seq: 0,
                    idle_deadline: now + self.cfg.request_timeout,
                    ceiling: now + self.cfg.request_ceiling,
                }),
                generation: None,
                timer: None,
            },
        );
        wid
    }

    fn refuse_request(&mut self, wid: u64, reason: &str, data: ErrorData) {
        if let Some(c) = self.remove_req(wid).and_then(|r| match r.owner {
            Owner::Client(c) => Some(c),
            _ => None,
        }) {
            self.emit(reply::not_started(&c.id, reason, Some(data)));
        }
    }

    fn on_client_notification(&mut self, line: &Bytes, env: &Envelope<'_>) {
        match env.method() {
            "notifications/cancelled" => {
                let Some(target) = env.request_id else { return };
                let key = Bytes::copy_from_slice(target.get().as_bytes());
                if let Some(&wid) = self.by_client_id.get(&key) {
                    self.cancel(wid, "cancelled by the client");
                }
                return;
            }
            "notifications/initialized" => self.handshake.initialized = true,
            _ => {}
        }
        let initialized = env.method() == "notifications/initialized";
        match self.route() {
            Route::Send(generation) => {
                self.send_to(generation, line.clone());
                if initialized {
                    self.fetch_baseline(generation);
                }
            }
            Route::Wait => self.waiting.push_back(Waiting::Notification(line.clone())),
            Route::Refuse(..) => {
                tracing::debug!(
                    method = env.method(),
                    "notification while the server is failing; dropped"
                );
            }
        }
    }

    fn on_client_response(&mut self, line: &Bytes, env: &Envelope<'_>) {
        let Some(raw_id) = env.id else { return };
        let Some(server_req) = raw_id
            .get()
            .parse::<u64>()
            .ok()
            .and_then(|cid| self.server_reqs.remove(&cid))
        else {
            tracing::debug!("client answered a request mcpvisor does not know; dropped");
            return;
        };
        let live = self
            .gens
            .get(&server_req.generation)
            .is_some_and(|g| !matches!(g.phase, Phase::Dead));
        if !live {
            tracing::debug!(
                generation = server_req.generation,
                "answer for a stopped generation; dropped"
            );
            return;
        }
        let msg = Message::spliced(line, raw_id, Piece::Bytes(server_req.worker_id));
        self.send_to(server_req.generation, msg);
    }
}

/// The one standing request: a 2026-07-28 `subscriptions/listen`, whose
/// stream of notifications lasts until one side ends it.
pub(crate) const STANDING: &str = "subscriptions/listen";

/// `params.name` of a `tools/call` (a second, small parse: only with a filter).
fn tool_name(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Call {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        name: String,
    }
    serde_json::from_slice::<Call>(line)
        .ok()
        .map(|c| c.params.name)
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".into()).unwrap_or_else(|_| unreachable!("{{}} is valid JSON"))
}

/// What a request of `method` changes in the server for the rest of the
/// session, read from its `line`: `logging/setLevel` and resource
/// subscriptions. `None` for every other request (one comparison of the
/// method's first byte for most).
fn state_change(method: &str, line: &[u8]) -> Option<Box<StateChange>> {
    if !method.starts_with(['l', 'r']) {
        return None;
    }
    let uri = || {
        #[derive(serde::Deserialize)]
        struct Uri {
            uri: String,
        }
        raw_params(line).and_then(|p| serde_json::from_str::<Uri>(p.get()).ok().map(|u| u.uri))
    };
    let change = match method {
        "logging/setLevel" => StateChange::LogLevel(raw_params(line)?.to_owned()),
        "resources/subscribe" => StateChange::Subscribe(uri()?, raw_params(line)?.to_owned()),
        "resources/unsubscribe" => StateChange::Unsubscribe(uri()?),
        _ => return None,
    };
    Some(Box::new(change))
}
