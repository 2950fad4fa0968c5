//! `mcpvisor run --http`: one stdio server served as itself over Streamable
//! HTTP, driven by a plain HTTP/1.1 client over a socket.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{Proc, WAIT};

/// A server with one tool, `work`, that logs with its own logger name
/// before it answers.
const LOGGER: &str = r#"
id_of() { printf '%s\n' "$1" | sed -n 's/.*"id": *\([0-9][0-9]*\).*/\1/p'; }
while IFS= read -r line; do
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"logger","version":"0"}}}\n' "$(id_of "$line")" ;;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"work","description":"logs, then answers","inputSchema":{"type":"object"}}]}}\n' "$(id_of "$line")" ;;
    *'"method":"notifications/'*) ;;
    *'"tools/call"'*)
      printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"its-own-logger","data":"working"}}\n'
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done"}]}}\n' "$(id_of "$line")" ;;
    *'"id"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$(id_of "$line")" ;;
  esac
done
"#;

/// Sends one request; returns the head and as much of the body as came
/// until `done` holds for it (or the connection closed, or the wait ran out).
fn exchange(addr: &str, request: &str, done: impl Fn(&str) -> bool) -> (String, String) {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    sock.write_all(request.as_bytes()).expect("send");
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while Instant::now() < deadline {
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("read: {e}"),
        }
        let text = String::from_utf8_lossy(&got);
        if let Some((_, body)) = text.split_once("\r\n\r\n")
            && done(body)
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_owned(), body.to_owned())
}

fn post(addr: &str, session: Option<&str>, body: &str) -> (String, String) {
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    post_with(addr, &session, body)
}

/// One POST to `/mcp` of `body`, with `headers` (each line ending in
/// CRLF) beside the ones every POST carries, on a connection of its own.
fn post_with(addr: &str, headers: &str, body: &str) -> (String, String) {
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, &req, |_| false)
}

#[test]
fn the_servers_log_lines_keep_their_own_logger() {
    let args: Vec<String> = ["run", "--http", "127.0.0.1:0", "--", "sh", "-c", LOGGER]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::spawn(&args);
    let addr = p.http_address();
    let session = open_session(&addr);
    let (head, body) = post(
        &addr,
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"work","arguments":{}}}"#,
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");

    // The log line is related to no request: it waits for the standalone stream.
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    let (head, body) = exchange(&addr, &get, |b| b.contains("notifications/message"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(
        body.contains(r#""logger":"its-own-logger""#),
        "the log line lost its logger: {body}"
    );
    drop(p);
}

/// A server that answers `initialize` only once the file `$GATE` exists.
const GATED: &str = r#"
id_of() { printf '%s\n' "$1" | sed -n 's/.*"id": *\([0-9][0-9]*\).*/\1/p'; }
while IFS= read -r line; do
  case "$line" in
    *'"initialize"'*)
      while [ ! -e "$GATE" ]; do sleep 0.02; done
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"gated","version":"0"}}}\n' "$(id_of "$line")" ;;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}\n' "$(id_of "$line")" ;;
    *'"method":"notifications/'*) ;;
    *'"id"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$(id_of "$line")" ;;
  esac
done
"#;

/// `GET path`: the status line and the body.
fn probe(addr: &str, path: &str) -> (String, String) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let (head, body) = exchange(addr, &req, |_| false);
    (head.lines().next().unwrap_or("").to_owned(), body)
}

/// Polls `path` until its status line starts with `want`.
fn probe_until(addr: &str, path: &str, want: &str) -> (String, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = probe(addr, path);
        if got.0.starts_with(want) || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn readiness_waits_for_the_server_and_the_drain_turns_it_off() {
    let dir = support::temp_dir("readiness");
    let gate = dir.join("gate");
    let args: Vec<String> = [
        "run",
        "--http",
        "127.0.0.1:0",
        "--http-drain-min",
        "10m",
        "--",
        "sh",
        "-c",
        GATED,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn_with_env(&args, &[("GATE", gate.display().to_string())]);
    let addr = p.http_address();

    // Alive, and not ready while the server's initialize is unanswered.
    let (status, body) = probe(&addr, "/healthz");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(body, "ok");
    let (status, body) = probe(&addr, "/readyz");
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    assert_eq!(body, "starting");

    std::fs::write(&gate, "").expect("open the gate");
    let (status, body) = probe_until(&addr, "/readyz", "HTTP/1.1 200");
    assert!(status.starts_with("HTTP/1.1 200"), "{status} {body}");
    assert_eq!(body, "ready");

    // SIGTERM: not ready, and still answering through the drain's minimum.
    support::signal(p.pid(), nix::sys::signal::Signal::SIGTERM as i32);
    let (status, body) = probe_until(&addr, "/readyz", "HTTP/1.1 503");
    assert!(status.starts_with("HTTP/1.1 503"), "{status} {body}");
    assert_eq!(body, "draining");
    let (status, _) = probe(&addr, "/healthz");
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let (head, _) = post(
        &addr,
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    );
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that logs at the level it was last set to (`warning` until
/// then): a call to `work` sends one message at each of debug, info,
/// warning and error that its level admits, each saying the level the
/// server was at.
const LEVELLED: &str = r#"
id_of() { printf '%s\n' "$1" | sed -n 's/.*"id": *\([0-9][0-9]*\).*/\1/p'; }
rank() { case "$1" in debug) echo 0 ;; info) echo 1 ;; notice) echo 2 ;; warning) echo 3 ;; error) echo 4 ;; *) echo 5 ;; esac; }
level=warning
while IFS= read -r line; do
  case "$line" in
    *'"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"levelled","version":"0"}}}\n' "$(id_of "$line")" ;;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"work","inputSchema":{"type":"object"}}]}}\n' "$(id_of "$line")" ;;
    *'"logging/setLevel"'*)
      level=$(printf '%s\n' "$line" | sed -n 's/.*"level": *"\([a-z]*\)".*/\1/p')
      printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$(id_of "$line")" ;;
    *'"method":"notifications/'*) ;;
    *'"tools/call"'*)
      for l in debug info warning error; do
        if [ "$(rank "$l")" -ge "$(rank "$level")" ]; then
          printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"%s","data":"%s at %s"}}\n' "$l" "$l" "$level"
        fi
      done
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done"}]}}\n' "$(id_of "$line")" ;;
    *'"id"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$(id_of "$line")" ;;
  esac
done
"#;

/// One HTTP session's open standalone stream, read as it comes.
struct Listener {
    sock: TcpStream,
    got: String,
}

impl Listener {
    fn open(addr: &str, session: &str) -> Self {
        let mut sock = TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let get = format!(
            "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
        );
        sock.write_all(get.as_bytes()).expect("send");
        let mut l = Listener {
            sock,
            got: String::new(),
        };
        l.until(|t| t.contains("\r\n\r\n"));
        assert!(l.got.starts_with("HTTP/1.1 200"), "{}", l.got);
        l
    }

    /// Reads until `done` holds for all that came, or the wait runs out.
    fn until(&mut self, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + WAIT;
        let mut buf = [0u8; 8192];
        while !done(&self.got) {
            if Instant::now() >= deadline {
                return false;
            }
            match self.sock.read(&mut buf) {
                Ok(0) => return done(&self.got),
                Ok(n) => self.got.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        true
    }

    /// The log messages' data seen so far, in order.
    fn logged(&self) -> Vec<String> {
        self.got
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter(|m| m["method"] == "notifications/message")
            .filter_map(|m| m["params"]["data"].as_str().map(str::to_owned))
            .collect()
    }
}

fn open_session(addr: &str) -> String {
    let (head, _) = post(
        addr,
        None,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    );
    let session = support::session_id(&head).unwrap_or_else(|| panic!("no session id in {head}"));
    post(
        addr,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    session
}

fn set_level(addr: &str, session: &str, level: &str) {
    let (head, body) = post(
        addr,
        Some(session),
        &format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{{"level":"{level}"}}}}"#
        ),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains(r#""result":{}"#), "{body}");
}

fn work(addr: &str, session: &str, id: u32) {
    call(addr, session, id, "work");
}

fn call(addr: &str, session: &str, id: u32, tool: &str) {
    let (head, body) = post(
        addr,
        Some(session),
        &format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        ),
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
}

#[test]
fn each_session_gets_the_log_messages_its_own_level_admits() {
    let args: Vec<String> = ["run", "--http", "127.0.0.1:0", "--", "sh", "-c", LEVELLED]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::spawn(&args);
    let addr = p.http_address();
    let severe = open_session(&addr);
    let verbose = open_session(&addr);
    let unset = open_session(&addr);
    let mut severe_l = Listener::open(&addr, &severe);
    let mut verbose_l = Listener::open(&addr, &verbose);
    let mut unset_l = Listener::open(&addr, &unset);

    set_level(&addr, &severe, "error");
    set_level(&addr, &verbose, "debug");
    // The server logs at the most verbose level asked for: debug.
    work(&addr, &severe, 2);
    let all = [
        "debug at debug",
        "info at debug",
        "warning at debug",
        "error at debug",
    ];
    assert!(
        verbose_l.until(|t| t.contains("error at debug")),
        "{}",
        verbose_l.got
    );
    assert_eq!(verbose_l.logged(), all);
    assert!(
        severe_l.until(|t| t.contains("error at debug")),
        "{}",
        severe_l.got
    );
    assert_eq!(
        severe_l.logged(),
        ["error at debug"],
        "only what error admits"
    );
    // A session that never set a level gets whatever the servers send.
    assert!(
        unset_l.until(|t| t.contains("error at debug")),
        "{}",
        unset_l.got
    );
    assert_eq!(unset_l.logged(), all);

    // The verbose session leaves: the server is told the level still wanted.
    let del = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nMcp-Session-Id: {verbose}\r\nMCP-Protocol-Version: 2025-11-25\r\nConnection: close\r\n\r\n"
    );
    let (head, _) = exchange(&addr, &del, |_| false);
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
    // The hub hears of the end a moment after the 204: until then a call
    // may still find the server at debug.
    let deadline = Instant::now() + WAIT;
    for n in 10.. {
        work(&addr, &unset, n);
        // Each call ends with one error line, whatever the level.
        let calls = (n - 8) as usize;
        assert!(
            unset_l.until(|t| t.matches("error at").count() >= calls),
            "{}",
            unset_l.got
        );
        if unset_l.got.contains("error at error") {
            break;
        }
        assert!(Instant::now() < deadline, "the server stayed at debug");
    }
    assert!(
        severe_l.until(|t| t.contains("error at error")),
        "{}",
        severe_l.got
    );
    assert!(
        severe_l.logged().iter().all(|d| d.starts_with("error at")),
        "{:?}",
        severe_l.logged()
    );
    drop(p);
}

#[test]
fn a_per_client_server_logs_at_its_own_client_s_level() {
    let dir = support::temp_dir("per-client-levels");
    let config = dir.join("mcp.json");
    let servers = serde_json::json!({"mcpServers": {"lv": {
        "command": "sh", "args": ["-c", LEVELLED], "sessions": "per-client"
    }}});
    std::fs::write(&config, servers.to_string()).expect("config");
    let args: Vec<String> = [
        "serve",
        "--no-watch",
        "--http",
        "127.0.0.1:0",
        "--config",
        config.to_str().expect("utf-8"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn_with_env(
        &args,
        &[(
            "MCPVISOR_CACHE_DIR",
            dir.join("cache").display().to_string(),
        )],
    );
    let addr = p.http_address();
    let severe = open_session(&addr);
    let verbose = open_session(&addr);
    let mut severe_l = Listener::open(&addr, &severe);
    let mut verbose_l = Listener::open(&addr, &verbose);
    // Each session's first call starts its own process.
    call(&addr, &severe, 2, "lv__work");
    call(&addr, &verbose, 2, "lv__work");
    set_level(&addr, &severe, "error");
    set_level(&addr, &verbose, "debug");
    call(&addr, &severe, 3, "lv__work");
    call(&addr, &verbose, 3, "lv__work");
    assert!(
        severe_l.until(|t| t.contains("error at error")),
        "{}",
        severe_l.got
    );
    assert!(
        verbose_l.until(|t| t.contains("error at debug")),
        "{}",
        verbose_l.got
    );
    // Before the levels: the server's own (warning); after: each its own,
    // and nothing of the other's process.
    assert_eq!(
        severe_l.logged(),
        ["warning at warning", "error at warning", "error at error"]
    );
    assert_eq!(
        verbose_l.logged(),
        [
            "warning at warning",
            "error at warning",
            "debug at debug",
            "info at debug",
            "warning at debug",
            "error at debug"
        ]
    );
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server of both eras, as the SDKs that serve both behave: it answers
/// `server/discover` naming 2026-07-28, and refuses `initialize` once it
/// has. It writes each method it gets to `$METHODS`, and its tool says
/// which era its process speaks.
const BOTH_ERAS: &str = r#"
id_of() { printf '%s\n' "$1" | sed -n 's/.*"id": *\([0-9][0-9]*\).*/\1/p'; }
discovered=
while IFS= read -r line; do
  printf '%s\n' "$line" | sed -n 's/.*"method": *"\([^"]*\)".*/\1/p' >> "$METHODS"
  case "$line" in
    *'"server/discover"'*)
      discovered=1
      printf '{"jsonrpc":"2.0","id":%s,"result":{"supportedVersions":["2025-11-25","2026-07-28"],"capabilities":{"tools":{}},"serverInfo":{"name":"both","version":"0"}}}\n' "$(id_of "$line")" ;;
    *'"initialize"'*)
      if [ -n "$discovered" ]; then
        printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32600,"message":"this connection is of 2026-07-28"}}\n' "$(id_of "$line")"
      else
        printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"both","version":"0"}}}\n' "$(id_of "$line")"
      fi ;;
    *'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"work","description":"answers","inputSchema":{"type":"object"}}]}}\n' "$(id_of "$line")" ;;
    *'"method":"notifications/'*) ;;
    *'"tools/call"'*)
      era=2025-11-25; [ -n "$discovered" ] && era=2026-07-28
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done in %s"}]}}\n' "$(id_of "$line")" "$era" ;;
    *'"id"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$(id_of "$line")" ;;
  esac
done
"#;

/// `run --http --era 2025-11-25`: a server of both eras is never asked
/// `server/discover` (with `auto`, the process it starts first is probed and
/// driven in 2026-07-28).
#[test]
fn era_2025_11_25_keeps_a_server_of_both_eras_in_the_handshake() {
    let dir = support::temp_dir("era-flag");
    let methods = dir.join("methods");
    let args: Vec<String> = [
        "run",
        "--http",
        "127.0.0.1:0",
        "--era",
        "2025-11-25",
        "--",
        "sh",
        "-c",
        BOTH_ERAS,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn_with_env(&args, &[("METHODS", methods.display().to_string())]);
    let addr = p.http_address();
    let session = open_session(&addr);
    let (head, body) = post(
        &addr,
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"work","arguments":{}}}"#,
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains(r#""text":"done in 2025-11-25""#), "{body}");
    let seen = std::fs::read_to_string(&methods).expect("the methods it got");
    let seen: Vec<&str> = seen.lines().collect();
    assert_eq!(seen.first(), Some(&"initialize"), "{seen:?}");
    assert!(!seen.contains(&"server/discover"), "{seen:?}");
    assert!(seen.contains(&"tools/call"), "{seen:?}");
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 2026-07-28 `tools/call` of `tool`, sessionless.
fn post_2026_call(addr: &str, tool: &str) -> (String, String) {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let headers = format!(
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
    );
    post_with(addr, &headers, &body)
}

/// `run --http` over a server of both eras: a 2026-07-28 client is served
/// by the discovered process, and a client of the handshake era by a
/// second process of the server, initialized, started by its first call.
#[test]
fn each_era_s_client_is_served_by_a_process_of_its_era() {
    let dir = support::temp_dir("twin");
    let methods = dir.join("methods");
    let args: Vec<String> = ["run", "--http", "127.0.0.1:0", "--", "sh", "-c", BOTH_ERAS]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::spawn_with_env(&args, &[("METHODS", methods.display().to_string())]);
    let addr = p.http_address();
    let read = || std::fs::read_to_string(&methods).unwrap_or_default();

    let (head, body) = post_2026_call(&addr, "work");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains(r#""text":"done in 2026-07-28""#), "{body}");
    // No process of the handshake era for it.
    let seen = read();
    assert!(!seen.lines().any(|m| m == "initialize"), "{seen}");

    let session = open_session(&addr);
    let (head, body) = post(
        &addr,
        Some(&session),
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"work","arguments":{}}}"#,
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains(r#""text":"done in 2025-11-25""#), "{body}");
    let seen = read();
    let count = |m: &str| seen.lines().filter(|l| *l == m).count();
    // One discovery (the first process), one initialize (the second),
    // and neither refused: the call was answered in its era.
    assert!(count("server/discover") >= 1, "{seen}");
    assert_eq!(count("initialize"), 1, "{seen}");
    assert_eq!(count("tools/call"), 2, "{seen}");

    let (_, body) = post_2026_call(&addr, "work");
    assert!(body.contains(r#""text":"done in 2026-07-28""#), "{body}");
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}
