//! One remote session's HTTP requests: the endpoint, the headers every
//! request carries, and the session the server gave us.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_oauth::{Authorizer, Challenge, Prompt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, RequestBuilder, Response, Url};

/// `Mcp-Session-Id`.
pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Bound on a DELETE at the end of a session.
const DELETE_BOUND: Duration = Duration::from_secs(2);
/// Times one request is sent again after a new token, at most.
const AUTH_RETRIES: u32 = 3;

/// OAuth for a server whose entry uses it: the token every request
/// carries, and what to do with a 401 or a 403 `insufficient_scope`.
#[derive(Clone)]
pub(crate) struct Auth {
    pub authorizer: Arc<Authorizer>,
    /// Shows the authorization link (reported to the session).
    pub prompt: Prompt,
    /// Why the last authorization failed, for the report of the 401.
    pub failure: Arc<Mutex<Option<String>>>,
}

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
    auth: Option<Auth>,
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
    pub(crate) fn new(
        client: Client,
        url: Url,
        mut headers: HeaderMap,
        auth: Option<Auth>,
    ) -> Self {
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
            auth,
        }
    }

    /// What a 401 or 403 means, for the report: why authorization failed,
    /// or, for an entry that does not use OAuth, where to look.
    pub(crate) fn refused_detail(&self) -> String {
        let failure = self
            .auth
            .as_ref()
            .and_then(|auth| auth.failure.lock().ok().and_then(|f| f.clone()));
        match failure {
            Some(why) => format!("not authorized: {why}"),
            None => "not authorized: check the headers".to_owned(),
        }
    }

    /// Sends the request `make` builds from the session's headers, with
    /// the OAuth token when the entry uses OAuth; after a 401, or a 403
    /// asking for more scopes, authorizes (a refresh, or a person in a
    /// browser) and sends it again.
    async fn send(
        &self,
        make: impl Fn(HeaderMap) -> RequestBuilder,
    ) -> Result<Response, reqwest::Error> {
        let Some(auth) = &self.auth else {
            return make(self.session_headers()).send().await;
        };
        let mut retries = 0;
        loop {
            let token = auth.authorizer.bearer().await;
            let mut headers = self.session_headers();
            if let Some(value) = token.as_ref().and_then(|t| self.bearer(t)) {
                headers.insert(AUTHORIZATION, value);
            }
            let response = match make(headers.clone()).send().await {
                Ok(response) => response,
                // After a wait for a person, the pooled connection may have
                // been closed by the server; the resend of a request it
                // refused goes once more on a new one.
                Err(err) if retries > 0 && !err.is_timeout() => {
                    tracing::debug!("resending after authorization: {}", describe(&err));
                    make(headers).send().await?
                }
                Err(err) => return Err(err),
            };
            let status = response.status().as_u16();
            if status != 401 && status != 403 {
                if response.status().is_success() {
                    auth.authorizer.succeeded();
                }
                return Ok(response);
            }
            let challenge = Challenge::from_headers(status, response.headers());
            if (status == 403 && !challenge.insufficient_scope()) || retries >= AUTH_RETRIES {
                return Ok(response);
            }
            let outcome = auth
                .authorizer
                .authorize(&challenge, token.as_ref(), Some(&auth.prompt))
                .await;
            let failure = outcome.as_ref().err().map(ToString::to_string);
            if let Ok(mut slot) = auth.failure.lock() {
                slot.clone_from(&failure);
            }
            if let Some(why) = failure {
                tracing::warn!(status, "authorization failed: {why}");
                return Ok(response);
            }
            retries += 1;
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

    /// From now on, POSTs are of the 2026-07-28 era, in `version`.
    pub(crate) fn set_modern(&self, version: &str) {
        self.modern.store(true, Ordering::Relaxed);
        self.set_protocol(version);
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
        self.send(|mut headers| {
            headers.extend(extra.clone());
            self.client
                .post(self.url.clone())
                .headers(headers)
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone())
        })
        .await
    }

    /// POSTs one message to `url` (the old transport's message endpoint).
    pub(crate) async fn post_to(&self, url: &Url, body: Bytes) -> Result<Response, reqwest::Error> {
        let modern = self
            .modern
            .load(Ordering::Relaxed)
            .then(|| crate::modern::request_headers(&body));
        self.send(|mut headers| {
            if let Some(modern) = &modern {
                headers.extend(modern.clone());
            }
            self.client
                .post(url.clone())
                .headers(headers)
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone())
        })
        .await
    }

    /// Opens (or, with `last_event_id`, resumes) an SSE stream.
    pub(crate) async fn get(
        &self,
        last_event_id: Option<&str>,
    ) -> Result<Response, reqwest::Error> {
        let last_event_id = last_event_id.and_then(|id| HeaderValue::from_str(id).ok());
        self.send(|mut headers| {
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
            if let Some(id) = &last_event_id {
                headers.insert(LAST_EVENT_ID, id.clone());
            }
            self.client.get(self.url.clone()).headers(headers)
        })
        .await
    }

    /// The `Authorization` header for an OAuth access token, marked
    /// sensitive. The token is a secret from now on: the redactor learns it
    /// (in place of this server's earlier one).
    fn bearer(&self, token: &mcpvisor_oauth::Secret) -> Option<HeaderValue> {
        mcpvisor_config::redact::global().learn(
            &format!("oauth:{}", self.url),
            [("oauth_access_token", token.expose())],
        );
        let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).ok()?;
        value.set_sensitive(true);
        Some(value)
    }

    /// Ends the session (bounded; a 405 or no answer is fine). The status,
    /// if one came.
    pub(crate) async fn delete(&self) -> Option<u16> {
        if !self.has_session() {
            return None;
        }
        let mut headers = self.session_headers();
        if let Some(auth) = &self.auth {
            let token = auth.authorizer.bearer().await;
            if let Some(value) = token.as_ref().and_then(|t| self.bearer(t)) {
                headers.insert(AUTHORIZATION, value);
            }
        }
        let request = self.client.delete(self.url.clone()).headers(headers).send();
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
