//! The endpoint: checks every request, then hands it to its session.

#![expect(
    clippy::result_large_err,
    reason = "a refusal is the response to send; it is built once per request, not moved around"
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{AsHeaderName, HeaderName};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use futures_util::StreamExt as _;
use mcpvisor_gateway::fronts::{FrontCommand, FrontId, Outbound};
use mcpvisor_jsonrpc::{Envelope, EnvelopeError, Kind, Scanned, build};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Valid;
use crate::session::{Attached, Command, Event, Handle, Refusal, Session};
use crate::{legacy, modern, sse};

// Header names as `HeaderName`s: a look-up by a `&str` checks and
// lower-cases the name first, on every request.
static SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// Which replica answered a 2026-07-28 request (see `HttpConfig::replica`).
static REPLICA: HeaderName = HeaderName::from_static("mcp-replica");
pub(crate) static PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
static LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Protocol revisions this front speaks over HTTP, oldest first.
pub(crate) const VERSIONS: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];
/// The first revision without sessions.
const STATELESS_SINCE: &str = "2026-07-28";
/// The first revision whose clients take priming events and poll.
const POLLING_SINCE: &str = "2025-11-25";

/// Transport-level refusals (the TypeScript SDK's code for them).
const TRANSPORT_ERROR: i64 = -32000;
/// The 2026-07-28 request whose answer is a stream that stays open.
const LISTEN: &str = "subscriptions/listen";

/// HTTP fronts are numbered from here, clear of the ids other transports
/// give their fronts.
pub const FRONT_ID_BASE: u64 = 1 << 32;

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub cfg: Valid,
    pub hub: mpsc::Sender<FrontCommand>,
    sessions: Mutex<HashMap<Arc<str>, Handle>>,
    /// Stateless requests in flight, each a front of its own; they count
    /// against `max_sessions` with the sessions.
    stateless: AtomicUsize,
    next_front: AtomicU64,
    /// Shutdown was asked: no new sessions, streams or requests.
    pub draining: CancellationToken,
    /// The drain is over: every session closes.
    pub stop: CancellationToken,
    pub tasks: TaskTracker,
    pub in_flight: InFlight,
}

impl Shared {
    pub fn new(cfg: Valid, hub: mpsc::Sender<FrontCommand>) -> Self {
        Shared {
            cfg,
            hub,
            sessions: Mutex::new(HashMap::new()),
            stateless: AtomicUsize::new(0),
            next_front: AtomicU64::new(FRONT_ID_BASE),
            draining: CancellationToken::new(),
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
            in_flight: InFlight::default(),
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Handle>> {
        // A panic while holding this short lock leaves the map whole.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn forget(&self, key: &str) {
        self.registry().remove(key);
    }

    pub(crate) fn lookup(&self, key: &str) -> Option<Handle> {
        self.registry().get(key).cloned()
    }

    /// Opens a session (a registered front) unless there are too many. A
    /// `legacy` session (2024-11-05 HTTP+SSE) comes with its stream's queue.
    pub(crate) async fn open(
        self: &Arc<Self>,
        legacy: bool,
    ) -> Result<(Arc<str>, Handle, Option<mpsc::Receiver<Event>>), Response> {
        let key: Arc<str> = new_session_id()
            .map_err(|_| {
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    "no randomness for a session id",
                )
            })?
            .into();
        let front = FrontId(self.next_front.fetch_add(1, Ordering::Relaxed));
        let (handle, out, events) = {
            let mut sessions = self.registry();
            let stateless = self.stateless.load(Ordering::Acquire);
            if sessions.len() + stateless >= self.cfg.cfg.max_sessions {
                return Err(error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    "too many sessions; retry later",
                ));
            }
            let (handle, out, events) = Session::spawn(self, key.clone(), front, legacy);
            sessions.insert(key.clone(), handle.clone());
            (handle, out, events)
        };
        if !self.to_hub(FrontCommand::Open { front, out }).await {
            self.forget(&key);
            let _ = handle.commands.try_send(Command::End);
            return Err(hub_unavailable());
        }
        Ok((key, handle, events))
    }

    /// Opens the front of one stateless request: no session, no task; the
    /// hub's messages for it come to the returned queue, read by the
    /// request's own handler. Counted against `max_sessions`.
    async fn open_stateless(
        self: &Arc<Self>,
    ) -> Result<(OneShot, mpsc::Receiver<Outbound>), Response> {
        let held = self.stateless.fetch_add(1, Ordering::AcqRel);
        let front = OneShot {
            shared: self.clone(),
            front: FrontId(self.next_front.fetch_add(1, Ordering::Relaxed)),
            end: None,
        };
        if self.registry().len() + held >= self.cfg.cfg.max_sessions {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "too many sessions; retry later",
            ));
        }
        let (out, rx) = mpsc::channel(self.cfg.cfg.front_queue);
        let open = FrontCommand::Open {
            front: front.front,
            out,
        };
        if !self.to_hub(open).await {
            return Err(hub_unavailable());
        }
        Ok((front, rx))
    }

    /// Hands the hub a command within the configured bound. A hub with room
    /// takes it at once, with no timer armed.
    pub(crate) async fn to_hub(&self, cmd: FrontCommand) -> bool {
        let cmd = match self.hub.try_send(cmd) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(cmd)) => cmd,
        };
        let bound = self.cfg.cfg.hub_send_timeout;
        matches!(
            tokio::time::timeout(bound, self.hub.send(cmd)).await,
            Ok(Ok(()))
        )
    }
}

/// Requests awaiting their response, across sessions, for the drain.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    zero: Notify,
}

/// One request in flight; dropping it ends it.
#[derive(Debug)]
pub(crate) struct InFlightGuard(Arc<Shared>);

impl InFlight {
    pub async fn idle(&self) {
        loop {
            // Registered before the check, so a wake-up between the two is
            // not lost.
            let woken = self.zero.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            woken.await;
        }
    }
}

impl InFlightGuard {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.in_flight.count.fetch_add(1, Ordering::AcqRel);
        InFlightGuard(shared.clone())
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.in_flight.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.in_flight.zero.notify_waiters();
        }
    }
}

fn new_session_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

// === the router ===

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let path = shared.cfg.cfg.path.clone();
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route(&path, get(listen).post(post).delete(delete))
        .route(legacy::SSE_PATH, get(legacy::open))
        .route(legacy::MESSAGES_PATH, axum::routing::post(legacy::message))
        .with_state(shared)
}

async fn ready(State(shared): State<Arc<Shared>>) -> Response {
    if shared.draining.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response()
    } else if shared.cfg.cfg.ready.as_ref().is_some_and(|r| !*r.borrow()) {
        (StatusCode::SERVICE_UNAVAILABLE, "starting").into_response()
    } else {
        (StatusCode::OK, "ready").into_response()
    }
}

// === checks ===

/// Host, Origin and token, on every request to the endpoint.
pub(crate) fn admit(shared: &Shared, headers: &HeaderMap) -> Result<(), Response> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if !host.is_some_and(|h| shared.cfg.host_allowed(h)) {
        return Err(error(StatusCode::FORBIDDEN, None, "Host not allowed"));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| shared.cfg.origin_allowed(o));
        if !ok {
            return Err(error(StatusCode::FORBIDDEN, None, "Origin not allowed"));
        }
    }
    if let Some(token) = &shared.cfg.cfg.token {
        let presented = crate::config::bearer(headers);
        if !presented.is_some_and(|p| token.matches(p)) {
            let mut resp = error(
                StatusCode::UNAUTHORIZED,
                None,
                "a valid bearer token is required",
            );
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return Err(resp);
        }
    }
    Ok(())
}

/// What the client's `Accept` takes: (JSON, an event stream).
pub(crate) fn accepts(headers: &HeaderMap) -> (bool, bool) {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else {
        return (true, true);
    };
    let (mut json, mut sse) = (false, false);
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        if parts.any(|p| p.trim().replace(' ', "") == "q=0") {
            continue;
        }
        match media.as_str() {
            "*/*" => (json, sse) = (true, true),
            "application/*" | "application/json" => json = true,
            "text/*" | "text/event-stream" => sse = true,
            _ => {}
        }
    }
    (json, sse)
}

pub(crate) fn header_str<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A present `MCP-Protocol-Version` this front does not speak: 400.
fn check_version(headers: &HeaderMap, id: Option<&str>) -> Result<(), Response> {
    match headers.get(&PROTOCOL_VERSION) {
        None => Ok(()),
        Some(v) if v.to_str().is_ok_and(|v| VERSIONS.contains(&v)) => Ok(()),
        Some(_) => Err(error(
            StatusCode::BAD_REQUEST,
            id,
            &format!("unsupported MCP-Protocol-Version; this server speaks {VERSIONS:?}"),
        )),
    }
}

/// The session a request names: 400 without one, 404 for an unknown one.
fn session(shared: &Shared, headers: &HeaderMap, id: Option<&str>) -> Result<Handle, Response> {
    let Some(key) = header_str(headers, &SESSION_ID) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            id,
            "no Mcp-Session-Id: initialize first, then send the id it gave",
        ));
    };
    // A 2024-11-05 session's id is no `Mcp-Session-Id`.
    shared.lookup(key).filter(|h| !h.legacy).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            id,
            "session not found (ended or expired): initialize a new one",
        )
    })
}

// === POST ===

/// A POST's one message: `Content-Type` JSON (else 415), at most
/// `max_message_bytes` (else 413).
pub(crate) async fn read_body(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, Response> {
    let is_json = header_str(headers, header::CONTENT_TYPE).is_some_and(|ct| {
        ct.split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
    });
    if !is_json {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            "Content-Type must be application/json",
        ));
    }
    let max = shared.cfg.cfg.max_message_bytes;
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            &format!("a message may be at most {max} bytes"),
        )
    };
    let declared = header_str(headers, header::CONTENT_LENGTH).and_then(|l| l.parse::<u64>().ok());
    if declared.is_some_and(|l| l > max as u64) {
        return Err(too_large());
    }
    // A body that stops arriving is not waited for without end: no more
    // than the connection gets for its headers between two pieces.
    let idle = shared.cfg.cfg.header_timeout;
    let mut pieces = body.into_data_stream();
    let mut first: Option<Bytes> = None;
    let mut rest = bytes::BytesMut::new();
    loop {
        let piece = match tokio::time::timeout(idle, pieces.next()).await {
            Err(_) => {
                return Err(error(
                    StatusCode::REQUEST_TIMEOUT,
                    None,
                    "the request's body stopped arriving",
                ));
            }
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    None,
                    "the request's body was cut off",
                ));
            }
            Ok(Some(Ok(piece))) => piece,
        };
        let held = first.as_ref().map_or(0, Bytes::len) + rest.len();
        if held + piece.len() > max {
            return Err(too_large());
        }
        // The usual body comes in one piece, kept as it is.
        match first.take() {
            None if rest.is_empty() => first = Some(piece),
            None => rest.extend_from_slice(&piece),
            Some(head) => {
                rest.reserve(head.len() + piece.len());
                rest.extend_from_slice(&head);
                rest.extend_from_slice(&piece);
            }
        }
    }
    Ok(first.unwrap_or_else(|| rest.freeze()))
}

async fn post(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    match post_inner(&shared, &headers, body).await {
        Ok(resp) | Err(resp) => resp,
    }
}

async fn post_inner(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Response> {
    admit(shared, headers)?;
    let (json_ok, sse_ok) = accepts(headers);
    if !json_ok && !sse_ok {
        return Err(error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            "Accept must allow application/json or text/event-stream",
        ));
    }
    let line = read_body(shared, headers, body).await?;
    let has_session = headers.contains_key(&SESSION_ID);
    // The params are read in the same pass as the envelope: a sessionless
    // request's to tell its era and check a 2026-07-28 request's `_meta`
    // and name; a request's in a session for the hub, which routes by them
    // and is handed what this pass read (`Scanned`) instead of scanning the
    // line again.
    let peeked = Envelope::peek_with_params(&line);
    let (env, scanned) = match peeked {
        Ok(peeked) => peeked,
        Err(e) => {
            let code = match e {
                EnvelopeError::Json(_) => mcpvisor_jsonrpc::PARSE_ERROR,
                EnvelopeError::Batch | EnvelopeError::Invalid(_) => {
                    mcpvisor_jsonrpc::INVALID_REQUEST
                }
            };
            return Err(rpc_error(
                StatusCode::BAD_REQUEST,
                None,
                code,
                &e.to_string(),
            ));
        }
    };
    let id = env.id.map(|id| id.get().to_owned());
    let kind = env.kind;
    let params = (!has_session).then(|| modern::Params::of(&line, scanned.as_ref()));
    let kept = scanned
        .as_ref()
        .and_then(Option::as_ref)
        .and_then(|p| p.meta.as_deref());
    let (modern_era, meta) = params.as_ref().map_or((false, None), |params| {
        modern::is_modern(headers, params, kept)
    });
    let initialize = kind == Kind::Request && env.method() == "initialize" && !modern_era;
    if initialize {
        if has_session {
            return Err(error(
                StatusCode::BAD_REQUEST,
                id.as_deref(),
                "initialize inside a session; send it without Mcp-Session-Id",
            ));
        }
        if shared.draining.is_cancelled() {
            return Err(draining(id.as_deref()));
        }
        let (key, handle, _) = shared.open(false).await?;
        let id = id.unwrap_or_default();
        let scan = handed_on(&line, &env, scanned);
        // Whether the client polls is known from its next request on.
        let accepts = Accepts {
            json: json_ok,
            sse: sse_ok,
            polls: false,
        };
        let answer = exchange(shared, &handle, id, line, scan, accepts).await;
        let failed = match &answer {
            Answer::Json(ev) => mcpvisor_jsonrpc::envelope::error_code(&ev.line).is_some(),
            Answer::Stream(_) => false,
            Answer::Failed(_) => true,
        };
        let mut resp = answer.into_response();
        if failed {
            // No session came of it.
            shared.forget(&key);
            let _ = handle.commands.send(Command::End).await;
            return Ok(resp);
        }
        if let Ok(v) = HeaderValue::from_str(&key) {
            resp.headers_mut().insert(&SESSION_ID, v);
        }
        return Ok(resp);
    }
    if has_session {
        let handle = session(shared, headers, id.as_deref())?;
        check_version(headers, id.as_deref())?;
        return Ok(match (kind, id) {
            (Kind::Request, Some(id)) => {
                let accepts = Accepts {
                    json: json_ok,
                    sse: sse_ok,
                    polls: polls(headers),
                };
                let scan = handed_on(&line, &env, scanned);
                exchange(shared, &handle, id, line, scan, accepts)
                    .await
                    .into_response()
            }
            _ => {
                let _ = handle.commands.send(Command::Touch).await;
                // A cancelled request gets no answer: its stream ends here
                // and its place is free.
                if let Some(rid) = cancelled_request(&line) {
                    let _ = handle.commands.send(Command::Abandon { id: rid }).await;
                }
                let scan = handed_on(&line, &env, scanned);
                let msg = FrontCommand::Message {
                    front: handle.front,
                    line,
                    scan,
                };
                if shared.to_hub(msg).await {
                    StatusCode::ACCEPTED.into_response()
                } else {
                    hub_unavailable()
                }
            }
        });
    }
    if !modern_era {
        return Err(session(shared, headers, id.as_deref())
            .err()
            .unwrap_or_else(hub_unavailable));
    }
    let Some(id) = id.filter(|_| kind == Kind::Request) else {
        // A sessionless client has no stream for anything else to belong to.
        return Ok(StatusCode::ACCEPTED.into_response());
    };
    let params = params.unwrap_or(modern::Params::Missing);
    modern::check(headers, &id, env.method(), &params, meta)?;
    if shared.draining.is_cancelled() {
        return Err(draining(Some(&id)));
    }
    // A listen's answer is a stream that stays open: a client that takes
    // only JSON would wait for nothing.
    let listen = env.method() == LISTEN;
    if listen && !sse_ok {
        return Err(error(
            StatusCode::NOT_ACCEPTABLE,
            Some(&id),
            "subscriptions/listen is answered with an event stream: Accept must allow text/event-stream",
        ));
    }
    let accepts = Accepts {
        json: json_ok,
        sse: sse_ok,
        polls: false,
    };
    // What was read of the line goes to the hub with it: read once.
    let scan = handed_on(&line, &env, scanned);
    let mut resp = match exchange_stateless(shared, id, line, scan, accepts, listen).await {
        // The revision's errors have their own statuses; on a stream the
        // status was sent before the answer was known.
        Answer::Json(ev) => json_response(modern::status_of(&ev.line), ev.line),
        answer => answer.into_response(),
    };
    if let Some(replica) = &shared.cfg.cfg.replica {
        resp.headers_mut().insert(&REPLICA, replica.clone());
    }
    Ok(resp)
}

/// What the front's scan read of `line` (its envelope `env` and, when the
/// scan read them, its params), to go to the hub with it so that the hub
/// does not scan the line again.
fn handed_on(
    line: &[u8],
    env: &Envelope<'_>,
    scanned: Option<Option<mcpvisor_jsonrpc::envelope::ParamsObject<'_>>>,
) -> Option<Box<Scanned>> {
    scanned.and_then(|params| Scanned::of(line, env, params).map(Box::new))
}

/// The front of one stateless request (see [`Shared::open_stateless`]).
/// Dropping it ends the front: closed once its request was answered (or
/// the server stops), abandoned (its request cancelled) when the client
/// went away first.
struct OneShot {
    shared: Arc<Shared>,
    front: FrontId,
    /// How it ends, once known; abandoned when dropped before.
    end: Option<FrontCommand>,
}

impl Drop for OneShot {
    fn drop(&mut self) {
        self.shared.stateless.fetch_sub(1, Ordering::AcqRel);
        let front = self.front;
        let end = self.end.take().unwrap_or(FrontCommand::Abandon { front });
        if let Err(mpsc::error::TrySendError::Full(end)) = self.shared.hub.try_send(end) {
            let hub = self.shared.hub.clone();
            let bound = self.shared.cfg.cfg.hub_send_timeout;
            tokio::spawn(async move {
                if tokio::time::timeout(bound, hub.send(end)).await.is_err() {
                    tracing::warn!(
                        front = front.0,
                        "the hub took no end for a stateless request's front"
                    );
                }
            });
        }
    }
}

/// Sends one stateless request through a front of its own and answers with
/// its response: JSON when the response comes first, else (when the client
/// takes a stream) a stream of the request's messages that ends with it.
/// Messages before the response are dropped for a client that takes only
/// JSON, as a session drops them for a request with no stream.
async fn exchange_stateless(
    shared: &Arc<Shared>,
    id: String,
    line: Bytes,
    scan: Option<Box<Scanned>>,
    accepts: Accepts,
    listen: bool,
) -> Answer {
    let (mut front, mut rx) = match shared.open_stateless().await {
        Ok(opened) => opened,
        Err(resp) => return Answer::Failed(resp),
    };
    let guard = InFlightGuard::new(shared);
    let msg = FrontCommand::Message {
        front: front.front,
        line,
        scan,
    };
    if !shared.to_hub(msg).await {
        return Answer::Failed(hub_unavailable());
    }
    let mut seq = 0;
    let first = loop {
        let next = tokio::select! {
            next = rx.recv() => next,
            () = shared.stop.cancelled() => None,
        };
        let Some(msg) = next else {
            front.end = Some(FrontCommand::Close { front: front.front });
            return Answer::Failed(gone(&id));
        };
        let Some(ev) = stateless_event(msg, &mut seq) else {
            continue;
        };
        if ev.response || accepts.sse {
            break ev;
        }
    };
    if first.response {
        front.end = Some(FrontCommand::Close { front: front.front });
        if accepts.json {
            return Answer::Json(first);
        }
    }
    // Its event id, needed only on a stream.
    let mut first = first;
    first.id = event_id(seq);
    let cfg = &shared.cfg.cfg;
    let (tx, events) = mpsc::channel(cfg.stream_queue);
    if !first.response {
        let stop = shared.stop.clone();
        let listen = listen.then(|| Listening {
            id,
            draining: shared.draining.clone(),
        });
        tokio::spawn(stream_stateless(front, rx, tx, seq, stop, listen));
    }
    Answer::Stream(sse::response(
        None,
        Some(first),
        events,
        cfg.keep_alive,
        None,
        Some(guard),
    ))
}

/// A message of a stateless request's front as its stream's event, its id
/// left to [`event_id`] (`None` for one related to no request: a session
/// puts those on its standalone stream, which a stateless client has not).
fn stateless_event(msg: Outbound, seq: &mut u64) -> Option<Event> {
    msg.related.as_ref()?;
    let response =
        msg.response || Envelope::peek(&msg.line).is_ok_and(|e| e.kind == Kind::Response);
    *seq += 1;
    Some(Event {
        id: String::new(),
        line: msg.line,
        response,
    })
}

/// The id of a stateless request's `seq`th event, as the one request
/// stream of a session numbers its events.
fn event_id(seq: u64) -> String {
    format!("1-{seq}")
}

/// A `subscriptions/listen` on its stream: its id as written, and the
/// front's drain, which ends it.
struct Listening {
    id: String,
    draining: CancellationToken,
}

/// Hands a stateless request's messages to its stream until the response.
/// A reader that goes away first abandons the request; one that falls
/// behind has its stream cut, and the request goes on to its end, except
/// a `listen`, whose stream is all it is: it ends with its stream. A
/// listen is answered (a graceful end) and ends when the front drains, so
/// it holds up no shutdown.
async fn stream_stateless(
    mut front: OneShot,
    mut rx: mpsc::Receiver<Outbound>,
    tx: mpsc::Sender<Event>,
    mut seq: u64,
    stop: CancellationToken,
    listen: Option<Listening>,
) {
    let mut tx = Some(tx);
    let draining = listen.as_ref().map(|l| l.draining.clone());
    loop {
        let next = tokio::select! {
            next = rx.recv() => next,
            () = async {
                match &draining {
                    Some(d) => d.cancelled().await,
                    None => std::future::pending().await,
                }
            }, if listen.is_some() => {
                if let (Some(queue), Some(l)) = (&tx, &listen) {
                    let result = format!(
                        r#"{{"resultType":"complete","_meta":{{"io.modelcontextprotocol/subscriptionId":{}}}}}"#,
                        l.id
                    );
                    seq += 1;
                    let _ = queue.try_send(Event {
                        id: event_id(seq),
                        line: mcpvisor_jsonrpc::build::result(&l.id, &result),
                        response: true,
                    });
                }
                front.end = Some(FrontCommand::Close { front: front.front });
                return;
            }
            () = async {
                match &tx {
                    Some(tx) => tx.closed().await,
                    None => std::future::pending().await,
                }
            }, if tx.is_some() => return,
            () = stop.cancelled() => None,
        };
        let Some(msg) = next else {
            front.end = Some(FrontCommand::Close { front: front.front });
            return;
        };
        let Some(mut ev) = stateless_event(msg, &mut seq) else {
            continue;
        };
        ev.id = event_id(seq);
        let response = ev.response;
        if let Some(queue) = &tx {
            match queue.try_send(ev) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) if listen.is_some() => {
                    tracing::debug!("an SSE reader fell behind; its subscription is ended");
                    return;
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!("an SSE reader fell behind; its stateless stream is cut");
                    tx = None;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
        if response {
            front.end = Some(FrontCommand::Close { front: front.front });
            return;
        }
    }
}

/// The request id a `notifications/cancelled` names, as written.
fn cancelled_request(line: &Bytes) -> Option<Bytes> {
    let env = Envelope::peek(line).ok()?;
    if env.kind != Kind::Notification || env.method() != "notifications/cancelled" {
        return None;
    }
    env.request_id
        .map(|id| Bytes::copy_from_slice(id.get().as_bytes()))
}

/// How a request was answered.
enum Answer {
    /// Its response came first: one JSON body.
    Json(Event),
    /// An event stream that ends with its response.
    Stream(Response),
    /// Refused or cut short, with the error to send.
    Failed(Response),
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        match self {
            Answer::Json(ev) => json_response(StatusCode::OK, ev.line),
            Answer::Stream(resp) | Answer::Failed(resp) => resp,
        }
    }
}

/// Whether the client negotiated a revision with SSE polling (2025-11-25):
/// it can read a priming event and resumes a stream the server closes.
fn polls(headers: &HeaderMap) -> bool {
    header_str(headers, &PROTOCOL_VERSION)
        .is_some_and(|v| (POLLING_SINCE..STATELESS_SINCE).contains(&v))
}

/// How a request is answered: what the client accepts, and whether it
/// polls.
#[derive(Debug, Clone, Copy)]
struct Accepts {
    json: bool,
    sse: bool,
    polls: bool,
}

/// Sends one request through its session and answers with its response:
/// JSON when the response comes first, else a stream that ends with it.
/// A polling client's stream starts with a priming event; with
/// `sse_poll` set, it is closed after that long (and a request with
/// nothing to send by then gets a stream of only its priming event).
async fn exchange(
    shared: &Arc<Shared>,
    handle: &Handle,
    id: String,
    line: Bytes,
    scan: Option<Box<Scanned>>,
    accepts: Accepts,
) -> Answer {
    let guard = InFlightGuard::new(shared);
    let rid = Bytes::from(id.clone());
    let (reply, registered) = oneshot::channel();
    let cmd = Command::Request {
        id: rid.clone(),
        sse: accepts.sse,
        reply,
    };
    if handle.commands.send(cmd).await.is_err() {
        return Answer::Failed(gone(&id));
    }
    let mut attached = match registered.await {
        Ok(Ok(attached)) => attached,
        Ok(Err(refusal)) => return Answer::Failed(refused(refusal, &id)),
        Err(_) => return Answer::Failed(gone(&id)),
    };
    let msg = FrontCommand::Message {
        front: handle.front,
        line,
        scan,
    };
    if !shared.to_hub(msg).await {
        let _ = handle.commands.send(Command::Abandon { id: rid }).await;
        return Answer::Failed(hub_unavailable());
    }
    let cfg = &shared.cfg.cfg;
    let hold = cfg
        .sse_poll
        .filter(|_| accepts.polls && accepts.sse)
        .map(|after| sse::Hold {
            after,
            retry: cfg.sse_retry,
        });
    let first = match hold {
        Some(h) => match tokio::time::timeout(h.after, attached.rx.recv()).await {
            Ok(first) => first,
            Err(_) => {
                // Nothing yet: the stream is primed and closed at once; the
                // client comes back for the rest.
                let head = sse::priming(&attached.priming_id(), h.retry);
                let now = sse::Hold {
                    after: std::time::Duration::ZERO,
                    ..h
                };
                let resp = sse::response(
                    Some(head),
                    None,
                    attached.rx,
                    cfg.keep_alive,
                    Some(now),
                    None,
                );
                return Answer::Stream(resp);
            }
        },
        None => attached.rx.recv().await,
    };
    let Some(first) = first else {
        return Answer::Failed(gone(&id));
    };
    if first.response && accepts.json {
        return Answer::Json(first);
    }
    let head = accepts
        .polls
        .then(|| sse::priming(&attached.priming_id(), cfg.sse_retry));
    Answer::Stream(sse::response(
        head,
        Some(first),
        attached.rx,
        cfg.keep_alive,
        hold,
        Some(guard),
    ))
}

// === GET and DELETE ===

async fn listen(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    match listen_inner(&shared, &headers).await {
        Ok(resp) | Err(resp) => resp,
    }
}

async fn listen_inner(shared: &Arc<Shared>, headers: &HeaderMap) -> Result<Response, Response> {
    admit(shared, headers)?;
    if !accepts(headers).1 {
        return Err(error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            "GET opens an event stream: Accept must allow text/event-stream",
        ));
    }
    if !headers.contains_key(&SESSION_ID)
        && header_str(headers, &PROTOCOL_VERSION).is_some_and(|v| v >= STATELESS_SINCE)
    {
        return Err(error(
            StatusCode::METHOD_NOT_ALLOWED,
            None,
            "no standalone stream without a session",
        ));
    }
    let handle = session(shared, headers, None)?;
    check_version(headers, None)?;
    if shared.draining.is_cancelled() {
        return Err(draining(None));
    }
    let (reply, attached) = oneshot::channel();
    let cmd = Command::Listen {
        last_event_id: header_str(headers, &LAST_EVENT_ID).map(str::to_owned),
        reply,
    };
    if handle.commands.send(cmd).await.is_err() {
        return Err(gone("null"));
    }
    let cfg = &shared.cfg.cfg;
    match attached.await {
        Ok(Ok(Attached { request, rx, .. })) => {
            // A polling client's request stream is held no longer on
            // resumption than at first.
            let hold = cfg
                .sse_poll
                .filter(|_| request && polls(headers))
                .map(|after| sse::Hold {
                    after,
                    retry: cfg.sse_retry,
                });
            Ok(sse::response(None, None, rx, cfg.keep_alive, hold, None))
        }
        Ok(Err(refusal)) => Err(refused(refusal, "null")),
        Err(_) => Err(gone("null")),
    }
}

async fn delete(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(resp) = admit(&shared, &headers) {
        return resp;
    }
    let handle = match session(&shared, &headers, None) {
        Ok(handle) => handle,
        Err(resp) => return resp,
    };
    if let Some(key) = header_str(&headers, &SESSION_ID) {
        // Forgotten now, so the id is unknown from this answer on; the
        // session's task closes its front.
        shared.forget(key);
    }
    let _ = handle.commands.send(Command::End).await;
    StatusCode::NO_CONTENT.into_response()
}

// === answers ===

/// A JSON body with this status.
pub(crate) fn json_response(status: StatusCode, body: Bytes) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

pub(crate) fn rpc_error(
    status: StatusCode,
    id: Option<&str>,
    code: i64,
    message: &str,
) -> Response {
    json_response(
        status,
        build::error(id.unwrap_or("null"), code, message, None),
    )
}

pub(crate) fn error(status: StatusCode, id: Option<&str>, message: &str) -> Response {
    rpc_error(status, id, TRANSPORT_ERROR, message)
}

pub(crate) fn draining(id: Option<&str>) -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        "the server is shutting down; retry against another instance or later",
    )
}

pub(crate) fn hub_unavailable() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        "the gateway is not taking messages; retry later",
    )
}

/// The session ended while the request waited (deleted, expired, or the
/// server shut down): whether it ran is unknown.
pub(crate) fn gone(id: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        Some(id),
        "the session ended before the response; whether the request ran is unknown",
    )
}

fn refused(refusal: Refusal, id: &str) -> Response {
    let (status, message) = match refusal {
        Refusal::TooManyInFlight => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests in flight in this session; retry after one is answered",
        ),
        Refusal::DuplicateId => (
            StatusCode::BAD_REQUEST,
            "a request with this id is already in flight in this session",
        ),
        Refusal::Busy => (
            StatusCode::CONFLICT,
            "this session's standalone stream is already open",
        ),
        Refusal::UnknownEvent => (
            StatusCode::BAD_REQUEST,
            "Last-Event-ID names no stream this session still keeps",
        ),
        Refusal::Draining => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down; retry later",
        ),
    };
    error(status, Some(id), message)
}
