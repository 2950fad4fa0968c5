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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{FutureExt as _, StreamExt as _};
use mcpvisor_config::report::{CrashPhase, ErrorData, ExitKind, HttpEnd, HttpStage, StderrTail};
use mcpvisor_jsonrpc::{Envelope, Frame, INTERNAL_ERROR, Kind, LineCodec, WORKER_LOST, build};
use mcpvisor_process::Exit;
use mcpvisor_session::WorkerReporter;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Response, StatusCode};
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::http::{Http, SESSION_ID, describe};
use crate::sse::{Event, Parser};

/// Times a dropped stream is resumed in a row before what it carried is
/// given up (a request's answer) or the server is taken to be gone (the
/// standalone stream).
const RESUMES: u32 = 3;
/// The first pause before a resumption; it doubles each time.
const RESUME_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause a server's `retry` may ask for.
const RETRY_MAX: Duration = Duration::from_secs(5);
/// Bound on a POST of a notification or a response (its answer is 202).
const NOTIFY_BOUND: Duration = Duration::from_secs(30);
/// Most bytes of an HTTP error's body kept for the crash report.
const ERROR_BODY: usize = 2048;

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
}

/// How one request's exchange ended.
enum Exchange {
    /// Its answer was written out (or will come on the standalone stream).
    Answered(Option<Bytes>),
    /// It reached the server, but its answer cannot come any more.
    Lost(HttpEnd),
    /// The server refused it with an HTTP error; the session goes on.
    Refused(HttpEnd),
    /// The session is over.
    Fatal(HttpEnd),
    /// The session is over, and the request never reached the server (a
    /// 404 for our session, a 401/403, or no connection at all): it may go
    /// to the next generation.
    Undelivered(HttpEnd),
}

/// The generation's owning task.
pub(crate) struct Generation {
    shared: Arc<Shared>,
    tasks: JoinSet<Option<String>>,
    /// Requests whose answers are awaited, by raw id.
    waiting: HashMap<String, AbortHandle>,
    listening: bool,
    started: Instant,
}

impl Generation {
    pub(crate) fn new(shared: Shared) -> Self {
        Self {
            shared: Arc::new(shared),
            tasks: JoinSet::new(),
            waiting: HashMap::new(),
            listening: false,
            started: Instant::now(),
        }
    }

    /// Runs the generation until it ends; how it ended.
    pub(crate) async fn run(
        mut self,
        mut input: FramedRead<DuplexStream, LineCodec>,
        stop: CancellationToken,
        mut fatal: mpsc::Receiver<HttpEnd>,
    ) -> Exit {
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => return self.close().await,
                Some(end) = fatal.recv() => return self.end(end, &mut input),
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Ok(Some(id)) = done {
                        self.waiting.remove(&id);
                    }
                }
                frame = input.next() => match frame {
                    Some(Ok(Frame::Line(line))) => {
                        let sent = tokio::select! {
                            () = stop.cancelled() => return self.close().await,
                            sent = self.send(line) => sent,
                        };
                        if let Err(end) = sent {
                            return self.end(end, &mut input);
                        }
                    }
                    Some(Ok(Frame::Oversize { len, .. })) => {
                        tracing::warn!(len, "a message over the size bound was not sent");
                    }
                    None | Some(Err(_)) => return self.close().await,
                },
            }
        }
    }

    /// Sends one line from the session.
    async fn send(&mut self, line: Bytes) -> Result<(), HttpEnd> {
        let (kind, method, id, cancelled) = match Envelope::peek(&line) {
            Ok(env) => (
                env.kind,
                env.method.as_deref().map(str::to_owned),
                env.id.map(|id| id.get().to_owned()),
                env.request_id.map(|id| id.get().to_owned()),
            ),
            Err(_) => (Kind::Notification, None, None, None),
        };
        match (kind, method.as_deref(), id) {
            (Kind::Request, Some("initialize"), Some(id)) => self.initialize(line, &id).await,
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
                post_quiet(&self.shared, line).await?;
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

    /// `initialize` is sent on its own: nothing else goes before its answer
    /// has given us the session and the protocol version.
    async fn initialize(&mut self, line: Bytes, id: &str) -> Result<(), HttpEnd> {
        self.shared.http.set_session(None);
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

/// POSTs a request and writes out what comes back, resuming a dropped
/// stream. `Answered` carries the answer to `id` when it came here.
async fn exchange(shared: &Shared, line: Bytes, id: &str, initialize: bool) -> Exchange {
    let response = match shared.http.post(line).await {
        Ok(response) => response,
        Err(err) if err.is_connect() => {
            return Exchange::Undelivered(end(None, HttpStage::Post, describe(&err)));
        }
        // It may have reached the server: this request is lost. Whether the
        // server is gone, the standalone stream or the next POST finds out.
        Err(err) => return Exchange::Lost(end(None, HttpStage::Post, describe(&err))),
    };
    let status = response.status();
    if initialize && status.is_success() {
        shared
            .http
            .set_session(response.headers().get(SESSION_ID).cloned());
    }
    if let Some(outcome) = judge(shared, status, HttpStage::Post, initialize) {
        let detail = error_body(response).await;
        note(shared, &format!("POST: HTTP {}: {detail}", status.as_u16()));
        // A server that does not know our session, or refuses our
        // credentials, did not run the request.
        return match outcome {
            Exchange::Fatal(end) if matches!(end.status, Some(401 | 403 | 404)) => {
                Exchange::Undelivered(end)
            }
            other => other,
        };
    }
    if status == StatusCode::ACCEPTED {
        return Exchange::Answered(None);
    }
    if !is_sse(&response) {
        return match body(response, shared.max).await {
            Ok(Some(body)) => Exchange::Answered(emit(shared, body, Some(id)).await),
            Ok(None) => {
                let msg = "the answer is over the size bound";
                reply_oversize(shared, id, msg).await;
                Exchange::Answered(None)
            }
            Err(err) => Exchange::Lost(end(None, HttpStage::Post, describe(&err))),
        };
    }
    let mut response = response;
    let mut last_id = None;
    let mut resumes = 0;
    loop {
        let dropped = match read_stream(shared, response, Some(id), &mut last_id).await {
            Ok(answer) => return Exchange::Answered(Some(answer)),
            Err(dropped) => dropped,
        };
        // A stream without event ids cannot be resumed.
        let Some(from) = last_id.clone() else {
            return Exchange::Lost(end(None, HttpStage::Post, dropped.detail));
        };
        loop {
            resumes += 1;
            if resumes > RESUMES {
                return Exchange::Lost(end(None, HttpStage::Resume, dropped.detail));
            }
            let pause = dropped
                .retry
                .unwrap_or(RESUME_PAUSE * 2u32.pow(resumes - 1));
            tokio::time::sleep(pause.min(RETRY_MAX)).await;
            match shared.http.get(Some(&from)).await {
                Err(err) => {
                    note(shared, &format!("resume: {}", describe(&err)));
                }
                Ok(next) => {
                    let status = next.status();
                    if let Some(outcome) = judge(shared, status, HttpStage::Resume, false) {
                        return outcome;
                    }
                    if status.is_success() && is_sse(&next) {
                        response = next;
                        break;
                    }
                    let detail = format!("the server cannot resume it (HTTP {})", status.as_u16());
                    return Exchange::Lost(end(Some(status.as_u16()), HttpStage::Resume, detail));
                }
            }
        }
    }
}

/// What an HTTP status means for an exchange, when it is not a success to
/// read on.
fn judge(
    shared: &Shared,
    status: StatusCode,
    stage: HttpStage,
    initialize: bool,
) -> Option<Exchange> {
    let code = status.as_u16();
    if status.is_success() {
        return None;
    }
    if code == 404 && shared.http.has_session() {
        let detail = "the server no longer knows our session".to_owned();
        return Some(Exchange::Fatal(end(Some(code), stage, detail)));
    }
    if code == 401 || code == 403 {
        let detail = "not authorized: check the headers (OAuth is for a bridge such as mcp-remote)";
        return Some(Exchange::Fatal(end(Some(code), stage, detail.to_owned())));
    }
    if initialize {
        return Some(Exchange::Fatal(end(Some(code), stage, String::new())));
    }
    Some(Exchange::Refused(end(Some(code), stage, String::new())))
}

/// How a stream ended without the answer it was read for.
struct Dropped {
    detail: String,
    retry: Option<Duration>,
}

/// Writes out every message of an SSE stream. With `answer_to`, returns
/// that request's answer once it came (the stream is then done); otherwise,
/// or when the stream ends first, how it ended. `last_id` keeps the last
/// event id seen.
async fn read_stream(
    shared: &Shared,
    mut response: Response,
    answer_to: Option<&str>,
    last_id: &mut Option<String>,
) -> Result<Bytes, Dropped> {
    let mut parser = Parser::new(shared.max);
    let mut events = Vec::new();
    let mut retry = None;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                return Err(Dropped {
                    detail: "the stream ended".into(),
                    retry,
                });
            }
            Err(err) => {
                return Err(Dropped {
                    detail: describe(&err),
                    retry,
                });
            }
        };
        parser.feed(&chunk, &mut |event| events.push(event));
        for Event {
            data,
            id,
            retry: asked,
            oversize,
        } in events.drain(..)
        {
            if id.is_some() {
                *last_id = id;
            }
            if asked.is_some() {
                retry = asked;
            }
            if oversize {
                tracing::warn!(
                    generation = shared.generation,
                    "a message over the size bound was dropped"
                );
                continue;
            }
            if data.is_empty() {
                continue;
            }
            if let Some(answer) = emit(shared, data, answer_to).await {
                return Ok(answer);
            }
        }
    }
}

/// The standalone stream: the server's own requests and notifications,
/// until the session is over (`Some`) or the server has none (`None`).
async fn listen(shared: &Shared) -> Option<HttpEnd> {
    let mut last_id: Option<String> = None;
    let mut failures = 0u32;
    let mut pause = RESUME_PAUSE;
    loop {
        let stage = if last_id.is_some() {
            HttpStage::Resume
        } else {
            HttpStage::Listen
        };
        match shared.http.get(last_id.as_deref()).await {
            Err(err) => {
                failures += 1;
                if failures > RESUMES {
                    return Some(end(None, stage, describe(&err)));
                }
            }
            Ok(response) => {
                let status = response.status();
                match judge(shared, status, stage, false) {
                    Some(Exchange::Fatal(end)) => return Some(end),
                    Some(_) => {
                        if status == StatusCode::METHOD_NOT_ALLOWED || failures >= RESUMES {
                            tracing::debug!(status = status.as_u16(), "no standalone stream");
                            return None;
                        }
                        failures += 1;
                    }
                    None => {
                        failures = 0;
                        let dropped = read_stream(shared, response, None, &mut last_id).await;
                        if let Err(Dropped {
                            retry: Some(retry), ..
                        }) = dropped
                        {
                            pause = retry.clamp(Duration::from_millis(100), RETRY_MAX);
                        }
                    }
                }
            }
        }
        let wait = if failures == 0 {
            pause
        } else {
            RESUME_PAUSE * 2u32.pow(failures - 1)
        };
        tokio::time::sleep(wait).await;
    }
}

/// POSTs a notification or a response; its answer is 202.
async fn post_quiet(shared: &Shared, line: Bytes) -> Result<(), HttpEnd> {
    let sent = tokio::time::timeout(NOTIFY_BOUND, shared.http.post(line)).await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => return Err(end(None, HttpStage::Post, describe(&err))),
        Err(_) => {
            let detail = format!("no answer within {NOTIFY_BOUND:?}");
            return Err(end(None, HttpStage::Post, detail));
        }
    };
    let status = response.status();
    match judge(shared, status, HttpStage::Post, false) {
        Some(Exchange::Fatal(end)) => Err(end),
        Some(_) => {
            let detail = error_body(response).await;
            note(shared, &format!("POST: HTTP {}: {detail}", status.as_u16()));
            tracing::warn!(
                status = status.as_u16(),
                "the remote server refused a notification"
            );
            Ok(())
        }
        None => Ok(()),
    }
}

/// Writes out one message the server sent. When it is the answer to
/// `answer_to`, returns it.
async fn emit(shared: &Shared, message: Bytes, answer_to: Option<&str>) -> Option<Bytes> {
    // A line out must be one line: a pretty-printed message is made compact.
    let message = if message.iter().any(|&b| b == b'\n' || b == b'\r') {
        match serde_json::from_slice::<serde_json::Value>(&message) {
            Ok(value) => Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
            Err(_) => {
                tracing::warn!("the remote server sent a message that is not JSON; dropped");
                return None;
            }
        }
    } else {
        message
    };
    let answer = answer_to.is_some_and(|want| {
        Envelope::peek(&message).is_ok_and(|env| {
            env.kind == Kind::Response && env.id.is_some_and(|id| id.get() == want)
        })
    });
    let kept = answer.then(|| message.clone());
    let _ = shared.out.send(message).await;
    kept
}

async fn reply_oversize(shared: &Shared, id: &str, message: &str) {
    let _ = shared
        .out
        .send(build::error(id, INTERNAL_ERROR, message, None))
        .await;
}

/// Reads a whole body, up to `max` bytes; `None` when it is longer.
async fn body(mut response: Response, max: usize) -> Result<Option<Bytes>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(Bytes::from(body)))
}

/// The head of an error's body, for the report (bounded in time and size).
async fn error_body(mut response: Response) -> String {
    let mut head = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            head.extend_from_slice(&chunk);
            if head.len() >= ERROR_BODY {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
    head.truncate(ERROR_BODY);
    String::from_utf8_lossy(&head).trim().to_owned()
}

fn is_sse(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
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

fn end(status: Option<u16>, stage: HttpStage, detail: String) -> HttpEnd {
    HttpEnd {
        status,
        stage,
        detail,
    }
}

/// Keeps a line for the crash report (shown only where stderr would be).
fn note(shared: &Shared, line: &str) {
    if let Ok(mut tail) = shared.tail.lock() {
        tail.push_line(line);
    }
}
