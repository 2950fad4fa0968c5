//! Why authorization did not succeed, in words a person can act on. No
//! variant carries a token, a code, a verifier or a secret.

/// Authorization failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// Discovery found metadata that cannot be used, or none.
    #[error("OAuth discovery: {0}")]
    Discovery(String),
    /// The authorization server does not offer what the specification
    /// requires (PKCE S256).
    #[error("the authorization server {issuer} {what}; mcpvisor will not authorize with it")]
    Unsupported {
        /// The issuer.
        issuer: String,
        /// What it lacks.
        what: String,
    },
    /// No client could be had: nothing configured, no client ID metadata
    /// document support, no registration endpoint.
    #[error(
        "the authorization server {0} offers no dynamic client registration: give a client_id (oauth.client_id, or --client-id)"
    )]
    NoClient(String),
    /// Dynamic registration failed.
    #[error("client registration at {issuer} failed: {detail}")]
    Registration {
        /// The issuer.
        issuer: String,
        /// What the server said.
        detail: String,
    },
    /// The browser's answer is an error, or does not check out.
    #[error("authorization refused: {0}")]
    Refused(String),
    /// Nobody completed the flow in time.
    #[error(
        "nobody completed the authorization within {0:?}; run `mcpvisor auth login` to try again"
    )]
    TimedOut(std::time::Duration),
    /// The token endpoint refused the code or the refresh token.
    #[error("the token request failed: {0}")]
    Token(String),
    /// The authorization server is unavailable or asks us to slow down; no
    /// request is made before the pause is over.
    #[error("the authorization server is unavailable ({0}); trying again after {1:?}")]
    Backoff(String, std::time::Duration),
    /// The server keeps asking for scopes after the step-ups allowed.
    #[error("the server still refuses with insufficient_scope after {0} authorizations; giving up")]
    StepUpLimit(u32),
    /// A person must authorize, and this process does not ask one: the
    /// message says how.
    #[error("the server needs authorization: run `mcpvisor auth login {0}`")]
    NeedsLogin(String),
    /// Reading or writing the token store failed.
    #[error("token store: {0}")]
    Store(String),
    /// The loopback listener could not be opened.
    #[error("cannot listen for the authorization's redirect on 127.0.0.1: {0}")]
    Listener(String),
}
