//! One worker generation: one remote session, from `initialize` to DELETE.
//!
//! The task reads the lines the supervisor session writes to the worker's
//! stdin and POSTs each one; what the server sends back (a JSON body, or the
//! events of an SSE stream) is written to the worker's stdout as lines. The
//! standalone GET stream carries the server's own requests and
//! notifications. The task owns the generation; per request, a small task
//! waits for its answer (and resumes its stream when it drops), so one slow
//! request never holds up another.
//!
//! How it ends: the session closes stdin or asks it to stop (DELETE, then a
//! requested exit), or the remote session is over — a 404 for our session,
//! a 401/403, an `initialize` that fails, a server that cannot be reached
//! any more. Then the exit carries an [`HttpEnd`] (status and stage), and
//! the session fails what was in flight once and starts the next
//! generation, which sends `initialize` again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt as _, StreamExt as _};
use mcpvisor_config::report::{CrashPhase, ErrorData, ExitKind, HttpEnd, HttpStage, StderrTail};
use mcpvisor_jsonrpc::{Envelope, Frame, INTERNAL_ERROR, Kind, LineCodec, WORKER_LOST, build};
use mcpvisor_session::WorkerExit as Exit;
use mcpvisor_session::WorkerReporter;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::http::Http;

use crate::exchange::{Exchange, exchange, listen, post_quiet};
use crate::legacy::{self, Posted};
use crate::modern::{self, Era};

/// How a generation speaks to its server.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// Streamable HTTP.
    Streamable,
    /// The old HTTP+SSE transport ([`crate::legacy`]).
    Legacy,
    /// Streamable HTTP, or the old transport when the server refuses
    /// `initialize` with 400, 404 or 405. `learned` is set once the old
    /// transport took that `initialize`, so that the session's later
    /// generations go to it at once; it is cleared when the old transport's
    /// stream cannot be opened any more.
    Auto { learned: Arc<AtomicBool> },
}
/// What every task of a generation shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub http: Http,
    pub generation: u64,
    pub max: usize,
    /// The longest a request's POST may wait for its answer.
    pub ceiling: Duration,
    /// To the worker's stdout.
    pub out: mpsc::Sender<Bytes>,
    /// A task found the session over.
    pub fatal: mpsc::Sender<HttpEnd>,
    pub tail: Arc<Mutex<StderrTail>>,
    /// Tells the session of requests that never reached the server.
    pub reporter: WorkerReporter,
    pub transport: Transport,
}

/// How a generation's loop stops.
enum Over {
    /// Asked to stop, or the session closed its stdin: the remote session
    /// is ended politely.
    Closed,
    /// The remote session is over.
    Ended(HttpEnd),
}

/// Why the Streamable HTTP loop stopped sending.
enum Halt {
    /// The remote session is over.
    End(HttpEnd),
    /// The server refused `initialize` as a server of the old transport
    /// would (how, in the `HttpEnd`): this line (the `initialize`) goes to
    /// it that way.
    Legacy(Bytes, HttpEnd),
}
/// The generation's owning task.
pub(crate) struct Generation {
    shared: Arc<Shared>,
    tasks: JoinSet<Option<String>>,
    /// Requests whose answers are awaited, by raw id.
    waiting: HashMap<String, AbortHandle>,
    listening: bool,
    started: Instant,
    /// The server speaks 2026-07-28: what its requests carry.
    era: Option<Era>,
}

impl Generation {
    pub(crate) fn new(shared: Shared) -> Self {
        Self {
            shared: Arc::new(shared),
            tasks: JoinSet::new(),
            waiting: HashMap::new(),
            listening: false,
            started: Instant::now(),
            era: None,
        }
    }

    /// Runs the generation until it ends; how it ended.
    pub(crate) async fn run(
        mut self,
        mut input: FramedRead<DuplexStream, LineCodec>,
        stop: CancellationToken,
        mut fatal: mpsc::Receiver<HttpEnd>,
    ) -> Exit {
        match self.serve(&mut input, &stop, &mut fatal).await {
            Over::Closed => self.close().await,
            Over::Ended(end) => self.end(end, &mut input),
        }
    }

    /// Sends the session's lines until the generation is over: over
    /// Streamable HTTP, or, once `endpoint` is known, to the old transport's
    /// message endpoint.
    async fn serve(
        &mut self,
        input: &mut FramedRead<DuplexStream, LineCodec>,
        stop: &CancellationToken,
        fatal: &mut mpsc::Receiver<HttpEnd>,
    ) -> Over {
        let legacy = match &self.shared.transport {
            Transport::Legacy => true,
            Transport::Auto { learned } => learned.load(Ordering::Relaxed),
            Transport::Streamable => false,
        };
        let mut endpoint = None;
        if legacy {
            match self.open_legacy(stop, None).await {
                Ok(url) => endpoint = Some(url),
                Err(over) => return over,
            }
        }
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return Over::Closed,
                Some(end) = fatal.recv() => return Over::Ended(end),
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Ok(Some(id)) = done {
                        self.waiting.remove(&id);
                    }
                }
                frame = input.next() => match frame {
                    Some(Ok(Frame::Line(line))) => {
                        let sent = tokio::select! {
                            () = stop.cancelled() => return Over::Closed,
                            sent = self.send_line(endpoint.as_ref(), line) => sent,
                        };
                        match sent {
                            Ok(()) => {}
                            Err(Halt::End(end)) => return Over::Ended(end),
                            Err(Halt::Legacy(initialize, refused)) => {
                                match self.open_legacy(stop, Some((initialize, refused))).await {
                                    Ok(url) => endpoint = Some(url),
                                    Err(over) => return over,
                                }
                            }
                        }
                    }
                    Some(Ok(Frame::Oversize { len, .. })) => {
                        tracing::warn!(len, "a message over the size bound was not sent");
                    }
                    None | Some(Err(_)) => return Over::Closed,
                },
            }
        }
    }

    /// Sends one line from the session, over the transport in use.
    async fn send_line(
        &mut self,
        endpoint: Option<&reqwest::Url>,
        line: Bytes,
    ) -> Result<(), Halt> {
        match endpoint {
            Some(endpoint) => self
                .post_legacy(endpoint, line)
                .await
                .map(drop)
                .map_err(Halt::End),
            None => self.send(line).await,
        }
    }

    /// Sends one line from the session.
    async fn send(&mut self, line: Bytes) -> Result<(), Halt> {
        let (kind, method, id, cancelled) = match Envelope::peek(&line) {
            Ok(env) => (
                env.kind,
                env.method.as_deref().map(str::to_owned),
                env.id.map(|id| id.get().to_owned()),
                env.request_id.map(|id| id.get().to_owned()),
            ),
            Err(_) => (Kind::Notification, None, None, None),
        };
        if let Some(era) = &self.era {
            return self.send_modern(era.clone(), kind, line, id, cancelled);
        }
        match (kind, method.as_deref(), id) {
            (Kind::Request, Some("initialize"), Some(id)) => {
                match self.initialize(line.clone(), &id).await {
                    Err(end) if self.falls_back(&end) => Err(Halt::Legacy(line, end)),
                    done => done.map_err(Halt::End),
                }
            }
            (Kind::Request, _, Some(id)) => {
                let shared = Arc::clone(&self.shared);
                let key = id.clone();
                let handle = self
                    .tasks
                    .spawn(async move { request(&shared, line, &id).await.then_some(id) });
                self.waiting.insert(key, handle);
                Ok(())
            }
            (_, method, _) => {
                post_quiet(&self.shared, line).await.map_err(Halt::End)?;
                if method == Some("notifications/cancelled") {
                    // The server was told; nobody waits for this answer.
                    if let Some(handle) = cancelled.and_then(|id| self.waiting.remove(&id)) {
                        handle.abort();
                    }
                }
                if method == Some("notifications/initialized") && !self.listening {
                    self.listening = true;
                    if self.shared.http.has_session() {
                        let shared = Arc::clone(&self.shared);
                        self.tasks.spawn(async move {
                            if let Some(end) = listen(&shared).await {
                                let _ = shared.fatal.send(end).await;
                            }
                            None
                        });
                    }
                }
                Ok(())
            }
        }
    }

    /// Sends one line to a server of the 2026-07-28 era: a request with
    /// its `_meta`; nothing else is sent (that era has no client
    /// notifications over HTTP), but a cancellation closes its request's
    /// stream.
    fn send_modern(
        &mut self,
        era: Era,
        kind: Kind,
        line: Bytes,
        id: Option<String>,
        cancelled: Option<String>,
    ) -> Result<(), Halt> {
        match (kind, id) {
            (Kind::Request, Some(id)) => {
                let Some(line) = era.request(&line) else {
                    tracing::warn!("a request that is not a JSON object was not sent");
                    return Ok(());
                };
                let shared = Arc::clone(&self.shared);
                let key = id.clone();
                let handle = self
                    .tasks
                    .spawn(async move { request(&shared, line, &id).await.then_some(id) });
                self.waiting.insert(key, handle);
            }
            _ => {
                if let Some(handle) = cancelled.and_then(|id| self.waiting.remove(&id)) {
                    handle.abort();
                }
            }
        }
        Ok(())
    }

    /// Whether a refused `initialize` sends this generation to the old
    /// transport: a 400, 404 or 405 from a server whose transport is not
    /// known, as the protocol's section on backwards compatibility says.
    fn falls_back(&self, end: &HttpEnd) -> bool {
        if !matches!(self.shared.transport, Transport::Auto { .. }) {
            return false;
        }
        if !matches!(end.status, Some(400 | 404 | 405)) {
            return false;
        }
        note(
            &self.shared,
            &format!(
                "initialize over Streamable HTTP: HTTP {}; trying the HTTP+SSE transport",
                end.status.unwrap_or_default()
            ),
        );
        tracing::info!(
            generation = self.shared.generation,
            status = end.status,
            "the server refused Streamable HTTP; trying the HTTP+SSE transport"
        );
        true
    }

    /// Turns the generation to the old HTTP+SSE transport: opens the event
    /// stream, hands it to a task of its own (its end is the generation's),
    /// and returns the endpoint that takes the session's lines. `first` is
    /// the `initialize` that Streamable HTTP refused, with how it was
    /// refused: it is sent first, and if the old transport does not take it
    /// either, the generation ends on that refusal (a server that speaks
    /// Streamable HTTP is best described by it) with the old transport's
    /// failure added. Only once it is taken is the server taken to speak
    /// the old transport.
    async fn open_legacy(
        &mut self,
        stop: &CancellationToken,
        first: Option<(Bytes, HttpEnd)>,
    ) -> Result<reqwest::Url, Over> {
        let opened = tokio::select! {
            () = stop.cancelled() => return Err(Over::Closed),
            opened = tokio::time::timeout(legacy::ENDPOINT_WAIT, legacy::open(&self.shared)) => opened,
        };
        let opened = opened.unwrap_or_else(|_| {
            let detail = format!(
                "the event stream named no endpoint within {:?}",
                legacy::ENDPOINT_WAIT
            );
            Err(end(None, HttpStage::Listen, detail))
        });
        let learned = match &self.shared.transport {
            Transport::Auto { learned } => Some(Arc::clone(learned)),
            Transport::Legacy | Transport::Streamable => None,
        };
        let stream = match opened {
            Ok(stream) => stream,
            Err(failed) => {
                // A server taken to speak the old transport that no longer
                // does: the next generation asks again.
                if let Some(learned) = &learned {
                    learned.store(false, Ordering::Relaxed);
                }
                return Err(Over::Ended(match &first {
                    Some((_, refused)) => both(refused, failed),
                    None => failed,
                }));
            }
        };
        let endpoint = stream.endpoint.clone();
        let shared = Arc::clone(&self.shared);
        self.tasks.spawn(async move {
            let over = legacy::read(&shared, stream).await;
            let _ = shared.fatal.send(over).await;
            None
        });
        if let Some((line, refused)) = first {
            let posted = tokio::select! {
                () = stop.cancelled() => return Err(Over::Closed),
                posted = self.post_legacy(&endpoint, line) => posted,
            };
            match posted {
                Ok(true) => {
                    if let Some(learned) = &learned {
                        learned.store(true, Ordering::Relaxed);
                    }
                }
                // Answered by us: the session reports the failed initialize.
                Ok(false) => {}
                Err(failed) => return Err(Over::Ended(both(&refused, failed))),
            }
        }
        Ok(endpoint)
    }

    /// POSTs one line over the old transport: whether the server took it. A
    /// request that the server refused, or that may not have reached it, is
    /// answered by us once; `Err` when the session is over.
    async fn post_legacy(&mut self, endpoint: &reqwest::Url, line: Bytes) -> Result<bool, HttpEnd> {
        let request = Envelope::peek(&line)
            .ok()
            .filter(|env| env.kind == Kind::Request)
            .and_then(|env| env.id.map(|id| id.get().to_owned()));
        match legacy::post(&self.shared, endpoint, line).await {
            Posted::Accepted => Ok(true),
            Posted::Refused(end) => {
                match request {
                    Some(id) => {
                        let message = format!("the remote server refused the request: {end}");
                        reply(&self.shared, &id, INTERNAL_ERROR, &message, end).await;
                    }
                    None => tracing::warn!(
                        status = end.status,
                        "the remote server refused a notification"
                    ),
                }
                Ok(false)
            }
            Posted::Unknown(end) => {
                note(&self.shared, &format!("POST: {end}"));
                if let Some(id) = request {
                    let message = "the connection to the remote server broke while the request \
                                   was sent; the outcome is uncertain: check state before \
                                   retrying a mutation";
                    reply(&self.shared, &id, WORKER_LOST, message, end).await;
                }
                Ok(false)
            }
            Posted::Undelivered(end) => {
                if let Some(wid) = request.and_then(|id| id.parse::<u64>().ok()) {
                    self.shared.reporter.undelivered(wid);
                }
                Err(end)
            }
        }
    }

    /// `initialize` is sent on its own: nothing else goes before its answer
    /// has given us the session and the protocol version.
    async fn initialize(&mut self, line: Bytes, id: &str) -> Result<(), HttpEnd> {
        self.shared.http.set_session(None);
        // A server of the 2026-07-28 era is found by discovery first; any
        // other answer leaves it to the handshake.
        if let Some((era, answer)) = modern::discover(&self.shared.http, &line, id).await {
            tracing::debug!(
                generation = self.shared.generation,
                "the remote server speaks 2026-07-28"
            );
            self.shared.http.set_modern(era.version());
            self.era = Some(era);
            let _ = self.shared.out.send(answer).await;
            return Ok(());
        }
        match exchange(&self.shared, line, id, true).await {
            Exchange::Answered(Some(answer)) => {
                if let Some(version) = protocol_version(&answer) {
                    self.shared.http.set_protocol(&version);
                }
                Ok(())
            }
            Exchange::Answered(None) => Err(end(
                None,
                HttpStage::Post,
                "initialize got no answer".into(),
            )),
            Exchange::Lost(end)
            | Exchange::Refused(end)
            | Exchange::Fatal(end)
            | Exchange::Undelivered(end) => Err(end),
        }
    }

    /// Asked to stop, or stdin closed: the session is ended politely.
    async fn close(self) -> Exit {
        let status = self.shared.http.delete().await;
        Exit {
            status: ExitKind::Http(HttpEnd {
                status,
                stage: HttpStage::Close,
                detail: String::new(),
            }),
            uptime: self.started.elapsed(),
            requested: true,
        }
    }

    /// The remote session is over. The requests still in our pipe were
    /// never sent: the session is told so before it learns of the end.
    fn end(self, end: HttpEnd, input: &mut FramedRead<DuplexStream, LineCodec>) -> Exit {
        tracing::debug!(generation = self.shared.generation, %end, "remote session over");
        while let Some(Some(Ok(Frame::Line(line)))) = input.next().now_or_never() {
            let Ok(env) = Envelope::peek(&line) else {
                continue;
            };
            if env.kind == Kind::Request {
                if let Some(wid) = env.id.and_then(|id| id.get().parse::<u64>().ok()) {
                    self.shared.reporter.undelivered(wid);
                }
            }
        }
        Exit {
            status: ExitKind::Http(end),
            uptime: self.started.elapsed(),
            requested: false,
        }
    }
}

/// One request: POST it, write its answer out, and answer it ourselves
/// when its answer cannot come. `true` when done (not when the session is
/// over, which the generation's end reports).
async fn request(shared: &Shared, line: Bytes, id: &str) -> bool {
    let exchange = tokio::time::timeout(shared.ceiling, exchange(shared, line, id, false)).await;
    let exchange = exchange.unwrap_or_else(|_| {
        Exchange::Lost(end(
            None,
            HttpStage::Post,
            format!("no answer within {:?}", shared.ceiling),
        ))
    });
    match exchange {
        Exchange::Answered(_) => {}
        Exchange::Lost(end) => {
            note(shared, &format!("request {id}: {end}"));
            let message = "the connection to the remote server broke before it answered, and its \
                           answer could not be resumed; the outcome is uncertain: check state \
                           before retrying a mutation";
            reply(shared, id, WORKER_LOST, message, end).await;
        }
        Exchange::Refused(end) => {
            let message = format!("the remote server refused the request: {end}");
            reply(shared, id, INTERNAL_ERROR, &message, end).await;
        }
        Exchange::Fatal(end) => {
            let _ = shared.fatal.send(end).await;
            return false;
        }
        Exchange::Undelivered(end) => {
            // Reported before the end, so that the session knows it when
            // the generation is retired.
            match id.parse::<u64>() {
                Ok(wid) => shared.reporter.undelivered(wid),
                Err(_) => tracing::debug!("an undelivered request with a foreign id"),
            }
            let _ = shared.fatal.send(end).await;
            return false;
        }
    }
    true
}

/// Answers request `id` with an error of ours, its `error.data` a report
/// with the HTTP status and stage.
async fn reply(shared: &Shared, id: &str, code: i64, message: &str, end: HttpEnd) {
    let data = ErrorData {
        generation: Some(shared.generation),
        reason: end.to_string(),
        phase: Some(CrashPhase::Serving),
        exit: Some(ExitKind::Http(end)),
        ..ErrorData::default()
    };
    let data = serde_json::to_value(&data).ok();
    let _ = shared
        .out
        .send(build::error(id, code, message, data.as_ref()))
        .await;
}
/// How a server whose Streamable HTTP `initialize` was `refused` failed
/// over the old transport too: the refusal, with that failure added.
fn both(refused: &HttpEnd, failed: HttpEnd) -> HttpEnd {
    let status = failed
        .status
        .map_or_else(|| "no answer".to_owned(), |s| format!("HTTP {s}"));
    let tried = format!("as HTTP+SSE, {status}: {}", failed.detail);
    let mut end = refused.clone();
    end.detail = if end.detail.is_empty() {
        tried
    } else {
        format!("{}; {tried}", end.detail)
    };
    end
}

/// `result.protocolVersion` of an `initialize` answer.
fn protocol_version(answer: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        result: Option<InitResult>,
    }
    #[derive(serde::Deserialize)]
    struct InitResult {
        #[serde(rename = "protocolVersion")]
        protocol_version: Option<String>,
    }
    serde_json::from_slice::<Answer>(answer)
        .ok()?
        .result?
        .protocol_version
}

pub(crate) fn end(status: Option<u16>, stage: HttpStage, detail: String) -> HttpEnd {
    HttpEnd {
        status,
        stage,
        detail,
    }
}

/// Keeps a line for the crash report (shown only where stderr would be).
pub(crate) fn note(shared: &Shared, line: &str) {
    if let Ok(mut tail) = shared.tail.lock() {
        tail.push_line(line);
    }
}
