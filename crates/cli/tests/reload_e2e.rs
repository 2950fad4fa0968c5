//! Hot reload and restart policy end to end, with real file edits on disk.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Proc, WAIT, fake_worker, temp_dir};

/// A server script in `dir` that runs the fake worker with a tools file, so
/// editing either file is a code change.
fn project(name: &str, worker_flags: &str) -> (PathBuf, PathBuf) {
    let dir = temp_dir(name);
    let tools = dir.join("tools.txt");
    std::fs::write(&tools, "alpha\n").expect("tools");
    let script = dir.join("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec {} --tools-file {} {worker_flags}\n",
            fake_worker().display(),
            tools.display()
        ),
    )
    .expect("script");
    (dir, tools)
}

fn run(dir: &Path, flags: &[&str]) -> Proc {
    let mut args: Vec<String> = vec!["run".into(), "--debounce".into(), "100ms".into()];
    args.extend(flags.iter().map(|s| s.to_string()));
    args.extend([
        "--watch".into(),
        dir.join("tools.txt").display().to_string(),
        "--".into(),
        "sh".into(),
        dir.join("server.sh").display().to_string(),
    ]);
    let mut p = Proc::spawn(&args);
    p.wait_stderr("hot reload: watching");
    p
}

fn tool_names(p: &mut Proc, id: i64) -> Vec<String> {
    let r = p.request(json!(id), "tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

fn append(path: &Path, line: &str) {
    let mut text = std::fs::read_to_string(path).expect("read");
    text.push_str(line);
    text.push('\n');
    std::fs::write(path, text).expect("write");
}

/// Waits for `notifications/tools/list_changed`, answering nothing else.
fn wait_list_changed(p: &mut Proc) -> Duration {
    let start = Instant::now();
    loop {
        let m = p.recv();
        if m["method"] == "notifications/tools/list_changed" {
            return start.elapsed();
        }
    }
}

#[test]
fn edit_save_call_the_new_tool_and_measure_the_reload() {
    let (dir, tools) = project("edit", "");
    let mut p = run(&dir, &[]);
    let init = p.initialize();
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    assert!(!tool_names(&mut p, 1).contains(&"beta".to_owned()));
    append(&tools, "beta");
    let took = wait_list_changed(&mut p);
    eprintln!("save -> list_changed: {took:?} (debounce 100ms)");
    assert!(tool_names(&mut p, 2).contains(&"beta".to_owned()));
    let r = p.call(json!(3), "beta", json!({"hello": 1}));
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(p.whoami(json!(4))["generation"], 2);
    p.wait_stderr("reloaded worker (generation 2): tools +beta");
}

#[test]
fn editing_the_entry_script_itself_reloads() {
    let (dir, _) = project("entry", "");
    let mut args: Vec<String> = ["run", "--debounce", "100ms", "--", "sh"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(dir.join("server.sh").display().to_string());
    let mut p = Proc::spawn(&args);
    p.wait_stderr("hot reload: watching");
    p.initialize();
    let before = p.whoami(json!(1));
    append(&dir.join("server.sh"), "# edited");
    p.wait_stderr("started worker generation=2");
    let after = p.whoami(json!(2));
    assert_ne!(before["pid"], after["pid"]);
    // Same lists: no list_changed.
    assert!(p.recv_within(Duration::from_millis(500)).is_none());
}

#[test]
fn a_reload_lets_a_slow_call_finish_then_the_new_worker_appears() {
    let (dir, tools) = project("slow", "");
    let mut p = run(&dir, &[]);
    p.initialize();
    let old = p.whoami(json!(1));
    p.start_call(json!("slow"), "sleep", json!({"ms": 1500}));
    append(&tools, "gamma");
    p.wait_stderr("reload waits for requests in flight");
    // New requests wait for the new worker; the slow one completes on the old.
    p.send_call(json!("queued"), "whoami", json!({}));
    let slow = p.response(&json!("slow"));
    assert!(slow.get("result").is_some(), "{slow}");
    let queued = p.response(&json!("queued"));
    let me = Proc::tool_json(&queued);
    assert_eq!(me["generation"], 2);
    assert_ne!(me["pid"], old["pid"]);
}

#[test]
fn a_reload_under_continuous_load_loses_and_duplicates_nothing() {
    let (dir, tools) = project("load", "");
    let mut p = run(&dir, &[]);
    p.initialize();
    let total = 400;
    for i in 0..total {
        p.send_call(json!(i), "sleep", json!({"ms": 5}));
        if i == total / 2 {
            append(&tools, "delta");
        }
        if i % 20 == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut seen = std::collections::HashMap::<i64, u32>::new();
    while seen.len() < total as usize {
        let m = p.recv();
        if m.get("method").is_some() {
            continue;
        }
        let id = m["id"].as_i64().expect("id");
        assert!(m.get("result").is_some(), "lost to the reload: {m}");
        *seen.entry(id).or_default() += 1;
    }
    assert!(seen.values().all(|n| *n == 1));
    assert!(
        p.recv_within(Duration::from_millis(300))
            .is_none_or(|m| m.get("method").is_some())
    );
    assert_eq!(p.whoami(json!("who"))["generation"], 2);
}

#[test]
fn a_failing_build_keeps_the_old_worker() {
    let (dir, tools) = project("build", "");
    let flag = dir.join("build-ok");
    let build = format!(
        "test -e {} || (echo 'syntax error on line 3' >&2; exit 1)",
        flag.display()
    );
    let mut p = run(&dir, &["--build", &build]);
    p.initialize();
    append(&tools, "epsilon");
    p.wait_stderr("syntax error on line 3");
    p.wait_stderr("build failed, keeping the current server");
    assert_eq!(p.whoami(json!(1))["generation"], 1);
    std::fs::write(&flag, "").expect("flag");
    append(&tools, "zeta");
    wait_list_changed(&mut p);
    assert_eq!(p.whoami(json!(2))["generation"], 2);
}

#[test]
fn a_crash_loop_backs_off_then_fails_with_data_and_an_edit_recovers() {
    let (dir, _tools) = project("loop", "");
    let bad = dir.join("server.sh");
    let good = std::fs::read_to_string(&bad).expect("script");
    std::fs::write(
        &bad,
        "#!/bin/sh\necho 'ImportError: no module named fastmcp' >&2\nexit 3\n",
    )
    .expect("bad script");
    let mut args: Vec<String> = [
        "run",
        "--debounce",
        "100ms",
        "--crash-loop-exits",
        "4",
        "--stderr-in-errors",
        "--",
        "sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(bad.display().to_string());
    let mut p = Proc::spawn(&args);
    let start = Instant::now();
    // The first request starts the worker, which dies without reading it;
    // mcpvisor restarts it eagerly and it keeps dying at once. No worker
    // ever read the request: it waits for each next one, and is refused as
    // not started once that is a crash loop.
    let r = p.call(json!(1), "echo", json!({}));
    assert_eq!(r["error"]["code"], -32011, "{r}");
    assert!(
        r["error"]["data"]["reason"]
            .to_string()
            .contains("crash-looping"),
        "{r}"
    );
    p.wait_stderr("failing requests until");
    let elapsed = start.elapsed();
    let r = p.call(json!(2), "echo", json!({}));
    assert_eq!(r["error"]["code"], -32011, "{r}");
    let data = &r["error"]["data"];
    assert_eq!(data["exit"]["code"], 3, "{data}");
    assert_eq!(data["phase"], "serving", "{data}");
    assert!(data["stderr"].to_string().contains("ImportError"), "{data}");
    // Four starts: at once, then 250 ms and 500 ms apart: bounded, not spinning.
    let starts = p.stderr_text().matches("started worker").count();
    assert_eq!(starts, 4, "{}", p.stderr_text());
    assert!(
        elapsed >= Duration::from_millis(700),
        "backoff too short: {elapsed:?}"
    );
    // Give a restart time to show; none may.
    let _ = p.stderr_within("started worker", Duration::from_millis(500));
    assert_eq!(
        p.stderr_text().matches("started worker").count(),
        4,
        "no restarts while failed"
    );
    // In the failed state requests are refused at once.
    let quick = Instant::now();
    assert_eq!(p.call(json!(3), "echo", json!({}))["error"]["code"], -32011);
    assert!(quick.elapsed() < Duration::from_secs(1));
    // Fix the file: the edit leaves the failed state.
    std::fs::write(&bad, good).expect("fix");
    p.wait_stderr("started worker generation=5");
    let deadline = Instant::now() + WAIT;
    loop {
        let r = p.call(json!("after"), "echo", json!({}));
        if r.get("result").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "never recovered: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _: Value = p.whoami(json!("w"));
}
