//! A remote server that is not mcpvisor: a small stateless Streamable HTTP
//! server (JSON answers only, no session, no standalone stream) that
//! records every request it gets, spoken to through `Connection` with a
//! remote definition.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use mcpvisor_config::ServerDef;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_runner::{Connection, ServerSpec, spawner};
use mcpvisor_session::Config;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// What the stub saw: method, its headers (lower-case names), its body.
type Seen = Arc<Mutex<Vec<(Method, BTreeMap<String, String>, Value)>>>;

async fn stub(seen: Seen, method: Method, headers: HeaderMap, body: String) -> Response {
    let headers = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    seen.lock()
        .expect("seen")
        .push((method.clone(), headers, msg.clone()));
    if method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match msg["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stub", "version": "1"},
        }),
        Some("tools/list") => {
            json!({"tools": [{"name": "hello", "inputSchema": {"type": "object"}}]})
        }
        // Pretty-printed over several lines, as some servers answer.
        Some("tools/call") => {
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": "hi from the stub"}]}});
            let body = serde_json::to_string_pretty(&answer).unwrap_or_default();
            return ([("content-type", "application/json")], body).into_response();
        }
        _ => json!({}),
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
    ([("content-type", "application/json")], body).into_response()
}

#[tokio::test]
async fn a_stateless_json_server_with_headers_from_the_env_file() {
    let seen = Seen::default();
    let state = Arc::clone(&seen);
    let app = Router::new().route(
        "/mcp",
        any(move |method, headers, body| stub(Arc::clone(&state), method, headers, body)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = std::env::temp_dir().join(format!("mcpvisor-remote-stub-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let env_file = dir.join("stub.env");
    std::fs::write(&env_file, "STUB_KEY=k-123\n").expect("env file");
    let mut def = ServerDef::remote("stub", format!("http://{addr}/mcp"));
    def.env_file = Some(env_file);
    def.headers
        .insert("X-Api-Key".into(), "key=${STUB_KEY}".into());
    let spec = ServerSpec {
        def,
        env_overrides: Vec::new(),
    };
    let cfg = Config::default();
    let conn = Connection::start(spawner(&spec, &cfg, Passthrough::Discard), cfg, None);
    let init = conn.initialize(WAIT, WAIT).await.expect("initialize");
    assert_eq!(init.server_info["name"], "stub");
    let tools = conn
        .request("tools/list", json!({}), WAIT)
        .await
        .expect("tools/list");
    assert_eq!(tools["tools"][0]["name"], "hello");
    let called = conn
        .request(
            "tools/call",
            json!({"name": "hello", "arguments": {}}),
            WAIT,
        )
        .await
        .expect("tools/call");
    assert_eq!(called["content"][0]["text"], "hi from the stub");
    conn.close().await;

    let seen = seen.lock().expect("seen").clone();
    // The era is asked first (`server/discover`, with the entry's headers);
    // this stub is of the handshake era, so the rest goes as ever.
    let (probe, seen) = seen.split_first().expect("a request");
    assert_eq!(probe.2["method"], "server/discover", "{probe:?}");
    assert_eq!(
        probe.1.get("x-api-key").map(String::as_str),
        Some("key=k-123")
    );
    let methods: Vec<(Method, String)> = seen
        .iter()
        .map(|(m, _, body)| (m.clone(), body["method"].as_str().unwrap_or("").to_owned()))
        .collect();
    // No session: no standalone stream, no DELETE; just the messages (the
    // session reads the tool list once itself, too).
    assert!(
        methods.iter().all(|(m, _)| *m == Method::POST),
        "{methods:?}"
    );
    let names: Vec<&str> = methods.iter().map(|(_, n)| n.as_str()).collect();
    let lists = names.iter().filter(|n| **n == "tools/list").count();
    assert!((1..=2).contains(&lists), "{names:?}");
    assert_eq!(names.len(), 3 + lists, "{names:?}");
    assert_eq!(names[..2], ["initialize", "notifications/initialized"]);
    assert_eq!(names.last(), Some(&"tools/call"));
    for (i, (_, headers, _)) in seen.iter().enumerate() {
        assert_eq!(
            headers.get("x-api-key").map(String::as_str),
            Some("key=k-123")
        );
        assert_eq!(
            headers.get("accept").map(String::as_str),
            Some("application/json, text/event-stream")
        );
        assert_eq!(
            headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        assert!(!headers.contains_key("mcp-session-id"));
        // The agreed version on every request after initialize.
        let version = headers.get("mcp-protocol-version").map(String::as_str);
        assert_eq!(version, (i > 0).then_some("2025-06-18"), "request {i}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stateless server of the 2026-07-28 era that refuses the first
/// `refuse` discoveries with `-32022`, listing `supported` as its versions;
/// when `modern` is false it is of the handshake era past them (it does
/// not know `server/discover`).
#[derive(Clone)]
struct Picky {
    seen: Seen,
    refuse: usize,
    supported: &'static [&'static str],
    modern: bool,
}

impl Picky {
    async fn answer(self, method: Method, headers: HeaderMap, body: String) -> Response {
        let headers: BTreeMap<String, String> = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let msg: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let refusals = {
            let mut seen = self.seen.lock().expect("seen");
            seen.push((method.clone(), headers.clone(), msg.clone()));
            seen.iter()
                .filter(|(_, _, m)| m["method"] == "server/discover")
                .count()
        };
        if method != Method::POST {
            return StatusCode::METHOD_NOT_ALLOWED.into_response();
        }
        let Some(id) = msg.get("id").cloned() else {
            return StatusCode::ACCEPTED.into_response();
        };
        let json = |status: StatusCode, body: Value| {
            (
                status,
                [("content-type", "application/json")],
                body.to_string(),
            )
                .into_response()
        };
        let result = match msg["method"].as_str() {
            Some("server/discover") if refusals <= self.refuse => {
                let requested = headers.get("mcp-protocol-version").cloned();
                return json(
                    StatusCode::BAD_REQUEST,
                    json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": -32022,
                        "message": "Unsupported protocol version",
                        "data": {"supported": self.supported, "requested": requested},
                    }}),
                );
            }
            Some("server/discover") if self.modern => json!({
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "picky", "version": "1"},
                "resultType": "complete",
            }),
            Some("initialize") if !self.modern => json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "picky-old", "version": "1"},
            }),
            Some("tools/list") => json!({"tools": [], "resultType": "complete"}),
            _ => {
                return json(
                    StatusCode::NOT_FOUND,
                    json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": -32601, "message": "Method not found"}}),
                );
            }
        };
        json(
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "result": result}),
        )
    }
}

/// Connects to `picky`, reads its tool list, and returns what it said in
/// `initialize` (or discovery) and every request it saw.
async fn against(
    picky: Picky,
) -> (
    String,
    Value,
    Vec<(Method, BTreeMap<String, String>, Value)>,
) {
    let seen = Arc::clone(&picky.seen);
    let app = Router::new().route(
        "/mcp",
        any(move |method, headers, body| picky.clone().answer(method, headers, body)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let spec = ServerSpec {
        def: ServerDef::remote("picky", format!("http://{addr}/mcp")),
        env_overrides: Vec::new(),
    };
    let cfg = Config::default();
    let conn = Connection::start(spawner(&spec, &cfg, Passthrough::Discard), cfg, None);
    let init = conn.initialize(WAIT, WAIT).await.expect("initialize");
    conn.request("tools/list", json!({}), WAIT)
        .await
        .expect("tools/list");
    conn.close().await;
    let seen = seen.lock().expect("seen").clone();
    (init.protocol_version, init.server_info, seen)
}

fn methods(seen: &[(Method, BTreeMap<String, String>, Value)]) -> Vec<&str> {
    seen.iter()
        .filter_map(|(_, _, body)| body["method"].as_str())
        .collect()
}

#[tokio::test]
async fn a_refused_version_is_asked_again_in_one_both_speak() {
    let picky = Picky {
        seen: Seen::default(),
        refuse: 1,
        supported: &["2026-07-28"],
        modern: true,
    };
    let (version, info, seen) = against(picky).await;
    assert_eq!(version, "2026-07-28");
    assert_eq!(info["name"], "picky");
    let names = methods(&seen);
    // Discovery twice (refused, then answered), no handshake, and the
    // session's own requests in the era.
    assert_eq!(
        names[..2],
        ["server/discover", "server/discover"],
        "{names:?}"
    );
    assert!(!names.contains(&"initialize"), "{names:?}");
    assert!(names[2..].iter().all(|n| *n == "tools/list"), "{names:?}");
    assert!(names.len() > 2, "{names:?}");
    for (_, headers, body) in &seen {
        assert_eq!(
            headers.get("mcp-protocol-version").map(String::as_str),
            Some("2026-07-28"),
            "{body}"
        );
        assert_eq!(
            body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{body}"
        );
        assert!(
            body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].is_object(),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_version_refused_twice_leaves_the_server_to_the_handshake() {
    // Refused again after the retry: not asked a third time.
    let picky = Picky {
        seen: Seen::default(),
        refuse: 2,
        supported: &["2026-07-28"],
        modern: false,
    };
    let (version, info, seen) = against(picky).await;
    assert_eq!(version, "2025-11-25");
    assert_eq!(info["name"], "picky-old");
    let names = methods(&seen);
    assert_eq!(
        names[..3],
        ["server/discover", "server/discover", "initialize"],
        "{names:?}"
    );
}

#[tokio::test]
async fn a_refusal_listing_no_version_of_the_era_is_not_asked_again() {
    // The server names only handshake-era versions: nothing to retry with,
    // so the handshake goes at once.
    let picky = Picky {
        seen: Seen::default(),
        refuse: 1,
        supported: &["2025-11-25", "2025-06-18"],
        modern: false,
    };
    let (version, _, seen) = against(picky).await;
    assert_eq!(version, "2025-11-25");
    let names = methods(&seen);
    assert_eq!(names[..2], ["server/discover", "initialize"], "{names:?}");
    assert_eq!(
        names.iter().filter(|n| **n == "server/discover").count(),
        1,
        "{names:?}"
    );
}
