//! A 2026-07-28 client over a 2025 server through `mcpvisor serve --http`:
//! the fake worker's `ask` tool sends `roots/list` (then `elicitation/create`)
//! in the middle of the call; the client gets an input-required result on
//! its POST and answers in a retry POST.

mod support;

use serde_json::{Value, json};
use support::{fake_worker, serve_http, temp_dir};

/// `_meta` of a 2026-07-28 request that declares `caps`.
fn meta(caps: Value) -> Value {
    support::meta_2026("bridge-e2e", caps)
}

/// POSTs a 2026-07-28 `tools/call` of `docs__ask` with `params`; its answer.
async fn call(http: &reqwest::Client, url: &str, id: &str, params: &Value) -> Value {
    let resp =
        support::post_call(http, url, id, params, "application/json, text/event-stream").await;
    support::answer(resp).await
}

/// `params` again, with the answers to `round`'s one request and its state.
fn retry(params: &Value, round: &Value, result: Value) -> Value {
    let requests = round["result"]["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("an input-required result: {round}"));
    assert_eq!(requests.len(), 1, "{round}");
    let key = requests.keys().next().cloned().unwrap_or_default();
    let mut params = params.clone();
    params["inputResponses"] = json!({ key: result });
    params["requestState"] = round["result"]["requestState"].clone();
    params
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_request_mid_call_is_an_input_required_round_answered_by_the_retry() {
    let dir = temp_dir("bridge-http");
    let config = dir.join("mcp.json");
    let text = json!({"mcpServers": {"docs": {
        "command": fake_worker().display().to_string(),
    }}});
    std::fs::write(&config, text.to_string()).expect("config");
    let mut p = serve_http(&config, &[]);
    let url = format!("http://{}/mcp", p.http_address());
    let http = reqwest::Client::new();

    let params = json!({"name": "docs__ask", "arguments": {"method": "roots/list"},
        "_meta": meta(json!({"roots": {}, "elicitation": {}}))});
    let round = call(&http, &url, "c1", &params).await;
    assert_eq!(round["id"], "c1", "{round}");
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    let request = round["result"]["inputRequests"]
        .as_object()
        .and_then(|r| r.values().next().cloned())
        .unwrap_or_else(|| panic!("one input request: {round}"));
    assert_eq!(request["method"], "roots/list", "{round}");

    // A changed state is refused; the call waits on.
    let mut tampered = retry(&params, &round, json!({"roots": []}));
    tampered["requestState"] = json!(format!(
        "{}0",
        tampered["requestState"].as_str().unwrap_or_default()
    ));
    let refused = call(&http, &url, "c2", &tampered).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The retry, on a POST of its own, answers the server's request and
    // gets the call's result.
    let roots = json!({"roots": [{"uri": "file:///work", "name": "work"}]});
    let done = call(&http, &url, "c3", &retry(&params, &round, roots)).await;
    assert_eq!(done["id"], "c3", "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("file:///work"), "{done}");

    // Without the capability in the call's _meta, the server is told
    // -32021 and the client never sees the request.
    let params = json!({"name": "docs__ask", "arguments": {"method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 1}}, "_meta": meta(json!({}))});
    let declined = call(&http, &url, "c4", &params).await;
    let text = declined["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("-32021"), "{declined}");
    assert!(text.contains("requiredCapabilities"), "{declined}");

    support::signal(p.pid(), 15);
    assert!(p.wait_exit(support::WAIT).success());
}
