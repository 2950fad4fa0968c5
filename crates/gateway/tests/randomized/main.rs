//! Seeded random traffic through the gateway to several real fake workers:
//! calls to every server's tools, progress, cancels, crashes, kills,
//! freezes, reused ids, reloads and restarts, with the routing invariants
//! checked over everything the front client saw.
//!
//! [`Hub::run`] runs in this process on a pipe; each server is a real
//! `mcpvisor-fake-worker` under its own session. The driver writes down
//! where in the received stream each thing it did happened, so the checks
//! can speak of order: an answer after its request, progress before its
//! answer, nothing for a cancelled request once the gateway has taken the
//! cancel. `MCPVISOR_RANDOM_SEEDS=N` runs more seeds.

mod check;
mod driver;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use check::Checker;
use driver::Driver;
use mcpvisor_config::ServerDef;
use mcpvisor_gateway::{Hub, Outcome, ServerPlan, Settings};
use mcpvisor_jsonrpc::{NOT_STARTED, WORKER_LOST};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// Operations per seed.
const OPS: usize = 200;
/// Seeds run when `MCPVISOR_RANDOM_SEEDS` is not set.
const DEFAULT_SEEDS: u64 = 6;
/// The bound on every wait for the gateway.
const WAIT: Duration = Duration::from_secs(20);
/// The servers, in config order; a seed uses the first three or all four.
const NAMES: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
/// What the gateway says when it refuses a reused id.
const REUSED_ID: &str = "a request with this id is already in flight";

/// The fake worker, built next to this test (`cargo build --workspace`
/// builds it; `cargo test -p mcpvisor-gateway` alone does not).
fn fake_worker() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // <target>/<profile>/deps/<this test>
    let path = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("mcpvisor-fake-worker"))
        .expect("the target directory");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p mcpvisor-fixtures` (or `cargo build --workspace`) first",
        path.display()
    );
    path
}

/// One server: the fake worker under a session with short bounds, so that
/// hangs time out and crashed workers come back within a seed.
fn plan(name: &str, worker: &Path, ack_cancels: bool, crash_loop_exits: u32) -> ServerPlan {
    let args = if ack_cancels {
        vec!["--ack-cancels".to_owned()]
    } else {
        Vec::new()
    };
    let session = mcpvisor_session::Config {
        request_timeout: Duration::from_millis(1500),
        cancel_grace: Duration::from_millis(300),
        restart_backoff_max: Duration::from_millis(100),
        crash_loop_exits,
        failed_cooldown: Duration::from_millis(500),
        reload_drain_timeout: Duration::from_millis(300),
        // A frozen worker ignores all but SIGKILL: its session ends a
        // while after the gateway has replaced it, not much later.
        stop: StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_secs(1),
        },
        ..mcpvisor_session::Config::default()
    };
    ServerPlan {
        name: name.to_owned(),
        def: ServerDef {
            name: name.to_owned(),
            command: worker.display().to_string(),
            args,
            ..ServerDef::default()
        },
        session,
        stderr: Passthrough::Discard,
        lazy: false,
        idle_timeout: None,
        health_interval: Some(Duration::from_millis(200)),
        health_misses: 3,
        cached: None,
        cache_key: None,
        env_overrides: Vec::new(),
        per_client: false,
    }
}

async fn run_seed(seed: u64, worker: &Path) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let count = 3 + (seed % 2) as usize;
    let names: Vec<String> = NAMES[..count].iter().map(|s| s.to_string()).collect();
    // Some seeds let a server crash-loop into its failed state.
    let crash_loops = seed % 4 == 3;
    let crash_loop_exits = if crash_loops { 3 } else { 1000 };
    let plans: Vec<ServerPlan> = names
        .iter()
        .map(|name| plan(name, worker, rng.bool(), crash_loop_exits))
        .collect();
    let settings = Settings {
        list_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let (front_in, hub_in) = tokio::io::duplex(64 * 1024);
    let (hub_out, front_out) = tokio::io::duplex(64 * 1024);
    let (control_tx, control) = mpsc::channel(4);
    let hub = tokio::spawn(Hub::run(settings, plans.clone(), hub_in, hub_out, control));
    let (line_tx, lines) = mpsc::channel(1 << 16);
    let reader = tokio::spawn(async move {
        let mut out = BufReader::new(front_out).lines();
        while let Ok(Some(line)) = out.next_line().await {
            if line_tx.send(line).await.is_err() {
                return;
            }
        }
    });
    let mut d = Driver {
        seed,
        rng,
        names,
        tx: Some(front_in),
        lines,
        log: Vec::new(),
        answered: HashMap::new(),
        used: HashSet::new(),
        by_id: HashMap::new(),
        calls: Vec::new(),
        plain: Vec::new(),
        disruptions: Vec::new(),
        crash_loops,
        garbage: 0,
        frozen: None,
        plans,
        control: control_tx,
    };

    let init = d
        .plain(
            json!("init"),
            "initialize",
            json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"randomized","version":"1"}}),
        )
        .await;
    d.wait_until("initialize's answer", |d| d.answers(&init) > 0)
        .await;
    d.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    let list = d.plain(json!("tools"), "tools/list", json!({})).await;
    d.wait_until("the tool list", |d| d.answers(&list) > 0)
        .await;
    let listed: HashSet<&str> = d
        .log
        .iter()
        .find(|m| m["id"] == list)
        .and_then(|m| m["result"]["tools"].as_array())
        .expect("a tool list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in &d.names {
        for tool in ["echo", "sleep", "hang", "crash", "whoami"] {
            let exposed = format!("{name}__{tool}");
            assert!(
                listed.contains(exposed.as_str()),
                "seed {seed}: {exposed} not listed"
            );
        }
    }

    // At least OPS operations, and none of the servers left frozen.
    let mut n = 0;
    while n < OPS || d.frozen.is_some() {
        d.random_op(n).await;
        n += 1;
    }
    d.wait_until("an answer to every call not cancelled", Driver::settled)
        .await;
    // Closing the input ends the gateway once nothing is left in flight.
    d.tx = None;
    let outcome = tokio::time::timeout(WAIT, hub)
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the gateway did not end"))
        .expect("the gateway's task");
    assert_eq!(outcome, Outcome::ClientClosed, "seed {seed}");
    tokio::time::timeout(WAIT, reader)
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the front output did not end"))
        .expect("the reader");
    while let Some(line) = d.lines.recv().await {
        d.take(line);
    }

    let check = Checker::new(&d);
    check.plain_answers_come_once();
    let answered_at = check.answers_match_calls();
    check.progress_is_the_calls_own(&answered_at);
    check.pids_stay_with_their_server(&answered_at);
    // What the seed exercised, for `--nocapture`.
    let count = |f: &dyn Fn(&Value) -> bool| d.log.iter().filter(|m| f(m)).count();
    eprintln!(
        "seed {seed}: {} calls ({} cancelled), {} crashes, kills and restarts; {} results, {} lost, {} not started, {} progress",
        d.calls.len(),
        d.calls.iter().filter(|c| c.barrier.is_some()).count(),
        d.disruptions.len(),
        count(&|m| m.get("result").is_some()),
        count(&|m| m["error"]["code"] == WORKER_LOST),
        count(&|m| m["error"]["code"] == NOT_STARTED),
        count(&|m| m["method"] == "notifications/progress"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_traffic_through_the_gateway_keeps_the_invariants() {
    let worker = fake_worker();
    let seeds: u64 = std::env::var("MCPVISOR_RANDOM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEEDS);
    for seed in 0..seeds {
        run_seed(seed, &worker).await;
    }
}
