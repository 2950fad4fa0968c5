//! Seeded random traffic: requests, cancels, crashes, hangs and garbage, with
//! the session's invariants checked over everything that came out.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use mcpvisor_session::Config;
use serde_json::{Value, json};
use support::{Behaviour, Client, TestSpawner, config};

async fn run_seed(seed: u64, ops: usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let cfg = Config {
        request_timeout: Duration::from_secs(2),
        cancel_grace: Duration::from_millis(500),
        shutdown_drain: Duration::from_secs(120),
        max_in_flight: 16,
        crash_loop_exits: if seed % 3 == 0 { 3 } else { 1000 },
        reload_drain_timeout: Duration::from_secs(1),
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour {
        strict: true,
        ack_cancels: seed % 2 == 0,
        ..Behaviour::default()
    });
    let c = Client::start(cfg, spawner.clone());
    let Client {
        mut tx,
        rx,
        session,
        control,
    } = { c };
    let reader = tokio::spawn(async move {
        let mut rx = rx;
        let mut out = Vec::new();
        while let Ok(Some(line)) = rx.next_line().await {
            out.push(line);
        }
        out
    });
    let send = async |tx: &mut tokio::io::DuplexStream, v: String| {
        tokio::io::AsyncWriteExt::write_all(tx, format!("{v}\n").as_bytes())
            .await
            .expect("session stdin");
    };
    send(&mut tx, json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18"}}).to_string()).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    send(
        &mut tx,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string(),
    )
    .await;

    let mut sent: Vec<u64> = Vec::new();
    let mut cancelled: HashSet<u64> = HashSet::new();
    let mut garbage_lines = 0;
    for n in 0..ops as u64 {
        let call = |tool: &str, args: Value| {
            json!({"jsonrpc":"2.0","id":n,"method":"tools/call","params":{"name":tool,"arguments":args}}).to_string()
        };
        match rng.u32(..100) {
            0..40 => send(&mut tx, call("echo", json!({"n": n}))).await,
            40..55 => {
                send(
                    &mut tx,
                    call("sleep", json!({"n": n, "ms": rng.u64(..3000)})),
                )
                .await
            }
            55..60 => send(&mut tx, call("hang", json!({"n": n}))).await,
            60..70 if !sent.is_empty() => {
                let target = sent[rng.usize(..sent.len())];
                cancelled.insert(target);
                send(&mut tx, json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":target}}).to_string()).await;
                continue;
            }
            70..74 => send(&mut tx, call("crash", json!({"n": n}))).await,
            74..79 => send(&mut tx, call("garbage", json!({"n": n}))).await,
            79..84 => {
                send(
                    &mut tx,
                    json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"})
                        .to_string(),
                )
                .await;
                continue;
            }
            88..91 => {
                control
                    .send(mcpvisor_session::Control::Reload("random"))
                    .await
                    .expect("control");
                continue;
            }
            84..88 => {
                garbage_lines += 1;
                send(&mut tx, "{not json".to_owned()).await;
                continue;
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(rng.u64(..1500))).await;
                continue;
            }
        }
        sent.push(n);
    }
    drop(tx);
    let outcome = tokio::time::timeout(Duration::from_secs(600), session)
        .await
        .expect("session ends")
        .expect("session task");
    assert_eq!(outcome, mcpvisor_session::Outcome::ClientClosed);
    let lines = reader.await.expect("reader");

    // 1. Only valid JSON-RPC on the client's stdout.
    let mut answers: HashMap<u64, usize> = HashMap::new();
    let mut parse_errors = 0;
    for line in &lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("seed {seed}: invalid JSON {line:?}: {e}"));
        assert_eq!(v["jsonrpc"], "2.0", "seed {seed}: {line}");
        let is_response =
            v.get("id").is_some() && (v.get("result").is_some() || v.get("error").is_some());
        assert!(
            is_response || v.get("method").is_some(),
            "seed {seed}: not JSON-RPC: {line}"
        );
        if v["error"]["code"] == -32700 {
            parse_errors += 1;
        }
        if let Some(n) = v["id"].as_u64().filter(|_| is_response) {
            *answers.entry(n).or_default() += 1;
        }
    }
    assert_eq!(
        parse_errors, garbage_lines,
        "seed {seed}: one parse error per garbage line"
    );
    // 2. At most once; exactly once unless cancelled.
    for n in &sent {
        let count = answers.get(n).copied().unwrap_or(0);
        assert!(
            count <= 1,
            "seed {seed}: request {n} answered {count} times"
        );
        if !cancelled.contains(n) {
            assert_eq!(count, 1, "seed {seed}: request {n} never answered");
        }
    }
    // 3. No request reached two workers (or one worker twice).
    let mut reached: HashMap<u64, Vec<u64>> = HashMap::new();
    for (generation, m) in spawner.received() {
        if let Some(n) = m["params"]["arguments"]["n"].as_u64() {
            reached.entry(n).or_default().push(generation);
        }
    }
    for (n, gens) in reached {
        assert_eq!(
            gens.len(),
            1,
            "seed {seed}: request {n} reached generations {gens:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn random_traffic_keeps_the_invariants() {
    let seeds: u64 = std::env::var("MCPVISOR_RANDOM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    for seed in 0..seeds {
        run_seed(seed, 300).await;
    }
}
