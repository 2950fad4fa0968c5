//! `subscriptions/listen` through `mcpvisor serve --http`: a 2026-07-28
//! client's long-lived POST, answered with an event stream that carries
//! the changes it asked for, from a handshake-era server (the fake worker)
//! that changes its tools and updates a resource.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{WAIT, fake_worker, post_2026, serve_http, signal, temp_dir};

const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// `_meta` of a 2026-07-28 request.
fn meta() -> Value {
    support::meta_2026("listen-e2e", json!({}))
}

/// The events of one SSE response, as JSON messages.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: String::new(),
        }
    }

    /// The next event's message, within [`WAIT`] (keep-alive comments are
    /// skipped).
    async fn next(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() || data.iter().all(|d| d.is_empty()) {
                    continue;
                }
                return serde_json::from_str(&data.join("\n")).expect("an event's JSON");
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .expect("an event within the bound")
                .expect("the stream reads")
                .expect("the stream stays open");
            self.buf
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }
}

/// A 2026-07-28 `tools/call` of `name` with `arguments`.
fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta()}})
}

/// The server updates `mem://doc` (its `notify` tool sends the
/// notification), and the listen read by `events`, `sub-1`, is told.
async fn an_update_of_the_doc_is_heard(http: &reqwest::Client, url: &str, events: &mut Events) {
    let notify = call(
        "c1",
        "docs__notify",
        json!({"method": "notifications/resources/updated", "params": {"uri": "mem://doc"}}),
    );
    let both = "application/json, text/event-stream";
    let r = post_2026(http, url, "tools/call", Some("docs__notify"), both, &notify)
        .send()
        .await
        .expect("notify");
    assert_eq!(r.status(), 200);
    let heard = events.next().await;
    assert_eq!(
        heard["method"], "notifications/resources/updated",
        "{heard}"
    );
    assert_eq!(heard["params"]["uri"], "mem://doc", "{heard}");
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], "sub-1", "{heard}");
}

/// Waits until the worker's log has `needle` `times` times.
fn until_logged(log: &Path, needle: &str, times: usize) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().filter(|l| l.starts_with(needle)).count() >= times {
            return;
        }
        assert!(start.elapsed() < WAIT, "never {times} × {needle}:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_over_http_streams_list_changes_and_resource_updates_and_ends_with_its_client() {
    let dir = temp_dir("listen-http");
    let log = dir.join("docs.log");
    let tools = dir.join("tools.txt");
    std::fs::write(&tools, "first\n").expect("tools file");
    let config = dir.join("mcp.json");
    let text = json!({"mcpServers": {"docs": {
        "command": fake_worker().display().to_string(),
        "args": [
            "--resource", "mem://doc", "--resource", "mem://other",
            "--tools-file", tools.display().to_string(),
            "--log-file", log.display().to_string(),
        ],
    }}});
    std::fs::write(&config, text.to_string()).expect("config");
    // Its server gains a tool below, which pinning would hold back
    // (`serve_http` runs it with `--pin off`).
    let mut p = serve_http(&config, &[]);
    let url = format!("http://{}/mcp", p.http_address());
    let http = reqwest::Client::new();
    let both = "application/json, text/event-stream";

    // The server's lists are read before anything listens.
    let list =
        json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": {"_meta": meta()}});
    let r = post_2026(&http, &url, "tools/list", None, "application/json", &list)
        .send()
        .await
        .expect("tools/list");
    assert_eq!(r.status(), 200);

    let body = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
        "_meta": meta(),
        "notifications": {"toolsListChanged": true, "resourceSubscriptions": ["mem://doc", "mem://none"]},
    }});
    // Without a stream to answer on, a listen is refused.
    let refused = post_2026(
        &http,
        &url,
        "subscriptions/listen",
        None,
        "application/json",
        &body,
    )
    .send()
    .await
    .expect("refused");
    assert_eq!(refused.status(), 406);

    let resp = post_2026(&http, &url, "subscriptions/listen", None, both, &body)
        .send()
        .await
        .expect("listen");
    assert_eq!(resp.status(), 200);
    let kind = resp.headers()["content-type"]
        .to_str()
        .unwrap_or_default()
        .to_owned();
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    let mut events = Events::new(resp);
    let ack = events.next().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION], "sub-1", "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["mem://doc"]}),
        "{ack}"
    );
    until_logged(&log, "resources/subscribe", 1);

    // The server updates the resource (its `notify` tool sends it).
    an_update_of_the_doc_is_heard(&http, &url, &mut events).await;

    // An update of a resource it did not name does not reach it; its
    // tools change, which it asked for, does.
    let other = call(
        "c2",
        "docs__notify",
        json!({"method": "notifications/resources/updated", "params": {"uri": "mem://other"}}),
    );
    post_2026(
        &http,
        &url,
        "tools/call",
        Some("docs__notify"),
        both,
        &other,
    )
    .send()
    .await
    .expect("notify other");
    std::fs::write(&tools, "first\nsecond\n").expect("tools file");
    let changed = call("c3", "docs__list_changed", json!({}));
    post_2026(
        &http,
        &url,
        "tools/call",
        Some("docs__list_changed"),
        both,
        &changed,
    )
    .send()
    .await
    .expect("list_changed");
    let heard = events.next().await;
    assert_eq!(
        heard["method"], "notifications/tools/list_changed",
        "{heard}"
    );
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], "sub-1", "{heard}");

    // The client goes: the server's subscription ends with it.
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .all(|l| !l.starts_with("resources/unsubscribe"))
    );
    drop(events);
    until_logged(&log, "resources/unsubscribe", 1);

    // A listen open when the gateway is asked to stop is answered (a
    // graceful end) as the front drains, and holds nothing up.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "_meta": meta(), "notifications": {"promptsListChanged": true},
    }});
    let resp = post_2026(&http, &url, "subscriptions/listen", None, both, &body)
        .send()
        .await
        .expect("listen");
    let mut events = Events::new(resp);
    let ack = events.next().await;
    assert_eq!(
        ack["params"]["notifications"],
        json!({"promptsListChanged": true}),
        "{ack}"
    );
    let asked = Instant::now();
    signal(p.pid(), 15);
    let end = events.next().await;
    assert_eq!(end["id"], 7, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION], 7, "{end}");
    assert!(p.wait_exit(WAIT).success());
    // Well within the 10 s drain a request in flight may take.
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
}

/// What a 2026-07-28 server tells on the gateway's own listen reaches a
/// 2026-07-28 client's listen: the fake worker with `--modern` has no
/// `resources/subscribe` and tells of changes only on a listen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_over_http_hears_a_2026_server_through_the_gateway_s_own_listen() {
    let dir = temp_dir("listen-modern");
    let log = dir.join("docs.log");
    let tools = dir.join("tools.txt");
    std::fs::write(&tools, "first\n").expect("tools file");
    let config = dir.join("mcp.json");
    let text = json!({"mcpServers": {"docs": {
        "command": fake_worker().display().to_string(),
        "args": [
            "--modern",
            "--resource", "mem://doc", "--resource", "mem://other",
            "--tools-file", tools.display().to_string(),
            "--log-file", log.display().to_string(),
        ],
    }}});
    std::fs::write(&config, text.to_string()).expect("config");
    let mut p = serve_http(&config, &[]);
    let url = format!("http://{}/mcp", p.http_address());
    let http = reqwest::Client::new();
    let both = "application/json, text/event-stream";

    let list =
        json!({"jsonrpc": "2.0", "id": "l", "method": "tools/list", "params": {"_meta": meta()}});
    let r = post_2026(&http, &url, "tools/list", None, "application/json", &list)
        .send()
        .await
        .expect("tools/list");
    assert_eq!(r.status(), 200);
    // Ready, it is listened to for the changes it declares.
    until_logged(&log, "subscriptions/listen", 1);

    let body = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
        "_meta": meta(),
        "notifications": {"toolsListChanged": true, "resourceSubscriptions": ["mem://doc"]},
    }});
    let resp = post_2026(&http, &url, "subscriptions/listen", None, both, &body)
        .send()
        .await
        .expect("listen");
    assert_eq!(resp.status(), 200);
    let mut events = Events::new(resp);
    let ack = events.next().await;
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["mem://doc"]}),
        "{ack}"
    );
    // The URI it holds replaces the gateway's listen there: the old one
    // cancelled, a new one naming it.
    until_logged(&log, "subscriptions/listen", 2);
    until_logged(&log, "notifications/cancelled", 1);

    an_update_of_the_doc_is_heard(&http, &url, &mut events).await;

    // Its tools change, told on the gateway's listen: read again, and the
    // client's listen told.
    std::fs::write(&tools, "first\nsecond\n").expect("tools file");
    let changed = call("c2", "docs__list_changed", json!({}));
    post_2026(
        &http,
        &url,
        "tools/call",
        Some("docs__list_changed"),
        both,
        &changed,
    )
    .send()
    .await
    .expect("list_changed");
    let heard = events.next().await;
    assert_eq!(
        heard["method"], "notifications/tools/list_changed",
        "{heard}"
    );
    assert_eq!(heard["params"]["_meta"][SUBSCRIPTION], "sub-1", "{heard}");
    // The server never heard of the era it does not speak.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.lines().all(|l| !l.starts_with("resources/subscribe")),
        "{text}"
    );
    // The client goes: the gateway's listen is replaced by one without
    // the URI.
    drop(events);
    until_logged(&log, "subscriptions/listen", 3);
    signal(p.pid(), 15);
    assert!(p.wait_exit(WAIT).success());
}
