//! mcpvisor's Streamable HTTP front.
//!
//! # Theory of operation
//!
//! The gateway's hub serves fronts through the channel protocol of
//! [`mcpvisor_gateway::fronts`]. Over HTTP each MCP session is one front:
//! `initialize` opens it (and mints an unguessable `Mcp-Session-Id`),
//! DELETE or idle expiry closes it. A sessionless request of 2026-07-28 or
//! later gets a throwaway front that closes once it is answered, after the
//! checks that revision asks of it (`modern.rs`: `_meta`, the headers
//! against the body, the version, removed methods).
//!
//! Each front is owned by one session task (`session.rs`). It reads the
//! hub's messages and puts each on the one stream it belongs to: the POST
//! that carried the request it relates to, or the session's standalone GET
//! stream. Every stream keeps a bounded buffer of its events for
//! resumption with `Last-Event-ID`, and every connection reading a stream
//! has a bounded queue: a reader that falls behind is cut off rather than
//! waited for, so the hub is never slowed by a client.
//!
//! Connections (`listen.rs`) are bounded in number, and each must send its
//! request head within a deadline and a size (431 past it).
//!
//! Request handlers (`server.rs`) check Host, Origin and the bearer token,
//! then the media types and size, and peek at the message's envelope to
//! route it: a request waits for its response (answered as JSON when the
//! response comes first, else as an event stream that ends with it); a
//! notification or response is handed on and gets 202.
//!
//! Older clients speak the HTTP+SSE transport of 2024-11-05 (`legacy.rs`):
//! `GET /sse` opens a session whose one stream carries everything, its
//! messages are POSTed to `/messages?session_id=`. Such a session is the
//! same session task with one stream and no resumption.
//!
//! Shutdown drains: readiness turns 503, new sessions, streams and requests
//! are refused, requests in flight may finish within the drain period, then
//! every session closes its front. The drain lasts at least its minimum, so
//! that a load balancer polling readiness has stopped sending requests
//! before the connections close (a request it sent on a connection closed
//! under it would fail without an answer).

mod config;
mod legacy;
mod listen;
mod modern;
mod server;
mod session;
mod sse;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mcpvisor_gateway::fronts::FrontCommand;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub use config::{BearerToken, ConfigError, HttpConfig, bearer};
pub use listen::{MAX_HEADER_BYTES, READ_BUFFER_BYTES};
pub use server::FRONT_ID_BASE;

/// How long connections and sessions get to wind down after the drain.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Why [`serve`] stopped before its shutdown signal.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the HTTP listener failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves MCP's Streamable HTTP on `listener`, every session a front of the
/// hub that reads `hub`.
///
/// The configuration is checked before anything is served. When `shutdown`
/// completes the front drains (see the crate docs) and then returns.
pub async fn serve<S>(
    listener: TcpListener,
    cfg: HttpConfig,
    hub: mpsc::Sender<FrontCommand>,
    shutdown: S,
) -> Result<(), ServeError>
where
    S: Future<Output = ()> + Send + 'static,
{
    serve_with(listener, cfg, hub, shutdown, axum::Router::new()).await
}

/// Serves `router` alone on `listener` (the web UI on a port of its own),
/// with the front's bounds on connections at their defaults (see
/// [`HttpConfig::max_connections`] and [`HttpConfig::header_timeout`]),
/// until the task is dropped.
pub async fn serve_router(listener: TcpListener, router: axum::Router) {
    let cfg = HttpConfig::default();
    listen::serve(
        listener,
        router,
        cfg.max_connections,
        cfg.header_timeout,
        std::future::pending(),
    )
    .await;
}

/// [`serve`], with `extra`'s routes (which must not overlap the endpoint,
/// `/healthz` or `/readyz`) answered on the same listener, such as the web
/// UI's.
pub async fn serve_with<S>(
    listener: TcpListener,
    cfg: HttpConfig,
    hub: mpsc::Sender<FrontCommand>,
    shutdown: S,
    extra: axum::Router,
) -> Result<(), ServeError>
where
    S: Future<Output = ()> + Send + 'static,
{
    let local = listener.local_addr()?;
    let cfg = cfg.validate(local)?;
    let drain = cfg.cfg.drain;
    let drain_min = cfg.cfg.drain_min;
    let shared = Arc::new(server::Shared::new(cfg, hub));
    tracing::info!(%local, path = %shared.cfg.cfg.path, "serving MCP over HTTP");

    let drained = {
        let shared = shared.clone();
        async move {
            shutdown.await;
            tracing::info!("HTTP front draining");
            let started = tokio::time::Instant::now();
            shared.draining.cancel();
            if tokio::time::timeout(drain, shared.in_flight.idle())
                .await
                .is_err()
            {
                tracing::warn!("requests still in flight after the drain period; closing");
            }
            tokio::time::sleep_until(started + drain_min).await;
            shared.stop.cancel();
        }
    };
    let server = listen::serve(
        listener,
        server::router(shared.clone()).merge(extra),
        shared.cfg.cfg.max_connections,
        shared.cfg.cfg.header_timeout,
        drained,
    );
    let stop = shared.stop.clone();
    tokio::select! {
        () = server => {}
        // A connection that does not end after its session closed (a
        // reader that stopped reading) is not waited for.
        () = async { stop.cancelled().await; tokio::time::sleep(CLOSE_GRACE).await } => {}
    }
    shared.tasks.close();
    if tokio::time::timeout(CLOSE_GRACE, shared.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("some HTTP sessions did not close in time");
    }
    Ok(())
}
