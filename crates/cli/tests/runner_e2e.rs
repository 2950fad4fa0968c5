//! `mcpvisor inspect`, `mcpvisor call` and `run --config`, through the real
//! binary, with the fake worker, config files, env files and fake OAuth
//! bridges.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Proc, WAIT, alive, fake_worker, finish, mcpvisor, temp_dir, wait_gone};

fn run(args: &[&str]) -> Output {
    let child = Command::new(mcpvisor())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    finish(child, args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn worker() -> String {
    fake_worker().display().to_string()
}

/// A shell script that runs `body` and then execs the fake worker with `flags`.
fn wrapper(dir: &Path, name: &str, body: &str, flags: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\n{body}\nexec {} {flags}\n", worker()),
    )
    .expect("script");
    Command::new("chmod")
        .arg("+x")
        .arg(&path)
        .status()
        .expect("chmod");
    path.display().to_string()
}

#[test]
fn inspect_lists_everything_following_pagination() {
    let w = worker();
    let out = run(&[
        "inspect",
        "--json",
        "--",
        &w,
        "--all-capabilities",
        "--page-size",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["server"]["name"], "fake-worker");
    assert_eq!(r["protocolVersion"], "2025-06-18");
    let names: Vec<&str> = r["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.len() > 10 && names.contains(&"echo") && names.contains(&"list_changed"),
        "{names:?}"
    );
    let sleep = r["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "sleep")
        .expect("sleep");
    assert_eq!(
        sleep["arguments"][0],
        json!({"name": "ms", "type": "integer", "required": true, "description": "How long to wait"})
    );
    for key in ["prompts", "resources", "resourceTemplates"] {
        assert!(r[key].is_array(), "{key}: {r}");
    }
    assert!(r["startupMs"].as_u64().is_some());
    // The human form names the same things.
    let out = run(&["inspect", "--", &w]);
    let human = text(&out.stdout);
    assert!(
        human.contains("server     fake-worker")
            && human.contains("tools (12):")
            && human.contains("(ms: integer, progress_ms?: integer, tag?: string)"),
        "{human}"
    );
}

#[test]
fn call_unpacks_results_and_exit_codes_say_what_happened() {
    let w = worker();
    let out = run(&["call", "echo", r#"{"b": [1, 2], "a": "x"}"#, "--", &w]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "{\n  \"a\": \"x\",\n  \"b\": [\n    1,\n    2\n  ]\n}\n"
    );
    let out = run(&["call", "no_such_tool", "--", &w]);
    assert_eq!(out.status.code(), Some(1), "a tool error is exit 1");
    assert_eq!(text(&out.stdout), "unknown tool\n");
    let out = run(&["call", "--json", "echo", r#"{"k": 1}"#, "--", &w]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["isError"], false);
    let out = run(&["call", "echo", "[1]", "--", &w]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("must be a JSON object"));
}

#[test]
fn call_shows_progress_on_stderr() {
    let w = worker();
    let out = run(&[
        "call",
        "sleep",
        r#"{"ms": 300, "progress_ms": 100}"#,
        "--",
        &w,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.matches("progress ").count(), 2, "{err}");
}

#[test]
fn crash_reports_name_the_phase_exit_and_stderr() {
    let w = worker();
    // serving
    let out = run(&[
        "call",
        "crash",
        r#"{"code": 7}"#,
        "--",
        &w,
        "--stderr-at-start",
        "40",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("server exited with code 7 during serving"),
        "{err}"
    );
    assert!(err.contains("fake-worker: pid="), "stderr tail: {err}");
    // initialize
    let out = run(&["inspect", "--json", "--", &w, "--exit-on-initialize", "5"]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(v["error"]["crash"]["phase"], "initialize");
    assert_eq!(v["error"]["crash"]["exit"]["code"], 5);
    // killed by a signal
    let out = run(&["call", "kill_self", r#"{"signal": 9}"#, "--", &w]);
    assert!(
        text(&out.stderr).contains("SIGKILL"),
        "{}",
        text(&out.stderr)
    );
    // spawn: the env file lacks a key the config asks for
    let dir = temp_dir("spawn-phase");
    std::fs::write(dir.join(".env"), "OTHER=1\n").expect("env");
    let cfg = dir.join("mcp.json");
    std::fs::write(
        &cfg,
        json!({"mcpServers": {"s": {"command": w, "env_file": ".env", "env_keys": ["API_TOKEN"]}}})
            .to_string(),
    )
    .expect("config");
    let out = run(&[
        "inspect",
        "--json",
        "--config",
        &cfg.display().to_string(),
        "s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(v["error"]["crash"]["phase"], "spawn", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .expect("m")
            .contains("API_TOKEN"),
        "{v}"
    );
}

#[test]
fn a_stray_print_is_counted_in_the_crash_report_and_shown_only_on_request() {
    // The commonest way to break a stdio server: print() to stdout, then die.
    let out = run(&["call", "echo", "--", "sh", "-c", "echo not json; exit 3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("server exited with code 3 during initialize"),
        "{err}"
    );
    assert!(
        err.contains("stdout: 1 line that is not JSON-RPC (8 bytes)"),
        "{err}"
    );
    assert!(!err.contains("not json"), "the content is not shown: {err}");
    // --json counts it too.
    let w = worker();
    let stray = [
        "--stdout-garbage-at-start",
        "not json",
        "--exit-on-initialize",
        "3",
    ];
    let mut args = vec!["inspect", "--json", "--", &w];
    args.extend(stray);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(
        v["error"]["crash"]["stray_stdout"],
        json!({"lines": 1, "bytes": 8}),
        "{v}"
    );
    // --show-stderr shows its head.
    let mut args = vec!["call", "--show-stderr", "echo", "--", &w];
    args.extend(stray);
    let out = run(&args);
    let err = text(&out.stderr);
    assert!(err.contains("(8 bytes), starting:\n    not json"), "{err}");
}

#[test]
fn every_config_format_runs_and_errors_point_at_the_file() {
    let dir = temp_dir("formats");
    let w = worker();
    let files = [
        (
            "claude.json",
            json!({"mcpServers": {"fw": {"command": w, "args": ["--no-list-changed"]}}})
                .to_string(),
        ),
        (
            "vscode.json",
            format!(
                "// VS Code\n{{\"servers\": {{\"fw\": {{\"type\": \"stdio\", \"command\": \"{w}\", \"args\": []}}}}}}"
            ),
        ),
        (
            "config.toml",
            format!("[mcp_servers.fw]\ncommand = \"{w}\"\nargs = []\n"),
        ),
    ];
    for (name, body) in &files {
        let path = dir.join(name);
        std::fs::write(&path, body).expect("write");
        let out = run(&[
            "inspect",
            "--json",
            "--config",
            &path.display().to_string(),
            "fw",
        ]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(v["server"]["name"], "fake-worker", "{name}");
    }
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"mcpServers\": {\"fw\": {\"command\": 5}}}").expect("write");
    let out = run(&["inspect", "--config", &bad.display().to_string(), "fw"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "mcpvisor: {}: server \"fw\": \"command\" must be a string",
            bad.display()
        )
    );
    let out = run(&[
        "inspect",
        "--config",
        &dir.join("claude.json").display().to_string(),
        "nope",
    ]);
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "mcpvisor: {}: no server named \"nope\" (available: fw)",
            dir.join("claude.json").display()
        )
    );
}

#[test]
fn the_tools_filter_hides_and_refuses() {
    let dir = temp_dir("filter");
    let cfg = dir.join("mcp.json");
    std::fs::write(&cfg, json!({"mcpServers": {"fw": {"command": worker(), "tools": {"deny": ["crash", "kill_self"]}}}}).to_string()).expect("config");
    let cfg = cfg.display().to_string();
    let out = run(&["inspect", "--json", "--config", &cfg, "fw"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["toolsHiddenByFilter"], 2);
    assert!(!v["tools"].to_string().contains("\"crash\""));
    let out = run(&["call", "--config", &cfg, "fw", "crash"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not allowed by the config's tools filter"));
}

#[test]
fn secrets_are_read_at_every_spawn_and_never_shown() {
    let dir = temp_dir("secrets");
    let seen = dir.join("seen.log");
    let script = wrapper(
        &dir,
        "server.sh",
        &format!("echo \"$API_TOKEN\" >> {}", seen.display()),
        "",
    );
    std::fs::write(dir.join(".env"), "API_TOKEN=first-s3cret-value\nUNUSED=x\n").expect("env");
    let cfg = dir.join("mcp.json");
    std::fs::write(&cfg, json!({"mcpServers": {"s": {"command": script, "env_file": ".env", "env_keys": ["API_TOKEN"]}}}).to_string()).expect("config");
    let args: Vec<String> = [
        "run",
        "--no-watch",
        "-v",
        "--stderr-in-errors",
        "--config",
        &cfg.display().to_string(),
        "s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn(&args);
    p.initialize();
    std::fs::write(dir.join(".env"), "API_TOKEN=second-s3cret-value\n").expect("env");
    let r = p.call(json!(1), "crash", json!({}));
    assert_eq!(r["error"]["code"], -32010);
    assert_eq!(p.whoami(json!(2))["generation"], 2);
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    let seen = std::fs::read_to_string(&seen).expect("seen");
    assert_eq!(
        seen, "first-s3cret-value\nsecond-s3cret-value\n",
        "the restart read the file again"
    );
    let all = format!("{}{r}", p.stderr_text());
    assert!(!all.contains("s3cret"), "a secret leaked: {all}");
    // A missing key is named, its neighbours' values are not.
    std::fs::write(dir.join(".env"), "OTHER=hidden-s3cret\n").expect("env");
    let out = run(&["inspect", "--config", &cfg.display().to_string(), "s"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("API_TOKEN") && !err.contains("s3cret"),
        "{err}"
    );
}

#[test]
fn an_oauth_link_is_shown_at_once_and_the_long_wait_applies() {
    let dir = temp_dir("oauth");
    let prompt = "echo '[1234] Please authorize this client by visiting:' >&2; echo '[1234] https://auth.example.com/authorize?client_id=abc&state=xyz' >&2";
    let bridge = wrapper(&dir, "bridge.sh", prompt, "--initialize-delay 1500");
    let start = Instant::now();
    let out = run(&[
        "inspect",
        "--init-timeout",
        "500ms",
        "--auth-timeout",
        "20s",
        "--",
        &bridge,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(start.elapsed() >= Duration::from_millis(1500));
    let err = text(&out.stderr);
    assert!(
        err.contains("https://auth.example.com/authorize?client_id=abc&state=xyz"),
        "{err}"
    );
    // Without a prompt the short wait applies.
    let plain = wrapper(&dir, "plain.sh", "true", "--initialize-delay 1500");
    let out = run(&[
        "inspect",
        "--init-timeout",
        "500ms",
        "--auth-timeout",
        "20s",
        "--",
        &plain,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no answer within"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn run_config_supervises_a_configured_server() {
    let dir = temp_dir("run-config");
    let cfg = dir.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[mcp_servers.fw]\ncommand = \"{}\"\nargs = [\"--strict\"]\n",
            worker()
        ),
    )
    .expect("config");
    let args: Vec<String> = ["run", "--config", &cfg.display().to_string(), "fw"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::spawn(&args);
    p.initialize();
    assert_eq!(
        p.call(json!(1), "crash", json!({}))["error"]["code"],
        -32010
    );
    assert_eq!(p.whoami(json!(2))["generation"], 2);
}

/// Finds the grandchild's pid in the worker's stderr (shown with --show-stderr).
fn grandchild_of(err: &str) -> i32 {
    err.lines()
        .find_map(|l| l.strip_prefix("fake-worker: grandchild pid "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no grandchild line in {err}"))
}

#[test]
fn no_process_is_left_behind_after_a_timeout() {
    let w = worker();
    let out = run(&[
        "inspect",
        "--show-stderr",
        "--timeout",
        "1s",
        "--",
        &w,
        "--initialize-delay",
        "30000",
        "--spawn-grandchild",
        "--ignore-sigterm",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("gave up after 1s"), "{err}");
    let pid = grandchild_of(&err);
    assert!(wait_gone(pid, WAIT), "grandchild {pid} left behind");
}

#[test]
fn no_process_is_left_behind_after_ctrl_c() {
    let w = worker();
    let mut child = Command::new(mcpvisor())
        .args([
            "inspect",
            "--show-stderr",
            "--",
            &w,
            "--initialize-delay",
            "30000",
            "--spawn-grandchild",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let pid = loop {
        let line = rx.recv_timeout(WAIT).expect("grandchild line");
        if let Some(p) = line.strip_prefix("fake-worker: grandchild pid ") {
            break p.trim().parse::<i32>().expect("pid");
        }
    };
    assert!(alive(pid));
    support::signal(child.id() as i32, 2);
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "inspect ignored Ctrl-C");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(130));
    assert!(wait_gone(pid, WAIT), "grandchild {pid} left behind");
}

#[test]
fn a_spinner_shows_the_wait_on_a_terminal_only() {
    let w = worker();
    let line = format!(
        "{} inspect -- {w} --initialize-delay 600",
        mcpvisor().display()
    );
    // util-linux `script` gives the command a pseudo-terminal.
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs the command on a terminal");
    let screen = text(&out.stdout);
    assert!(
        screen.contains("starting ") && screen.contains("(0.3s)"),
        "{screen}"
    );
    assert!(screen.contains("tools ("), "the listing follows: {screen}");
    // Without a terminal: no spinner in the output.
    let out = run(&["inspect", "--", &w, "--initialize-delay", "300"]);
    assert!(
        !text(&out.stderr).contains("starting "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn inline_env_is_layered_over_the_env_file() {
    let dir = temp_dir("env-layers");
    let seen = dir.join("seen.log");
    let script = wrapper(
        &dir,
        "server.sh",
        &format!("echo \"$A $B\" >> {}", seen.display()),
        "",
    );
    std::fs::write(dir.join(".env"), "A=from-file\nB=from-file\n").expect("env");
    let cfg = dir.join("mcp.json");
    std::fs::write(
        &cfg,
        json!({"mcpServers": {"s": {"command": script, "env": {"A": "from-entry"}, "env_file": ".env"}}}).to_string(),
    )
    .expect("config");
    let cfg = cfg.display().to_string();
    let out = run(&[
        "call",
        "--env",
        "B=from-flag",
        "--config",
        &cfg,
        "s",
        "echo",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The env file overrides the entry's env; --env overrides both.
    assert_eq!(
        std::fs::read_to_string(&seen).expect("seen"),
        "from-file from-flag\n"
    );
}

/// Where a command's stdout goes when it cannot be written.
#[derive(Debug, Clone, Copy)]
enum BadStdout {
    /// A pipe whose reader is gone before anything is written (`| true`).
    Closed,
    /// `/dev/full`: every write fails with "no space left on device".
    Full,
}

fn run_with_stdout(args: &[&str], stdout: BadStdout) -> Output {
    let target = match stdout {
        BadStdout::Closed => Stdio::piped(),
        BadStdout::Full => Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full"),
        ),
    };
    let mut child = Command::new(mcpvisor())
        .args(args)
        .stdin(Stdio::null())
        .stdout(target)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    // Our end of the pipe is the only reader: dropping it closes the pipe.
    drop(child.stdout.take());
    finish(child, args)
}

/// Every command that prints, with the fake worker where it needs a server.
fn printing_commands(w: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["inspect", "--", w],
        vec!["inspect", "--json", "--", w],
        vec!["call", "echo", r#"{"a": 1}"#, "--", w],
        vec!["call", "--json", "huge", r#"{"bytes": 122880}"#, "--", w],
        vec!["demo"],
        vec!["--help"],
        vec!["--version"],
        vec!["help", "call"],
        vec!["run", "--help"],
        vec!["inspect", "--help"],
    ]
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly_with_exit_0() {
    let w = worker();
    for args in printing_commands(&w) {
        let out = run_with_stdout(&args, BadStdout::Closed);
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}: a closed stdout is not worth a word");
    }
}

#[test]
fn a_full_stdout_is_one_line_on_stderr_and_exit_2() {
    let w = worker();
    for args in printing_commands(&w) {
        let out = run_with_stdout(&args, BadStdout::Full);
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.lines().collect::<Vec<_>>(),
            ["mcpvisor: cannot write to stdout: No space left on device (os error 28)"],
            "{args:?}"
        );
    }
}

#[test]
fn a_reader_that_stops_after_the_first_line_ends_call_quietly() {
    // `mcpvisor call --json huge ... | head -1`: far more than a pipe holds
    // is still unwritten when the reader goes away.
    use std::io::BufRead;
    let w = worker();
    let args = ["call", "--json", "huge", r#"{"bytes": 1048576}"#, "--", &w];
    let mut child = Command::new(mcpvisor())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("the first line");
    assert_eq!(first, "{\n");
    let out = finish(child, &args);
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn the_demo_runs_to_its_end_with_mcpvisor_s_log_on_stderr() {
    let out = run(&["demo"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for step in [
        "add(40, 2) -> 42",
        "\"generation\":2",
        "mcpvisor exited: exit status: 0",
    ] {
        assert!(stdout.contains(step), "{step}: {stdout}");
    }
    // mcpvisor's own log and the example server's stderr come through, up
    // to mcpvisor's last line.
    for line in ["example-server: started", "mcpvisor stopped"] {
        assert!(stderr.contains(line), "{line}: {stderr}");
    }
}
