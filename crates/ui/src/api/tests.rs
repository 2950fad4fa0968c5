//! The approve route against a scripted hub: what reaches the hub, and
//! what each kind of request is answered.

use std::sync::{Arc, Mutex};

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode, header};
use mcpvisor_gateway::Control;
use mcpvisor_gateway::monitor::{ActionError, Monitor, Pick, Query};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tower::ServiceExt as _;

use crate::{Limits, UiConfig, auth::Token};

const TOKEN: &str = "test-token-0123456789abcdef";
/// The held-back definitions of the scripted server `gh`.
const HELD: [&str; 2] = ["create_issue", "search"];
/// The digests of what [`HELD`] offer now.
const DIGESTS: [&str; 2] = ["0123456789ab", "ba9876543210"];

/// The approvals the scripted hub was asked for: (server, picks).
type Asked = Arc<Mutex<Vec<(String, Vec<Pick>)>>>;

/// A router over a hub that knows one server, `gh`, holding back [`HELD`]:
/// it approves names among them (all for none), each with its digest in
/// [`DIGESTS`] or none, and refuses any other.
fn ui() -> (axum::Router, Asked) {
    let (control, mut queries) = mpsc::channel(8);
    let (monitor, _tap) = Monitor::new(control);
    let asked: Asked = Arc::default();
    let seen = asked.clone();
    tokio::spawn(async move {
        while let Some(control) = queries.recv().await {
            let Control::Query(Query::Approve(server, names, reply)) = control else {
                continue;
            };
            seen.lock()
                .expect("the log of approvals")
                .push((server.clone(), names.clone()));
            let answer = if server != "gh" {
                Err(ActionError::NoSuchServer(server))
            } else if let Some(other) = names.iter().find(|p| !HELD.contains(&p.name.as_str())) {
                Err(ActionError::Refused(format!(
                    "{:?} is not held back",
                    other.name
                )))
            } else if let Some(stale) = names.iter().find(|p| {
                p.digest.as_ref().is_some_and(|d| {
                    let i = HELD.iter().position(|n| *n == p.name).unwrap_or(0);
                    d != DIGESTS[i]
                })
            }) {
                Err(ActionError::Refused(format!(
                    "{:?} changed again since it was shown",
                    stale.name
                )))
            } else if names.is_empty() {
                Ok(HELD.iter().map(|n| (*n).to_owned()).collect())
            } else {
                let mut approved: Vec<String> = names.into_iter().map(|p| p.name).collect();
                approved.dedup();
                Ok(approved)
            };
            let _ = reply.send(answer);
        }
    });
    let cfg = UiConfig {
        token: Token::new(TOKEN),
        monitor,
        configs: Vec::new(),
        reconfigure: Arc::new(|_| Box::pin(async { Ok(()) })),
        loopback: true,
        limits: Limits::default(),
    };
    (crate::router(cfg), asked)
}

fn post(path: &str, content_type: Option<&str>, body: &str) -> Request<Body> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "127.0.0.1:8809")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    if let Some(ct) = content_type {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    req.body(Body::from(body.to_owned())).expect("a request")
}

fn json_post(path: &str, body: &Value) -> Request<Body> {
    post(path, Some("application/json"), &body.to_string())
}

async fn send(router: &axum::Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = router.clone().oneshot(req).await.expect("an answer");
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), 1 << 20).await.expect("the body");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// What the hub was asked, each pick as NAME or NAME@DIGEST.
fn asked(a: &Asked) -> Vec<(String, Vec<String>)> {
    a.lock()
        .expect("the log of approvals")
        .iter()
        .map(|(server, picks)| {
            let picks = picks
                .iter()
                .map(|p| match &p.digest {
                    Some(d) => format!("{}@{d}", p.name),
                    None => p.name.clone(),
                })
                .collect();
            (server.clone(), picks)
        })
        .collect()
}

/// The answer says what is wrong, in its `error`.
fn assert_names_an_error(answer: &Value) {
    assert!(
        answer["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{answer}"
    );
}

/// The hub was asked to approve nothing.
fn assert_not_asked(hub: &Asked) {
    assert!(asked(hub).is_empty(), "the hub was asked: {:?}", asked(hub));
}

#[tokio::test]
async fn the_names_given_are_approved_and_answered() {
    let (ui, hub) = ui();
    let (status, body) = send(
        &ui,
        json_post("/api/servers/gh/approve", &json!({"names": ["search"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"approved": ["search"]}));
    assert_eq!(asked(&hub), [("gh".to_owned(), vec!["search".to_owned()])]);
}

#[tokio::test]
async fn the_digests_shown_go_with_their_names_and_a_stale_one_is_409() {
    let (ui, hub) = ui();
    // One digest, or several for a name (a tool and a prompt of one name).
    let (status, body) = send(
        &ui,
        json_post(
            "/api/servers/gh/approve",
            &json!({"names": ["search", "create_issue"], "digests": {"search": DIGESTS[1], "create_issue": [DIGESTS[0]]}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"approved": ["search", "create_issue"]}));
    let (status, body) = send(
        &ui,
        json_post(
            "/api/servers/gh/approve",
            &json!({"names": ["search"], "digests": {"search": "000000000000"}}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("changed again"),
        "{body}"
    );
    assert_eq!(
        asked(&hub),
        [
            (
                "gh".to_owned(),
                vec![
                    format!("search@{}", DIGESTS[1]),
                    format!("create_issue@{}", DIGESTS[0])
                ]
            ),
            ("gh".to_owned(), vec!["search@000000000000".to_owned()]),
        ]
    );
}

#[tokio::test]
async fn digests_that_do_not_go_with_the_names_are_refused_before_the_hub() {
    let (ui, hub) = ui();
    for body in [
        // A digest of a name not given: never "approve everything".
        json!({"digests": {"search": DIGESTS[1]}}),
        json!({"names": ["search"], "digests": {"create_issue": DIGESTS[0]}}),
        // Not a digest's form.
        json!({"names": ["search"], "digests": {"search": "BA9876543210"}}),
        json!({"names": ["search"], "digests": {"search": "ba98"}}),
        json!({"names": ["search"], "digests": {"search": []}}),
        json!({"names": ["search"], "digests": {"search": 12}}),
        json!({"names": ["search"], "digests": ["ba9876543210"]}),
    ] {
        let (status, answer) = send(&ui, json_post("/api/servers/gh/approve", &body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_names_an_error(&answer);
    }
    assert_not_asked(&hub);
}

#[tokio::test]
async fn no_names_or_no_body_approves_every_one() {
    let (ui, hub) = ui();
    for req in [
        json_post("/api/servers/gh/approve", &json!({"names": []})),
        json_post("/api/servers/gh/approve", &json!({})),
        post("/api/servers/gh/approve", None, ""),
    ] {
        let (status, body) = send(&ui, req).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, json!({"approved": HELD}));
    }
    let all = ("gh".to_owned(), Vec::<String>::new());
    assert_eq!(asked(&hub), [all.clone(), all.clone(), all]);
}

#[tokio::test]
async fn a_body_that_is_not_the_names_is_refused_before_the_hub() {
    let (ui, hub) = ui();
    for (content_type, body, want) in [
        (
            Some("application/json"),
            r#"{"names": ["#,
            StatusCode::BAD_REQUEST,
        ),
        (
            Some("application/json"),
            r#"{"names": "search"}"#,
            StatusCode::BAD_REQUEST,
        ),
        // A typo must not read as "approve everything".
        (
            Some("application/json"),
            r#"{"name": "search"}"#,
            StatusCode::BAD_REQUEST,
        ),
        (Some("application/json"), "[]", StatusCode::BAD_REQUEST),
        (
            Some("text/plain"),
            r#"{"names": []}"#,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (None, r#"{"names": []}"#, StatusCode::UNSUPPORTED_MEDIA_TYPE),
    ] {
        let (status, answer) = send(&ui, post("/api/servers/gh/approve", content_type, body)).await;
        assert_eq!(status, want, "{body}: {answer}");
        assert_names_an_error(&answer);
    }
    assert_not_asked(&hub);
}

#[tokio::test]
async fn an_unknown_server_is_404_and_a_name_not_held_back_409() {
    let (ui, _hub) = ui();
    let (status, body) = send(&ui, json_post("/api/servers/nope/approve", &json!({}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"].as_str().unwrap_or_default().contains("nope"),
        "{body}"
    );
    let (status, body) = send(
        &ui,
        json_post(
            "/api/servers/gh/approve",
            &json!({"names": ["search", "delete_repo"]}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("delete_repo"),
        "{body}"
    );
}

#[tokio::test]
async fn a_change_needs_the_token_and_with_the_cookie_the_csrf_token() {
    let (ui, hub) = ui();
    let path = "/api/servers/gh/approve";
    let without = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "127.0.0.1:8809")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .expect("a request");
    assert_eq!(send(&ui, without).await.0, StatusCode::UNAUTHORIZED);
    let mut foreign = json_post(path, &json!({}));
    foreign.headers_mut().insert(
        header::ORIGIN,
        header::HeaderValue::from_static("http://evil.example"),
    );
    assert_eq!(send(&ui, foreign).await.0, StatusCode::FORBIDDEN);
    let cookie = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "127.0.0.1:8809")
        .header(header::ORIGIN, "http://127.0.0.1:8809")
        .header(header::COOKIE, format!("mcpvisor_ui={TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .expect("a request");
    assert_eq!(send(&ui, cookie).await.0, StatusCode::FORBIDDEN);
    assert_not_asked(&hub);

    // The page's own request: the cookie, its origin and its CSRF token.
    let page = Request::builder()
        .uri("/")
        .header(header::HOST, "127.0.0.1:8809")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .expect("a request");
    let html = ui
        .clone()
        .oneshot(page)
        .await
        .expect("the page")
        .into_body();
    let html = String::from_utf8(to_bytes(html, 1 << 20).await.expect("the page").to_vec())
        .expect("UTF-8");
    let csrf = html
        .split("<meta name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page carries its CSRF token");
    let own = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, "127.0.0.1:8809")
        .header(header::ORIGIN, "http://127.0.0.1:8809")
        .header(header::COOKIE, format!("mcpvisor_ui={TOKEN}"))
        .header("x-csrf-token", csrf)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"names":["create_issue"]}"#))
        .expect("a request");
    let (status, body) = send(&ui, own).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"approved": ["create_issue"]}));
}
