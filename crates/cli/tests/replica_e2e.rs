//! `serve --replica-id`: the replica id in clear in a multi-round call's
//! `requestState` and in the `Mcp-Replica` header, and a retry that reaches
//! another replica refused with the name of the one that holds the call.

mod support;

use serde_json::{Value, json};
use support::{Proc, fake_worker, finish, mcpvisor, serve_http, temp_dir};

/// A 2026-07-28 `tools/call` of `docs__ask` (roots/list mid-call) with
/// `params` POSTed to `url`: the `Mcp-Replica` header and the JSON answer.
async fn call(http: &reqwest::Client, url: &str, id: &str, params: &Value) -> (String, Value) {
    let resp = support::post_call(http, url, id, params, "application/json").await;
    let replica = resp
        .headers()
        .get("mcp-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (replica, support::answer(resp).await)
}

fn serve(config: &std::path::Path, replica: &str) -> Proc {
    serve_http(config, &["--replica-id", replica])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_continued_only_by_the_replica_its_state_names() {
    let dir = temp_dir("replica-http");
    let config = dir.join("mcp.json");
    let text = json!({"mcpServers": {"docs": {"command": fake_worker().display().to_string()}}});
    std::fs::write(&config, text.to_string()).expect("config");
    let mut a = serve(&config, "replica-a");
    let mut b = serve(&config, "replica-b");
    let url_a = format!("http://{}/mcp", a.http_address());
    let url_b = format!("http://{}/mcp", b.http_address());
    let http = reqwest::Client::new();

    let params = json!({"name": "docs__ask", "arguments": {"method": "roots/list"},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"roots": {}},
    }});
    let (replica, round) = call(&http, &url_a, "c1", &params).await;
    assert_eq!(replica, "replica-a", "{round}");
    let state = round["result"]["requestState"].as_str().unwrap_or_default();
    assert!(state.starts_with("mcpvisor1.replica-a."), "{round}");
    let key = round["result"]["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .unwrap_or_else(|| panic!("one input request: {round}"));
    let mut retry = params.clone();
    retry["requestState"] = json!(state);
    retry["inputResponses"] = json!({ key: {"roots": [{"uri": "file:///a", "name": "a"}]}});

    // At the other replica: refused, naming the one that holds the call.
    let (replica, refused) = call(&http, &url_b, "c2", &retry).await;
    assert_eq!(replica, "replica-b", "{refused}");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("replica `replica-a`"), "{refused}");

    // The state moved to name replica-b, at replica-b: its signature does
    // not hold there.
    let mut moved = retry.clone();
    moved["requestState"] = json!(state.replacen("replica-a", "replica-b", 1));
    let (_, refused) = call(&http, &url_b, "c3", &moved).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        !refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("replica `"),
        "{refused}"
    );

    // At its own replica, the call completes.
    let (replica, done) = call(&http, &url_a, "c4", &retry).await;
    assert_eq!(replica, "replica-a", "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("file:///a"), "{done}");

    for p in [&mut a, &mut b] {
        support::signal(p.pid(), 15);
        assert!(p.wait_exit(support::WAIT).success());
    }
}

#[test]
fn a_replica_id_that_is_not_letters_digits_dashes_and_underscores_is_refused() {
    let config = temp_dir("replica-bad").join("mcp.json");
    std::fs::write(&config, r#"{"mcpServers": {}}"#).expect("config");
    for bad in ["a.b", ""] {
        let args = [
            "serve",
            "--config",
            config.to_str().unwrap_or_default(),
            "--replica-id",
            bad,
        ];
        let child = std::process::Command::new(mcpvisor())
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let out = finish(child, &args);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--replica-id"), "{bad:?}: {err}");
        assert!(err.contains("replica id"), "{bad:?}: {err}");
    }
}
