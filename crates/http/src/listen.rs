//! Connections: accepted up to a bound, each served by hyper with bounds
//! on what a client may hold before it has sent a request.
//!
//! `axum::serve` sets no timer on hyper, so hyper's header read timeout
//! is off, and it accepts without limit: a client that sends its headers a
//! byte at a time, or opens thousands of connections and sends nothing,
//! would hold each connection and its buffer for as long as it liked. Here
//! every connection has a deadline for its request head (which also ends a
//! keep-alive connection left idle that long), a head larger than
//! [`MAX_HEADER_BYTES`] is answered 431, and past
//! [`crate::HttpConfig::max_connections`] the listener stops accepting
//! until one closes: the next connections wait in the kernel's backlog,
//! unanswered but not refused.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The largest request head (request line and headers) taken; past it,
/// 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// hyper's read buffer for one connection: a head up to
/// [`MAX_HEADER_BYTES`], and a body's bytes as they are read.
pub const READ_BUFFER_BYTES: usize = 128 * 1024;

/// How long `accept` failing (out of file descriptors, say) pauses the
/// listener before it tries again.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes, then asks
/// every connection to finish its request in progress and close, and
/// returns once they all have.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    max_connections: usize,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(max_connections));
    let closing = CancellationToken::new();
    let connections = TaskTracker::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .max_buf_size(READ_BUFFER_BYTES);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !is_connection_error(&e) {
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(ACCEPT_PAUSE).await;
                    }
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let closing = closing.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = closing.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    closing.cancel();
    connections.close();
    connections.wait().await;
}

/// An error of one connection (it was reset before it was accepted), not
/// of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
