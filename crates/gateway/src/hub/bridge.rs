//! The era bridge: a 2026-07-28 client's call to a server of the handshake
//! era that asks its client something in the middle of the call.
//!
//! A 2026-07-28 client takes no requests from a server. When a 2025 server
//! sends `sampling/createMessage`, `elicitation/create` or `roots/list` on
//! behalf of such a client's `tools/call` (or any call), the gateway answers
//! the client's call with an input-required result
//! (`{resultType: "input_required", inputRequests: {KEY: {method, params}},
//! requestState}`) and holds the server's request and the server's call
//! open. The client's retry (a new id, the same method and params, plus
//! `inputResponses` and the `requestState`) answers the server's requests
//! (each `inputResponses[KEY]` is written to the server as the result of
//! its request) and takes the call over: the server's answer goes to the
//! retry, or, when the server asks again, another round goes out.
//!
//! Rounds: the first request of a call sends a round at once; requests that
//! arrive while a round is out go in the next one, as do those the retry
//! left unanswered (the next round goes out at once, in answer to that
//! retry).
//!
//! The `requestState` is opaque to the client and signed (HMAC-SHA256 with a
//! key drawn when the process starts):
//! `mcpvisor1.REPLICA.HEX(gid.round.era.expiry).HEX(MAC)`. It names this
//! process's replica id in clear, so that a balancer can send the retry to
//! the replica that holds the call (`serve --replica-id`), then, in hex, the
//! call's gateway id, its round, the era and an expiry: never payload. The
//! MAC covers the replica id too. A state that is tampered with, from
//! another process, expired, of a round that is over or of a call that has
//! ended is refused with -32602.
//!
//! Bounds: a round waits at most the server's request timeout; then the
//! server's requests get an error (-32001) and its call a cancel. At most
//! [`MAX_ASKS`] requests wait per call and [`MAX_BRIDGED`] calls wait for a
//! retry at once; a server request past either is refused.
//!
//! A 2026-07-28 server's own multi-round calls are not the bridge's to
//! hold, but their retry must still reach the process that serves them
//! (the server may sign its state with a key of its own process, or keep
//! the call in memory). So its `requestState` goes to the client wrapped
//! in one of the gateway's, of the same shape:
//! `mcpvisor1.REPLICA.s.B64(server).B64(state).HEX(MAC)`, the replica in
//! clear (one balancer rule routes both), the server's name and its state
//! (the JSON text it wrote, base64url) under the MAC. The retry's state is
//! unwrapped and the server gets its own back byte for byte; a retry that
//! reaches another replica, or another server, is refused (-32602). Always
//! wrapped, with or without `--replica-id`: one shape for clients and
//! balancers, and a state is bound to the server that issued it even in
//! one process. What it costs: a restart of the gateway ends the server's
//! rounds in flight (the client starts the call over), as it ends the
//! bridge's. At most [`MAX_SERVER_STATE`] bytes of a server's state are
//! carried, so that a retry with its wrapped state fits a balancer's
//! request buffer.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use bytes::Bytes;
use mcpvisor_jsonrpc::{Envelope, INVALID_PARAMS, REQUEST_TIMEOUT, build};
use rustc_hash::FxHashMap as HashMap;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::backend::{BackendId, MISSING_CAPABILITY, required_capabilities};
use super::request::{Era, FrontRequest};
use super::{Hub, Pending, Timer};
use crate::fronts::FrontId;
use crate::raw::{RawObject, quote};

/// Server requests waiting per bridged call.
pub(crate) const MAX_ASKS: usize = 16;
/// Calls waiting for a client's retry at once.
pub(crate) const MAX_BRIDGED: usize = 1024;
/// How every state the gateway hands out begins: a retry whose state does
/// not is not the gateway's to continue (a 2026-07-28 server's own state
/// passes through).
const PREFIX: &str = "mcpvisor1.";
/// The longest replica id.
const MAX_REPLICA_ID: usize = 64;
/// The longest `requestState` of a 2026-07-28 server's own that the
/// gateway carries, as the JSON text the server wrote: wrapped (a third
/// longer, base64url) it leaves room in a balancer's 32 kB request buffer
/// for the rest of the retry.
pub(crate) const MAX_SERVER_STATE: usize = 16 * 1024;
/// The longest `requestState` a retry may bring back: a wrapped state of
/// the longest server state, the longest replica id and a long server name
/// fit well within it. Longer is refused before it is read.
const MAX_STATE: usize = 32 * 1024;
/// What marks a wrapped server state after the replica id.
const SERVER_STATE: &str = "s.";

/// Whether `id` can be a replica id (`serve --replica-id`): 1 to 64 ASCII
/// letters, digits, `-` or `_`, so that it reads the same in a
/// `requestState`, an HTTP header and a balancer's server name. The error
/// says what is wrong in words.
pub fn check_replica_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_REPLICA_ID {
        return Err(format!(
            "a replica id has 1 to {MAX_REPLICA_ID} characters; this one has {}",
            id.len()
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "a replica id is made of ASCII letters, digits, `-` and `_`; {c:?} is not one"
        ));
    }
    Ok(())
}

/// A replica id nobody else has: 16 random hex digits.
pub fn random_replica_id() -> String {
    let mut replica = [0u8; 8];
    if getrandom::fill(&mut replica).is_err() {
        let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
        replica.copy_from_slice(&Sha256::digest(seed.as_bytes())[..8]);
    }
    hex(&replica)
}

/// The client capabilities a 2026-07-28 call declared in its `_meta`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Caps {
    /// The call's method.
    pub method: &'static str,
    pub sampling: bool,
    pub elicitation: bool,
    pub elicitation_url: bool,
    pub roots: bool,
}

impl Caps {
    /// What a request's `_meta` declares
    /// (`io.modelcontextprotocol/clientCapabilities`).
    pub(crate) fn of(method: &'static str, meta: Option<&RawObject<'_>>) -> Self {
        let caps = meta
            .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"))
            .and_then(|c| RawObject::parse(c.get()));
        let Some(caps) = caps else {
            return Self {
                method,
                ..Self::default()
            };
        };
        let has = |k: &str| caps.get(k).is_some_and(|v| v.get() != "null");
        let elicitation_url = caps
            .get("elicitation")
            .and_then(|e| RawObject::parse(e.get()))
            .and_then(|e| e.get("url"))
            .is_some_and(|v| v.get() != "null");
        Self {
            method,
            sampling: has("sampling"),
            elicitation: has("elicitation"),
            elicitation_url,
            roots: has("roots"),
        }
    }
}

/// The bridged calls, and what signs their states.
#[derive(Debug)]
pub(crate) struct Bridges {
    key: [u8; 32],
    /// This process's id in every state (a balancer may route on it).
    replica: String,
    /// Expiries are written as milliseconds since this instant.
    origin: Instant,
    /// By the call's gateway id.
    pub calls: HashMap<u64, Bridged>,
}

impl Default for Bridges {
    fn default() -> Self {
        let mut key = [0u8; 32];
        // Without the system's randomness, the states of this process
        // cannot be trusted: a key nobody can know is still drawn, from
        // the time and the process, and every state fails verification
        // after a restart anyway.
        if getrandom::fill(&mut key).is_err() {
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            key.copy_from_slice(&Sha256::digest(seed.as_bytes()));
        }
        Self {
            key,
            replica: random_replica_id(),
            origin: Instant::now(),
            calls: HashMap::default(),
        }
    }
}

/// One call whose server asked its 2026-07-28 client something.
#[derive(Debug)]
pub(crate) struct Bridged {
    pub backend: BackendId,
    /// The call's method (a retry must repeat it).
    method: &'static str,
    caps: Caps,
    round: u64,
    /// The server's requests offered in the round that is out.
    asked: Vec<Ask>,
    /// The server's requests for the next round.
    queued: Vec<Ask>,
    /// While a round is out: the call, taken off its front.
    out: Option<Out>,
}

#[derive(Debug)]
struct Ask {
    /// Its key in `inputRequests` and `inputResponses`.
    key: String,
    /// The server's id, as written.
    id: Bytes,
    /// `{"method": ..., "params": ...}`, as the client gets it.
    request: String,
}

#[derive(Debug)]
struct Out {
    /// The call's entry while no front request stands for it.
    pending: Pending,
    deadline: Instant,
    /// The server's answer, when it came before the retry.
    answer: Option<Bytes>,
}

/// What a verified state names.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    /// A round of a bridged call of this process.
    Call { gid: u64, round: u64 },
    /// A 2026-07-28 server's own state (its JSON text, as it wrote it),
    /// for a call to the server of that name.
    Server { server: String, state: String },
}

/// What a 2026-07-28 request's `requestState` makes of it.
pub(super) enum Retry {
    /// It carries none of the gateway's: it goes on as it is.
    NotOne,
    /// Handled: the retry of a bridged call, or refused.
    Done,
    /// It continues a server's own call: `line` is the request with the
    /// server's state in place of the gateway's, for `server` alone.
    Server { line: Bytes, server: String },
}

impl Bridges {
    /// Names the states this process signs with `id` (checked by
    /// [`check_replica_id`]) in place of a random one.
    pub(crate) fn set_replica(&mut self, id: &str) {
        self.replica = id.to_owned();
    }

    /// Signs a state for round `round` of call `gid`, good until `deadline`.
    fn sign(&self, gid: u64, round: u64, deadline: Instant) -> String {
        let expiry = deadline.saturating_duration_since(self.origin).as_millis();
        let payload = format!("{gid}.{round}.2026-07-28.{expiry}");
        self.signed(&hex(payload.as_bytes()))
    }

    /// Wraps `state`, the JSON text of a `requestState` that server
    /// `server` handed out, in one of this process's. `Err`: it is longer
    /// than [`MAX_SERVER_STATE`] (its length).
    fn wrap(&self, server: &str, state: &str) -> Result<String, usize> {
        if state.len() > MAX_SERVER_STATE {
            return Err(state.len());
        }
        let payload = format!("{SERVER_STATE}{}.{}", B64.encode(server), B64.encode(state));
        Ok(self.signed(&payload))
    }

    /// `mcpvisor1.REPLICA.PAYLOAD.HEX(MAC)`, the MAC over
    /// `REPLICA.PAYLOAD`.
    fn signed(&self, payload: &str) -> String {
        let signed = format!("{}.{payload}", self.replica);
        let mac = hmac_sha256(&self.key, signed.as_bytes());
        format!("{PREFIX}{signed}.{}", hex(&mac))
    }

    /// Reads a state this process signed; why not, in words for the client.
    fn verify(&self, state: &str, now: Instant) -> Result<Claim, String> {
        const BAD: &str = "requestState is not one mcpvisor handed out, or was changed";
        if state.len() > MAX_STATE {
            return Err(format!(
                "requestState has {} characters, more than any mcpvisor hands out ({MAX_STATE})",
                state.len()
            ));
        }
        let rest = state.strip_prefix(PREFIX).ok_or(BAD)?;
        let (signed, mac) = rest.rsplit_once('.').ok_or(BAD)?;
        let (replica, payload) = signed.split_once('.').ok_or(BAD)?;
        if replica != self.replica {
            check_replica_id(replica).map_err(|_| BAD)?;
            return Err(format!(
                "requestState was handed out by mcpvisor replica `{replica}`, and this is `{}`: send the retry to that replica, or start the call over",
                self.replica
            ));
        }
        let mac = unhex(mac).ok_or(BAD)?;
        let expected = hmac_sha256(&self.key, signed.as_bytes());
        // Compared in full whatever differs first.
        let same = mac.len() == expected.len()
            && mac
                .iter()
                .zip(expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !same {
            return Err(BAD.to_owned());
        }
        if let Some(wrapped) = payload.strip_prefix(SERVER_STATE) {
            let (server, state) = wrapped.split_once('.').ok_or(BAD)?;
            let text = |b64: &str| {
                B64.decode(b64)
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or(BAD)
            };
            return Ok(Claim::Server {
                server: text(server)?,
                state: text(state)?,
            });
        }
        let payload = unhex(payload).ok_or(BAD)?;
        let payload = String::from_utf8(payload).map_err(|_| BAD)?;
        let parts: Vec<&str> = payload.split('.').collect();
        let [gid, round, era, expiry] = parts.as_slice() else {
            return Err(BAD.to_owned());
        };
        if *era != "2026-07-28" {
            return Err(BAD.to_owned());
        }
        let expiry: u64 = expiry.parse().map_err(|_| BAD)?;
        let now_ms = now.saturating_duration_since(self.origin).as_millis();
        if now_ms > u128::from(expiry) {
            return Err("requestState has expired: the call it continues timed out".to_owned());
        }
        Ok(Claim::Call {
            gid: gid.parse().map_err(|_| BAD)?,
            round: round.parse().map_err(|_| BAD)?,
        })
    }

    /// The call waiting for a retry at `backend`, when there is exactly one.
    fn only_out_at(&self, backend: BackendId) -> Option<u64> {
        let mut out = self
            .calls
            .iter()
            .filter(|(_, b)| b.backend == backend && b.out.is_some())
            .map(|(gid, _)| *gid);
        let first = out.next()?;
        out.next().is_none().then_some(first)
    }
}

impl Hub {
    /// A server's request on behalf of a 2026-07-28 client's call `gid`,
    /// or, with none, of the one bridged call at that server waiting for
    /// its client's retry. `false`: not the bridge's to handle.
    pub(super) fn bridge_ask(
        &mut self,
        backend: BackendId,
        gid: Option<u64>,
        line: &Bytes,
        env: &Envelope<'_>,
    ) -> bool {
        let Some(raw_id) = env.id else { return false };
        let method = env.method();
        let call = gid.and_then(|gid| match self.calls.pending.get(&gid) {
            Some(Pending::Front {
                modern, backend: b, ..
            }) if *b == backend => Some(modern.map(|caps| (gid, caps))),
            _ => None,
        });
        let target = match call {
            // A call of the handshake era (or one the bridge cannot carry).
            Some(None) => return false,
            Some(Some(target)) => Some(target),
            // No call to attribute it to: the one call of that server that
            // waits for its client's retry (a server asking twice), when
            // no other call is in flight there (else it is a guess).
            None if !self
                .calls
                .pending
                .values()
                .any(|p| matches!(p, Pending::Front { backend: b, .. } if *b == backend)) =>
            {
                self.calls
                    .bridges
                    .only_out_at(backend)
                    .and_then(|gid| Some((gid, self.calls.bridges.calls.get(&gid)?.caps)))
            }
            None => None,
        };
        let Some((gid, caps)) = target else {
            return false;
        };
        let refuse =
            |hub: &mut Self, code: i64, message: String, data: Option<serde_json::Value>| {
                tracing::info!(server = %hub.backend_name(backend), "declined {method}: {message}");
                let reply = build::error(raw_id.get(), code, &message, data.as_ref());
                hub.send_backend(backend, reply);
                true
            };
        let needs = match method {
            "sampling/createMessage" => ("sampling", caps.sampling),
            "elicitation/create" if super::backend::is_url_mode(line) => {
                ("elicitation.url", caps.elicitation_url)
            }
            "elicitation/create" => ("elicitation", caps.elicitation),
            "roots/list" => ("roots", caps.roots),
            _ => {
                let message = format!(
                    "the client connected to mcpvisor uses the 2026-07-28 protocol, which carries only sampling, elicitation and roots requests to a client; `{method}` cannot be delivered"
                );
                return refuse(self, mcpvisor_jsonrpc::METHOD_NOT_FOUND, message, None);
            }
        };
        if !needs.1 {
            let message = format!(
                "the client connected to mcpvisor did not declare the `{}` capability, so `{method}` cannot be delivered",
                needs.0
            );
            let data = required_capabilities(method, line);
            return refuse(self, MISSING_CAPABILITY, message, data);
        }
        let fresh = !self.calls.bridges.calls.contains_key(&gid);
        if fresh && self.calls.bridges.calls.len() >= MAX_BRIDGED {
            let message = format!(
                "{MAX_BRIDGED} calls already wait for their clients' input; `{method}` cannot be delivered"
            );
            return refuse(self, mcpvisor_jsonrpc::INTERNAL_ERROR, message, None);
        }
        let key = format!("mcpvisor-{}", self.calls.next_server_req());
        let entry = self
            .calls
            .bridges
            .calls
            .entry(gid)
            .or_insert_with(|| Bridged {
                backend,
                method: caps.method,
                caps,
                round: 0,
                asked: Vec::new(),
                queued: Vec::new(),
                out: None,
            });
        if entry.asked.len() + entry.queued.len() >= MAX_ASKS {
            let message = format!(
                "{MAX_ASKS} requests of this call already wait for the client; `{method}` cannot be delivered"
            );
            return refuse(self, mcpvisor_jsonrpc::INTERNAL_ERROR, message, None);
        }
        let params = mcpvisor_jsonrpc::envelope::raw_params(line).map_or("{}", |p| p.get());
        entry.queued.push(Ask {
            key,
            id: Bytes::copy_from_slice(raw_id.get().as_bytes()),
            request: format!("{{\"method\":{},\"params\":{params}}}", quote(method)),
        });
        if entry.out.is_none() {
            self.bridge_round(gid);
        }
        true
    }

    /// Sends the next round of call `gid` to the front request that stands
    /// for it, and takes the call off that front until the retry.
    fn bridge_round(&mut self, gid: u64) {
        let Some(Pending::Front { front, id, .. }) = self.calls.pending.get(&gid) else {
            return;
        };
        let (front, front_id) = (*front, id.clone());
        let Some(pending) = self.calls.pending.remove(&gid) else {
            return;
        };
        if self.calls.by_front_id.get(&(front, front_id.clone())) == Some(&gid) {
            self.calls.by_front_id.remove(&(front, front_id.clone()));
        }
        if let Some(f) = self.fronts.open.get_mut(&front) {
            f.awaiting = f.awaiting.saturating_sub(1);
        }
        let Some(b) = self.calls.bridges.calls.get(&gid) else {
            return;
        };
        let timeout = self
            .backends
            .by_id
            .get(&b.backend)
            .map_or(std::time::Duration::from_secs(120), |b| {
                b.plan.session.request_timeout
            });
        let deadline = Instant::now() + timeout;
        let round = b.round + 1;
        let state = self.calls.bridges.sign(gid, round, deadline);
        let Some(b) = self.calls.bridges.calls.get_mut(&gid) else {
            return;
        };
        b.round = round;
        let queued = std::mem::take(&mut b.queued);
        b.asked.extend(queued);
        let requests: Vec<String> = b
            .asked
            .iter()
            .map(|a| format!("{}:{}", quote(&a.key), a.request))
            .collect();
        b.out = Some(Out {
            pending,
            deadline,
            answer: None,
        });
        let result = format!(
            "{{\"resultType\":\"input_required\",\"inputRequests\":{{{}}},\"requestState\":{}}}",
            requests.join(","),
            quote(&state)
        );
        let id = String::from_utf8_lossy(&front_id).into_owned();
        self.emit_to(front, build::result(&id, &result), Some(front_id));
        self.effects.arm(Timer::Bridge(gid), deadline);
    }

    /// A 2026-07-28 request carrying a `requestState` this gateway handed
    /// out: the retry of a bridged call, handled here, or of a server's own
    /// multi-round call, whose state is unwrapped for the server.
    pub(super) fn bridge_retry(&mut self, front: FrontId, req: &FrontRequest<'_>) -> Retry {
        // Unwrapped already: a state inside it is the server's own, even
        // one that looks like the gateway's (an mcpvisor behind this one).
        if req.era != Era::Stateless || req.state_of.is_some() {
            return Retry::NotOne;
        }
        let Some(params) = &req.params else {
            return Retry::NotOne;
        };
        let Some(state) = params.str("requestState") else {
            return Retry::NotOne;
        };
        if !state.starts_with(PREFIX) {
            return Retry::NotOne;
        }
        match self.calls.bridges.verify(&state, Instant::now()) {
            Ok(Claim::Call { gid, round }) => {
                self.continue_bridged(front, req, params, gid, round);
                Retry::Done
            }
            Ok(Claim::Server { server, state }) => {
                let params = params.write(&[("requestState", Some(&state))]);
                let line = std::str::from_utf8(req.line)
                    .ok()
                    .and_then(RawObject::parse)
                    .map(|obj| Bytes::from(obj.write(&[("params", Some(&params))])));
                match line {
                    Some(line) => Retry::Server { line, server },
                    None => Retry::NotOne,
                }
            }
            Err(message) => {
                self.reply_error(front, req, INVALID_PARAMS, &message);
                Retry::Done
            }
        }
    }

    /// The client's retry of round `round` of bridged call `gid`: its
    /// answers go to the server, and the retry stands for the call.
    fn continue_bridged(
        &mut self,
        front: FrontId,
        req: &FrontRequest<'_>,
        params: &RawObject<'_>,
        gid: u64,
        round: u64,
    ) {
        let refuse = |hub: &mut Self, message: &str| {
            hub.reply_error(front, req, INVALID_PARAMS, message);
        };
        let Some(b) = self.calls.bridges.calls.get(&gid) else {
            return refuse(
                self,
                "requestState names a call that has ended (answered, cancelled or timed out)",
            );
        };
        if b.round != round || b.out.is_none() {
            return refuse(
                self,
                "requestState is of an earlier round of this call; retry with the latest one",
            );
        }
        if b.method != req.env.method() {
            let message = format!(
                "requestState continues a `{}` call; retry it with the same method",
                b.method
            );
            return refuse(self, &message);
        }
        let responses = match params.get("inputResponses") {
            None => None,
            Some(r) => match RawObject::parse(r.get()) {
                Some(obj) => Some(obj),
                None => return refuse(self, "inputResponses must be an object"),
            },
        };
        let backend = b.backend;
        // Each answered request gets its result at the server; the rest
        // wait for the next round.
        let mut replies = Vec::new();
        if let Some(b) = self.calls.bridges.calls.get_mut(&gid) {
            let asked = std::mem::take(&mut b.asked);
            let mut left = Vec::new();
            for ask in asked {
                match responses.as_ref().and_then(|r| r.get(&ask.key)) {
                    Some(result) => {
                        let id = String::from_utf8_lossy(&ask.id).into_owned();
                        replies.push(build::result(&id, result.get()));
                    }
                    None => left.push(ask),
                }
            }
            left.append(&mut b.queued);
            b.queued = left;
        }
        for reply in replies {
            self.send_backend(backend, reply);
        }
        // The retry stands for the call now.
        let Some(b) = self.calls.bridges.calls.get_mut(&gid) else {
            return;
        };
        let Some(out) = b.out.take() else {
            return;
        };
        let more = !b.queued.is_empty();
        let mut pending = out.pending;
        if let Pending::Front {
            front: f,
            id,
            token,
            ..
        } = &mut pending
        {
            *f = front;
            *id = req.id.clone();
            if let Some(t) = req.env.progress_token {
                *token = Some(crate::raw::kept(t.get().as_bytes()));
            }
        }
        self.calls.pending.insert(gid, pending);
        self.calls.by_front_id.insert((front, req.id.clone()), gid);
        if let Some(f) = self.fronts.open.get_mut(&front) {
            f.awaiting += 1;
        }
        if let Some(answer) = out.answer {
            // The server answered before the retry came: the retry gets it.
            let env = Envelope::peek(&answer).ok();
            if let Some(answer) = env.and_then(|env| super::backend::Answer::read(&answer, &env)) {
                self.on_response(backend, gid, answer);
            }
        } else if more {
            self.bridge_round(gid);
        }
    }

    /// A 2026-07-28 server's `input_required` answer `line` (the client's
    /// id in place) to a 2026-07-28 client: its `requestState`, if it has
    /// one, wrapped in one of the gateway's. `Err`: the error the client
    /// gets instead, the state being longer than the gateway carries.
    pub(super) fn wrap_server_state(
        &mut self,
        backend: BackendId,
        line: Bytes,
    ) -> Result<Bytes, Bytes> {
        let text = std::str::from_utf8(&line).unwrap_or_default();
        let Some(obj) = RawObject::parse(text) else {
            return Ok(line);
        };
        let Some(result) = obj.get("result").and_then(|r| RawObject::parse(r.get())) else {
            return Ok(line);
        };
        let Some(state) = result.get("requestState") else {
            return Ok(line);
        };
        let server = self.backend_name(backend);
        match self.calls.bridges.wrap(&server, state.get()) {
            Ok(wrapped) => {
                let result = result.with("requestState", &quote(&wrapped));
                Ok(Bytes::from(obj.with("result", &result)))
            }
            Err(len) => {
                let message = format!(
                    "The MCP server `{server}` asked for more input with a requestState of {len} bytes, more than the {MAX_SERVER_STATE} mcpvisor carries to a client. The request did not complete."
                );
                let data = serde_json::json!({"reason": "requestState too long", "server": server});
                let id = obj.get("id").map_or("null", |i| i.get());
                let refusal =
                    build::error(id, super::backend::INPUT_NOT_BRIDGED, &message, Some(&data));
                tracing::info!(server = %server, "an input-required answer refused: its requestState has {len} bytes, more than {MAX_SERVER_STATE}");
                self.count_error(backend, super::backend::INPUT_NOT_BRIDGED);
                Err(refusal)
            }
        }
    }

    /// The server answered call `gid`, which waits for its client's retry:
    /// the answer is kept for the retry, and what the server still asked is
    /// moot. `false`: not a bridged call waiting for a retry.
    pub(super) fn bridge_answered(&mut self, gid: u64, line: &Bytes) -> bool {
        let Some(b) = self.calls.bridges.calls.get_mut(&gid) else {
            return false;
        };
        let Some(out) = b.out.as_mut() else {
            return false;
        };
        out.answer = Some(line.clone());
        let moot: Vec<Ask> = b.asked.drain(..).chain(b.queued.drain(..)).collect();
        let backend = b.backend;
        for ask in moot {
            let id = String::from_utf8_lossy(&ask.id).into_owned();
            let reply = build::error(
                &id,
                mcpvisor_jsonrpc::INTERNAL_ERROR,
                "the call this request was part of has ended",
                None,
            );
            self.send_backend(backend, reply);
        }
        true
    }

    /// A server withdrew its request `id` (`notifications/cancelled`): it
    /// leaves the call it waits in, and an answer to it is not sent.
    pub(super) fn bridge_withdrawn(&mut self, backend: BackendId, id: &[u8]) {
        for b in self.calls.bridges.calls.values_mut() {
            if b.backend == backend {
                b.asked.retain(|a| a.id.as_ref() != id);
                b.queued.retain(|a| a.id.as_ref() != id);
            }
        }
    }

    /// A bridged call's round may have run out: the server's requests get
    /// an error, its call (if it is still open) a cancel.
    pub(super) fn on_bridge_timer(&mut self, gid: u64) {
        let due = self
            .calls
            .bridges
            .calls
            .get(&gid)
            .and_then(|b| b.out.as_ref())
            .is_some_and(|out| Instant::now() >= out.deadline);
        if !due {
            return;
        }
        let Some(b) = self.calls.bridges.calls.remove(&gid) else {
            return;
        };
        let backend = b.backend;
        for ask in b.asked.into_iter().chain(b.queued) {
            let id = String::from_utf8_lossy(&ask.id).into_owned();
            let reply = build::error(
                &id,
                REQUEST_TIMEOUT,
                "the client did not answer within the request timeout",
                None,
            );
            self.send_backend(backend, reply);
        }
        let answered = b.out.as_ref().is_some_and(|o| o.answer.is_some());
        if !answered {
            tracing::info!(server = %self.backend_name(backend), "a call's client did not retry within the request timeout: the call is cancelled");
            self.cancel_on_backend(
                backend,
                gid,
                "the client did not retry within the request timeout",
            );
        }
        if let Some(b) = self.backends.by_id.get_mut(&backend) {
            b.in_flight = b.in_flight.saturating_sub(1);
            b.obs.dirty = true;
        }
        if let Some(out) = b.out {
            if let Pending::Front { audit, at, .. } = out.pending {
                if let Some(line) = &out.answer {
                    self.audit_answer(audit, at, line);
                }
            }
        }
    }

    /// Writes `line` to a backend's session, when it has one.
    pub(super) fn send_backend(&mut self, backend: BackendId, line: Bytes) {
        if let Some(link) = self
            .backends
            .by_id
            .get(&backend)
            .and_then(super::Backend::link)
        {
            link.try_send(line);
        }
    }
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize();
    let mut out = [0u8; 32];
    out.copy_from_slice(&outer);
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 == 1 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2_shape() {
        // RFC 4231 test case 2's key is 4 bytes ("Jefe"); padded with
        // zeros to 32 it is the same key to HMAC.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_state_verifies_until_it_expires_or_is_changed() {
        let mut bridges = Bridges::default();
        bridges.set_replica("r1");
        let now = Instant::now();
        let state = bridges.sign(7, 2, now + std::time::Duration::from_secs(60));
        assert!(state.starts_with("mcpvisor1.r1."), "{state}");
        assert_eq!(
            bridges.verify(&state, now),
            Ok(Claim::Call { gid: 7, round: 2 })
        );
        // Another gid, same signature.
        let forged = state.replacen(&hex(b"7."), &hex(b"8."), 1);
        assert_ne!(forged, state);
        assert!(bridges.verify(&forged, now).is_err());
        // A flipped signature digit.
        let mut flipped = state.clone();
        let last = flipped.pop().unwrap_or('0');
        flipped.push(if last == '0' { '1' } else { '0' });
        assert!(bridges.verify(&flipped, now).is_err());
        assert!(bridges.verify("mcpvisor1.zz.zz", now).is_err());
        // Expired.
        let late = now + std::time::Duration::from_secs(61);
        assert!(
            bridges
                .verify(&state, late)
                .is_err_and(|e| e.contains("expired"))
        );
        // Another process's: one with a replica id of its own is named,
        // one that took the same id (a restart) has another key.
        let other = Bridges::default();
        let refused = other
            .verify(&state, now)
            .expect_err("another replica refuses it");
        assert!(refused.contains("replica `r1`"), "{refused}");
        let mut restarted = Bridges::default();
        restarted.set_replica("r1");
        assert!(
            restarted
                .verify(&state, now)
                .is_err_and(|e| e.contains("changed"))
        );
        // Another replica's name put in clear: the signature covers it.
        let mut r2 = bridges;
        let moved = state.replacen("mcpvisor1.r1.", "mcpvisor1.r2.", 1);
        assert!(r2.verify(&moved, now).is_err());
        r2.set_replica("r2");
        assert!(r2.verify(&moved, now).is_err_and(|e| e.contains("changed")));
        // A name that is not a replica id is not echoed.
        let odd = state.replacen("mcpvisor1.r1.", "mcpvisor1.<b>.", 1);
        assert!(r2.verify(&odd, now).is_err_and(|e| !e.contains("<b>")));
    }

    /// What `bridges` makes of its wrap of `state` from server `server`.
    fn round_trip(bridges: &Bridges, server: &str, state: &str) -> Result<Claim, String> {
        let wrapped = bridges.wrap(server, state).expect("within the limit");
        assert!(wrapped.len() <= MAX_STATE, "{}", wrapped.len());
        bridges.verify(&wrapped, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_state_comes_back_byte_for_byte() {
        let mut bridges = Bridges::default();
        bridges.set_replica("replica-1");
        let long = format!("\"{}\"", "x".repeat(MAX_SERVER_STATE - 2));
        let states = [
            r#""opaque""#,
            // Escapes kept as written, not re-encoded.
            r#""a\/b \u00e9 \"q\" \\ \u0000 \ud83d\ude00 é 😀 .mcpvisor1.x.""#,
            // Not a string: carried as it was written all the same.
            r#"{"k": [1, 2.50, null]}"#,
            r#""""#,
            &long,
        ];
        for state in states {
            let claim = round_trip(&bridges, "files", state);
            assert_eq!(
                claim,
                Ok(Claim::Server {
                    server: "files".to_owned(),
                    state: state.to_owned()
                }),
                "{state}"
            );
        }
        // A server name of any characters.
        let claim = round_trip(&bridges, "ünï.code__x", r#""s""#);
        assert!(
            matches!(&claim, Ok(Claim::Server { server, .. }) if server == "ünï.code__x"),
            "{claim:?}"
        );
        // The longest replica id, a long name and the longest state still
        // come back.
        let mut longest = Bridges::default();
        longest.set_replica(&"r".repeat(MAX_REPLICA_ID));
        assert!(round_trip(&longest, &"n".repeat(256), &long).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_state_past_the_limit_is_not_wrapped() {
        let bridges = Bridges::default();
        let at = format!("\"{}\"", "y".repeat(MAX_SERVER_STATE - 2));
        assert!(bridges.wrap("files", &at).is_ok());
        let past = format!("\"{}\"", "y".repeat(MAX_SERVER_STATE - 1));
        assert_eq!(bridges.wrap("files", &past), Err(MAX_SERVER_STATE + 1));
        // A retry's state longer than any handed out is refused unread.
        let huge = format!("{PREFIX}{}", "a".repeat(MAX_STATE));
        let refused = bridges.verify(&huge, Instant::now()).expect_err("too long");
        assert!(
            refused.contains("more than any mcpvisor hands out"),
            "{refused}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wrapped_state_changed_or_of_another_replica_is_refused() {
        let mut bridges = Bridges::default();
        bridges.set_replica("r1");
        let now = Instant::now();
        let wrapped = bridges.wrap("files", r#""state-1""#).expect("wrapped");
        assert!(wrapped.starts_with("mcpvisor1.r1.s."), "{wrapped}");
        // Each field in turn changed: the server's name, its state, the MAC.
        let fields: Vec<&str> = wrapped.split('.').collect();
        assert_eq!(fields.len(), 6, "{wrapped}");
        for i in 3..6 {
            let mut changed: Vec<String> = fields.iter().map(|f| (*f).to_owned()).collect();
            // A digit for a digit: hex is read in either case, so a letter
            // for its other case would change nothing (a MAC starting with
            // `a` read the same as one starting with `A`).
            let first = changed[i].remove(0);
            changed[i].insert(0, if first == '0' { '1' } else { '0' });
            let changed = changed.join(".");
            assert!(
                bridges
                    .verify(&changed, now)
                    .is_err_and(|e| e.contains("changed")),
                "field {i}: {changed}"
            );
        }
        // Another server's state put in: the MAC covers which server.
        let other = bridges.wrap("notes", r#""state-1""#).expect("wrapped");
        let swapped = format!(
            "{}.{}.{}.{}.{}.{}",
            fields[0],
            fields[1],
            fields[2],
            other.split('.').nth(3).unwrap_or_default(),
            fields[4],
            fields[5]
        );
        assert!(bridges.verify(&swapped, now).is_err());
        // Another replica names the one that handed it out; a restarted
        // one with the same id has another key.
        let mut r2 = Bridges::default();
        r2.set_replica("r2");
        let refused = r2.verify(&wrapped, now).expect_err("another replica");
        assert!(
            refused.contains("replica `r1`") && refused.contains("`r2`"),
            "{refused}"
        );
        let mut restarted = Bridges::default();
        restarted.set_replica("r1");
        assert!(
            restarted
                .verify(&wrapped, now)
                .is_err_and(|e| e.contains("changed"))
        );
        // No expiry: the server's state says how long it holds.
        let later = now + std::time::Duration::from_secs(86_400);
        assert!(bridges.verify(&wrapped, later).is_ok());
    }

    #[test]
    fn replica_ids_are_letters_digits_dashes_and_underscores() {
        for good in ["replica1", "a", "pod-7_b", &"x".repeat(64)] {
            assert_eq!(check_replica_id(good), Ok(()), "{good}");
        }
        for bad in ["", "a.b", "a b", "é", "a/b", &"x".repeat(65)] {
            assert!(check_replica_id(bad).is_err(), "{bad:?}");
        }
        let id = random_replica_id();
        assert_eq!(id.len(), 16);
        assert_eq!(check_replica_id(&id), Ok(()));
        assert_ne!(id, random_replica_id());
    }
}
