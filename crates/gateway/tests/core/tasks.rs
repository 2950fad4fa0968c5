//! Tasks routed by their namespaced ids: two servers that give the same
//! task id are both reachable through the gateway.

use std::time::Duration;

use mcpvisor_jsonrpc::{INVALID_PARAMS, METHOD_NOT_FOUND};
use serde_json::{Value, json};

use crate::support::{Gateway, Script, Servers, answered_by, plan, until};

fn with_tasks(servers: &Servers, name: &str) {
    servers.script(
        name,
        Script {
            tasks: true,
            ..Script::default()
        },
    );
}

/// The `taskId` the server `name`'s last `method` carried.
fn task_id_seen(servers: &Servers, name: &str, method: &str) -> Value {
    servers
        .seen(name)
        .into_iter()
        .rfind(|s| s.message["method"] == method)
        .unwrap_or_else(|| panic!("{name} saw no {method}"))
        .message["params"]["taskId"]
        .clone()
}

#[tokio::test(start_paused = true)]
async fn two_servers_tasks_with_the_same_id_are_each_reached_by_its_namespaced_id() {
    let servers = Servers::default();
    with_tasks(&servers, "a");
    with_tasks(&servers, "b");
    let mut gw = Gateway::start(&servers, vec![plan("a"), plan("b")]);
    let mut front = gw.open().await;
    let init = front
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "core", "version": "0"}}),
        )
        .await;
    front
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    assert_eq!(
        init["result"]["capabilities"]["tasks"],
        json!({"cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{init}"
    );
    // Each server creates its task "task-1".
    for server in ["a", "b"] {
        let r = front
            .request(
                "tools/call",
                json!({"name": format!("{server}__echo"), "arguments": {}, "task": {"ttl": 60000}}),
            )
            .await;
        assert_eq!(
            r["result"]["task"]["taskId"],
            format!("{server}__task-1"),
            "{r}"
        );
        assert_eq!(r["result"]["task"]["status"], "working", "{r}");
    }
    // Each is reached by its own id, the server seeing its own.
    for server in ["b", "a"] {
        let id = format!("{server}__task-1");
        let r = front.request("tasks/get", json!({"taskId": id})).await;
        assert_eq!(r["result"]["taskId"], id, "{r}");
        assert_eq!(r["result"]["statusMessage"], server, "{r}");
        assert_eq!(task_id_seen(&servers, server, "tasks/get"), "task-1");
        let r = front.request("tasks/result", json!({"taskId": id})).await;
        assert_eq!(answered_by(&r).0, server, "{r}");
        // What the task asked on the way names it by its exposed id.
        let asked = front.notification().await;
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        assert_eq!(
            asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id,
            "{asked}"
        );
        assert_eq!(
            r["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id,
            "{r}"
        );
        let r = front.request("tasks/cancel", json!({"taskId": id})).await;
        assert_eq!(r["result"]["status"], "cancelled", "{r}");
        assert_eq!(r["result"]["taskId"], id, "{r}");
    }
    assert_eq!(servers.count("a", "tasks/get"), 1);
    assert_eq!(servers.count("b", "tasks/get"), 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_id_no_server_gave_is_not_found_and_a_2026_client_is_routed_too() {
    let servers = Servers::default();
    with_tasks(&servers, "a");
    let mut gw = Gateway::start(&servers, vec![plan("a"), plan("b")]);
    let mut front = gw.client().await;
    for id in ["c__task-1", "task-1", "a_task-1", ""] {
        let r = front.request("tasks/get", json!({"taskId": id})).await;
        assert_eq!(r["error"]["code"], INVALID_PARAMS, "{id}: {r}");
        assert_eq!(r["error"]["data"]["taskId"], id, "{r}");
    }
    // A server's own refusal of an id it does not know comes back as is.
    let r = front
        .request("tasks/get", json!({"taskId": "a__task-2"}))
        .await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    assert_eq!(task_id_seen(&servers, "a", "tasks/get"), "task-2");
    let r = front.request("tasks/get", json!({})).await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    let r = front.request("tasks/list", json!({})).await;
    assert_eq!(r["error"]["code"], METHOD_NOT_FOUND, "{r}");
    // The 2026-07-28 extension's methods, routed the same way.
    let mut modern = gw.open().await;
    let r = modern
        .request_modern("tasks/get", json!({"taskId": "a__task-1"}))
        .await;
    assert_eq!(r["result"]["taskId"], "a__task-1", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let r = modern
        .request_modern(
            "tasks/update",
            json!({"taskId": "a__task-1", "inputResponses": {}}),
        )
        .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(task_id_seen(&servers, "a", "tasks/update"), "task-1");
    // The envelope stays with the gateway.
    let seen = servers
        .seen("a")
        .into_iter()
        .rfind(|s| s.message["method"] == "tasks/update")
        .expect("an update");
    assert!(
        seen.message["params"].get("_meta").is_none(),
        "{:?}",
        seen.message
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_shared_server_s_task_status_reaches_no_client() {
    let servers = Servers::default();
    with_tasks(&servers, "a");
    let mut gw = Gateway::start(&servers, vec![plan("a")]);
    let mut front = gw.client().await;
    until("a runs", || !servers.running("a").is_empty()).await;
    let status = json!({"jsonrpc": "2.0", "method": "notifications/tasks/status",
        "params": {"taskId": "task-1", "status": "completed"}});
    assert_eq!(servers.push("a", &status), 1);
    // A call after it is answered first: the status was not passed on.
    let r = front.call("a__echo", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    assert_eq!(
        front.drain(Duration::from_secs(1)).await,
        Vec::<Value>::new()
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_task_handed_to_a_session_is_that_session_s_alone() {
    let servers = Servers::default();
    with_tasks(&servers, "a");
    with_tasks(&servers, "b");
    let mut gw = Gateway::start(&servers, vec![plan("a"), plan("b")]);
    let mut owner = gw.client().await;
    let mut other = gw.client().await;
    let r = owner
        .request(
            "tools/call",
            json!({"name": "a__echo", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    let id = r["result"]["task"]["taskId"].clone();
    assert_eq!(id, "a__task-1", "{r}");
    // Another session, and a 2026-07-28 request (no session), are told
    // what they would be of an id no server gave; the server never sees
    // their requests.
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = other.request(method, json!({"taskId": id})).await;
        assert_eq!(r["error"]["code"], INVALID_PARAMS, "{method}: {r}");
        assert_eq!(r["error"]["data"]["taskId"], id, "{r}");
    }
    let mut modern = gw.open().await;
    let r = modern
        .request_modern("tasks/get", json!({"taskId": id}))
        .await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    assert_eq!(servers.count("a", "tasks/get"), 0);
    assert_eq!(servers.count("a", "tasks/cancel"), 0);
    // Its own session reaches it.
    let r = owner.request("tasks/get", json!({"taskId": id})).await;
    assert_eq!(r["result"]["taskId"], id, "{r}");
    // Once that session has gone, nobody does.
    owner.close().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = other.request("tasks/get", json!({"taskId": id})).await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
    assert_eq!(servers.count("a", "tasks/get"), 1);
    // A task created by a 2026-07-28 request is bound to nobody: any
    // request naming it reaches it.
    let r = modern
        .request_modern(
            "tools/call",
            json!({"name": "b__echo", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    let created = r["result"]["taskId"]
        .as_str()
        .or_else(|| r["result"]["task"]["taskId"].as_str())
        .unwrap_or_else(|| panic!("a task: {r}"))
        .to_owned();
    let r = other.request("tasks/get", json!({"taskId": created})).await;
    assert_eq!(r["result"]["taskId"], created, "{r}");
    gw.shutdown().await;
}
