//! The hub on paused time: the real gateway core, its servers scripted
//! in-process (no process starts), its fronts on channels. Timers (health
//! pings, idle stops, parked lists, the session's restarts) cost nothing,
//! and every run of a test is the same run.

mod support;

use serde_json::json;
use support::{Gateway, Servers, answered_by, plan};

#[tokio::test(start_paused = true)]
async fn a_scripted_server_s_tool_is_listed_and_called_through_a_front() {
    let servers = Servers::default();
    let mut gw = Gateway::start(&servers, vec![plan("a"), plan("b")]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["a__echo", "b__echo"]);
    let r = front.call("b__echo", json!({"x": 1})).await;
    assert_eq!(answered_by(&r), ("b".to_owned(), servers.spawned("b")[0]));
    assert_eq!(r["result"]["structuredContent"]["args"], json!({"x": 1}));
    assert_eq!(servers.count("a", "tools/call"), 0);
    assert_eq!(servers.count("b", "tools/call"), 1);
    gw.shutdown().await;
    // Every worker was stopped with the gateway.
    assert!(servers.running("a").is_empty() && servers.running("b").is_empty());
}
