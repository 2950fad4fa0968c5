//! `mcpvisor serve` and what an entry says of its server's tools: tool
//! overrides (`"tools": {"override": {...}}`) as a client sees them.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::{Proc, fake_worker, serve, temp_dir};

/// `mcpvisor serve --config <config> --ui 127.0.0.1:0 <flags>`, with a
/// runtime dir and a list cache of its own in `dir`; the gateway, and the
/// UI's address and token as it printed them.
fn serve_ui(dir: &Path, config: &Path, flags: &[&str]) -> (Proc, String, String) {
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
    let mut p = Proc::spawn_with_env(
        &args,
        &[
            ("XDG_RUNTIME_DIR", runtime.display().to_string()),
            (
                "MCPVISOR_CACHE_DIR",
                dir.join("cache").display().to_string(),
            ),
        ],
    );
    let line = p.wait_stderr("mcpvisor: UI at ");
    let url = line
        .split_once("UI at http://")
        .map(|(_, u)| u.trim())
        .expect("a URL");
    let (addr, token) = url.split_once("/?token=").expect("a token");
    (p, addr.to_owned(), token.to_owned())
}

/// The gateway's `tools/list`, by exposed name.
fn tools(p: &mut Proc) -> serde_json::Map<String, Value> {
    let r = p.request(json!("list"), "tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {r}"))
        .iter()
        .map(|t| (t["name"].as_str().expect("a name").to_owned(), t.clone()))
        .collect()
}

/// What every override test expects: `echo` rewritten, `sleep` as the
/// server wrote it, and a warning for the tool the server does not list.
fn check_overrides(p: &mut Proc) {
    p.initialize();
    let tools = tools(p);
    let echo = &tools["fake__echo"];
    assert_eq!(echo["title"], "Say it back", "{echo}");
    assert_eq!(
        echo["description"], "Repeats the text it is given.",
        "{echo}"
    );
    assert_eq!(
        echo["annotations"],
        json!({"readOnlyHint": true, "idempotentHint": true}),
        "{echo}"
    );
    assert_eq!(echo["inputSchema"], json!({"type": "object"}), "{echo}");
    let sleep = &tools["fake__sleep"];
    assert!(
        sleep["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Waits ms milliseconds")),
        "{sleep}"
    );
    assert!(sleep.get("title").is_none(), "{sleep}");
    let line = p.wait_stderr("tools.override names tools the server does not list: no_such_tool");
    assert!(
        line.contains("fake"),
        "the warning names the server: {line}"
    );
    // The call still reaches the server under the tool's own name.
    let r = p.call(json!("call"), "fake__echo", json!({"text": "hi"}));
    assert_eq!(r["result"]["content"][0]["text"], r#"{"text":"hi"}"#, "{r}");
}

#[test]
fn a_json_entry_overrides_title_description_and_annotations() {
    let dir = temp_dir("trust-override-json");
    let config = dir.join("mcp.json");
    let entry = json!({
        "command": fake_worker(),
        "tools": {"override": {
            "echo": {
                "title": "Say it back",
                "description": "Repeats the text it is given.",
                "annotations": {"readOnlyHint": true, "idempotentHint": true}
            },
            "no_such_tool": {"description": "never listed"}
        }}
    });
    std::fs::write(&config, json!({"mcpServers": {"fake": entry}}).to_string()).expect("config");
    let mut p = serve(&config, &[]);
    check_overrides(&mut p);
}

#[test]
fn an_override_for_a_tool_the_server_lacks_is_a_warning_event_of_the_server() {
    use std::io::{Read as _, Write as _};
    let dir = temp_dir("trust-override-event");
    let config = dir.join("mcp.json");
    let entry = json!({"command": fake_worker(),
                       "tools": {"override": {"no_such_tool": {"title": "T"}}}});
    std::fs::write(&config, json!({"mcpServers": {"fake": entry}}).to_string()).expect("config");
    let (mut p, addr, token) = serve_ui(&dir, &config, &[]);
    let (addr, token) = (addr.as_str(), token.as_str());
    p.wait_stderr("tools.override names tools the server does not list: no_such_tool");
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(support::WAIT)).expect("timeout");
    let get = format!(
        "GET /api/servers/fake HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    sock.write_all(get.as_bytes()).expect("send");
    let mut answer = String::new();
    sock.read_to_string(&mut answer).expect("read");
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let detail: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let warned = detail["events"].as_array().is_some_and(|events| {
        events.iter().any(|e| {
            e["kind"] == "warning"
                && e["message"]
                    == "tools.override names tools the server does not list: no_such_tool"
        })
    });
    assert!(warned, "{detail}");
}

#[test]
fn a_toml_entry_overrides_the_same() {
    let dir = temp_dir("trust-override-toml");
    let config = dir.join("config.toml");
    let text = format!(
        r#"[mcp_servers.fake]
command = {command:?}

[mcp_servers.fake.tools.override.echo]
title = "Say it back"
description = "Repeats the text it is given."
annotations = {{ readOnlyHint = true, idempotentHint = true }}

[mcp_servers.fake.tools.override.no_such_tool]
description = "never listed"
"#,
        command = fake_worker().display().to_string()
    );
    std::fs::write(&config, text).expect("config");
    let mut p = serve(&config, &[]);
    check_overrides(&mut p);
}

#[test]
fn a_bad_override_is_a_config_error_naming_the_entry() {
    let dir = temp_dir("trust-override-bad");
    let config = dir.join("mcp.json");
    let entry = json!({
        "command": fake_worker(),
        "tools": {"override": {"echo": {"description": ["not", "text"]}}}
    });
    std::fs::write(&config, json!({"mcpServers": {"fake": entry}}).to_string()).expect("config");
    let mut p = serve(&config, &[]);
    let status = p.wait_exit(support::WAIT);
    assert!(!status.success(), "{status:?}");
    let stderr = p.stderr_text();
    assert!(
        stderr.contains("server \"fake\": \"tools.override.echo.description\" must be a string"),
        "{stderr}"
    );
}

// === the audit log ===

/// A value the env file holds: secret to mcpvisor.
const SECRET: &str = "tok-9f8e7d6c5b4a3210";
/// A string sent in every call's arguments: it must appear in no record.
const MARKER: &str = "payload-marker-5d41402abc4b2a76";

/// A config with one fake worker whose env file holds [`SECRET`].
fn audited_config(dir: &Path) -> std::path::PathBuf {
    std::fs::write(dir.join("secrets.env"), format!("API_TOKEN={SECRET}\n")).expect("env file");
    let config = dir.join("mcp.json");
    let entry = json!({"command": fake_worker(), "env_file": "secrets.env"});
    std::fs::write(&config, json!({"mcpServers": {"fake": entry}}).to_string()).expect("config");
    config
}

/// The audit file's records once it holds `count` lines (bounded wait).
fn records(path: &Path, count: usize) -> (String, Vec<Value>) {
    let deadline = std::time::Instant::now() + support::WAIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= count || std::time::Instant::now() > deadline {
            let records = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect();
            return (text, records);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One POST to the gateway's MCP endpoint; the response's head and body.
fn post(addr: &str, session: Option<&str>, body: &str) -> (String, String) {
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"))
        .unwrap_or_default();
    post_with(addr, &session, body)
}

/// A sessionless 2026-07-28 `tools/call` of `tool` by a client called
/// `client`, its envelope in `_meta` and in the headers.
fn post_modern(addr: &str, client: &str, tool: &str, arguments: Value) -> (String, String) {
    let call = json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"}}}});
    let headers = format!(
        "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
    );
    post_with(addr, &headers, &call.to_string())
}

fn post_with(addr: &str, headers: &str, body: &str) -> (String, String) {
    use std::io::{Read as _, Write as _};
    let session = headers;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(support::WAIT)).expect("timeout");
    sock.write_all(request.as_bytes()).expect("send");
    let mut text = String::new();
    sock.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_owned(), body.to_owned())
}

/// An HTTP session of a client called `client`.
fn open_session(addr: &str, client: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": client, "version": "1"}}});
    let (head, body) = post(addr, None, &init.to_string());
    let session =
        support::session_id(&head).unwrap_or_else(|| panic!("no session id in {head}\n{body}"));
    post(
        addr,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    session
}

#[test]
fn the_audit_log_has_one_line_per_call_from_stdio_and_http_clients_and_no_payload() {
    let dir = temp_dir("trust-audit");
    let config = audited_config(&dir);
    let audit = dir.join("audit.jsonl");
    let audit_flag = audit.display().to_string();

    // A stdio client whose name carries the secret.
    let mut p = serve(&config, &["--audit-log", &audit_flag]);
    let init = p.request(
        json!(0),
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": format!("stdio-{SECRET}"), "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    p.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let ok = p.call(json!(1), "fake__echo", json!({"text": MARKER}));
    assert!(
        ok["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(MARKER)),
        "{ok}"
    );
    let failed = p.call(json!(2), "fake__sleep", json!({"note": MARKER}));
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    let lost = p.call(json!(3), "fake__crash", json!({"note": MARKER}));
    assert_eq!(
        lost["error"]["code"],
        mcpvisor_jsonrpc::WORKER_LOST,
        "{lost}"
    );
    records(&audit, 3);
    p.close_stdin();
    p.wait_exit(support::WAIT);

    // Two HTTP sessions, appending to the same file.
    let mut h = serve(
        &config,
        &["--http", "127.0.0.1:0", "--audit-log", &audit_flag],
    );
    let addr = h.http_address();
    let alpha = open_session(&addr, "alpha");
    let beta = open_session(&addr, "beta");
    for (session, id) in [(&alpha, 10), (&beta, 11)] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "fake__echo", "arguments": {"text": MARKER}}});
        let (head, body) = post(&addr, Some(session), &call.to_string());
        assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
        assert!(body.contains(MARKER), "{body}");
    }
    let (head, body) = post_modern(&addr, "modern", "fake__echo", json!({"text": MARKER}));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains(MARKER), "{body}");
    let (text, records) = records(&audit, 6);
    drop(h);

    assert_eq!(records.len(), 6, "one line per call:\n{text}");
    assert!(
        !text.contains(MARKER),
        "no payload bytes in the audit log:\n{text}"
    );
    assert!(
        !text.contains(SECRET),
        "no secret in the audit log:\n{text}"
    );
    assert!(text.contains("[redacted:API_TOKEN]"), "{text}");
    let summary: Vec<(String, String, Value, Value)> = records
        .iter()
        .map(|r| {
            (
                r["client"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["outcome"].clone(),
                r["error_code"].clone(),
            )
        })
        .collect();
    let stdio_client = "stdio-[redacted:API_TOKEN]".to_owned();
    assert_eq!(
        summary,
        [
            (
                stdio_client.clone(),
                "fake__echo".into(),
                json!("result"),
                Value::Null
            ),
            (
                stdio_client.clone(),
                "fake__sleep".into(),
                json!("is_error"),
                Value::Null
            ),
            (
                stdio_client,
                "fake__crash".into(),
                json!("error"),
                json!(mcpvisor_jsonrpc::WORKER_LOST)
            ),
            (
                "alpha".into(),
                "fake__echo".into(),
                json!("result"),
                Value::Null
            ),
            (
                "beta".into(),
                "fake__echo".into(),
                json!("result"),
                Value::Null
            ),
            (
                "modern".into(),
                "fake__echo".into(),
                json!("result"),
                Value::Null
            ),
        ]
    );
    for r in &records {
        assert_eq!(r["server"], "fake", "{r}");
        assert_eq!(r["method"], "tools/call", "{r}");
        assert!(
            r["at_ms"].as_u64().is_some_and(|t| t > 1_700_000_000_000),
            "{r}"
        );
        assert!(r["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{r}");
        assert!(
            r["request_bytes"]
                .as_u64()
                .is_some_and(|n| n > MARKER.len() as u64),
            "{r}"
        );
        assert!(r["answer_bytes"].as_u64().is_some_and(|n| n > 0), "{r}");
    }
    assert_ne!(
        records[3]["session"], records[4]["session"],
        "each HTTP session is told apart"
    );
    assert_ne!(records[5]["session"], records[4]["session"]);
}

#[test]
fn metrics_count_each_tool_s_calls_by_outcome_with_their_latency() {
    use std::io::{Read as _, Write as _};
    let dir = temp_dir("trust-metrics");
    let config = audited_config(&dir);
    let (mut p, addr, token) = serve_ui(&dir, &config, &[]);
    let (addr, token) = (addr.as_str(), token.as_str());
    p.initialize();
    for id in 1..=2 {
        p.call(json!(id), "fake__echo", json!({"text": "x"}));
    }
    p.call(json!(3), "fake__sleep", json!({}));
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(support::WAIT)).expect("timeout");
    let get = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    sock.write_all(get.as_bytes()).expect("send");
    let mut metrics = String::new();
    sock.read_to_string(&mut metrics).expect("read");
    for want in [
        "mcpvisor_tool_calls_total{server=\"fake\",tool=\"fake__echo\",outcome=\"result\"} 2",
        "mcpvisor_tool_calls_total{server=\"fake\",tool=\"fake__echo\",outcome=\"error\"} 0",
        "mcpvisor_tool_calls_total{server=\"fake\",tool=\"fake__sleep\",outcome=\"is_error\"} 1",
        "mcpvisor_tool_latency_seconds_count{server=\"fake\",tool=\"fake__echo\"} 2",
        "mcpvisor_tool_latency_seconds_bucket{server=\"fake\",tool=\"fake__sleep\",le=\"+Inf\"} 1",
        "mcpvisor_audit_dropped_total 0",
    ] {
        assert!(metrics.contains(want), "no {want} in:\n{metrics}");
    }
}

/// A stdio MCP server in Python's standard library: the prompt `greet`
/// and the resource `mem://doc?key=$DOC_KEY` (a link with its key in the
/// query, as such links are).
const PROMPTS_AND_RESOURCES: &str = r#"
import json, os, sys
uri = "mem://doc?key=" + os.environ["DOC_KEY"]
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, params = msg["method"], msg.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "serverInfo": {"name": "pr", "version": "1"},
                  "capabilities": {"prompts": {}, "resources": {}}}
    elif method == "prompts/list":
        result = {"prompts": [{"name": "greet"}, {"name": "broken"}]}
    elif method == "prompts/get" and params.get("name") == "greet":
        result = {"messages": [{"role": "user", "content": {"type": "text", "text": "hello " + json.dumps(params.get("arguments"))}}]}
    elif method == "resources/list":
        result = {"resources": [{"uri": uri, "name": "doc"}]}
    elif method == "resources/templates/list":
        result = {"resourceTemplates": []}
    elif method == "resources/read" and params.get("uri") == uri:
        result = {"contents": [{"uri": uri, "text": "the document"}]}
    elif method == "ping":
        result = {}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": "no such thing"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

#[test]
fn prompt_gets_and_resource_reads_are_audited_without_the_uri_s_query() {
    let dir = temp_dir("trust-audit-prompts");
    let key = "doc-key-7c6b5a4d3e2f1a0b";
    std::fs::write(dir.join("server.py"), PROMPTS_AND_RESOURCES).expect("script");
    std::fs::write(dir.join("doc.env"), format!("DOC_KEY={key}\n")).expect("env file");
    let config = dir.join("mcp.json");
    let entry =
        json!({"command": "python3", "args": [dir.join("server.py")], "env_file": "doc.env"});
    std::fs::write(&config, json!({"mcpServers": {"pr": entry}}).to_string()).expect("config");
    let audit = dir.join("audit.jsonl");
    let mut p = serve(&config, &["--audit-log", &audit.display().to_string()]);
    p.initialize();
    let uri = format!("mem://doc?key={key}");
    let greeted = p.request(
        json!(1),
        "prompts/get",
        json!({"name": "pr__greet", "arguments": {"who": MARKER}}),
    );
    assert!(greeted.to_string().contains(MARKER), "{greeted}");
    let broken = p.request(json!(2), "prompts/get", json!({"name": "pr__broken"}));
    assert_eq!(broken["error"]["code"], -32602, "{broken}");
    let read = p.request(json!(3), "resources/read", json!({"uri": uri}));
    assert_eq!(
        read["result"]["contents"][0]["text"], "the document",
        "{read}"
    );
    let (text, records) = records(&audit, 3);
    assert!(
        !text.contains(key),
        "the URI's query is not in the audit log:\n{text}"
    );
    assert!(!text.contains(MARKER), "{text}");
    let got: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
                r["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("prompts/get", "pr__greet", "result"),
            ("prompts/get", "pr__broken", "error"),
            ("resources/read", "mem://doc", "result"),
        ]
    );
    assert_eq!(records[1]["error_code"], -32602);
    assert!(
        records
            .iter()
            .all(|r| r["server"] == "pr" && r["client"].is_string()),
        "{text}"
    );
}

#[test]
fn a_call_the_gateway_fails_for_its_stopped_server_is_audited_with_its_code() {
    use std::io::{Read as _, Write as _};
    let dir = temp_dir("trust-audit-stopped");
    let config = audited_config(&dir);
    let audit = dir.join("audit.jsonl");
    let (mut p, addr, token) = serve_ui(
        &dir,
        &config,
        &["--audit-log", &audit.display().to_string()],
    );
    let (addr, token) = (addr.as_str(), token.as_str());
    p.initialize();
    // A call in the worker (it reports progress once it runs), then a
    // person stops the server.
    p.start_call(
        json!(1),
        "fake__sleep",
        json!({"ms": 60_000, "progress_ms": 50}),
    );
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(support::WAIT)).expect("timeout");
    let stop = format!(
        "POST /api/servers/fake/stop HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    sock.write_all(stop.as_bytes()).expect("send");
    let mut answer = String::new();
    sock.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    let lost = p.response(&json!(1));
    let code = lost["error"]["code"].as_i64().expect("an error");
    // A call to the stopped server is refused as not started.
    let refused = p.call(json!(2), "fake__echo", json!({}));
    assert_eq!(
        refused["error"]["code"],
        mcpvisor_jsonrpc::NOT_STARTED,
        "{refused}"
    );
    let (text, records) = records(&audit, 2);
    assert_eq!(records.len(), 2, "{text}");
    assert_eq!(records[0]["name"], "fake__sleep", "{text}");
    assert_eq!(records[0]["outcome"], "error", "{text}");
    assert_eq!(records[0]["error_code"], code, "{text}");
    assert_eq!(records[1]["name"], "fake__echo", "{text}");
    assert_eq!(
        records[1]["error_code"],
        mcpvisor_jsonrpc::NOT_STARTED,
        "{text}"
    );
}
