//! The old HTTP+SSE transport (protocol version 2024-11-05).
//!
//! The entry's URL is an event stream. Its first `endpoint` event names the
//! URL that takes the client's messages, each POSTed on its own and
//! answered `202 Accepted`; everything the server sends, answers included,
//! comes back as `message` events on the stream. The stream is the remote
//! session: when it ends, the generation ends, and the next generation
//! opens a new stream and sends `initialize` again.
//!
//! The endpoint must be on the stream's own origin (scheme, host and port):
//! the entry's headers, often credentials, go with every POST, and a server
//! that names another origin is refused rather than followed.

use std::time::Duration;

use bytes::Bytes;
use mcpvisor_config::report::{HttpEnd, HttpStage};
use reqwest::{Response, Url};

use crate::exchange::{emit, error_body, is_sse};
use crate::generation::{Shared, end, note};
use crate::http::describe;
use crate::sse::{Event, Parser};

/// Bound on opening the stream and reading up to its `endpoint` event.
pub(crate) const ENDPOINT_WAIT: Duration = Duration::from_secs(30);
/// Bound on one POST (the server only queues the message and answers 202).
const POST_BOUND: Duration = Duration::from_secs(30);
/// Events kept while waiting for the `endpoint` one (a server sends none
/// before it).
const EARLY_EVENTS: usize = 64;

/// An open event stream, past its `endpoint` event.
pub(crate) struct Stream {
    response: Response,
    parser: Parser,
    /// Where messages are POSTed.
    pub endpoint: Url,
    /// Events that came in the same reads as the endpoint, not yet handled.
    early: Vec<Event>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The endpoint's query often names the session: not printed.
        f.debug_struct("Stream").finish_non_exhaustive()
    }
}

/// Opens the event stream and reads up to its `endpoint` event.
pub(crate) async fn open(shared: &Shared) -> Result<Stream, HttpEnd> {
    let response = shared
        .http
        .get(None)
        .await
        .map_err(|err| end(None, HttpStage::Listen, describe(&err)))?;
    let status = response.status();
    let code = status.as_u16();
    if !status.is_success() {
        let detail = if code == 401 || code == 403 {
            shared.http.refused_detail()
        } else {
            error_body(response).await
        };
        note(
            shared,
            &format!("GET (event stream): HTTP {code}: {detail}"),
        );
        return Err(end(Some(code), HttpStage::Listen, detail));
    }
    if !is_sse(&response) {
        let detail = "the url is not an event stream: not an HTTP+SSE server".to_owned();
        return Err(end(Some(code), HttpStage::Listen, detail));
    }
    let mut response = response;
    let mut parser = Parser::new(shared.max);
    let mut events = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                let detail = "the event stream ended before it named its endpoint".to_owned();
                return Err(end(None, HttpStage::Listen, detail));
            }
            Err(err) => return Err(end(None, HttpStage::Listen, describe(&err))),
        };
        parser.feed(&chunk, &mut |event| events.push(event));
        let Some(at) = events
            .iter()
            .position(|e| e.name.as_deref() == Some("endpoint"))
        else {
            if events.len() > EARLY_EVENTS {
                let detail = format!(
                    "the event stream sent {} events without naming its endpoint",
                    events.len()
                );
                return Err(end(None, HttpStage::Listen, detail));
            }
            continue;
        };
        let endpoint = resolve(shared.http.url(), &events[at].data)?;
        events.remove(at);
        return Ok(Stream {
            response,
            parser,
            endpoint,
            early: events,
        });
    }
}

/// The endpoint an `endpoint` event names (a path, or a whole URL), read
/// against the stream's URL; refused on another origin.
fn resolve(base: &Url, data: &[u8]) -> Result<Url, HttpEnd> {
    let refuse = |detail: &str| end(None, HttpStage::Listen, detail.to_owned());
    let text = std::str::from_utf8(data).map_err(|_| refuse("the endpoint is not text"))?;
    // An empty one (or one over the size bound, dropped) would name the
    // stream itself.
    if text.trim().is_empty() {
        return Err(refuse("the endpoint event named no endpoint"));
    }
    let url = base
        .join(text.trim())
        .map_err(|_| refuse("the endpoint the server named is not a URL"))?;
    if url.origin() != base.origin() {
        return Err(refuse(
            "the server named an endpoint on another origin; refused, since the entry's \
             headers would go there",
        ));
    }
    Ok(url)
}

/// Reads the stream until it ends, writing every message out; how it
/// ended.
pub(crate) async fn read(shared: &Shared, stream: Stream) -> HttpEnd {
    let Stream {
        mut response,
        mut parser,
        early,
        ..
    } = stream;
    let mut events = early;
    loop {
        for event in events.drain(..) {
            if event.oversize {
                tracing::warn!(
                    generation = shared.generation,
                    "a message over the size bound was dropped"
                );
                continue;
            }
            match event.name.as_deref() {
                None | Some("message") if !event.data.is_empty() => {
                    emit(shared, event.data, None).await;
                }
                Some("endpoint") => {
                    tracing::debug!(generation = shared.generation, "a second endpoint ignored");
                }
                _ => {}
            }
        }
        match response.chunk().await {
            Ok(Some(chunk)) => parser.feed(&chunk, &mut |event| events.push(event)),
            Ok(None) => return end(None, HttpStage::Listen, "the event stream ended".into()),
            Err(err) => return end(None, HttpStage::Listen, describe(&err)),
        }
    }
}

/// What became of one POSTed message.
pub(crate) enum Posted {
    /// The server took it; an answer comes on the stream.
    Accepted,
    /// The server refused it with an HTTP error; the session goes on.
    Refused(HttpEnd),
    /// It may or may not have reached the server, whose answer, if any,
    /// would come on the stream.
    Unknown(HttpEnd),
    /// It never reached the server, and the session is over: no
    /// connection, a server that no longer knows the session (404), or
    /// credentials refused (401, 403).
    Undelivered(HttpEnd),
}

/// POSTs one message to the endpoint.
pub(crate) async fn post(shared: &Shared, endpoint: &Url, line: Bytes) -> Posted {
    let sent = tokio::time::timeout(POST_BOUND, shared.http.post_to(endpoint, line)).await;
    let response = match sent {
        Ok(Ok(response)) => response,
        Ok(Err(err)) if err.is_connect() => {
            return Posted::Undelivered(end(None, HttpStage::Post, describe(&err)));
        }
        Ok(Err(err)) => return Posted::Unknown(end(None, HttpStage::Post, describe(&err))),
        Err(_) => {
            let detail = format!("no answer within {POST_BOUND:?}");
            return Posted::Unknown(end(None, HttpStage::Post, detail));
        }
    };
    let status = response.status();
    let code = status.as_u16();
    if status.is_success() {
        return Posted::Accepted;
    }
    let detail = match code {
        401 | 403 => shared.http.refused_detail(),
        404 => "the server no longer knows our session".to_owned(),
        _ => error_body(response).await,
    };
    note(shared, &format!("POST: HTTP {code}: {detail}"));
    match code {
        401 | 403 | 404 => Posted::Undelivered(end(Some(code), HttpStage::Post, detail)),
        _ => Posted::Refused(end(Some(code), HttpStage::Post, detail)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("https://mcp.example.com:8443/v1/sse?key=k").expect("a URL")
    }

    #[test]
    fn an_endpoint_path_is_read_against_the_stream_url() {
        let url = resolve(&base(), b"/messages/?session_id=abc").expect("same origin");
        assert_eq!(
            url.as_str(),
            "https://mcp.example.com:8443/messages/?session_id=abc"
        );
        let url = resolve(&base(), b"messages?s=1\r").expect("relative");
        assert_eq!(url.as_str(), "https://mcp.example.com:8443/v1/messages?s=1");
        let url = resolve(&base(), b"https://mcp.example.com:8443/m").expect("whole URL");
        assert_eq!(url.path(), "/m");
    }

    #[test]
    fn an_endpoint_on_another_origin_is_refused() {
        for other in [
            &b"https://evil.example.com/messages"[..],
            b"http://mcp.example.com:8443/messages",
            b"https://mcp.example.com/messages",
            b"//evil.example.com/messages",
        ] {
            let err = resolve(&base(), other).expect_err("another origin");
            assert!(err.detail.contains("another origin"), "{}", err.detail);
        }
        assert!(resolve(&base(), &[0xff, 0xfe]).is_err());
        let err = resolve(&base(), b" \r").expect_err("empty");
        assert_eq!(err.detail, "the endpoint event named no endpoint");
    }
}
