//! `serve --replica-id`: the replica id in clear in a multi-round call's
//! `requestState` (the bridge's, or a 2026-07-28 server's own wrapped in
//! one) and in the `Mcp-Replica` header, and a retry that reaches another
//! replica refused with the name of the one that holds the call.

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

/// A 2026-07-28 `tools/call` of `name` with `arguments`, continuing
/// `state` with `responses` when given.
fn confirm(name: &str, arguments: Value, state: Option<&str>, responses: Option<Value>) -> Value {
    let mut params = json!({"name": name, "arguments": arguments,
        "_meta": support::meta_2026("replica-test", json!({"roots": {}}))});
    if let Some(state) = state {
        params["requestState"] = json!(state);
    }
    if let Some(responses) = responses {
        params["inputResponses"] = responses;
    }
    params
}

/// The `requestState` of an input-required answer.
fn state_of(round: &Value) -> String {
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    round["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("a requestState: {round}"))
        .to_owned()
}

/// What the worker's `confirm` said when the call completed.
fn confirmed(done: &Value) -> Value {
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text: {done}"));
    serde_json::from_str(text).unwrap_or_else(|_| panic!("JSON: {done}"))
}

fn refused_with(answer: &Value, code: i64, words: &[&str]) {
    assert_eq!(answer["error"]["code"], code, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    for w in words {
        assert!(message.contains(w), "{w:?} in {answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_servers_own_state_is_wrapped_and_reaches_it_unchanged() {
    let dir = temp_dir("replica-wrap");
    let config = dir.join("mcp.json");
    let worker = fake_worker().display().to_string();
    let text = json!({"mcpServers": {
        "files": {"command": worker, "args": ["--modern"]},
        "notes": {"command": worker, "args": ["--modern"]},
    }});
    std::fs::write(&config, text.to_string()).expect("config");
    let mut a = serve(&config, "replica-a");
    let mut b = serve(&config, "replica-b");
    let url_a = format!("http://{}/mcp", a.http_address());
    let url_b = format!("http://{}/mcp", b.http_address());
    let http = reqwest::Client::new();
    let roots = json!({"roots": {"roots": [{"uri": "file:///w", "name": "w"}]}});

    // Two rounds of the server's own: each state wrapped, naming replica-a.
    let (replica, round) = call(
        &http,
        &url_a,
        "c1",
        &confirm("files__confirm", json!({"rounds": 2}), None, None),
    )
    .await;
    assert_eq!(replica, "replica-a", "{round}");
    let first = state_of(&round);
    assert!(first.starts_with("mcpvisor1.replica-a.s."), "{round}");
    assert!(
        !first.contains("v1"),
        "the server's state is not in clear: {first}"
    );
    assert_eq!(
        round["result"]["inputRequests"]["roots"]["method"],
        "roots/list"
    );

    // At another replica: refused, naming the replica that holds it.
    let retry = confirm(
        "files__confirm",
        json!({"rounds": 2}),
        Some(&first),
        Some(roots.clone()),
    );
    let (_, refused) = call(&http, &url_b, "c2", &retry).await;
    refused_with(&refused, -32602, &["replica `replica-a`", "`replica-b`"]);
    // For another server's tool: refused, naming both.
    let elsewhere = confirm(
        "notes__confirm",
        json!({"rounds": 2}),
        Some(&first),
        Some(roots.clone()),
    );
    let (_, refused) = call(&http, &url_a, "c3", &elsewhere).await;
    refused_with(&refused, -32602, &["`files`", "`notes`"]);
    // Changed: refused.
    let mut changed = first.clone().into_bytes();
    let at = "mcpvisor1.replica-a.s.".len() + 2;
    changed[at] = if changed[at] == b'A' { b'B' } else { b'A' };
    let changed = String::from_utf8(changed).expect("ASCII");
    let tampered = confirm(
        "files__confirm",
        json!({"rounds": 2}),
        Some(&changed),
        Some(roots.clone()),
    );
    let (_, refused) = call(&http, &url_a, "c4", &tampered).await;
    refused_with(&refused, -32602, &["changed"]);

    // At its replica: the server gets its own state (its signature over
    // the text as it wrote it holds), asks again, then completes.
    let (_, round) = call(&http, &url_a, "c5", &retry).await;
    let second = state_of(&round);
    assert!(
        second.starts_with("mcpvisor1.replica-a.s.") && second != first,
        "{round}"
    );
    let last = confirm(
        "files__confirm",
        json!({"rounds": 2}),
        Some(&second),
        Some(roots.clone()),
    );
    let (replica, done) = call(&http, &url_a, "c6", &last).await;
    assert_eq!(replica, "replica-a");
    let said = confirmed(&done);
    assert_eq!(said["round"], 2, "{said}");
    assert_eq!(said["answers"], roots, "{said}");
    let state = said["state"].as_str().unwrap_or_default();
    assert!(
        state.contains(r"\/") && state.contains(r"\u00e9\ud83d\ude00"),
        "as written: {state}"
    );

    // A long state (16,000 bytes and more) is carried; past 16 KiB, refused.
    let long = json!({"pad": 16_000});
    let (_, round) = call(
        &http,
        &url_a,
        "c7",
        &confirm("files__confirm", long.clone(), None, None),
    )
    .await;
    let wrapped = state_of(&round);
    let retry = confirm("files__confirm", long, Some(&wrapped), Some(roots.clone()));
    let (_, done) = call(&http, &url_a, "c8", &retry).await;
    assert!(
        confirmed(&done)["state"]
            .as_str()
            .is_some_and(|s| s.len() > 16_000),
        "{done}"
    );
    let (_, refused) = call(
        &http,
        &url_a,
        "c9",
        &confirm("files__confirm", json!({"pad": 16_400}), None, None),
    )
    .await;
    refused_with(&refused, -32013, &["`files`", "16384"]);

    // No state: none is added.
    let bare = json!({"no_state": true});
    let (_, round) = call(
        &http,
        &url_b,
        "c10",
        &confirm("notes__confirm", bare.clone(), None, None),
    )
    .await;
    assert_eq!(round["result"]["resultType"], "input_required", "{round}");
    assert!(round["result"].get("requestState").is_none(), "{round}");
    let (_, done) = call(
        &http,
        &url_a,
        "c11",
        &confirm("notes__confirm", bare, None, Some(roots.clone())),
    )
    .await;
    assert_eq!(confirmed(&done)["answers"], roots);

    for p in [&mut a, &mut b] {
        support::signal(p.pid(), 15);
        assert!(p.wait_exit(support::WAIT).success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_http_wraps_its_servers_state_too() {
    let args: Vec<String> = ["run", "--http", "127.0.0.1:0", "--"]
        .iter()
        .map(|s| s.to_string())
        .chain([fake_worker().display().to_string(), "--modern".to_owned()])
        .collect();
    let mut p = support::Proc::spawn(&args);
    let url = format!("http://{}/mcp", p.http_address());
    let http = reqwest::Client::new();
    let roots = json!({"roots": {"roots": []}});
    // One server, no prefix: the tool under its own name.
    let (_, round) = call(
        &http,
        &url,
        "r1",
        &confirm("confirm", json!({}), None, None),
    )
    .await;
    let state = state_of(&round);
    let fields: Vec<&str> = state.split('.').collect();
    assert_eq!(
        (fields[0], fields[2], fields.len()),
        ("mcpvisor1", "s", 6),
        "{round}"
    );
    let retry = confirm("confirm", json!({}), Some(&state), Some(roots.clone()));
    let (_, done) = call(&http, &url, "r2", &retry).await;
    assert_eq!(confirmed(&done)["answers"], roots);
    support::signal(p.pid(), 15);
    assert!(p.wait_exit(support::WAIT).success());
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
