//! One server's authorization: the token to send, and what to do when the
//! server refuses it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use oauth2::basic::{BasicClient, BasicErrorResponseType};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, HttpRequest,
    HttpResponse, PkceCodeChallenge, RedirectUrl, RefreshToken, RequestTokenError, Scope,
    StandardErrorResponse, TokenResponse as _, TokenUrl,
};
use reqwest::Url;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::callback::{self, Arrival, Listener};
use crate::discovery::{self, Discovered};
use crate::registration::{self, Origin};
use crate::store::{StoredClient, StoredServer, StoredTokens, now_secs};
use crate::{AuthError, Challenge, Secret, Settings, Store};

/// Shown the authorization link when a person must open it, with why the
/// server needs authorizing (one short line, never a token: "not
/// authorized yet", "its refresh was refused: invalid_grant ...").
pub type Prompt = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// The reason given for a server never authorized here.
pub const NOT_AUTHORIZED_YET: &str = "not authorized yet";
/// Most characters of a reason (an authorization server's description may
/// be long).
const REASON_CHARS: usize = 200;

/// A token is refreshed when it expires within this.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// Step-ups in a row (403 `insufficient_scope` without a success between)
/// before giving up.
const STEP_UPS: u32 = 2;
/// Bound on each request to an authorization server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of a token endpoint's answer.
const TOKEN_ANSWER_BYTES: usize = 256 * 1024;
/// The first pause after a 429 or 5xx; it doubles up to `BACKOFF_MAX`.
const BACKOFF_FIRST: Duration = Duration::from_secs(15);
const BACKOFF_MAX: Duration = Duration::from_secs(600);
/// A token this young that the server refuses is not renewed: the server
/// refuses what its authorization server issues.
const FRESH: Duration = Duration::from_secs(10);
/// The default bound on the wait for a person.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(300);

static OPEN_BROWSER: AtomicBool = AtomicBool::new(false);
static AUTHORIZERS: LazyLock<Mutex<HashMap<String, Weak<Authorizer>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
/// The redirect URI flows use instead of the loopback listener's (a
/// gateway's web UI, whose `/oauth/callback` hands the answer on).
static REDIRECT_URI: Mutex<Option<String>> = Mutex::new(None);
/// Flows waiting for their redirect, by `state`, for pasted URLs and
/// answers that land elsewhere than the loopback listener.
static WAITING: LazyLock<Mutex<HashMap<String, mpsc::Sender<Arrival>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether this process opens the authorization link in a browser (the
/// CLI's commands do; a gateway shows the link instead).
pub fn set_open_browser(on: bool) {
    OPEN_BROWSER.store(on, Ordering::Relaxed);
}

/// Sends the authorization server's redirects of this process's flows to
/// `uri` (a gateway's web UI: `https://HOST/oauth/callback`) instead of a
/// loopback listener; `None` goes back to the loopback listener. The
/// answer that lands there is handed on with [`deliver`].
pub fn set_redirect_uri(uri: Option<String>) {
    if let Ok(mut slot) = REDIRECT_URI.lock() {
        *slot = uri;
    }
}

/// The redirect URI set by [`set_redirect_uri`].
fn redirect_uri() -> Option<String> {
    REDIRECT_URI.lock().ok().and_then(|slot| slot.clone())
}

/// Completes a waiting flow with the URL the browser landed on (for a
/// person whose browser cannot reach the loopback listener).
pub async fn paste(url: &str) -> Result<(), String> {
    let params = callback::params_of(url)
        .ok_or("that is not the URL of an authorization answer (it has no query)")?;
    deliver(params).await
}

/// Hands a redirect's query parameters to the flow waiting for their
/// `state`, and waits (bounded) for its verdict. An answer whose `state` no
/// flow of this process is waiting for (unknown, already used, or of a flow
/// that is over) is refused.
pub async fn deliver(params: BTreeMap<String, String>) -> Result<(), String> {
    let state = params.get("state").cloned().unwrap_or_default();
    let sender = WAITING
        .lock()
        .ok()
        .and_then(|w| w.get(&state).cloned())
        .ok_or("no authorization in progress is waiting for that answer")?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    sender
        .send(Arrival {
            params,
            verdict: Some(tx),
        })
        .await
        .map_err(|_| "that authorization is over".to_owned())?;
    match tokio::time::timeout(Duration::from_secs(60), rx).await {
        Ok(Ok(verdict)) => verdict,
        _ => Err("the authorization did not finish".into()),
    }
}

/// One server's authorization, shared by every caller in the process.
pub struct Authorizer {
    name: String,
    server: Url,
    key: String,
    settings: Settings,
    store: Store,
    http: reqwest::Client,
    wait: Duration,
    /// Held across a refresh or a flow: one at a time per server.
    busy: tokio::sync::Mutex<Backoff>,
    /// What discovery found last.
    found: Mutex<Option<Discovered>>,
    step_ups: AtomicU32,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("server", &self.name)
            .field("host", &self.server.host_str())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Backoff {
    until: Option<Instant>,
    next: Option<Duration>,
    why: String,
}

impl Authorizer {
    /// The authorizer of the server at `server` (named `name` in
    /// messages): the one already made in this process for the same URL,
    /// or a new one.
    pub fn for_server(
        name: &str,
        server: &Url,
        settings: Settings,
        store: Store,
        wait: Duration,
    ) -> Result<Arc<Self>, AuthError> {
        let key = server.as_str().to_owned();
        let mut all = AUTHORIZERS
            .lock()
            .map_err(|_| AuthError::Store("poisoned".into()))?;
        all.retain(|_, weak| weak.strong_count() > 0);
        if let Some(existing) = all.get(&key).and_then(Weak::upgrade) {
            if existing.settings == settings && existing.store.dir() == store.dir() {
                return Ok(existing);
            }
        }
        let authorizer = Arc::new(Self::unshared(name, server, settings, store, wait)?);
        all.insert(key, Arc::downgrade(&authorizer));
        Ok(authorizer)
    }

    /// An authorizer of its own, as another process would have.
    fn unshared(
        name: &str,
        server: &Url,
        settings: Settings,
        store: Store,
        wait: Duration,
    ) -> Result<Self, AuthError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("mcpvisor/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AuthError::Discovery(e.to_string()))?;
        Ok(Self {
            name: name.to_owned(),
            server: server.clone(),
            key: server.as_str().to_owned(),
            settings,
            store,
            http,
            wait,
            busy: tokio::sync::Mutex::new(Backoff::default()),
            found: Mutex::new(None),
            step_ups: AtomicU32::new(0),
        })
    }

    /// The server's URL.
    pub fn server(&self) -> &Url {
        &self.server
    }

    fn load(&self) -> Result<StoredServer, AuthError> {
        Ok(self
            .store
            .load(&self.key)
            .map_err(AuthError::Store)?
            .unwrap_or_else(|| StoredServer {
                server: self.key.clone(),
                ..StoredServer::default()
            }))
    }

    /// The access token to send, refreshed first when it is about to
    /// expire; `None` before the first authorization.
    pub async fn bearer(&self) -> Option<Secret> {
        let tokens = self.load().ok()?.tokens?;
        if tokens.needs_refresh(REFRESH_MARGIN) && tokens.refresh_token.is_some() {
            let mut backoff = self.busy.lock().await;
            match self.refresh(&mut backoff, &tokens.access_token, None).await {
                Ok(fresh) => return Some(fresh.access_token),
                Err(e) => {
                    tracing::info!(server = %self.name, error = %e, "refresh before expiry failed")
                }
            }
            return self.load().ok()?.tokens.map(|t| t.access_token);
        }
        Some(tokens.access_token)
    }

    /// A request with the token `used` got `challenge` (a 401, or a 403
    /// asking for scopes): refreshes, or authorizes again through a person
    /// shown the link by `prompt` (none: say how to log in instead). `Ok`
    /// when a new token is stored, to retry the request with.
    pub async fn authorize(
        &self,
        challenge: &Challenge,
        used: Option<&Secret>,
        prompt: Option<&Prompt>,
    ) -> Result<(), AuthError> {
        let mut backoff = self.busy.lock().await;
        let stored = self.load()?;
        let step_up = challenge.insufficient_scope();
        // Another caller may have got a new token while this one waited.
        if let Some(tokens) = &stored.tokens {
            if !step_up && used != Some(&tokens.access_token) {
                return Ok(());
            }
        }
        if let Some(until) = backoff.until {
            if Instant::now() < until {
                return Err(AuthError::Backoff(
                    backoff.why.clone(),
                    until - Instant::now(),
                ));
            }
        }
        let found = discovery::discover(&self.http, &self.server, challenge).await?;
        self.found
            .lock()
            .map_err(|_| AuthError::Store("poisoned".into()))?
            .replace(found.clone());
        let mut scopes = self.scopes_for(challenge, &found);
        let mut reason = match &stored.tokens {
            None => stored
                .reason
                .clone()
                .unwrap_or_else(|| NOT_AUTHORIZED_YET.to_owned()),
            Some(_) if step_up => format!(
                "the server asks for more scopes ({})",
                challenge.scopes().join(" ")
            ),
            Some(tokens) if tokens.issuer != found.issuer => format!(
                "its authorization server changed (from {} to {})",
                tokens.issuer, found.issuer
            ),
            Some(tokens) if tokens.refresh_token.is_none() => {
                "the server refused its token, and no refresh token came with it".to_owned()
            }
            Some(_) => "the server refused its token".to_owned(),
        };
        if step_up {
            let made = self.step_ups.fetch_add(1, Ordering::Relaxed) + 1;
            if made > STEP_UPS {
                return Err(AuthError::StepUpLimit(made - 1));
            }
            if let Some(held) = stored.tokens.as_ref().filter(|t| t.issuer == found.issuer) {
                for scope in &held.scopes {
                    if !scopes.contains(scope) {
                        scopes.push(scope.clone());
                    }
                }
            }
        } else if let Some(tokens) = &stored.tokens {
            let same_issuer = tokens.issuer == found.issuer;
            let fresh = tokens
                .issued_at
                .is_some_and(|at| now_secs() < at.saturating_add(FRESH.as_secs()));
            if same_issuer && fresh && used == Some(&tokens.access_token) {
                // Refreshing or authorizing again would only do the same.
                return Err(AuthError::Refused(
                    "the server refuses the token its authorization server just issued".into(),
                ));
            }
            if same_issuer && tokens.refresh_token.is_some() {
                match self
                    .refresh(&mut backoff, &tokens.access_token, Some(&found))
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(e @ AuthError::Backoff(..)) => return Err(e),
                    Err(e) => {
                        tracing::info!(server = %self.name, error = %e, "the refresh failed; authorizing again");
                        reason = match e {
                            AuthError::Token(why) => format!("its refresh was refused: {why}"),
                            other => format!("its refresh failed: {other}"),
                        };
                    }
                }
            }
        }
        let Some(prompt) = prompt else {
            return Err(AuthError::NeedsLogin(self.name.clone()));
        };
        self.flow(&found, scopes, prompt, &short(&reason)).await
    }

    /// A request went through: the step-ups begin again from none.
    pub fn succeeded(&self) {
        self.step_ups.store(0, Ordering::Relaxed);
    }

    /// Authorizes afresh, whatever is stored: `mcpvisor auth login`.
    pub async fn login(&self, prompt: &Prompt) -> Result<StoredTokens, AuthError> {
        let _busy = self.busy.lock().await;
        let challenge = self.probe().await;
        let found = discovery::discover(&self.http, &self.server, &challenge).await?;
        let scopes = self.scopes_for(&challenge, &found);
        self.flow(&found, scopes, prompt, "asked to log in").await?;
        self.load()?
            .tokens
            .ok_or_else(|| AuthError::Store("the tokens were not stored".into()))
    }

    /// The challenge of an unauthorized `initialize`, for its hints (an
    /// empty one when the server does not send one).
    async fn probe(&self) -> Challenge {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "mcpvisor", "version": env!("CARGO_PKG_VERSION")}}
        });
        match self
            .http
            .post(self.server.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&body)
            .send()
            .await
        {
            Ok(response) => Challenge::from_headers(response.status().as_u16(), response.headers()),
            Err(_) => Challenge::default(),
        }
    }

    /// The scopes to ask for: the entry's, else the challenge's, else the
    /// resource metadata's `scopes_supported`, else none; with
    /// `offline_access` added when the authorization server lists it.
    fn scopes_for(&self, challenge: &Challenge, found: &Discovered) -> Vec<String> {
        let mut scopes = if let Some(configured) = &self.settings.scopes {
            configured.clone()
        } else if !challenge.scopes().is_empty() {
            challenge.scopes()
        } else {
            found.resource_scopes.clone().unwrap_or_default()
        };
        let offline = "offline_access";
        let offered = found
            .metadata
            .scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|s| s == offline));
        if offered && !scopes.is_empty() && !scopes.iter().any(|s| s == offline) {
            scopes.push(offline.to_owned());
        }
        scopes
    }

    /// Refreshes the token `used`, under the store's lock: when another
    /// process refreshed it meanwhile, its token is taken instead.
    async fn refresh(
        &self,
        backoff: &mut Backoff,
        used: &Secret,
        found: Option<&Discovered>,
    ) -> Result<StoredTokens, AuthError> {
        if let Some(until) = backoff.until {
            if Instant::now() < until {
                return Err(AuthError::Backoff(
                    backoff.why.clone(),
                    until - Instant::now(),
                ));
            }
        }
        let _lock = self.store.lock(&self.key).await.map_err(AuthError::Store)?;
        let mut stored = self.load()?;
        let tokens = stored
            .tokens
            .clone()
            .ok_or_else(|| AuthError::Token("no tokens are stored".into()))?;
        if &tokens.access_token != used && !tokens.needs_refresh(REFRESH_MARGIN) {
            tracing::debug!(server = %self.name, "another process refreshed the token");
            return Ok(tokens);
        }
        let refresh_token = tokens
            .refresh_token
            .clone()
            .ok_or_else(|| AuthError::Token("no refresh token was issued".into()))?;
        let found = match found {
            Some(found) => found.clone(),
            None => self.discovered().await?,
        };
        if found.issuer != tokens.issuer {
            return Err(AuthError::Token("the authorization server changed".into()));
        }
        let client = stored
            .clients
            .get(&tokens.issuer)
            .cloned()
            .or_else(|| self.configured_client(&found))
            .ok_or_else(|| AuthError::Token("no client is kept for the issuer".into()))?;
        let oauth = self.oauth_client(&found, &client, None)?;
        let refresh = RefreshToken::new(refresh_token.expose().to_owned());
        let mut request = oauth.exchange_refresh_token(&refresh);
        if self.settings.resource {
            request = request.add_extra_param("resource", found.resource.clone());
        }
        let status = Arc::new(AtomicU16::new(0));
        let sender = self.sender(Arc::clone(&status));
        match request.request_async(&sender).await {
            Ok(answer) => {
                backoff.until = None;
                backoff.next = None;
                let fresh =
                    self.tokens_of(&answer, &found, tokens.scopes.clone(), Some(refresh_token));
                stored.tokens = Some(fresh.clone());
                self.store.save(&stored).map_err(AuthError::Store)?;
                tracing::info!(server = %self.name, "refreshed the access token");
                Ok(fresh)
            }
            Err(err) => {
                let code = status.load(Ordering::Relaxed);
                if code == 429 || code >= 500 {
                    let pause = backoff.next.unwrap_or(BACKOFF_FIRST);
                    backoff.next = Some((pause * 2).min(BACKOFF_MAX));
                    backoff.until = Some(Instant::now() + pause);
                    backoff.why = format!("HTTP {code} from its token endpoint");
                    return Err(AuthError::Backoff(backoff.why.clone(), pause));
                }
                let message = token_error(&err);
                if is_invalid_grant(&err) {
                    // The grant is gone: forget it, and authorize again,
                    // saying why (to the prompt and `auth status`). A client
                    // the server forgot is registered anew.
                    stored.tokens = None;
                    stored.reason = Some(short(&format!("its refresh was refused: {message}")));
                    if is_invalid_client(&err) && self.settings.client_id.is_none() {
                        stored.clients.remove(&tokens.issuer);
                    }
                    self.store.save(&stored).map_err(AuthError::Store)?;
                }
                Err(AuthError::Token(message))
            }
        }
    }

    /// The last discovery's result, or a discovery without a challenge.
    async fn discovered(&self) -> Result<Discovered, AuthError> {
        if let Some(found) = self.found.lock().ok().and_then(|f| f.clone()) {
            return Ok(found);
        }
        let found = discovery::discover(&self.http, &self.server, &Challenge::default()).await?;
        if let Ok(mut slot) = self.found.lock() {
            *slot = Some(found.clone());
        }
        Ok(found)
    }

    fn configured_client(&self, found: &Discovered) -> Option<StoredClient> {
        let id = self.settings.client_id.clone()?;
        Some(StoredClient {
            client_id: id,
            client_secret: self.settings.client_secret.clone(),
            auth_method: registration::auth_method(
                self.settings.client_secret.is_some(),
                &found.metadata,
            ),
            redirect_uri: None,
        })
    }

    /// The browser flow, from the link to the stored tokens.
    async fn flow(
        &self,
        found: &Discovered,
        scopes: Vec<String>,
        prompt: &Prompt,
        reason: &str,
    ) -> Result<(), AuthError> {
        let s256 = found
            .metadata
            .code_challenge_methods_supported
            .as_ref()
            .is_some_and(|m| m.iter().any(|m| m == "S256"));
        if !s256 {
            return Err(AuthError::Unsupported {
                issuer: found.issuer.clone(),
                what: "does not offer PKCE with S256".into(),
            });
        }
        let (arrivals_tx, mut arrivals) = mpsc::channel(8);
        // The loopback listener, unless the redirects go elsewhere (a
        // gateway's web UI, which hands them on by `state`).
        let (_listener, redirect) = match redirect_uri() {
            Some(uri) => (None, uri),
            None => {
                let port = self
                    .settings
                    .redirect_port
                    .unwrap_or_else(|| callback::stable_port(&self.key));
                let listener = Listener::open(
                    port,
                    self.settings.redirect_port.is_some(),
                    arrivals_tx.clone(),
                )
                .await?;
                let uri = listener.redirect_uri.clone();
                (Some(listener), uri)
            }
        };
        let mut stored = self.load()?;
        let kept = stored.clients.get(&found.issuer);
        let (client, origin) =
            registration::client(&self.http, &self.settings, found, kept, &redirect).await?;
        if origin == Origin::Registered {
            stored.clients.insert(found.issuer.clone(), client.clone());
            self.store.save(&stored).map_err(AuthError::Store)?;
        }
        let oauth = self.oauth_client(found, &client, Some(&redirect))?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = oauth
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(challenge);
        if !scopes.is_empty() {
            request = request.add_scope(Scope::new(scopes.join(" ")));
        }
        if self.settings.resource {
            request = request.add_extra_param("resource", found.resource.clone());
        }
        let (link, state) = request.url();
        let state = state.secret().clone();
        let _waiting = Waiting::register(&state, arrivals_tx);
        prompt(link.as_str(), reason);
        if OPEN_BROWSER.load(Ordering::Relaxed) && !callback::open_browser(link.as_str()) {
            tracing::info!("no browser could be opened; open the link by hand");
        }
        let deadline = Instant::now() + self.wait;
        loop {
            let arrival = match tokio::time::timeout_at(deadline, arrivals.recv()).await {
                Ok(Some(arrival)) => arrival,
                Ok(None) | Err(_) => return Err(AuthError::TimedOut(self.wait)),
            };
            let Arrival { params, verdict } = arrival;
            let judged = self.judge(&params, &state, found);
            let code = match judged {
                Ok(code) => code,
                Err(Judged::Ignore(why)) => {
                    tracing::warn!(server = %self.name, "an authorization answer was refused: {why}");
                    reply(verdict, Err(why));
                    continue;
                }
                Err(Judged::Fail(e)) => {
                    reply(verdict, Err(e.to_string()));
                    return Err(e);
                }
            };
            let result = self
                .exchange(&oauth, found, code, verifier, scopes.clone())
                .await;
            reply(
                verdict,
                result.as_ref().map(drop).map_err(ToString::to_string),
            );
            return result;
        }
    }

    /// Checks a redirect's parameters: its `state`, an `error`, its `iss`
    /// (RFC 9207), and that it has a code.
    fn judge(
        &self,
        params: &BTreeMap<String, String>,
        state: &str,
        found: &Discovered,
    ) -> Result<String, Judged> {
        if params.get("state").map(String::as_str) != Some(state) {
            return Err(Judged::Ignore(
                "its state is not this authorization's (an old or forged answer)".into(),
            ));
        }
        match params.get("iss") {
            Some(iss) if iss != &found.issuer => {
                return Err(Judged::Fail(AuthError::Refused(format!(
                    "the answer's issuer {iss:?} is not {:?}",
                    found.issuer
                ))));
            }
            None if found
                .metadata
                .authorization_response_iss_parameter_supported =>
            {
                return Err(Judged::Fail(AuthError::Refused(
                    "the answer has no iss, which its authorization server promised".into(),
                )));
            }
            _ => {}
        }
        if let Some(error) = params.get("error") {
            let description = params
                .get("error_description")
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            return Err(Judged::Fail(AuthError::Refused(format!(
                "{error}{description}"
            ))));
        }
        params
            .get("code")
            .filter(|c| !c.is_empty())
            .cloned()
            .ok_or_else(|| Judged::Fail(AuthError::Refused("the answer has no code".into())))
    }

    /// Exchanges a code for tokens and stores them.
    async fn exchange(
        &self,
        oauth: &OAuthClient,
        found: &Discovered,
        code: String,
        verifier: oauth2::PkceCodeVerifier,
        scopes: Vec<String>,
    ) -> Result<(), AuthError> {
        let mut request = oauth
            .exchange_code(AuthorizationCode::new(code))
            .set_pkce_verifier(verifier);
        if self.settings.resource {
            request = request.add_extra_param("resource", found.resource.clone());
        }
        let status = Arc::new(AtomicU16::new(0));
        let sender = self.sender(status);
        let answer = request
            .request_async(&sender)
            .await
            .map_err(|e| AuthError::Token(token_error(&e)))?;
        let tokens = self.tokens_of(&answer, found, scopes, None);
        let _lock = self.store.lock(&self.key).await.map_err(AuthError::Store)?;
        let mut stored = self.load()?;
        stored.tokens = Some(tokens);
        stored.reason = None;
        self.store.save(&stored).map_err(AuthError::Store)?;
        tracing::info!(server = %self.name, issuer = %found.issuer, "authorized");
        Ok(())
    }

    fn tokens_of(
        &self,
        answer: &oauth2::basic::BasicTokenResponse,
        found: &Discovered,
        asked: Vec<String>,
        old_refresh: Option<Secret>,
    ) -> StoredTokens {
        StoredTokens {
            issuer: found.issuer.clone(),
            access_token: Secret::new(answer.access_token().secret().clone()),
            // A refresh answer without a refresh token keeps the old one.
            refresh_token: answer
                .refresh_token()
                .map(|r| Secret::new(r.secret().clone()))
                .or(old_refresh),
            expires_at: answer
                .expires_in()
                .map(|d| now_secs().saturating_add(d.as_secs())),
            issued_at: Some(now_secs()),
            scopes: answer
                .scopes()
                .map(|s| {
                    s.iter()
                        .flat_map(|s| crate::challenge::split_scopes(s))
                        .collect()
                })
                .unwrap_or(asked),
            resource: self.settings.resource.then(|| found.resource.clone()),
        }
    }

    fn oauth_client(
        &self,
        found: &Discovered,
        client: &StoredClient,
        redirect_uri: Option<&str>,
    ) -> Result<OAuthClient, AuthError> {
        let bad = |what: &str| AuthError::Discovery(format!("the {what} is not a URL"));
        let auth_url = AuthUrl::new(found.metadata.authorization_endpoint.clone())
            .map_err(|_| bad("authorization endpoint"))?;
        let token_url = TokenUrl::new(found.metadata.token_endpoint.clone())
            .map_err(|_| bad("token endpoint"))?;
        let mut oauth = BasicClient::new(ClientId::new(client.client_id.clone()))
            .set_auth_uri(auth_url)
            .set_token_uri(token_url)
            .set_auth_type(if client.auth_method == "client_secret_post" {
                AuthType::RequestBody
            } else {
                AuthType::BasicAuth
            });
        if client.auth_method != "none" {
            if let Some(secret) = &client.client_secret {
                oauth = oauth.set_client_secret(ClientSecret::new(secret.expose().to_owned()));
            }
        }
        if let Some(uri) = redirect_uri {
            oauth = oauth.set_redirect_uri(
                RedirectUrl::new(uri.to_owned()).map_err(|_| bad("redirect URI"))?,
            );
        }
        Ok(oauth)
    }

    /// The HTTP client the `oauth2` crate sends with; it notes each
    /// answer's status in `status`.
    fn sender(&self, status: Arc<AtomicU16>) -> impl Fn(HttpRequest) -> SendFuture + use<> {
        let http = self.http.clone();
        move |request: HttpRequest| {
            let http = http.clone();
            let status = Arc::clone(&status);
            Box::pin(async move {
                let (parts, body) = request.into_parts();
                let response = http
                    .request(parts.method, parts.uri.to_string())
                    .headers(parts.headers)
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| SendError(discovery::describe(&e)))?;
                status.store(response.status().as_u16(), Ordering::Relaxed);
                let mut builder = oauth2::http::Response::builder().status(response.status());
                for (name, value) in response.headers() {
                    builder = builder.header(name, value);
                }
                let body = discovery::read_bounded(response, TOKEN_ANSWER_BYTES)
                    .await
                    .map_err(SendError)?;
                builder.body(body).map_err(|e| SendError(e.to_string()))
            }) as SendFuture
        }
    }
}

type OAuthClient = oauth2::basic::BasicClient<
    oauth2::EndpointSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
>;

type SendFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<HttpResponse, SendError>> + Send>>;

/// A token request that could not be sent or read.
#[derive(Debug)]
struct SendError(String);

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SendError {}

type TokenError = RequestTokenError<SendError, StandardErrorResponse<BasicErrorResponseType>>;

/// A token request's failure in words: the server's error code and
/// description, never a request or body of ours.
fn token_error(err: &TokenError) -> String {
    match err {
        RequestTokenError::ServerResponse(answer) => {
            let description = answer
                .error_description()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            format!("{}{description}", answer.error().as_ref())
        }
        RequestTokenError::Request(e) => e.0.clone(),
        RequestTokenError::Parse(_, _) => "the token endpoint's answer is not a token".into(),
        RequestTokenError::Other(what) => what.clone(),
    }
}

fn is_invalid_client(err: &TokenError) -> bool {
    matches!(err, RequestTokenError::ServerResponse(answer)
        if matches!(answer.error(), BasicErrorResponseType::InvalidClient))
}

/// A reason on one line of at most [`REASON_CHARS`] characters.
fn short(reason: &str) -> String {
    let line = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(REASON_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

fn is_invalid_grant(err: &TokenError) -> bool {
    matches!(err, RequestTokenError::ServerResponse(answer)
        if matches!(answer.error(), BasicErrorResponseType::InvalidGrant | BasicErrorResponseType::InvalidClient))
}

/// How a redirect was judged, when it was not accepted.
enum Judged {
    /// Not this flow's (a stale or forged answer): keep waiting.
    Ignore(String),
    /// This flow's, and it failed.
    Fail(AuthError),
}

fn reply(
    verdict: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    result: Result<(), String>,
) {
    if let Some(verdict) = verdict {
        let _ = verdict.send(result);
    }
}

#[cfg(test)]
mod tests;

/// A flow's entry among those waiting for a pasted URL, removed on drop.
struct Waiting(String);

impl Waiting {
    fn register(state: &str, sender: mpsc::Sender<Arrival>) -> Self {
        if let Ok(mut waiting) = WAITING.lock() {
            waiting.insert(state.to_owned(), sender);
        }
        Self(state.to_owned())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Ok(mut waiting) = WAITING.lock() {
            waiting.remove(&self.0);
        }
    }
}
