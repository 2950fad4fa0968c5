//! What the HTTP front is told, validated once before it serves.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// The Streamable HTTP front's settings. [`Default`] gives a loopback-only
/// front on `/mcp` with bounds suited to one machine.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The MCP endpoint's path; it takes POST, GET and DELETE.
    pub path: String,
    /// Origins a browser page may call from, such as
    /// `https://app.example.com` (scheme, host and port as sent), or a bare
    /// host name such as `app.example.com` for that host at any scheme and
    /// port. A request with an `Origin` not listed gets 403; one without an
    /// `Origin` (not from a browser) is not checked. On a loopback bind,
    /// `localhost`, `127.0.0.1` and `[::1]` are allowed at any port.
    pub allow_origins: Vec<String>,
    /// Values of `Host` the front answers to: `name` (any port) or
    /// `name:port`; `*` allows any host. On a loopback bind, `localhost`,
    /// `127.0.0.1` and `[::1]` are allowed at any port. A bind that is not
    /// loopback must list its hosts: the check is what defeats DNS
    /// rebinding.
    pub allow_hosts: Vec<String>,
    /// A bearer token every MCP request must carry.
    pub token: Option<BearerToken>,
    /// The largest POST body accepted (413 past it).
    pub max_message_bytes: usize,
    /// Sessions open at once; `initialize` past it gets 503.
    pub max_sessions: usize,
    /// Connections open at once; past it the listener stops accepting until
    /// one closes (the next wait in the kernel's backlog).
    pub max_connections: usize,
    /// How long a connection may take to send a request's head (request
    /// line and headers), and stay idle between requests; then it is
    /// closed.
    pub header_timeout: Duration,
    /// A session with no request in flight and no open stream for this long
    /// is closed; its id then gets 404.
    pub session_idle_timeout: Duration,
    /// Requests in flight per session; past it a request gets 429.
    pub max_in_flight: usize,
    /// How long requests in flight may still finish after shutdown is asked.
    pub drain: Duration,
    /// The least time the drain lasts, answering 503 to what is new, even
    /// with nothing in flight: long enough for a load balancer polling
    /// `/readyz` to stop sending here before the connections close.
    pub drain_min: Duration,
    /// Messages the hub may queue for one front before it closes it.
    pub front_queue: usize,
    /// Events queued for one SSE connection; a reader that lets more pile
    /// up is cut off (the events stay buffered for resumption).
    pub stream_queue: usize,
    /// Events kept per stream for resumption with `Last-Event-ID`.
    pub replay_events: usize,
    /// Finished request streams kept per session for resumption.
    pub retained_streams: usize,
    /// A comment is sent on an idle SSE stream this often, so a vanished
    /// client is noticed.
    pub keep_alive: Duration,
    /// The longest wait to hand one message to the hub (503 past it).
    pub hub_send_timeout: Duration,
    /// Whether the gateway can take sessions yet, for `/readyz`: it answers
    /// 503 while this holds `false`. `None`: ready as soon as it serves.
    pub ready: Option<tokio::sync::watch::Receiver<bool>>,
    /// How long a client of 2025-11-25 waits before it reconnects to a
    /// stream the server closed (the `retry` field of priming events).
    pub sse_retry: Duration,
    /// 2025-11-25 polling: a request's event stream (for a client of
    /// 2025-11-25) is held open at most this long, then closed with a
    /// `retry` field; the client resumes it with `Last-Event-ID`. A request
    /// with nothing to send by then is answered with a stream that holds
    /// only its priming event. `None`: streams stay open until their
    /// response.
    pub sse_poll: Option<Duration>,
    /// The replica id of this process (`serve --replica-id`), sent as the
    /// `Mcp-Replica` header of every response to a 2026-07-28 request, so
    /// that a balancer (or a person) can tell which replica answered, and
    /// holds a call that goes on in another round. `None`: no header.
    pub replica: Option<axum::http::HeaderValue>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            path: "/mcp".to_owned(),
            allow_origins: Vec::new(),
            allow_hosts: Vec::new(),
            token: None,
            max_message_bytes: 64 * 1024 * 1024,
            max_sessions: 256,
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
            session_idle_timeout: Duration::from_secs(30 * 60),
            max_in_flight: 64,
            drain: Duration::from_secs(10),
            drain_min: Duration::ZERO,
            front_queue: 1024,
            stream_queue: 256,
            replay_events: 1024,
            retained_streams: 32,
            keep_alive: Duration::from_secs(15),
            hub_send_timeout: Duration::from_secs(10),
            ready: None,
            sse_retry: Duration::from_secs(1),
            sse_poll: None,
            replica: None,
        }
    }
}

/// Why an [`HttpConfig`] cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "the endpoint path {0:?} must start with '/' and not be /healthz, /readyz, /sse or /messages"
    )]
    Path(String),
    #[error(
        "bound to {0}, which is not loopback: list the host names clients use in allow_hosts \
         (or \"*\" to accept any Host header, which leaves DNS rebinding open)"
    )]
    HostsRequired(SocketAddr),
    #[error("{0} must be more than 0")]
    Zero(&'static str),
}

impl HttpConfig {
    pub(crate) fn validate(self, local: SocketAddr) -> Result<Valid, ConfigError> {
        let taken = ["/healthz", "/readyz", "/sse", "/messages"];
        if !self.path.starts_with('/') || taken.contains(&self.path.as_str()) {
            return Err(ConfigError::Path(self.path));
        }
        if self.header_timeout.is_zero() {
            return Err(ConfigError::Zero("header_timeout"));
        }
        for (name, v) in [
            ("max_message_bytes", self.max_message_bytes),
            ("max_sessions", self.max_sessions),
            ("max_connections", self.max_connections),
            ("max_in_flight", self.max_in_flight),
            ("front_queue", self.front_queue),
            ("stream_queue", self.stream_queue),
            ("replay_events", self.replay_events),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        let loopback = local.ip().is_loopback();
        if !loopback && self.allow_hosts.is_empty() {
            return Err(ConfigError::HostsRequired(local));
        }
        let lower = |v: &Vec<String>| v.iter().map(|s| s.to_ascii_lowercase()).collect();
        Ok(Valid {
            hosts: lower(&self.allow_hosts),
            origins: lower(&self.allow_origins),
            loopback,
            cfg: self,
        })
    }
}

/// A checked configuration, with its allowlists normalised.
#[derive(Debug)]
pub(crate) struct Valid {
    pub cfg: HttpConfig,
    hosts: Vec<String>,
    origins: Vec<String>,
    loopback: bool,
}

const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl Valid {
    /// Whether a `Host` header value is one this front answers to.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let name = strip_port(&host);
        (self.loopback && LOOPBACK_NAMES.contains(&name))
            || self
                .hosts
                .iter()
                .any(|h| h == "*" || *h == host || (h == name && !h.contains(':')))
    }

    /// Whether a present `Origin` header value may call this front.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.to_ascii_lowercase();
        let authority = match origin.split_once("://") {
            Some(("http" | "https", rest)) => rest,
            _ => return self.origins.contains(&origin),
        };
        let name = strip_port(authority);
        (self.loopback && LOOPBACK_NAMES.contains(&name))
            || self.origins.iter().any(|o| *o == origin || o == name)
    }
}

/// `name:port` → `name`; `[v6]:port` → `[v6]`.
fn strip_port(authority: &str) -> &str {
    if let Some(end) = authority.find(']') {
        return &authority[..=end];
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    }
}

/// A bearer token. It is never printed, and compared in constant time.
#[derive(Clone)]
pub struct BearerToken([u8; 32]);

impl BearerToken {
    pub fn new(token: &str) -> Self {
        BearerToken(Sha256::digest(token.as_bytes()).into())
    }

    /// Compares digests, so neither the token's length nor where a guess
    /// first differs shows in the time taken.
    pub fn matches(&self, presented: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        let theirs: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.0.ct_eq(&theirs).into()
    }
}

/// The token of an `Authorization: Bearer TOKEN` header, if there is one.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(hosts: &[&str], origins: &[&str], bind: &str) -> Valid {
        HttpConfig {
            allow_hosts: hosts.iter().map(|s| s.to_string()).collect(),
            allow_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..HttpConfig::default()
        }
        .validate(bind.parse().expect("addr"))
        .expect("valid")
    }

    #[test]
    fn loopback_names_at_any_port() {
        let v = valid(&[], &[], "127.0.0.1:0");
        assert!(v.host_allowed("localhost:8080"));
        assert!(v.host_allowed("127.0.0.1"));
        assert!(v.host_allowed("[::1]:9"));
        assert!(!v.host_allowed("evil.example:8080"));
        assert!(v.origin_allowed("http://localhost:3000"));
        assert!(!v.origin_allowed("https://evil.example"));
        assert!(!v.origin_allowed("null"));
    }

    #[test]
    fn listed_hosts_and_origins() {
        let v = valid(
            &["mcp.example", "box:7000"],
            &["https://app.example", "ui.example"],
            "0.0.0.0:0",
        );
        assert!(v.host_allowed("MCP.example:443"));
        assert!(v.host_allowed("box:7000"));
        assert!(!v.host_allowed("box:7001"));
        assert!(!v.host_allowed("localhost"));
        assert!(v.origin_allowed("https://app.example"));
        assert!(!v.origin_allowed("http://app.example"));
        assert!(v.origin_allowed("http://ui.example:81"));
    }

    #[test]
    fn open_bind_needs_hosts() {
        let e = HttpConfig::default().validate("0.0.0.0:80".parse().expect("addr"));
        assert!(matches!(e, Err(ConfigError::HostsRequired(_))));
    }

    #[test]
    fn token_compare() {
        let t = BearerToken::new("s3cret");
        assert!(t.matches("s3cret"));
        assert!(!t.matches("s3cre"));
        assert_eq!(format!("{t:?}"), "BearerToken(..)");
    }
}
