//! The authorizer against a fake protected resource and authorization
//! server on loopback: the browser flow, refresh with rotation, two
//! refreshes at once, `invalid_grant`, and backoff.

use std::sync::atomic::AtomicUsize;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::*;

/// What the fake authorization server does and has seen.
#[derive(Default)]
struct Fake {
    base: Mutex<String>,
    /// The refresh token it takes next (rotated at each refresh).
    refresh: Mutex<String>,
    token_requests: AtomicUsize,
    /// The next token answers are 503.
    unavailable: AtomicBool,
    /// The next token answers are `invalid_client` (a registration the
    /// server forgot).
    forgot_client: AtomicBool,
    issued: AtomicUsize,
    /// The last authorization request's `resource` and `scope`.
    asked: Mutex<Vec<(String, String)>>,
}

type Shared = Arc<Fake>;

async fn prm(State(fake): State<Shared>) -> Response {
    let base = fake.base.lock().expect("lock").clone();
    axum::Json(serde_json::json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [base],
        "scopes_supported": ["mcp:read"],
    }))
    .into_response()
}

async fn as_metadata(State(fake): State<Shared>) -> Response {
    let base = fake.base.lock().expect("lock").clone();
    axum::Json(serde_json::json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": true,
        "token_endpoint_auth_methods_supported": ["none"],
    }))
    .into_response()
}

async fn register() -> Response {
    (
        StatusCode::CREATED,
        axum::Json(serde_json::json!({"client_id": "c1", "token_endpoint_auth_method": "none"})),
    )
        .into_response()
}

async fn authorize(
    State(fake): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let base = fake.base.lock().expect("lock").clone();
    fake.asked.lock().expect("lock").push((
        q.get("resource").cloned().unwrap_or_default(),
        q.get("scope").cloned().unwrap_or_default(),
    ));
    let mut to = Url::parse(&q["redirect_uri"]).expect("redirect_uri");
    to.query_pairs_mut()
        .append_pair("code", "the-code")
        .append_pair("state", &q["state"])
        .append_pair("iss", &base);
    Redirect::to(to.as_str()).into_response()
}

async fn token(State(fake): State<Shared>, Form(form): Form<BTreeMap<String, String>>) -> Response {
    fake.token_requests.fetch_add(1, Ordering::SeqCst);
    if fake.unavailable.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
    }
    if fake.forgot_client.load(Ordering::SeqCst) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(serde_json::json!({"error": "invalid_client", "error_description": "unknown client"})),
        )
            .into_response();
    }
    // A slow token endpoint, so that two refreshes overlap.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ok = match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => form.get("code").map(String::as_str) == Some("the-code"),
        Some("refresh_token") => {
            let mut want = fake.refresh.lock().expect("lock");
            form.get("refresh_token") == Some(&*want) && {
                // Rotation: the old refresh token is spent.
                *want = String::new();
                true
            }
        }
        _ => false,
    };
    if !ok {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(serde_json::json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    let n = fake.issued.fetch_add(1, Ordering::SeqCst) + 1;
    let refresh = format!("r{n}");
    *fake.refresh.lock().expect("lock") = refresh.clone();
    axum::Json(serde_json::json!({
        "access_token": format!("a{n}"),
        "token_type": "Bearer",
        "expires_in": 3600,
        "refresh_token": refresh,
        "scope": "mcp:read",
    }))
    .into_response()
}

async fn start() -> (Shared, Url) {
    let fake: Shared = Arc::new(Fake::default());
    let app = Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", get(prm))
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .with_state(Arc::clone(&fake));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    *fake.base.lock().expect("lock") = base.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (fake, Url::parse(&format!("{base}/mcp")).expect("url"))
}

fn authorizer(server: &Url, store: &Store, settings: Settings) -> Authorizer {
    Authorizer::unshared(
        "test",
        server,
        settings,
        store.clone(),
        Duration::from_secs(10),
    )
    .expect("authorizer")
}

/// A browser: follows the link's redirects, to the loopback listener.
fn browser() -> Prompt {
    Arc::new(|link: &str, _reason: &str| {
        let link = link.to_owned();
        tokio::spawn(async move {
            let _ = reqwest::get(&link).await;
        });
    })
}

/// The fake authorization server, started, and a token store of the
/// test's own.
struct Setup {
    fake: Shared,
    /// The protected MCP server's URL.
    server: Url,
    store: Store,
    /// The store's folder, removed when the test ends.
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let (fake, server) = start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    Setup {
        fake,
        server,
        store: Store::at(dir.path()),
        _dir: dir,
    }
}

impl Setup {
    /// The fake's address: the issuer.
    fn base(&self) -> String {
        self.fake.base.lock().expect("lock").clone()
    }

    /// An authorizer of its own (as a process has) on the store.
    fn authorizer(&self, settings: Settings) -> Authorizer {
        authorizer(&self.server, &self.store, settings)
    }

    /// Stored tokens that are about to expire, refreshable with `stored`,
    /// while the fake takes `current` as the refresh token.
    fn expiring(&self, stored: &str, current: &str) {
        *self.fake.refresh.lock().expect("lock") = current.into();
        let issuer = self.base();
        let mut clients = BTreeMap::new();
        clients.insert(
            issuer.clone(),
            StoredClient {
                client_id: "c1".into(),
                client_secret: None,
                auth_method: "none".into(),
                redirect_uri: None,
            },
        );
        self.store
            .save(&StoredServer {
                server: self.server.as_str().to_owned(),
                clients,
                tokens: Some(StoredTokens {
                    issuer,
                    access_token: Secret::new("old"),
                    refresh_token: Some(Secret::new(stored)),
                    expires_at: Some(now_secs() + 5),
                    issued_at: None,
                    scopes: vec!["mcp:read".into()],
                    resource: None,
                }),
                reason: None,
                in_keyring: false,
            })
            .expect("save");
    }

    /// What the store holds for the server.
    fn stored(&self) -> StoredServer {
        self.store
            .load(self.server.as_str())
            .expect("load")
            .expect("stored")
    }
}

/// A server's answer to a request without a good token.
fn unauthorized() -> Challenge {
    Challenge {
        status: 401,
        ..Challenge::default()
    }
}

#[tokio::test]
async fn a_401_runs_the_browser_flow_and_stores_the_tokens() {
    let t = setup().await;
    let auth = t.authorizer(Settings::default());
    assert_eq!(auth.bearer().await, None);
    auth.authorize(&unauthorized(), None, Some(&browser()))
        .await
        .expect("authorized");
    assert_eq!(auth.bearer().await, Some(Secret::new("a1")));
    let stored = t.stored();
    let base = t.base();
    assert_eq!(
        stored.tokens.as_ref().map(|t| t.issuer.clone()),
        Some(base.clone())
    );
    assert!(
        stored.clients.contains_key(&base),
        "the client is kept per issuer"
    );
    // The resource indicator is the metadata's, the scopes its
    // scopes_supported (the challenge named none).
    assert_eq!(
        t.fake.asked.lock().expect("lock").last().cloned(),
        Some((format!("{base}/mcp"), "mcp:read".to_owned()))
    );
    // No token appears in what can be printed.
    assert!(!format!("{stored:?}").contains("a1"));
}

#[tokio::test]
async fn the_resource_indicator_can_be_turned_off() {
    let t = setup().await;
    let auth = t.authorizer(Settings {
        resource: false,
        scopes: Some(vec!["x".into(), "y".into()]),
        ..Settings::default()
    });
    let challenge = Challenge {
        scope: Some("ignored".into()),
        ..unauthorized()
    };
    auth.authorize(&challenge, None, Some(&browser()))
        .await
        .expect("authorized");
    assert_eq!(
        t.fake.asked.lock().expect("lock").last().cloned(),
        Some((String::new(), "x y".to_owned()))
    );
}

#[tokio::test]
async fn a_pasted_url_completes_the_flow_and_a_forged_state_does_not() {
    let t = setup().await;
    let auth = Arc::new(t.authorizer(Settings::default()));
    // The "browser" cannot reach the listener: it gets the redirect's
    // address and a person pastes it.
    let (landed_tx, mut landed) = mpsc::channel::<String>(1);
    let prompt: Prompt = Arc::new(move |link: &str, _reason: &str| {
        let link = link.to_owned();
        let landed_tx = landed_tx.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client");
            let answer = client.get(&link).send().await.expect("authorize");
            let to = answer.headers()["location"]
                .to_str()
                .expect("location")
                .to_owned();
            let _ = landed_tx.send(to).await;
        });
    });
    let flow = {
        let auth = Arc::clone(&auth);
        tokio::spawn(async move { auth.authorize(&unauthorized(), None, Some(&prompt)).await })
    };
    let landed = landed.recv().await.expect("landed");
    let mut forged = Url::parse(&landed).expect("url");
    let pairs: Vec<(String, String)> = forged
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == "state" {
                "forged".into()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    forged.query_pairs_mut().clear().extend_pairs(pairs);
    assert!(
        paste(forged.as_str()).await.is_err(),
        "a forged state is refused"
    );
    paste(&landed)
        .await
        .expect("the pasted URL completes the flow");
    flow.await.expect("join").expect("authorized");
    assert_eq!(auth.bearer().await, Some(Secret::new("a1")));
}

#[tokio::test]
async fn an_expiring_token_is_refreshed_and_the_rotated_one_kept() {
    let t = setup().await;
    t.expiring("r0", "r0");
    let auth = t.authorizer(Settings::default());
    assert_eq!(auth.bearer().await, Some(Secret::new("a1")));
    let tokens = t.stored().tokens.expect("tokens");
    assert_eq!(
        tokens.refresh_token,
        Some(Secret::new("r1")),
        "the rotated refresh token is stored"
    );
    // Not expiring any more: no second refresh.
    assert_eq!(auth.bearer().await, Some(Secret::new("a1")));
    assert_eq!(t.fake.token_requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn two_processes_refreshing_at_once_make_one_refresh() {
    let t = setup().await;
    t.expiring("r0", "r0");
    // Two authorizers of their own, as two processes have, on one store.
    let one = t.authorizer(Settings::default());
    let two = t.authorizer(Settings::default());
    let (a, b) = tokio::join!(one.bearer(), two.bearer());
    assert_eq!(a, Some(Secret::new("a1")));
    assert_eq!(b, Some(Secret::new("a1")));
    assert_eq!(
        t.fake.token_requests.load(Ordering::SeqCst),
        1,
        "the second waited for the first's refresh and took its token"
    );
}

#[tokio::test]
async fn invalid_grant_means_authorize_again_and_nothing_else() {
    let t = setup().await;
    t.expiring("r-revoked", "r-current");
    let auth = t.authorizer(Settings::default());
    let challenge = unauthorized();
    let err = auth
        .authorize(&challenge, Some(&Secret::new("old")), None)
        .await
        .expect_err("no person to ask");
    assert!(matches!(err, AuthError::NeedsLogin(_)), "{err}");
    assert_eq!(t.fake.token_requests.load(Ordering::SeqCst), 1);
    let stored = t.stored();
    assert!(stored.tokens.is_none(), "the dead grant is forgotten");
    assert!(!stored.clients.is_empty(), "the client is kept");
    // Asked again: no refresh is tried with nothing to refresh.
    let _ = auth.authorize(&challenge, None, None).await;
    assert_eq!(t.fake.token_requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_registration_the_server_forgot_is_dropped_with_the_grant() {
    let t = setup().await;
    t.expiring("r0", "r0");
    t.fake.forgot_client.store(true, Ordering::SeqCst);
    let auth = t.authorizer(Settings::default());
    assert_eq!(auth.bearer().await, None, "the grant is forgotten");
    let stored = t.stored();
    assert!(
        stored.clients.is_empty(),
        "the forgotten client is dropped, to register anew"
    );
    let reason = stored.reason.unwrap_or_default();
    assert_eq!(
        reason,
        "its refresh was refused: invalid_client: unknown client"
    );
}

/// A browser that notes the reason each prompt gives.
fn noting_browser(reasons: Arc<std::sync::Mutex<Vec<String>>>) -> Prompt {
    let open = browser();
    Arc::new(move |link: &str, reason: &str| {
        reasons.lock().expect("lock").push(reason.to_owned());
        open(link, reason);
    })
}

#[tokio::test]
async fn the_prompt_says_why_the_server_needs_authorizing() {
    let t = setup().await;
    let auth = t.authorizer(Settings::default());
    let reasons = Arc::new(std::sync::Mutex::new(Vec::new()));
    auth.authorize(
        &unauthorized(),
        None,
        Some(&noting_browser(Arc::clone(&reasons))),
    )
    .await
    .expect("authorized");
    assert_eq!(*reasons.lock().expect("lock"), [NOT_AUTHORIZED_YET]);
    assert_eq!(t.stored().reason, None);

    // The grant is revoked: the refresh is refused, the tokens go, and
    // the reason is kept for the next prompt and `auth status`.
    t.expiring("r-revoked", "r-current");
    assert_eq!(auth.bearer().await, None, "the dead grant is forgotten");
    let kept = t.stored().reason.expect("a reason is kept");
    assert!(
        kept.starts_with("its refresh was refused: invalid_grant"),
        "{kept}"
    );
    auth.authorize(
        &unauthorized(),
        None,
        Some(&noting_browser(Arc::clone(&reasons))),
    )
    .await
    .expect("authorized again");
    assert_eq!(reasons.lock().expect("lock").last(), Some(&kept));
    assert_eq!(t.stored().reason, None, "new tokens clear the reason");

    // Refused while its refresh token still works elsewhere: the reason
    // says the token was refused, not that it was never authorized.
    t.expiring("r0", "r-other");
    let err = auth
        .authorize(
            &unauthorized(),
            Some(&Secret::new("old")),
            Some(&noting_browser(Arc::clone(&reasons))),
        )
        .await;
    assert!(err.is_ok(), "{err:?}");
    let last = reasons
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .unwrap_or_default();
    assert!(
        last.starts_with("its refresh was refused: invalid_grant"),
        "{last}"
    );
}

#[tokio::test]
async fn a_503_backs_off_without_more_requests() {
    let t = setup().await;
    t.expiring("r0", "r0");
    t.fake.unavailable.store(true, Ordering::SeqCst);
    let auth = t.authorizer(Settings::default());
    let challenge = unauthorized();
    for _ in 0..5 {
        let err = auth
            .authorize(&challenge, Some(&Secret::new("old")), None)
            .await
            .expect_err("unavailable");
        assert!(matches!(err, AuthError::Backoff(..)), "{err}");
    }
    assert_eq!(
        t.fake.token_requests.load(Ordering::SeqCst),
        1,
        "one request, then a pause"
    );
    // The tokens are kept: the grant may still be good.
    assert!(t.stored().tokens.is_some());
}

#[tokio::test]
async fn step_ups_are_limited() {
    let t = setup().await;
    let auth = t.authorizer(Settings::default());
    let more = Challenge {
        status: 403,
        error: Some("insufficient_scope".into()),
        scope: Some("mcp:write".into()),
        ..Challenge::default()
    };
    for _ in 0..STEP_UPS {
        auth.authorize(&more, None, Some(&browser()))
            .await
            .expect("step-up");
    }
    let err = auth
        .authorize(&more, None, Some(&browser()))
        .await
        .expect_err("limit");
    assert!(matches!(err, AuthError::StepUpLimit(_)), "{err}");
    auth.succeeded();
    auth.authorize(&more, None, Some(&browser()))
        .await
        .expect("a new round after a success");
}

#[tokio::test]
async fn a_token_refused_as_soon_as_issued_is_not_renewed() {
    let t = setup().await;
    let auth = t.authorizer(Settings::default());
    let challenge = unauthorized();
    auth.authorize(&challenge, None, Some(&browser()))
        .await
        .expect("authorized");
    let requests = t.fake.token_requests.load(Ordering::SeqCst);
    let err = auth
        .authorize(&challenge, Some(&Secret::new("a1")), Some(&browser()))
        .await
        .expect_err("refused");
    assert!(matches!(err, AuthError::Refused(_)), "{err}");
    assert_eq!(
        t.fake.token_requests.load(Ordering::SeqCst),
        requests,
        "no refresh, no flow"
    );
}
