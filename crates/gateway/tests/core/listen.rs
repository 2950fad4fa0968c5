//! `subscriptions/listen` from 2026-07-28 fronts, fed from handshake-era
//! servers, on paused time.

use std::time::Duration;

use mcpvisor_jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND, NOT_STARTED};
use serde_json::{Value, json};

use crate::support::{Front, Gateway, Script, Servers, plan, until};

/// The `_meta` key naming a listen.
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// A server with resources `uris`, and the tools `echo` and `crash`.
fn with_resources(servers: &Servers, name: &str, uris: &[&str]) {
    servers.script(
        name,
        Script {
            tools: vec!["echo".into(), "crash".into()],
            resources: uris.iter().map(|u| (*u).to_owned()).collect(),
            ..Script::default()
        },
    );
}

/// A 2026-07-28 front, once the servers' lists are read (a list waits for
/// them): no list change of their start reaches its listens.
async fn settled(gw: &mut Gateway) -> Front {
    let mut front = gw.open().await;
    let r = front.request_modern("tools/list", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    front
}

/// Opens a listen with `notifications` on `front`: its id and its
/// acknowledgment.
async fn listen(front: &mut Front, notifications: Value) -> (Value, Value) {
    let id = front
        .begin_modern(
            "subscriptions/listen",
            json!({ "notifications": notifications }),
        )
        .await;
    let ack = front.notification().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION], id, "{ack}");
    (id, ack["params"]["notifications"].clone())
}

fn updated(uri: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
}

#[tokio::test(start_paused = true)]
async fn a_listen_hears_the_list_changes_it_asked_for_and_no_others() {
    let servers = Servers::default();
    let mut gw = Gateway::start(&servers, vec![plan("a")]);
    let mut old = gw.client().await;
    let mut tools = gw.open().await;
    let (id, granted) = listen(&mut tools, json!({"toolsListChanged": true})).await;
    assert_eq!(granted, json!({"toolsListChanged": true}));
    let mut prompts = gw.open().await;
    let (_, granted) = listen(
        &mut prompts,
        json!({"promptsListChanged": true, "toolsListChanged": false}),
    )
    .await;
    assert_eq!(granted, json!({"promptsListChanged": true}));
    // The server's tools change.
    servers.edit("a", |s| s.tools.push("more".into()));
    let told = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    assert_eq!(servers.push("a", &told), 1);
    let heard = tools.notification().await;
    assert_eq!(
        heard["method"], "notifications/tools/list_changed",
        "{heard}"
    );
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id, "{heard}");
    // The handshake client hears it as it always has.
    let plain = old.notification().await;
    assert_eq!(plain["method"], "notifications/tools/list_changed");
    assert!(plain.get("params").is_none(), "{plain}");
    // The prompts listener hears nothing, and the tools one nothing more.
    assert_eq!(
        prompts.drain(Duration::from_secs(5)).await,
        Vec::<Value>::new()
    );
    assert_eq!(
        tools.drain(Duration::from_secs(1)).await,
        Vec::<Value>::new()
    );
    // Its answer never came: a listen stays open.
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_resource_update_reaches_only_the_listens_that_named_its_uri() {
    let servers = Servers::default();
    with_resources(&servers, "r", &["mem://a", "mem://b"]);
    let mut gw = Gateway::start(&servers, vec![plan("r")]);
    let mut first = settled(&mut gw).await;
    let (id_a, granted) = listen(&mut first, json!({"resourceSubscriptions": ["mem://a"]})).await;
    assert_eq!(granted, json!({"resourceSubscriptions": ["mem://a"]}));
    let mut second = gw.open().await;
    // A URI no server lists is left out of what is granted.
    let (id_b, granted) = listen(
        &mut second,
        json!({"resourceSubscriptions": ["mem://b", "mem://nowhere", "mem://b"]}),
    )
    .await;
    assert_eq!(granted, json!({"resourceSubscriptions": ["mem://b"]}));
    until("both subscribed at the server", || {
        servers.count("r", "resources/subscribe") == 2
    })
    .await;
    servers.push("r", &updated("mem://a"));
    let heard = first.notification().await;
    assert_eq!(heard["method"], "notifications/resources/updated");
    assert_eq!(heard["params"]["uri"], "mem://a");
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id_a, "{heard}");
    assert_eq!(
        second.drain(Duration::from_secs(2)).await,
        Vec::<Value>::new()
    );
    servers.push("r", &updated("mem://b"));
    let heard = second.notification().await;
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id_b, "{heard}");
    assert_eq!(
        first.drain(Duration::from_secs(2)).await,
        Vec::<Value>::new()
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn one_server_subscription_serves_every_listener_and_ends_with_the_last() {
    let servers = Servers::default();
    with_resources(&servers, "r", &["mem://a"]);
    let mut gw = Gateway::start(&servers, vec![plan("r")]);
    let mut handshake = gw.client().await;
    let r = handshake
        .request("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let mut one = gw.open().await;
    let (id_one, _) = listen(&mut one, json!({"resourceSubscriptions": ["mem://a"]})).await;
    let mut two = gw.open().await;
    listen(&mut two, json!({"resourceSubscriptions": ["mem://a"]})).await;
    // One subscribe for all three.
    assert_eq!(servers.count("r", "resources/subscribe"), 1);
    // A listen cancelled, the handshake client's unsubscribe: still held.
    one.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id_one}}))
        .await;
    let r = handshake
        .request("resources/unsubscribe", json!({"uri": "mem://a"}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    servers.push("r", &updated("mem://a"));
    two.notification().await;
    // The cancelled listen is over: it hears nothing, and got no answer.
    assert_eq!(one.drain(Duration::from_secs(2)).await, Vec::<Value>::new());
    assert_eq!(servers.count("r", "resources/unsubscribe"), 0);
    // The last listener's client goes: the server is told.
    two.close().await;
    until("unsubscribed at the server", || {
        servers.count("r", "resources/unsubscribe") == 1
    })
    .await;
    let last = servers
        .seen("r")
        .into_iter()
        .rfind(|s| s.message["method"] == "resources/unsubscribe")
        .expect("an unsubscribe");
    assert_eq!(last.message["params"], json!({"uri": "mem://a"}));
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_server_started_again_is_subscribed_again_and_a_subscribed_one_is_not_idle() {
    let servers = Servers::default();
    with_resources(&servers, "r", &["mem://a"]);
    let mut p = plan("r");
    p.idle_timeout = Some(Duration::from_secs(30));
    let mut gw = Gateway::start(&servers, vec![p]);
    let mut front = settled(&mut gw).await;
    let (id, _) = listen(&mut front, json!({"resourceSubscriptions": ["mem://a"]})).await;
    // Held by a listener, it outlives many idle timeouts.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(servers.spawned("r").len(), 1);
    assert!(servers.ended("r").is_empty());
    // Its worker dies: the next one is subscribed again.
    let mut caller = gw.open().await;
    let r = caller
        .request_modern("tools/call", json!({"name": "r__crash", "arguments": {}}))
        .await;
    assert!(r.get("error").is_some(), "{r}");
    until("a second worker subscribed", || {
        servers
            .seen("r")
            .iter()
            .filter(|s| s.message["method"] == "resources/subscribe")
            .count()
            == 2
    })
    .await;
    servers.push("r", &updated("mem://a"));
    let heard = front.notification().await;
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id, "{heard}");
    // Once nobody listens, it is idle again.
    front.close().await;
    until("stopped when idle", || servers.running("r").is_empty()).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn listens_are_bounded_checked_and_for_2026_clients_only() {
    let servers = Servers::default();
    with_resources(&servers, "r", &["mem://a"]);
    let mut gw = Gateway::start(&servers, vec![plan("r")]);
    let mut front = settled(&mut gw).await;
    for _ in 0..16 {
        listen(&mut front, json!({"toolsListChanged": true})).await;
    }
    let r = front
        .request_modern(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    assert_eq!(r["error"]["code"], NOT_STARTED, "{r}");
    let mut other = gw.open().await;
    let r = other
        .request_modern("subscriptions/listen", json!({"notifications": []}))
        .await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    let many: Vec<String> = (0..257).map(|i| format!("mem://{i}")).collect();
    let r = other
        .request_modern(
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": many}}),
        )
        .await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    // An id of an open listen is in use.
    let (id, _) = listen(&mut other, json!({})).await;
    other
        .send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}}))
        .await;
    let r = other.answer(&id).await;
    assert_eq!(r["error"]["code"], NOT_STARTED, "{r}");
    // A client that initialized has resources/subscribe.
    let mut old = gw.client().await;
    let r = old
        .request("subscriptions/listen", json!({"notifications": {}}))
        .await;
    assert_eq!(r["error"]["code"], METHOD_NOT_FOUND, "{r}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_listen_is_answered_when_the_gateway_shuts_down() {
    let servers = Servers::default();
    let mut gw = Gateway::start(&servers, vec![plan("a")]);
    let mut front = settled(&mut gw).await;
    let (id, _) = listen(&mut front, json!({"toolsListChanged": true})).await;
    gw.control(mcpvisor_gateway::Control::Shutdown).await;
    let answer = front.answer(&id).await;
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(answer["result"]["_meta"][SUBSCRIPTION], id, "{answer}");
}

#[tokio::test(start_paused = true)]
async fn a_lazy_server_is_started_for_a_listen_and_subscribed_once_ready() {
    let servers = Servers::default();
    with_resources(&servers, "r", &["mem://a"]);
    let mut p = plan("r");
    p.lazy = true;
    p.cached = Some(mcpvisor_gateway::Cached::from_lists(
        &mcpvisor_gateway::cache::Lists {
            initialize: json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}, "resources": {"subscribe": true}},
                "serverInfo": {"name": "r", "version": "0"},
            }),
            tools: vec![json!({"name": "echo", "inputSchema": {"type": "object"}})],
            resources: vec![json!({"uri": "mem://a", "name": "a"})],
            ..Default::default()
        },
    ));
    let mut gw = Gateway::start(&servers, vec![p]);
    let mut front = settled(&mut gw).await;
    // Listed from the cache, not started.
    assert!(servers.spawned("r").is_empty());
    let (id, granted) = listen(&mut front, json!({"resourceSubscriptions": ["mem://a"]})).await;
    assert_eq!(granted, json!({"resourceSubscriptions": ["mem://a"]}));
    until("started and subscribed", || {
        servers.count("r", "resources/subscribe") == 1
    })
    .await;
    assert_eq!(servers.spawned("r").len(), 1);
    servers.push("r", &updated("mem://a"));
    let heard = front.notification().await;
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id, "{heard}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_per_client_server_is_subscribed_at_each_listener_s_own_instance() {
    let servers = Servers::default();
    with_resources(&servers, "own", &["mem://a"]);
    let mut own = plan("own");
    own.per_client = true;
    let mut gw = Gateway::start(&servers, vec![own]);
    let mut one = settled(&mut gw).await;
    let mut two = settled(&mut gw).await;
    until("the template stopped", || servers.running("own").is_empty()).await;
    let (id_one, granted) = listen(&mut one, json!({"resourceSubscriptions": ["mem://a"]})).await;
    assert_eq!(granted, json!({"resourceSubscriptions": ["mem://a"]}));
    let (id_two, _) = listen(&mut two, json!({"resourceSubscriptions": ["mem://a"]})).await;
    // Each listener's own process, each subscribed once.
    until("two instances subscribed", || {
        servers.running("own").len() == 2 && servers.count("own", "resources/subscribe") == 2
    })
    .await;
    let instances = servers.running("own");
    for worker in &instances {
        let subscribed = servers
            .seen("own")
            .iter()
            .filter(|s| s.worker == *worker && s.message["method"] == "resources/subscribe")
            .count();
        assert_eq!(subscribed, 1, "worker {worker}");
    }
    // Both update it: each listener hears its own instance only.
    assert_eq!(servers.push("own", &updated("mem://a")), 2);
    let heard = one.notification().await;
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id_one, "{heard}");
    let heard = two.notification().await;
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id_two, "{heard}");
    assert_eq!(one.drain(Duration::from_secs(1)).await, Vec::<Value>::new());
    assert_eq!(two.drain(Duration::from_secs(1)).await, Vec::<Value>::new());
    // Two listens of one client at its instance: the server is told when
    // the last of them ends.
    let (again, _) = listen(&mut two, json!({"resourceSubscriptions": ["mem://a"]})).await;
    let cancel = |id: &Value| json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
    two.send(cancel(&again)).await;
    // A call its instance reads after anything sent to it before.
    let r = two
        .request_modern("tools/call", json!({"name": "own__echo", "arguments": {}}))
        .await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(servers.count("own", "resources/unsubscribe"), 0);
    two.send(cancel(&id_two)).await;
    until("unsubscribed at its instance", || {
        servers.count("own", "resources/unsubscribe") == 1
    })
    .await;
    // A listener that goes takes its process with it.
    one.close().await;
    until("one instance left", || servers.running("own").len() == 1).await;
    assert_eq!(servers.count("own", "resources/unsubscribe"), 1);
    gw.shutdown().await;
}
