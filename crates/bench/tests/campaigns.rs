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

/// 12 clients (9 sessions, and 3 clients of 2026-07-28 without one) of
/// quick and one-second calls for 40 s through three
/// servers, one of them SIGKILLed every second (each in turn, once it has
/// run 2 s), while a fourth is added and removed by config edits with
/// SIGHUP every 4 s and SIGHUP alone comes between: every answer is the
/// call's own, every error is a `-32010` at a kill of its server or what
/// the removal of the fourth explains, every session works at the end, the
/// gateway's VmRSS ends within 1.5 times its reading after 10 s plus 8 MiB,
/// and SIGTERM leaves no process. About 50 s.
#[test]
fn the_gateway_holds_through_kills_and_config_edits() {
    let out = bench(
        &[
            "soak",
            "--seconds",
            "40",
            "--warmup",
            "10",
            "--sessions",
            "12",
            "--stateless",
            "3",
            "--servers",
            "3",
            "--kill-every",
            "1",
            "--edit-every",
            "2",
            "--slow-ms",
            "1000",
        ],
        Duration::from_secs(300),
    );
    assert!(out.contains("; 0 failures;"), "{out}");
    assert!(out.contains("0 processes left"), "{out}");
}
