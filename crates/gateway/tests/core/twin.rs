//! A shared server of both eras: its configured process is driven in
//! 2026-07-28, and the clients of the handshake era are served by a second
//! process of it, its twin, initialized in that era on their first request.

use std::time::Duration;

use serde_json::{Value, json};

use mcpvisor_gateway::monitor::{Monitor, ServerState};
use mcpvisor_gateway::{Control, Settings};
use mcpvisor_jsonrpc::{INVALID_PARAMS, WORKER_LOST};

use crate::support::{
    Discover, Front, Gateway, Listens, Script, Servers, answered_by, plan, until,
};

fn both() -> Script {
    Script {
        tools: vec!["echo".into(), "ask".into(), "crash".into()],
        discover: Discover::Both,
        ..Script::default()
    }
}

/// The methods worker `worker` received, in order.
fn methods_of(servers: &Servers, name: &str, worker: u64) -> Vec<String> {
    servers
        .seen(name)
        .into_iter()
        .filter(|s| s.worker == worker && s.message.get("method").is_some())
        .map(|s| s.message["method"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A 2026-07-28 client's call of `tool`.
async fn call_modern(front: &mut Front, tool: &str) -> Value {
    front
        .request_modern("tools/call", json!({"name": tool, "arguments": {}}))
        .await
}

/// A client of the handshake era that can be asked for input.
async fn asking_client(gw: &mut Gateway) -> Front {
    let mut front = gw.open().await;
    let init = front
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "old", "version": "1"}}),
        )
        .await;
    assert!(init.get("result").is_some(), "{init}");
    front
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    front
}

/// Calls `tool`, whose server asks `client` its name with an
/// `elicitation/create` of its own mid-call; answers "Ada" and checks the
/// server had it. The call's answer.
async fn asked_the_old_way(client: &mut Front, tool: &str) -> Value {
    let ask = json!({"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {"type": "object"}}});
    let call = client
        .begin(
            "tools/call",
            json!({"name": tool, "arguments": {"asks": [ask]}}),
        )
        .await;
    let asked = client.notification().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    client.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"name": "Ada"}}}))
        .await;
    let done = client.answer(&call).await;
    let answers = &done["result"]["structuredContent"]["answers"];
    assert_eq!(answers[0]["result"]["content"]["name"], "Ada", "{done}");
    done
}

#[tokio::test(start_paused = true)]
async fn a_handshake_client_s_call_starts_the_twin_and_a_2026_client_s_stays_on_the_primary() {
    let servers = Servers::default();
    servers.script("d", both());
    let (control, control_rx) = tokio::sync::mpsc::channel(16);
    let (monitor, tap) = Monitor::new(control);
    let settings = Settings {
        monitor: Some(tap),
        ..Settings::default()
    };
    let mut gw = Gateway::start_with_control(&servers, vec![plan("d")], settings, control_rx);

    // 2026-07-28 clients alone: one process, the discovered one.
    let mut new = gw.open().await;
    let r = call_modern(&mut new, "d__echo").await;
    let [primary] = servers.spawned("d")[..] else {
        panic!("one process: {:?}", servers.spawned("d"));
    };
    assert_eq!(answered_by(&r), ("d".to_owned(), primary));
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let row = monitor.server("d").await.expect("asked").expect("a page");
    assert!(row.status.twin.is_none(), "{:?}", row.status.twin);

    // A client of the handshake era lists without a second process (the
    // lists are the discovered process's), and its first call starts one,
    // initialized and never probed, which answers it.
    let mut old = gw.client().await;
    assert_eq!(old.tools().await, ["d__echo", "d__ask", "d__crash"]);
    assert_eq!(servers.spawned("d"), [primary]);
    let r = old.call("d__echo", json!({"x": 1})).await;
    let [_, twin] = servers.spawned("d")[..] else {
        panic!("two processes: {:?}", servers.spawned("d"));
    };
    assert_eq!(answered_by(&r), ("d".to_owned(), twin));
    assert!(r["result"].get("resultType").is_none(), "{r}");
    let seen = methods_of(&servers, "d", twin);
    assert_eq!(
        seen[..2],
        ["initialize", "notifications/initialized"],
        "{seen:?}"
    );
    assert!(seen.iter().any(|m| m == "tools/call"), "{seen:?}");
    assert!(seen.iter().all(|m| m != "server/discover"), "{seen:?}");

    // Each client stays on its own era's process.
    for _ in 0..2 {
        assert_eq!(
            answered_by(&call_modern(&mut new, "d__echo").await).1,
            primary
        );
        assert_eq!(answered_by(&old.call("d__echo", json!({})).await).1, twin);
    }
    let primary_saw = methods_of(&servers, "d", primary);
    assert!(
        primary_saw.iter().all(|m| m != "initialize"),
        "{primary_saw:?}"
    );

    // The row shows it, and counts its calls as the server's.
    let page = monitor.server("d").await.expect("asked").expect("a page");
    let shown = page.status.twin.expect("the twin on the row");
    assert_eq!(shown.state, ServerState::Ready);
    assert_eq!(page.status.calls, 6);
}

#[tokio::test(start_paused = true)]
async fn a_server_of_2026_07_28_alone_refuses_its_twin_once_and_serves_every_client() {
    let servers = Servers::default();
    let modern = Script {
        discover: Discover::Modern,
        ..both()
    };
    servers.script("m", modern);
    servers.script("chosen", both());
    let mut chosen = plan("chosen");
    chosen.def.era = mcpvisor_config::EraChoice::Modern;
    let mut gw = Gateway::start(&servers, vec![plan("m"), chosen]);
    let mut old = gw.client().await;

    // Its discovery does not say; the twin tried for the first call is
    // refused `initialize`, and the call waiting for it goes to the
    // discovered process.
    let r = old.call("m__echo", json!({})).await;
    let [primary, tried] = servers.spawned("m")[..] else {
        panic!("two processes: {:?}", servers.spawned("m"));
    };
    assert_eq!(answered_by(&r).1, primary, "{r}");
    assert_eq!(methods_of(&servers, "m", tried), ["initialize"]);
    until("the tried process stopped", || {
        servers.running("m") == [primary]
    })
    .await;
    // Never again, for any client, even on its next process.
    let r = old.call("m__crash", json!({})).await;
    assert_eq!(r["error"]["code"], WORKER_LOST, "{r}");
    let mut other = gw.client().await;
    let r = other.call("m__echo", json!({})).await;
    let next = answered_by(&r).1;
    assert!(next > tried, "{r}");
    assert_eq!(servers.spawned("m"), [primary, tried, next]);
    assert_eq!(servers.count("m", "initialize"), 1);

    // An entry that chose 2026-07-28: every client on its one process.
    let r = old.call("chosen__echo", json!({})).await;
    assert_eq!(answered_by(&r).1, servers.spawned("chosen")[0], "{r}");
    assert_eq!(servers.spawned("chosen").len(), 1);
    assert_eq!(servers.count("chosen", "initialize"), 0);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_queued_while_the_server_is_discovered_goes_to_the_twin() {
    let servers = Servers::default();
    servers.script("d", both());
    let mut lazy = plan("d");
    lazy.lazy = true;
    lazy.cached = Some(crate::support::cached("d", &["echo"]));
    let mut gw = Gateway::start(&servers, vec![lazy]);
    let mut old = gw.client().await;
    // The call starts the server; its discovery says both eras, and the
    // call waiting for it is answered by the twin.
    let r = old.call("d__echo", json!({})).await;
    let spawned = servers.spawned("d");
    assert_eq!(spawned.len(), 2, "{spawned:?}");
    assert_eq!(answered_by(&r).1, spawned[1], "{r}");
    assert_eq!(servers.count("d", "tools/call"), 1);
    assert_eq!(methods_of(&servers, "d", spawned[0])[0], "server/discover");
    assert_eq!(methods_of(&servers, "d", spawned[1])[0], "initialize");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reconfiguring_or_removing_the_server_stops_its_twin() {
    let servers = Servers::default();
    servers.script("d", both());
    let mut gw = Gateway::start(&servers, vec![plan("d")]);
    let mut old = gw.client().await;
    let twin = answered_by(&old.call("d__echo", json!({})).await).1;
    let primary = servers.spawned("d")[0];
    assert_ne!(twin, primary);

    // A changed entry: both processes stop, and the next call starts a new
    // twin beside the new process.
    let mut changed = plan("d");
    changed.def.args = vec!["--new".into()];
    gw.control(Control::Reconfigure(vec![changed.clone()]))
        .await;
    until("both processes stopped", || {
        let ended = servers.ended("d");
        ended.contains(&primary) && ended.contains(&twin)
    })
    .await;
    let again = answered_by(&old.call("d__echo", json!({})).await).1;
    assert!(again > twin, "a new twin: {again}");
    assert_eq!(servers.running("d").len(), 2, "{:?}", servers.running("d"));

    // Removed: nothing of it runs.
    gw.control(Control::Reconfigure(vec![])).await;
    until("every process stopped", || servers.running("d").is_empty()).await;
    let r = old.call("d__echo", json!({})).await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    assert!(servers.running("d").is_empty());
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_twin_that_crashes_fails_its_call_once_and_is_started_again() {
    let servers = Servers::default();
    servers.script("d", both());
    let mut gw = Gateway::start(&servers, vec![plan("d")]);
    let mut new = gw.open().await;
    let primary = answered_by(&call_modern(&mut new, "d__echo").await).1;
    let mut old = gw.client().await;
    let twin = answered_by(&old.call("d__echo", json!({})).await).1;

    let r = old.call("d__crash", json!({})).await;
    assert_eq!(r["error"]["code"], WORKER_LOST, "{r}");
    // Its session starts the next one, initialized again; the 2026-07-28
    // process is not touched.
    let next = answered_by(&old.call("d__echo", json!({})).await).1;
    assert!(next > twin, "{next} after {twin}");
    assert_eq!(methods_of(&servers, "d", next)[0], "initialize");
    assert_eq!(servers.running("d"), [primary, next]);
    assert_eq!(
        answered_by(&call_modern(&mut new, "d__echo").await).1,
        primary
    );
    // Nothing else was answered to the client.
    let rest = old.drain(Duration::from_secs(1)).await;
    assert!(rest.iter().all(|m| m.get("id").is_none()), "{rest:?}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_from_the_twin_goes_to_the_client_that_made_the_call() {
    let servers = Servers::default();
    servers.script("d", both());
    let mut p = plan("d");
    p.session.request_ceiling = Duration::from_secs(60);
    let mut gw = Gateway::start(&servers, vec![p]);
    // A 2026-07-28 client and another of the handshake era are open too.
    let mut new = gw.open().await;
    call_modern(&mut new, "d__echo").await;
    let mut other = asking_client(&mut gw).await;
    let mut old = asking_client(&mut gw).await;
    other.call("d__echo", json!({})).await;

    // The server asks the client mid-call, the handshake era's way.
    asked_the_old_way(&mut old, "d__ask").await;
    // Asked of it alone.
    for front in [&mut other, &mut new] {
        let seen = front.drain(Duration::from_secs(1)).await;
        assert!(
            seen.iter().all(|m| m["method"] != "elicitation/create"),
            "{seen:?}"
        );
    }
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_handshake_client_s_subscription_is_held_at_the_twin() {
    let servers = Servers::default();
    servers.script(
        "d",
        Script {
            resources: vec!["mem://a".into()],
            listens: Listens::Hold,
            ..both()
        },
    );
    let mut gw = Gateway::start(&servers, vec![plan("d")]);
    let mut old = gw.client().await;
    let r = old
        .request("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    // The twin is started for it, and subscribed once it is initialized.
    until("a twin subscribed", || {
        servers.count("d", "resources/subscribe") == 1
    })
    .await;
    let [_, twin] = servers.spawned("d")[..] else {
        panic!("two processes: {:?}", servers.spawned("d"));
    };
    let on_twin = methods_of(&servers, "d", twin);
    assert!(
        on_twin.iter().any(|m| m == "resources/subscribe"),
        "{on_twin:?}"
    );

    // What it tells of the URI reaches the client.
    let updated = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "mem://a"}});
    assert!(servers.push_to("d", twin, &updated));
    let heard = old.notification().await;
    assert_eq!(
        heard["method"], "notifications/resources/updated",
        "{heard}"
    );
    assert_eq!(heard["params"]["uri"], "mem://a", "{heard}");

    // The client's unsubscribe reaches it too.
    let r = old
        .request("resources/unsubscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(r["result"], json!({}), "{r}");
    until("the twin unsubscribed", || {
        methods_of(&servers, "d", twin)
            .iter()
            .any(|m| m == "resources/unsubscribe")
    })
    .await;
    // Told once, by the twin's start (never again by the request itself).
    assert_eq!(servers.count("d", "resources/subscribe"), 1);
    gw.shutdown().await;
}

// === per-client servers of both eras ===

#[tokio::test(start_paused = true)]
async fn a_per_client_process_of_a_server_of_both_eras_speaks_its_client_s_era() {
    let servers = Servers::default();
    servers.script("own", both());
    let mut own = plan("own");
    own.per_client = true;
    own.session.request_ceiling = Duration::from_secs(60);
    let mut gw = Gateway::start(&servers, vec![own]);
    let mut old = asking_client(&mut gw).await;
    let mut new = gw.open().await;
    // The handshake-era client's process is initialized and never asked
    // its era: the newest that client and server share.
    let r = old.call("own__echo", json!({})).await;
    let (_, mine) = answered_by(&r);
    assert!(r["result"].get("resultType").is_none(), "{r}");
    let seen = methods_of(&servers, "own", mine);
    assert_eq!(
        seen[..2],
        ["initialize", "notifications/initialized"],
        "{seen:?}"
    );
    assert!(seen.iter().all(|m| m != "server/discover"), "{seen:?}");
    // The 2026-07-28 client's is discovered, and never initialized.
    let r = call_modern(&mut new, "own__echo").await;
    let (_, theirs) = answered_by(&r);
    assert_ne!(mine, theirs);
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let seen = methods_of(&servers, "own", theirs);
    assert_eq!(seen[0], "server/discover", "{seen:?}");
    assert!(seen.iter().all(|m| m != "initialize"), "{seen:?}");
    // A server's question mid-call reaches the handshake-era client as the
    // server asked it, from the client's own process.
    let done = asked_the_old_way(&mut old, "own__ask").await;
    assert!(done["result"].get("resultType").is_none(), "{done}");
    assert_eq!(answered_by(&old.call("own__echo", json!({})).await).1, mine);
    assert_eq!(servers.spawned("own").len(), 3, "the template and two");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_per_client_process_of_a_server_of_2026_07_28_alone_is_found_so_once() {
    let servers = Servers::default();
    servers.script(
        "own",
        Script {
            discover: Discover::Modern,
            ..both()
        },
    );
    let mut own = plan("own");
    own.per_client = true;
    let mut gw = Gateway::start(&servers, vec![own]);
    let mut first = gw.client().await;
    // Its first process for a handshake-era client is refused
    // `initialize`; another, discovered, takes its place and answers the
    // call that waited.
    let r = first.call("own__echo", json!({"x": 1})).await;
    assert!(r.get("result").is_some(), "{r}");
    let (_, answered) = answered_by(&r);
    let refused: Vec<u64> = servers
        .spawned("own")
        .into_iter()
        .filter(|w| {
            methods_of(&servers, "own", *w)
                .iter()
                .any(|m| m == "initialize")
        })
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", servers.spawned("own"));
    assert_ne!(refused[0], answered);
    assert_eq!(methods_of(&servers, "own", answered)[0], "server/discover");
    until("the refused process stopped", || {
        servers.ended("own").contains(&refused[0])
    })
    .await;
    // The next such client's process is discovered at once.
    let mut second = gw.client().await;
    let r = second.call("own__echo", json!({})).await;
    let (_, next) = answered_by(&r);
    assert!(![refused[0], answered].contains(&next));
    let seen = methods_of(&servers, "own", next);
    assert!(seen.iter().all(|m| m != "initialize"), "{seen:?}");
    assert_eq!(
        answered_by(&first.call("own__echo", json!({})).await).1,
        answered
    );
}
