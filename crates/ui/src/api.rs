//! The routes, their checks, and the JSON API's handlers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use mcpvisor_config::{ServerSet, edit};
use mcpvisor_gateway::monitor::{Action, ActionError, EnvKey, EventKind, Pick};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Semaphore};

use crate::auth::{self, Token};
use crate::{UiConfig, assets, events, inspect, metrics};

/// What every handler shares.
pub(crate) struct Shared {
    pub cfg: UiConfig,
    /// The page's CSRF token, fresh for each process; `None` when no
    /// randomness was to be had, and then every change made with the
    /// cookie is refused.
    pub csrf: Option<Token>,
    /// Places for event streams.
    pub streams: Arc<Semaphore>,
    pub jobs: inspect::Jobs,
    /// Edits of config and env files, one at a time (read, change, write
    /// must not interleave).
    pub edits: Mutex<()>,
}

impl Shared {
    pub fn new(cfg: UiConfig) -> Self {
        let csrf = Token::random().ok();
        if csrf.is_none() {
            tracing::warn!("no randomness for the page's CSRF token: the page can only read");
        }
        let streams = Arc::new(Semaphore::new(cfg.limits.max_streams));
        let jobs = inspect::Jobs::new(cfg.limits.clone());
        Self {
            cfg,
            csrf,
            streams,
            jobs,
            edits: Mutex::new(()),
        }
    }
}

/// An error answer: `{"error": "one line"}` plus any fields of `extra`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub extra: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            extra: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.message });
        if let (Some(Value::Object(extra)), Some(map)) = (self.extra, body.as_object_mut()) {
            map.extend(extra);
        }
        json_response(self.status, &body)
    }
}

impl From<ActionError> for ApiError {
    fn from(e: ActionError) -> Self {
        let status = match e {
            ActionError::NoSuchServer(_) => StatusCode::NOT_FOUND,
            ActionError::Refused(_) => StatusCode::CONFLICT,
            ActionError::Gone => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<edit::EditError> for ApiError {
    fn from(e: edit::EditError) -> Self {
        let status = match e {
            edit::EditError::NoSuchServer { .. } => StatusCode::NOT_FOUND,
            edit::EditError::Exists { .. } => StatusCode::CONFLICT,
            edit::EditError::Comments { .. } | edit::EditError::Layout { .. } => {
                StatusCode::CONFLICT
            }
            edit::EditError::Env { .. } => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

type ApiResult<T = Response> = Result<T, ApiError>;

/// A JSON body, or a 400 that says why not.
fn body<T>(parsed: Result<axum::Json<T>, JsonRejection>) -> ApiResult<T> {
    parsed.map(|axum::Json(v)| v).map_err(|e| {
        let status = match e {
            JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ref other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.body_text())
    })
}

/// What `/api/servers/NAME/stderr` says of its lines.
const STDERR_WARNING: &str =
    "known secrets are redacted; a secret mcpvisor was never given may remain";

/// `value` as a JSON answer, with every known secret replaced by
/// `[redacted:NAME]` (`mcpvisor_config::redact`): every answer of the API
/// goes out through here or through the event stream, which does the same.
pub(crate) fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response {
    // Our own types and `Value`s: serializing cannot fail.
    let text = serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned());
    let text = mcpvisor_config::redact::global().redact(&text).into_owned();
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

fn accepted() -> Response {
    json_response(StatusCode::ACCEPTED, &json!({"ok": true}))
}

// === the router ===

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/api/servers", get(servers).post(add_server))
        .route("/api/servers/{name}", get(server))
        .route("/api/servers/{name}/stderr", get(stderr))
        .route("/api/servers/{name}/approve", post(approve))
        .route("/api/servers/{name}/{action}", post(act))
        .route("/api/servers/{name}/secrets/{key}", put(set_secret))
        .route("/api/oauth/paste", post(oauth_paste))
        .route("/api/inspect", post(start_inspect))
        .route("/api/inspect/{id}", get(inspect_job))
        .route("/api/activity", get(activity))
        .route("/api/events", get(events::stream))
        .route("/api/{*rest}", axum::routing::any(not_found))
        .route("/metrics", get(metrics::metrics))
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .layer(DefaultBodyLimit::max(shared.cfg.limits.max_body));
    Router::new()
        .route("/", get(index))
        .route("/assets/{*path}", get(asset))
        .route(CALLBACK_PATH, get(oauth_callback))
        .merge(api)
        .layer(middleware::from_fn_with_state(shared.clone(), headers))
        .with_state(shared)
}

/// The token, and for a change the origin and CSRF checks.
async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let Some((token, proof)) = auth::presented(headers) else {
        return unauthorized();
    };
    if !shared.cfg.token.matches(token) {
        return unauthorized();
    }
    if auth::is_change(request.method()) {
        if let Some(why) = auth::refuse_change(headers, proof, shared.csrf.as_ref()) {
            return ApiError::new(StatusCode::FORBIDDEN, why).into_response();
        }
    }
    next.run(request).await
}

fn unauthorized() -> Response {
    let mut resp = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "the UI's token is required: open the link mcpvisor printed, or send Authorization: Bearer TOKEN",
    )
    .into_response();
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// The Host check and the headers of every answer.
async fn headers(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/") || request.uri().path() == "/metrics";
    let mut resp = if request.method() == axum::http::Method::OPTIONS {
        // No CORS: a preflight is never answered yes.
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "OPTIONS is not served").into_response()
    } else if shared.cfg.loopback && !auth::loopback_host(request.headers()) {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "the UI answers only to localhost, 127.0.0.1 and [::1]",
        )
        .into_response()
    } else {
        next.run(request).await
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(auth::CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if api || !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

async fn not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "no such endpoint").into_response()
}

// === the page ===

#[derive(Debug, Deserialize)]
struct IndexQuery {
    token: Option<String>,
}

async fn index(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<IndexQuery>,
    headers: HeaderMap,
) -> Response {
    if let Some(token) = query.token {
        if !shared.cfg.token.matches(&token) {
            return login_page(
                StatusCode::UNAUTHORIZED,
                "That link's token is not this gateway's.",
            );
        }
        // The token leaves the address bar: it lives in the cookie now.
        let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
        if let Some(cookie) = auth::set_cookie(shared.cfg.token.expose()) {
            resp.headers_mut().insert(header::SET_COOKIE, cookie);
        }
        return resp;
    }
    let authorized = auth::presented(&headers).is_some_and(|(t, _)| shared.cfg.token.matches(t));
    if !authorized {
        return login_page(
            StatusCode::UNAUTHORIZED,
            "Open the link mcpvisor printed when it started (mcpvisor: UI at http://…/?token=…).",
        );
    }
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        assets::index(shared.csrf.as_ref().map_or("", Token::expose)),
    )
        .into_response()
}

// === OAuth answers ===

/// Where an authorization server sends the browser back when the gateway's
/// flows use the UI's address as their redirect URI.
pub const CALLBACK_PATH: &str = "/oauth/callback";

/// An authorization server's redirect, landed on the UI: handed to the
/// flow waiting for its `state`. It needs no UI token (the browser coming
/// back from the provider may not carry the cookie): the `state`, random
/// and known only to the flow, is what binds it, and it is accepted once,
/// while that flow waits.
async fn oauth_callback(
    Query(params): Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    if !params.contains_key("state") {
        return callback_page(
            StatusCode::BAD_REQUEST,
            "This is not an authorization answer.",
            false,
        );
    }
    match mcpvisor_oauth::deliver(params).await {
        Ok(()) => callback_page(
            StatusCode::OK,
            "mcpvisor is authorized. You may close this tab.",
            true,
        ),
        Err(why) => callback_page(
            StatusCode::BAD_REQUEST,
            &format!("Authorization failed: {why}"),
            false,
        ),
    }
}

fn callback_page(status: StatusCode, message: &str, ok: bool) -> Response {
    let message = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let title = if ok { "Authorized" } else { "Not authorized" };
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>mcpvisor: {title}</title></head>\
         <body><h1>{title}</h1><p>{message}</p></body></html>"
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct Pasted {
    url: String,
}

/// The address a person's browser ended on (a redirect to a loopback
/// listener it could not reach), pasted into the page: handed to the flow
/// waiting for its `state`, as `mcpvisor auth login` takes a pasted one.
async fn oauth_paste(parsed: Result<axum::Json<Pasted>, JsonRejection>) -> ApiResult {
    let pasted = body(parsed)?;
    mcpvisor_oauth::paste(&pasted.url)
        .await
        .map_err(|why| ApiError::new(StatusCode::BAD_REQUEST, why))?;
    Ok(axum::Json(json!({"authorized": true})).into_response())
}

fn login_page(status: StatusCode, message: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>mcpvisor</title></head>\
         <body><h1>mcpvisor</h1><p>{message}</p></body></html>"
    );
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html,
    )
        .into_response()
}

async fn asset(UrlPath(path): UrlPath<String>) -> Response {
    match assets::get(&path) {
        Some((bytes, media)) => (
            [
                (header::CONTENT_TYPE, media),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            Body::from(bytes),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

// === reading ===

async fn servers(State(shared): State<Arc<Shared>>) -> ApiResult {
    let snapshot = shared.cfg.monitor.snapshot().await?;
    Ok(json_response(StatusCode::OK, &snapshot))
}

/// The audit trail's last records, oldest first, and how many the audit
/// log's writer dropped.
async fn activity(State(shared): State<Arc<Shared>>) -> ApiResult {
    let audit = shared.cfg.monitor.activity();
    Ok(json_response(
        StatusCode::OK,
        &json!({"records": audit.recent(), "dropped": audit.dropped()}),
    ))
}

async fn server(State(shared): State<Arc<Shared>>, UrlPath(name): UrlPath<String>) -> ApiResult {
    let Some(mut detail) = shared.cfg.monitor.server(&name).await? else {
        return Err(no_server(&name));
    };
    // What the files say, where the hub has not said it.
    if let Ok(Some((def, source))) = shared.member(&name) {
        if detail.config_file.is_none() {
            detail.config_file = Some(source);
        }
        if detail.env_file.is_none() {
            detail.env_file = def.env_file.clone();
        }
        if detail.env_keys.is_empty() {
            detail.env_keys = env_key_states(&def);
        }
    }
    Ok(json_response(StatusCode::OK, &detail))
}

fn no_server(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no server is named {name:?}"),
    )
}

/// Each key of the server's env file, set or not: `env_keys` when given,
/// else every key the file sets.
fn env_key_states(def: &mcpvisor_config::ServerDef) -> Vec<EnvKey> {
    let present = def
        .env_file
        .as_deref()
        .and_then(|path| edit::env_keys(path).ok())
        .unwrap_or_default();
    if def.env_keys.is_empty() {
        return present
            .into_iter()
            .map(|key| EnvKey { key, set: true })
            .collect();
    }
    def.env_keys
        .iter()
        .map(|key| EnvKey {
            key: key.clone(),
            set: present.contains(key),
        })
        .collect()
}

/// Which crash's stderr: `?generation=N`, or the last crash's.
#[derive(Debug, serde::Deserialize)]
struct StderrQuery {
    generation: Option<u64>,
}

async fn stderr(
    State(shared): State<Arc<Shared>>,
    UrlPath(name): UrlPath<String>,
    query: Result<Query<StderrQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let generation = match query {
        Ok(Query(q)) => q.generation,
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "generation must be a whole number (a crash's generation)",
            ));
        }
    };
    let Some(lines) = shared.cfg.monitor.stderr(&name, generation).await? else {
        return Err(no_server(&name));
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"lines": lines, "warning": STDERR_WARNING}),
    ))
}

// === acting ===

async fn act(
    State(shared): State<Arc<Shared>>,
    UrlPath((name, action)): UrlPath<(String, String)>,
) -> ApiResult {
    let action = match action.as_str() {
        "restart" => Action::Restart,
        "reload" => Action::Reload,
        "stop" => Action::Stop,
        "start" => Action::Start,
        "enable" => return set_enabled(&shared, &name, true).await,
        "disable" => return set_enabled(&shared, &name, false).await,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no action {other:?}: restart, reload, stop, start, enable or disable"),
            ));
        }
    };
    shared.cfg.monitor.act(&name, action).await?;
    tracing::info!(server = %name, ?action, "asked from the UI");
    Ok(accepted())
}

async fn set_enabled(shared: &Shared, name: &str, enabled: bool) -> ApiResult {
    let _edit = shared.edits.lock().await;
    let (_, source) = shared.member(name)?.ok_or_else(|| no_server(name))?;
    edit::set_disabled(&source, name, !enabled)?;
    tracing::info!(server = %name, enabled, file = %source.display(), "config entry changed from the UI");
    shared.reconfigure(None).await?;
    Ok(accepted())
}

/// What `POST /api/servers/NAME/approve` takes: the held-back definitions
/// to approve by name; none (or no body at all) approves every one the
/// server has held back. `digests` gives, by name, the digest of the
/// definition the person was shown (or several, for a tool and a prompt
/// of one name): only that definition is approved, and one that changed
/// again since is refused (409). Unknown fields are refused:
/// `{"name": "x"}` must not read as "approve everything".
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApproveBody {
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    digests: BTreeMap<String, Digests>,
}

/// One digest, or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Digests {
    One(String),
    Many(Vec<String>),
}

impl ApproveBody {
    /// The hub's picks: each name with each of its digests, or alone. A
    /// digest of a name not in `names`, or not of a digest's form, is
    /// refused.
    fn picks(self) -> ApiResult<Vec<Pick>> {
        let ApproveBody { names, mut digests } = self;
        let mut picks = Vec::with_capacity(names.len());
        for name in names {
            let Some(given) = digests.remove(&name) else {
                picks.push(Pick::from(name));
                continue;
            };
            let given = match given {
                Digests::One(d) => vec![d],
                Digests::Many(ds) => ds,
            };
            if given.is_empty() {
                return Err(bad_approval(format!(
                    "`digests` gives no digest for {name:?}"
                )));
            }
            for digest in given {
                if !mcpvisor_gateway::pins::is_digest(&digest) {
                    return Err(bad_approval(format!(
                        "{digest:?} (for {name:?}) is not a digest: {} hex digits, as the server's page shows",
                        mcpvisor_gateway::pins::DIGEST_LEN
                    )));
                }
                picks.push(Pick::seen(name.clone(), digest));
            }
        }
        if let Some(name) = digests.keys().next() {
            return Err(bad_approval(format!(
                "`digests` names {name:?}, which `names` does not"
            )));
        }
        Ok(picks)
    }
}

fn bad_approval(why: String) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        format!(
            r#"the body is not {{"names": ["NAME", ...], "digests": {{"NAME": "DIGEST", ...}}}}: {why}"#
        ),
    )
}

/// Approves a server's quarantined definitions as they are offered now:
/// the hub writes them to the pin store and lists them to clients again.
async fn approve(
    State(shared): State<Arc<Shared>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
    raw: axum::body::Bytes,
) -> ApiResult {
    let picks = approve_body(&headers, &raw)?.picks()?;
    let approved = shared.cfg.monitor.approve(&name, picks).await?;
    // Names of definitions, never the definitions themselves.
    tracing::info!(server = %name, approved = ?approved, "definitions approved from the UI");
    Ok(json_response(
        StatusCode::OK,
        &json!({ "approved": approved }),
    ))
}

/// The body of an approval: empty, or JSON (`application/json`) of the
/// form `{"names": [...], "digests": {...}}`.
fn approve_body(headers: &HeaderMap, raw: &[u8]) -> ApiResult<ApproveBody> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(ApproveBody::default());
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be JSON: send Content-Type: application/json",
        ));
    }
    let refuse = bad_approval;
    // An object only: serde would also read a struct from an array, and
    // `[]` must not read as "approve everything".
    match serde_json::from_slice(raw).map_err(|e| refuse(e.to_string()))? {
        object @ Value::Object(_) => {
            serde_json::from_value(object).map_err(|e| refuse(e.to_string()))
        }
        _ => Err(refuse("not a JSON object".to_owned())),
    }
}

#[derive(Debug, Deserialize)]
struct SecretBody {
    value: String,
}

async fn set_secret(
    State(shared): State<Arc<Shared>>,
    UrlPath((name, key)): UrlPath<(String, String)>,
    parsed: Result<axum::Json<SecretBody>, JsonRejection>,
) -> ApiResult {
    let SecretBody { value } = body(parsed)?;
    if !edit::valid_env_key(&key) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "{key:?} is not a variable name (letters, digits and _, not starting with a digit)"
            ),
        ));
    }
    let _edit = shared.edits.lock().await;
    let (def, source) = shared.member(&name)?.ok_or_else(|| no_server(&name))?;
    if !def.env_keys.is_empty() && !def.env_keys.contains(&key) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "{key:?} is not one of server {name:?}'s env_keys ({})",
                def.env_keys.join(", ")
            ),
        ));
    }
    let (env_file, new_file) = match &def.env_file {
        Some(path) => (path.clone(), false),
        None => (dir_of(&source).join(format!("{name}.env")), true),
    };
    edit::set_env_var(&env_file, &key, &value)?;
    // The value is never logged; the key and the file are.
    tracing::info!(server = %name, key = %key, file = %env_file.display(), "secret set from the UI");
    if new_file {
        let field = edit::env_file_field(&source)?;
        edit::set_server_field(&source, &name, field, &json!(format!("{name}.env")))?;
        shared.reconfigure(None).await?;
    }
    // On the server's page: the key and the file, never the value.
    let message = format!("{key} set in {}", env_file.display());
    if let Err(e) = shared
        .cfg
        .monitor
        .record(&name, EventKind::SecretSet, &message)
        .await
    {
        tracing::debug!(server = %name, "the secret's event was not recorded: {e}");
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn dir_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

// === the add-server wizard ===

#[derive(Debug, Deserialize)]
struct InspectBody {
    source: String,
}

async fn start_inspect(
    State(shared): State<Arc<Shared>>,
    parsed: Result<axum::Json<InspectBody>, JsonRejection>,
) -> ApiResult {
    let InspectBody { source } = body(parsed)?;
    let base = shared
        .cfg
        .configs
        .first()
        .map(|f| dir_of(f))
        .unwrap_or_else(|| PathBuf::from("."));
    let id = shared.jobs.start(&source, &base)?;
    Ok(json_response(StatusCode::ACCEPTED, &json!({ "job": id })))
}

async fn inspect_job(State(shared): State<Arc<Shared>>, UrlPath(id): UrlPath<String>) -> ApiResult {
    match shared.jobs.view(&id) {
        Some(view) => Ok(json_response(StatusCode::OK, &view)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no inspection {id:?} (finished ones are forgotten after a while)"),
        )),
    }
}

#[derive(Debug, Deserialize)]
struct AddBody {
    job: String,
    name: String,
    #[serde(default)]
    env_keys: Vec<String>,
    #[serde(default)]
    tools: Option<ToolsBody>,
    #[serde(default)]
    force: bool,
}

#[derive(Debug, Deserialize)]
struct ToolsBody {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
}

async fn add_server(
    State(shared): State<Arc<Shared>>,
    parsed: Result<axum::Json<AddBody>, JsonRejection>,
) -> ApiResult {
    let add = body(parsed)?;
    check_name(&add.name)?;
    for key in &add.env_keys {
        if !edit::valid_env_key(key) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("env key {key:?} is not a variable name"),
            ));
        }
    }
    let Some(config) = shared.cfg.configs.first().cloned() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "the gateway has no config file to add to",
        ));
    };
    let mut entry = shared.jobs.entry_for_save(&add.job, add.force)?;
    let _edit = shared.edits.lock().await;
    let set = shared.load()?;
    let taken = set.get(&add.name).is_some()
        || set.skipped().iter().any(|s| s.name == add.name)
        || add.name == mcpvisor_config::set::RESERVED_NAME;
    if taken {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("a server named {:?} is already configured", add.name),
        ));
    }
    if !add.env_keys.is_empty() {
        let env_file = dir_of(&config).join(format!("{}.env", add.name));
        if !env_file.exists() {
            write_empty_env(&env_file)?;
        }
        entry.insert(
            edit::env_file_field(&config)?.to_owned(),
            json!(format!("{}.env", add.name)),
        );
        entry.insert("env_keys".to_owned(), json!(add.env_keys));
    }
    if let Some(tools) = add.tools {
        let mut filter = serde_json::Map::new();
        if let Some(allow) = tools.allow {
            filter.insert("allow".to_owned(), json!(allow));
        }
        if let Some(deny) = tools.deny.filter(|d| !d.is_empty()) {
            filter.insert("deny".to_owned(), json!(deny));
        }
        if !filter.is_empty() {
            entry.insert("tools".to_owned(), Value::Object(filter));
        }
    }
    edit::add_server(&config, &add.name, &entry)?;
    tracing::info!(server = %add.name, file = %config.display(), "server added from the UI");
    shared.reconfigure(Some(add.name.clone())).await?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"ok": true, "name": add.name, "config_file": config}),
    ))
}

fn write_empty_env(path: &Path) -> ApiResult<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(b"# secrets for this server: KEY=value, one a line\n"))
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{}: cannot create: {e}", path.display()),
            )
        })
}

/// A server name every client accepts as a prefix: `[A-Za-z0-9_-]{1,64}`.
pub(crate) fn check_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{name:?} is not a server name: use 1 to 64 letters, digits, _ or -"),
        ))
    }
}

// === impl Shared ===

impl Shared {
    /// The config files as they are now.
    fn load(&self) -> ApiResult<ServerSet> {
        ServerSet::load(&self.cfg.configs, None)
            .map_err(|e| ApiError::new(StatusCode::CONFLICT, e.to_string()))
    }

    /// The entry of `name` and the file it is in.
    fn member(&self, name: &str) -> ApiResult<Option<(mcpvisor_config::ServerDef, PathBuf)>> {
        Ok(self
            .load()?
            .get(name)
            .map(|m| (m.def.clone(), m.source.clone())))
    }

    /// Applies the files' new content, as SIGHUP would; `added` is a
    /// server just added, to serve whatever `--only` said.
    async fn reconfigure(&self, added: Option<String>) -> ApiResult<()> {
        (self.cfg.reconfigure)(added).await.map_err(|e| {
            ApiError::new(
                StatusCode::CONFLICT,
                format!("the file was changed, but the gateway did not take it: {e}"),
            )
        })
    }
}

#[cfg(test)]
mod tests;
