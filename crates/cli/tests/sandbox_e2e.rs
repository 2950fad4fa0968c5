//! An entry's `sandbox`, through the real binary: the hidden
//! `sandbox-exec` helper against the file system and the network, a
//! sandboxed server under `run --config` and `call --config`, and the one
//! line a kernel without a feature gives (simulated with the helper's test
//! hook), before anything of the server runs. Needs Linux with Landlock's
//! TCP rules (6.7 or later) and user or network namespaces.

mod support;

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;
use support::{Proc, WAIT, fake_worker, finish, mcpvisor, temp_dir, wait_gone};

/// Runs `mcpvisor args` to its end (bounded), with `env` added.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = Command::new(mcpvisor())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    finish(child, args)
}

/// `mcpvisor sandbox-exec --spec SPEC -- CMD...`.
fn exec(spec: &serde_json::Value, command: &[&str]) -> Output {
    let spec = spec.to_string();
    let mut args = vec!["sandbox-exec", "--name", "t", "--spec", &spec, "--"];
    args.extend(command);
    run(&args, &[])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn files_outside_read_and_write_are_out_of_reach_even_through_a_symlink() {
    let dir = temp_dir("sandbox-files");
    let (allowed, outside, out) = (dir.join("allowed"), dir.join("outside"), dir.join("out"));
    for d in [&allowed, &outside, &out] {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::fs::write(allowed.join("mine.txt"), "mine").expect("file");
    std::fs::write(outside.join("secret.txt"), "secret").expect("file");
    std::os::unix::fs::symlink(outside.join("secret.txt"), allowed.join("link")).expect("link");
    let spec = json!({"read": [path(&allowed)], "write": [path(&out)]});

    // Without the sandbox, the link reads the secret.
    let cat = |file: &Path| vec!["cat".to_owned(), path(file)];
    let plain = Command::new("cat")
        .arg(allowed.join("link"))
        .output()
        .expect("cat");
    assert_eq!(text(&plain.stdout), "secret");

    let inside = exec(&spec, &["cat", &path(&allowed.join("mine.txt"))]);
    assert_eq!(inside.status.code(), Some(0), "{}", text(&inside.stderr));
    assert_eq!(text(&inside.stdout), "mine");
    for file in [allowed.join("link"), outside.join("secret.txt")] {
        let args = cat(&file);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let denied = exec(&spec, &args);
        assert_ne!(denied.status.code(), Some(0), "{file:?} was read");
        assert!(
            text(&denied.stderr).contains("Permission denied"),
            "{}",
            text(&denied.stderr)
        );
        assert_eq!(text(&denied.stdout), "");
    }
    // Nor is all of /etc readable, though the loader's part of it is.
    let shadow = exec(&spec, &["cat", "/etc/shadow"]);
    assert!(text(&shadow.stderr).contains("Permission denied"));

    // Writing: only under `write` (and the devices).
    let script = format!(
        "echo a > {}/new.txt && echo b > /dev/null && ! echo c > {}/new.txt 2>/dev/null",
        path(&out),
        path(&allowed)
    );
    let written = exec(&spec, &["sh", "-c", &script]);
    assert_eq!(written.status.code(), Some(0), "{}", text(&written.stderr));
    assert_eq!(
        std::fs::read_to_string(out.join("new.txt")).expect("written"),
        "a\n"
    );
    assert!(!allowed.join("new.txt").exists());
}

/// A shell command that connects to 127.0.0.1:`port` and exits 0 if it could.
fn connect(port: u16) -> String {
    format!("exec 3<>/dev/tcp/127.0.0.1/{port}")
}

#[test]
fn network_none_cuts_every_connection_and_a_port_list_allows_exactly_its_ports() {
    let open = TcpListener::bind("127.0.0.1:0").expect("listen");
    let other = TcpListener::bind("127.0.0.1:0").expect("listen");
    let (port, other_port) = (
        open.local_addr().expect("addr").port(),
        other.local_addr().expect("addr").port(),
    );
    let bash = |spec: serde_json::Value, port: u16| exec(&spec, &["bash", "-c", &connect(port)]);

    let unsandboxed = Command::new("bash")
        .args(["-c", &connect(port)])
        .output()
        .expect("bash");
    assert_eq!(unsandboxed.status.code(), Some(0), "{unsandboxed:?}");
    let all = bash(json!({"network": "all"}), port);
    assert_eq!(all.status.code(), Some(0), "{}", text(&all.stderr));

    let none = bash(json!({"network": "none"}), port);
    assert_ne!(none.status.code(), Some(0));
    assert!(
        text(&none.stderr).contains("Network is unreachable"),
        "{}",
        text(&none.stderr)
    );

    let list = json!({"network": [format!("localhost:{port}")]});
    let listed = bash(list.clone(), port);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let unlisted = bash(list, other_port);
    assert_ne!(unlisted.status.code(), Some(0));
    assert!(
        text(&unlisted.stderr).contains("Permission denied"),
        "{}",
        text(&unlisted.stderr)
    );
}

/// A config file with one entry `s`: a script that records that it ran and
/// its `TMPDIR` in `dir`, then execs the fake worker (whose directory the
/// sandbox's `read` gets).
fn sandboxed_entry(dir: &Path, mut sandbox: serde_json::Value, env: serde_json::Value) -> String {
    let worker_dir = fake_worker().parent().map(path).expect("a directory");
    sandbox["read"] = json!([worker_dir]);
    let script = dir.join("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$TMPDIR\" > {}/ran\nexec {}\n",
            path(dir),
            path(&fake_worker())
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cfg = dir.join("config.json");
    let entry = json!({"mcpServers": {"s": {
        "command": path(&script),
        "sandbox": sandbox,
        "env": env,
    }}});
    std::fs::write(&cfg, entry.to_string()).expect("config");
    path(&cfg)
}

#[test]
fn a_sandboxed_server_is_supervised_as_ever_with_a_private_tmp() {
    let dir = temp_dir("sandbox-run");
    let cfg = sandboxed_entry(
        &dir,
        json!({"write": [path(&dir)], "network": "none"}),
        json!({}),
    );
    let args: Vec<String> = ["run", "--config", &cfg, "s"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut p = Proc::spawn(&args);
    p.initialize();
    let who = p.whoami(json!(1));
    let pid = i32::try_from(who["pid"].as_i64().expect("pid")).expect("a pid");
    // The helper became the server: same pid, the fake worker's program,
    // mcpvisor's child, leading its own process group.
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe");
    assert_eq!(exe, fake_worker().canonicalize().expect("worker"));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .expect("stat")
        .split_whitespace()
        .collect();
    assert_eq!(fields[1], p.pid().to_string(), "parent: {stat}");
    assert_eq!(fields[2], pid.to_string(), "process group: {stat}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");

    let tmp = std::fs::read_to_string(dir.join("ran")).expect("the server ran");
    let tmp = Path::new(tmp.trim());
    assert!(tmp.is_dir(), "{tmp:?}");
    let mode = std::fs::metadata(tmp).expect("tmp").permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{tmp:?}");

    p.close_stdin();
    p.wait_exit(WAIT);
    assert!(wait_gone(pid, WAIT), "the server outlived mcpvisor");
    assert!(!tmp.exists(), "{tmp:?} was not removed");
}

#[test]
fn a_kernel_without_a_feature_refuses_the_start_in_one_line_and_runs_nothing() {
    let cases = [
        ("landlock", json!({}), "this kernel has no Landlock"),
        (
            "landlock-tcp",
            json!({"network": ["api.example.com:443"]}),
            "this kernel's Landlock has no TCP rules, which \"network\": [\"api.example.com:443\"] needs",
        ),
        (
            "netns",
            json!({"network": "none"}),
            "\"network\": \"none\" needs a network namespace of its own",
        ),
    ];
    for (missing, sandbox, expected) in cases {
        let dir = temp_dir(&format!("sandbox-missing-{missing}"));
        let cfg = sandboxed_entry(
            &dir,
            sandbox,
            json!({"MCPVISOR_SANDBOX_SIMULATE_MISSING": missing}),
        );
        let out = run(&["call", "--config", &cfg, "s", "whoami"], &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{missing}: {stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("sandbox:"))
            .unwrap_or_else(|| panic!("{missing}: no sandbox line in {stderr}"));
        assert!(line.contains("server \"s\": sandbox: "), "{line}");
        assert!(line.contains(expected), "{missing}: {line}");
        assert!(line.ends_with("the server was not started"), "{line}");
        assert!(!dir.join("ran").exists(), "{missing}: the server ran");
    }
}

#[test]
fn the_helper_refuses_a_path_it_cannot_find_and_a_command_it_cannot_run() {
    let missing = exec(&json!({"read": ["/no/such/dir"]}), &["true"]);
    assert_eq!(missing.status.code(), Some(125));
    let line = text(&missing.stderr);
    assert!(
        line.starts_with("mcpvisor: server \"t\": sandbox: \"sandbox.read\": /no/such/dir: "),
        "{line}"
    );
    let absent = exec(&json!({}), &["no-such-program-here"]);
    assert_eq!(absent.status.code(), Some(127), "{}", text(&absent.stderr));
}
