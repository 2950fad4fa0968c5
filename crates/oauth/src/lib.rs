//! OAuth 2.1 authorization for remote MCP servers, as the MCP
//! specification's authorization pages (2025-03-26 to 2026-07-28) ask of a
//! client.
//!
//! # Theory of operation
//!
//! One [`Authorizer`] per server URL in a process ([`Authorizer::for_server`]
//! hands out the same one to every caller), so that whatever the number of
//! sessions, requests and generations that find the server wants
//! authorization, there is one flow, one browser tab and one refresh at a
//! time.
//!
//! The remote transport asks it for a bearer token before each request
//! ([`Authorizer::bearer`]: the stored one, refreshed first when it is about
//! to expire) and hands it the server's challenge when an answer is a 401,
//! or a 403 with `insufficient_scope` ([`Authorizer::authorize`]). Then:
//!
//! 1. **Discovery** ([`discovery`]): the protected resource metadata (the
//!    challenge's `resource_metadata`, else the path-based well-known URL,
//!    else the root one), whose `resource` must be the server's; then the
//!    authorization server's metadata by RFC 8414 and OpenID discovery in
//!    the specification's order, whose `issuer` must be the one asked for.
//!    A server with neither (2025-03-26) gets `/authorize`, `/token` and
//!    `/register` at its root.
//! 2. **A refresh** when a refresh token for the same issuer is held: under
//!    a lock file shared by every mcpvisor process, after re-reading the
//!    store (another process may have refreshed already, and a rotated
//!    refresh token must never be lost). `invalid_grant` means authorize
//!    again; a 429 or 5xx backs off instead of retrying at once.
//! 3. **Otherwise the browser flow** ([`callback`]): a client (configured
//!    credentials, a client ID metadata document URL, or dynamic
//!    registration with `application_type: native`, kept per issuer), PKCE
//!    S256 (refused when the server does not offer it), `state`, the
//!    resource indicator (off per entry), the scopes of the challenge or
//!    else the metadata's `scopes_supported`, a loopback listener on a port
//!    that stays the same for a server, and the `iss` of the response checked
//!    against the issuer (RFC 9207). The link is handed to a prompt (the CLI
//!    prints it, the session reports it) and opened with `$BROWSER` or the
//!    desktop's opener when asked; a person who cannot reach the loopback
//!    listener pastes the URL the browser landed on ([`paste`]). A gateway
//!    with a web UI sends the redirects to the UI's `/oauth/callback`
//!    instead ([`set_redirect_uri`]), which hands them on ([`deliver`]).
//!
//! Tokens live in a [`Store`] under `$XDG_STATE_HOME/mcpvisor/oauth`, one
//! file per server (mode 0600, written atomically), keyed by server URL and
//! issuer. Token values are [`Secret`]s: their `Debug` is a mask, and no
//! error or log line carries a token, a code or a verifier.

mod authorizer;
pub mod callback;
pub mod challenge;
pub mod discovery;
mod error;
mod registration;
mod secret;
mod settings;
pub mod state;
pub mod store;

pub use authorizer::{
    Authorizer, DEFAULT_WAIT, NOT_AUTHORIZED_YET, Prompt, deliver, paste, set_open_browser,
    set_redirect_uri,
};
pub use challenge::Challenge;
pub use error::AuthError;
pub use secret::Secret;
pub use settings::{Settings, SettingsError};
pub use store::{Store, StoredServer};
