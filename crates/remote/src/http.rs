//! One remote session's HTTP requests: the endpoint, the headers every
//! request carries, and the session the server gave us.

use std::fmt;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Response, Url};

/// `Mcp-Session-Id`.
pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Bound on a DELETE at the end of a session.
const DELETE_BOUND: Duration = Duration::from_secs(2);

/// The HTTP side of one remote session.
pub(crate) struct Http {
    client: Client,
    url: Url,
    /// The entry's headers (values marked sensitive) and `Accept`.
    headers: HeaderMap,
    /// Issued by the server with its `initialize` answer.
    session: RwLock<Option<HeaderValue>>,
    /// The version `initialize` agreed on, sent on every later request.
    protocol: RwLock<Option<HeaderValue>>,
    /// The server is spoken to in the 2026-07-28 era: each POST names its
    /// method (and operation) in headers.
    modern: AtomicBool,
}

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The query may carry a key and the headers are credentials.
        f.debug_struct("Http")
            .field("host", &self.url.host_str())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Http {
    pub(crate) fn new(client: Client, url: Url, mut headers: HeaderMap) -> Self {
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        Self {
            client,
            url,
            headers,
            session: RwLock::new(None),
            protocol: RwLock::new(None),
            modern: AtomicBool::new(false),
        }
    }

    /// Whether the server gave us a session.
    pub(crate) fn has_session(&self) -> bool {
        self.session.read().map(|s| s.is_some()).unwrap_or(false)
    }

    /// Keeps the session id of an `initialize` answer.
    pub(crate) fn set_session(&self, id: Option<HeaderValue>) {
        if let Ok(mut session) = self.session.write() {
            *session = id;
        }
    }

    /// Keeps the protocol version `initialize` agreed on.
    pub(crate) fn set_protocol(&self, version: &str) {
        if let (Ok(value), Ok(mut protocol)) =
            (HeaderValue::from_str(version), self.protocol.write())
        {
            *protocol = Some(value);
        }
    }

    fn session_headers(&self) -> HeaderMap {
        let mut headers = self.headers.clone();
        if let Some(id) = self.session.read().ok().and_then(|s| s.clone()) {
            headers.insert(SESSION_ID, id);
        }
        if let Some(version) = self.protocol.read().ok().and_then(|p| p.clone()) {
            headers.insert(PROTOCOL_VERSION, version);
        }
        headers
    }

    /// The URL the entry names: the Streamable HTTP endpoint, or the old
    /// transport's event stream.
    pub(crate) fn url(&self) -> &Url {
        &self.url
    }

    /// POSTs one message.
    pub(crate) async fn post(&self, body: Bytes) -> Result<Response, reqwest::Error> {
        self.post_to(&self.url, body).await
    }

    /// POSTs one message to `url` (the old transport's message endpoint).
    /// From now on, POSTs are of the 2026-07-28 era.
    pub(crate) fn set_modern(&self) {
        self.modern.store(true, Ordering::Relaxed);
        self.set_protocol(crate::modern::VERSION);
    }

    /// Whether POSTs are of the 2026-07-28 era.
    pub(crate) fn is_modern(&self) -> bool {
        self.modern.load(Ordering::Relaxed)
    }

    /// A POST to the endpoint with these headers besides the usual ones.
    pub(crate) async fn post_with(
        &self,
        body: Bytes,
        extra: HeaderMap,
    ) -> Result<Response, reqwest::Error> {
        let mut headers = self.session_headers();
        headers.extend(extra);
        self.client
            .post(self.url.clone())
            .headers(headers)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
    }

    pub(crate) async fn post_to(&self, url: &Url, body: Bytes) -> Result<Response, reqwest::Error> {
        let mut headers = self.session_headers();
        if self.modern.load(Ordering::Relaxed) {
            headers.extend(crate::modern::request_headers(&body));
        }
        self.client
            .post(url.clone())
            .headers(headers)
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
    }

    /// Opens (or, with `last_event_id`, resumes) an SSE stream.
    pub(crate) async fn get(
        &self,
        last_event_id: Option<&str>,
    ) -> Result<Response, reqwest::Error> {
        let mut headers = self.session_headers();
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            headers.insert(LAST_EVENT_ID, id);
        }
        self.client
            .get(self.url.clone())
            .headers(headers)
            .send()
            .await
    }

    /// Ends the session (bounded; a 405 or no answer is fine). The status,
    /// if one came.
    pub(crate) async fn delete(&self) -> Option<u16> {
        if !self.has_session() {
            return None;
        }
        let request = self
            .client
            .delete(self.url.clone())
            .headers(self.session_headers())
            .send();
        match tokio::time::timeout(DELETE_BOUND, request).await {
            Ok(Ok(response)) => Some(response.status().as_u16()),
            _ => None,
        }
    }
}

/// What went wrong with a request, in words, without the URL (its query
/// may carry a key).
pub(crate) fn describe(err: &reqwest::Error) -> String {
    use std::error::Error as _;
    let what = if err.is_connect() {
        "cannot connect"
    } else if err.is_timeout() {
        "timed out"
    } else if err.is_body() || err.is_decode() {
        "the answer broke off"
    } else if err.is_request() {
        "the request failed"
    } else {
        "HTTP error"
    };
    // The innermost cause says most ("Connection refused (os error 111)").
    let mut source = err.source();
    let mut last = None;
    while let Some(cause) = source {
        last = Some(cause.to_string());
        source = cause.source();
    }
    match last {
        Some(cause) => format!("{what}: {cause}"),
        None => what.to_owned(),
    }
}
