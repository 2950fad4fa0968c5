//! The HTTP front end to end: a real HTTP client against `serve`, with a
//! fake hub that speaks the front protocol.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_gateway::fronts::{FrontCommand, FrontId, Outbound};
use mcpvisor_http::{BearerToken, HttpConfig, serve};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HOST, ORIGIN};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::timeout;

/// Unrelated messages `flood` sends, 16 KiB each: more than socket
/// buffers hold.
const FLOOD: usize = 1000;

/// The bound on every wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Seen {
    Open,
    Close(FrontId),
}

/// A hub that answers every request with `{"method", "params"}`, after:
/// - `progress`: a progress notification related to the request;
/// - `notify`: a list change related to nothing;
/// - `hold`: a progress, then (after the gate opens) another progress;
/// - `flood`: [`FLOOD`] unrelated log messages;
/// - `pair`: nothing until a second `pair` comes, then answers both.
async fn fake_hub(
    mut rx: mpsc::Receiver<FrontCommand>,
    seen: mpsc::UnboundedSender<Seen>,
    gate: Arc<Notify>,
) {
    let mut fronts: HashMap<FrontId, mpsc::Sender<Outbound>> = HashMap::new();
    let mut paired: Vec<(mpsc::Sender<Outbound>, Value, Value)> = Vec::new();
    while let Some(cmd) = rx.recv().await {
        match cmd {
            FrontCommand::Open { front, out } => {
                fronts.insert(front, out);
                let _ = seen.send(Seen::Open);
            }
            // The end of a front, whether it drains or is abandoned.
            FrontCommand::Close { front } | FrontCommand::Abandon { front } => {
                fronts.remove(&front);
                let _ = seen.send(Seen::Close(front));
            }
            FrontCommand::Message { front, line, .. } => {
                let msg: Value = serde_json::from_slice(&line).expect("json");
                let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
                    continue;
                };
                let out = fronts[&front].clone();
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                let related = Some(Bytes::from(id.to_string()));
                let result = line_of(
                    &json!({"jsonrpc": "2.0", "id": id, "result": {"method": method, "params": params}}),
                );
                let answer = Outbound {
                    line: result,
                    related: related.clone(),
                    response: true,
                };
                let progress = move |n: u32| Outbound {
                    line: line_of(
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": n}}),
                    ),
                    related: related.clone(),
                    response: false,
                };
                match method {
                    "progress" => {
                        out.send(progress(1)).await.expect("front");
                        out.send(answer).await.expect("front");
                    }
                    "notify" => {
                        let changed = line_of(
                            &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                        );
                        out.send(Outbound {
                            line: changed,
                            related: None,
                            response: false,
                        })
                        .await
                        .expect("front");
                        out.send(answer).await.expect("front");
                    }
                    "flood" => {
                        let pad = "x".repeat(16 * 1024);
                        for n in 0..FLOOD {
                            let line = line_of(
                                &json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n, "pad": pad}}),
                            );
                            out.send(Outbound {
                                line,
                                related: None,
                                response: false,
                            })
                            .await
                            .expect("front");
                        }
                        out.send(answer).await.expect("front");
                    }
                    "hold" => {
                        let gate = gate.clone();
                        tokio::spawn(async move {
                            out.send(progress(1)).await.expect("front");
                            gate.notified().await;
                            out.send(progress(2)).await.expect("front");
                            out.send(answer).await.expect("front");
                        });
                    }
                    "pair" => {
                        paired.push((out, id.clone(), params));
                        if paired.len() == 2 {
                            for (out, id, params) in paired.drain(..).rev() {
                                let line = line_of(
                                    &json!({"jsonrpc": "2.0", "id": id, "result": {"method": "pair", "params": params}}),
                                );
                                out.send(Outbound {
                                    line,
                                    related: Some(Bytes::from(id.to_string())),
                                    response: false,
                                })
                                .await
                                .expect("front");
                            }
                        }
                    }
                    // A method the server behind does not implement.
                    "unknown/method" => {
                        let line = line_of(
                            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
                        );
                        let related = Some(Bytes::from(id.to_string()));
                        out.send(Outbound {
                            line,
                            related,
                            response: false,
                        })
                        .await
                        .expect("front");
                    }
                    _ => out.send(answer).await.expect("front"),
                }
            }
        }
    }
}

fn line_of(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).expect("json"))
}

struct Harness {
    url: String,
    base: String,
    client: reqwest::Client,
    seen: mpsc::UnboundedReceiver<Seen>,
    gate: Arc<Notify>,
    shutdown: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<Result<(), mcpvisor_http::ServeError>>,
}

async fn start(cfg: HttpConfig) -> Harness {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (hub_tx, hub_rx) = mpsc::channel(64);
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let gate = Arc::new(Notify::new());
    tokio::spawn(fake_hub(hub_rx, seen_tx, gate.clone()));
    let (stop, stopped) = oneshot::channel::<()>();
    let path = cfg.path.clone();
    let server = tokio::spawn(serve(listener, cfg, hub_tx, async move {
        let _ = stopped.await;
    }));
    Harness {
        url: format!("http://{addr}{path}"),
        base: format!("http://{addr}"),
        client: reqwest::Client::new(),
        seen,
        gate,
        shutdown: Some(stop),
        server,
    }
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

impl Harness {
    fn post(&self, session: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .post(&self.url)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).expect("json"));
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-06-18");
        }
        req
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> reqwest::Response {
        timeout(WAIT, req.send())
            .await
            .expect("in time")
            .expect("sent")
    }

    /// Sends `req` with `headers` replacing any it has.
    async fn send_with(
        &self,
        req: reqwest::RequestBuilder,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = req.build().expect("request");
        for (name, value) in headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name");
            req.headers_mut()
                .insert(name, value.parse().expect("value"));
        }
        timeout(WAIT, self.client.execute(req))
            .await
            .expect("in time")
            .expect("sent")
    }

    async fn initialize(&self) -> String {
        let init = request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        );
        let resp = self.send(self.post(None, &init)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let id = resp.headers()["mcp-session-id"]
            .to_str()
            .expect("ascii")
            .to_owned();
        assert_eq!(id.len(), 32, "128 random bits in hex");
        id
    }

    async fn json(&self, resp: reqwest::Response) -> Value {
        timeout(WAIT, resp.json())
            .await
            .expect("in time")
            .expect("json body")
    }

    async fn closed(&mut self) -> FrontId {
        loop {
            match timeout(WAIT, self.seen.recv()).await.expect("in time") {
                Some(Seen::Close(front)) => return front,
                Some(Seen::Open) => {}
                None => panic!("hub gone"),
            }
        }
    }

    fn get(&self, session: &str) -> reqwest::RequestBuilder {
        self.client
            .get(&self.url)
            .header(ACCEPT, "text/event-stream")
            .header("mcp-session-id", session)
    }
}

/// Reads SSE events from a response body.
struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Events {
    fn new(resp: reqwest::Response) -> Self {
        assert_eq!(resp.headers()[CONTENT_TYPE], "text/event-stream");
        Events {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        }
    }

    /// The next event's id and data; `None` when the stream ended.
    /// Comments, priming events and `retry` fields are skipped.
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            let block = self.block().await?;
            if block.data.is_empty() {
                continue;
            }
            return Some((
                block.id,
                serde_json::from_str(&block.data).expect("json data"),
            ));
        }
    }

    /// The next block that is not a comment, as sent; `None` when the
    /// stream ended.
    async fn block(&mut self) -> Option<Block> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(raw).expect("utf-8");
                let mut block = Block::default();
                for line in text.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        block.id = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        block.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        block.has_data = true;
                    } else if let Some(v) = line.strip_prefix("retry: ") {
                        block.retry = Some(v.parse().expect("retry in ms"));
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        block.event = Some(v.to_owned());
                    }
                }
                if text.starts_with(':') {
                    continue;
                }
                return Some(block);
            }
            match timeout(WAIT, self.body.next()).await.expect("in time") {
                Some(chunk) => self.buf.extend_from_slice(&chunk.expect("chunk")),
                None => return None,
            }
        }
    }
}

/// One SSE event as sent.
#[derive(Debug, Default)]
struct Block {
    id: String,
    data: String,
    has_data: bool,
    retry: Option<u64>,
    event: Option<String>,
}

// === tests ===

#[tokio::test]
async fn initialize_then_json_answer() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h
        .send(h.post(Some(&s), &request(1, "tools/list", json!({}))))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
    let v = h.json(resp).await;
    assert_eq!(v["id"], 1);
    assert_eq!(v["result"]["method"], "tools/list");

    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = h.send(h.post(Some(&s), &note)).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    assert!(resp.bytes().await.expect("body").is_empty());
}

#[tokio::test]
async fn progress_first_makes_a_stream() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h
        .send(h.post(Some(&s), &request(5, "progress", json!({}))))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut events = Events::new(resp);
    let (_, first) = events.next().await.expect("progress");
    assert_eq!(first["method"], "notifications/progress");
    let (_, second) = events.next().await.expect("response");
    assert_eq!(second["id"], 5);
    assert!(
        events.next().await.is_none(),
        "the stream ends after the response"
    );
}

#[tokio::test]
async fn standalone_stream_gets_unrelated_messages() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h.send(h.get(&s)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut standalone = Events::new(resp);
    let second = h.send(h.get(&s)).await;
    assert_eq!(second.status(), StatusCode::CONFLICT);

    let resp = h
        .send(h.post(Some(&s), &request(2, "notify", json!({}))))
        .await;
    let v = h.json(resp).await;
    assert_eq!(v["id"], 2);
    let (_, changed) = standalone.next().await.expect("event");
    assert_eq!(changed["method"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn unrelated_messages_wait_for_the_standalone_stream() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h
        .send(h.post(Some(&s), &request(2, "notify", json!({}))))
        .await;
    assert_eq!(h.json(resp).await["id"], 2);
    let mut standalone = Events::new(h.send(h.get(&s)).await);
    let (_, changed) = standalone.next().await.expect("buffered event");
    assert_eq!(changed["method"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn delete_ends_the_session() {
    let mut h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h
        .send(h.client.delete(&h.url).header("mcp-session-id", &s))
        .await;
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    h.closed().await;
    let resp = h
        .send(h.post(Some(&s), &request(1, "ping", json!({}))))
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let resp = h
        .send(h.client.delete(&h.url).header("mcp-session-id", &s))
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn no_session_is_400() {
    let h = start(HttpConfig::default()).await;
    let resp = h
        .send(h.post(None, &request(1, "tools/list", json!({}))))
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(h.json(resp).await["id"], 1);
}

#[tokio::test]
async fn batches_are_400() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let batch = json!([request(1, "ping", json!({}))]);
    let resp = h.send(h.post(Some(&s), &batch)).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert_eq!(h.json(resp).await["error"]["code"], -32600);
}

#[tokio::test]
async fn unsupported_protocol_version_is_400() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let req = h.post(Some(&s), &request(1, "ping", json!({})));
    let resp = h
        .send_with(req, &[("mcp-protocol-version", "1999-01-01")])
        .await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn foreign_origin_and_host_are_403() {
    let h = start(HttpConfig::default()).await;
    let init = request(0, "initialize", json!({}));
    let req = h.post(None, &init).header(ORIGIN, "https://evil.example");
    assert_eq!(h.send(req).await.status(), StatusCode::FORBIDDEN);
    let resp = h
        .send_with(h.post(None, &init), &[("host", "evil.example")])
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = h
        .send_with(h.post(None, &init), &[("host", "localhost:1")])
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let req = h.post(None, &init).header(ORIGIN, "http://localhost:5173");
    assert_eq!(h.send(req).await.status(), StatusCode::OK);
    // Health needs no checks.
    let resp = h
        .send(
            h.client
                .get(format!("{}/healthz", h.base))
                .header(HOST, "evil.example"),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn readiness_waits_for_the_gateway_and_probes_need_no_token() {
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    let cfg = HttpConfig {
        token: Some(BearerToken::new("s3cret")),
        ready: Some(ready_rx),
        ..HttpConfig::default()
    };
    let h = start(cfg).await;
    let probe = |path: &str| {
        h.client
            .get(format!("{}{path}", h.base))
            .header(ORIGIN, "https://evil.example")
    };
    let resp = h.send(probe("/readyz")).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.text().await.expect("body"), "starting");
    // Alive while not ready.
    assert_eq!(h.send(probe("/healthz")).await.status(), StatusCode::OK);
    ready_tx.send(true).expect("watched");
    let resp = h.send(probe("/readyz")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.expect("body"), "ready");
}

#[tokio::test]
async fn token_is_required() {
    let cfg = HttpConfig {
        token: Some(BearerToken::new("s3cret")),
        ..HttpConfig::default()
    };
    let h = start(cfg).await;
    let init = request(0, "initialize", json!({}));
    let resp = h.send(h.post(None, &init)).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let resp = h.send(h.post(None, &init).bearer_auth("wrong")).await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = h.send(h.post(None, &init).bearer_auth("s3cret")).await;
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test]
async fn size_accept_and_content_type() {
    let cfg = HttpConfig {
        max_message_bytes: 1024,
        ..HttpConfig::default()
    };
    let h = start(cfg).await;
    let s = h.initialize().await;
    let big = request(1, "echo", json!({"pad": "x".repeat(2048)}));
    let resp = h.send(h.post(Some(&s), &big)).await;
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(h.json(resp).await["error"].is_object());

    let ping = request(2, "ping", json!({}));
    let resp = h
        .send_with(h.post(Some(&s), &ping), &[("accept", "text/html")])
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_ACCEPTABLE);
    let resp = h
        .send_with(h.post(Some(&s), &ping), &[("content-type", "text/plain")])
        .await;
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn a_dropped_stream_resumes_with_last_event_id() {
    let h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h
        .send(h.post(Some(&s), &request(9, "hold", json!({}))))
        .await;
    let mut events = Events::new(resp);
    let (last, first) = events.next().await.expect("progress");
    assert_eq!(first["params"]["progress"], 1);
    drop(events);
    h.gate.notify_one();

    let resp = h.send(h.get(&s).header("last-event-id", &last)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut resumed = Events::new(resp);
    let (id2, second) = resumed.next().await.expect("second progress");
    assert_ne!(id2, last);
    assert_eq!(second["params"]["progress"], 2);
    let (_, answer) = resumed.next().await.expect("response");
    assert_eq!(answer["id"], 9);
    assert!(resumed.next().await.is_none());
}

#[tokio::test]
async fn sessions_keep_their_own_ids() {
    let h = start(HttpConfig::default()).await;
    let a = h.initialize().await;
    let b = h.initialize().await;
    let ra = h.send(h.post(Some(&a), &request(7, "pair", json!({"who": "a"}))));
    let rb = h.send(h.post(Some(&b), &request(7, "pair", json!({"who": "b"}))));
    let (ra, rb) = tokio::join!(ra, rb);
    let (va, vb) = (h.json(ra).await, h.json(rb).await);
    assert_eq!(va["result"]["params"]["who"], "a");
    assert_eq!(vb["result"]["params"]["who"], "b");
}

/// The `_meta` of a 2026-07-28 request.
fn modern_meta(version: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    })
}

impl Harness {
    /// A 2026-07-28 request with its headers: `params` gets the `_meta`.
    fn modern(&self, id: u64, method: &str, mut params: Value) -> reqwest::RequestBuilder {
        params["_meta"] = modern_meta("2026-07-28");
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut req = self
            .post(None, &request(id, method, params))
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            req = req.header("mcp-name", name);
        }
        req
    }

    /// A refusal's status and JSON-RPC error code; the id is the request's.
    async fn refusal(&self, req: reqwest::RequestBuilder, id: u64) -> (StatusCode, i64, Value) {
        let resp = self.send(req).await;
        let status = resp.status();
        let v = self.json(resp).await;
        assert_eq!(v["id"], id, "{v}");
        let code = v["error"]["code"].as_i64().expect("an error code");
        (status, code, v["error"].clone())
    }
}

#[tokio::test]
async fn stateless_request_without_session() {
    let mut h = start(HttpConfig::default()).await;
    let resp = h.send(h.modern(3, "tools/list", json!({}))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("mcp-session-id").is_none());
    assert_eq!(h.json(resp).await["result"]["method"], "tools/list");
    h.closed().await;

    let call = h.modern(4, "tools/call", json!({"name": "echo", "arguments": {}}));
    let resp = h.send(call).await;
    assert_eq!(resp.status(), StatusCode::OK);
    h.closed().await;

    // A name outside the header-safe characters comes Base64-encoded.
    let params = json!({"name": "größe", "arguments": {}, "_meta": modern_meta("2026-07-28")});
    let req = h
        .post(None, &request(5, "tools/call", params))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "=?base64?Z3LDtsOfZQ==?=");
    assert_eq!(h.send(req).await.status(), StatusCode::OK);
    h.closed().await;
}

#[tokio::test]
async fn stateless_request_needs_valid_meta() {
    let h = start(HttpConfig::default()).await;
    let headers = |req: reqwest::RequestBuilder| {
        req.header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
    };
    let mut no_version = modern_meta("2026-07-28");
    no_version
        .as_object_mut()
        .expect("object")
        .remove("io.modelcontextprotocol/protocolVersion");
    let mut no_capabilities = modern_meta("2026-07-28");
    no_capabilities
        .as_object_mut()
        .expect("object")
        .remove("io.modelcontextprotocol/clientCapabilities");
    for (id, params) in [
        (1, json!({})),
        (2, json!({"_meta": no_version})),
        (3, json!({"_meta": no_capabilities})),
    ] {
        let req = headers(h.post(None, &request(id, "server/discover", params)));
        let (status, code, _) = h.refusal(req, id).await;
        assert_eq!(
            (status, code),
            (StatusCode::BAD_REQUEST, -32602),
            "case {id}"
        );
    }
}

#[tokio::test]
async fn stateless_headers_must_match_the_body() {
    let h = start(HttpConfig::default()).await;
    let call = json!({"name": "echo", "arguments": {}, "_meta": modern_meta("2026-07-28")});
    let with = |id: u64, headers: &[(&str, &str)]| {
        let mut req = h.post(None, &request(id, "tools/call", call.clone()));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req
    };
    let version = ("mcp-protocol-version", "2026-07-28");
    let method = ("mcp-method", "tools/call");
    let name = ("mcp-name", "echo");
    let cases: [(u64, Vec<(&str, &str)>); 6] = [
        (1, vec![method, name]),
        (
            2,
            vec![("mcp-protocol-version", "2025-11-25"), method, name],
        ),
        (3, vec![version, name]),
        (4, vec![version, ("mcp-method", "tools/list"), name]),
        (5, vec![version, method]),
        (6, vec![version, method, ("mcp-name", "other")]),
    ];
    for (id, headers) in cases {
        let (status, code, _) = h.refusal(with(id, &headers), id).await;
        assert_eq!(
            (status, code),
            (StatusCode::BAD_REQUEST, -32020),
            "case {id}"
        );
    }
}

#[tokio::test]
async fn stateless_unsupported_version_lists_the_supported() {
    let h = start(HttpConfig::default()).await;
    let params = json!({"_meta": modern_meta("v999.0.0")});
    let req = h
        .post(None, &request(9, "server/discover", params))
        .header("mcp-protocol-version", "v999.0.0")
        .header("mcp-method", "server/discover");
    let (status, code, error) = h.refusal(req, 9).await;
    assert_eq!((status, code), (StatusCode::BAD_REQUEST, -32022));
    assert_eq!(error["data"]["requested"], "v999.0.0");
    let supported = error["data"]["supported"].as_array().expect("supported");
    assert_eq!(supported[0], "2026-07-28");
    assert!(supported.contains(&json!("2025-11-25")));
}

#[tokio::test]
async fn stateless_removed_and_unknown_methods_are_404() {
    let mut h = start(HttpConfig::default()).await;
    for (id, method) in [
        (1, "initialize"),
        (2, "ping"),
        (3, "logging/setLevel"),
        (4, "resources/subscribe"),
        (5, "resources/unsubscribe"),
    ] {
        let (status, code, _) = h.refusal(h.modern(id, method, json!({})), id).await;
        assert_eq!((status, code), (StatusCode::NOT_FOUND, -32601), "{method}");
    }
    // Unknown to the hub: its -32601 answer gets the status.
    let req = h.modern(6, "unknown/method", json!({}));
    let (status, code, _) = h.refusal(req, 6).await;
    assert_eq!((status, code), (StatusCode::NOT_FOUND, -32601));
    h.closed().await;
}

#[tokio::test]
async fn max_sessions_is_503() {
    let cfg = HttpConfig {
        max_sessions: 1,
        ..HttpConfig::default()
    };
    let h = start(cfg).await;
    h.initialize().await;
    let init = request(0, "initialize", json!({}));
    let resp = h.send(h.post(None, &init)).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn idle_sessions_expire() {
    let cfg = HttpConfig {
        session_idle_timeout: Duration::from_millis(200),
        ..HttpConfig::default()
    };
    let mut h = start(cfg).await;
    let s = h.initialize().await;
    h.closed().await;
    let resp = h
        .send(h.post(Some(&s), &request(1, "ping", json!({}))))
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn drain_finishes_requests_in_flight_then_stops() {
    let mut h = start(HttpConfig::default()).await;
    let s = h.initialize().await;
    let resp = h
        .send(h.post(Some(&s), &request(9, "hold", json!({}))))
        .await;
    let mut events = Events::new(resp);
    events.next().await.expect("progress");

    h.shutdown.take().expect("once").send(()).expect("serving");
    let ready = format!("{}/readyz", h.base);
    // Readiness turns as soon as the drain starts; poll for that edge.
    let turned = timeout(WAIT, async {
        loop {
            let resp = h.client.get(&ready).send().await.expect("sent");
            if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
                break;
            }
            tokio::task::yield_now().await;
        }
    });
    turned.await.expect("readiness turns");
    let init = request(0, "initialize", json!({}));
    let resp = h.send(h.post(None, &init)).await;
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);

    h.gate.notify_one();
    events.next().await.expect("second progress");
    let (_, answer) = events.next().await.expect("response");
    assert_eq!(answer["id"], 9);
    h.closed().await;
    timeout(WAIT, &mut h.server)
        .await
        .expect("in time")
        .expect("joined")
        .expect("served");
}

#[tokio::test]
async fn the_drain_lasts_its_minimum_with_nothing_in_flight() {
    let cfg = HttpConfig {
        drain_min: Duration::from_secs(600),
        ..HttpConfig::default()
    };
    let mut h = start(cfg).await;
    h.shutdown.take().expect("once").send(()).expect("serving");
    let ready = format!("{}/readyz", h.base);
    let turned = timeout(WAIT, async {
        loop {
            let resp = h.client.get(&ready).send().await.expect("sent");
            if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
                break;
            }
            tokio::task::yield_now().await;
        }
    });
    turned.await.expect("readiness turns");
    // Nothing is in flight, and yet the front still answers, refusing what
    // is new, for a balancer that has not looked at /readyz again yet.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let init = request(0, "initialize", json!({}));
        let resp = h.send(h.post(None, &init)).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let resp = h.send(h.client.get(&ready)).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert!(!h.server.is_finished());
    h.server.abort();
}

#[tokio::test]
async fn a_stalled_reader_is_cut_off_and_slows_nobody() {
    let cfg = HttpConfig {
        front_queue: 8,
        stream_queue: 4,
        ..HttpConfig::default()
    };
    let h = start(cfg).await;
    let a = h.initialize().await;
    let b = h.initialize().await;
    // A's standalone stream is open and never read while the hub floods it.
    let stalled = h.send(h.get(&a)).await;
    assert_eq!(stalled.status(), StatusCode::OK);
    let resp = h
        .send(h.post(Some(&a), &request(1, "flood", json!({}))))
        .await;
    assert_eq!(h.json(resp).await["id"], 1);
    let resp = h
        .send(h.post(Some(&b), &request(1, "ping", json!({}))))
        .await;
    assert_eq!(h.json(resp).await["id"], 1);

    let mut events = Events::new(stalled);
    let mut got = 0;
    while events.next().await.is_some() {
        got += 1;
    }
    assert!(
        got < FLOOD,
        "the stalled stream was cut ({got} events read)"
    );
}

/// The headers of a client that negotiated 2025-11-25 (which polls).
const POLLING: [(&str, &str); 1] = [("mcp-protocol-version", "2025-11-25")];

#[tokio::test]
async fn a_polling_client_s_stream_is_primed_and_an_older_one_s_is_not() {
    let h = start(HttpConfig {
        sse_retry: Duration::from_millis(250),
        ..HttpConfig::default()
    })
    .await;
    let s = h.initialize().await;
    let req = h.post(Some(&s), &request(5, "progress", json!({})));
    let mut events = Events::new(h.send_with(req, &POLLING).await);
    let prime = events.block().await.expect("priming");
    assert!(prime.has_data && prime.data.is_empty(), "{prime:?}");
    assert!(prime.id.ends_with("-0"), "{prime:?}");
    assert_eq!(prime.retry, Some(250));
    let (id, progress) = events.next().await.expect("progress");
    assert_eq!(progress["method"], "notifications/progress");
    assert_eq!(
        id.split('-').next(),
        prime.id.split('-').next(),
        "one stream"
    );
    let (_, answer) = events.next().await.expect("response");
    assert_eq!(answer["id"], 5);
    assert!(events.block().await.is_none());

    // 2025-06-18 (`post`'s header): no priming event.
    let req = h.post(Some(&s), &request(6, "progress", json!({})));
    let mut events = Events::new(h.send(req).await);
    let first = events.block().await.expect("progress");
    assert!(first.data.contains("notifications/progress"), "{first:?}");
}

#[tokio::test]
async fn with_polling_a_stream_is_closed_with_retry_and_resumed_with_last_event_id() {
    let h = start(HttpConfig {
        sse_poll: Some(Duration::from_millis(300)),
        sse_retry: Duration::from_millis(50),
        ..HttpConfig::default()
    })
    .await;
    let s = h.initialize().await;
    let req = h.post(Some(&s), &request(9, "hold", json!({})));
    let mut events = Events::new(h.send_with(req, &POLLING).await);
    let prime = events.block().await.expect("priming");
    assert!(
        prime.data.is_empty() && prime.id.ends_with("-0"),
        "{prime:?}"
    );
    let (last, first) = events.next().await.expect("progress");
    assert_eq!(first["params"]["progress"], 1);
    // Nothing more comes within the hold: the server closes the
    // connection, saying when to come back, and the stream goes on.
    let retry = events.block().await.expect("retry");
    assert_eq!(
        (retry.retry, retry.has_data),
        (Some(50), false),
        "{retry:?}"
    );
    assert!(events.block().await.is_none(), "closed after retry");

    h.gate.notify_one();
    let resp = h
        .send_with(h.get(&s).header("last-event-id", &last), &POLLING)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut resumed = Events::new(resp);
    let (_, second) = resumed.next().await.expect("second progress");
    assert_eq!(second["params"]["progress"], 2);
    let (_, answer) = resumed.next().await.expect("response");
    assert_eq!(answer["id"], 9);
    assert!(resumed.next().await.is_none());
}

#[tokio::test]
async fn with_polling_a_silent_request_gets_a_primed_stream_and_its_answer_later() {
    let h = start(HttpConfig {
        sse_poll: Some(Duration::from_millis(200)),
        sse_retry: Duration::from_millis(50),
        ..HttpConfig::default()
    })
    .await;
    let a = h.initialize().await;
    let b = h.initialize().await;
    // `pair` answers nothing until a second one comes.
    let req = h.post(Some(&a), &request(3, "pair", json!({"who": "a"})));
    let mut events = Events::new(h.send_with(req, &POLLING).await);
    let prime = events.block().await.expect("priming");
    assert!(
        prime.data.is_empty() && prime.id.ends_with("-0"),
        "{prime:?}"
    );
    assert_eq!(prime.retry, Some(50));
    let retry = events.block().await.expect("retry");
    assert_eq!(retry.retry, Some(50), "{retry:?}");
    assert!(events.block().await.is_none());

    let other = h
        .send(h.post(Some(&b), &request(3, "pair", json!({"who": "b"}))))
        .await;
    assert_eq!(h.json(other).await["result"]["params"]["who"], "b");
    let resp = h
        .send_with(h.get(&a).header("last-event-id", &prime.id), &POLLING)
        .await;
    let mut resumed = Events::new(resp);
    let (_, answer) = resumed.next().await.expect("response");
    assert_eq!(answer["result"]["params"]["who"], "a");
    assert!(resumed.next().await.is_none());
}

#[tokio::test]
async fn the_2024_11_05_sse_transport_answers_on_its_stream() {
    let mut h = start(HttpConfig::default()).await;
    let resp = h
        .send(
            h.client
                .get(format!("{}/sse", h.base))
                .header(ACCEPT, "text/event-stream"),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut events = Events::new(resp);
    let endpoint = events.block().await.expect("endpoint");
    assert_eq!(endpoint.event.as_deref(), Some("endpoint"), "{endpoint:?}");
    assert!(
        endpoint.data.starts_with("/messages?session_id="),
        "{endpoint:?}"
    );
    let url = format!("{}{}", h.base, endpoint.data);
    let client = h.client.clone();
    let post = |body: &Value| {
        client
            .post(&url)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).expect("json"))
    };
    let init = request(
        0,
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let resp = h.send(post(&init)).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let (id, answer) = events.next().await.expect("the answer, on the stream");
    assert_eq!(answer["result"]["method"], "initialize");
    assert!(
        id.is_empty(),
        "no event ids: no resumption in this transport"
    );
    let resp = h.send(post(&request(1, "progress", json!({})))).await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let (_, progress) = events.next().await.expect("progress");
    assert_eq!(progress["method"], "notifications/progress");
    let (_, answer) = events.next().await.expect("answer");
    assert_eq!(answer["id"], 1);

    // Its id is not a Streamable HTTP session's, nor the other way round.
    let key = endpoint.data.rsplit('=').next().expect("id").to_owned();
    let resp = h
        .send(h.post(Some(&key), &request(2, "x", json!({}))))
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let modern = h.initialize().await;
    let resp = h
        .send(
            h.client
                .post(format!("{}/messages?session_id={modern}", h.base))
                .header(CONTENT_TYPE, "application/json")
                .body("{}"),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    // The same checks as the endpoint's.
    let resp = h
        .send(post(&request(3, "x", json!({}))).header(ORIGIN, "https://evil.example"))
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = h
        .send(
            h.client
                .get(format!("{}/sse", h.base))
                .header(ORIGIN, "https://evil.example"),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    let resp = h.send(post(&json!([1]))).await;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    // The stream's end is the session's.
    drop(events);
    h.closed().await;
    let resp = h.send(post(&request(4, "x", json!({})))).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}
