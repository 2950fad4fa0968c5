//! The hub on paused time: the real gateway core, its servers scripted
//! in-process (no process starts), its fronts on channels. Timers (health
//! pings, idle stops, parked lists, the session's restarts) cost nothing,
//! and every run of a test is the same run.

mod bridge;
mod era;
mod listen;
mod pins;
mod support;
mod tasks;
mod twin;
mod upstream;

use std::time::Duration;

use mcpvisor_gateway::cache::{Cache, Key};
use mcpvisor_gateway::monitor::{Monitor, MonitorEvent, ServerState};
use mcpvisor_gateway::{Cached, Control, ServerPlan, Settings};
use mcpvisor_jsonrpc::{INVALID_PARAMS, NOT_STARTED, WORKER_LOST};
use serde_json::json;
use support::{
    Gateway, Script, Servers, answered_by, cached, is_tools_changed, plan, tools_changes, until,
};
use tokio::time::Instant;

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

// === health ===

#[tokio::test(start_paused = true)]
async fn a_server_that_stops_answering_pings_is_restarted_once() {
    let servers = Servers::default();
    servers.script(
        "a",
        Script {
            tools: vec!["echo".into(), "sleep".into()],
            answer_pings: false,
            ..Script::default()
        },
    );
    let health = |mut p: ServerPlan| {
        p.health_interval = Some(Duration::from_millis(200));
        p.health_misses = 2;
        p
    };
    let mut gw = Gateway::start(&servers, vec![health(plan("a")), health(plan("b"))]);
    let mut front = gw.client().await;
    let frozen = answered_by(&front.call("a__echo", json!({})).await).1;
    let b_before = answered_by(&front.call("b__echo", json!({})).await).1;
    // Its next worker answers them.
    servers.edit("a", |s| s.answer_pings = true);
    // One ping goes out after 200 ms, and two ticks later (two misses) it
    // is restarted: within a second, not before 600 ms.
    let took = until("a second worker of a", || servers.spawned("a").len() == 2).await;
    assert!(
        (Duration::from_millis(550)..Duration::from_millis(1000)).contains(&took),
        "restarted after {took:?}"
    );
    until("the frozen worker stopped", || {
        servers.ended("a").contains(&frozen)
    })
    .await;
    // A long call on the new worker, running while the old one is stopped:
    // the end of the old worker's session must not touch the new one, and
    // a server busy with a call is not pinged (a long call is not a hang).
    let long = front
        .begin(
            "tools/call",
            json!({"name": "a__sleep", "arguments": {"ms": 5000}}),
        )
        .await;
    let fresh = answered_by(&front.call("a__echo", json!({})).await).1;
    assert_ne!(fresh, frozen);
    let r = front.answer(&long).await;
    assert_eq!(answered_by(&r), ("a".to_owned(), fresh), "{r}");
    // A minute later it still runs: restarted once.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let again = answered_by(&front.call("a__echo", json!({})).await).1;
    assert_eq!(again, fresh, "restarted a second time");
    assert!(
        servers.count("a", "ping") > 100,
        "the new worker was not pinged"
    );
    let b_after = answered_by(&front.call("b__echo", json!({})).await).1;
    assert_eq!(b_after, b_before, "a healthy server was restarted");
    assert_eq!(servers.spawned("b"), [b_before]);
}

// === idle ===

#[tokio::test(start_paused = true)]
async fn an_idle_server_is_stopped_and_started_again_by_its_next_call() {
    let servers = Servers::default();
    let mut idle = plan("idle");
    idle.idle_timeout = Some(Duration::from_secs(1));
    let mut gw = Gateway::start(&servers, vec![idle]);
    let mut front = gw.client().await;
    let first = answered_by(&front.call("idle__echo", json!({})).await).1;
    // Not before its idle timeout...
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(servers.running("idle"), [first]);
    // ...but after it, it is stopped.
    tokio::time::sleep(Duration::from_millis(600)).await;
    until("the idle server stopped", || {
        servers.running("idle").is_empty()
    })
    .await;
    // Its tools stay listed, and the next call starts it again.
    assert_eq!(front.tools().await, ["idle__echo"]);
    assert_eq!(servers.spawned("idle"), [first]);
    let second = answered_by(&front.call("idle__echo", json!({})).await).1;
    assert_ne!(second, first, "the idle server was not stopped");
    // Its stop and start change no list.
    let tail = front.drain(Duration::from_secs(1)).await;
    assert_eq!(tools_changes(&tail), 0, "{tail:?}");
}

// === lazy servers and the cache ===

#[tokio::test(start_paused = true)]
async fn a_lazy_server_is_listed_from_the_cache_and_started_by_its_first_call() {
    let servers = Servers::default();
    let mut lazy = plan("lazy");
    lazy.lazy = true;
    lazy.cached = Some(cached("lazy", &["echo", "old"]));
    let mut gw = Gateway::start(&servers, vec![lazy]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["lazy__echo", "lazy__old"]);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        servers.spawned("lazy").is_empty(),
        "the lazy server was started just to list it"
    );
    // The first call starts it; its own list replaces the cached one, told
    // once.
    let r = front.call("lazy__echo", json!({"x": 1})).await;
    assert_eq!(answered_by(&r).0, "lazy");
    assert_eq!(servers.spawned("lazy").len(), 1);
    let tail = front.drain(Duration::from_secs(1)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["lazy__echo"]);
}

#[tokio::test(start_paused = true)]
async fn a_lazy_server_without_a_cache_entry_is_started_once_to_read_its_lists() {
    let servers = Servers::default();
    let mut lazy = plan("lazy");
    lazy.lazy = true;
    let mut gw = Gateway::start(&servers, vec![lazy]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["lazy__echo"]);
    assert_eq!(servers.spawned("lazy").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lazy_server_s_lists_read_by_one_gateway_list_it_in_the_next_without_a_start() {
    let dir = tempfile::tempdir().expect("a cache directory");
    let servers = Servers::default();
    servers.script(
        "lazy",
        Script {
            tools: vec!["echo".into(), "more".into()],
            ..Script::default()
        },
    );
    let lazy = || {
        let mut p = plan("lazy");
        p.lazy = true;
        let key = Key::new(&p.def, None);
        p.cached = Cache::at(dir.path())
            .get(&key)
            .map(|l| Cached::from_lists(&l));
        p.cache_key = Some(key);
        p
    };
    let settings = || Settings {
        cache_dir: Some(dir.path().to_owned()),
        ..Settings::default()
    };
    // No cache entry: it is started once to read its lists, which are
    // cached.
    let first = lazy();
    assert!(first.cached.is_none());
    let key = first.cache_key.expect("a key");
    let mut gw = Gateway::start_with(&servers, vec![first], settings());
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["lazy__echo", "lazy__more"]);
    assert_eq!(servers.spawned("lazy").len(), 1);
    until("its lists cached", || {
        Cache::at(dir.path()).get(&key).is_some()
    })
    .await;
    gw.shutdown().await;
    // The next gateway lists it from the cache and starts nothing.
    let second = lazy();
    assert!(second.cached.is_some());
    let mut gw = Gateway::start_with(&servers, vec![second], settings());
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["lazy__echo", "lazy__more"]);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(servers.spawned("lazy").len(), 1, "started just to list it");
    // Its first call starts it.
    let r = front.call("lazy__more", json!({})).await;
    assert_eq!(
        answered_by(&r),
        ("lazy".to_owned(), servers.spawned("lazy")[1])
    );
}

// === parked lists ===

/// A gateway of `a` and of `slow`, whose server answers initialize after
/// `delay`; a list waits for a starting server at most 5 s.
fn with_a_slow_server(servers: &Servers, delay: Duration) -> Gateway {
    servers.script(
        "slow",
        Script {
            initialize_delay: Some(delay),
            ..Script::default()
        },
    );
    let settings = Settings {
        list_timeout: Duration::from_secs(5),
        ..Settings::default()
    };
    Gateway::start_with(servers, vec![plan("a"), plan("slow")], settings)
}

#[tokio::test(start_paused = true)]
async fn a_list_waits_for_a_starting_server_at_most_the_list_timeout() {
    let servers = Servers::default();
    let mut gw = with_a_slow_server(&servers, Duration::from_secs(60));
    let start = Instant::now();
    let mut front = gw.client().await;
    let took = start.elapsed();
    // The front's initialize waited for the list timeout, not for the slow
    // server.
    assert!(
        (Duration::from_secs(5)..Duration::from_millis(5100)).contains(&took),
        "initialize took {took:?}"
    );
    let start = Instant::now();
    let r = front.request("tools/list", json!({})).await;
    let took = start.elapsed();
    assert!(
        (Duration::from_secs(5)..Duration::from_millis(5100)).contains(&took),
        "tools/list took {took:?}"
    );
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["a__echo"], "{r}");
    // Once it answers, its tools arrive with one list change.
    let tail = front.drain(Duration::from_secs(60)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["a__echo", "slow__echo"]);
}

#[tokio::test(start_paused = true)]
async fn a_parked_list_is_answered_as_soon_as_its_servers_are_ready() {
    let servers = Servers::default();
    let mut gw = with_a_slow_server(&servers, Duration::from_secs(2));
    let start = Instant::now();
    let mut front = gw.client().await;
    let took = start.elapsed();
    assert!(
        (Duration::from_secs(2)..Duration::from_millis(2100)).contains(&took),
        "initialize took {took:?}"
    );
    let start = Instant::now();
    assert_eq!(front.tools().await, ["a__echo", "slow__echo"]);
    assert!(start.elapsed() < Duration::from_millis(100));
    let tail = front.drain(Duration::from_secs(60)).await;
    assert_eq!(tools_changes(&tail), 0, "{tail:?}");
}

// === crash loops ===

#[tokio::test(start_paused = true)]
async fn a_crash_looping_server_s_tools_are_withdrawn_and_come_back_once_it_recovers() {
    let servers = Servers::default();
    servers.script(
        "b",
        Script {
            tools: vec!["echo".into(), "crash".into()],
            ..Script::default()
        },
    );
    let mut gw = Gateway::start(&servers, vec![plan("a"), plan("b")]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["a__echo", "b__echo", "b__crash"]);
    // Every worker after the first exits as it starts.
    servers.edit("b", |s| s.exit_at_start = Some(3));
    let r = front.call("b__crash", json!({})).await;
    assert_eq!(r["error"]["code"], WORKER_LOST, "{r}");
    // The session gives up after five quick exits; the gateway withdraws
    // its tools, with one list change.
    let first = front.next(Duration::from_secs(30)).await;
    assert!(first.as_ref().is_some_and(is_tools_changed), "{first:?}");
    assert_eq!(front.tools().await, ["a__echo"]);
    let r = front.call("b__echo", json!({})).await;
    assert_eq!(r["error"]["code"], NOT_STARTED, "{r}");
    // The others are not touched.
    let r = front.call("a__echo", json!({})).await;
    assert_eq!(answered_by(&r).0, "a");
    let looped = servers.spawned("b").len();
    assert_eq!(looped, 5, "five quick exits: the first worker's and four");
    // It recovers: after the failed state's cooldown its next worker
    // starts, and its tools come back with one list change.
    servers.edit("b", |s| s.exit_at_start = None);
    let tail = front.drain(Duration::from_secs(90)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["a__echo", "b__echo", "b__crash"]);
    let r = front.call("b__echo", json!({})).await;
    assert_eq!(
        answered_by(&r),
        ("b".to_owned(), servers.spawned("b")[looped])
    );
    assert_eq!(servers.spawned("a").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_crash_looping_server_delays_nothing_and_its_tools_are_absent() {
    const LIST_TIMEOUT: Duration = Duration::from_secs(2);
    let servers = Servers::default();
    servers.script(
        "b",
        Script {
            exit_on_initialize: Some(3),
            ..Script::default()
        },
    );
    servers.script(
        "c",
        Script {
            exit_at_start: Some(3),
            ..Script::default()
        },
    );
    let settings = Settings {
        list_timeout: LIST_TIMEOUT,
        ..Settings::default()
    };
    let mut gw = Gateway::start_with(&servers, vec![plan("a"), plan("b"), plan("c")], settings);
    let start = Instant::now();
    let mut front = gw.client().await;
    let took = start.elapsed();
    assert!(took <= LIST_TIMEOUT, "initialize took {took:?}");
    let start = Instant::now();
    let names = front.tools().await;
    let took = start.elapsed();
    assert!(took <= LIST_TIMEOUT, "tools/list took {took:?}");
    assert_eq!(names, ["a__echo"], "only a's tools");
    for name in ["b__echo", "c__echo"] {
        let start = Instant::now();
        let r = front.call(name, json!({})).await;
        assert!(r.get("error").is_some(), "{name}: {r}");
        let took = start.elapsed();
        assert!(took <= LIST_TIMEOUT, "{name} took {took:?}: {r}");
    }
    let r = front.call("a__echo", json!({"still": "fine"})).await;
    assert_eq!(
        r["result"]["structuredContent"]["args"],
        json!({"still": "fine"}),
        "{r}"
    );
    assert_eq!(
        servers.count("b", "tools/call") + servers.count("c", "tools/call"),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_could_not_start_is_retried_until_it_starts() {
    // Its first two starts fail the handshake, the third works. Each retry
    // stops the session before, which ends in the background while the
    // next one runs: its end must not be taken for the new session's.
    let servers = Servers::default();
    servers.script(
        "b",
        Script {
            initialize_errors: 2,
            ..Script::default()
        },
    );
    let mut b = plan("b");
    b.health_interval = Some(Duration::from_millis(200));
    let mut gw = Gateway::start(&servers, vec![plan("a"), b]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["a__echo"]);
    // A retry at each health tick: its tools arrive with one list change.
    let tail = front.drain(Duration::from_secs(1)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["a__echo", "b__echo"]);
    let started = servers.spawned("b");
    assert_eq!(started.len(), 3, "{started:?}");
    let r = front.call("b__echo", json!({"up": true})).await;
    assert_eq!(answered_by(&r), ("b".to_owned(), started[2]), "{r}");
    assert_eq!(
        r["result"]["structuredContent"]["args"],
        json!({"up": true})
    );
    // The failed ones were stopped; the third runs on.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(servers.running("b"), [started[2]]);
}

// === authorization ===

#[tokio::test(start_paused = true)]
async fn a_server_waiting_for_authorization_refuses_with_its_link_and_joins_once_authorized() {
    let link = "https://auth.example.com/authorize?client_id=gw&state=1";
    let servers = Servers::default();
    servers.script(
        "remote",
        Script {
            auth_prompt: Some(link.into()),
            initialize_delay: Some(Duration::from_secs(20)),
            ..Script::default()
        },
    );
    let mut remote = plan("remote");
    remote.session.auth_timeout = Duration::from_secs(120);
    let mut gw = Gateway::start(&servers, vec![remote, plan("local")]);
    let start = Instant::now();
    let mut front = gw.client().await;
    // The server waiting on a person delays nothing: the other is listed.
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(front.tools().await, ["local__echo"]);
    // A call to it is refused at once with the link in the message itself.
    let r = front.call("remote__echo", json!({})).await;
    assert_eq!(r["error"]["code"], NOT_STARTED, "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(link), "{r}");
    assert_eq!(r["error"]["data"]["authorization_url"], link, "{r}");
    assert_eq!(servers.count("remote", "tools/call"), 0);
    // Once its initialize completes, its tools arrive with one list change.
    let tail = front.drain(Duration::from_secs(30)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["remote__echo", "local__echo"]);
    let r = front.call("remote__echo", json!({"text": "hi"})).await;
    assert_eq!(answered_by(&r).0, "remote", "{r}");
    assert_eq!(servers.spawned("remote").len(), 1);
}

// === list changes ===

#[tokio::test(start_paused = true)]
async fn a_burst_of_list_changes_is_told_once_and_none_without_a_change() {
    let servers = Servers::default();
    let mut gw = Gateway::start(&servers, vec![plan("a"), plan("b")]);
    let mut front = gw.client().await;
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    // Nothing changed: the lists are read again, nothing is told.
    for _ in 0..5 {
        assert_eq!(servers.push("a", &changed), 1);
    }
    until("a's lists read again", || {
        servers.count("a", "tools/list") >= 2
    })
    .await;
    let tail = front.drain(Duration::from_secs(5)).await;
    assert_eq!(tools_changes(&tail), 0, "{tail:?}");
    // One change, told five times by the server: told once to the front.
    servers.edit("a", |s| s.tools.push("new".into()));
    for _ in 0..5 {
        servers.push("a", &changed);
    }
    let tail = front.drain(Duration::from_secs(5)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["a__echo", "a__new", "b__echo"]);
    let r = front.call("a__new", json!({})).await;
    assert_eq!(answered_by(&r).0, "a");
    // Two servers changing at once: one change each.
    servers.edit("a", |s| s.tools.retain(|t| t != "new"));
    servers.edit("b", |s| s.tools.push("more".into()));
    servers.push("a", &changed);
    servers.push("b", &changed);
    let tail = front.drain(Duration::from_secs(5)).await;
    assert!((1..=2).contains(&tools_changes(&tail)), "{tail:?}");
    assert_eq!(front.tools().await, ["a__echo", "b__echo", "b__more"]);
}

#[tokio::test(start_paused = true)]
async fn served_as_itself_a_server_s_list_change_is_told_even_when_the_list_reads_the_same() {
    let servers = Servers::default();
    let settings = Settings {
        transparent: true,
        ..Settings::default()
    };
    let mut gw = Gateway::start_with(&servers, vec![plan("a")], settings);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["echo"]);
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    // The server says its list changed and it reads the same: its client
    // hears what it said, once per word, after the list is read again.
    let reads = servers.count("a", "tools/list");
    servers.push("a", &changed);
    let tail = front.drain(Duration::from_secs(5)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(servers.count("a", "tools/list"), reads + 1);
    // A change it does not announce (none) is not made up.
    let tail = front.drain(Duration::from_secs(5)).await;
    assert_eq!(tools_changes(&tail), 0, "{tail:?}");
    // A real change, announced: told once, not twice.
    servers.edit("a", |s| s.tools.push("new".into()));
    servers.push("a", &changed);
    let tail = front.drain(Duration::from_secs(5)).await;
    assert_eq!(tools_changes(&tail), 1, "{tail:?}");
    assert_eq!(front.tools().await, ["echo", "new"]);
}

// === configuration edits ===

#[tokio::test(start_paused = true)]
async fn a_config_edit_adds_removes_and_restarts_only_what_changed() {
    let servers = Servers::default();
    let mut gw = Gateway::start(
        &servers,
        vec![plan("same"), plan("changed"), plan("removed")],
    );
    let mut front = gw.client().await;
    let same = answered_by(&front.call("same__echo", json!({})).await).1;
    let old = answered_by(&front.call("changed__echo", json!({})).await).1;
    let removed = servers.spawned("removed");
    let mut changed = plan("changed");
    changed.def.args = vec!["--new".into()];
    gw.control(Control::Reconfigure(vec![
        plan("same"),
        changed,
        plan("added"),
    ]))
    .await;
    until("the removed server stopped", || {
        servers.running("removed").is_empty()
    })
    .await;
    until("the changed server's old worker stopped", || {
        servers.ended("changed").contains(&old)
    })
    .await;
    assert_eq!(servers.ended("removed"), removed);
    // Told when the edit is applied, and as each started server's list
    // arrives: at most three times, never not at all.
    let tail = front.drain(Duration::from_secs(5)).await;
    assert!((1..=3).contains(&tools_changes(&tail)), "{tail:?}");
    assert_eq!(
        front.tools().await,
        ["same__echo", "changed__echo", "added__echo"]
    );
    // The unchanged server kept its worker; the changed one has a new one.
    assert_eq!(
        answered_by(&front.call("same__echo", json!({})).await).1,
        same
    );
    assert_eq!(servers.spawned("same"), [same]);
    let new = answered_by(&front.call("changed__echo", json!({})).await).1;
    assert_ne!(new, old);
    assert_eq!(servers.spawned("changed"), [old, new]);
    assert_eq!(servers.spawned("added").len(), 1);
    let r = front.call("removed__echo", json!({})).await;
    assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
}

// === per-client servers ===

#[tokio::test(start_paused = true)]
async fn each_client_gets_its_own_instance_which_ends_with_it() {
    let servers = Servers::default();
    let mut own = plan("own");
    own.per_client = true;
    let mut gw = Gateway::start(&servers, vec![own]);
    let mut one = gw.client().await;
    let mut two = gw.client().await;
    // The configured server started once to read its lists, then stopped.
    assert_eq!(one.tools().await, ["own__echo"]);
    let template = servers.spawned("own");
    assert_eq!(template.len(), 1);
    until("the template stopped", || servers.running("own").is_empty()).await;
    let a = answered_by(&one.call("own__echo", json!({})).await).1;
    let b = answered_by(&two.call("own__echo", json!({})).await).1;
    assert_ne!(a, b);
    assert_eq!(answered_by(&one.call("own__echo", json!({})).await).1, a);
    assert_eq!(answered_by(&two.call("own__echo", json!({})).await).1, b);
    assert_eq!(servers.spawned("own"), [template[0], a, b]);
    // One client leaves: its instance stops, the other's runs on.
    one.close().await;
    until("the first client's instance stopped", || {
        servers.ended("own").contains(&a)
    })
    .await;
    assert_eq!(servers.running("own"), [b]);
    assert_eq!(answered_by(&two.call("own__echo", json!({})).await).1, b);
    // A new client gets a new one.
    let mut three = gw.client().await;
    let c = answered_by(&three.call("own__echo", json!({})).await).1;
    assert!(![template[0], a, b].contains(&c));
    assert_eq!(servers.running("own"), [b, c]);
}

// === cancellation ===

#[tokio::test(start_paused = true)]
async fn a_call_cancelled_while_its_server_starts_never_reaches_the_server() {
    let servers = Servers::default();
    servers.script(
        "slow",
        Script {
            initialize_delay: Some(Duration::from_millis(1500)),
            ..Script::default()
        },
    );
    let mut slow = plan("slow");
    slow.lazy = true;
    slow.cached = Some(cached("slow", &["echo"]));
    let mut gw = Gateway::start(&servers, vec![slow]);
    let mut front = gw.client().await;
    assert_eq!(front.tools().await, ["slow__echo"]);
    assert!(servers.spawned("slow").is_empty());
    // The call starts the server and waits for it; the client gives up on
    // it before the server is ready.
    let cancelled = front
        .begin(
            "tools/call",
            json!({"name": "slow__echo", "arguments": {"first": true}}),
        )
        .await;
    front
        .send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": cancelled, "reason": "changed my mind"}}))
        .await;
    let r = front.call("slow__echo", json!({"second": true})).await;
    assert_eq!(
        r["result"]["structuredContent"]["args"],
        json!({"second": true}),
        "{r}"
    );
    let tail = front.drain(Duration::from_secs(30)).await;
    assert!(
        tail.iter().all(|m| m["id"] != cancelled),
        "the cancelled call got an answer: {tail:?}"
    );
    assert_eq!(
        servers.count("slow", "tools/call"),
        1,
        "the cancelled call reached the server: {:?}",
        servers.methods("slow")
    );
}

// === the monitor's rows ===

#[tokio::test(start_paused = true)]
async fn a_busy_server_s_row_is_published_at_most_every_250_ms_and_a_new_state_at_once() {
    let servers = Servers::default();
    servers.script(
        "a",
        Script {
            tools: vec!["echo".into(), "crash".into()],
            ..Script::default()
        },
    );
    let (control, control_rx) = tokio::sync::mpsc::channel(16);
    let (monitor, tap) = Monitor::new(control);
    let mut rows = monitor.subscribe();
    let settings = Settings {
        monitor: Some(tap),
        ..Settings::default()
    };
    let mut gw = Gateway::start_with_control(&servers, vec![plan("a")], settings, control_rx);
    let mut front = gw.client().await;
    // Let the start's rows go out, and the throttle's window pass.
    tokio::time::sleep(Duration::from_secs(1)).await;
    while rows.try_recv().is_ok() {}
    // Fifty calls at one instant: the first one's counters go out at once
    // (the last row is older than 250 ms), the other 49 together 250 ms on.
    let start = Instant::now();
    for i in 0..50 {
        front.call("a__echo", json!({"i": i})).await;
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    let mut published = Vec::new();
    let until = start + Duration::from_millis(400);
    while let Ok(Ok(event)) = tokio::time::timeout_at(until, rows.recv()).await {
        if let MonitorEvent::Server { status } = event {
            published.push((start.elapsed(), status.calls));
        }
    }
    assert_eq!(published.len(), 2, "{published:?}");
    assert_eq!(published[0], (Duration::ZERO, 1), "{published:?}");
    let (at, calls) = published[1];
    assert_eq!(calls, 50, "{published:?}");
    assert!(
        (Duration::from_millis(250)..Duration::from_millis(260)).contains(&at),
        "published after {at:?}"
    );
    // A crash is a new state: its row goes out at once, not 250 ms on.
    let start = Instant::now();
    front.call("a__crash", json!({})).await;
    let event = tokio::time::timeout(Duration::from_millis(50), async {
        loop {
            if let Ok(MonitorEvent::Server { status }) = rows.recv().await {
                if status.state != ServerState::Ready {
                    return status;
                }
            }
        }
    })
    .await
    .expect("the crash's row at once");
    assert!(start.elapsed() < Duration::from_millis(50), "{event:?}");
}
