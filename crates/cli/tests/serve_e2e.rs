//! `mcpvisor serve` end to end: several fake workers from one config file,
//! offered to a client on stdio as one MCP server.
//!
//! What only the gateway's own timers decide (health pings and retries,
//! idle stops, list timeouts, a call cancelled while its server starts) is
//! tested on paused time with scripted servers, in the gateway's
//! `tests/core`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcpvisor_jsonrpc::{NOT_STARTED, WORKER_LOST};
use serde_json::{Value, json};
use support::{Proc, WAIT, fake_worker, mcpvisor, serve, signal, temp_dir, wait_gone};

/// The fake worker's own tools, in its listing order.
const BUILTIN_TOOLS: [&str; 12] = [
    "echo",
    "sleep",
    "hang",
    "crash",
    "kill_self",
    "garbage",
    "huge",
    "stderr",
    "whoami",
    "ask",
    "notify",
    "list_changed",
];

/// One config entry: the server's name and its command line.
struct Entry {
    name: &'static str,
    command: String,
    args: Vec<String>,
}

impl Entry {
    /// The fake worker with these flags.
    fn fake(name: &'static str, flags: &[&str]) -> Self {
        Self {
            name,
            command: fake_worker().display().to_string(),
            args: flags.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The fake worker, logging what it receives to `<dir>/<name>.log`.
    fn logged(name: &'static str, dir: &Path, flags: &[&str]) -> Self {
        let mut entry = Self::fake(name, flags);
        entry.args.push("--log-file".into());
        entry.args.push(log_path(dir, name).display().to_string());
        entry
    }

    /// A shell command line.
    fn sh(name: &'static str, script: &str) -> Self {
        Self {
            name,
            command: "sh".into(),
            args: vec!["-c".into(), script.into()],
        }
    }
}

fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.log"))
}

/// What the fake worker of `name` received, one `<method> <id>` a line.
fn received(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(log_path(dir, name)).unwrap_or_default()
}

/// Writes a Claude Desktop style config file with these servers.
fn write_config(path: &Path, entries: &[Entry]) {
    let servers: serde_json::Map<String, Value> = entries
        .iter()
        .map(|e| {
            (
                e.name.to_owned(),
                json!({"command": e.command, "args": e.args}),
            )
        })
        .collect();
    let text = serde_json::to_string_pretty(&json!({ "mcpServers": servers })).expect("config");
    std::fs::write(path, text).expect("write config");
}

/// A temp dir with a config of `entries`, and the gateway serving it.
fn gateway(name: &str, entries: &[Entry], flags: &[&str]) -> (PathBuf, PathBuf, Proc) {
    let dir = temp_dir(name);
    let config = dir.join("mcp.json");
    write_config(&config, entries);
    let p = serve(&config, flags);
    (dir, config, p)
}

/// `initialize` declaring these client capabilities, then `initialized`.
fn initialize_with(p: &mut Proc, capabilities: Value) -> Value {
    let r = p.request(
        json!(0),
        "initialize",
        json!({"protocolVersion":"2025-06-18","capabilities":capabilities,"clientInfo":{"name":"serve-e2e","version":"1"}}),
    );
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    p.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    r
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

/// Every message up to and including the first that `done` accepts.
fn until(p: &mut Proc, what: &str, mut done: impl FnMut(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(m) = p.recv_within(left) else {
            panic!(
                "no {what} within {WAIT:?}; got {seen:?}; stderr:\n{}",
                p.stderr_text()
            );
        };
        let stop = done(&m);
        seen.push(m);
        if stop {
            return seen;
        }
    }
}

/// The responses to all of `ids`, by id as JSON text, in whatever order
/// they come (notifications and server requests in between are skipped).
fn answers_to(p: &mut Proc, ids: &[Value]) -> BTreeMap<String, Value> {
    let mut got = BTreeMap::new();
    until(p, "every answer", |m| {
        if let Some(id) = ids.iter().find(|id| answers(m, id)) {
            got.insert(id.to_string(), m.clone());
        }
        got.len() == ids.len()
    });
    got
}

/// Whether `m` is the response to request `id`.
fn answers(m: &Value, id: &Value) -> bool {
    m.get("id") == Some(id) && m.get("method").is_none()
}

fn is_tools_changed(m: &Value) -> bool {
    m["method"] == "notifications/tools/list_changed"
}

fn pid_of(me: &Value) -> i32 {
    let pid = me["pid"].as_i64().unwrap_or_else(|| panic!("no pid: {me}"));
    i32::try_from(pid).expect("a pid")
}

fn error_code(r: &Value) -> i64 {
    r["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {r}"))
}

// === names and routing ===

#[test]
fn every_tool_is_prefixed_with_its_server_and_calls_reach_that_server() {
    let dir = temp_dir("serve-names");
    let config = dir.join("mcp.json");
    write_config(
        &config,
        &[
            Entry::logged("a", &dir, &[]),
            Entry::logged("b", &dir, &[]),
            Entry::logged("c", &dir, &[]),
        ],
    );
    let mut p = serve(&config, &[]);
    let init = initialize_with(&mut p, json!({}));
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    let names = tool_names(&mut p, json!(1));
    let expected: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|s| BUILTIN_TOOLS.iter().map(move |t| format!("{s}__{t}")))
        .collect();
    assert_eq!(
        names.iter().collect::<BTreeSet<_>>(),
        expected.iter().collect::<BTreeSet<_>>(),
        "{names:?}"
    );
    assert_eq!(
        names.len(),
        expected.len(),
        "a name listed twice: {names:?}"
    );

    // The call reaches a under the tool's own name: the fake worker does not
    // know `a__echo`, so an echo of the arguments proves the name was mapped.
    let r = p.call(json!(2), "a__echo", json!({"to": "a"}));
    assert_eq!(Proc::tool_json(&r), json!({"to": "a"}), "{r}");
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert!(
        received(&dir, "a").contains("tools/call "),
        "{}",
        received(&dir, "a")
    );
    for other in ["b", "c"] {
        let log = received(&dir, other);
        assert!(!log.contains("tools/call"), "{other} got a's call: {log}");
    }
    // Each server is its own process.
    let pids: BTreeSet<i32> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let r = p.call(json!(10 + i), &format!("{s}__whoami"), json!({}));
            pid_of(&Proc::tool_json(&r))
        })
        .collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}

#[test]
fn a_single_server_is_prefixed_too() {
    let (_dir, _config, mut p) = gateway("serve-one", &[Entry::fake("solo", &[])], &[]);
    initialize_with(&mut p, json!({}));
    let names = tool_names(&mut p, json!(1));
    let expected: Vec<String> = BUILTIN_TOOLS.iter().map(|t| format!("solo__{t}")).collect();
    assert_eq!(names, expected);
    let r = p.call(json!(2), "solo__echo", json!({"n": 1}));
    assert_eq!(Proc::tool_json(&r), json!({"n": 1}), "{r}");
    let r = p.call(json!(3), "echo", json!({}));
    assert!(
        r.get("error").is_some(),
        "an unprefixed name was routed: {r}"
    );
}

// === supervision behind the gateway ===

#[test]
fn a_crash_mid_call_fails_only_that_call_and_the_server_restarts() {
    let (_dir, _config, mut p) = gateway(
        "serve-crash",
        &[
            Entry::fake("a", &[]),
            Entry::fake("b", &[]),
            Entry::fake("c", &[]),
        ],
        &[],
    );
    initialize_with(&mut p, json!({}));
    let first = Proc::tool_json(&p.call(json!("who-1"), "a__whoami", json!({})));
    // The doomed call is known to be running in a's worker once its first
    // progress arrives; b's call runs meanwhile.
    p.send(json!({"jsonrpc":"2.0","id":"doomed","method":"tools/call","params":{
        "name":"a__sleep","arguments":{"ms":30000,"progress_ms":50},"_meta":{"progressToken":"doomed-progress"}}}));
    p.send_call(json!("other"), "b__sleep", json!({"ms": 1500}));
    until(&mut p, "progress of the doomed call", |m| {
        m["method"] == "notifications/progress" && m["params"]["progressToken"] == "doomed-progress"
    });
    signal(pid_of(&first), 9);
    let mut doomed = None;
    let mut other = None;
    until(&mut p, "answers to both calls", |m| {
        if answers(m, &json!("doomed")) {
            doomed = Some(m.clone());
        }
        if answers(m, &json!("other")) {
            other = Some(m.clone());
        }
        doomed.is_some() && other.is_some()
    });
    let (doomed, other) = (doomed.expect("doomed"), other.expect("other"));
    assert_eq!(error_code(&doomed), WORKER_LOST, "{doomed}");
    assert_eq!(Proc::tool_json(&other), "slept 1500 ms", "{other}");
    // The next call to a is served by a new worker.
    let second = Proc::tool_json(&p.call(json!("who-2"), "a__whoami", json!({})));
    assert_ne!(second["pid"], first["pid"], "{second}");
    assert_eq!(second["generation"], 2, "{second}");
    let r = p.call(json!("after"), "a__echo", json!({"ok": true}));
    assert_eq!(Proc::tool_json(&r), json!({"ok": true}), "{r}");
}

#[test]
fn a_call_sent_just_after_a_server_was_killed_is_served_by_its_next_worker() {
    // The server runs under a shell that holds its pipes a second longer:
    // a call written after the server died lies unread in its stdin.
    let script = format!("'{}'; sleep 1", fake_worker().display());
    let (_dir, _config, mut p) = gateway("serve-killed", &[Entry::sh("a", &script)], &[]);
    initialize_with(&mut p, json!({}));
    let first = Proc::tool_json(&p.call(json!("who-1"), "a__whoami", json!({})));
    let pid = pid_of(&first);
    signal(pid, 9);
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let deadline = Instant::now() + WAIT;
    while proc_dir.exists() {
        assert!(Instant::now() < deadline, "{pid} never reaped");
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = p.call(json!("who-2"), "a__whoami", json!({}));
    assert!(r.get("result").is_some(), "not failed: {r}");
    let second = Proc::tool_json(&r);
    assert_eq!(second["generation"], 2, "{second}");
}

#[test]
fn a_server_killed_from_outside_while_it_serves_is_restarted_at_once_every_time() {
    // Two quick exits in a row would be a crash loop here; a server that
    // was ready and serving when it was killed is not crash-looping.
    let (_dir, _config, mut p) = gateway(
        "serve-oom",
        &[Entry::fake("a", &[])],
        &["--crash-loop-exits", "2"],
    );
    initialize_with(&mut p, json!({}));
    let mut me = Proc::tool_json(&p.call(json!("who-0"), "a__whoami", json!({})));
    for round in 1..=3 {
        let echoed = p.call(
            json!(format!("echo-{round}")),
            "a__echo",
            json!({"round": round}),
        );
        assert_eq!(
            Proc::tool_json(&echoed),
            json!({"round": round}),
            "{echoed}"
        );
        std::thread::sleep(Duration::from_millis(1200));
        signal(pid_of(&me), 9);
        let started = Instant::now();
        let r = p.call(json!(format!("who-{round}")), "a__whoami", json!({}));
        assert!(r.get("result").is_some(), "round {round}: {r}");
        let next = Proc::tool_json(&r);
        assert_eq!(next["generation"], round + 1, "round {round}: {next}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "round {round}: answered after {:?}",
            started.elapsed()
        );
        me = next;
    }
}

#[test]
fn every_log_line_about_a_server_and_its_own_stderr_name_it() {
    let worker = fake_worker().display().to_string();
    let (_dir, _config, mut p) = gateway(
        "serve-names",
        &[
            Entry::sh(
                "alpha",
                &format!("echo 'API_KEY missing' >&2; exec '{worker}'"),
            ),
            Entry::sh(
                "beta",
                &format!("echo 'running on stdio' >&2; exec '{worker}'"),
            ),
            Entry {
                name: "gamma",
                command: "mcpvisor-no-such-server".into(),
                args: Vec::new(),
            },
        ],
        &[],
    );
    initialize_with(&mut p, json!({}));
    for (id, tool) in [("a", "alpha__echo"), ("b", "beta__echo")] {
        let r = p.call(json!(id), tool, json!({"x": 1}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let deadline = Instant::now() + WAIT;
    let passed_through = ["[alpha] API_KEY missing", "[beta] running on stdio"];
    while !passed_through.iter().all(|l| p.stderr_text().contains(l)) {
        assert!(Instant::now() < deadline, "{}", p.stderr_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = p.stderr_text();
    assert!(text.contains("cannot start the MCP server"), "{text}");
    for line in text.lines() {
        if line.contains("API_KEY missing") {
            assert!(line.starts_with("[alpha] "), "{line}");
        }
        if line.contains("running on stdio") {
            assert!(line.starts_with("[beta] "), "{line}");
        }
    }
    // Each line of a backend's session names its server.
    let about =
        |needle: &str| -> Vec<&str> { text.lines().filter(|l| l.contains(needle)).collect() };
    let started = about("started worker");
    assert!(started.len() >= 2, "{text}");
    for line in &started {
        assert!(
            line.contains("server{name=alpha}") || line.contains("server{name=beta}"),
            "{line}"
        );
    }
    for line in about("cannot start the MCP server") {
        assert!(line.contains("server{name=gamma}"), "{line}");
    }
}

#[test]
fn servers_writing_to_stderr_at_once_leave_the_gateway_few_threads() {
    // Every server's passed-through stderr goes out through one writer
    // thread: a tokio handle per server writing would take a thread of the
    // blocking pool each (kept for seconds after), sixteen here.
    const NAMES: [&str; 16] = [
        "s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10", "s11", "s12", "s13",
        "s14", "s15", "s16",
    ];
    let entries: Vec<Entry> = NAMES
        .iter()
        .map(|name| Entry::fake(name, &["--stderr-at-start", "65536"]))
        .collect();
    let (_dir, _config, mut p) = gateway("serve-stderr-threads", &entries, &["--no-watch"]);
    initialize_with(&mut p, json!({}));
    let tools = tool_names(&mut p, json!(1));
    for name in NAMES {
        assert!(tools.contains(&format!("{name}__echo")), "{tools:?}");
    }
    let deadline = Instant::now() + WAIT;
    while !NAMES
        .iter()
        .all(|name| p.stderr_text().contains(&format!("[{name}] ")))
    {
        assert!(Instant::now() < deadline, "{}", p.stderr_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let threads = std::fs::read_dir(format!("/proc/{}/task", p.pid()))
        .expect("the gateway's threads")
        .count();
    assert!(threads <= 6, "{threads} threads");
}

#[test]
fn a_server_that_starts_crash_looping_later_fails_its_calls_not_the_others() {
    // Its first start succeeds; every later one exits at once.
    let dir = temp_dir("serve-late-loop");
    let marker = dir.join("started-once");
    let script = format!(
        "if [ -e '{m}' ]; then exit 3; fi; : > '{m}'; exec '{w}'",
        m = marker.display(),
        w = fake_worker().display()
    );
    let config = dir.join("mcp.json");
    write_config(&config, &[Entry::fake("a", &[]), Entry::sh("b", &script)]);
    let mut p = serve(
        &config,
        &["--crash-loop-exits", "2", "--list-timeout", "2s"],
    );
    initialize_with(&mut p, json!({}));
    assert!(tool_names(&mut p, json!(1)).contains(&"b__echo".to_owned()));
    let r = p.call(json!("boom"), "b__crash", json!({}));
    assert_eq!(error_code(&r), WORKER_LOST, "{r}");
    // Every later call to b fails, at once or after a bounded wait, with a
    // "not started" error: it never reached a worker.
    for i in 0..3 {
        let start = Instant::now();
        let r = p.call(json!(format!("b-{i}")), "b__echo", json!({}));
        let took = start.elapsed();
        // Either its crash report, or (tools withdrawn) an unknown tool.
        match error_code(&r) {
            NOT_STARTED => assert!(
                r["error"]["data"]["reason"]
                    .as_str()
                    .is_some_and(|why| why.contains("crash-looping")),
                "no crash report: {r}"
            ),
            mcpvisor_jsonrpc::INVALID_PARAMS => {}
            _ => panic!("call {i} to the failing server: {r}"),
        }
        assert!(took < WAIT, "call {i} took {took:?}");
        let r = p.call(json!(format!("a-{i}")), "a__echo", json!({"i": i}));
        assert_eq!(Proc::tool_json(&r), json!({"i": i}), "{r}");
    }
}

#[test]
fn a_call_to_a_failing_server_s_tool_gets_its_report_not_unknown_tool() {
    // It never starts: its tools were never listed, and are withdrawn. A
    // client that holds a name under its prefix is told why.
    let config = temp_dir("serve-failing-name").join("mcp.json");
    write_config(
        &config,
        &[
            Entry::fake("a", &[]),
            Entry::sh("needs-key", "echo boom >&2; exit 3"),
        ],
    );
    let mut p = serve(&config, &["--crash-loop-exits", "2"]);
    initialize_with(&mut p, json!({}));
    p.wait_stderr("its tools are withdrawn");
    let r = p.call(json!(1), "needs-key__read_graph", json!({}));
    assert_eq!(error_code(&r), NOT_STARTED, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`needs-key`"), "{r}");
    assert!(r["error"]["data"]["reason"].is_string(), "{r}");
    // A name under no server's prefix is still unknown.
    let r = p.call(json!(2), "nobody__read_graph", json!({}));
    assert_eq!(error_code(&r), mcpvisor_jsonrpc::INVALID_PARAMS, "{r}");
    let r = p.call(json!(3), "a__echo", json!({"ok": 1}));
    assert_eq!(Proc::tool_json(&r), json!({"ok": 1}), "{r}");
}

#[test]
fn five_hundred_concurrent_calls_beside_a_crash_looping_server() {
    const CALLS: usize = 500;
    const DOOMED: usize = 50;
    let (_dir, _config, mut p) = gateway(
        "serve-500",
        &[
            Entry::fake("a", &[]),
            Entry::fake("b", &["--exit-on-initialize", "3"]),
        ],
        // The client's own bound must not refuse any of them.
        &["--max-in-flight", "1000", "--list-timeout", "2s"],
    );
    initialize_with(&mut p, json!({}));
    for i in 0..CALLS {
        p.send_call(json!(i), "a__echo", json!({"i": i}));
        if i % (CALLS / DOOMED) == 0 {
            p.send_call(json!(format!("b-{i}")), "b__echo", json!({"i": i}));
        }
    }
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    let deadline = Instant::now() + WAIT * 3;
    while seen.len() < CALLS + DOOMED {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = p.recv_within(left).unwrap_or_else(|| {
            panic!(
                "{} of {} answers; stderr:\n{}",
                seen.len(),
                CALLS + DOOMED,
                p.stderr_text()
            )
        });
        if m.get("method").is_some() {
            continue;
        }
        let key = m["id"].to_string();
        assert!(
            seen.insert(key.clone(), m).is_none(),
            "{key} answered twice"
        );
    }
    for i in 0..CALLS {
        let r = &seen[&json!(i).to_string()];
        assert_eq!(Proc::tool_json(r), json!({"i": i}), "{r}");
    }
    let doomed: Vec<&Value> = seen
        .iter()
        .filter(|(k, _)| k.starts_with("\"b-"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(doomed.len(), DOOMED);
    assert!(
        doomed.iter().all(|r| r.get("error").is_some()),
        "{doomed:?}"
    );
    // Nothing more comes: every request had exactly one answer.
    let r = p.request(json!("last"), "ping", json!({}));
    assert_eq!(r["result"], json!({}));
}

// === list changes ===

#[test]
fn a_server_list_change_is_told_once_and_its_new_tool_is_callable() {
    let dir = temp_dir("serve-list-changed");
    let tools = dir.join("tools.txt");
    std::fs::write(&tools, "alpha\n").expect("tools file");
    let tools_arg = tools.display().to_string();
    let config = dir.join("mcp.json");
    write_config(
        &config,
        &[
            Entry::fake("a", &["--tools-file", &tools_arg]),
            Entry::fake("b", &[]),
        ],
    );
    // Not pinned: under the default policy the new tool would be held
    // back until approved (pin_e2e.rs).
    let mut p = serve(&config, &["--pin", "off"]);
    initialize_with(&mut p, json!({}));
    let before = tool_names(&mut p, json!(1));
    assert!(before.contains(&"a__alpha".to_owned()), "{before:?}");
    assert!(!before.contains(&"a__newtool".to_owned()), "{before:?}");

    let mut text = std::fs::read_to_string(&tools).expect("read tools");
    text.push_str("newtool\n");
    std::fs::write(&tools, text).expect("append a tool");
    p.send_call(json!("lc"), "a__list_changed", json!({}));
    let mut seen = until(&mut p, "the list change", is_tools_changed);
    // After the change: the list, a call of the new tool, and one more
    // round trip to a; a second notification would have come before these.
    // Every message is kept, to count the notifications.
    p.send(json!({"jsonrpc":"2.0","id":"list","method":"tools/list","params":{}}));
    seen.extend(until(&mut p, "the new list", |m| {
        answers(m, &json!("list"))
    }));
    p.send_call(json!("new"), "a__newtool", json!({"fresh": 1}));
    seen.extend(until(&mut p, "the new tool's answer", |m| {
        answers(m, &json!("new"))
    }));
    p.send_call(json!("flush"), "a__echo", json!({}));
    seen.extend(until(&mut p, "a last answer", |m| {
        answers(m, &json!("flush"))
    }));
    let answer = |id: &str| {
        seen.iter()
            .find(|m| answers(m, &json!(id)))
            .unwrap_or_else(|| panic!("no answer for {id}: {seen:?}"))
    };
    let after: Vec<&str> = answer("list")["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in ["a__newtool", "a__alpha", "b__echo"] {
        assert!(after.contains(&name), "{name}: {after:?}");
    }
    let new = answer("new");
    assert_eq!(Proc::tool_json(new), json!({"fresh": 1}), "{new}");
    assert_eq!(answer("lc")["result"]["isError"], false, "{seen:?}");
    let told = seen.iter().filter(|m| is_tools_changed(m)).count();
    assert_eq!(told, 1, "{seen:?}");
}

#[test]
fn editing_a_server_s_own_script_reloads_that_server_only() {
    let dir = temp_dir("serve-file-watch");
    let script = dir.join("server.sh");
    let log = log_path(&dir, "b");
    let body = format!(
        "exec '{}' --log-file '{}'\n",
        fake_worker().display(),
        log.display()
    );
    std::fs::write(&script, &body).expect("script");
    let config = dir.join("mcp.json");
    let b = Entry {
        name: "b",
        command: "sh".into(),
        args: vec![script.display().to_string()],
    };
    write_config(&config, &[Entry::logged("a", &dir, &[]), b]);
    let mut p = serve(&config, &[]);
    initialize_with(&mut p, json!({}));
    let r = p.call(json!(1), "b__echo", json!({"before": true}));
    assert_eq!(Proc::tool_json(&r), json!({"before": true}), "{r}");
    let initialized = |name: &str| received(&dir, name).matches("initialize ").count();
    assert_eq!(initialized("b"), 1);

    std::fs::write(&script, format!("# edited\n{body}")).expect("edit the script");
    p.wait_stderr("server.sh changed");
    let deadline = Instant::now() + WAIT;
    while initialized("b") < 2 {
        assert!(
            Instant::now() < deadline,
            "b was not restarted: {}",
            received(&dir, "b")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = p.call(json!(2), "b__echo", json!({"after": true}));
    assert_eq!(Proc::tool_json(&r), json!({"after": true}), "{r}");
    // The other server's worker was left alone.
    assert_eq!(initialized("a"), 1, "{}", received(&dir, "a"));
}

#[test]
fn editing_the_config_removes_and_adds_servers_and_leaves_the_rest_alone() {
    let (_dir, config, mut p) = gateway(
        "serve-config-edit",
        &[
            Entry::fake("a", &[]),
            Entry::fake("b", &[]),
            Entry::fake("c", &[]),
        ],
        &[],
    );
    initialize_with(&mut p, json!({}));
    let names = tool_names(&mut p, json!(1));
    assert!(names.contains(&"b__echo".to_owned()), "{names:?}");
    let a_before = Proc::tool_json(&p.call(json!("a-1"), "a__whoami", json!({})));
    let b = Proc::tool_json(&p.call(json!("b-1"), "b__whoami", json!({})));

    write_config(
        &config,
        &[
            Entry::fake("a", &[]),
            Entry::fake("c", &[]),
            Entry::fake("d", &[]),
        ],
    );
    until(&mut p, "a list change after the edit", is_tools_changed);
    let names = tool_names(&mut p, json!(2));
    assert!(
        !names.iter().any(|n| n.starts_with("b__")),
        "b's tools are still listed: {names:?}"
    );
    for server in ["a", "c", "d"] {
        assert!(
            names.contains(&format!("{server}__echo")),
            "{server}: {names:?}"
        );
    }
    let r = p.call(json!("d-1"), "d__echo", json!({"d": 1}));
    assert_eq!(Proc::tool_json(&r), json!({"d": 1}), "{r}");
    let r = p.call(json!("b-2"), "b__echo", json!({}));
    assert!(r.get("error").is_some(), "a removed server answered: {r}");
    assert!(
        wait_gone(pid_of(&b), WAIT),
        "b's worker outlived its removal"
    );
    let a_after = Proc::tool_json(&p.call(json!("a-2"), "a__whoami", json!({})));
    assert_eq!(
        a_after["pid"], a_before["pid"],
        "an unchanged server was restarted"
    );
}

// === server-to-client requests ===

#[test]
fn server_requests_reach_a_capable_client_under_new_ids_and_come_back() {
    let dir = temp_dir("serve-asks");
    let config = dir.join("mcp.json");
    write_config(
        &config,
        &[Entry::logged("a", &dir, &[]), Entry::logged("b", &dir, &[])],
    );
    let mut p = serve(&config, &[]);
    initialize_with(
        &mut p,
        json!({"sampling": {}, "roots": {"listChanged": true}, "elicitation": {}}),
    );
    // Both workers ask under their own first id (0): the client must see two
    // different ids, and each answer must reach the server that asked.
    for server in ["a", "b"] {
        let params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": format!("from {server}")}}],
            "maxTokens": 5,
        });
        p.send_call(
            json!(format!("ask-{server}")),
            &format!("{server}__ask"),
            json!({"method": "sampling/createMessage", "params": params}),
        );
    }
    let mut asks = Vec::new();
    until(&mut p, "two sampling requests", |m| {
        if m["method"] == "sampling/createMessage" {
            asks.push(m.clone());
        }
        asks.len() == 2
    });
    assert_ne!(asks[0]["id"], asks[1]["id"], "{asks:?}");
    for ask in &asks {
        assert_ne!(ask["id"], json!(0), "the worker's own id leaked: {ask}");
        let from = ask["params"]["messages"][0]["content"]["text"]
            .as_str()
            .expect("the worker's params, intact")
            .to_owned();
        p.send(json!({"jsonrpc":"2.0","id":ask["id"],"result":{
            "role":"assistant","content":{"type":"text","text":format!("answer to {from}")},"model":"m"}}));
    }
    let mut answered = answers_to(&mut p, &[json!("ask-a"), json!("ask-b")]);
    for server in ["a", "b"] {
        let r = answered
            .remove(&json!(format!("ask-{server}")).to_string())
            .expect("answered");
        assert_eq!(r["result"]["isError"], false, "{r}");
        let answer = Proc::tool_json(&r);
        assert_eq!(
            answer["content"]["text"],
            format!("answer to from {server}"),
            "{r}"
        );
        // The answer reached the worker under the id it asked with.
        let log = received(&dir, server);
        assert!(log.lines().any(|l| l == "response 0"), "{server}: {log}");
    }
    // roots/list likewise.
    p.send_call(json!("roots"), "a__ask", json!({"method": "roots/list"}));
    let ask = until(&mut p, "a roots request", |m| m["method"] == "roots/list")
        .pop()
        .expect("the request");
    p.send(
        json!({"jsonrpc":"2.0","id":ask["id"],"result":{"roots":[{"uri":"file:///serve-e2e"}]}}),
    );
    let r = p.response(&json!("roots"));
    assert_eq!(
        Proc::tool_json(&r)["roots"][0]["uri"],
        "file:///serve-e2e",
        "{r}"
    );
}

/// Sends `server__ask` a sampling request and returns the request as the
/// client receives it.
fn sampling_asked(p: &mut Proc, id: &str, server: &str) -> Value {
    p.send_call(
        json!(id),
        &format!("{server}__ask"),
        json!({"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}}),
    );
    until(p, "a sampling request", |m| {
        m["method"] == "sampling/createMessage"
    })
    .pop()
    .expect("the request")
}

/// Waits for the answer to `call` and for the notice that withdraws the
/// client's pending request `asked`; returns the answer.
fn call_failed_and_request_withdrawn(p: &mut Proc, call: &str, asked: &Value) -> Value {
    let mut answer = None;
    let mut withdrawn = false;
    let seen = until(p, "the failed call and the withdrawn request", |m| {
        if answers(m, &json!(call)) {
            answer = Some(m.clone());
        }
        if m["method"] == "notifications/cancelled" && m["params"]["requestId"] == asked["id"] {
            withdrawn = true;
        }
        answer.is_some() && withdrawn
    });
    let answer = answer.expect("answered");
    assert_eq!(error_code(&answer), WORKER_LOST, "{seen:?}");
    answer
}

#[test]
fn a_server_s_request_to_the_client_is_withdrawn_when_the_server_dies_or_is_removed() {
    let (_dir, config, mut p) = gateway(
        "serve-withdrawn",
        &[Entry::fake("a", &[]), Entry::fake("b", &[])],
        &[],
    );
    initialize_with(&mut p, json!({"sampling": {}}));
    // a's worker dies while its request waits on the client.
    let a = Proc::tool_json(&p.call(json!("who"), "a__whoami", json!({})));
    let asked = sampling_asked(&mut p, "ask-a", "a");
    signal(pid_of(&a), 9);
    call_failed_and_request_withdrawn(&mut p, "ask-a", &asked);
    // A late answer to the withdrawn request harms nothing.
    p.send(json!({"jsonrpc":"2.0","id":asked["id"],"result":{"role":"assistant","content":{"type":"text","text":"late"},"model":"m"}}));
    let r = p.call(json!("a-again"), "a__echo", json!({"a": 2}));
    assert_eq!(Proc::tool_json(&r), json!({"a": 2}), "{r}");

    // b is removed from the config while its request waits on the client.
    let asked = sampling_asked(&mut p, "ask-b", "b");
    write_config(&config, &[Entry::fake("a", &[])]);
    call_failed_and_request_withdrawn(&mut p, "ask-b", &asked);
    let r = p.call(json!("a-last"), "a__echo", json!({"a": 3}));
    assert_eq!(Proc::tool_json(&r), json!({"a": 3}), "{r}");
}

/// A server that asks for roots as soon as it is initialized, as
/// server-filesystem does, and asks again on `roots/list_changed`. It tells
/// what it gets back in a log message, and lists its (no) tools only after
/// asking, so the gateway has seen the request before it has read the list.
const EAGER_ASKER: &str = r#"
id_of() { printf '%s\n' "$1" | sed -n 's/.*"id": *\([0-9][0-9]*\).*/\1/p'; }
IFS= read -r line
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"asker","version":"0"}}}\n' "$(id_of "$line")"
IFS= read -r line
printf '{"jsonrpc":"2.0","id":"roots-1","method":"roots/list"}\n'
printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"asked"}}\n'
n=1
while IFS= read -r line; do
  case "$line" in
    *tools/list*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}\n' "$(id_of "$line")" ;;
    *'"ping"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$(id_of "$line")" ;;
    *'notifications/roots/list_changed'*) n=$((n+1)); printf '{"jsonrpc":"2.0","id":"roots-%s","method":"roots/list"}\n' "$n" ;;
    *'"result"'*) printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%s}}\n' "$line" ;;
  esac
done
"#;

#[test]
fn a_server_request_made_before_the_client_is_initialized_reaches_it_afterwards() {
    let (_dir, _config, mut p) =
        gateway("serve-early-ask", &[Entry::sh("early", EAGER_ASKER)], &[]);
    // The server asks as soon as the gateway has initialized it, and lists
    // its tools only after asking; the client's initialize is answered once
    // that list is read, so the request has arrived before the client even
    // has its answer. (The server's log line about it comes before the
    // client initialized, and is not the client's to see.)
    p.send(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true}},
        "clientInfo":{"name":"serve-e2e","version":"1"}}}),
    );
    let before = until(&mut p, "the initialize answer", |m| answers(m, &json!(0)));
    assert!(
        !before.iter().any(|m| m["method"] == "roots/list"),
        "a request reached the client before its initialize was answered: {before:?}"
    );
    assert!(
        before.last().expect("answer").get("result").is_some(),
        "{before:?}"
    );
    p.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    // Held until now, or declined and asked again after a roots change:
    // either way the client is asked, and its answer reaches the server.
    let ask = until(&mut p, "the roots request", |m| m["method"] == "roots/list")
        .pop()
        .expect("the request");
    p.send(json!({"jsonrpc":"2.0","id":ask["id"],"result":{"roots":[{"uri":"file:///early"}]}}));
    let got = until(&mut p, "the server's report of the answer", |m| {
        m["method"] == "notifications/message" && m["params"]["data"].is_object()
    })
    .pop()
    .expect("the report");
    assert_eq!(
        got["params"]["data"]["result"]["roots"][0]["uri"], "file:///early",
        "{got}"
    );
}

#[test]
fn a_server_request_the_client_cannot_take_is_declined_with_its_capability() {
    let (_dir, _config, mut p) = gateway("serve-decline", &[Entry::fake("a", &[])], &[]);
    initialize_with(&mut p, json!({"roots": {}}));
    p.send_call(
        json!("ask"),
        "a__ask",
        json!({"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}}),
    );
    let seen = until(&mut p, "the call's answer", |m| answers(m, &json!("ask")));
    assert!(
        !seen.iter().any(|m| m["method"] == "sampling/createMessage"),
        "the request reached a client without sampling: {seen:?}"
    );
    let r = seen.last().expect("the answer");
    // `ask` returns whatever came back: here an error object.
    let answer = Proc::tool_json(r);
    let message = answer["message"].as_str().unwrap_or_default();
    assert_eq!(answer["code"], -32021, "not the capability error: {r}");
    assert!(message.contains("sampling"), "{r}");
    assert_eq!(
        answer["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{r}"
    );
}

#[test]
fn a_2026_07_28_completion_with_nothing_to_complete_has_its_result_type() {
    let (_dir, _config, mut p) = gateway("serve-complete-modern", &[Entry::fake("a", &[])], &[]);
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    p.send(
        json!({"jsonrpc":"2.0","id":"c","method":"completion/complete","params":{
        "ref":{"type":"ref/prompt","name":"no_such_prompt"},
        "argument":{"name":"x","value":""},"_meta":meta}}),
    );
    let r = until(&mut p, "the completion", |m| answers(m, &json!("c")))
        .pop()
        .expect("the answer");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["completion"]["values"], json!([]), "{r}");
}

// === progress and cancellation ===

#[test]
fn progress_keeps_the_client_token_and_a_cancelled_call_gets_no_answer() {
    let (_dir, _config, mut p) = gateway(
        "serve-progress",
        &[Entry::fake("a", &[]), Entry::fake("b", &[])],
        &[],
    );
    initialize_with(&mut p, json!({}));
    // Two calls on two servers at once, each with the client's own token.
    for (id, server, token) in [(1, "a", "tok-1"), (2, "b", "tok-2")] {
        p.send(
            json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "name":format!("{server}__sleep"),"arguments":{"ms":500,"progress_ms":100},
            "_meta":{"progressToken":token}}}),
        );
    }
    let mut done = 0;
    let seen = until(&mut p, "both answers", |m| {
        if answers(m, &json!(1)) || answers(m, &json!(2)) {
            done += 1;
        }
        done == 2
    });
    for (id, token) in [(1, "tok-1"), (2, "tok-2")] {
        let progress: Vec<&Value> = seen
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .filter(|m| m["params"]["progressToken"] == token)
            .collect();
        let steps: Vec<i64> = progress
            .iter()
            .map(|m| m["params"]["progress"].as_i64().expect("progress"))
            .collect();
        assert_eq!(steps, [1, 2, 3, 4], "{token}: {seen:?}");
        let answer = seen
            .iter()
            .find(|m| answers(m, &json!(id)))
            .expect("answer");
        let last = seen
            .iter()
            .rposition(|m| m["params"]["progressToken"] == token)
            .expect("progress");
        let at = seen
            .iter()
            .position(|m| answers(m, &json!(id)))
            .expect("answer");
        assert!(last < at, "progress for {token} after its answer");
        assert_eq!(Proc::tool_json(answer), "slept 500 ms", "{answer}");
    }
    assert!(
        seen.iter()
            .filter(|m| m["method"] == "notifications/progress")
            .all(|m| m["params"]["progressToken"] == "tok-1"
                || m["params"]["progressToken"] == "tok-2"),
        "a rewritten token leaked: {seen:?}"
    );

    // Cancel after the first progress: no answer ever comes for it. The
    // worker ignores the cancel and would answer at 1500 ms; a call sent
    // after the cancel, to the same worker, answers later than that.
    p.send(
        json!({"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{
        "name":"a__sleep","arguments":{"ms":1500,"progress_ms":100},
        "_meta":{"progressToken":"tok-c"}}}),
    );
    until(&mut p, "progress of the call to cancel", |m| {
        m["params"]["progressToken"] == "tok-c"
    });
    p.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c1","reason":"test"}}));
    p.send_call(json!("after"), "a__sleep", json!({"ms": 1700}));
    let seen = until(&mut p, "the later call's answer", |m| {
        answers(m, &json!("after"))
    });
    assert!(
        !seen.iter().any(|m| answers(m, &json!("c1"))),
        "the cancelled call was answered: {seen:?}"
    );
    let r = p.call(json!("still"), "a__echo", json!({}));
    assert!(r.get("result").is_some(), "{r}");
}

// === tool search ===

#[test]
fn tool_search_offers_two_tools_and_calls_any_tool_through_them() {
    let (_dir, _config, mut p) = gateway(
        "serve-search",
        &[Entry::fake("a", &[]), Entry::fake("b", &[])],
        &["--tool-search"],
    );
    initialize_with(&mut p, json!({}));
    assert_eq!(
        tool_names(&mut p, json!(1)),
        ["mcpvisor__search_tools", "mcpvisor__call_tool"]
    );
    let r = p.call(
        json!(2),
        "mcpvisor__call_tool",
        json!({"name": "a__echo", "arguments": {"via": "search"}}),
    );
    assert_eq!(Proc::tool_json(&r), json!({"via": "search"}), "{r}");
    let r = p.call(
        json!(3),
        "mcpvisor__search_tools",
        json!({"query": "returns its arguments as compact JSON"}),
    );
    let found = Proc::tool_json(&r);
    let hits: Vec<&str> = found["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(hits.contains(&"a__echo"), "{hits:?}");
}

// === the command line ===

#[test]
fn inspect_shows_the_gateway_s_prefixed_tools() {
    let dir = temp_dir("serve-inspect");
    let config = dir.join("mcp.json");
    write_config(&config, &[Entry::fake("a", &[]), Entry::fake("b", &[])]);
    let args: Vec<String> = vec![
        "inspect".into(),
        "--json".into(),
        "--".into(),
        mcpvisor().display().to_string(),
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    let mut p = Proc::spawn(&args);
    p.close_stdin();
    let status = p.wait_exit(WAIT);
    assert!(status.success(), "{status:?}; stderr:\n{}", p.stderr_text());
    let out = p.stdout_to_end(WAIT).join("\n");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let names: BTreeSet<&str> = report["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    let expected: Vec<String> = ["a", "b"]
        .iter()
        .flat_map(|s| BUILTIN_TOOLS.iter().map(move |t| format!("{s}__{t}")))
        .collect();
    assert_eq!(
        names,
        expected.iter().map(String::as_str).collect(),
        "{report}"
    );

    // The text form lists the same names.
    let mut p = Proc::spawn(&[&args[..1], &args[2..]].concat());
    p.close_stdin();
    let status = p.wait_exit(WAIT);
    assert!(status.success(), "{status:?}; stderr:\n{}", p.stderr_text());
    let out = p.stdout_to_end(WAIT);
    assert!(out.iter().any(|l| l.starts_with("tools (24)")), "{out:#?}");
    for name in &expected {
        assert!(
            out.iter()
                .any(|l| l.trim_start().starts_with(&format!("{name} "))),
            "{name} missing: {out:#?}"
        );
    }
}

#[test]
fn a_server_named_mcpvisor_is_refused_before_anything_starts() {
    let dir = temp_dir("serve-reserved");
    let config = dir.join("mcp.json");
    write_config(
        &config,
        &[
            Entry::logged("a", &dir, &[]),
            Entry::logged("mcpvisor", &dir, &[]),
        ],
    );
    let mut p = serve(&config, &[]);
    let status = p.wait_exit(WAIT);
    assert_eq!(status.code(), Some(2), "{status:?}");
    let stderr = p.stderr_to_end(WAIT);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("\"mcpvisor\""), "{stderr}");
    assert!(lines[0].contains("mcp.json"), "{stderr}");
    assert_eq!(
        p.stdout_to_end(WAIT),
        Vec::<String>::new(),
        "wrote to stdout"
    );
    for name in ["a", "mcpvisor"] {
        assert!(!log_path(&dir, name).exists(), "server {name} was started");
    }
}

#[test]
fn a_server_waiting_for_authorization_answers_with_its_link_and_joins_once_authorized() {
    let link = "https://auth.example.com/authorize?client_id=gw&state=1";
    let bridge = Entry::sh(
        "remote",
        &format!(
            "echo '[7] Please authorize this client by visiting:' >&2; echo '[7] {link}' >&2; exec {} --initialize-delay 2500",
            fake_worker().display()
        ),
    );
    let (_dir, _config, mut p) = gateway(
        "serve-auth",
        &[bridge, Entry::fake("local", &[])],
        &[
            "--list-timeout",
            "2s",
            "--init-timeout",
            "500ms",
            "--auth-timeout",
            "30s",
        ],
    );
    initialize_with(&mut p, json!({}));
    // The server waiting on a person delays nothing: the other one is listed.
    let names = tool_names(&mut p, json!("list"));
    assert!(names.iter().any(|n| n == "local__echo"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("remote__")),
        "{names:?}"
    );
    // A call to it is refused at once with the link in the message itself.
    let r = p.request(
        json!("early"),
        "tools/call",
        json!({"name": "remote__echo", "arguments": {}}),
    );
    assert_eq!(error_code(&r), NOT_STARTED, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(link), "{r}");
    assert_eq!(r["error"]["data"]["authorization_url"], link, "{r}");
    // Once its initialize completes, its tools arrive with one list change.
    until(
        &mut p,
        "the list change after authorization",
        is_tools_changed,
    );
    let names = tool_names(&mut p, json!("relist"));
    assert!(names.iter().any(|n| n == "remote__echo"), "{names:?}");
    let r = p.request(
        json!("after"),
        "tools/call",
        json!({"name": "remote__echo", "arguments": {"text": "hi"}}),
    );
    assert!(r.get("result").is_some(), "{r}");
}

#[test]
fn a_lazy_server_is_listed_from_the_cache_and_started_by_its_first_call() {
    let dir = temp_dir("serve-lazy");
    let cache = dir.join("cache");
    let config = dir.join("mcp.json");
    let log = log_path(&dir, "lazy");
    let text = json!({"mcpServers": {"lazy": {
        "command": fake_worker().display().to_string(),
        "args": ["--log-file", log.display().to_string()],
        "start": "lazy",
    }}});
    std::fs::write(&config, text.to_string()).expect("config");
    let serve_cached = || {
        Proc::spawn_with_env(
            &[
                "serve".into(),
                "--config".into(),
                config.display().to_string(),
            ],
            &[("MCPVISOR_CACHE_DIR", cache.display().to_string())],
        )
    };
    // First run: no cache entry, so it is started once to read its lists.
    let mut p = serve_cached();
    initialize_with(&mut p, json!({}));
    let first = tool_names(&mut p, json!(1));
    assert!(first.iter().any(|n| n == "lazy__echo"), "{first:?}");
    p.close_stdin();
    p.wait_exit(WAIT);
    std::fs::remove_file(&log).expect("the first run started it");
    // Second run: listed from the cache, nothing started.
    let mut p = serve_cached();
    initialize_with(&mut p, json!({}));
    let second = tool_names(&mut p, json!(1));
    assert_eq!(second, first);
    assert!(!log.exists(), "the lazy server was started just to list it");
    // The first call starts it.
    let r = p.request(
        json!(2),
        "tools/call",
        json!({"name": "lazy__echo", "arguments": {"x": 1}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    assert!(received(&dir, "lazy").contains("tools/call"));
}

#[test]
fn the_client_s_requests_in_flight_are_bounded_and_a_slot_frees_with_its_answer() {
    let (_dir, _config, mut p) = gateway(
        "serve-bound",
        &[Entry::fake("a", &[])],
        &["--max-in-flight", "2"],
    );
    initialize_with(&mut p, json!({}));
    p.start_call(json!("s1"), "a__sleep", json!({"ms": 600_000}));
    p.start_call(json!("s2"), "a__sleep", json!({"ms": 600_000}));
    let r = p.call(json!("third"), "a__echo", json!({"x": 1}));
    assert_eq!(error_code(&r), NOT_STARTED, "{r}");
    // Cancelling one frees its place.
    p.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s1"}}));
    let r = p.call(json!("fourth"), "a__echo", json!({"x": 2}));
    assert_eq!(Proc::tool_json(&r), json!({"x": 2}), "{r}");
}

/// One HTTP/1.1 POST to `serve --http`'s endpoint (a connection of its
/// own); returns the head and the body.
fn http_post(addr: &str, session: Option<&str>, body: &str) -> (String, String) {
    use std::io::{Read, Write};
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(WAIT)).expect("timeout");
    sock.write_all(req.as_bytes()).expect("send");
    let mut got = String::new();
    sock.read_to_string(&mut got).expect("read to the end");
    let (head, body) = got.split_once("\r\n\r\n").unwrap_or((&got, ""));
    (head.to_owned(), body.to_owned())
}

#[test]
fn many_http_sessions_call_one_server_at_once_and_each_gets_its_own_answers() {
    const SESSIONS: usize = 40;
    const CALLS: usize = 5;
    let (_dir, _config, mut p) = gateway(
        "serve-http-many",
        &[Entry::fake("a", &[])],
        &["--http", "127.0.0.1:0"],
    );
    let addr = p.http_address();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let sessions: Vec<String> = (0..SESSIONS)
        .map(|_| {
            let (head, body) = http_post(&addr, None, init);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
            let id = support::session_id(&head).expect("a session id");
            let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            let (head, _) = http_post(&addr, Some(&id), note);
            assert!(head.starts_with("HTTP/1.1 202"), "{head}");
            id
        })
        .collect();
    // Every session calls at once, each with the same request ids.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(SESSIONS));
    let threads: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(n, session)| {
            let addr = addr.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for call in 0..CALLS {
                    let body = json!({"jsonrpc": "2.0", "id": call, "method": "tools/call",
                        "params": {"name": "a__echo", "arguments": {"session": n, "call": call}}});
                    let (head, body) = http_post(&addr, Some(&session), &body.to_string());
                    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
                    let answer: Value = serde_json::from_str(&body).expect("a JSON answer");
                    assert_eq!(answer["id"], call, "{answer}");
                    assert_eq!(
                        Proc::tool_json(&answer),
                        json!({"session": n, "call": call}),
                        "session {n} got another's answer: {answer}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("every call answered with its own echo");
    }
    drop(p);
}

// === the stdio client ===

#[test]
fn the_client_s_oversize_line_is_answered_with_its_id_and_the_gateway_goes_on() {
    let (_dir, _config, mut p) = gateway(
        "serve-oversize",
        &[Entry::fake("s", &[])],
        &["--max-message-bytes", "4096"],
    );
    initialize_with(&mut p, json!({}));
    let big = "x".repeat(10_000);
    p.send_raw(&format!(
        r#"{{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{{"name":"s__echo","arguments":{{"s":"{big}"}}}}}}"#
    ));
    let r = p.response(&json!("big"));
    assert_eq!(error_code(&r), -32600, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-message-bytes"), "{r}");
    // Nothing of it reached the server, and the next call goes through.
    let r = p.call(json!(2), "s__echo", json!({"n": 2}));
    assert_eq!(Proc::tool_json(&r), json!({"n": 2}), "{r}");
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}

#[test]
fn a_call_in_flight_when_the_client_closes_stdin_is_still_answered() {
    let (_dir, _config, mut p) = gateway("serve-drain", &[Entry::fake("s", &[])], &[]);
    initialize_with(&mut p, json!({}));
    p.send_call(json!("slow"), "s__sleep", json!({"ms": 400}));
    p.close_stdin();
    let r = p.response(&json!("slow"));
    assert!(r.get("result").is_some(), "{r}");
    assert!(p.wait_exit(WAIT).success());
}
