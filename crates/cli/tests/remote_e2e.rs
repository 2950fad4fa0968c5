//! Remote servers over Streamable HTTP: a `url` entry served by `serve`,
//! `inspect --url` and `call --url`, and `connect` in front of
//! `serve --http`. The remote peer is our own `run --http` (or
//! `serve --http`) in front of the fake worker, a real Streamable HTTP
//! server.

mod support;

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Proc, WAIT, fake_worker, signal, temp_dir, wait_gone};

/// A token that must reach the remote server and never any log.
const TOKEN: &str = "tok-SENTINEL-5150";

/// `mcpvisor <args>` serving HTTP; returns it and its `host:port`.
fn listening(args: &[String]) -> (Proc, String) {
    let mut p = Proc::spawn(args);
    let addr = p.http_address();
    (p, addr)
}

/// `run --http ADDR [--auth-token-file F] -- fake worker`.
fn remote(addr: &str, token_file: Option<&Path>) -> (Proc, String) {
    remote_with(addr, token_file, &[])
}

fn remote_with(addr: &str, token_file: Option<&Path>, flags: &[&str]) -> (Proc, String) {
    let mut args: Vec<String> = vec!["run".into(), "--http".into(), addr.into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    if let Some(file) = token_file {
        args.push("--auth-token-file".into());
        args.push(file.display().to_string());
    }
    args.push("--".into());
    args.push(fake_worker().display().to_string());
    listening(&args)
}

fn serve_stdio(config: &Path) -> Proc {
    serve_stdio_with(config, &[])
}

fn serve_stdio_with(config: &Path, flags: &[&str]) -> Proc {
    let cache = config.with_file_name("cache");
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    Proc::spawn_with_env(
        &args,
        &[("MCPVISOR_CACHE_DIR", cache.display().to_string())],
    )
}

fn initialize(p: &mut Proc) {
    let r = p.request(
        json!(0),
        "initialize",
        json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"remote-e2e","version":"1"}}),
    );
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    p.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
}

fn tool_names(p: &mut Proc, id: Value) -> Vec<String> {
    let r = p.request(id, "tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {r}"))
        .iter()
        .map(|t| t["name"].as_str().expect("a tool name").to_owned())
        .collect()
}

#[test]
fn serve_serves_a_url_entry_with_headers_from_its_env_file() {
    let dir = temp_dir("remote-serve");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    let (mut far, addr) = remote("127.0.0.1:0", Some(&token_file));
    std::fs::write(dir.join("far.env"), format!("FAR_TOKEN={TOKEN}\n")).expect("env");
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"far": {
        "url": format!("http://{addr}/mcp"),
        "headers": {"Authorization": "Bearer ${FAR_TOKEN}"},
        "env_file": "far.env",
    }}});
    std::fs::write(&config, entry.to_string()).expect("config");

    let mut p = serve_stdio(&config);
    initialize(&mut p);
    let names = tool_names(&mut p, json!(1));
    assert!(names.contains(&"far__whoami".to_owned()), "{names:?}");
    let r = p.call(json!(2), "far__echo", json!({"text": "through the remote"}));
    assert_eq!(
        Proc::tool_json(&r),
        json!({"text": "through the remote"}),
        "{r}\nstderr:\n{}",
        p.stderr_text()
    );
    let r = p.call(json!(3), "far__whoami", json!({}));
    assert!(Proc::tool_json(&r)["pid"].is_u64(), "{r}");

    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    let logs = p.stderr_to_end(WAIT);
    assert!(!logs.contains(TOKEN), "the token reached the log:\n{logs}");
    far.close_stdin();
}

#[test]
fn a_remote_restart_fails_the_call_in_flight_once_and_the_next_call_works() {
    let dir = temp_dir("remote-restart");
    let (far, addr) = remote("127.0.0.1:0", None);
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"far": {"url": format!("http://{addr}/mcp")}}});
    std::fs::write(&config, entry.to_string()).expect("config");

    let mut p = serve_stdio(&config);
    initialize(&mut p);
    let first = Proc::tool_json(&p.call(json!(1), "far__whoami", json!({})));
    let worker = i32::try_from(first["pid"].as_u64().expect("a pid")).expect("a pid");
    // Running at the remote: its progress has come back.
    p.start_call(
        json!(2),
        "far__sleep",
        json!({"ms": 30_000, "progress_ms": 100}),
    );

    // The remote dies without a word, and a new one takes its address.
    signal(far.pid(), 9);
    signal(worker, 9);
    assert!(wait_gone(far.pid(), WAIT));
    drop(far);
    let (_again, _) = remote(&addr, None);

    // The call in flight is answered once, with -32010 ...
    let mut answers = Vec::new();
    let lost = p.response(&json!(2));
    assert_eq!(lost["error"]["code"], json!(-32010), "{lost}");
    answers.push(lost);
    // ... and the next call works, on a new remote session and process.
    p.send_call(json!(3), "far__whoami", json!({}));
    let next = loop {
        let m = p.recv();
        if m["id"] == json!(2) && m.get("method").is_none() {
            answers.push(m.clone());
        }
        if m["id"] == json!(3) && m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(answers.len(), 1, "answered more than once: {answers:?}");
    let second = Proc::tool_json(&next);
    assert!(
        second["pid"].is_u64() && second["pid"] != first["pid"],
        "{next}\nstderr:\n{}",
        p.stderr_text()
    );
}

#[test]
fn a_rotated_token_in_the_env_file_is_used_by_the_next_connect() {
    let dir = temp_dir("remote-rotate");
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let (far, addr) = remote("127.0.0.1:0", Some(&token_file));
    let env_file = dir.join("far.env");
    std::fs::write(&env_file, format!("FAR_TOKEN={TOKEN}\n")).expect("env");
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"far": {
        "url": format!("http://{addr}/mcp"),
        "headers": {"Authorization": "Bearer ${FAR_TOKEN}"},
        "env_file": "far.env",
    }}});
    std::fs::write(&config, entry.to_string()).expect("config");

    // Logging at its most verbose: still no token in it.
    let mut p = serve_stdio_with(&config, &["-vv"]);
    initialize(&mut p);
    let first = Proc::tool_json(&p.call(json!(1), "far__whoami", json!({})));

    // The token changes: the remote restarts with the new one, and the env
    // file holds it too. mcpvisor is not told anything.
    let rotated = "tok-ROTATED-6160";
    std::fs::write(&token_file, rotated).expect("token");
    std::fs::write(&env_file, format!("FAR_TOKEN={rotated}\n")).expect("env");
    let worker = i32::try_from(first["pid"].as_u64().expect("a pid")).expect("a pid");
    signal(far.pid(), 9);
    signal(worker, 9);
    assert!(wait_gone(far.pid(), WAIT));
    drop(far);
    let (_again, _) = remote(&addr, Some(&token_file));

    // The next call goes to a new remote session, made with the new token.
    let r = p.call(json!(2), "far__whoami", json!({}));
    let second = Proc::tool_json(&r);
    assert!(
        second["pid"].is_u64() && second["pid"] != first["pid"],
        "{r}\nstderr:\n{}",
        p.stderr_text()
    );
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    let logs = p.stderr_to_end(WAIT);
    assert!(logs.contains("worker stopped"), "{logs}");
    for secret in [TOKEN, rotated] {
        assert!(!logs.contains(secret), "a token reached the log:\n{logs}");
    }
}

#[test]
fn an_http_error_for_one_request_answers_it_and_the_session_goes_on() {
    let dir = temp_dir("remote-413");
    let (_far, addr) = remote_with("127.0.0.1:0", None, &["--max-message-bytes", "4KiB"]);
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"far": {"url": format!("http://{addr}/mcp")}}});
    std::fs::write(&config, entry.to_string()).expect("config");

    let mut p = serve_stdio(&config);
    initialize(&mut p);
    let first = Proc::tool_json(&p.call(json!(1), "far__whoami", json!({})));
    let big = "x".repeat(8 * 1024);
    let r = p.call(json!(2), "far__echo", json!({"text": big}));
    assert_eq!(r["error"]["code"], json!(-32603), "{r}");
    assert_eq!(
        r["error"]["data"]["exit"]["http"]["status"],
        json!(413),
        "{r}"
    );
    assert_eq!(
        r["error"]["data"]["exit"]["http"]["stage"],
        json!("post"),
        "{r}"
    );
    // Same remote session, same process.
    let again = Proc::tool_json(&p.call(json!(3), "far__whoami", json!({})));
    assert_eq!(again, first);
}

#[test]
fn connect_reconnects_when_the_gateway_behind_it_restarts() {
    let dir = temp_dir("remote-connect-restart");
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"w": {"command": fake_worker().display().to_string()}}});
    std::fs::write(&config, entry.to_string()).expect("config");
    let serve_args = |addr: &str| -> Vec<String> {
        vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--http".into(),
            addr.into(),
        ]
    };
    let (gateway, addr) = listening(&serve_args("127.0.0.1:0"));
    let mut p = Proc::spawn(&["connect".into(), format!("http://{addr}/mcp")]);
    initialize(&mut p);
    let first = Proc::tool_json(&p.call(json!(1), "w__whoami", json!({})));

    let worker = i32::try_from(first["pid"].as_u64().expect("a pid")).expect("a pid");
    signal(gateway.pid(), 9);
    signal(worker, 9);
    assert!(wait_gone(gateway.pid(), WAIT));
    drop(gateway);
    let (_again, _) = listening(&serve_args(&addr));

    // The client's handshake is replayed to the new gateway; its next call
    // works there.
    let r = p.call(json!(2), "w__whoami", json!({}));
    let second = Proc::tool_json(&r);
    assert!(
        second["pid"].is_u64() && second["pid"] != first["pid"],
        "{r}\nstderr:\n{}",
        p.stderr_text()
    );
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}

/// A TCP proxy that can cut every connection through it at once, as a
/// flaky network or a restarted load balancer does. It answers
/// `server/discover` with 404 itself, so that the server behind is spoken to
/// in the handshake era, whose streams resume.
struct Cutter {
    addr: String,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Cutter {
    fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let conns = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&conns);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { break };
                // The first request on a connection: discovery is refused.
                let mut head = vec![0u8; 64 * 1024];
                let Ok(n) = client.read(&mut head) else {
                    continue;
                };
                head.truncate(n);
                let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if text.contains("mcp-method: server/discover") {
                    let _ = client.write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    continue;
                }
                let Ok(mut server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                if server.write_all(&head).is_err() {
                    continue;
                }
                let (Ok(c), Ok(s), Ok(c2), Ok(s2)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                kept.lock().expect("conns").extend([c2, s2]);
                pipe(client, s);
                pipe(server, c);
            }
        });
        Self { addr, conns }
    }

    fn cut(&self) {
        for conn in self.conns.lock().expect("conns").drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[test]
fn a_dropped_stream_is_resumed_and_its_answer_still_comes() {
    let dir = temp_dir("remote-resume");
    let (_far, addr) = remote("127.0.0.1:0", None);
    let proxy = Cutter::start(addr);
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"far": {"url": format!("http://{}/mcp", proxy.addr)}}});
    std::fs::write(&config, entry.to_string()).expect("config");

    let mut p = serve_stdio(&config);
    initialize(&mut p);
    let first = Proc::tool_json(&p.call(json!(1), "far__whoami", json!({})));
    p.start_call(
        json!(2),
        "far__sleep",
        json!({"ms": 1500, "progress_ms": 100}),
    );
    // Every connection drops while the call runs; the server lives on.
    proxy.cut();
    let mut progress_after_cut = 0;
    let done = loop {
        let m = p.recv();
        if m["method"] == json!("notifications/progress") {
            progress_after_cut += 1;
        } else if m["id"] == json!(2) {
            break m;
        }
    };
    assert!(
        done.get("result").is_some(),
        "the answer was lost: {done}\nstderr:\n{}",
        p.stderr_text()
    );
    assert!(progress_after_cut > 0, "the stream did not go on");
    // The same remote session and process serve the next call.
    let again = Proc::tool_json(&p.call(json!(3), "far__whoami", json!({})));
    assert_eq!(again, first);
    assert!(
        !p.stderr_text().contains("worker stopped"),
        "{}",
        p.stderr_text()
    );
}

/// `mcpvisor inspect|call --url URL ...`: its exit status, stdout, stderr.
fn probe(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(support::mcpvisor())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run mcpvisor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_server_that_offers_2026_07_28_is_spoken_to_in_it_and_others_in_the_handshake_era() {
    // mcpvisor's own HTTP front offers 2026-07-28: discovery finds it, and
    // the call goes without a session.
    let (_far, addr) = remote("127.0.0.1:0", None);
    let url = format!("http://{addr}/mcp");
    let (code, out, err) = probe(&["inspect", "--json", "--url", &url], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).expect("inspect --json");
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    let (code, out, err) = probe(&["inspect", "--url", &url], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("protocol   2026-07-28"), "{out}");
    let (code, out, err) = probe(
        &["call", "--url", &url, "echo", r#"{"text":"modern"}"#],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).ok(),
        Some(json!({"text": "modern"}))
    );

    // Refused discovery (here by the proxy): the handshake, as before.
    let proxy = Cutter::start(addr);
    let url = format!("http://{}/mcp", proxy.addr);
    let (code, out, err) = probe(&["inspect", "--json", "--url", &url], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).expect("inspect --json");
    // The version the fake server behind `run` negotiates itself.
    assert_eq!(report["protocolVersion"], "2025-06-18", "{report}");
    let (code, out, err) = probe(&["call", "--url", &url, "echo", r#"{"text":"old"}"#], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).ok(),
        Some(json!({"text": "old"}))
    );
}

#[test]
fn inspect_and_call_take_a_url_and_headers() {
    let dir = temp_dir("remote-probe");
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let (far, addr) = remote("127.0.0.1:0", Some(&token_file));
    let url = format!("http://{addr}/mcp");
    let auth = "Authorization: Bearer ${PROBE_TOKEN}";
    let env = [("PROBE_TOKEN", TOKEN)];

    let (code, out, err) = probe(
        &["inspect", "--json", "--url", &url, "--header", auth],
        &env,
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).expect("inspect --json");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"echo") && tools.contains(&"sleep"),
        "{tools:?}"
    );

    let (code, out, err) = probe(
        &[
            "call",
            "--url",
            &url,
            "--header",
            auth,
            "echo",
            r#"{"text":"hi"}"#,
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let echoed: Value = serde_json::from_str(&out).expect("the echoed arguments");
    assert_eq!(echoed, json!({"text": "hi"}));

    // A wrong token: the report says what the server answered, and never
    // what was sent.
    let (code, out, err) = probe(
        &["call", "--json", "--url", &url, "--header", auth, "echo"],
        &[("PROBE_TOKEN", "not-the-token")],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    let failure: Value = serde_json::from_str(&out).expect("call --json");
    assert_eq!(
        failure["error"]["crash"]["exit"],
        json!({"kind": "http", "status": 401, "stage": "post", "detail": "not authorized: check the headers"}),
        "{failure}"
    );
    assert!(!out.contains("not-the-token") && !err.contains("not-the-token"));

    // Nothing listens: a clear report, at once.
    drop(far);
    let (code, _, err) = probe(&["call", "--url", &url, "echo"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("gave no answer to a POST: cannot connect"),
        "{err}"
    );
}

#[test]
fn connect_bridges_a_stdio_client_to_serve_http_and_ends_with_its_stdin() {
    let dir = temp_dir("remote-connect");
    let token_file = dir.join("token");
    std::fs::write(&token_file, TOKEN).expect("token");
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"w": {"command": fake_worker().display().to_string()}}});
    std::fs::write(&config, entry.to_string()).expect("config");
    let (gateway, addr) = listening(&[
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--http".into(),
        "127.0.0.1:0".into(),
        "--auth-token-file".into(),
        token_file.display().to_string(),
    ]);

    let mut p = Proc::spawn(&[
        "connect".into(),
        format!("http://{addr}/mcp"),
        "--auth-token-file".into(),
        token_file.display().to_string(),
    ]);
    initialize(&mut p);
    let names = tool_names(&mut p, json!("list"));
    assert!(names.contains(&"w__echo".to_owned()), "{names:?}");
    // Progress comes through, with the client's own token and id.
    p.start_call(
        json!("slow"),
        "w__sleep",
        json!({"ms": 300, "progress_ms": 50}),
    );
    let done = p.response(&json!("slow"));
    assert!(done.get("result").is_some(), "{done}");
    let r = p.call(json!(7), "w__echo", json!({"text": "bridged"}));
    assert_eq!(Proc::tool_json(&r), json!({"text": "bridged"}), "{r}");

    p.close_stdin();
    let status = p.wait_exit(WAIT);
    assert!(status.success(), "{status:?}\n{}", p.stderr_text());
    let logs = p.stderr_to_end(Duration::from_secs(5));
    assert!(!logs.contains(TOKEN), "the token reached the log:\n{logs}");
    drop(gateway);
}
