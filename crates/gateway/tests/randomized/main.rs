//! Seeded random traffic through the gateway to several real fake workers:
//! calls to every server's tools, progress, cancels, crashes, kills,
//! freezes, reused ids, reloads and restarts, with the routing invariants
//! checked over everything each front client saw.
//!
//! The hub runs in this process; each server is a real
//! `mcpvisor-fake-worker` under its own session, of either era as the seed
//! draws it: a `--modern` worker is of 2026-07-28 alone (found by the
//! gateway's `server/discover`, driven with the envelope, its health
//! checked by discovery), the others of the handshake era. A third of the
//! seeds drive [`Hub::run`] with one handshake-era client on a pipe. The
//! others drive [`Hub::serve`] with two or three fronts on channels, at least one
//! of each era: a handshake-era front initializes first, a 2026-07-28
//! front never does and puts the `_meta` envelope on every request, asks
//! `server/discover` where the other pings, and must get `resultType`
//! `complete` on every result and no notification but its calls'
//! progress. Fronts count their request ids and progress tokens alike, so
//! the same id is often in flight on several fronts at once, and every
//! answer must fit the call of its own front. Those seeds also have a
//! per-client server for bridged calls: a 2026-07-28 front's `ask` makes
//! the worker ask `roots/list` mid-call, the call is answered with an
//! input-required round, and the front's retry (a new id, its answer and
//! the round's state) gets the call's result, the worker's echo of that
//! front's own answer.
//!
//! The driver writes down where in each front's received stream each
//! thing it did happened, so the checks can speak of order: an answer
//! after its request, progress before its answer, nothing for a cancelled
//! request once the gateway has taken the cancel. Each request is answered
//! at most once, exactly once unless cancelled, never with another
//! request's payload; on a channel, each answer and each progress
//! notification is related to its own request, as Streamable HTTP would
//! route it. `MCPVISOR_RANDOM_SEEDS=N` runs more seeds.

mod check;
mod driver;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use check::Checker;
use driver::{Driver, Era, Front, Link, Received};
use mcpvisor_config::ServerDef;
use mcpvisor_gateway::fronts::{FrontCommand, FrontId, Outbound};
use mcpvisor_gateway::{Control, Hub, Outcome, ServerPlan, Settings};
use mcpvisor_jsonrpc::{NOT_STARTED, WORKER_LOST};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Operations per seed.
const OPS: usize = 200;
/// Seeds run when `MCPVISOR_RANDOM_SEEDS` is not set.
const DEFAULT_SEEDS: u64 = 6;
/// The bound on every wait for the gateway.
const WAIT: Duration = Duration::from_secs(20);
/// The servers, in config order; a seed uses the first three or all four.
const NAMES: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
/// The per-client server of the bridged calls.
const ORACLE: &str = "oracle";
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
/// hangs time out and crashed workers come back within a seed; a
/// `modern` one is of 2026-07-28 alone.
fn plan(
    name: &str,
    worker: &Path,
    ack_cancels: bool,
    modern: bool,
    crash_loop_exits: u32,
) -> ServerPlan {
    let mut args = Vec::new();
    if ack_cancels {
        args.push("--ack-cancels".to_owned());
    }
    if modern {
        args.push("--modern".to_owned());
    }
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

/// How a seed's fronts reach the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// [`Hub::run`]: one handshake-era client on stdio pipes.
    Stdio,
    /// [`Hub::serve`]: several fronts on channels, of both eras.
    Fronts,
}

/// Starts the gateway for a seed: its fronts (their eras drawn by `rng`),
/// the hub's task, and what every front receives on one channel, each
/// message with its front.
fn start(
    transport: Transport,
    rng: &mut fastrand::Rng,
    plans: &[ServerPlan],
    control: mpsc::Receiver<Control>,
) -> (Vec<Front>, JoinHandle<Outcome>, mpsc::Receiver<Received>) {
    let settings = Settings {
        list_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let (line_tx, lines) = mpsc::channel(1 << 16);
    match transport {
        Transport::Stdio => {
            let (front_in, hub_in) = tokio::io::duplex(64 * 1024);
            let (hub_out, front_out) = tokio::io::duplex(64 * 1024);
            let hub = tokio::spawn(Hub::run(settings, plans.to_vec(), hub_in, hub_out, control));
            tokio::spawn(async move {
                let mut out = BufReader::new(front_out).lines();
                while let Ok(Some(line)) = out.next_line().await {
                    let r = Received {
                        front: 0,
                        line,
                        related: None,
                    };
                    if line_tx.send(r).await.is_err() {
                        return;
                    }
                }
            });
            let front = Front::new(Era::Handshake, Link::Pipe(front_in));
            (vec![front], hub, lines)
        }
        Transport::Fronts => {
            // At least one of each era, and a third of either.
            let mut eras = vec![Era::Handshake, Era::Modern];
            if rng.bool() {
                eras.push(*rng.choice(&[Era::Handshake, Era::Modern]).expect("an era"));
            }
            rng.shuffle(&mut eras);
            let (tx, fronts_rx) = mpsc::channel(64);
            let mut fronts = Vec::new();
            for (at, era) in eras.into_iter().enumerate() {
                let id = FrontId(at as u64 + 1);
                // Room for all a seed's messages: the hub drops a front
                // that leaves its queue full.
                let (out_tx, mut out) = mpsc::channel::<Outbound>(1 << 14);
                tx.try_send(FrontCommand::Open {
                    front: id,
                    out: out_tx,
                })
                .expect("room for the fronts");
                let line_tx = line_tx.clone();
                tokio::spawn(async move {
                    while let Some(o) = out.recv().await {
                        let r = Received {
                            front: at,
                            line: String::from_utf8(o.line.to_vec()).expect("UTF-8 from the hub"),
                            related: o.related.map(|r| String::from_utf8_lossy(&r).into_owned()),
                        };
                        if line_tx.send(r).await.is_err() {
                            return;
                        }
                    }
                });
                fronts.push(Front::new(era, Link::Channel { id, tx: tx.clone() }));
            }
            // The first front's end ends the gateway, as stdio's does.
            let hub = tokio::spawn(Hub::serve(
                settings,
                plans.to_vec(),
                fronts_rx,
                control,
                Some(FrontId(1)),
            ));
            (fronts, hub, lines)
        }
    }
}

/// A front's start: a handshake-era front initializes, a 2026-07-28 one
/// asks `server/discover`; then each lists the tools and finds every
/// server's.
async fn greet(d: &mut Driver, at: usize) {
    let seed = d.seed;
    let first = match d.fronts[at].era {
        Era::Handshake => {
            d.plain(
                at,
                json!("init"),
                "initialize",
                json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"randomized","version":"1"}}),
            )
            .await
        }
        Era::Modern => d.plain(at, json!("discover"), "server/discover", json!({})).await,
    };
    d.wait_until("the first answer", |d| d.answers(at, &first) > 0)
        .await;
    if d.fronts[at].era == Era::Handshake {
        d.send(
            at,
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        )
        .await;
    } else {
        let discovered = d.fronts[at]
            .log
            .iter()
            .find(|m| m["id"] == first)
            .expect("the answer just seen");
        assert!(
            discovered["result"]["supportedVersions"]
                .as_array()
                .is_some_and(|v| v.contains(&json!("2026-07-28"))),
            "seed {seed}, front {at}: {discovered}"
        );
    }
    let list = d.plain(at, json!("tools"), "tools/list", json!({})).await;
    d.wait_until("the tool list", |d| d.answers(at, &list) > 0)
        .await;
    let listed: HashSet<&str> = d.fronts[at]
        .log
        .iter()
        .find(|m| m["id"] == list)
        .and_then(|m| m["result"]["tools"].as_array())
        .expect("a tool list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in &d.names {
        if *name == ORACLE {
            let exposed = format!("{ORACLE}__ask");
            assert!(
                listed.contains(exposed.as_str()),
                "seed {seed}, front {at}: {exposed} not listed"
            );
            continue;
        }
        for tool in ["echo", "sleep", "hang", "crash", "whoami"] {
            let exposed = format!("{name}__{tool}");
            assert!(
                listed.contains(exposed.as_str()),
                "seed {seed}, front {at}: {exposed} not listed"
            );
        }
    }
}

/// The server that 2026-07-28 fronts' bridged calls go to: each front gets
/// a worker of its own (so a worker's request to the client is its
/// front's), and a call waits for the client's retry longer than the
/// others' calls wait for anything.
fn oracle(worker: &Path) -> ServerPlan {
    let mut plan = plan(ORACLE, worker, false, false, 1000);
    plan.per_client = true;
    plan.session.request_timeout = Duration::from_secs(10);
    plan
}

async fn run_seed(seed: u64, worker: &Path) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let count = 3 + (seed % 2) as usize;
    let mut names: Vec<String> = NAMES[..count].iter().map(|s| s.to_string()).collect();
    // Some seeds let a server crash-loop into its failed state.
    let crash_loops = seed % 4 == 3;
    let crash_loop_exits = if crash_loops { 3 } else { 1000 };
    let mut plans: Vec<ServerPlan> = names
        .iter()
        .map(|name| plan(name, worker, rng.bool(), rng.bool(), crash_loop_exits))
        .collect();
    // A third of the seeds speak stdio, the rest through fronts of both
    // eras at once, with the bridged calls' server.
    let transport = if seed % 3 == 0 {
        Transport::Stdio
    } else {
        Transport::Fronts
    };
    let oracle_at = (transport == Transport::Fronts).then(|| {
        names.push(ORACLE.to_owned());
        plans.push(oracle(worker));
        names.len() - 1
    });
    let (control_tx, control) = mpsc::channel(4);
    let (fronts, hub, lines) = start(transport, &mut rng, &plans, control);
    let mut d = Driver {
        seed,
        rng,
        names,
        fronts,
        lines,
        calls: Vec::new(),
        disruptions: Vec::new(),
        crash_loops,
        frozen: None,
        plans,
        control: control_tx,
        shared_ids: 0,
        oracle: oracle_at,
    };
    for at in 0..d.fronts.len() {
        greet(&mut d, at).await;
    }

    // At least OPS operations, and none of the servers left frozen.
    let mut n = 0;
    while n < OPS || d.frozen.is_some() {
        d.random_op(n).await;
        n += 1;
    }
    d.wait_until("an answer to every call not cancelled", Driver::settled)
        .await;
    // Closing the fronts, the first last, ends the gateway once nothing is
    // left in flight.
    for f in d.fronts.iter_mut().rev() {
        f.close().await;
    }
    let outcome = tokio::time::timeout(WAIT, hub)
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the gateway did not end"))
        .expect("the gateway's task");
    assert_eq!(outcome, Outcome::ClientClosed, "seed {seed}");
    // Every front's output ends with the gateway.
    loop {
        match tokio::time::timeout(WAIT, d.lines.recv()).await {
            Ok(Some(r)) => d.take(r),
            Ok(None) => break,
            Err(_) => panic!("seed {seed}: the fronts' output did not end"),
        }
    }

    let mut answered_at = HashMap::new();
    for at in 0..d.fronts.len() {
        let check = Checker::new(&d, at);
        check.plain_answers_come_once();
        let answered = check.answers_match_calls();
        check.progress_is_the_calls_own(&answered);
        answered_at.extend(answered);
    }
    check::pids_stay_with_their_server(&d, &answered_at);
    // What the seed exercised, for `--nocapture`.
    let count = |f: &dyn Fn(&Value) -> bool| {
        d.fronts
            .iter()
            .flat_map(|fr| &fr.log)
            .filter(|m| f(m))
            .count()
    };
    let eras: Vec<Era> = d.fronts.iter().map(|f| f.era).collect();
    let modern: Vec<&str> = d
        .plans
        .iter()
        .filter(|p| p.def.args.iter().any(|a| a == "--modern"))
        .map(|p| p.name.as_str())
        .collect();
    eprintln!(
        "seed {seed}: {transport:?} {eras:?}, 2026-07-28 servers {modern:?}: {} calls ({} cancelled, {} under an id in flight on another front, {} bridged), {} crashes, kills and restarts; {} results, {} lost, {} not started, {} progress",
        d.calls.len(),
        d.calls.iter().filter(|c| c.barrier.is_some()).count(),
        d.shared_ids,
        d.calls
            .iter()
            .filter(|c| matches!(c.tool, driver::Tool::Retry { .. }))
            .count(),
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
