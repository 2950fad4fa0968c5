//! A 2026-07-28 server's input requests, put to a client of the handshake
//! era as that era's requests.
//!
//! A server of 2026-07-28 does not send a client requests mid-call: it
//! answers the call with an `input_required` result whose `inputRequests`
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`) the
//! client answers itself, sending the same request again with
//! `inputResponses` and the server's `requestState`. A client of the
//! handshake era cannot read that result, so the gateway does it on the
//! client's behalf: each input request goes to the client as a request of
//! its era (id `mcpvisor-N`, as a server's request through the gateway
//! has), and once the client has answered them all the gateway sends the
//! server the request again with the answers, under a fresh id. A request
//! may take several rounds. The client must declare what each input
//! request needs (else `-32021`), answer within the server's
//! `request_ceiling` (else `-32001`), and answer with results (an error
//! fails the request with it). At most `MAX_ASKS` input requests per
//! answer and `MAX_ASKING` requests waiting at once (else `-32013`).

use std::sync::Arc;

use bytes::Bytes;
use mcpvisor_jsonrpc::{REQUEST_TIMEOUT, build};
use tokio::time::Instant;

use super::backend::{BackendId, MISSING_CAPABILITY};
use super::{Effect, Hub, Pending, Timer, TimerKey, Wrap};
use crate::fronts::FrontId;
use crate::raw::{self, RawObject};

/// The most input requests one answer may put to a client.
const MAX_ASKS: usize = 16;
/// The most requests waiting for their clients' input at once.
const MAX_ASKING: usize = 1024;

/// The parts of a pending front request the bridge takes over when its
/// server asks for input.
#[derive(Debug)]
pub(crate) struct Handed {
    pub front: FrontId,
    /// The front's id of the request, as written.
    pub front_id: Bytes,
    pub backend: BackendId,
    /// The front's progress token, if it asked for progress.
    pub token: Option<Bytes>,
    pub envelope: Arc<str>,
    /// The request as the server got it, to be sent again.
    pub sent: Bytes,
    /// When the front's request was first sent on, for its latency.
    pub at: Instant,
}

/// One input request of a server's: its key (as JSON), method and params.
type Ask = (String, String, Option<String>);

/// The `requestState` and the input requests of an `input_required`
/// answer; `None` if the line holds no result object.
fn input_requests(line: &Bytes) -> Option<(Option<String>, Vec<Ask>)> {
    let text = std::str::from_utf8(line).unwrap_or_default();
    let result = RawObject::parse(text)?.get("result")?;
    let result = RawObject::parse(result.get())?;
    let state = result.get("requestState").map(|s| s.get().to_owned());
    let requests = result
        .get("inputRequests")
        .and_then(|r| RawObject::parse(r.get()));
    let mut asks = Vec::new();
    for key in requests.iter().flat_map(RawObject::keys) {
        let ask = requests
            .as_ref()
            .and_then(|r| r.get(key))
            .and_then(|v| RawObject::parse(v.get()));
        let method = ask.as_ref().and_then(|a| a.str("method"));
        let params = ask
            .as_ref()
            .and_then(|a| a.get("params"))
            .map(|p| p.get().to_owned());
        asks.push((raw::quote(key), method.unwrap_or_default(), params));
    }
    Some((state, asks))
}

/// One front request whose server asked for input, waiting for the
/// front's answers.
#[derive(Debug)]
pub(crate) struct Asking {
    /// The request, as the bridge took it over.
    pub call: Handed,
    /// The server's `requestState` (raw JSON), if it gave one.
    pub state: Option<String>,
    /// The input requests not answered yet: (front-side id, key as JSON,
    /// method).
    pub waiting: Vec<(u64, String, String)>,
    /// The answers so far: (key as JSON, result as JSON).
    pub answers: Vec<(String, String)>,
    pub timer: TimerKey,
}

/// What a request the gateway asks for a server's input needs of the
/// client: the capability (as it is named in errors) and whether the
/// client declared it. `None` for a method the handshake era has no
/// request for.
fn needs(
    info: &super::front_table::FrontInfo,
    method: &str,
    params: Option<&str>,
) -> Option<(&'static str, bool)> {
    let url = params
        .and_then(RawObject::parse)
        .and_then(|p| p.str("mode"))
        .is_some_and(|m| m == "url");
    match method {
        "sampling/createMessage" => Some(("sampling", info.sampling)),
        "elicitation/create" if url => Some(("elicitation.url", info.elicitation_url)),
        "elicitation/create" => Some(("elicitation", info.elicitation)),
        "roots/list" => Some(("roots", info.roots)),
        _ => None,
    }
}

impl Hub {
    /// A 2026-07-28 server (`backend`) answered the front's request with
    /// `line`, an `input_required` result: its input requests go to the
    /// front, or the front gets an error saying why they cannot.
    pub(crate) fn ask_for_input(&mut self, call: Handed, line: &Bytes) {
        let id_text = String::from_utf8_lossy(&call.front_id).into_owned();
        let Some((state, asks)) = input_requests(line) else {
            return;
        };
        let Some(info) = self.fronts.open.get(&call.front).map(|f| &f.info) else {
            return;
        };
        let Some(refusal) = self.refusal_of(info, call.backend, &id_text, &asks) else {
            return self.put_to_front(call, state, asks);
        };
        self.count_error(
            call.backend,
            mcpvisor_jsonrpc::envelope::error_code(&refusal).unwrap_or(0),
        );
        self.emit_to(call.front, refusal, Some(call.front_id));
    }

    /// Why the front cannot be asked what a server asks (a capability it
    /// did not declare, a method the bridge does not carry, nothing asked,
    /// or too many asks), as the error line to answer with; `None` when it
    /// can. Every ask is checked before any is put: a client is asked
    /// nothing for a request it cannot finish.
    fn refusal_of(
        &self,
        info: &super::front_table::FrontInfo,
        backend: BackendId,
        id_text: &str,
        asks: &[Ask],
    ) -> Option<Bytes> {
        let server = self.backend_name(backend);
        for (_, method, params) in asks {
            match needs(info, method, params.as_deref()) {
                Some((_, true)) => {}
                Some((cap, false)) => {
                    let message = format!(
                        "The MCP server `{server}` needs input through `{method}`, and the client connected to mcpvisor did not declare the `{cap}` capability. The request did not complete."
                    );
                    let needed = match cap {
                        "elicitation.url" => serde_json::json!({"elicitation": {"url": {}}}),
                        cap => serde_json::json!({ cap: {} }),
                    };
                    let data =
                        serde_json::json!({"requiredCapabilities": needed, "server": server});
                    return Some(build::error(
                        id_text,
                        MISSING_CAPABILITY,
                        &message,
                        Some(&data),
                    ));
                }
                None => return Some(self.input_required_refusal(backend, id_text, method)),
            }
        }
        if asks.is_empty() {
            return Some(self.input_required_refusal(backend, id_text, "nothing"));
        }
        // Bounded: what one request asks, and how many requests wait for
        // their clients at once.
        if asks.len() > MAX_ASKS || self.calls.asking.len() >= MAX_ASKING {
            let what = format!(
                "{} input requests, with {} requests already waiting for their clients (at most {MAX_ASKS} and {MAX_ASKING})",
                asks.len(),
                self.calls.asking.len()
            );
            return Some(self.input_required_refusal(backend, id_text, &what));
        }
        None
    }

    /// Puts a server's input requests to the front, each under an id of
    /// the gateway's, and keeps what the answers will need.
    fn put_to_front(&mut self, call: Handed, state: Option<String>, asks: Vec<Ask>) {
        let (front, front_id, backend) = (call.front, call.front_id.clone(), call.backend);
        let server = self.backend_name(backend);
        let bid = self.calls.next_server_req();
        let bound = self
            .backends
            .by_id
            .get(&backend)
            .map_or(std::time::Duration::from_secs(120), |b| {
                b.plan.session.request_ceiling
            });
        let timer = self.effects.arm(Timer::Asking(bid), Instant::now() + bound);
        let mut waiting = Vec::with_capacity(asks.len());
        let mut out = Vec::with_capacity(asks.len());
        for (key, method, params) in asks {
            let fid = self.calls.next_server_req();
            let params = params
                .map(|p| format!(",\"params\":{p}"))
                .unwrap_or_default();
            out.push(Bytes::from(format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":\"mcpvisor-{fid}\",\"method\":{}{params}}}",
                raw::quote(&method)
            )));
            self.calls.asking_reqs.insert(fid, bid);
            waiting.push((fid, key, method));
        }
        tracing::debug!(server = %server, asks = waiting.len(), "a server's input requests put to a client of the handshake era");
        self.calls.asking.insert(
            bid,
            Asking {
                call,
                state,
                waiting,
                answers: Vec::new(),
                timer,
            },
        );
        for line in out {
            self.emit_to(front, line, Some(front_id.clone()));
        }
    }

    /// Whether `fid` is one of the bridge's requests to a front.
    pub(crate) fn is_asked(&self, fid: u64) -> bool {
        self.calls.asking_reqs.contains_key(&fid)
    }

    /// The front's answer to one of the input requests put to it.
    pub(crate) fn on_asked_answer(&mut self, front: FrontId, fid: u64, line: &Bytes) {
        let Some(&bid) = self.calls.asking_reqs.get(&fid) else {
            return;
        };
        let Some(bridge) = self
            .calls
            .asking
            .get_mut(&bid)
            .filter(|b| b.call.front == front)
        else {
            return;
        };
        self.calls.asking_reqs.remove(&fid);
        let Some(at) = bridge.waiting.iter().position(|(f, _, _)| *f == fid) else {
            return;
        };
        let (_, key, method) = bridge.waiting.remove(at);
        let text = std::str::from_utf8(line).unwrap_or_default();
        let answer = RawObject::parse(text);
        match answer.as_ref().and_then(|a| a.get("result")) {
            Some(result) => bridge.answers.push((key, result.get().to_owned())),
            None => {
                let error = answer
                    .as_ref()
                    .and_then(|a| a.get("error"))
                    .and_then(|e| RawObject::parse(e.get()));
                let code = error
                    .as_ref()
                    .and_then(|e| e.get("code"))
                    .and_then(|c| c.get().parse::<i64>().ok())
                    .unwrap_or(mcpvisor_jsonrpc::INTERNAL_ERROR);
                let said = error
                    .as_ref()
                    .and_then(|e| e.str("message"))
                    .unwrap_or_default();
                let message = format!(
                    "The client answered the server's `{method}` with an error ({said}); the request did not complete."
                );
                return self.end_asking(bid, code, &message);
            }
        }
        if bridge.waiting.is_empty() {
            self.retry_asked(bid);
        }
    }

    /// Every input request is answered: the server gets its request again,
    /// with the answers and its state, under a fresh id.
    fn retry_asked(&mut self, bid: u64) {
        let Some(bridge) = self.calls.asking.remove(&bid) else {
            return;
        };
        self.effects.list.push(Effect::Disarm(bridge.timer));
        let gid = self.calls.next_id();
        let text = std::str::from_utf8(&bridge.call.sent).unwrap_or_default();
        let Some(obj) = RawObject::parse(text) else {
            return;
        };
        let params = obj.get("params").map_or("{}", |p| p.get());
        let params = match &bridge.call.token {
            Some(_) => super::front::with_progress_token(params, gid),
            None => params.to_owned(),
        };
        let responses: Vec<String> = bridge
            .answers
            .iter()
            .map(|(key, result)| format!("{key}:{result}"))
            .collect();
        let responses = format!("{{{}}}", responses.join(","));
        let params = RawObject::parse(&params)
            .map(|p| {
                p.write(&[
                    ("inputResponses", Some(&responses)),
                    ("requestState", bridge.state.as_deref()),
                ])
            })
            .unwrap_or(params.clone());
        let line =
            Bytes::from(obj.write(&[("id", Some(&gid.to_string())), ("params", Some(&params))]));
        let Handed {
            front,
            front_id,
            backend,
            token,
            envelope,
            at,
            ..
        } = bridge.call;
        if !self.fronts.open.contains_key(&front) {
            return;
        }
        self.calls
            .by_front_id
            .insert((front, front_id.clone()), gid);
        if let Some(f) = self.fronts.open.get_mut(&front) {
            f.awaiting += 1;
        }
        self.calls.pending.insert(
            gid,
            Pending::Front {
                front,
                backend,
                id: front_id.clone(),
                token,
                wrap: Wrap::AsIs,
                at,
                audit: None,
                envelope,
                sent: None,
                tasks: false,
                modern: None,
            },
        );
        self.route(front, backend, gid, line, None, front_id);
    }

    /// The front did not answer its input requests in time.
    pub(crate) fn on_asking_timeout(&mut self, bid: u64) {
        let message = "The client did not answer the server's request for input in time; the request did not complete. It may be retried.";
        self.end_asking(bid, REQUEST_TIMEOUT, message);
    }

    /// Ends a bridge with an error to its front; its requests still put to
    /// the front are withdrawn.
    fn end_asking(&mut self, bid: u64, code: i64, message: &str) {
        let Some(bridge) = self.calls.asking.remove(&bid) else {
            return;
        };
        self.effects.list.push(Effect::Disarm(bridge.timer));
        for (fid, _, _) in &bridge.waiting {
            self.calls.asking_reqs.remove(fid);
            let note = build::cancelled(
                &format!("\"mcpvisor-{fid}\""),
                "the request it served ended",
            );
            self.emit_to(bridge.call.front, note, None);
        }
        let Handed {
            front,
            front_id,
            backend,
            ..
        } = bridge.call;
        self.count_error(backend, code);
        let id = String::from_utf8_lossy(&front_id).into_owned();
        let data = serde_json::json!({"server": self.backend_name(backend)});
        let error = build::error(&id, code, message, Some(&data));
        self.emit_to(front, error, Some(front_id));
    }
}
