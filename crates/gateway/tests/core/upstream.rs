//! The gateway's own `subscriptions/listen` at servers driven in
//! 2026-07-28, on paused time: opened when such a server is ready, with
//! the URIs held there; what it hears reaches the fronts of both eras;
//! replaced when those URIs change, opened again on a new process, and
//! never a call in flight.

use std::time::Duration;

use mcpvisor_gateway::{Control, ReloadCause};
use serde_json::{Value, json};

use crate::support::{
    Discover, Front, Gateway, Listens, Script, Servers, plan, tools_changes, until,
};

/// The `_meta` key naming a listen.
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// A 2026-07-28 server with the tools `echo` and `crash`, and resources
/// `uris`, that takes listens as `listens` says.
fn modern(servers: &Servers, name: &str, uris: &[&str], listens: Listens) {
    servers.script(
        name,
        Script {
            tools: vec!["echo".into(), "crash".into()],
            resources: uris.iter().map(|u| (*u).to_owned()).collect(),
            discover: Discover::Modern,
            listens,
            ..Script::default()
        },
    );
}

/// The listens `name`'s workers received, in order.
fn listens(servers: &Servers, name: &str) -> Vec<Value> {
    servers
        .seen(name)
        .into_iter()
        .filter(|s| s.message["method"] == "subscriptions/listen")
        .map(|s| s.message)
        .collect()
}

/// The listens worker `worker` of `name` received.
fn listens_on(servers: &Servers, name: &str, worker: u64) -> usize {
    servers
        .seen(name)
        .into_iter()
        .filter(|s| s.worker == worker && s.message["method"] == "subscriptions/listen")
        .count()
}

/// The request ids `name`'s workers were told are cancelled.
fn cancelled(servers: &Servers, name: &str) -> Vec<Value> {
    servers
        .seen(name)
        .into_iter()
        .filter(|s| s.message["method"] == "notifications/cancelled")
        .map(|s| s.message["params"]["requestId"].clone())
        .collect()
}

/// A notification `method` as the server sends it on its listen `on`.
fn on_listen(on: &Value, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({ SUBSCRIPTION: on["id"] });
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// Waits for the `n`th listen at `name`, and returns it.
async fn nth_listen(servers: &Servers, name: &str, n: usize) -> Value {
    until(&format!("listen {n} at {name}"), || {
        listens(servers, name).len() >= n
    })
    .await;
    listens(servers, name).remove(n - 1)
}

/// A 2026-07-28 front's listen with `notifications`: its id.
async fn front_listen(front: &mut Front, notifications: Value) -> Value {
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
    id
}

#[tokio::test(start_paused = true)]
async fn a_2026_server_is_listened_to_and_what_it_tells_reaches_the_fronts_of_both_eras() {
    let servers = Servers::default();
    modern(&servers, "m", &["mem://a", "mem://b"], Listens::Hold);
    let mut gw = Gateway::start(&servers, vec![plan("m")]);
    // Ready: one listen, for the lists it declares and no URI yet, with
    // the gateway's envelope as every request to it.
    let first = nth_listen(&servers, "m", 1).await;
    assert_eq!(
        first["params"]["notifications"],
        json!({"toolsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": []}),
        "{first}"
    );
    let meta = &first["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert_eq!(
        meta["io.modelcontextprotocol/clientInfo"]["name"],
        "mcpvisor"
    );

    // A handshake-era client subscribes: answered by the gateway, and the
    // listen replaced by one that names the URI.
    let mut old = gw.client().await;
    assert_eq!(old.tools().await, ["m__echo", "m__crash"]);
    let r = old
        .request("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let second = nth_listen(&servers, "m", 2).await;
    assert_eq!(
        second["params"]["notifications"]["resourceSubscriptions"],
        json!(["mem://a"]),
        "{second}"
    );
    until("the first listen cancelled", || {
        cancelled(&servers, "m") == [first["id"].clone()]
    })
    .await;

    // A 2026-07-28 client listens for mem://b and the tools: replaced
    // again, holding both.
    let mut new = gw.open().await;
    let r = new.request_modern("tools/list", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    let id = front_listen(
        &mut new,
        json!({"toolsListChanged": true, "resourceSubscriptions": ["mem://b"]}),
    )
    .await;
    let third = nth_listen(&servers, "m", 3).await;
    assert_eq!(
        third["params"]["notifications"]["resourceSubscriptions"],
        json!(["mem://a", "mem://b"]),
        "{third}"
    );
    until("the second listen cancelled", || {
        cancelled(&servers, "m").len() == 2
    })
    .await;
    assert_eq!(cancelled(&servers, "m")[1], second["id"]);
    // It never hears of the era it does not speak.
    assert_eq!(servers.count("m", "resources/subscribe"), 0);

    // Its tools change, told on its listen: read again, merged, and told
    // to both clients, each in its own way.
    servers.edit("m", |s| s.tools.push("more".into()));
    let told = on_listen(&third, "notifications/tools/list_changed", json!({}));
    assert_eq!(servers.push("m", &told), 1);
    let heard = new.notification().await;
    assert_eq!(
        heard["method"], "notifications/tools/list_changed",
        "{heard}"
    );
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id, "{heard}");
    let plain = old.notification().await;
    assert_eq!(
        plain["method"], "notifications/tools/list_changed",
        "{plain}"
    );
    assert_eq!(old.tools().await, ["m__echo", "m__crash", "m__more"]);

    // An update reaches the holder of its URI only: mem://b the listen...
    let b = on_listen(
        &third,
        "notifications/resources/updated",
        json!({"uri": "mem://b"}),
    );
    servers.push("m", &b);
    let heard = new.notification().await;
    assert_eq!(
        heard["method"], "notifications/resources/updated",
        "{heard}"
    );
    assert_eq!(heard["params"]["uri"], "mem://b", "{heard}");
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id, "{heard}");
    // ...mem://a the handshake client, without the gateway's subscription.
    let a = on_listen(
        &third,
        "notifications/resources/updated",
        json!({"uri": "mem://a"}),
    );
    servers.push("m", &a);
    let heard = old.notification().await;
    assert_eq!(
        heard,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "mem://a"}})
    );
    let rest = new.drain(Duration::from_secs(2)).await;
    assert!(rest.is_empty(), "{rest:?}");
    let rest = old.drain(Duration::from_secs(1)).await;
    assert!(rest.is_empty(), "{rest:?}");

    // The handshake client unsubscribes: the listen holds mem://b alone.
    let r = old
        .request("resources/unsubscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let fourth = nth_listen(&servers, "m", 4).await;
    assert_eq!(
        fourth["params"]["notifications"]["resourceSubscriptions"],
        json!(["mem://b"]),
        "{fourth}"
    );
    // The server's own acknowledgments reached no client.
    let rest = old.drain(Duration::from_secs(1)).await;
    assert!(rest.is_empty(), "{rest:?}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_process_is_listened_to_again_and_the_listen_holds_up_no_reload() {
    let servers = Servers::default();
    modern(&servers, "m", &["mem://a"], Listens::Hold);
    let mut gw = Gateway::start(&servers, vec![plan("m")]);
    let mut old = gw.client().await;
    assert_eq!(old.tools().await, ["m__echo", "m__crash"]);
    let r = old
        .request("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    nth_listen(&servers, "m", 2).await;
    // The subscribe tried a process of the handshake era first, which a
    // server of 2026-07-28 alone refuses.
    let [first, _tried] = servers.spawned("m")[..] else {
        panic!("two workers: {:?}", servers.spawned("m"));
    };

    // A listen is never timed out: long past the request timeout (120 s)
    // it is neither cancelled nor opened again.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(listens(&servers, "m").len(), 2);
    assert_eq!(cancelled(&servers, "m").len(), 1, "only the replaced one");

    // Its process crashes: the session's next one is listened to with
    // what is held.
    let r = old.call("m__crash", json!({})).await;
    assert!(r.get("error").is_some(), "{r}");
    until("a second worker", || servers.spawned("m").len() == 3).await;
    let second = servers.spawned("m")[2];
    until("the second worker listened to", || {
        listens_on(&servers, "m", second) == 1
    })
    .await;
    let again = listens(&servers, "m").pop().expect("a listen");
    assert_eq!(
        again["params"]["notifications"]["resourceSubscriptions"],
        json!(["mem://a"]),
        "{again}"
    );
    assert_ne!(second, first);

    // A reload replaces the worker at once: the listen it holds is not a
    // call in flight (a call would hold it up to the drain timeout, 30 s).
    let asked = tokio::time::Instant::now();
    gw.control(Control::Reload {
        server: "m".into(),
        cause: ReloadCause::Asked,
    })
    .await;
    until("a third worker", || servers.spawned("m").len() == 4).await;
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "the reload waited {:?}",
        asked.elapsed()
    );
    let third = servers.spawned("m")[3];
    until("the third worker listened to", || {
        listens_on(&servers, "m", third) == 1
    })
    .await;
    until("the second worker ended", || {
        servers.ended("m").contains(&second)
    })
    .await;
    // What it tells on its new listen is heard.
    let listen = listens(&servers, "m").pop().expect("a listen");
    let updated = on_listen(
        &listen,
        "notifications/resources/updated",
        json!({"uri": "mem://a"}),
    );
    assert_eq!(servers.push("m", &updated), 1);
    let heard = loop {
        let m = old.notification().await;
        if m["method"] == "notifications/resources/updated" {
            break m;
        }
    };
    assert_eq!(heard["params"]["uri"], "mem://a", "{heard}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_listen_is_asked_again_only_when_the_server_is_next_ready() {
    let servers = Servers::default();
    modern(&servers, "m", &["mem://a"], Listens::Refuse);
    let mut gw = Gateway::start(&servers, vec![plan("m")]);
    let mut old = gw.client().await;
    assert_eq!(old.tools().await, ["m__echo", "m__crash"]);
    nth_listen(&servers, "m", 1).await;
    // Refused: a new subscription does not ask again, nor does time.
    let r = old
        .request("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(listens(&servers, "m").len(), 1);
    // Its next process is asked once, with what is held.
    let r = old.call("m__crash", json!({})).await;
    assert!(r.get("error").is_some(), "{r}");
    let again = nth_listen(&servers, "m", 2).await;
    assert_eq!(
        again["params"]["notifications"]["resourceSubscriptions"],
        json!(["mem://a"]),
        "{again}"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(listens(&servers, "m").len(), 2);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_listened_to_server_is_still_stopped_when_idle() {
    let servers = Servers::default();
    modern(&servers, "m", &[], Listens::Hold);
    let mut idle = plan("m");
    idle.idle_timeout = Some(Duration::from_secs(1));
    let mut gw = Gateway::start(&servers, vec![idle]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["m__echo", "m__crash"]);
    let first = nth_listen(&servers, "m", 1).await;
    assert_eq!(
        first["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    let took = until("the idle server stopped", || {
        servers.running("m").is_empty()
    })
    .await;
    assert!(took < Duration::from_secs(3), "stopped after {took:?}");
    // Its next call starts it, and it is listened to again.
    let r = front.call("m__echo", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    nth_listen(&servers, "m", 2).await;
    // Its stop and start change no list.
    let tail = front.drain(Duration::from_secs(1)).await;
    assert_eq!(tools_changes(&tail), 0, "{tail:?}");
}

/// What a lazy server with resource `uri` left in the list cache: its
/// discovery (or `initialize` result) declaring subscriptions.
fn cached_with_resource(name: &str, uri: &str, modern: bool) -> mcpvisor_gateway::Cached {
    let mut initialize = json!({
        "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true}},
        "serverInfo": {"name": name, "version": "0"},
    });
    if modern {
        initialize["supportedVersions"] = json!(["2026-07-28"]);
    } else {
        initialize["protocolVersion"] = json!("2025-06-18");
    }
    mcpvisor_gateway::Cached::from_lists(&mcpvisor_gateway::cache::Lists {
        initialize,
        tools: vec![json!({"name": "echo", "inputSchema": {"type": "object"}})],
        resources: vec![json!({"uri": uri, "name": uri})],
        ..Default::default()
    })
}

#[tokio::test(start_paused = true)]
async fn a_subscribe_to_a_server_not_started_is_held_until_it_is_ready_in_either_era() {
    let servers = Servers::default();
    modern(&servers, "m", &["mem://m"], Listens::Hold);
    servers.script(
        "h",
        Script {
            resources: vec!["mem://h".into()],
            ..Script::default()
        },
    );
    let lazy = |name: &str, uri: &str, modern: bool| {
        let mut p = plan(name);
        p.lazy = true;
        p.cached = Some(cached_with_resource(name, uri, modern));
        p
    };
    let mut gw = Gateway::start(
        &servers,
        vec![lazy("m", "mem://m", true), lazy("h", "mem://h", false)],
    );
    let mut old = gw.client().await;
    assert!(servers.spawned("m").is_empty() && servers.spawned("h").is_empty());
    // Answered by the gateway, and each server started for it.
    for uri in ["mem://m", "mem://h"] {
        let r = old
            .request("resources/subscribe", json!({"uri": uri}))
            .await;
        assert_eq!(r["result"], json!({}), "{uri}: {r}");
    }
    // The 2026-07-28 one is listened to for it, never sent resources/subscribe.
    let listen = nth_listen(&servers, "m", 1).await;
    assert_eq!(
        listen["params"]["notifications"]["resourceSubscriptions"],
        json!(["mem://m"]),
        "{listen}"
    );
    // The handshake-era one is subscribed once it is ready, once.
    until("h subscribed", || {
        servers.count("h", "resources/subscribe") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(servers.count("h", "resources/subscribe"), 1);
    assert_eq!(servers.count("m", "resources/subscribe"), 0);
    // Both updates reach the client.
    let updated = |uri: &str| json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}});
    servers.push("h", &updated("mem://h"));
    servers.push(
        "m",
        &on_listen(
            &listen,
            "notifications/resources/updated",
            json!({"uri": "mem://m"}),
        ),
    );
    let mut heard = Vec::new();
    while heard.len() < 2 {
        let m = old.notification().await;
        if m["method"] == "notifications/resources/updated" {
            heard.push(m["params"]["uri"].as_str().unwrap_or_default().to_owned());
        }
    }
    heard.sort();
    assert_eq!(heard, ["mem://h", "mem://m"]);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_per_client_2026_server_is_listened_to_at_the_client_s_own_instance() {
    let servers = Servers::default();
    modern(&servers, "own", &["mem://a"], Listens::Hold);
    let mut own = plan("own");
    own.per_client = true;
    let mut gw = Gateway::start(&servers, vec![own]);
    let mut front = gw.open().await;
    let r = front.request_modern("tools/list", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    until("the template stopped", || servers.running("own").is_empty()).await;
    let template = servers.spawned("own");
    let id = front_listen(&mut front, json!({"resourceSubscriptions": ["mem://a"]})).await;
    // Its own process is started and listened to for the URI.
    until("its instance listened to for mem://a", || {
        listens(&servers, "own").last().is_some_and(|l| {
            l["params"]["notifications"]["resourceSubscriptions"] == json!(["mem://a"])
        })
    })
    .await;
    let [instance] = servers.running("own")[..] else {
        panic!("one instance: {:?}", servers.running("own"));
    };
    assert!(!template.contains(&instance));
    let upstream = listens(&servers, "own").pop().expect("a listen");
    let updated = on_listen(
        &upstream,
        "notifications/resources/updated",
        json!({"uri": "mem://a"}),
    );
    assert_eq!(servers.push("own", &updated), 1);
    let heard = front.notification().await;
    assert_eq!(heard["params"]["uri"], "mem://a", "{heard}");
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], id, "{heard}");
    // The client's listen ends: the instance's listen is replaced by one
    // without the URI, the old one cancelled.
    let before = listens(&servers, "own").len();
    front
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}))
        .await;
    let after = nth_listen(&servers, "own", before + 1).await;
    assert_eq!(
        after["params"]["notifications"],
        json!({"toolsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": []}),
        "{after}"
    );
    until("the old listen cancelled", || {
        cancelled(&servers, "own").contains(&upstream["id"])
    })
    .await;
    assert_eq!(servers.count("own", "resources/subscribe"), 0);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_handshake_client_s_subscribe_to_its_own_2026_instance_is_held_by_its_listen() {
    let servers = Servers::default();
    modern(&servers, "own", &["mem://a"], Listens::Hold);
    let mut own = plan("own");
    own.per_client = true;
    let mut gw = Gateway::start(&servers, vec![own]);
    let mut old = gw.client().await;
    assert_eq!(old.tools().await, ["own__echo", "own__crash"]);
    until("the template stopped", || servers.running("own").is_empty()).await;
    let r = old
        .request("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    // Its own process, started for it, is listened to for the URI.
    until("its instance listened to for mem://a", || {
        listens(&servers, "own").last().is_some_and(|l| {
            l["params"]["notifications"]["resourceSubscriptions"] == json!(["mem://a"])
        })
    })
    .await;
    let upstream = listens(&servers, "own").pop().expect("a listen");
    let updated = on_listen(
        &upstream,
        "notifications/resources/updated",
        json!({"uri": "mem://a"}),
    );
    assert_eq!(servers.push("own", &updated), 1);
    let heard = loop {
        let m = old.notification().await;
        if m["method"] == "notifications/resources/updated" {
            break m;
        }
    };
    assert_eq!(heard["params"]["uri"], "mem://a", "{heard}");
    // Unsubscribed: the listen no longer names it.
    let before = listens(&servers, "own").len();
    let r = old
        .request("resources/unsubscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    let after = nth_listen(&servers, "own", before + 1).await;
    assert_eq!(
        after["params"]["notifications"]["resourceSubscriptions"],
        json!([]),
        "{after}"
    );
    assert_eq!(servers.count("own", "resources/subscribe"), 0);
    assert_eq!(servers.count("own", "resources/unsubscribe"), 0);
    gw.shutdown().await;
}
