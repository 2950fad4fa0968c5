//! One exchange with the remote server: a POST and what comes back (a
//! JSON body, or an SSE stream resumed with `Last-Event-ID` when it drops),
//! and the standalone GET stream.

use std::time::Duration;

use bytes::Bytes;
use mcpvisor_config::report::{HttpEnd, HttpStage};
use mcpvisor_jsonrpc::{Envelope, INTERNAL_ERROR, Kind, build};
use reqwest::header::CONTENT_TYPE;
use reqwest::{Response, StatusCode};

use crate::generation::{Shared, end, note};
use crate::http::{SESSION_ID, describe};
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

/// How one request's exchange ended.
pub(crate) enum Exchange {
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
/// POSTs a request and writes out what comes back, resuming a dropped
/// stream. `Answered` carries the answer to `id` when it came here.
pub(crate) async fn exchange(shared: &Shared, line: Bytes, id: &str, initialize: bool) -> Exchange {
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
        // A stream without event ids cannot be resumed, nor can any stream
        // of the 2026-07-28 era.
        let Some(from) = last_id.clone().filter(|_| !shared.http.is_modern()) else {
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
        let detail = shared.http.refused_detail();
        return Some(Exchange::Fatal(end(Some(code), stage, detail)));
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
            ..
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
pub(crate) async fn listen(shared: &Shared) -> Option<HttpEnd> {
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
pub(crate) async fn post_quiet(shared: &Shared, line: Bytes) -> Result<(), HttpEnd> {
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
pub(crate) async fn emit(
    shared: &Shared,
    message: Bytes,
    answer_to: Option<&str>,
) -> Option<Bytes> {
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
pub(crate) async fn error_body(mut response: Response) -> String {
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

pub(crate) fn is_sse(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}
