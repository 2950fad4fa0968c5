//! The gateway's reliability campaigns, scaled down for CI: each runs a
//! subcommand of `mcpvisor-bench` (whose long versions the benchmarks
//! report) against the `mcpvisor` binary built beside it (the workspace's
//! build).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `mcpvisor-bench ARGS` within `limit`; its stdout, or a panic with
/// its output when it fails.
fn bench(args: &[&str], limit: Duration) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcpvisor-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcpvisor-bench runs");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("mcpvisor-bench {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("its output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// The gateway keeps answering its well-behaved sessions, without an
/// error, while clients trickle and oversize their headers, open 1,500
/// connections that send nothing and 300 `initialize` attempts past
/// `--max-sessions 64`, leave streams and answers unread, send bodies that
/// are not UTF-8 or nest 100,000 deep, and cut POSTs off mid-body; its
/// memory stays under 128 MiB. About 15 s.
#[test]
fn the_gateway_serves_its_sessions_through_bad_clients() {
    let out = bench(
        &[
            "bad-clients",
            "--max-sessions",
            "64",
            "--header-timeout",
            "2",
            "--connections",
            "1500",
            "--initializes",
            "300",
            "--tricklers",
            "20",
            "--unread",
            "8",
            "--max-rss-mib",
            "128",
        ],
        Duration::from_secs(300),
    );
    assert!(out.contains(", 0 errors;"), "{out}");
}

/// 20 servers idle for 10 s: the gateway wakes at most 5 times a second in
/// all (it wakes for its own timers only). About 20 s.
#[test]
fn an_idle_gateway_does_not_poll() {
    bench(
        &[
            "idle",
            "--servers",
            "20",
            "--seconds",
            "10",
            "--max-wakeups-per-sec",
            "5",
        ],
        Duration::from_secs(300),
    );
}
