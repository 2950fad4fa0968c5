//! From a remote server's definition to worker generations.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcpvisor_config::report::StderrTail;
use mcpvisor_config::secrets::{expand_headers, resolve_env};
use mcpvisor_config::{RemoteTransport, ServerDef};
use mcpvisor_jsonrpc::LineCodec;
use mcpvisor_session::WorkerExit as Exit;
use mcpvisor_session::writer::write_lines;
use mcpvisor_session::{SpawnFailure, Spawner, WorkerIo, WorkerReporter};
use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::generation::{Generation, Shared, Transport};
use crate::http::{Auth, Http};

/// Room in each in-memory pipe between the session and a generation.
const PIPE_BYTES: usize = 1 << 20;
/// Bound on making a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed in a row, each on the URL's own origin.
const REDIRECTS: usize = 10;
/// TCP keepalive on every connection, so that a server gone without closing
/// its side (a half-open event stream) is found by the kernel.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// Makes a generation per remote session: each spawn connects afresh, with
/// the headers read again from the entry's env file.
#[derive(Clone)]
pub struct RemoteSpawner {
    def: Arc<ServerDef>,
    url: Url,
    client: reqwest::Client,
    max_message_bytes: usize,
    ceiling: Duration,
    /// An entry without a `type` whose server turned out to speak the old
    /// HTTP+SSE transport: its later generations go there at once.
    learned_legacy: Arc<AtomicBool>,
    /// OAuth, unless the entry turns it off or sends its own
    /// `Authorization` header.
    authorizer: Option<Arc<mcpvisor_oauth::Authorizer>>,
}

impl std::fmt::Debug for RemoteSpawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSpawner")
            .field("server", &self.def.name)
            .field("host", &self.url.host_str())
            .finish_non_exhaustive()
    }
}

/// A remote server's definition that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The definition has no `url`.
    #[error("server {0:?} has no url")]
    NoUrl(String),
    /// The `url` is not a URL.
    #[error("server {0:?}: the url is not a valid http:// or https:// URL")]
    BadUrl(String),
    /// The HTTP client could not be made.
    #[error("cannot make an HTTP client: {0}")]
    Client(String),
    /// The entry's `oauth` settings cannot be used.
    #[error("{0}")]
    OAuth(String),
}

impl RemoteSpawner {
    /// A spawner for the remote server `def`; messages longer than
    /// `max_message_bytes` are not passed on, and no request waits longer
    /// than `ceiling` for its answer.
    pub fn new(
        def: &ServerDef,
        max_message_bytes: usize,
        ceiling: Duration,
    ) -> Result<Self, RemoteError> {
        let url = def
            .url
            .as_deref()
            .ok_or_else(|| RemoteError::NoUrl(def.name.clone()))?;
        let url = Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| RemoteError::BadUrl(def.name.clone()))?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(KEEPALIVE)
            .redirect(reqwest::redirect::Policy::custom(same_origin))
            .user_agent(concat!("mcpvisor/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| RemoteError::Client(e.to_string()))?;
        let authorizer = authorizer(def, &url)?;
        Ok(Self {
            def: Arc::new(def.clone()),
            url,
            client,
            max_message_bytes,
            ceiling,
            learned_legacy: Arc::new(AtomicBool::new(false)),
            authorizer,
        })
    }

    /// How the next generation speaks to the server.
    fn transport(&self) -> Transport {
        match self.def.transport {
            RemoteTransport::Http => Transport::Streamable,
            RemoteTransport::Sse => Transport::Legacy,
            RemoteTransport::Auto => Transport::Auto {
                learned: Arc::clone(&self.learned_legacy),
            },
        }
    }

    /// The headers, filled in now; errors name the header, never a value.
    fn headers(&self) -> Result<HeaderMap, SpawnFailure> {
        let values = expand_headers(&self.def).map_err(|e| SpawnFailure(e.to_string()))?;
        let mut headers = HeaderMap::new();
        for (name, value) in values {
            let key = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| SpawnFailure(format!("{name:?} is not a valid header name")))?;
            let mut value = HeaderValue::from_str(value.expose()).map_err(|_| {
                SpawnFailure(format!(
                    "header {name:?} has a value that HTTP does not allow"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(key, value);
        }
        Ok(headers)
    }
}

/// The entry's OAuth authorizer: none when its `oauth` is `false`, when it
/// sends an `Authorization` header of its own, or when there is nowhere to
/// keep tokens (no `$HOME`).
fn authorizer(
    def: &ServerDef,
    url: &Url,
) -> Result<Option<Arc<mcpvisor_oauth::Authorizer>>, RemoteError> {
    let lookup = |key: &str| {
        resolve_env(def)
            .ok()
            .and_then(|vars| vars.into_iter().find(|(k, _)| k == key))
            .map(|(_, v)| v.expose().to_owned())
            .or_else(|| std::env::var(key).ok())
    };
    let base = def.source.as_deref().and_then(std::path::Path::parent);
    let settings = mcpvisor_oauth::Settings::from_entry(&def.name, &def.extra, base, &lookup)
        .map_err(|e| RemoteError::OAuth(e.to_string()))?;
    let own_header = def
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("authorization"));
    if !settings.enabled || own_header {
        return Ok(None);
    }
    let store = match mcpvisor_oauth::Store::default_location() {
        Ok(store) => store,
        Err(why) => {
            tracing::warn!(server = %def.name, "OAuth is off: {why}");
            return Ok(None);
        }
    };
    // Asked for and not working: the server cannot be used, rather than
    // its tokens written to a file.
    let store = if settings.keyring {
        store
            .in_keyring()
            .map_err(|e| RemoteError::OAuth(format!("server {:?}: {e}", def.name)))?
    } else {
        store
    };
    let wait = def.auth_timeout.unwrap_or(mcpvisor_oauth::DEFAULT_WAIT);
    mcpvisor_oauth::Authorizer::for_server(&def.name, url, settings, store, wait)
        .map(Some)
        .map_err(|e| RemoteError::OAuth(e.to_string()))
}

/// Follows a redirect only on the first URL's origin: the entry's headers,
/// often credentials, go with every request, and an endpoint on another
/// origin is refused rather than followed. A redirect that is not followed
/// is answered as the status it is.
fn same_origin(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first().map(Url::origin);
    if attempt.previous().len() > REDIRECTS {
        attempt.error("too many redirects")
    } else if first.is_some_and(|origin| origin != attempt.url().origin()) {
        attempt.stop()
    } else {
        attempt.follow()
    }
}

impl Spawner for RemoteSpawner {
    fn spawn(
        &mut self,
        generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure> {
        let headers = self.headers()?;
        let auth = self.authorizer.as_ref().map(|authorizer| {
            let reporter = reporter.clone();
            Auth {
                authorizer: Arc::clone(authorizer),
                prompt: Arc::new(move |link: &str, reason: &str| {
                    reporter.auth_prompt(link.to_owned(), Some(reason.to_owned()));
                }),
                failure: Arc::new(Mutex::new(None)),
            }
        });
        let http = Http::new(self.client.clone(), self.url.clone(), headers, auth);
        let (session_in, ours_in) = tokio::io::duplex(PIPE_BYTES);
        let (ours_out, session_out) = tokio::io::duplex(PIPE_BYTES);
        let (out, out_rx) = mpsc::channel(1024);
        tokio::spawn(write_lines(ours_out, out_rx, None));
        let (fatal, fatal_rx) = mpsc::channel(4);
        let tail = Arc::new(Mutex::new(StderrTail::new()));
        let shared = Shared {
            http,
            generation,
            max: self.max_message_bytes,
            ceiling: self.ceiling,
            out,
            fatal,
            tail: Arc::clone(&tail),
            reporter,
            transport: self.transport(),
        };
        let stop = CancellationToken::new();
        let (exit_tx, exit_rx) = oneshot::channel();
        let input = FramedRead::new(ours_in, LineCodec::new(self.max_message_bytes));
        let token = stop.clone();
        tokio::spawn(async move {
            let exit = Generation::new(shared).run(input, token, fatal_rx).await;
            let _ = exit_tx.send(exit);
        });
        Ok(WorkerIo {
            stdin: Box::pin(session_in),
            stdout: Box::pin(session_out),
            pid: None,
            stop: Box::new(move || stop.cancel()),
            exited: Box::pin(async move {
                exit_rx.await.unwrap_or(Exit {
                    status: mcpvisor_config::ExitKind::Unknown,
                    uptime: Duration::ZERO,
                    requested: false,
                })
            }),
            stderr_tail: tail,
            // What never reached the server is reported as undelivered.
            unread: None,
        })
    }
}
