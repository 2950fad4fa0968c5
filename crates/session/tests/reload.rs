//! Reload, restart policy and list refresh, on paused time.

mod support;

use std::time::Duration;

use mcpvisor_session::{Config, Control, RestartMode};
use serde_json::{Value, json};
use support::{Behaviour, Client, TestSpawner, config};

fn tools(names: &[&str]) -> Behaviour {
    Behaviour {
        tools: names.iter().map(|s| (*s).to_owned()).collect(),
        ..Behaviour::default()
    }
}

/// Asks for a reload and lets the session take it in before the test sends
/// more client traffic (the two arrive on different channels).
async fn reload(c: &Client) {
    c.control
        .send(Control::Reload("test"))
        .await
        .expect("control");
    tokio::time::sleep(Duration::from_millis(1)).await;
}

fn list_calls(spawner: &TestSpawner, generation: u64) -> usize {
    spawner
        .received()
        .iter()
        .filter(|(g, m)| *g == generation && m["method"] == "tools/list")
        .count()
}

#[tokio::test(start_paused = true)]
async fn initialize_result_advertises_list_changed_only_for_declared_lists() {
    let mut c = Client::start(config(), TestSpawner::new(tools(&["a"])));
    let init = c.initialize().await;
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true);
    assert!(init["result"]["capabilities"].get("prompts").is_none());
    assert!(init["result"]["capabilities"].get("resources").is_none());
    assert_eq!(init["id"], 0);
}

#[tokio::test(start_paused = true)]
async fn reload_when_idle_is_eager_and_announces_changed_lists_only() {
    let spawner = TestSpawner::new(Behaviour {
        prompts: true,
        ..tools(&["a", "b", "c"])
    });
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    // Same lists: a reload sends nothing.
    reload(&c).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(spawner.generations(), [1, 2], "eager: no request needed");
    assert!(c.recv_within(Duration::from_secs(5)).await.is_none());
    // Pagination is followed: three tools, two per page.
    assert_eq!(list_calls(&spawner, 2), 2);
    // A tool is added: tools/list_changed, and only that one.
    spawner.behaviour.lock().expect("b").tools.push("d".into());
    reload(&c).await;
    let note = c.recv().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    assert!(c.recv_within(Duration::from_secs(5)).await.is_none());
    let r = c.call(json!(1), "d", json!({})).await;
    assert_eq!(r["result"]["generation"], 3);
}

#[tokio::test(start_paused = true)]
async fn reload_with_a_call_in_flight_lets_it_finish_and_queues_new_requests() {
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    c.send_call(json!("slow"), "sleep", json!({"ms": 3000}))
        .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    reload(&c).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    c.send_call(json!("new"), "echo", json!({})).await;
    let first = c.recv().await;
    assert_eq!(first["id"], "slow");
    assert_eq!(
        first["result"]["generation"], 1,
        "finished on the old worker"
    );
    let second = c.recv().await;
    assert_eq!(second["id"], "new");
    assert_eq!(
        second["result"]["generation"], 2,
        "served by the new worker"
    );
    // The new request never went to the old worker.
    assert!(
        !spawner
            .received()
            .iter()
            .any(|(g, m)| *g == 1 && m["params"]["name"] == "echo")
    );
}

#[tokio::test(start_paused = true)]
async fn reload_drain_timeout_fails_leftovers_once() {
    let cfg = Config {
        reload_drain_timeout: Duration::from_secs(5),
        ..config()
    };
    let mut c = Client::start(cfg, TestSpawner::new(tools(&["a"])));
    c.initialize().await;
    c.send_call(json!("stuck"), "hang", json!({})).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let start = tokio::time::Instant::now();
    reload(&c).await;
    let r = c.recv().await;
    assert_eq!(r["id"], "stuck");
    assert_eq!(r["error"]["code"], -32010);
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_millis(5100),
        "{waited:?}"
    );
    assert_eq!(
        c.call(json!(2), "echo", json!({})).await["result"]["generation"],
        2
    );
}

#[tokio::test(start_paused = true)]
async fn continuous_load_cannot_postpone_a_reload() {
    let mut c = Client::start(config(), TestSpawner::new(tools(&["a"])));
    c.initialize().await;
    for i in 0..5 {
        c.send_call(json!(i), "sleep", json!({"ms": 200})).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    reload(&c).await;
    // Keep sending: everything after the reload lands on generation 2.
    for i in 5..20 {
        c.send_call(json!(i), "sleep", json!({"ms": 200})).await;
    }
    let mut by_gen = std::collections::BTreeMap::<i64, Vec<i64>>::new();
    for _ in 0..20 {
        let r = c.recv().await;
        let generation = r["result"]["generation"].as_i64().expect("answered");
        by_gen
            .entry(generation)
            .or_default()
            .push(r["id"].as_i64().expect("id"));
    }
    let mut old = by_gen[&1].clone();
    old.sort();
    assert_eq!(old, [0, 1, 2, 3, 4]);
    assert_eq!(by_gen[&2].len(), 15);
}

#[tokio::test(start_paused = true)]
async fn crash_restart_is_eager_then_backs_off_then_fails_with_data() {
    let cfg = Config {
        crash_loop_exits: 4,
        failed_cooldown: Duration::from_secs(30),
        stderr_in_errors: true,
        ..config()
    };
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    let t0 = tokio::time::Instant::now();
    c.call(json!(1), "crash", json!({})).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(spawner.generations(), [1, 2], "first restart is immediate");
    assert_eq!(t0.elapsed(), Duration::from_millis(1));
    c.call(json!(2), "crash", json!({})).await;
    // A request during the backoff waits for the next worker, it is not refused.
    let r = c.call(json!(3), "echo", json!({})).await;
    assert_eq!(r["result"]["generation"], 3, "{r}");
    c.call(json!(4), "crash", json!({})).await;
    c.call(json!(5), "crash", json!({})).await;
    // Four quick exits: the failed state, refused at once with the story.
    let r = c.call(json!(6), "echo", json!({})).await;
    assert_eq!(r["error"]["code"], -32011, "{r}");
    let data = &r["error"]["data"];
    assert_eq!(data["exit"]["code"], 3);
    assert_eq!(data["phase"], "serving");
    assert!(data["stderr"].is_array(), "{data}");
    assert!(
        data["reason"]
            .as_str()
            .expect("reason")
            .contains("crash-looping")
    );
    let starts = spawner.generations().len();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        spawner.generations().len(),
        starts,
        "no spinning while failed"
    );
    // After the cooldown it tries again.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(spawner.generations().len(), starts + 1);
    assert_eq!(c.call(json!(7), "echo", json!({})).await["id"], 7);
}

#[tokio::test(start_paused = true)]
async fn a_server_killed_after_serving_a_while_is_restarted_at_once_however_often() {
    let cfg = Config {
        crash_loop_exits: 3,
        ..config()
    };
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    // Killed every 6 s while it serves (as the OOM killer does): each time
    // it was ready and serving, so it is no crash loop and no pause grows.
    for round in 0..6u64 {
        let served = c
            .call(json!(format!("served-{round}")), "echo", json!({}))
            .await;
        assert_eq!(served["result"]["generation"], round + 1, "{served}");
        tokio::time::sleep(Duration::from_secs(6)).await;
        let lost = c
            .call(json!(format!("lost-{round}")), "crash", json!({}))
            .await;
        assert_eq!(lost["error"]["code"], -32010, "round {round}: {lost}");
        let t0 = tokio::time::Instant::now();
        let next = c
            .call(json!(format!("next-{round}")), "echo", json!({}))
            .await;
        assert_eq!(next["result"]["generation"], round + 2, "{next}");
        assert!(
            t0.elapsed() < Duration::from_millis(250),
            "round {round}: waited {:?}",
            t0.elapsed()
        );
    }
    // One that dies as soon as it is ready still counts: the first such
    // exit restarts at once, the second after a pause.
    for (round, least) in [(0, Duration::ZERO), (1, Duration::from_millis(250))] {
        c.call(json!(format!("quick-{round}")), "crash", json!({}))
            .await;
        let t0 = tokio::time::Instant::now();
        let next = c
            .call(json!(format!("after-{round}")), "echo", json!({}))
            .await;
        assert!(next.get("result").is_some(), "{next}");
        assert!(t0.elapsed() >= least, "round {round}: {:?}", t0.elapsed());
        assert!(t0.elapsed() < least + Duration::from_millis(100));
    }
}

#[tokio::test(start_paused = true)]
async fn restart_on_demand_waits_for_the_next_request() {
    let cfg = Config {
        restart: RestartMode::OnDemand,
        ..config()
    };
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    c.call(json!(1), "crash", json!({})).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(spawner.generations(), [1]);
    assert_eq!(
        c.call(json!(2), "echo", json!({})).await["result"]["generation"],
        2
    );
}

#[tokio::test(start_paused = true)]
async fn restart_never_refuses_until_a_reload() {
    let cfg = Config {
        restart: RestartMode::Never,
        ..config()
    };
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    c.call(json!(1), "crash", json!({})).await;
    let r = c.call(json!(2), "echo", json!({})).await;
    assert_eq!(r["error"]["code"], -32011);
    assert!(
        r["error"]["message"]
            .as_str()
            .expect("m")
            .contains("--restart is never")
    );
    reload(&c).await;
    let r = c.call(json!(3), "echo", json!({})).await;
    assert_eq!(r["result"]["generation"], 2, "{r}");
}

#[tokio::test(start_paused = true)]
async fn a_restart_after_a_crash_also_refreshes_lists() {
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    spawner.behaviour.lock().expect("b").tools = vec!["b".into()];
    c.call(json!(1), "crash", json!({})).await;
    let note = c.recv().await;
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    let listed = c.request(json!(2), "tools/list", json!({})).await;
    let names: Vec<&Value> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("b")]);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_pipelines_its_handshake_still_gets_list_changed() {
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(config(), spawner.clone());
    // initialized goes out before the answer to initialize comes back.
    c.send(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}))
        .await;
    c.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    assert_eq!(c.recv().await["id"], 0);
    tokio::time::sleep(Duration::from_millis(10)).await;
    spawner.behaviour.lock().expect("b").tools.push("b".into());
    reload(&c).await;
    assert_eq!(c.recv().await["method"], "notifications/tools/list_changed");
}

#[tokio::test(start_paused = true)]
async fn a_tools_filter_hides_tools_from_lists_and_refuses_calls() {
    let cfg = Config {
        tools: mcpvisor_config::ToolFilter {
            allow: None,
            deny: vec!["b".into()],
            ..Default::default()
        },
        ..config()
    };
    let spawner = TestSpawner::new(tools(&["a", "b"]));
    let mut c = Client::start(cfg, spawner.clone());
    c.initialize().await;
    let listed = c.request(json!("l"), "tools/list", json!({})).await;
    assert_eq!(listed["id"], "l");
    assert_eq!(
        listed["result"]["tools"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(listed["result"]["tools"][0]["name"], "a");
    let refused = c.call(json!("x"), "b", json!({})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        !spawner
            .received()
            .iter()
            .any(|(_, m)| m["params"]["name"] == "b")
    );
    assert!(
        c.call(json!("y"), "a", json!({}))
            .await
            .get("result")
            .is_some()
    );
}

/// Collects log lines written while it is the default subscriber.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_generation_with_other_capabilities_is_reported_and_served() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    {
        let mut b = spawner.behaviour.lock().expect("b");
        b.protocol_version = Some("2025-11-25".into());
        b.prompts = true;
    }
    reload(&c).await;
    let r = c.call(json!(1), "a", json!({})).await;
    assert_eq!(r["result"]["generation"], 2, "still served: {r}");
    let text = String::from_utf8(logs.0.lock().expect("logs").clone()).expect("utf8");
    assert!(
        text.contains("protocol version \"2025-11-25\" instead of \"2025-06-18\""),
        "{text}"
    );
    assert!(
        text.contains("declares capabilities added [\"prompts\"]"),
        "{text}"
    );
    assert!(
        text.contains("the client must reconnect to see it"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_listen_stands_without_a_deadline_and_holds_up_no_reload_nor_the_end() {
    let spawner = TestSpawner::new(tools(&["a"]));
    let mut c = Client::start(config(), spawner.clone());
    c.initialize().await;
    let listen = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}}})
    };
    c.send(listen("l1")).await;
    // Far past the request timeout (30 s): no answer, nothing cancelled.
    assert!(c.recv_within(Duration::from_secs(300)).await.is_none());
    let cancels = |spawner: &TestSpawner| {
        spawner
            .received()
            .iter()
            .filter(|(_, m)| m["method"] == "notifications/cancelled")
            .count()
    };
    assert_eq!(cancels(&spawner), 0);
    // A reload replaces the worker at once: the listen, ended with its
    // process, is answered as lost.
    reload(&c).await;
    let lost = c.recv().await;
    assert_eq!(lost["id"], "l1", "{lost}");
    assert_eq!(
        lost["error"]["code"],
        mcpvisor_jsonrpc::WORKER_LOST,
        "{lost}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(spawner.generations(), [1, 2]);
    // A cancelled listen is over at once: its server owes no answer, and
    // its id is free again (no grace to wait out).
    c.send(listen("l2")).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "l2"}}))
        .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(cancels(&spawner), 1);
    c.send(listen("l2")).await;
    assert!(
        c.recv_within(Duration::from_secs(5)).await.is_none(),
        "the id was still taken"
    );
    // The client leaves with a listen open: the session ends without its
    // drain (5 s).
    let start = tokio::time::Instant::now();
    c.close().await;
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}
