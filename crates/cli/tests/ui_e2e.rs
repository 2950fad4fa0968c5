//! `mcpvisor serve --ui` end to end: the real binary with fake workers,
//! its web UI and JSON API spoken to over HTTP, its stdio front used as a
//! client would, and `mcpvisor status`.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use support::{Proc, WAIT, fake_worker, mcpvisor, temp_dir};

/// A secret the tests write and then look for everywhere it must not be.
const SECRET: &str = "sup3r-s3cret-VALUE-4711";

/// A gateway with its UI, and what it takes to speak to it.
struct Gateway {
    proc: Proc,
    dir: PathBuf,
    config: PathBuf,
    runtime: PathBuf,
    base: String,
    token: String,
    http: reqwest::Client,
}

/// Writes `servers` (name → entry) as a Claude Desktop config in a fresh
/// temp dir and starts `serve --ui 127.0.0.1:0` on it.
fn start(name: &str, servers: Value, flags: &[&str]) -> Gateway {
    let dir = temp_dir(&format!("ui-{name}"));
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({ "mcpServers": servers })).expect("config"),
    )
    .expect("write config");
    start_on(dir, config, flags)
}

fn start_on(dir: PathBuf, config: PathBuf, flags: &[&str]) -> Gateway {
    let runtime = dir.join("run");
    std::fs::create_dir_all(&runtime).expect("runtime dir");
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--ui".into(),
        "127.0.0.1:0".into(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let mut proc = Proc::spawn_with_env(
        &args,
        &[
            ("XDG_RUNTIME_DIR", runtime.display().to_string()),
            (
                "MCPVISOR_CACHE_DIR",
                dir.join("cache").display().to_string(),
            ),
        ],
    );
    let line = proc.wait_stderr("mcpvisor: UI at ");
    let url = line
        .split_once("UI at ")
        .map(|(_, url)| url.trim().to_owned())
        .expect("a URL");
    let (base, token) = url.split_once("/?token=").expect("a token in the URL");
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");
    assert_eq!(token.len(), 64, "32 random bytes as hex: {line}");
    Gateway {
        proc,
        dir,
        config,
        runtime,
        base: base.to_owned(),
        token: token.to_owned(),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(WAIT)
            .build()
            .expect("client"),
    }
}

fn fake(flags: &[&str]) -> Value {
    json!({"command": fake_worker().display().to_string(), "args": flags})
}

impl Gateway {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// The event stream read up to its first snapshot, as text: what a page
    /// that opens it is shown first.
    async fn snapshot_events(&self) -> String {
        let mut stream = self
            .http
            .get(self.url("/api/events"))
            .header("authorization", self.bearer())
            .send()
            .await
            .expect("events");
        let mut seen = Vec::new();
        events_until(&mut stream, &mut seen, "snapshot", |name, _| {
            name == "snapshot"
        })
        .await;
        format!("{seen:?}")
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let resp = self
            .http
            .get(self.url(path))
            .header("authorization", self.bearer())
            .send()
            .await
            .expect("GET");
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(self.url(path))
            .header("authorization", self.bearer())
            .json(&body)
            .send()
            .await
            .expect("POST");
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Polls `/api/servers` until `ok` accepts the row of `name`.
    async fn wait_row(&self, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let (_, body) = self.get("/api/servers").await;
            let row = body["servers"]
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["name"] == name))
                .cloned()
                .unwrap_or(Value::Null);
            if ok(&row) {
                return row;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never {what}; last: {body}\nstderr:\n{}",
                self.proc.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn read_config(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(&self.config).expect("config")).expect("json")
    }

    /// The runtime file of this gateway.
    fn runtime_file(&self) -> PathBuf {
        self.runtime
            .join("mcpvisor")
            .join(format!("ui-{}.json", self.proc.pid()))
    }
}

/// The `name=value` of a Set-Cookie header.
fn cookie_of(headers: &HeaderMap) -> String {
    let set = headers
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .expect("a Set-Cookie header");
    set.split(';').next().expect("name=value").to_owned()
}

/// The CSRF token in the page's HTML.
fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf-token\" content=\"")
        .expect("the csrf meta tag")
        + "name=\"csrf-token\" content=\"".len();
    html[at..].split('"').next().expect("a token").to_owned()
}

/// `mcpvisor status ARGS` with the runtime dir `runtime`.
fn status(runtime: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(mcpvisor())
        .arg("status")
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .stdin(Stdio::null())
        .output()
        .expect("run status");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Reads SSE events (name, data) from a response until `done` accepts one.
async fn events_until(
    resp: &mut reqwest::Response,
    seen: &mut Vec<(String, Value)>,
    what: &str,
    done: impl Fn(&str, &Value) -> bool,
) {
    let deadline = Instant::now() + WAIT;
    let mut buf = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {what} event; saw {seen:?}"))
            .expect("stream")
            .unwrap_or_else(|| panic!("the stream ended before {what}; saw {seen:?}"));
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            if name.is_empty() {
                continue;
            }
            let data: Value = serde_json::from_str(&data).expect("event data is JSON");
            let hit = done(&name, &data);
            seen.push((name, data));
            if hit {
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_answers_need_a_waiting_flow() {
    let g = start("oauth", json!({"echo": fake(&[])}), &[]);
    // The callback needs no UI token, but only a flow waiting for the
    // answer's state takes it.
    let resp = g
        .http
        .get(g.url("/oauth/callback?code=c&state=nobody-waits"))
        .send()
        .await
        .expect("GET callback");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let page = resp.text().await.expect("page");
    assert!(page.contains("no authorization in progress"), "{page}");
    let resp = g
        .http
        .get(g.url("/oauth/callback"))
        .send()
        .await
        .expect("GET callback");
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    // The paste is an API change: the token first.
    let resp = g
        .http
        .post(g.url("/api/oauth/paste"))
        .json(&json!({"url": "http://127.0.0.1:1/callback?code=c&state=s"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let (status, body) = g
        .post(
            "/api/oauth/paste",
            json!({"url": "http://127.0.0.1:1/callback?code=c&state=s"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no authorization in progress")),
        "{body}"
    );
    let (status, body) = g
        .post("/api/oauth/paste", json!({"url": "not a url"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = g.post("/api/oauth/paste", json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_required_and_the_cookie_flow_works() {
    let g = start("auth", json!({"echo": fake(&[])}), &[]);
    // Nothing without the token.
    for path in [
        "/api/servers",
        "/api/servers/echo",
        "/api/events",
        "/metrics",
    ] {
        let resp = g.http.get(g.url(path)).send().await.expect("GET");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
        let body: Value = resp.json().await.expect("JSON");
        assert!(body["error"].is_string(), "{path}: {body}");
    }
    let wrong = g
        .http
        .get(g.url("/api/servers"))
        .header("authorization", "Bearer nope")
        .send()
        .await
        .expect("GET");
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let page = g.http.get(g.url("/")).send().await.expect("GET /");
    assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
    let text = page.text().await.expect("html");
    assert!(text.contains("Open the link mcpvisor printed"), "{text}");
    let bad_link = g
        .http
        .get(g.url("/?token=wrong"))
        .send()
        .await
        .expect("GET");
    assert_eq!(bad_link.status(), StatusCode::UNAUTHORIZED);
    assert!(bad_link.headers().get("set-cookie").is_none());

    // The link sets the cookie and takes the token out of the address.
    let link = g
        .http
        .get(g.url(&format!("/?token={}", g.token)))
        .send()
        .await
        .expect("GET link");
    assert_eq!(link.status(), StatusCode::SEE_OTHER);
    assert_eq!(link.headers()["location"], "/");
    let set = link.headers()["set-cookie"].to_str().expect("ascii");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attr), "{set}");
    }
    let cookie = cookie_of(link.headers());
    let page = g
        .http
        .get(g.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("GET /");
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert_eq!(
        headers["content-security-policy"],
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert!(headers.get("access-control-allow-origin").is_none());
    let html = page.text().await.expect("html");
    let csrf = csrf_of(&html);
    assert_eq!(csrf.len(), 64);
    assert_ne!(csrf, g.token, "the CSRF token is not the token");
    assert!(!html.contains(&g.token), "the page never carries the token");

    // The cookie reads the API; the answers are not cached, not CORS.
    let resp = g
        .http
        .get(g.url("/api/servers"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    assert!(resp.headers().get("content-security-policy").is_some());
    assert!(resp.headers().get("access-control-allow-origin").is_none());
    let preflight = g
        .http
        .request(reqwest::Method::OPTIONS, g.url("/api/servers"))
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("OPTIONS");
    assert_eq!(preflight.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    // Static files need no token; a DNS-rebound Host gets nothing.
    for asset in ["/assets/app.js", "/assets/app.css", "/assets/favicon.svg"] {
        let resp = g.http.get(g.url(asset)).send().await.expect("asset");
        assert_eq!(resp.status(), StatusCode::OK, "{asset}");
    }
    let rebound = g
        .http
        .get(g.url("/api/servers"))
        .header("authorization", g.bearer())
        .header("host", "evil.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(rebound.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_need_the_csrf_token_and_the_own_origin() {
    let g = start("csrf", json!({"echo": fake(&[])}), &[]);
    g.wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    let link = g
        .http
        .get(g.url(&format!("/?token={}", g.token)))
        .send()
        .await
        .expect("link");
    let cookie = cookie_of(link.headers());
    let html = g
        .http
        .get(g.url("/"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    let csrf = csrf_of(&html);
    let own = g.base.clone();
    let reload = g.url("/api/servers/echo/reload");
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, StatusCode);
    let cases: [Case<'_>; 6] = [
        (
            "cookie, no CSRF token",
            vec![("cookie", cookie.clone()), ("origin", own.clone())],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, no Origin",
            vec![("cookie", cookie.clone()), ("x-csrf-token", csrf.clone())],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, foreign Origin",
            vec![
                ("cookie", cookie.clone()),
                ("x-csrf-token", csrf.clone()),
                ("origin", "http://evil.example".into()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, wrong CSRF token",
            vec![
                ("cookie", cookie.clone()),
                ("x-csrf-token", "0".repeat(64)),
                ("origin", own.clone()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "bearer, foreign Origin",
            vec![
                ("authorization", g.bearer()),
                ("origin", "http://evil.example".into()),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, CSRF token, own Origin",
            vec![
                ("cookie", cookie.clone()),
                ("x-csrf-token", csrf.clone()),
                ("origin", own.clone()),
            ],
            StatusCode::ACCEPTED,
        ),
    ];
    for (what, headers, want) in cases {
        let mut req = g.http.post(&reload);
        for (k, v) in headers {
            req = req.header(k, HeaderValue::from_str(&v).expect("header"));
        }
        let resp = req.send().await.expect("POST");
        assert_eq!(resp.status(), want, "{what}");
        let body: Value = resp.json().await.expect("JSON");
        if want == StatusCode::FORBIDDEN {
            assert!(body["error"].is_string(), "{what}: {body}");
        } else {
            assert_eq!(body, json!({"ok": true}), "{what}");
        }
    }
    // curl's way: the bearer alone.
    let (status, body) = g.post("/api/servers/echo/reload", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Bodies are bounded.
    let (status, body) = g
        .post("/api/inspect", json!({ "source": "x".repeat(100 * 1024) }))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_page_metrics_and_the_event_stream() {
    // --http on the UI's address: one listener for /mcp and the UI.
    let dir = temp_dir("ui-shared");
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"echo": fake(&[]), "other": fake(&[])}}).to_string(),
    )
    .expect("config");
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = probe.local_addr().expect("addr").to_string();
    drop(probe);
    let mut g = {
        let runtime = dir.join("run");
        std::fs::create_dir_all(&runtime).expect("runtime");
        let args: Vec<String> = [
            "serve",
            "--config",
            &config.display().to_string(),
            "--http",
            &addr,
            "--ui",
            &addr,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut proc = Proc::spawn_with_env(
            &args,
            &[
                ("XDG_RUNTIME_DIR", runtime.display().to_string()),
                (
                    "MCPVISOR_CACHE_DIR",
                    dir.join("cache").display().to_string(),
                ),
            ],
        );
        let line = proc.wait_stderr("mcpvisor: UI at ");
        let url = line.split_once("UI at ").expect("url").1.trim().to_owned();
        let (base, token) = url.split_once("/?token=").expect("token");
        assert_eq!(
            base,
            format!("http://{addr}"),
            "the UI shares --http's address"
        );
        Gateway {
            proc,
            dir: dir.clone(),
            config: config.clone(),
            runtime,
            base: base.to_owned(),
            token: token.to_owned(),
            http: reqwest::Client::builder()
                .timeout(WAIT)
                .build()
                .expect("client"),
        }
    };
    let row = g
        .wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    for key in [
        "name",
        "state",
        "detail",
        "next_try_at_ms",
        "auth_url",
        "lazy",
        "transport",
        "command",
        "generation",
        "pid",
        "started_at_ms",
        "restarts",
        "calls",
        "errors",
        "in_flight",
        "latency",
    ] {
        assert!(row.get(key).is_some(), "the row has {key}: {row}");
    }
    assert_eq!(row["transport"], "stdio");
    for key in ["p50_ms", "p99_ms", "buckets", "sum_seconds", "count"] {
        assert!(
            row["latency"].get(key).is_some(),
            "latency has {key}: {row}"
        );
    }
    let (status, body) = g.get("/api/servers").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["sessions"].is_u64(), "{body}");
    let names: Vec<&str> = body["servers"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["echo", "other"], "config order");

    let (status, detail) = g.get("/api/servers/echo").await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let tools: Vec<&str> = detail["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"echo"), "{detail}");
    for key in [
        "prompts",
        "resources",
        "errors_by_code",
        "events",
        "last_crash",
        "config_file",
        "env_file",
        "env_keys",
    ] {
        assert!(detail.get(key).is_some(), "the page has {key}: {detail}");
    }
    assert_eq!(detail["config_file"], config.display().to_string());
    let (status, body) = g.get("/api/servers/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = g.get("/api/servers/echo/stderr").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"lines": [], "warning": "known secrets are redacted; a secret mcpvisor was never given may remain"}),
        "it has not crashed"
    );

    let metrics = g
        .http
        .get(g.url("/metrics"))
        .header("authorization", g.bearer())
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for needle in [
        "mcpvisor_server_calls_total{server=\"echo\"}",
        "mcpvisor_server_latency_seconds_bucket{server=\"echo\",le=\"+Inf\"}",
        "mcpvisor_server_latency_seconds_sum{server=\"echo\"}",
        "mcpvisor_server_latency_seconds_count{server=\"echo\"}",
        "mcpvisor_server_restarts_total{server=\"other\"}",
        "mcpvisor_server_state{server=\"echo\",state=\"ready\"} 1",
        "mcpvisor_server_state{server=\"echo\",state=\"failed\"} 0",
        "mcpvisor_server_in_flight{server=\"echo\"}",
        "mcpvisor_front_sessions ",
        "# TYPE mcpvisor_server_errors_total counter",
    ] {
        assert!(metrics.contains(needle), "{needle} in\n{metrics}");
    }

    // The stream: a snapshot first, then changes as they happen.
    let mut stream = g
        .http
        .get(g.url("/api/events"))
        .header("authorization", g.bearer())
        .send()
        .await
        .expect("events");
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/event-stream")
    );
    let mut seen = Vec::new();
    events_until(&mut stream, &mut seen, "snapshot", |_, _| true).await;
    assert_eq!(seen[0].0, "snapshot", "the first event: {seen:?}");
    assert_eq!(seen[0].1["servers"][0]["name"], "echo");
    // An MCP session opened on the same listener is a change of sessions.
    let mcp = g
        .http
        .post(format!("{}/mcp", g.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ui-e2e","version":"1"}}}))
        .send()
        .await
        .expect("initialize over /mcp");
    assert_eq!(mcp.status(), StatusCode::OK);
    events_until(&mut stream, &mut seen, "sessions", |name, _| {
        name == "sessions"
    })
    .await;
    // A restart is a change of the server's row.
    let before = seen.len();
    let (status, body) = g.post("/api/servers/other/restart", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    events_until(&mut stream, &mut seen, "other's row", |name, data| {
        name == "server" && data["name"] == "other"
    })
    .await;
    assert!(seen.len() > before);
    // An inspection reports its progress on the stream too.
    let source = fake_worker().display().to_string();
    let (status, job) = g.post("/api/inspect", json!({ "source": source })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let id = job["job"].as_str().expect("id").to_owned();
    events_until(&mut stream, &mut seen, "inspect done", |name, data| {
        name == "inspect" && data["job"] == id && data["state"] == "done"
    })
    .await;
    g.proc.close_stdin();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_and_enable_disable_edit_the_config() {
    let bad = json!({"command": "sh", "args": ["-c", "echo oops-$((40+2)) >&2; exit 3"]});
    let g = start(
        "actions",
        json!({"echo": fake(&[]), "keep": fake(&[]), "bad": bad}),
        &[],
    );
    let first = g
        .wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    let generation = first["generation"].as_u64().expect("a generation");

    // Restart: a new generation; stop and start.
    let (status, body) = g.post("/api/servers/echo/restart", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let row = g
        .wait_row("echo", "restarted", |r| {
            r["state"] == "ready" && r["generation"].as_u64() > Some(generation)
        })
        .await;
    assert!(row["restarts"].as_u64() >= Some(1), "{row}");
    let (status, body) = g.post("/api/servers/echo/stop", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    g.wait_row("echo", "stopped", |r| r["state"] == "stopped")
        .await;
    let (status, body) = g.post("/api/servers/echo/start", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    g.wait_row("echo", "started again", |r| r["state"] == "ready")
        .await;
    let (status, body) = g.post("/api/servers/echo/reload", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, detail) = g.get("/api/servers/echo").await;
    let kinds: Vec<&str> = detail["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"stopped") && kinds.contains(&"ready"),
        "{detail}"
    );

    // A crash's whole stderr tail is its own endpoint; the row has its last
    // lines while the server is down.
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = g.get("/api/servers/bad/stderr").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if body["lines"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l == "oops-42"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no stderr tail: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, detail) = g.get("/api/servers/bad").await;
    assert!(detail["last_crash"].is_object(), "{detail}");
    assert!(
        !detail["last_crash"].to_string().contains("oops-42"),
        "{detail}"
    );
    let row_stderr = detail["stderr"].as_array().expect("the row's stderr");
    assert!(
        row_stderr.is_empty() || row_stderr.iter().any(|l| l == "oops-42"),
        "{detail}"
    );
    // Each kept crash's stderr by its generation; a crash not kept has none.
    assert_eq!(detail["crashes"][0], detail["last_crash"], "{detail}");
    let generation = detail["last_crash"]["generation"]
        .as_u64()
        .expect("a generation");
    let (status, body) = g
        .get(&format!("/api/servers/bad/stderr?generation={generation}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["lines"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l == "oops-42")),
        "{body}"
    );
    let (status, body) = g.get("/api/servers/bad/stderr?generation=999").await;
    assert_eq!((status, body["lines"].clone()), (StatusCode::OK, json!([])));
    let (status, body) = g.get("/api/servers/bad/stderr?generation=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = g.get("/api/servers/nope/stderr").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = g.post("/api/servers/nope/reload", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = g.post("/api/servers/echo/explode", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let (status, body) = g.post("/api/servers/echo/disable", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let config = g.read_config();
    assert_eq!(config["mcpServers"]["echo"]["disabled"], true, "{config}");
    assert!(
        config["mcpServers"]["keep"].get("disabled").is_none(),
        "{config}"
    );
    assert_eq!(
        config["mcpServers"]["echo"]["command"],
        fake_worker().display().to_string(),
        "the rest of the entry is kept"
    );
    g.wait_row("echo", "was disabled", |r| r["state"] == "disabled")
        .await;

    let (status, body) = g.post("/api/servers/echo/enable", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(g.read_config()["mcpServers"]["echo"]["disabled"], false);
    g.wait_row("echo", "came back", |r| r["state"] == "ready")
        .await;
    let (status, body) = g.post("/api/servers/nope/disable", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_written_and_never_read_back() {
    let g = start("secrets", json!({"echo": fake(&[])}), &[]);
    g.wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    let put = |key: &str, body: Value| {
        g.http
            .put(g.url(&format!("/api/servers/echo/secrets/{key}")))
            .header("authorization", g.bearer())
            .json(&body)
            .send()
    };
    let resp = put("API_TOKEN", json!({ "value": SECRET }))
        .await
        .expect("PUT");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(resp.text().await.expect("body"), "", "nothing echoed");

    // The entry had no env file: it gets <config dir>/<name>.env.
    let env_file = g.dir.join("echo.env");
    let text = std::fs::read_to_string(&env_file).expect("env file");
    assert_eq!(text, format!("API_TOKEN={SECRET}\n"));
    let mode = std::fs::metadata(&env_file)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(
        g.read_config()["mcpServers"]["echo"]["env_file"],
        "echo.env"
    );

    // A second key keeps the first, and a comment added by hand.
    std::fs::write(&env_file, format!("# mine\n{text}")).expect("edit");
    let resp = put("OTHER", json!({ "value": "x y" })).await.expect("PUT");
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    let text = std::fs::read_to_string(&env_file).expect("env file");
    assert_eq!(text, format!("# mine\nAPI_TOKEN={SECRET}\nOTHER=\"x y\"\n"));

    for (key, body, want) in [
        ("1BAD", json!({"value": SECRET}), StatusCode::BAD_REQUEST),
        ("A-B", json!({"value": SECRET}), StatusCode::BAD_REQUEST),
        ("OK", json!({"nope": SECRET}), StatusCode::BAD_REQUEST),
    ] {
        let resp = put(key, body).await.expect("PUT");
        assert_eq!(resp.status(), want, "{key}");
        let text = resp.text().await.expect("body");
        assert!(!text.contains(SECRET), "{key}: {text}");
    }
    let resp = g
        .http
        .put(g.url("/api/servers/nope/secrets/K"))
        .header("authorization", g.bearer())
        .json(&json!({"value": SECRET}))
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);

    // The page lists the keys as set; no answer has the value.
    let deadline = Instant::now() + WAIT;
    let detail = loop {
        let (_, detail) = g.get("/api/servers/echo").await;
        if detail["env_keys"].as_array().is_some_and(|k| k.len() == 2) {
            break detail;
        }
        assert!(Instant::now() < deadline, "env keys never listed: {detail}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        detail["env_keys"]
            .as_array()
            .expect("keys")
            .contains(&json!({"key": "API_TOKEN", "set": true})),
        "{detail}"
    );
    assert_eq!(detail["env_file"], env_file.display().to_string());
    let recorded: Vec<&str> = detail["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "secret_set")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        recorded.iter().any(|m| m.starts_with("API_TOKEN set in ")),
        "{detail}"
    );
    let link = g
        .http
        .get(g.url(&format!("/?token={}", g.token)))
        .send()
        .await
        .expect("link");
    let cookie = cookie_of(link.headers());
    let mut answers = Vec::new();
    for path in [
        "/api/servers",
        "/api/servers/echo",
        "/api/servers/echo/stderr",
        "/metrics",
        "/",
    ] {
        let resp = g
            .http
            .get(g.url(path))
            .header("cookie", &cookie)
            .send()
            .await
            .expect("GET");
        answers.push((path, resp.text().await.expect("text")));
    }
    answers.push(("/api/events", g.snapshot_events().await));
    for (path, text) in answers {
        assert!(!text.contains(SECRET), "{path} shows the secret: {text}");
    }
    assert!(
        !g.proc.stderr_text().contains(SECRET),
        "the log shows the secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_through_the_wizard_is_served() {
    let mut g = start("wizard", json!({"echo": fake(&[])}), &[]);
    g.proc.initialize();
    g.wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;

    let (status, body) = g
        .post("/api/inspect", json!({"source": "npx 'unterminated"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.contains('\n')),
        "{body}"
    );

    // Inspect the fake worker from its command line.
    let source = shell_quote(&fake_worker().display().to_string());
    let (status, job) = g.post("/api/inspect", json!({ "source": source })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let id = job["job"].as_str().expect("job id").to_owned();
    let done = wait_job(&g, &id).await;
    assert_eq!(done["state"], "done", "{done}");
    assert!(
        done["progress"].as_array().is_some_and(|p| p
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.starts_with("started ")))),
        "{done}"
    );
    let tools: Vec<&str> = done["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"echo"), "{done}");
    assert_eq!(
        done["entry"]["command"],
        fake_worker().display().to_string()
    );
    assert!(done["suggested_name"].is_string());

    for (name, want) in [
        ("bad name!", StatusCode::BAD_REQUEST),
        ("echo", StatusCode::CONFLICT),
    ] {
        let (status, body) = g
            .post("/api/servers", json!({"job": id, "name": name}))
            .await;
        assert_eq!(status, want, "{name}: {body}");
    }
    let (status, body) = g
        .post(
            "/api/servers",
            json!({"job": id, "name": "added", "tools": {"allow": ["echo", "whoami"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["name"], "added");
    assert_eq!(body["config_file"], g.config.display().to_string());
    let config = g.read_config();
    assert_eq!(
        config["mcpServers"]["added"]["tools"]["allow"],
        json!(["echo", "whoami"]),
        "{config}"
    );
    assert!(
        config["mcpServers"]["echo"].is_object(),
        "the other entry is kept"
    );

    // The gateway starts it; the stdio client gets list_changed and can call it.
    g.wait_row("added", "started", |r| r["state"] == "ready")
        .await;
    let deadline = Instant::now() + WAIT;
    let mut id_n = 10;
    loop {
        id_n += 1;
        let r = g.proc.request(json!(id_n), "tools/list", json!({}));
        let names: Vec<String> = r["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        if names.iter().any(|n| n == "added__echo") {
            assert!(
                !names.iter().any(|n| n == "added__crash"),
                "the filter holds: {names:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "added__echo never listed: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = g
        .proc
        .call(json!("c1"), "added__echo", json!({"text": "hi"}));
    assert!(r.get("result").is_some(), "{r}");
    assert_ne!(r["result"]["isError"], true, "{r}");

    // A server that fails its inspection is saved only when forced.
    let (status, job) = g
        .post(
            "/api/inspect",
            json!({"source": "sh -c 'echo bye >&2; exit 3'"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let id = job["job"].as_str().expect("job id").to_owned();
    let failed = wait_job(&g, &id).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert!(failed["report"]["reason"].is_string(), "{failed}");
    let (status, body) = g
        .post("/api/servers", json!({"job": id, "name": "broken"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["report"].is_object(), "{body}");
    assert!(g.read_config()["mcpServers"].get("broken").is_none());
    let (status, body) = g
        .post(
            "/api/servers",
            json!({"job": id, "name": "broken", "force": true, "env_keys": ["API_KEY"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let config = g.read_config();
    assert_eq!(
        config["mcpServers"]["broken"]["env_keys"],
        json!(["API_KEY"])
    );
    assert_eq!(config["mcpServers"]["broken"]["env_file"], "broken.env");
    let (status, body) = g.get("/api/inspect/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_added_under_only_is_served_and_stays_served_across_reloads() {
    let mut g = start(
        "only",
        json!({"echo": fake(&[]), "other": fake(&[])}),
        &["--only", "echo"],
    );
    g.proc.initialize();
    g.wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    let source = shell_quote(&fake_worker().display().to_string());
    let (status, job) = g.post("/api/inspect", json!({ "source": source })).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let id = job["job"].as_str().expect("job id").to_owned();
    assert_eq!(wait_job(&g, &id).await["state"], "done");
    let (status, body) = g
        .post("/api/servers", json!({"job": id, "name": "added"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    g.wait_row("added", "started", |r| r["state"] == "ready")
        .await;

    // A later reload of the files (here the one disabling and enabling
    // `echo` asks for; SIGHUP and the files' watcher read the same names)
    // keeps it, and still leaves out what `--only` left out.
    for action in ["disable", "enable"] {
        let (status, body) = g
            .post(&format!("/api/servers/echo/{action}"), json!({}))
            .await;
        assert!(status.is_success(), "{action}: {body}");
    }
    g.wait_row("echo", "became ready again", |r| r["state"] == "ready")
        .await;
    let names = tool_names(&mut g, 100);
    assert!(names.iter().any(|n| n == "added__echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("other__")), "{names:?}");
    let r = g
        .proc
        .call(json!("c1"), "added__echo", json!({"text": "hi"}));
    assert_ne!(r["result"]["isError"], true, "{r}");
}

/// The tool names the gateway lists to its stdio client now.
fn tool_names(g: &mut Gateway, id: u64) -> Vec<String> {
    let r = g.proc.request(json!(id), "tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

async fn wait_job(g: &Gateway, id: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, job) = g.get(&format!("/api/inspect/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{job}");
        if job["state"] != "running" {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "the inspection never ended: {job}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_runtime_file_and_exit() {
    // Nobody running: one line, exit 1.
    let empty = temp_dir("ui-status-none");
    let (code, out, err) = status(&empty, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no gateway"), "{err}");

    let mut g = start("status", json!({"echo": fake(&[])}), &[]);
    g.wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    let file = g.runtime_file();
    let meta = std::fs::metadata(&file).expect("the runtime file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let dir_mode = std::fs::metadata(file.parent().expect("dir"))
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    let content: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(content["token"], g.token);
    assert_eq!(content["pid"], g.proc.pid());
    assert_eq!(content["url"], format!("{}/", g.base));

    let (code, out, err) = status(&g.runtime, &[]);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let head = lines.next().expect("a header");
    for col in [
        "NAME",
        "STATE",
        "DETAIL",
        "GEN",
        "PID",
        "UPTIME",
        "RESTARTS",
        "CALLS",
        "ERRORS",
        "IN FLIGHT",
        "P50",
        "P99",
    ] {
        assert!(head.contains(col), "{head}");
    }
    let row = lines.next().expect("a row");
    assert!(row.starts_with("echo") && row.contains("ready"), "{out}");
    let (code, out, _) = status(&g.runtime, &["--json"]);
    assert_eq!(code, 0);
    let body: Value = serde_json::from_str(&out).expect("--json is JSON");
    assert_eq!(body["servers"][0]["name"], "echo");
    // --url and --token-file reach it without the runtime file.
    let token_file = g.dir.join("token");
    std::fs::write(&token_file, format!("{}\n", g.token)).expect("token");
    let (code, out, err) = status(
        &empty,
        &[
            "--json",
            "--url",
            &g.base,
            "--token-file",
            &token_file.display().to_string(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"echo\""));
    std::fs::write(&token_file, "wrong\n").expect("token");
    let (code, _, err) = status(
        &empty,
        &[
            "--url",
            &g.base,
            "--token-file",
            &token_file.display().to_string(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("401"), "{err}");

    // SIGTERM: the gateway ends and takes its runtime file with it.
    support::signal(g.proc.pid(), nix::libc::SIGTERM);
    let status_code = g.proc.wait_exit(WAIT);
    assert!(status_code.success(), "{status_code:?}");
    assert!(!file.exists(), "the runtime file is removed at exit");
    let (code, _, err) = status(&g.runtime, &[]);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn the_stdio_client_leaving_removes_the_runtime_file() {
    let mut g = start("leave", json!({"echo": fake(&[])}), &[]);
    let file = g.runtime_file();
    assert!(file.exists());
    g.proc.close_stdin();
    assert!(g.proc.wait_exit(WAIT).success());
    assert!(!file.exists());
}

#[test]
fn a_busy_address_is_one_line_and_exit_2() {
    let dir = temp_dir("ui-busy");
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"echo": fake(&[])}}).to_string(),
    )
    .expect("config");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let args: Vec<String> = [
        "serve",
        "--config",
        &config.display().to_string(),
        "--ui",
        &addr,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn_with_env(&args, &[("XDG_RUNTIME_DIR", dir.display().to_string())]);
    let status = p.wait_exit(WAIT);
    assert_eq!(status.code(), Some(2));
    let err = p.stderr_to_end(WAIT);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("mcpvisor: ") && lines[0].contains(&addr),
        "{err}"
    );

    // Not loopback and no token file: refused before anything starts.
    let args: Vec<String> = [
        "serve",
        "--config",
        &config.display().to_string(),
        "--ui",
        "0.0.0.0:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn(&args);
    assert_eq!(p.wait_exit(WAIT).code(), Some(2));
    assert!(p.stderr_to_end(WAIT).contains("--auth-token-file"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_toml_config_keeps_its_comments_through_the_ui() {
    let dir = temp_dir("ui-toml");
    let config = dir.join("config.toml");
    let worker = fake_worker().display().to_string();
    let text = format!(
        "# my Codex settings\nmodel = \"o3\"  # keep me\n\n[mcp_servers.echo]\n# the fake one\ncommand = \"{worker}\"\nargs = []\n"
    );
    std::fs::write(&config, &text).expect("config");
    let g = start_on(dir, config.clone(), &[]);
    g.wait_row("echo", "became ready", |r| r["state"] == "ready")
        .await;
    let (status, body) = g.post("/api/servers/echo/disable", json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let after = std::fs::read_to_string(&config).expect("config");
    assert!(
        after.starts_with("# my Codex settings\nmodel = \"o3\"  # keep me\n"),
        "{after}"
    );
    assert!(after.contains("# the fake one\n"), "{after}");
    assert!(after.contains("disabled = true"), "{after}");
    g.wait_row("echo", "was disabled", |r| r["state"] == "disabled")
        .await;

    // A server added through the wizard lands in the same file, as TOML.
    let (status, job) = g
        .post(
            "/api/inspect",
            json!({ "source": format!("[mcp_servers.x]\ncommand = \"{worker}\"\n") }),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let id = job["job"].as_str().expect("id").to_owned();
    let done = wait_job(&g, &id).await;
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["suggested_name"], "x");
    let (status, body) = g
        .post("/api/servers", json!({"job": id, "name": "second"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let after = std::fs::read_to_string(&config).expect("config");
    assert!(after.contains("[mcp_servers.second]"), "{after}");
    assert!(after.contains("# the fake one\n"), "{after}");
    g.wait_row("second", "started", |r| r["state"] == "ready")
        .await;
}

/// A value of an env file that a server leaks, with characters a JSON
/// string escapes (`/`, `"`, `\`).
const FILE_SECRET: &str = r#"sk-live/"quoted"\path-90210"#;
/// A value of an entry's `env`, secret by its name (`DB_PASSWORD`).
const ENTRY_SECRET: &str = "pw-entry-secret-31337";

/// Fails if `text` holds either secret, as it is or as a JSON string holds
/// it.
fn assert_no_secret(what: &str, text: &str) {
    for secret in [FILE_SECRET, ENTRY_SECRET] {
        let escaped = serde_json::to_string(secret).expect("json");
        let escaped = escaped.trim_matches('"');
        assert!(
            !text.contains(secret) && !text.contains(escaped),
            "{what} shows a secret: {text}"
        );
    }
    assert!(
        !text.contains("path-90210"),
        "{what} shows part of a secret: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_server_leaks_are_redacted_in_everything_mcpvisor_shows() {
    let dir = temp_dir("ui-leak");
    let tools = dir.join("tools.txt");
    std::fs::write(&tools, "leak\n").expect("tools file");
    std::fs::write(dir.join("leaky.env"), format!("API_KEY='{FILE_SECRET}'\n")).expect("env");
    let config = dir.join("mcp.json");
    let servers = json!({
        "leaky": {
            "command": fake_worker().display().to_string(),
            "args": ["--leak-env", "API_KEY", "--tools-file", tools.display().to_string()],
            "env_file": "leaky.env",
        },
        "looping": {
            "command": fake_worker().display().to_string(),
            "args": ["--leak-env", "DB_PASSWORD", "--exit-on-initialize", "3"],
            "env": {"DB_PASSWORD": ENTRY_SECRET},
        },
    });
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({ "mcpServers": servers })).expect("config"),
    )
    .expect("write config");
    let mut g = start_on(
        dir.clone(),
        config.clone(),
        &[
            "-vv",
            "--crash-loop-exits",
            "2",
            "--restart-backoff-max",
            "100ms",
            "--list-timeout",
            "2s",
        ],
    );
    g.proc.initialize();

    // The tool's own error is the server's answer, passed to the client as
    // it came: mcpvisor rewrites what it writes itself, never a payload.
    let leaked = g.proc.call(json!(1), "leaky__leak", json!({}));
    assert_eq!(leaked["result"]["isError"], true, "{leaked}");
    assert!(leaked.to_string().contains("path-90210"), "{leaked}");

    // The crash-looping server: its row says why, with its last stderr
    // lines in the table, redacted.
    let row = g
        .wait_row("looping", "failed", |r| r["state"] == "failed")
        .await;
    let row_stderr = row["stderr"].to_string();
    assert!(
        row_stderr.contains("starting with DB_PASSWORD=[redacted:DB_PASSWORD]"),
        "{row}"
    );
    // A call to it gets -32011 whose message carries the last stderr line.
    let refused = g.proc.call(json!(2), "looping__echo", json!({}));
    assert_eq!(refused["error"]["code"], -32011, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("its last stderr line: fake-worker: exiting with 3 on initialize"),
        "{refused}"
    );
    assert!(
        refused["error"]["data"]["stderr"]
            .to_string()
            .contains("[redacted:DB_PASSWORD]"),
        "{refused}"
    );
    assert_no_secret("the -32011", &refused.to_string());

    // The leaky server crashes with a call in flight: -32010, its data and
    // message redacted.
    let lost = g.proc.call(json!(3), "leaky__crash", json!({}));
    assert_eq!(lost["error"]["code"], -32010, "{lost}");
    assert!(
        lost["error"]["message"].as_str().unwrap_or_default().contains(
            "its last stderr line: fake-worker: refusing the call: API_KEY=[redacted:API_KEY] is wrong"
        ),
        "{lost}"
    );
    assert_no_secret("the -32010", &lost.to_string());
    g.wait_row("leaky", "came back", |r| {
        r["state"] == "ready" && r["generation"].as_u64() >= Some(2)
    })
    .await;

    // Everything the UI and its API answer, and /metrics.
    let mut answers = Vec::new();
    for path in [
        "/api/servers",
        "/api/servers/leaky",
        "/api/servers/leaky/stderr",
        "/api/servers/looping",
        "/api/servers/looping/stderr",
        "/metrics",
    ] {
        let resp = g
            .http
            .get(g.url(path))
            .header("authorization", g.bearer())
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        answers.push((path, resp.text().await.expect("text")));
    }
    answers.push(("/api/events", g.snapshot_events().await));
    for (path, text) in &answers {
        assert_no_secret(path, text);
    }
    let leaky_stderr = &answers[2].1;
    assert!(
        leaky_stderr.contains("refusing the call: API_KEY=[redacted:API_KEY] is wrong"),
        "{leaky_stderr}"
    );

    // The log at -vv, with the servers' own stderr passed through.
    let log = g.proc.stderr_text();
    assert_no_secret("the log", &log);
    assert!(
        log.contains("[leaky] fake-worker: starting with API_KEY=[redacted:API_KEY]"),
        "{log}"
    );
    assert!(log.contains("DB_PASSWORD=[redacted:DB_PASSWORD]"), "{log}");

    // `call` prints the tool's error and a crash report, redacted.
    for (tool, want_code) in [("leak", 1), ("crash", 2)] {
        let out = Command::new(mcpvisor())
            .args(["call", "--show-stderr", "--config"])
            .arg(&config)
            .args(["leaky", tool, "{}"])
            .stdin(Stdio::null())
            .output()
            .expect("run call");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(want_code), "{tool}: {text}");
        assert_no_secret(&format!("call {tool}"), &text);
        assert!(
            text.contains("API_KEY=[redacted:API_KEY]"),
            "{tool}: {text}"
        );
    }
    let out = Command::new(mcpvisor())
        .args(["call", "--config"])
        .arg(&config)
        .args(["looping", "echo", "{}"])
        .stdin(Stdio::null())
        .output()
        .expect("run call");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_no_secret("call looping", &text);
    assert!(
        text.contains("DB_PASSWORD=[redacted:DB_PASSWORD]"),
        "{text}"
    );
}
