//! Remote servers over the old HTTP+SSE transport (protocol version
//! 2024-11-05): `"type": "sse"` entries served by `serve`, an entry or a
//! `--url` without a type falling back to it when the server refuses
//! Streamable HTTP, a dropped stream ending the generation, and an endpoint
//! on another origin refused.
//!
//! The peer is a small HTTP+SSE server in this file, on plain threads:
//! `GET /sse` opens a stream whose first event names
//! `/messages?session=N`; each POST there is answered 202 and its answer,
//! if it is a request, goes out as a `message` event on that session's
//! stream. A POST to `/sse` gets 405, as such servers answer a Streamable
//! HTTP client. The Python SDK's own HTTP+SSE server is the peer of the
//! interop tier (`tests/interop/test_remote.py`).

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Proc, WAIT, temp_dir};

/// A header value that must reach the server with every request.
const TOKEN: &str = "legacy-SENTINEL-7341";

/// What the fake server saw and holds.
#[derive(Default)]
struct State {
    /// Each request, as `METHOD PATH` (the query left out).
    seen: Vec<String>,
    /// Requests that came without the token.
    without_token: usize,
    /// Open event streams, by session.
    streams: HashMap<u64, TcpStream>,
    next_session: u64,
    /// Where the endpoint event points: `None` is our own origin.
    endpoint_origin: Option<String>,
    /// Where a POST to the endpoint is redirected (307), if anywhere.
    redirect_to: Option<String>,
}

#[derive(Clone)]
struct Legacy {
    addr: String,
    state: Arc<Mutex<State>>,
}

impl Legacy {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let state = Arc::clone(&shared);
                std::thread::spawn(move || serve(conn, &state));
            }
        });
        Self { addr, state }
    }

    fn url(&self) -> String {
        format!("http://{}/sse", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.state.lock().expect("state").seen.clone()
    }

    fn streams(&self) -> usize {
        self.state.lock().expect("state").streams.len()
    }

    /// Ends every open event stream, as a server that restarts does.
    fn drop_streams(&self) {
        let mut state = self.state.lock().expect("state");
        for (_, stream) in state.streams.drain() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn wait_for(&self, what: &str, check: impl Fn(&State) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !check(&self.state.lock().expect("state")) {
            assert!(Instant::now() < deadline, "the server never saw {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One connection: requests one after another (keep-alive).
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let (method, target) = (
            words.next().unwrap_or("").to_owned(),
            words.next().unwrap_or("").to_owned(),
        );
        let mut length = 0;
        let mut token = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            let (name, value) = (name.to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                length = value.parse().unwrap_or(0);
            }
            if name == "authorization" && value == format!("Bearer {TOKEN}") {
                token = true;
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = target.split('?').next().unwrap_or("").to_owned();
        {
            let mut s = state.lock().expect("state");
            s.seen.push(format!("{method} {path}"));
            if !token {
                s.without_token += 1;
            }
        }
        match (method.as_str(), path.as_str()) {
            ("GET", "/sse") => {
                let mut s = state.lock().expect("state");
                s.next_session += 1;
                let session = s.next_session;
                let origin = s.endpoint_origin.clone().unwrap_or_default();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n\
                     : a comment first\n\nevent: endpoint\ndata: {origin}/messages?session={session}\n\n"
                );
                if out.write_all(head.as_bytes()).is_err() {
                    return;
                }
                s.streams
                    .insert(session, out.try_clone().expect("clone stream"));
                // The connection is the stream's now: nothing more is read.
                return;
            }
            ("POST", "/messages") if state.lock().expect("state").redirect_to.is_some() => {
                let to = state.lock().expect("state").redirect_to.clone();
                let head = format!(
                    "HTTP/1.1 307 Temporary Redirect\r\nLocation: {}\r\nContent-Length: 0\r\n\r\n",
                    to.unwrap_or_default()
                );
                if out.write_all(head.as_bytes()).is_err() {
                    return;
                }
            }
            ("POST", "/messages") => {
                let session = target
                    .split("session=")
                    .nth(1)
                    .and_then(|s| s.parse::<u64>().ok());
                let stream = session.and_then(|session| {
                    let s = state.lock().expect("state");
                    s.streams
                        .get(&session)
                        .and_then(|stream| stream.try_clone().ok())
                });
                let Some(mut stream) = stream else {
                    let _ = out.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 17\r\n\r\nno such session\r\n",
                    );
                    continue;
                };
                if out
                    .write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 8\r\n\r\nAccepted")
                    .is_err()
                {
                    return;
                }
                let message: Value = serde_json::from_slice(&body).expect("a JSON message");
                if let Some(answer) = answer(&message, session.unwrap_or_default()) {
                    let event = format!("event: message\ndata: {answer}\n\n");
                    let _ = stream.write_all(event.as_bytes());
                }
            }
            ("POST", "/refuse") => {
                // A Streamable HTTP server that refuses this initialize.
                let _ = out.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 28\r\n\r\nunsupported protocol version",
                );
            }
            _ => {
                let _ = out.write_all(
                    b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 18\r\n\r\nMethod Not Allowed",
                );
            }
        }
    }
}

/// The answer to a request; `None` for a notification.
fn answer(message: &Value, session: u64) -> Option<Value> {
    let id = message.get("id")?.clone();
    let result = match message["method"].as_str()? {
        "initialize" => json!({
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "legacy-fake", "version": "1"},
        }),
        "tools/list" => json!({"tools": [
            {"name": "echo", "inputSchema": {"type": "object"}},
            {"name": "session", "inputSchema": {"type": "object"}},
        ]}),
        "tools/call" => {
            let text = match message["params"]["name"].as_str() {
                Some("session") => session.to_string(),
                _ => message["params"]["arguments"].to_string(),
            };
            json!({"content": [{"type": "text", "text": text}]})
        }
        _ => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "no such method"}}));
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn serve_stdio(config: &std::path::Path) -> Proc {
    let cache = config.with_file_name("cache");
    let args: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    Proc::spawn_with_env(
        &args,
        &[
            ("MCPVISOR_CACHE_DIR", cache.display().to_string()),
            ("LEGACY_TOKEN", TOKEN.to_owned()),
        ],
    )
}

/// `mcpvisor ARGS` to its end, with `env` added: its exit code, stdout and
/// stderr.
fn mcpvisor(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(support::mcpvisor())
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run mcpvisor");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `call --json` that failed: the report's `exit`.
fn failed_exit(args: &[&str]) -> Value {
    let (code, stdout, stderr) = mcpvisor(args, &[]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    let failure: Value = serde_json::from_str(&stdout).expect("call --json");
    failure["error"]["crash"]["exit"].clone()
}

fn text(r: &Value) -> String {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a tool result: {r}"))
        .to_owned()
}

/// Drops the server's streams, then calls `old__session` (ids from `id`)
/// until a new session answers: its number.
fn session_after_a_drop(p: &mut Proc, legacy: &Legacy, id: u64) -> String {
    legacy.drop_streams();
    legacy.wait_for("a second stream", |s| {
        s.next_session >= 2 && !s.streams.is_empty()
    });
    let deadline = Instant::now() + WAIT;
    for id in id.. {
        let r = p.call(json!(id), "old__session", json!({}));
        if r.get("result").is_some() {
            return text(&r);
        }
        assert!(
            Instant::now() < deadline,
            "no call answered after the drop: {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!("the ids ran out")
}

fn config(dir: &std::path::Path, entry: Value) -> std::path::PathBuf {
    let config = dir.join("mcp.json");
    std::fs::write(&config, json!({"mcpServers": {"old": entry}}).to_string()).expect("config");
    config
}

#[test]
fn serve_speaks_http_sse_to_a_type_sse_entry_and_reconnects_when_its_stream_drops() {
    let legacy = Legacy::start();
    let dir = temp_dir("legacy-serve");
    let config = config(
        &dir,
        json!({"type": "sse", "url": legacy.url(),
               "headers": {"Authorization": "Bearer ${LEGACY_TOKEN}"}}),
    );
    let mut p = serve_stdio(&config);
    let r = p.initialize();
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    let r = p.request(json!(1), "tools/list", json!({}));
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}\n{}", p.stderr_text()))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["old__echo", "old__session"], "{r}");
    let r = p.call(json!(2), "old__echo", json!({"text": "over HTTP+SSE"}));
    assert_eq!(text(&r), r#"{"text":"over HTTP+SSE"}"#, "{r}");
    let first = text(&p.call(json!(3), "old__session", json!({})));

    // The stream is the session: when it drops, the next generation opens
    // a new one and the next call is answered there.
    let second = session_after_a_drop(&mut p, &legacy, 4);
    assert_ne!(first, second, "the call went to the new stream's session");

    let seen = legacy.seen();
    assert!(
        !seen.iter().any(|r| r == "POST /sse"),
        "a \"type\": \"sse\" entry is never tried over Streamable HTTP: {seen:?}"
    );
    assert_eq!(
        legacy.state.lock().expect("state").without_token,
        0,
        "{seen:?}"
    );
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    let logs = p.stderr_to_end(WAIT);
    assert!(!logs.contains(TOKEN), "the token reached the log:\n{logs}");
    // Stopping the gateway closed the stream.
    legacy.wait_for("the stream closed", |s| {
        s.streams.values().all(|stream| {
            let mut probe = [0u8; 1];
            stream.set_nonblocking(true).ok();
            matches!((&*stream).read(&mut probe), Ok(0))
        })
    });
}

#[test]
fn a_url_without_a_type_falls_back_to_http_sse_when_streamable_http_is_refused() {
    let legacy = Legacy::start();
    let url = legacy.url();
    let (code, stdout, stderr) = mcpvisor(
        &[
            "call",
            "--url",
            &url,
            "--header",
            "Authorization: Bearer ${LEGACY_TOKEN}",
            "echo",
            r#"{"text":"hi"}"#,
        ],
        &[("LEGACY_TOKEN", TOKEN)],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let echoed: Value = serde_json::from_str(&stdout).expect("the echoed arguments");
    assert_eq!(echoed, json!({"text": "hi"}));
    let seen = legacy.seen();
    assert_eq!(
        seen[..3],
        ["POST /sse", "POST /sse", "GET /sse"],
        "Streamable HTTP first (server/discover, then initialize), then the old transport: {seen:?}"
    );
    assert!(seen[3..].iter().all(|r| r == "POST /messages"), "{seen:?}");
    assert_eq!(legacy.streams(), 1);
}

#[test]
fn an_endpoint_on_another_origin_is_refused_with_a_clear_report() {
    let legacy = Legacy::start();
    legacy.state.lock().expect("state").endpoint_origin = Some("http://203.0.113.9:1".into());
    let dir = temp_dir("legacy-origin");
    let config = config(&dir, json!({"type": "sse", "url": legacy.url()}));
    let config = config.display().to_string();
    let exit = failed_exit(&["call", "--json", "--config", &config, "old", "echo"]);
    assert_eq!(exit["kind"], "http", "{exit}");
    assert_eq!(exit["stage"], "listen", "{exit}");
    assert!(
        exit["detail"]
            .as_str()
            .is_some_and(|d| d.contains("endpoint on another origin")),
        "{exit}"
    );
    let seen = legacy.seen();
    assert!(!seen.iter().any(|r| r.starts_with("POST")), "{seen:?}");
}

#[test]
fn a_type_sse_entry_reaches_mcpvisors_own_http_sse_front() {
    // `run --http` serves the old transport at /sse beside Streamable HTTP.
    let args: Vec<String> = vec![
        "run".into(),
        "--http".into(),
        "127.0.0.1:0".into(),
        "--".into(),
        support::fake_worker().display().to_string(),
    ];
    let mut far = Proc::spawn(&args);
    let addr = far.http_address();
    let dir = temp_dir("legacy-own-front");
    let config = config(
        &dir,
        json!({"type": "sse", "url": format!("http://{addr}/sse")}),
    );
    let config = config.display().to_string();
    let (code, stdout, stderr) = mcpvisor(
        &[
            "call",
            "--config",
            &config,
            "old",
            "echo",
            r#"{"text":"both ends ours"}"#,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let echoed: Value = serde_json::from_str(&stdout).expect("the echoed arguments");
    assert_eq!(echoed, json!({"text": "both ends ours"}));
    far.close_stdin();
}

#[test]
fn a_streamable_refusal_that_http_sse_cannot_answer_either_is_reported_as_both() {
    let legacy = Legacy::start();
    let url = format!("http://{}/refuse", legacy.addr);
    let exit = failed_exit(&["call", "--json", "--url", &url, "echo"]);
    assert_eq!(
        (&exit["status"], &exit["stage"]),
        (&json!(400), &json!("post")),
        "the Streamable HTTP refusal is the report: {exit}"
    );
    assert!(
        exit["detail"]
            .as_str()
            .is_some_and(|d| d.ends_with("as HTTP+SSE, HTTP 405: Method Not Allowed")),
        "{exit}"
    );
    // Discovery (server/discover), then initialize, then the old transport.
    assert_eq!(
        legacy.seen(),
        ["POST /refuse", "POST /refuse", "GET /refuse"]
    );
}

#[test]
fn a_redirect_to_another_origin_is_not_followed() {
    let legacy = Legacy::start();
    let elsewhere = Legacy::start();
    legacy.state.lock().expect("state").redirect_to =
        Some(format!("http://{}/messages", elsewhere.addr));
    let dir = temp_dir("legacy-redirect");
    let config = config(
        &dir,
        json!({"type": "sse", "url": legacy.url(),
               "headers": {"X-Api-Key": "${LEGACY_TOKEN}"}}),
    );
    let config = config.display().to_string();
    let (code, stdout, stderr) = mcpvisor(
        &["call", "--json", "--config", &config, "old", "echo"],
        &[("LEGACY_TOKEN", TOKEN)],
    );
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("307"),
        "the report names the redirect: {stdout}"
    );
    assert_eq!(
        elsewhere.seen(),
        Vec::<String>::new(),
        "nothing reached the other origin"
    );
    assert_eq!(legacy.seen(), ["GET /sse", "POST /messages"]);
}

#[test]
fn an_entry_without_a_type_that_fell_back_reconnects_over_http_sse_at_once() {
    let legacy = Legacy::start();
    let dir = temp_dir("legacy-learned");
    let config = config(&dir, json!({"url": legacy.url()}));
    let mut p = serve_stdio(&config);
    let r = p.initialize();
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    let first = text(&p.call(json!(1), "old__session", json!({})));
    let second = session_after_a_drop(&mut p, &legacy, 2);
    assert_ne!(first, second);
    let seen = legacy.seen();
    let probes = seen.iter().filter(|r| *r == "POST /sse").count();
    // initialize, at the first connection only (the gateway declares
    // sampling and elicitation, so no server/discover goes first).
    assert_eq!(
        probes, 1,
        "Streamable HTTP is tried once, not at the reconnect: {seen:?}"
    );
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}
