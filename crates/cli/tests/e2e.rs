//! End to end through the real binary's pipes, with the scriptable fake worker.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Proc, WAIT, alive, signal, temp_dir, wait_gone};

#[test]
fn concurrent_calls_crash_with_kill_9_and_a_strict_worker_keeps_working() {
    let mut p = Proc::fake(&[], &["--strict"]);
    p.initialize();
    let first = p.whoami(json!(1));
    assert_eq!(first["generation"], 1);
    // No head-of-line blocking: the fast call overtakes the slow one.
    p.send_call(json!("slow"), "sleep", json!({"ms": 1500}));
    p.send_call(json!("fast"), "echo", json!({"x": 1}));
    assert_eq!(p.recv()["id"], "fast");
    assert_eq!(p.recv()["id"], "slow");
    // SIGKILL mid-call: one -32010 with the signal, then a new generation.
    // Its first progress shows the call reached the worker (one that had
    // not would wait for the next worker instead).
    p.send(json!({"jsonrpc":"2.0","id":"doomed","method":"tools/call","params":{"name":"sleep","arguments":{"ms": 600_000, "progress_ms": 10},"_meta":{"progressToken":"d"}}}));
    assert_eq!(p.recv()["method"], "notifications/progress");
    signal(first["pid"].as_i64().expect("pid") as i32, 9);
    let r = p.response(&json!("doomed"));
    assert_eq!(r["error"]["code"], -32010, "{r}");
    assert_eq!(r["error"]["data"]["exit"]["signal"], 9, "{r}");
    let second = p.whoami(json!(2));
    assert_eq!(
        second["generation"], 2,
        "MCPVISOR_GENERATION seen by the worker"
    );
    assert_ne!(second["pid"], first["pid"]);
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}

#[test]
fn the_handshake_is_replayed_to_every_generation_before_client_traffic() {
    let dir = temp_dir("handshake");
    let log = dir.join("received.log");
    let log_arg = log.display().to_string();
    let mut p = Proc::fake(&[], &["--strict", "--log-file", &log_arg]);
    p.initialize();
    for i in 0..3 {
        let r = p.call(json!(i), "crash", json!({}));
        assert_eq!(r["error"]["code"], -32010);
        let ok = p.call(json!(100 + i), "echo", json!({}));
        assert!(
            ok.get("result").is_some(),
            "strict worker refused after restart {i}: {ok}"
        );
    }
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    // Each worker's log starts with the handshake; no client call comes before it.
    let text = std::fs::read_to_string(&log).expect("log");
    let inits = text
        .lines()
        .filter(|l| l.starts_with("initialize "))
        .count();
    assert_eq!(inits, 4, "{text}");
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("initialize ") {
            let next = lines.peek().expect("something after initialize");
            assert!(next.starts_with("notifications/initialized"), "{text}");
        }
    }
}

#[test]
fn the_log_level_and_subscriptions_the_server_accepted_are_restored_to_the_next_generation() {
    let dir = temp_dir("restore");
    let log = dir.join("received.log");
    let log_arg = log.display().to_string();
    // Each worker answers initialize late, so that the client's call after
    // the crash reaches the session while the second worker is still in
    // its handshake however the machine schedules the processes: the order
    // asserted below is then the session's doing, not a race between the
    // client and the worker's start.
    let mut p = Proc::fake(
        &[],
        &[
            "--all-capabilities",
            "--initialize-delay",
            "300",
            "--log-file",
            &log_arg,
        ],
    );
    p.initialize();
    let ok = |r: Value| assert!(r.get("result").is_some(), "{r}");
    ok(p.request(json!(1), "logging/setLevel", json!({"level": "info"})));
    ok(p.request(json!(2), "logging/setLevel", json!({"level": "debug"})));
    ok(p.request(json!(3), "resources/subscribe", json!({"uri": "file:///a"})));
    ok(p.request(json!(4), "resources/subscribe", json!({"uri": "file:///b"})));
    ok(p.request(
        json!(5),
        "resources/unsubscribe",
        json!({"uri": "file:///a"}),
    ));
    let r = p.call(json!(6), "crash", json!({}));
    assert_eq!(r["error"]["code"], -32010, "{r}");
    let after = p.call(json!(7), "echo", json!({}));
    assert!(after.get("result").is_some(), "{after}");
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    // The second worker got the handshake, then the last level and the one
    // subscription left (under mcpvisor's own ids), then the client's call;
    // the session's own list reads come after.
    let text = std::fs::read_to_string(&log).expect("log");
    let second: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("tools/call"))
        .skip(1)
        .take(5)
        .collect();
    let methods: Vec<&str> = second
        .iter()
        .map(|l| l.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "logging/setLevel",
            "resources/subscribe",
            "tools/call",
        ],
        "{text}"
    );
}

#[test]
fn state_the_server_refused_is_not_restored() {
    let dir = temp_dir("restore-refused");
    let log = dir.join("received.log");
    let log_arg = log.display().to_string();
    // Without --all-capabilities the fake worker refuses both methods.
    let mut p = Proc::fake(&[], &["--log-file", &log_arg]);
    p.initialize();
    let r = p.request(json!(1), "logging/setLevel", json!({"level": "debug"}));
    assert!(r.get("error").is_some(), "{r}");
    let r = p.call(json!(2), "crash", json!({}));
    assert_eq!(r["error"]["code"], -32010, "{r}");
    let after = p.call(json!(3), "echo", json!({}));
    assert!(after.get("result").is_some(), "{after}");
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    let text = std::fs::read_to_string(&log).expect("log");
    let levels = text
        .lines()
        .filter(|l| l.starts_with("logging/setLevel"))
        .count();
    assert_eq!(levels, 1, "only the client's own: {text}");
}

#[test]
fn client_eof_stops_a_worker_that_ignores_sigterm_and_its_grandchildren() {
    let mut p = Proc::fake(
        &["--stop-grace", "200ms", "--term-grace", "300ms"],
        &["--ignore-sigterm", "--spawn-grandchild"],
    );
    let r = p.request(json!(1), "ping", json!({}));
    assert_eq!(r["result"], json!({}));
    let line = p.wait_stderr("grandchild pid");
    let grandchild: i32 = line
        .rsplit(' ')
        .next()
        .expect("pid")
        .parse()
        .expect("pid number");
    assert!(alive(grandchild));
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    assert!(
        wait_gone(grandchild, WAIT),
        "grandchild {grandchild} outlived its worker"
    );
}

#[test]
fn sigterm_and_sigint_stop_mcpvisor_and_the_worker_and_exit_zero() {
    for sig in [15, 2] {
        let mut p = Proc::fake(&[], &[]);
        let me = p.whoami(json!(1));
        signal(p.pid(), sig);
        assert!(p.wait_exit(WAIT).success(), "signal {sig}");
        assert!(
            wait_gone(me["pid"].as_i64().expect("pid") as i32, WAIT),
            "signal {sig}"
        );
    }
}

#[test]
fn sighup_reloads_the_worker() {
    let mut p = Proc::fake(&["--no-watch"], &[]);
    p.initialize();
    let before = p.whoami(json!(1));
    signal(p.pid(), 1);
    p.wait_stderr("started worker generation=2");
    let after = p.whoami(json!(2));
    assert_eq!(after["generation"], 2);
    assert_ne!(after["pid"], before["pid"]);
}

#[test]
fn a_closed_client_stdout_ends_mcpvisor_quietly() {
    let mut p = Proc::fake(&[], &[]);
    p.initialize();
    // Stop reading: the reader thread ends when its receiver is gone.
    let (_tx, rx) = std::sync::mpsc::channel();
    drop(std::mem::replace(&mut p.lines, rx));
    // Answers to these hit a closed pipe once the reader thread is gone.
    for i in 0..200 {
        if p.stdin.is_none() {
            break;
        }
        let line = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"huge","arguments":{"bytes": 65536}}}).to_string();
        use std::io::Write;
        if p.stdin
            .as_mut()
            .is_some_and(|s| writeln!(s, "{line}").is_err())
        {
            break;
        }
    }
    let status = p.wait_exit(WAIT);
    assert!(status.success(), "{status:?}");
    assert!(!p.stderr_text().contains("ERROR"), "{}", p.stderr_text());
}

#[test]
fn a_twenty_mib_result_arrives_intact() {
    let mut p = Proc::fake(&[], &[]);
    p.initialize();
    let r = p.call(json!("big"), "huge", json!({"bytes": 20 * 1024 * 1024}));
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    assert_eq!(text.len(), 20 * 1024 * 1024);
    assert!(text.bytes().all(|b| b == b'x'));
}

#[test]
fn oversize_messages_are_answered_in_both_directions() {
    let mut p = Proc::fake(&["--max-message-bytes", "1MiB"], &[]);
    p.initialize();
    let r = p.call(
        json!("big-answer"),
        "huge",
        json!({"bytes": 2 * 1024 * 1024}),
    );
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let big = "y".repeat(2 * 1024 * 1024);
    p.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":"big-request","method":"tools/call","params":{{"name":"echo","arguments":{{"t":"{big}"}}}}}}"#));
    let r = p.response(&json!("big-request"));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(p.call(json!(3), "echo", json!({}))["id"], 3);
}

#[test]
fn garbage_on_worker_stdout_never_reaches_the_client() {
    let mut p = Proc::fake(&[], &["--stdout-garbage-at-start", "Server starting..."]);
    p.initialize();
    let r = p.call(json!(1), "garbage", json!({}));
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(
        p.whoami(json!(2))["generation"],
        1,
        "drop policy keeps the worker"
    );
    let mut p = Proc::fake(&["--on-worker-garbage", "restart"], &[]);
    p.initialize();
    let r = p.call(json!(1), "garbage", json!({}));
    assert_eq!(r["error"]["code"], -32010, "{r}");
    assert_eq!(p.whoami(json!(2))["generation"], 2);
}

#[test]
fn a_stderr_flood_does_not_block_the_worker() {
    let mut p = Proc::fake(
        &["--worker-stderr", "discard"],
        &["--stderr-at-start", "5000000"],
    );
    p.initialize();
    let r = p.call(json!(1), "stderr", json!({"bytes": 2_000_000}));
    assert!(r.get("result").is_some(), "{r}");
}

#[test]
fn non_json_from_the_client_gets_a_parse_error_and_the_session_goes_on() {
    let mut p = Proc::fake(&[], &[]);
    p.send_raw("hello?");
    let r = p.recv();
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    p.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
    assert_eq!(p.recv()["error"]["code"], -32600);
    assert_eq!(p.request(json!(2), "ping", json!({}))["result"], json!({}));
}

#[test]
fn ids_round_trip_byte_for_byte() {
    let mut p = Proc::fake(&[], &[]);
    for id in ["1", "1.0", "\"1\"", "18446744073709551616", "-7", "1e2"] {
        p.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        let line = p.lines.recv_timeout(WAIT).expect("answer");
        assert!(line.contains(&format!("\"id\":{id}")), "{id} became {line}");
    }
}

#[test]
fn server_to_client_requests_round_trip_through_the_binary() {
    let mut p = Proc::fake(&[], &[]);
    p.initialize();
    p.send_call(json!("asker"), "ask", json!({"method": "roots/list"}));
    let ask = p.recv();
    assert_eq!(ask["method"], "roots/list");
    p.send(json!({"jsonrpc":"2.0","id":ask["id"],"result":{"roots":[{"uri":"file:///tmp"}]}}));
    let r = p.response(&json!("asker"));
    let answer = Proc::tool_json(&r);
    assert_eq!(answer["roots"][0]["uri"], "file:///tmp", "{r}");
}

#[test]
fn cancel_reaches_the_worker_and_its_ack_stays_private() {
    let mut p = Proc::fake(&["--max-in-flight", "1"], &["--ack-cancels"]);
    p.initialize();
    p.send_call(json!("c"), "hang", json!({}));
    p.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c"}}));
    // The ack (which arrives on its own time) frees the only slot; nothing
    // about "c" ever reaches the client.
    let deadline = std::time::Instant::now() + WAIT;
    let mut n = 0;
    loop {
        n += 1;
        let r = p.call(json!(n), "echo", json!({}));
        if r.get("result").is_some() {
            break;
        }
        assert_eq!(r["error"]["code"], -32011, "{r}");
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(p.recv_within(Duration::from_millis(300)).is_none());
}

#[test]
fn a_worker_that_cannot_be_started_gets_not_started_with_the_reason() {
    let dir = temp_dir("unstartable");
    let script = dir.join("server.sh");
    let worker = support::fake_worker();
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec {} \"$@\"\n", worker.display()),
    )
    .expect("script");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .expect("chmod");
    let args: Vec<String> = [
        "run",
        "--restart",
        "on-demand",
        "--no-watch",
        "--",
        &script.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn(&args);
    assert_eq!(
        p.call(json!(1), "crash", json!({}))["error"]["code"],
        -32010
    );
    std::fs::remove_file(&script).expect("remove");
    let r = p.call(json!(2), "echo", json!({}));
    assert_eq!(r["error"]["code"], -32011, "{r}");
    assert!(
        r["error"]["data"]["reason"]
            .as_str()
            .expect("reason")
            .contains("not found"),
        "{r}"
    );
}

#[test]
fn usage_errors_exit_2_with_one_clear_line() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(support::mcpvisor())
            .args(args)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["run", "--", "no-such-command-xyz"]);
    assert_eq!(code, Some(2));
    assert_eq!(
        err.trim(),
        "mcpvisor: cannot run `no-such-command-xyz`: command not found on PATH"
    );
    let (code, err) = run(&["run", "--request-timeout", "soon", "--", "true"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("`soon` is not a duration"), "{err}");
    let (code, err) = run(&["run", "--frobnicate", "--", "true"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unexpected argument '--frobnicate'"), "{err}");
    let plain = temp_dir("usage").join("not-executable.txt");
    std::fs::write(&plain, "just text").expect("write");
    let (code, err) = run(&["run", "--", &plain.display().to_string()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not executable"), "{err}");
}

#[test]
fn a_directory_given_as_the_command_is_called_a_directory() {
    let dir = temp_dir("command-is-a-directory");
    let shown = dir.display().to_string();
    for sub in ["run", "inspect"] {
        let out = std::process::Command::new(support::mcpvisor())
            .args([sub, "--", &shown])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{sub}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("mcpvisor: cannot run `{shown}`: it is a directory, not a program\n"),
            "{sub}"
        );
    }
}

#[test]
fn durations_mean_the_same_on_the_command_line_and_in_config_files() {
    // Each way of giving `init_timeout`, ending at the same command that
    // cannot run: reaching that error means the duration was accepted.
    let dir = temp_dir("durations");
    let stderr_of = |args: &[&str]| {
        let out = std::process::Command::new(support::mcpvisor())
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let both = |text: &str| {
        let flag = stderr_of(&["run", "--init-timeout", text, "--", "no-such-command-xyz"]);
        let cfg = dir.join("mcp.json");
        std::fs::write(
            &cfg,
            json!({"mcpServers": {"s": {"command": "no-such-command-xyz", "init_timeout": text}}})
                .to_string(),
        )
        .expect("config");
        let file = stderr_of(&["run", "--config", &cfg.display().to_string(), "s"]);
        (flag, file)
    };
    for good in [
        "1.5h",
        "1m30s",
        "1h 2m 3s 4ms",
        "500ms",
        "10 sec",
        "2 Minutes",
    ] {
        let (flag, file) = both(good);
        for err in [flag, file] {
            assert!(err.contains("command not found on PATH"), "{good}: {err}");
        }
    }
    for (bad, why) in [
        ("3d", "unknown unit \"d\" (use ms, s, m or h)"),
        (
            "30",
            "expected a duration like \"30s\", \"5m\" or \"1500ms\"",
        ),
        (
            "soon",
            "expected a duration like \"30s\", \"5m\" or \"1500ms\"",
        ),
    ] {
        let (flag, file) = both(bad);
        assert!(
            flag.contains(&format!("`{bad}` is not a duration: {why}")),
            "{bad}: {flag}"
        );
        assert!(
            file.contains(&format!("\"init_timeout\": {why}")),
            "{bad}: {file}"
        );
    }
}

#[test]
fn help_lists_the_example_server_the_readme_uses() {
    let out = std::process::Command::new(support::mcpvisor())
        .arg("--help")
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with("example-server "))
        .unwrap_or_else(|| panic!("no example-server in:\n{help}"));
    assert!(line.contains("example MCP server"), "{line}");
}

#[test]
fn logs_never_carry_payloads_even_at_trace_level() {
    let mut p = Proc::fake(&["-vv", "--worker-stderr", "discard"], &[]);
    p.initialize();
    let marker = "payload-marker-7f3a";
    let r = p.call(json!(1), "echo", json!({"secret": marker}));
    assert!(r.to_string().contains(marker), "the answer carries it: {r}");
    let r = p.call(json!(2), "crash", json!({"note": marker}));
    assert_eq!(r["error"]["code"], -32010);
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
    let log = p.stderr_text();
    assert!(log.contains("started worker"), "logging is on: {log}");
    assert!(!log.contains(marker), "a payload reached the log:\n{log}");
}

#[test]
fn a_client_that_uses_a_socketpair_for_stdio_works() {
    // Node (and so TypeScript SDK clients) give a child Unix sockets, not
    // pipes, for its stdin and stdout.
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let theirs_out = theirs.try_clone().expect("dup");
    let mut child = std::process::Command::new(support::mcpvisor())
        .args(["run", "--no-watch", "-q", "--"])
        .arg(support::fake_worker())
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs_out,
        )))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start");
    ours.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut writer = ours.try_clone().expect("dup");
    let mut lines = BufReader::new(ours.try_clone().expect("dup")).lines();
    for id in 1..=3 {
        writeln!(writer, r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).expect("write");
        let line = lines.next().expect("a line").expect("read");
        assert_eq!(
            line,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }
    // Closing our write half is the client's EOF.
    ours.shutdown(std::net::Shutdown::Write).expect("shutdown");
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mcpvisor did not exit on EOF"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success());
}

#[test]
fn a_call_that_never_reached_a_departing_worker_is_served_by_the_next_one() {
    // Each worker closes its stdin on reading its first line (before it
    // answers) and runs on until stopped, as a dying server does.
    let mut p = Proc::fake(&["--no-watch"], &["--close-stdin-at", "1"]);
    assert_eq!(p.whoami(json!(1))["generation"], 1);
    // Not a byte of this call gets through to generation 1: not -32010.
    let r = p.call(json!(2), "whoami", json!({}));
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(Proc::tool_json(&r)["generation"], 2, "{r}");
}

#[test]
fn a_client_that_stops_reading_is_gone_after_the_client_write_timeout() {
    use std::io::{BufRead, BufReader, Write};
    let mut child = std::process::Command::new(support::mcpvisor())
        .args([
            "run",
            "--no-watch",
            "-q",
            "--client-write-timeout",
            "1s",
            "--",
        ])
        .arg(support::fake_worker())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let call = |id: u32, tool: &str, args: Value| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}});
    writeln!(stdin, "{}", call(1, "whoami", json!({}))).expect("write");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read");
    let answer: Value = serde_json::from_str(&line).expect("JSON");
    let me = Proc::tool_json(&answer);
    let worker = me["pid"].as_i64().expect("pid") as i32;
    // From here on the client reads nothing, and the answer is far larger
    // than the pipe holds. Its stdout stays open.
    writeln!(stdin, "{}", call(2, "huge", json!({"bytes": 4 << 20}))).expect("write");
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mcpvisor did not give up on the client"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status:?}");
    assert!(wait_gone(worker, WAIT), "the worker was stopped");
    drop(stdout);
}

#[test]
fn a_call_sent_after_the_worker_was_killed_and_reaped_waits_for_the_next_one() {
    // The server runs under a shell that outlives it by a moment, holding
    // its pipes, as launchers do. A call written after the server was
    // killed and reaped lies in its stdin pipe unread: it never reached a
    // server, so the next generation serves it.
    let worker = format!("'{}'; sleep 1", support::fake_worker().display());
    let args = [
        "run",
        "--no-watch",
        "--restart-backoff-max",
        "300ms",
        "--",
        "sh",
        "-c",
    ];
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    args.push(worker);
    let mut p = Proc::spawn(&args);
    p.initialize();
    for round in 0..3 {
        let me = p.whoami(json!(format!("who-{round}")));
        let pid = me["pid"].as_i64().expect("pid") as i32;
        signal(pid, 9);
        // Reaped: not even a zombie is left.
        let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
        let deadline = std::time::Instant::now() + WAIT;
        while proc_dir.exists() {
            assert!(std::time::Instant::now() < deadline, "{pid} never reaped");
            std::thread::sleep(Duration::from_millis(1));
        }
        let r = p.call(json!(format!("after-{round}")), "whoami", json!({}));
        assert!(r.get("result").is_some(), "round {round}: {r}");
        let next = Proc::tool_json(&r);
        assert_eq!(
            next["generation"].as_u64(),
            me["generation"].as_u64().map(|g| g + 1),
            "round {round}: {r}"
        );
    }
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}
