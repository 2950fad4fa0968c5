//! Spawning real processes and stopping them in layers.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use mcpvisor_process::{Spec, StopTimeouts, spawn};

fn sh(script: &str) -> Spec {
    Spec {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        ..Spec::default()
    }
}

fn quick() -> StopTimeouts {
    StopTimeouts {
        after_close: Duration::from_millis(200),
        after_term: Duration::from_millis(300),
    }
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

#[tokio::test]
async fn reports_exit_code() {
    let mut spawned = spawn(&sh("exit 7"), quick()).expect("spawn");
    let exit = tokio::time::timeout(Duration::from_secs(5), spawned.process.wait())
        .await
        .expect("exit in time");
    assert_eq!(exit.status.and_then(|s| s.code()), Some(7));
    assert!(!exit.requested);
}

#[tokio::test]
async fn closing_stdin_is_the_first_layer() {
    // The shell has its whole close grace to see the end of its input: on a
    // loaded machine 200 ms can pass before it runs, and then SIGTERM, the
    // next layer, would be what ended it.
    let patient = StopTimeouts {
        after_close: Duration::from_secs(5),
        ..quick()
    };
    let mut spawned = spawn(&sh("cat >/dev/null; exit 0"), patient).expect("spawn");
    drop(spawned.stdin);
    spawned.process.stop();
    let exit = tokio::time::timeout(Duration::from_secs(5), spawned.process.wait())
        .await
        .expect("exit in time");
    assert_eq!(exit.status.and_then(|s| s.code()), Some(0));
    assert!(exit.requested);
}

#[tokio::test]
async fn sigkill_when_sigterm_is_ignored_and_grandchildren_die() {
    // The shell ignores TERM and starts a grandchild that outlives it unless
    // the group is signalled.
    let script = "trap '' TERM; sleep 60 & echo $! >&2; while :; do sleep 0.05; done";
    let mut spawned = spawn(&sh(script), quick()).expect("spawn");
    let mut stderr = tokio::io::BufReader::new(spawned.stderr);
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stderr, &mut line)
        .await
        .expect("grandchild pid");
    let grandchild: i32 = line.trim().parse().expect("pid");
    assert!(alive(grandchild));
    drop(spawned.stdin);
    spawned.process.stop();
    let exit = tokio::time::timeout(Duration::from_secs(5), spawned.process.wait())
        .await
        .expect("exit in time");
    assert_eq!(exit.status.and_then(|s| s.signal()), Some(9));
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while alive(grandchild) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !alive(grandchild),
        "grandchild {grandchild} survived its worker"
    );
}

#[tokio::test]
async fn missing_command_is_a_clear_error() {
    let err = spawn(
        &Spec {
            program: "definitely-not-a-command-xyz".into(),
            ..Spec::default()
        },
        quick(),
    )
    .expect_err("must fail");
    assert_eq!(
        err.to_string(),
        "command not found: definitely-not-a-command-xyz"
    );
}
