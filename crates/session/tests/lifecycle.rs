//! State-machine tests of the session on paused time, with in-process workers.

mod support;

use std::time::Duration;

use mcpvisor_session::{CancelAckPolicy, Config, Outcome};
use serde_json::{Value, json};
use support::{Behaviour, Client, TestSpawner, config};

fn methods_of(received: &[(u64, Value)], generation: u64) -> Vec<String> {
    received
        .iter()
        .filter(|(g, _)| *g == generation)
        .map(|(_, m)| {
            m.get("method")
                .and_then(Value::as_str)
                .unwrap_or("response")
                .to_owned()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn ids_round_trip_exactly_and_are_remapped_for_the_worker() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    for id in ["1", "1.0", "\"1\"", "18446744073709551616", "-5", "\"ü\""] {
        c.send_raw(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo"}}}}"#
        ))
        .await;
        let line = c.rx.next_line().await.expect("read").expect("line");
        assert!(
            line.contains(&format!("\"id\":{id}")),
            "id {id} came back as {line}"
        );
    }
    // The worker only ever saw mcpvisor's own integer ids.
    for (_, m) in spawner.received() {
        if let Some(id) = m.get("id") {
            assert!(id.is_u64(), "worker saw id {id}");
        }
    }
    assert_eq!(c.close().await, Outcome::ClientClosed);
}

#[tokio::test(start_paused = true)]
async fn a_burst_reaches_the_worker_in_slices_not_whole() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    let before = spawner.stdin_reads.lock().expect("reads").len();
    // 64 calls in one write: the session reads them all at once.
    let burst: Vec<String> = (1..=64)
        .map(|id| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"n":{id}}}}}}}"#
            )
        })
        .collect();
    c.send_raw(&burst.join("\n")).await;
    let mut ids: Vec<u64> = Vec::new();
    for _ in 0..64 {
        ids.push(c.recv().await["id"].as_u64().expect("an integer id"));
    }
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=64).collect::<Vec<u64>>(),
        "every call answered once"
    );
    // The worker had the first calls before the session had taken the
    // last: what reached it came in several reads, none with most of it.
    let reads = spawner.stdin_reads.lock().expect("reads")[before..].to_vec();
    let burst_bytes: u64 = reads.iter().sum();
    assert!(
        reads.len() >= 4,
        "the burst came in {} reads: {reads:?}",
        reads.len()
    );
    assert!(
        reads.iter().all(|&n| n * 2 < burst_bytes),
        "one read took most of the burst: {reads:?}"
    );
    assert_eq!(c.close().await, Outcome::ClientClosed);
}

#[tokio::test(start_paused = true)]
async fn no_head_of_line_blocking_responses_in_completion_order() {
    let mut c = Client::start(config(), TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.send_call(json!("slow"), "sleep", json!({"ms": 5000}))
        .await;
    c.send_call(json!("fast"), "echo", json!({})).await;
    assert_eq!(c.recv().await["id"], "fast");
    assert_eq!(c.recv().await["id"], "slow");
}

#[tokio::test(start_paused = true)]
async fn notifications_never_get_a_response() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"}))
        .await;
    assert_eq!(c.call(json!(9), "echo", json!({})).await["id"], 9);
    assert!(c.recv_within(Duration::from_secs(5)).await.is_none());
    assert!(
        methods_of(&spawner.received(), 1).contains(&"notifications/roots/list_changed".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn worker_death_fails_in_flight_once_and_the_handshake_is_replayed() {
    let spawner = TestSpawner::new(Behaviour {
        strict: true,
        ..Behaviour::default()
    });
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    c.send_call(json!("a"), "hang", json!({})).await;
    c.send_call(json!("b"), "sleep", json!({"ms": 60_000}))
        .await;
    let crash = c.call(json!("c"), "crash", json!({})).await;
    // Three requests were in flight; each fails exactly once with -32010.
    let mut failed = vec![crash];
    failed.push(c.recv().await);
    failed.push(c.recv().await);
    let mut ids: Vec<String> = failed
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
    for r in &failed {
        assert_eq!(r["error"]["code"], -32010, "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .expect("message")
                .contains("inspect state")
        );
        assert_eq!(r["error"]["data"]["exit"]["code"], 3);
        assert_eq!(r["error"]["data"]["phase"], "serving");
    }
    // The strict worker of generation 2 accepts calls: the handshake was replayed.
    let ok = c.call(json!("d"), "echo", json!({})).await;
    assert_eq!(ok["result"]["generation"], 2, "{ok}");
    let gen2: Vec<String> = methods_of(&spawner.received(), 2)
        .into_iter()
        .filter(|m| m != "tools/list")
        .collect();
    assert_eq!(
        gen2,
        ["initialize", "notifications/initialized", "tools/call"]
    );
    // Nothing else arrives: no late answer for a, b or c.
    assert!(c.recv_within(Duration::from_secs(120)).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_request_its_worker_never_delivered_goes_to_the_next_generation() {
    let spawner = TestSpawner::new(Behaviour {
        strict: true,
        ..Behaviour::default()
    });
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    c.send_call(json!("held"), "hang", json!({})).await;
    c.send_call(json!("b"), "bounce", json!({})).await;
    let mut answers = [c.recv().await, c.recv().await];
    answers.sort_by_key(|a| a["id"].to_string());
    let [bounced, held] = answers;
    // It is served once, by generation 2, after the replayed handshake.
    assert_eq!(bounced["id"], "b");
    assert_eq!(bounced["result"]["generation"], 2, "{bounced}");
    // What the worker did hold is lost, once.
    assert_eq!(held["id"], "held");
    assert_eq!(held["error"]["code"], -32010, "{held}");
    let calls = |g| {
        methods_of(&spawner.received(), g)
            .into_iter()
            .filter(|m| m == "tools/call")
            .count()
    };
    assert_eq!((calls(1), calls(2)), (2, 1));
    assert!(c.recv_within(Duration::from_secs(120)).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_modern_client_gets_no_injected_handshake() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    assert_eq!(
        c.call(json!(1), "crash", json!({})).await["error"]["code"],
        -32010
    );
    assert_eq!(
        c.call(json!(2), "echo", json!({})).await["result"]["generation"],
        2
    );
    assert_eq!(methods_of(&spawner.received(), 2), ["tools/call"]);
}

#[tokio::test(start_paused = true)]
async fn a_failed_replay_counts_as_a_crash_and_a_reload_recovers() {
    let cfg = Config {
        crash_loop_exits: 2,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    spawner.behaviour.lock().expect("b").hang_on_initialize = true;
    c.call(json!(1), "crash", json!({})).await;
    // Generation 1 crashed at once, generation 2 hangs in the replayed
    // initialize: two quick ends in a row are a crash loop here.
    let r = c.call(json!(2), "echo", json!({})).await;
    assert_eq!(r["error"]["code"], -32011, "{r}");
    assert_eq!(r["error"]["data"]["phase"], "initialize", "{r}");
    let reason = r["error"]["data"]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("crash-looping") && reason.contains("initialize"),
        "{reason}"
    );
    assert_eq!(spawner.generations(), [1, 2]);
    spawner.behaviour.lock().expect("b").hang_on_initialize = false;
    c.control
        .send(mcpvisor_session::Control::Reload("test"))
        .await
        .expect("control");
    // Let the session take the reload in before the next request.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        c.call(json!(3), "echo", json!({})).await["result"]["generation"],
        3
    );
}

#[tokio::test(start_paused = true)]
async fn server_requests_get_fresh_ids_and_answers_go_back_to_the_asker() {
    let mut c = Client::start(config(), TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.send_call(json!(1), "ask", json!({"method": "roots/list"}))
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "roots/list");
    let ask_id = ask["id"].clone();
    c.send(json!({"jsonrpc":"2.0","id":ask_id,"result":{"roots":[]}}))
        .await;
    let done = c.recv().await;
    assert_eq!(done["id"], 1);
    // The worker saw its own id (0) in the answer, not mcpvisor's.
    assert_eq!(done["result"]["answer"]["id"], 0);
    assert_eq!(done["result"]["answer"]["result"], json!({"roots": []}));
}

#[tokio::test(start_paused = true)]
async fn server_requests_of_a_dead_generation_are_cancelled_towards_the_client() {
    let mut c = Client::start(config(), TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.send_call(json!(1), "ask", json!({"method": "sampling/createMessage"}))
        .await;
    let ask = c.recv().await;
    c.call(json!(2), "crash", json!({})).await;
    let mut seen = vec![c.recv().await];
    seen.push(c.recv().await);
    let cancel = seen
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .expect("a cancel for the orphaned server request");
    assert_eq!(cancel["params"]["requestId"], ask["id"]);
    // A late answer from the client is dropped, not sent to generation 2.
    c.send(json!({"jsonrpc":"2.0","id":ask["id"],"result":{}}))
        .await;
    assert_eq!(c.call(json!(3), "echo", json!({})).await["id"], 3);
}

#[tokio::test(start_paused = true)]
async fn client_cancel_means_no_response_and_reaches_the_worker_translated() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    c.send_call(json!("x"), "sleep", json!({"ms": 1000})).await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}}))
        .await;
    // The worker answers after a second anyway; the answer is dropped.
    assert!(c.recv_within(Duration::from_secs(5)).await.is_none());
    let received = spawner.received();
    let call_id = received
        .iter()
        .find(|(_, m)| m["method"] == "tools/call")
        .map(|(_, m)| m["id"].clone())
        .expect("call reached worker");
    let cancel = received
        .iter()
        .find(|(_, m)| m["method"] == "notifications/cancelled")
        .expect("cancel reached worker");
    assert_eq!(cancel.1["params"]["requestId"], call_id);
}

#[tokio::test(start_paused = true)]
async fn cancel_keeps_the_slot_until_ack_and_ack_is_never_forwarded() {
    let cfg = Config {
        max_in_flight: 1,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour {
        ack_cancels: true,
        ..Behaviour::default()
    });
    let mut c = Client::start(cfg, spawner);
    c.initialize().await;
    c.send_call(json!(1), "hang", json!({})).await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}))
        .await;
    // Once the ack arrived the slot is free again.
    let r = c.call(json!(2), "echo", json!({})).await;
    assert_eq!(r["id"], 2, "{r}");
    assert!(c.recv_within(Duration::from_secs(30)).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn cancel_grace_without_ack_releases_a_non_acking_worker_slot() {
    let cfg = Config {
        max_in_flight: 1,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    c.send_call(json!(1), "hang", json!({})).await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}))
        .await;
    // Before the grace is over, the slot is still taken.
    assert_eq!(
        c.call(json!(2), "echo", json!({})).await["error"]["code"],
        -32011
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = c.call(json!(3), "echo", json!({})).await;
    assert_eq!(r["result"]["generation"], 1, "same worker kept: {r}");
}

#[tokio::test(start_paused = true)]
async fn cancel_grace_stops_a_worker_that_speaks_acks_but_missed_one() {
    let cfg = Config {
        cancel_ack: CancelAckPolicy::Stop,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    c.send_call(json!(1), "hang", json!({})).await;
    c.send_call(json!(2), "hang", json!({})).await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}))
        .await;
    // The grace runs out, the generation is stopped: request 2 fails once.
    let r = c.recv().await;
    assert_eq!(r["id"], 2);
    assert_eq!(r["error"]["code"], -32010);
    assert_eq!(
        c.call(json!(3), "echo", json!({})).await["result"]["generation"],
        2
    );
}

#[tokio::test(start_paused = true)]
async fn initialize_is_never_cancelled() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}))
        .await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}))
        .await;
    assert_eq!(c.recv().await["id"], 0);
    assert!(
        !spawner
            .received()
            .iter()
            .any(|(_, m)| m["method"] == "notifications/cancelled")
    );
}

#[tokio::test(start_paused = true)]
async fn bounds_answer_not_started() {
    let cfg = Config {
        max_in_flight: 2,
        ..config()
    };
    let mut c = Client::start(cfg, TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.send_call(json!(1), "hang", json!({})).await;
    let dup = c.call(json!(1), "echo", json!({})).await;
    assert_eq!(dup["error"]["code"], -32011);
    assert!(
        dup["error"]["message"]
            .as_str()
            .expect("m")
            .contains("still in flight")
    );
    c.send_call(json!(2), "hang", json!({})).await;
    let full = c.call(json!(3), "echo", json!({})).await;
    assert_eq!(full["error"]["code"], -32011);
    assert!(
        full["error"]["message"]
            .as_str()
            .expect("m")
            .contains("--max-in-flight")
    );
}

#[tokio::test(start_paused = true)]
async fn unavailable_worker_is_not_started_with_the_reason() {
    let spawner = TestSpawner::new(Behaviour {
        spawn_error: Some("command not found: nope".into()),
        ..Behaviour::default()
    });
    let mut c = Client::start(config(), spawner);
    let r = c.call(json!(1), "echo", json!({})).await;
    assert_eq!(r["error"]["code"], -32011);
    assert_eq!(r["error"]["data"]["reason"], "command not found: nope");
}

#[tokio::test(start_paused = true)]
async fn request_timeout_answers_and_cancels_progress_extends_and_ceiling_caps() {
    let cfg = Config {
        request_timeout: Duration::from_secs(10),
        request_ceiling: Duration::from_secs(60),
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    let start = tokio::time::Instant::now();
    let r = c.call(json!(1), "hang", json!({})).await;
    assert_eq!(r["error"]["code"], -32001);
    assert_eq!(start.elapsed().as_secs(), 10);
    assert!(
        spawner
            .received()
            .iter()
            .any(|(_, m)| m["method"] == "notifications/cancelled")
    );
    // Progress every 5 s keeps a 30 s call alive past the 10 s idle timeout.
    c.send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":30000,"progress_ms":5000},"_meta":{"progressToken":"p2"}}}))
        .await;
    let mut progress = 0;
    let done = loop {
        let m = c.recv().await;
        if m["method"] == "notifications/progress" {
            progress += 1;
            continue;
        }
        break m;
    };
    assert_eq!(done["id"], 2, "{done}");
    assert!(done.get("result").is_some(), "{done}");
    assert_eq!(progress, 6);
    // But not past the ceiling.
    c.send(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":600000,"progress_ms":5000},"_meta":{"progressToken":"p3"}}}))
        .await;
    let start = tokio::time::Instant::now();
    let done = loop {
        let m = c.recv().await;
        if m["method"] != "notifications/progress" {
            break m;
        }
    };
    assert_eq!(done["error"]["code"], -32001);
    assert!(
        done["error"]["message"]
            .as_str()
            .expect("m")
            .contains("ceiling")
    );
    assert_eq!(start.elapsed().as_secs(), 60);
}

#[tokio::test(start_paused = true)]
async fn bad_input_gets_deterministic_answers_and_the_session_goes_on() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.send_raw("this is not json").await;
    let r = c.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (Value::Null, json!(-32700))
    );
    c.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#)
        .await;
    let r = c.recv().await;
    assert_eq!(r["error"]["code"], -32600);
    assert!(r["error"]["message"].as_str().expect("m").contains("batch"));
    c.send_raw(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
        .await;
    assert_eq!(c.recv().await["error"]["code"], -32600);
    // Garbage from the worker never reaches the client (default: dropped).
    let r = c.call(json!(5), "garbage", json!({})).await;
    assert_eq!(r["id"], 5);
    assert_eq!(r["result"]["generation"], 1);
}

#[tokio::test(start_paused = true)]
async fn garbage_restart_policy_replaces_the_worker() {
    let cfg = Config {
        on_garbage: mcpvisor_session::GarbagePolicy::Restart,
        ..config()
    };
    let mut c = Client::start(cfg, TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    let r = c.call(json!(5), "garbage", json!({})).await;
    assert_eq!(r["error"]["code"], -32010, "{r}");
    assert_eq!(
        c.call(json!(6), "echo", json!({})).await["result"]["generation"],
        2
    );
}

#[tokio::test(start_paused = true)]
async fn oversize_messages_have_a_defined_outcome_both_ways() {
    let cfg = Config {
        max_message_bytes: 4096,
        ..config()
    };
    let mut c = Client::start(cfg, TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    let big = "x".repeat(10_000);
    c.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{{"name":"echo","arguments":{{"t":"{big}"}}}}}}"#))
        .await;
    let r = c.recv().await;
    assert_eq!(r["id"], "big");
    assert_eq!(r["error"]["code"], -32600);
    assert!(
        r["error"]["message"]
            .as_str()
            .expect("m")
            .contains("--max-message-bytes")
    );
    // The session goes on.
    assert_eq!(
        c.call(json!(2), "echo", json!({"t": "small"})).await["id"],
        2
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_control_stops_the_session() {
    let mut c = Client::start(config(), TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.control
        .send(mcpvisor_session::Control::Shutdown)
        .await
        .expect("control");
    let outcome = tokio::time::timeout(Duration::from_secs(30), c.session)
        .await
        .expect("ends")
        .expect("task");
    assert_eq!(outcome, Outcome::Shutdown);
}

#[tokio::test(start_paused = true)]
async fn client_eof_drains_in_flight_requests_first() {
    let mut c = Client::start(config(), TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.send_call(json!(1), "sleep", json!({"ms": 1000})).await;
    let (line, outcome) = c.hang_up_and_read().await;
    assert!(line.contains("\"slept\":1000"), "{line}");
    assert_eq!(outcome, Outcome::ClientClosed);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_request_does_not_hold_up_shutdown_after_eof() {
    let mut c = Client::start(config(), TestSpawner::new(Behaviour::default()));
    c.initialize().await;
    c.send_call(json!(1), "hang", json!({})).await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}))
        .await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let start = tokio::time::Instant::now();
    assert_eq!(c.close().await, Outcome::ClientClosed);
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_left_gets_no_restarted_worker() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    c.send_call(json!(1), "crash", json!({})).await;
    let (lost, outcome) = c.hang_up_and_read().await;
    assert!(lost.contains("-32010"), "{lost}");
    assert_eq!(outcome, Outcome::ClientClosed);
    assert_eq!(
        spawner.generations(),
        [1],
        "no restart for a departed client"
    );
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_stops_reading_its_stdin_is_stopped_after_the_write_timeout() {
    let cfg = Config {
        write_timeout: Duration::from_secs(3),
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour {
        never_read: true,
        ..Behaviour::default()
    });
    let mut c = Client::start(cfg, spawner.clone());
    // More than the pipe holds, so the write stalls.
    let big = "z".repeat(200_000);
    let start = tokio::time::Instant::now();
    let r = c.call(json!(1), "echo", json!({"t": big})).await;
    assert_eq!(r["error"]["code"], -32010, "{r}");
    assert!(
        r["error"]["data"]["reason"]
            .as_str()
            .expect("reason")
            .contains("no progress"),
        "{r}"
    );
    assert_eq!(start.elapsed().as_secs(), 3);
}

fn generations_that_saw(spawner: &TestSpawner, id: Value) -> Vec<u64> {
    // The worker sees mcpvisor's ids; the client's id travels in the arguments.
    spawner
        .received()
        .iter()
        .filter(|(_, m)| m["method"] == "tools/call" && m["params"]["arguments"]["id"] == id)
        .map(|(g, _)| *g)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_request_that_never_reached_the_worker_waits_for_the_next_generation() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    let r = c.call(json!(1), "close_stdin", json!({})).await;
    assert_eq!(r["result"]["generation"], 1, "{r}");
    // The worker still runs, but not a byte of this call gets through to it.
    let r = c.call(json!(2), "echo", json!({"id": 2})).await;
    assert_eq!(
        r["result"]["generation"], 2,
        "not failed, not replayed: {r}"
    );
    assert_eq!(generations_that_saw(&spawner, json!(2)), [2]);
}

#[tokio::test(start_paused = true)]
async fn a_request_left_unread_in_the_pipe_of_a_dead_worker_waits_for_the_next_generation() {
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    // The worker stops reading, and its end shows a second later: what is
    // written meanwhile lies in the pipe, taken by the pipe but never read.
    c.send_call(json!("dying"), "vanish", json!({"ms": 1000}))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.send_call(json!("after"), "echo", json!({"id": "after"}))
        .await;
    let mut answers = [c.recv().await, c.recv().await];
    answers.sort_by_key(|a| a["id"].to_string());
    let [after, dying] = answers;
    assert_eq!(after["id"], "after");
    assert_eq!(
        after["result"]["generation"], 2,
        "not failed, not replayed: {after}"
    );
    assert_eq!(generations_that_saw(&spawner, json!("after")), [2]);
    // What the worker did read is lost, once.
    assert_eq!(dying["id"], "dying");
    assert_eq!(dying["error"]["code"], -32010, "{dying}");
    assert_eq!(dying["error"]["data"]["generation"], 1, "{dying}");
    assert!(c.recv_within(Duration::from_secs(60)).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_stalled_write_loses_the_request_partly_through_and_not_the_one_behind_it() {
    let cfg = Config {
        write_timeout: Duration::from_secs(3),
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour {
        never_read: true,
        ..Behaviour::default()
    });
    let mut c = Client::start(cfg, spawner.clone());
    // More than the pipe holds: the write stalls partway through.
    let big = "z".repeat(200_000);
    c.send_call(json!("big"), "echo", json!({"t": big})).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    spawner.behaviour.lock().expect("b").never_read = false;
    c.send_call(json!("behind"), "echo", json!({"id": "behind"}))
        .await;
    let r = c.recv().await;
    assert_eq!(r["id"], "big", "{r}");
    assert_eq!(r["error"]["code"], -32010, "partly written: {r}");
    let r = c.recv().await;
    assert_eq!(r["id"], "behind", "{r}");
    assert_eq!(r["result"]["generation"], 2, "{r}");
    assert_eq!(generations_that_saw(&spawner, json!("behind")), [2]);
}

#[tokio::test(start_paused = true)]
async fn a_generation_stopped_while_its_writer_is_stuck_gives_back_what_it_never_wrote() {
    let cfg = Config {
        write_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(5),
        cancel_ack: CancelAckPolicy::Stop,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour {
        never_read: true,
        ..Behaviour::default()
    });
    let mut c = Client::start(cfg, spawner.clone());
    let big = "z".repeat(200_000);
    c.send_call(json!("big"), "echo", json!({"t": big})).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    spawner.behaviour.lock().expect("b").never_read = false;
    for id in ["behind-1", "behind-2"] {
        c.send_call(json!(id), "echo", json!({"id": id})).await;
    }
    // "big" times out; when its cancel grace is over the stuck generation is
    // stopped, long before the write timeout. The two behind it never left
    // the queue: generation 2 gets them, in the order they came.
    let r = c.recv().await;
    assert_eq!(r["id"], "big", "{r}");
    assert_eq!(r["error"]["code"], -32001, "{r}");
    for id in ["behind-1", "behind-2"] {
        let r = c.recv().await;
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["result"]["generation"], 2, "{r}");
    }
    let order: Vec<Value> = spawner
        .received()
        .iter()
        .filter(|(g, m)| *g == 2 && m["method"] == "tools/call")
        .map(|(_, m)| m["params"]["arguments"]["id"].clone())
        .collect();
    assert_eq!(order, [json!("behind-1"), json!("behind-2")]);
}

// === a client that stops reading ===

fn worker_saw_a_cancel(spawner: &TestSpawner) -> bool {
    spawner
        .received()
        .iter()
        .any(|(_, m)| m["method"] == "notifications/cancelled")
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_does_not_stop_the_timers() {
    let cfg = Config {
        request_timeout: Duration::from_secs(10),
        client_write_timeout: Duration::from_secs(600),
        max_in_flight: 4096,
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    // The pipe to the client holds 64 bytes, and the client never reads it.
    let mut c = Client::start_with_pipe(cfg, spawner.clone(), 64);
    c.send_call(json!("stuck"), "hang", json!({})).await;
    // More answers than the session's queue to the client holds.
    for i in 0..1500 {
        c.send_call(json!(i), "echo", json!({})).await;
    }
    tokio::time::sleep(Duration::from_millis(9_900)).await;
    assert!(!worker_saw_a_cancel(&spawner));
    // The request timeout fires on time: the worker is sent the cancel.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(worker_saw_a_cancel(&spawner));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_ends_the_session_after_the_client_write_timeout() {
    let cfg = Config {
        client_write_timeout: Duration::from_secs(5),
        ..config()
    };
    let spawner = TestSpawner::new(Behaviour::default());
    let mut c = Client::start_with_pipe(cfg, spawner.clone(), 64);
    let start = tokio::time::Instant::now();
    c.send_call(json!(1), "echo", json!({"t": "x".repeat(1000)}))
        .await;
    let outcome = tokio::time::timeout(Duration::from_secs(60), &mut c.session)
        .await
        .expect("the session ends")
        .expect("session task");
    assert_eq!(outcome, Outcome::ClientGone);
    assert_eq!(start.elapsed().as_secs(), 5);
    assert_eq!(spawner.ended(), [1], "the worker was stopped");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_reads_late_gets_every_answer_in_order() {
    let cfg = Config {
        max_in_flight: 4096,
        ..config()
    };
    let mut c = Client::start_with_pipe(cfg, TestSpawner::new(Behaviour::default()), 64);
    for i in 0..3000 {
        c.send_call(json!(i), "echo", json!({})).await;
    }
    // The client reads nothing for a while: every queue towards it fills.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for i in 0..3000 {
        assert_eq!(c.recv().await["id"], i);
    }
    assert_eq!(c.close().await, Outcome::ClientClosed);
}
