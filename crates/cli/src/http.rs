//! `--http ADDR`: serving `serve` or `run` over Streamable HTTP instead of
//! stdio.
//!
//! The hub is the same; only the front differs. SIGTERM and SIGINT drain
//! the HTTP front first (new sessions get 503, requests in flight finish
//! within `--http-drain`), then the servers are stopped. SIGHUP reloads.
//! `/readyz` turns ready once the eager servers have started or failed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use mcpvisor_gateway::fronts::FrontCommand;
use mcpvisor_gateway::monitor::{Monitor, ServerState};
use mcpvisor_gateway::{Control, Hub, Outcome, ServerPlan, Settings};
use mcpvisor_http::{BearerToken, HttpConfig};
use tokio::sync::{mpsc, watch};

use crate::cli::parse_duration;

/// The flags of the HTTP front, shared by `serve` and `run`.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// Serve over Streamable HTTP at this address instead of stdio, e.g. 127.0.0.1:8808 (port 0 picks a free one). stdin is not read.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// The MCP endpoint's path.
    #[arg(long, default_value = "/mcp", value_name = "PATH", requires = "http")]
    pub http_path: String,
    /// Also accept requests whose Origin is this (a browser page's); repeatable. Loopback origins are allowed on a loopback bind.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allow_origin: Vec<String>,
    /// Also answer to this Host (name or name:port, or *); repeatable. Loopback names are allowed on a loopback bind.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub allow_host: Vec<String>,
    /// Require `Authorization: Bearer TOKEN`, with TOKEN read from this file (for --http and --ui). Needed for an address that is not loopback.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// Most HTTP sessions at once; past it, initialize gets 503.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..), requires = "http")]
    pub max_sessions: u32,
    /// Most HTTP connections at once; past it, new connections wait (in the kernel's backlog) until one closes.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..), requires = "http")]
    pub max_connections: u32,
    /// How long a connection may take to send a request's headers, or stay idle between requests, before it is closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "http")]
    pub http_header_timeout: Duration,
    /// An HTTP session idle this long is closed (its id then gets 404).
    #[arg(long, default_value = "30m", value_parser = parse_duration, requires = "http")]
    pub session_idle_timeout: Duration,
    /// On SIGTERM, how long requests in flight may still finish before the servers stop.
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "http")]
    pub http_drain: Duration,
    /// On SIGTERM, keep answering (/readyz and new sessions with 503) at least this long, even with nothing in flight: set it above a load balancer's readiness check interval, so that it stops sending here before the connections close.
    #[arg(long, default_value = "0s", value_parser = parse_duration, requires = "http")]
    pub http_drain_min: Duration,
    /// Close a 2025-11-25 client's request stream after it has been open this long (the client resumes it with Last-Event-ID): SSE polling. Off by default.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "http")]
    pub http_sse_poll: Option<Duration>,
    /// How long a 2025-11-25 client waits before reconnecting to a stream the server closed (the priming event's `retry`).
    #[arg(long, default_value = "1s", value_name = "DUR", value_parser = parse_duration, requires = "http")]
    pub http_sse_retry: Duration,
}

impl HttpArgs {
    /// The front's settings, checked: a non-loopback address needs a token.
    /// `ui` says whether a web UI uses `--auth-token-file` too.
    pub fn config(
        &self,
        max_message_bytes: usize,
        max_in_flight: usize,
        ui: bool,
    ) -> Result<Option<(SocketAddr, HttpConfig)>, String> {
        let Some(addr) = self.http else {
            if self.auth_token_file.is_some() && !ui {
                return Err("--auth-token-file is for --http (or serve's --ui)".to_owned());
            }
            return Ok(None);
        };
        let token = match &self.auth_token_file {
            Some(path) => Some(read_token(path)?),
            None if !addr.ip().is_loopback() => {
                return Err(format!(
                    "--http {addr} is not a loopback address: give --auth-token-file FILE so that only clients with the token are served"
                ));
            }
            None => None,
        };
        let cfg = HttpConfig {
            path: self.http_path.clone(),
            allow_origins: self.allow_origin.clone(),
            allow_hosts: self.allow_host.clone(),
            token,
            max_message_bytes,
            max_sessions: self.max_sessions as usize,
            max_connections: self.max_connections as usize,
            header_timeout: self.http_header_timeout,
            session_idle_timeout: self.session_idle_timeout,
            max_in_flight,
            drain: self.http_drain,
            drain_min: self.http_drain_min,
            sse_poll: self.http_sse_poll,
            sse_retry: self.http_sse_retry,
            ..HttpConfig::default()
        };
        Ok(Some((addr, cfg)))
    }
}

/// The bearer token in `path`: its content without surrounding whitespace.
/// The error never quotes the file's content.
fn read_token(path: &std::path::Path) -> Result<BearerToken, String> {
    read_token_text(path).map(|token| BearerToken::new(&token))
}

/// The token in `path`, trimmed; the error never quotes the content.
pub fn read_token_text(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--auth-token-file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!(
            "--auth-token-file {}: the file is empty",
            path.display()
        ));
    }
    Ok(token.to_owned())
}

/// The web UI on the HTTP front's listener: given the bound address, its
/// routes and the runtime file that lives as long as they are served.
pub type SharedUi =
    Box<dyn FnOnce(SocketAddr) -> (axum::Router, Option<crate::ui::RuntimeFile>) + Send>;

/// Serves `plans` over HTTP until SIGTERM/SIGINT, then drains and stops.
/// `reload` says what SIGHUP does (fresh plans, a reload, or nothing).
pub async fn serve(
    addr: SocketAddr,
    cfg: HttpConfig,
    settings: Settings,
    plans: Vec<ServerPlan>,
    control: (mpsc::Sender<Control>, mpsc::Receiver<Control>),
    reload: impl Fn() -> Option<Control> + Send + 'static,
    ui: Option<SharedUi>,
) -> Result<Outcome, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let (control_tx, control_rx) = control;
    let (fronts_tx, fronts_rx) = mpsc::channel::<FrontCommand>(1024);
    let hub = tokio::spawn(Hub::serve(settings, plans, fronts_rx, control_rx, None));
    let (ready_tx, ready_rx) = watch::channel(false);
    let cfg = HttpConfig {
        ready: Some(ready_rx),
        ..cfg
    };
    let readiness = tokio::spawn(settle(Monitor::new(control_tx.clone()).0, ready_tx));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let signals = tokio::spawn(watch_signals(stop_tx, control_tx.clone(), reload));
    // The front also drains when the hub ends before it: the hub ends on
    // its own only by failing, and a front with no hub behind it would
    // answer nothing but errors.
    let (hub_ended_tx, hub_ended_rx) = tokio::sync::oneshot::channel::<()>();
    let path = cfg.path.clone();
    let (extra, runtime_file) = match ui {
        Some(ui) => ui(local),
        None => (axum::Router::new(), None),
    };
    let front = tokio::spawn(mcpvisor_http::serve_with(
        listener,
        cfg,
        fronts_tx,
        async {
            tokio::select! {
                _ = stop_rx => {}
                _ = hub_ended_rx => {}
            }
        },
        extra,
    ));
    crate::output::announce(&format!("mcpvisor: listening on http://{local}{path}"));
    tracing::info!("listening on http://{local}{path}");
    let mut front = front;
    let mut hub = hub;
    let (served, ended) = tokio::select! {
        served = &mut front => {
            // The front has drained: now the servers stop.
            let _ = control_tx.send(Control::Shutdown).await;
            (served, hub.await)
        }
        ended = &mut hub => {
            if let Err(e) = &ended {
                tracing::error!(error = %e, "the gateway stopped; the HTTP front drains");
            }
            let _ = hub_ended_tx.send(());
            (front.await, ended)
        }
    };
    signals.abort();
    readiness.abort();
    drop(runtime_file);
    outcome_of(served, ended)
}

/// What `serve` ends with: the hub's outcome when both the front and the
/// hub ended well; otherwise the first failure, the hub's before the
/// front's (a front that failed because the hub did says less).
fn outcome_of(
    served: Result<Result<(), mcpvisor_http::ServeError>, tokio::task::JoinError>,
    hub: Result<Outcome, tokio::task::JoinError>,
) -> Result<Outcome, String> {
    let outcome = hub.map_err(|e| format!("the gateway stopped: {e}"))?;
    match served {
        Ok(Ok(())) => Ok(outcome),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the HTTP front failed: {e}")),
    }
}

/// How often readiness asks the hub whether its eager servers have settled.
const READINESS_POLL: Duration = Duration::from_millis(100);

/// Turns `/readyz` ready once every eager server has started or failed (its
/// first start is over either way): until then a session would find its
/// tools missing. Ready stays ready; a server that fails later is reported
/// in its requests' errors, not by taking the whole gateway out.
async fn settle(monitor: Monitor, ready: watch::Sender<bool>) {
    loop {
        if let Ok(snapshot) = monitor.snapshot().await {
            // The hub starts its eager servers before it answers anything,
            // so none of them is still idle here.
            let starting = snapshot
                .servers
                .iter()
                .any(|s| !s.lazy && s.state == ServerState::Starting);
            if !starting {
                tracing::info!("ready: every eager server has started or failed");
                let _ = ready.send(true);
                return;
            }
        }
        tokio::time::sleep(READINESS_POLL).await;
    }
}

/// SIGTERM and SIGINT start the drain; SIGHUP reloads.
async fn watch_signals(
    stop: tokio::sync::oneshot::Sender<()>,
    control: mpsc::Sender<Control>,
    reload: impl Fn() -> Option<Control> + Send,
) {
    let hub = control.clone();
    crate::signals::until_stop(move || {
        let hub = hub.clone();
        let asked = reload();
        Box::pin(async move {
            match asked {
                Some(asked) => hub.send(asked).await.is_ok(),
                None => true,
            }
        })
    })
    .await;
    tracing::info!("signal: draining the HTTP front, then stopping");
    let _ = stop.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn joined<T: Send + 'static>(
        task: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        tokio::spawn(task).await
    }

    #[tokio::test]
    async fn a_hub_that_panicked_is_an_error_not_a_clean_shutdown() {
        let hub = joined(async { panic!("a bug in the hub") }).await;
        let front = joined(async { Ok::<(), mcpvisor_http::ServeError>(()) }).await;
        let err = outcome_of(front, hub).expect_err("a panicked hub is an error");
        assert!(err.starts_with("the gateway stopped:"), "{err}");
        assert!(err.contains("panic"), "{err}");
    }

    #[tokio::test]
    async fn the_hub_s_outcome_is_the_end_when_both_ended_well() {
        let hub = joined(async { Outcome::Shutdown }).await;
        let front = joined(async { Ok::<(), mcpvisor_http::ServeError>(()) }).await;
        assert!(matches!(outcome_of(front, hub), Ok(Outcome::Shutdown)));
    }

    #[tokio::test]
    async fn a_front_that_panicked_is_an_error() {
        let hub = joined(async { Outcome::Shutdown }).await;
        let front = joined(async {
            panic!("a bug in the front");
            #[allow(unreachable_code)]
            Ok::<(), mcpvisor_http::ServeError>(())
        })
        .await;
        let err = outcome_of(front, hub).expect_err("a panicked front is an error");
        assert!(err.starts_with("the HTTP front failed:"), "{err}");
    }
}
