//! Each backend driven in its own era: `server/discover` first, then a
//! 2026-07-28 server with the envelope on every request and discovery as
//! its health check, anything else with `initialize`.

use std::time::Duration;

use serde_json::{Value, json};

use mcpvisor_config::EraChoice;
use mcpvisor_gateway::Settings;
use mcpvisor_gateway::monitor::{Monitor, ServerState};
use mcpvisor_jsonrpc::NOT_STARTED;

use crate::support::{Discover, Gateway, Script, Servers, WAIT, answered_by, plan, until};

const VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

fn modern() -> Script {
    Script {
        tools: vec!["echo".into(), "ask".into(), "crash".into()],
        discover: Discover::Modern,
        ..Script::default()
    }
}

/// What `name`'s workers received of `method`, in order.
fn received(servers: &Servers, name: &str, method: &str) -> Vec<Value> {
    servers
        .seen(name)
        .into_iter()
        .filter(|s| s.message["method"] == method)
        .map(|s| s.message)
        .collect()
}

/// What worker `worker` received, in order.
fn on_worker(servers: &Servers, name: &str, worker: u64) -> Vec<Value> {
    servers
        .seen(name)
        .into_iter()
        .filter(|s| s.worker == worker)
        .map(|s| s.message)
        .collect()
}

fn method_of(m: &Value) -> &str {
    m["method"].as_str().unwrap_or("response")
}

/// The `_meta` a message carried.
fn meta(message: &Value) -> &Value {
    &message["params"]["_meta"]
}

/// A 2026-07-28 request's params: `params` with an envelope in `_meta`.
fn modern_params(mut params: Value, capabilities: Value, client: &str) -> Value {
    params["_meta"] = json!({
        VERSION: "2026-07-28",
        CAPABILITIES: capabilities,
        CLIENT_INFO: {"name": client, "version": "1"},
    });
    params
}

#[tokio::test(start_paused = true)]
async fn a_2026_server_is_driven_with_the_envelope_and_checked_by_discovery() {
    let servers = Servers::default();
    servers.script("m", modern());
    let mut p = plan("m");
    p.health_interval = Some(Duration::from_secs(30));
    let mut gw = Gateway::start(&servers, vec![p]);

    // A client of the handshake era: its requests carry an envelope made
    // from its `initialize`.
    let mut old = gw.open().await;
    let init = old
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}}, "clientInfo": {"name": "old-client", "version": "3"}}),
        )
        .await;
    assert!(init.get("result").is_some(), "{init}");
    old.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(old.tools().await, ["m__echo", "m__ask", "m__crash"]);
    let r = old.call("m__echo", json!({"x": 1})).await;
    assert_eq!(answered_by(&r).0, "m");
    // Answers keep the server's resultType.
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let call = received(&servers, "m", "tools/call").remove(0);
    assert_eq!(call["params"]["name"], "echo");
    assert_eq!(meta(&call)[VERSION], "2026-07-28");
    assert_eq!(
        meta(&call)[CAPABILITIES],
        json!({"roots": {"listChanged": true}})
    );
    assert_eq!(meta(&call)[CLIENT_INFO]["name"], "old-client");

    // A 2026-07-28 client: its own envelope, untouched.
    let mut new = gw.open().await;
    let params = modern_params(
        json!({"name": "m__echo", "arguments": {"y": 2}}),
        json!({"elicitation": {"form": {}}, "x-custom": [1, 2]}),
        "new-client",
    );
    let r = new.request("tools/call", params.clone()).await;
    assert_eq!(
        r["result"]["structuredContent"]["args"],
        json!({"y": 2}),
        "{r}"
    );
    let call = received(&servers, "m", "tools/call").remove(1);
    assert_eq!(meta(&call), &params["_meta"]);

    // The first request of a client of the handshake era tried a process
    // of that era, which a server of 2026-07-28 alone refuses: that one
    // was sent `initialize` alone, and stopped.
    let [serving, tried] = servers.spawned("m")[..] else {
        panic!("two processes: {:?}", servers.spawned("m"));
    };
    let methods: Vec<Value> = on_worker(&servers, "m", tried);
    assert_eq!(
        methods.iter().map(method_of).collect::<Vec<_>>(),
        ["initialize"]
    );
    until("the tried process stopped", || {
        servers.running("m") == [serving]
    })
    .await;
    // The gateway's own requests carry its own envelope; nothing of the
    // handshake era reaches the server.
    let seen = on_worker(&servers, "m", serving);
    assert_eq!(method_of(&seen[0]), "server/discover");
    assert_eq!(meta(&seen[0])[CLIENT_INFO]["name"], "mcpvisor");
    let list = received(&servers, "m", "tools/list").remove(0);
    assert_eq!(meta(&list)[VERSION], "2026-07-28");
    assert_eq!(meta(&list)[CLIENT_INFO]["name"], "mcpvisor");
    for method in [
        "initialize",
        "notifications/initialized",
        "ping",
        "logging/setLevel",
    ] {
        assert!(
            seen.iter().all(|m| method_of(m) != method),
            "{method} was sent"
        );
    }

    // Its health check is discovery, every 30 s while idle.
    let probes = servers.count("m", "server/discover");
    tokio::time::sleep(Duration::from_secs(95)).await;
    assert!(
        servers.count("m", "server/discover") >= probes + 3,
        "{:?}",
        servers.methods("m")
    );
    assert_eq!(servers.count("m", "ping"), 0);
    // Answered, so it was never restarted, and nothing was tried again.
    assert_eq!(servers.spawned("m"), [serving, tried]);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn servers_not_of_2026_07_28_are_initialized_after_the_probe() {
    let servers = Servers::default();
    // -32601, as the handshake era answers an unknown method.
    servers.script("nf", Script::default());
    // A result, but not one naming 2026-07-28.
    servers.script(
        "old",
        Script {
            discover: Discover::Handshake,
            ..Script::default()
        },
    );
    let mut gw = Gateway::start(&servers, vec![plan("nf"), plan("old")]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["nf__echo", "old__echo"]);
    for name in ["nf", "old"] {
        let methods = servers.methods(name);
        assert_eq!(
            methods[..3],
            ["server/discover", "initialize", "notifications/initialized"],
            "{name}: {methods:?}"
        );
        // Driven as before: no envelope on what follows the handshake.
        let r = front.call(&format!("{name}__echo"), json!({})).await;
        assert_eq!(answered_by(&r).0, name);
        assert!(r["result"].get("resultType").is_none(), "{r}");
        let call = received(&servers, name, "tools/call").remove(0);
        assert!(call["params"].get("_meta").is_none(), "{call}");
    }
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_server_that_does_not_answer_the_probe_is_initialized_after_ten_seconds() {
    let servers = Servers::default();
    // It would say 2026-07-28, but only after the probe's bound.
    servers.script(
        "slow",
        Script {
            discover: Discover::ModernAfter(Duration::from_secs(20)),
            ..Script::default()
        },
    );
    let start = tokio::time::Instant::now();
    let mut gw = Gateway::start(&servers, vec![plan("slow")]);
    let took = until("initialize sent to slow", || {
        servers.count("slow", "initialize") == 1
    })
    .await;
    assert!(
        (Duration::from_secs(10)..Duration::from_secs(11)).contains(&took),
        "initialize after {took:?}"
    );
    // The probe was withdrawn.
    assert_eq!(servers.count("slow", "notifications/cancelled"), 1);
    let mut front = gw.client().await;
    // Past the late answer, it is still driven in the handshake era.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(start.elapsed() > Duration::from_secs(20));
    let r = front.call("slow__echo", json!({})).await;
    assert_eq!(answered_by(&r).0, "slow");
    assert!(r["result"].get("resultType").is_none(), "{r}");
    let call = received(&servers, "slow", "tools/call").remove(0);
    assert!(call["params"].get("_meta").is_none(), "{call}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_entry_of_era_2025_11_25_is_initialized_without_a_probe() {
    let servers = Servers::default();
    // A server of both eras: probed, it would be driven in 2026-07-28.
    servers.script(
        "both",
        Script {
            tools: vec!["echo".into(), "crash".into()],
            discover: Discover::ModernAfter(Duration::ZERO),
            ..Script::default()
        },
    );
    let mut both = plan("both");
    both.def.era = EraChoice::Handshake;
    let mut gw = Gateway::start(&servers, vec![both]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["both__echo", "both__crash"]);
    let methods = servers.methods("both");
    assert_eq!(
        methods[..2],
        ["initialize", "notifications/initialized"],
        "{methods:?}"
    );
    let r = front.call("both__echo", json!({})).await;
    assert_eq!(answered_by(&r).0, "both");
    assert!(r["result"].get("resultType").is_none(), "{r}");
    let call = received(&servers, "both", "tools/call").remove(0);
    assert!(call["params"].get("_meta").is_none(), "{call}");
    // Its next process is given the handshake again, never a probe.
    let _ = front.call("both__crash", json!({})).await;
    until("the next worker initialized", || {
        servers.count("both", "initialize") == 2
    })
    .await;
    let r = front.call("both__echo", json!({})).await;
    assert_eq!(answered_by(&r).1, servers.spawned("both")[1], "{r}");
    assert_eq!(servers.count("both", "server/discover"), 0);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_entry_of_era_2026_07_28_fails_to_start_when_the_server_is_not_of_it() {
    let servers = Servers::default();
    // -32601, as the handshake era answers an unknown method.
    servers.script("old", Script::default());
    servers.script("new", modern());
    let (control, control_rx) = tokio::sync::mpsc::channel(16);
    let (monitor, tap) = Monitor::new(control);
    let settings = Settings {
        monitor: Some(tap),
        ..Settings::default()
    };
    let plans = ["old", "new"].map(|name| {
        let mut p = plan(name);
        p.def.era = EraChoice::Modern;
        p
    });
    let mut gw = Gateway::start_with_control(&servers, plans.into(), settings, control_rx);
    let mut front = gw.client().await;
    // Not initialized in the handshake era in its place: it offers nothing.
    assert_eq!(front.tools().await, ["new__echo", "new__ask", "new__crash"]);
    assert_eq!(servers.methods("old"), ["server/discover"]);
    let page = monitor.server("old").await.expect("asked").expect("a page");
    assert_eq!(page.status.state, ServerState::Failed);
    let detail = page.status.detail.expect("a reason");
    assert!(
        detail
            .contains("asks for era 2026-07-28, but it answered server/discover with error -32601"),
        "{detail}"
    );
    // A call by its name is refused as not started, saying why.
    let r = front.call("old__echo", json!({})).await;
    assert_eq!(r["error"]["code"], NOT_STARTED, "{r}");
    let message = r["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("it answered server/discover with error -32601"),
        "{message}"
    );
    assert_eq!(servers.count("old", "initialize"), 0);
    let r = front.call("new__echo", json!({})).await;
    assert_eq!(answered_by(&r).0, "new");
}

#[tokio::test(start_paused = true)]
async fn a_new_process_is_probed_again() {
    let servers = Servers::default();
    servers.script("m", modern());
    let mut gw = Gateway::start(&servers, vec![plan("m")]);
    let mut front = gw.client().await;
    let first = answered_by(&front.call("m__echo", json!({})).await).1;
    let spawned = servers.spawned("m").len();
    // It crashes; its session starts the next process, which has no
    // handshake to replay and is asked its era again.
    let _ = front.call("m__crash", json!({})).await;
    until("the next worker", || {
        servers.spawned("m").len() == spawned + 1
    })
    .await;
    let second = servers.spawned("m")[spawned];
    until("the next worker probed", || {
        on_worker(&servers, "m", second)
            .iter()
            .any(|m| method_of(m) == "server/discover")
    })
    .await;
    let r = front.call("m__echo", json!({})).await;
    assert_eq!(answered_by(&r).1, second);
    let on_second = on_worker(&servers, "m", second);
    assert!(
        on_second.iter().all(|m| method_of(m) != "initialize"),
        "{on_second:?}"
    );
    let call = on_second
        .iter()
        .find(|m| method_of(m) == "tools/call")
        .expect("the call");
    assert_eq!(meta(call)[VERSION], "2026-07-28");
    assert_ne!(first, second);

    // Its next process no longer speaks 2026-07-28: found by the probe, it
    // is started afresh and initialized.
    servers.edit("m", |s| s.discover = Discover::NotFound);
    let initialized = servers.count("m", "initialize");
    let _ = front.call("m__crash", json!({})).await;
    until("a worker initialized", || {
        servers.count("m", "initialize") == initialized + 1
    })
    .await;
    let r = front.call("m__echo", json!({})).await;
    let last = answered_by(&r).1;
    assert!(last > second, "{r}");
    let call = received(&servers, "m", "tools/call")
        .into_iter()
        .last()
        .expect("a call");
    assert!(call["params"].get("_meta").is_none(), "{call}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_servers_own_state_comes_back_to_it_even_when_it_looks_like_the_gateways() {
    let servers = Servers::default();
    servers.script("m", modern());
    let mut gw = Gateway::start(&servers, vec![plan("m")]);
    let mut client = gw.open().await;
    let caps = json!({"elicitation": {"form": {}}});
    // An mcpvisor behind this one hands out states of this shape: before
    // the wrap, this gateway took the retry for its own and refused it.
    let inner = "mcpvisor1.inner.7b7d.00ff";
    let args = json!({"state": inner});
    let params = json!({"name": "m__ask", "arguments": args});
    let first = client
        .request("tools/call", modern_params(params, caps.clone(), "c"))
        .await;
    let state = first["result"]["requestState"].as_str().unwrap_or_default();
    assert!(state.starts_with("mcpvisor1.") && state != inner, "{first}");
    let retry = json!({"name": "m__ask", "arguments": args, "requestState": state,
        "inputResponses": {"name": {"action": "decline"}}});
    let done = client
        .request("tools/call", modern_params(retry, caps.clone(), "c"))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let retried = received(&servers, "m", "tools/call")
        .into_iter()
        .last()
        .expect("the retry");
    assert_eq!(retried["params"]["requestState"], inner, "{retried}");
    // The inner state sent as it is, not wrapped: this gateway refuses it
    // (its replica is not this one), and the server never sees it.
    let bare = json!({"name": "m__ask", "arguments": args, "requestState": inner,
        "inputResponses": {"name": {"action": "decline"}}});
    let calls = received(&servers, "m", "tools/call").len();
    let refused = client
        .request("tools/call", modern_params(bare, caps, "c"))
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(received(&servers, "m", "tools/call").len(), calls);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_input_request_passes_to_a_2026_client_and_is_bridged_to_an_older_one() {
    let servers = Servers::default();
    servers.script("m", modern());
    let mut p = plan("m");
    // How long a client may take to answer the server's input requests.
    p.session.request_ceiling = Duration::from_secs(60);
    let mut gw = Gateway::start(&servers, vec![p]);

    let mut new = gw.open().await;
    let caps = json!({"elicitation": {"form": {}}});
    let first = new
        .request(
            "tools/call",
            modern_params(
                json!({"name": "m__ask", "arguments": {}}),
                caps.clone(),
                "new",
            ),
        )
        .await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    // The server's state goes out inside the gateway's, naming the replica.
    let state = result["requestState"].as_str().unwrap_or_default();
    assert!(
        state.starts_with("mcpvisor1.") && state.split('.').nth(2) == Some("s"),
        "{first}"
    );
    assert!(!state.contains("state-1"), "{first}");
    assert_eq!(
        result["inputRequests"]["name"]["method"], "elicitation/create",
        "{first}"
    );
    // The retry: the same method and name, the responses and the state.
    let retry = modern_params(
        json!({
            "name": "m__ask",
            "arguments": {},
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
            "requestState": state,
        }),
        caps,
        "new",
    );
    let done = new.request("tools/call", retry).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["responses"]["name"]["content"]["name"],
        "Ada"
    );
    // The server got its own state back.
    let retried = received(&servers, "m", "tools/call")
        .into_iter()
        .last()
        .expect("the retry");
    assert_eq!(retried["params"]["requestState"], "state-1", "{retried}");

    // A client of the handshake era is asked as that era asks: an
    // `elicitation/create` request; its answer goes back to the server in
    // the request sent again, and the client gets the result.
    let mut old = gw.open().await;
    let init = old
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "old", "version": "1"}}),
        )
        .await;
    assert!(init.get("result").is_some(), "{init}");
    old.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let call = old
        .begin("tools/call", json!({"name": "m__ask", "arguments": {}}))
        .await;
    let ask = old.next(WAIT).await.expect("the input request");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Your name?");
    old.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Grace"}}}))
        .await;
    let r = old.answer(&call).await;
    assert_eq!(
        r["result"]["structuredContent"]["responses"]["name"]["content"]["name"], "Grace",
        "{r}"
    );
    // The retry carried the state and the client's envelope.
    let retry = received(&servers, "m", "tools/call")
        .into_iter()
        .last()
        .expect("the retry");
    assert_eq!(retry["params"]["requestState"], "state-1");
    assert_eq!(meta(&retry)[CLIENT_INFO]["name"], "old");
    assert_ne!(retry["id"], received(&servers, "m", "tools/call")[2]["id"]);

    // More input requests than one answer may put to a client: refused.
    let r = old.call("m__ask", json!({"count": 17})).await;
    assert_eq!(r["error"]["code"], -32013, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("17 input requests")),
        "{r}"
    );

    // A client that did not declare elicitation is told so.
    let mut bare = gw.client().await;
    let r = bare.call("m__ask", json!({})).await;
    assert_eq!(r["error"]["code"], -32021, "{r}");
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {}})
    );

    // One that never answers gets a timeout once the server's ceiling
    // has passed, and the question is withdrawn.
    let asked = tokio::time::Instant::now();
    let call = old
        .begin("tools/call", json!({"name": "m__ask", "arguments": {}}))
        .await;
    let ask = old.next(WAIT).await.expect("the input request");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let r = old.answer(&call).await;
    assert_eq!(r["error"]["code"], -32001, "{r}");
    let took = asked.elapsed();
    assert!(
        (Duration::from_secs(60)..Duration::from_secs(61)).contains(&took),
        "timed out after {took:?}"
    );
    let withdrawn = old.next(WAIT).await.expect("the cancellation");
    assert_eq!(
        withdrawn["method"], "notifications/cancelled",
        "{withdrawn}"
    );
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    gw.shutdown().await;
}
