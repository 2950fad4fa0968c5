//! The process's signals, for every command that serves: SIGTERM and SIGINT
//! stop it, SIGHUP reloads.

use std::future::Future;
use std::pin::Pin;

use tokio::signal::unix::{SignalKind, signal};

/// What SIGHUP does: `false` when whoever it tells is gone.
pub type OnHangup = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Waits for SIGTERM or SIGINT, calling `on_hangup` at each SIGHUP; stops
/// waiting early if `on_hangup` returns `false` (whoever it tells is gone).
/// Without signal handlers it waits forever: nothing can then ask for a
/// stop this way.
pub async fn until_stop(mut on_hangup: impl FnMut() -> OnHangup + Send) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::warn!("cannot install signal handlers");
        return std::future::pending().await;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading");
                if !on_hangup().await {
                    return std::future::pending().await;
                }
            }
        }
    }
}
