//! mcpvisor's web UI: a page and a JSON API over a running gateway.
//!
//! # Theory of operation
//!
//! The gateway's hub stays the one owner of every server's state. This
//! crate only holds a [`Monitor`] (which asks the hub, bounded, and hears
//! its broadcast events) and serves what it learns over HTTP:
//!
//! * `/` is the page (`assets/`, embedded in the binary at build time), its
//!   HTML carrying a per-process CSRF token in a `<meta>`; `/assets/*` are
//!   its script, style and icon.
//! * `/api/*` is the JSON API (`api.rs`): the servers and their pages, the
//!   actions (restart, reload, stop, start through the hub; enable and
//!   disable by editing the config file), approvals of the definitions
//!   the hub holds back since they changed (through the hub, which writes
//!   the pin store), secrets written to env files, and the add-server
//!   wizard (`inspect.rs`).
//! * `/api/events` is one server-sent event stream per page (`events.rs`):
//!   a snapshot, then every change; a reader that fell behind is sent a
//!   fresh snapshot instead of what it missed.
//! * `/metrics` is the Prometheus text of the same figures (`metrics.rs`).
//! * `/oauth/callback` is where an authorization server sends the browser
//!   back when the gateway's OAuth flows use the UI's address; the answer
//!   is handed to the flow waiting for its `state` (no UI token: the
//!   `state` binds it). `/api/oauth/paste` takes the address a browser
//!   ended on when it could not reach the redirect URI.
//!
//! Every answer but the static assets needs the token ([`auth`]): as a
//! bearer header, or as the HttpOnly cookie that `/?token=` sets. A change
//! made with the cookie must also carry the CSRF token and come from the
//! UI's own origin. Nothing here ever reads out a secret's value: env files
//! are written, never read back beyond their key names.
//!
//! Changes to the configuration (enable, disable, a new server, a new
//! `env_file`) are written to the config file ([`mcpvisor_config::edit`])
//! and then applied the way SIGHUP applies them: the caller's
//! [`Reconfigure`] reads the files again and hands the hub the new plans.

mod api;
mod assets;
pub mod auth;
mod events;
mod inspect;
mod metrics;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use mcpvisor_gateway::monitor::Monitor;

pub use api::CALLBACK_PATH as OAUTH_CALLBACK_PATH;
pub use auth::Token;

/// Reads the config files again and hands the hub the new plans: what
/// SIGHUP does. `added` names a server the person has just added to a file:
/// it is served from then on even when the gateway serves only some of the
/// files' servers (`--only`). The error is one line for the person who asked.
pub type Reconfigure = Arc<
    dyn Fn(Option<String>) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// What the UI serves and how.
#[derive(Clone)]
pub struct UiConfig {
    /// The token every request must carry.
    pub token: Token,
    /// The running gateway.
    pub monitor: Monitor,
    /// The gateway's config files, in order; a new server is added to the
    /// first.
    pub configs: Vec<PathBuf>,
    /// Applies the config files' new content.
    pub reconfigure: Reconfigure,
    /// Whether the listener is on a loopback address: then only loopback
    /// `Host` names are answered (against DNS rebinding).
    pub loopback: bool,
    pub limits: Limits,
}

/// The UI's bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body.
    pub max_body: usize,
    /// Event streams open at once; one more gets 503.
    pub max_streams: usize,
    /// Inspections running at once; one more gets 429.
    pub max_inspections: usize,
    /// Inspections remembered (finished ones are forgotten first).
    pub max_jobs: usize,
    /// How long one inspection may take (a first `npx` run downloads).
    pub inspect_timeout: Duration,
    /// A finished inspection is forgotten this long after it ended.
    pub job_ttl: Duration,
    /// A comment is sent on an idle event stream this often.
    pub keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body: 64 * 1024,
            max_streams: 32,
            max_inspections: 3,
            max_jobs: 32,
            inspect_timeout: Duration::from_secs(120),
            job_ttl: Duration::from_secs(15 * 60),
            keep_alive: Duration::from_secs(15),
        }
    }
}

impl std::fmt::Debug for UiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiConfig")
            .field("token", &self.token)
            .field("configs", &self.configs)
            .field("loopback", &self.loopback)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The UI's routes: `/`, `/assets/*`, `/api/*` and `/metrics`. They do not
/// overlap the MCP endpoint's, so the router may be merged with the HTTP
/// front's on one listener.
pub fn router(cfg: UiConfig) -> Router {
    api::router(Arc::new(api::Shared::new(cfg)))
}
