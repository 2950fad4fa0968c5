//! The era bridge: a 2026-07-28 client calls a 2025 server that asks its
//! client something mid-call; the client gets an input-required result and
//! answers in its retry.

use std::time::Duration;

use mcpvisor_jsonrpc::INVALID_PARAMS;
use serde_json::{Value, json};

use crate::support::{Front, Gateway, Script, Servers, plan, until};

/// A 2026-07-28 `tools/call` of `s__ask` that asks `asks`, with the client
/// capabilities `caps`: its params, without the retry's members.
fn ask_params(asks: Value, together: bool, caps: Value) -> Value {
    json!({
        "name": "s__ask",
        "arguments": {"asks": asks, "together": together},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "core", "version": "0"},
        },
    })
}

fn all_caps() -> Value {
    json!({"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {}})
}

/// A call whose server asks the client two `roots/list` together.
fn two_roots_lists_together() -> Value {
    let asks = json!([
        {"method": "roots/list", "params": {}},
        {"method": "roots/list", "params": {"_meta": {"n": 2}}},
    ]);
    ask_params(asks, true, all_caps())
}

/// The retry of `params` after `round`, answering each key of its
/// `inputRequests` with `answer(method)`.
fn retry(params: &Value, round: &Value, answer: impl Fn(&str) -> Value) -> Value {
    let result = &round["result"];
    let mut responses = serde_json::Map::new();
    for (key, request) in result["inputRequests"].as_object().expect("inputRequests") {
        let method = request["method"].as_str().expect("a method");
        responses.insert(key.clone(), answer(method));
    }
    let mut params = params.clone();
    params["inputResponses"] = Value::Object(responses);
    params["requestState"] = result["requestState"].clone();
    params
}

/// What a client answers each kind of request with.
fn answer_of(method: &str) -> Value {
    match method {
        "sampling/createMessage" => json!({"role": "assistant",
            "content": {"type": "text", "text": "sampled"}, "model": "m"}),
        "elicitation/create" => json!({"action": "accept", "content": {"ok": true}}),
        "roots/list" => json!({"roots": [{"uri": "file:///r", "name": "r"}]}),
        other => panic!("not a client request: {other}"),
    }
}

fn is_round(answer: &Value) -> bool {
    answer["result"]["resultType"] == "input_required"
}

/// A gateway with the scripted server `s` (whose tool `ask` asks).
async fn gateway(timeout: Option<Duration>) -> (Gateway, Front) {
    let servers = Servers::default();
    servers.script(
        "s",
        Script {
            tools: vec!["echo".into(), "ask".into(), "ask_then_answer".into()],
            ..Script::default()
        },
    );
    let mut p = plan("s");
    if let Some(t) = timeout {
        p.session.request_timeout = t;
    }
    let mut gw = Gateway::start(&servers, vec![p]);
    let mut front = gw.open().await;
    // Wait until the server's tools are known.
    loop {
        let r = front.request_modern("tools/list", json!({})).await;
        if r.to_string().contains("s__ask") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (gw, front)
}

#[tokio::test(start_paused = true)]
async fn each_kind_of_server_request_is_one_round_and_the_retry_answers_it() {
    let (gw, mut front) = gateway(None).await;
    for (method, params) in [
        (
            "sampling/createMessage",
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}),
        ),
        (
            "elicitation/create",
            json!({"message": "sure?", "requestedSchema": {"type": "object", "properties": {}}}),
        ),
        ("roots/list", json!({})),
    ] {
        let params = ask_params(
            json!([{"method": method, "params": params}]),
            false,
            all_caps(),
        );
        let round = front.request("tools/call", params.clone()).await;
        assert!(is_round(&round), "{round}");
        let requests = round["result"]["inputRequests"]
            .as_object()
            .expect("inputRequests");
        assert_eq!(requests.len(), 1, "{round}");
        let (_, request) = requests.iter().next().expect("one");
        assert_eq!(request["method"], method, "{round}");
        assert_eq!(request["params"], params_of(method), "{round}");
        let state = round["result"]["requestState"].as_str().expect("a state");
        assert!(!state.contains("sampled"), "no payload in the state");

        let done = front
            .request("tools/call", retry(&params, &round, answer_of))
            .await;
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        let answers = &done["result"]["structuredContent"]["answers"];
        assert_eq!(answers[0]["result"], answer_of(method), "{done}");
        // The server got the answer under its own id.
        assert_eq!(answers[0]["id"], "ask-1", "{done}");
    }
    gw.shutdown().await;
}

/// The params the scripted asks above send, by method.
fn params_of(method: &str) -> Value {
    match method {
        "sampling/createMessage" => {
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5})
        }
        "elicitation/create" => {
            json!({"message": "sure?", "requestedSchema": {"type": "object", "properties": {}}})
        }
        _ => json!({}),
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_asks_again_gets_a_round_each_time_and_old_states_are_refused() {
    let (gw, mut front) = gateway(None).await;
    let asks = json!([
        {"method": "elicitation/create", "params": {"message": "one", "requestedSchema": {"type": "object", "properties": {}}}},
        {"method": "roots/list", "params": {}},
        {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}},
    ]);
    let params = ask_params(asks, false, all_caps());
    let mut answer = front.request("tools/call", params.clone()).await;
    let mut states = Vec::new();
    let mut methods = Vec::new();
    let first = answer.clone();
    while is_round(&answer) {
        states.push(answer["result"]["requestState"].clone());
        for request in answer["result"]["inputRequests"]
            .as_object()
            .expect("inputRequests")
            .values()
        {
            methods.push(request["method"].as_str().unwrap_or_default().to_owned());
        }
        // A retry that answers nothing gets the same requests again.
        if states.len() == 2 {
            let mut empty = retry(&params, &answer, answer_of);
            empty["inputResponses"] = json!({});
            let again = front.request("tools/call", empty).await;
            assert!(is_round(&again), "{again}");
            assert_eq!(
                again["result"]["inputRequests"], answer["result"]["inputRequests"],
                "{again}"
            );
            // The state of the round that is over is refused.
            let stale = front
                .request("tools/call", retry(&params, &answer, answer_of))
                .await;
            assert_eq!(stale["error"]["code"], INVALID_PARAMS, "{stale}");
            answer = again;
            states.push(answer["result"]["requestState"].clone());
        }
        answer = front
            .request("tools/call", retry(&params, &answer, answer_of))
            .await;
    }
    assert_eq!(
        methods,
        ["elicitation/create", "roots/list", "sampling/createMessage"]
    );
    assert_eq!(states.len(), 4, "three rounds and one asked again");
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    let answers = answer["result"]["structuredContent"]["answers"]
        .as_array()
        .expect("answers")
        .clone();
    assert_eq!(answers.len(), 3, "{answer}");
    assert_eq!(answers[1]["result"], answer_of("roots/list"));
    // The call has ended: its first state names nothing now.
    let ended = front
        .request("tools/call", retry(&params, &first, answer_of))
        .await;
    assert_eq!(ended["error"]["code"], INVALID_PARAMS, "{ended}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn requests_sent_together_are_all_answered_over_the_rounds() {
    let (gw, mut front) = gateway(None).await;
    let params = two_roots_lists_together();
    let mut answer = front.request("tools/call", params.clone()).await;
    let mut offered = 0;
    while is_round(&answer) {
        offered += answer["result"]["inputRequests"]
            .as_object()
            .map_or(0, serde_json::Map::len);
        answer = front
            .request("tools/call", retry(&params, &answer, answer_of))
            .await;
    }
    assert_eq!(offered, 2, "each request offered once");
    let answers = &answer["result"]["structuredContent"]["answers"];
    assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answer}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_tampered_state_is_refused_and_the_call_goes_on() {
    let (gw, mut front) = gateway(None).await;
    let params = ask_params(
        json!([{"method": "roots/list", "params": {}}]),
        false,
        all_caps(),
    );
    let round = front.request("tools/call", params.clone()).await;
    assert!(is_round(&round), "{round}");
    let good = retry(&params, &round, answer_of);
    let state = good["requestState"].as_str().expect("a state").to_owned();
    for bad in [
        flip_last(&state),
        state.replacen("mcpvisor1.", "mcpvisor1.00", 1),
        "mcpvisor1.not-hex.x".to_owned(),
    ] {
        let mut tampered = good.clone();
        tampered["requestState"] = json!(bad);
        let refused = front.request("tools/call", tampered).await;
        assert_eq!(refused["error"]["code"], INVALID_PARAMS, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("requestState")),
            "{refused}"
        );
    }
    // Another method with the right state is refused too.
    let mut other = good.clone();
    other["name"] = json!("s__echo");
    let refused = front.request("prompts/get", other).await;
    assert_eq!(refused["error"]["code"], INVALID_PARAMS, "{refused}");
    let done = front.request("tools/call", good).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    gw.shutdown().await;
}

fn flip_last(s: &str) -> String {
    let mut out = s.to_owned();
    let last = out.pop().unwrap_or('0');
    out.push(if last == '0' { '1' } else { '0' });
    out
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_retries_ends_the_call_at_the_request_timeout() {
    let timeout = Duration::from_secs(5);
    let (gw, mut front) = gateway(Some(timeout)).await;
    let params = ask_params(
        json!([{"method": "roots/list", "params": {}}]),
        false,
        all_caps(),
    );
    let round = front.request("tools/call", params.clone()).await;
    assert!(is_round(&round), "{round}");
    let servers = gw.servers.clone();
    let answered = || {
        servers
            .seen("s")
            .iter()
            .any(|s| s.message["id"] == "ask-1" && s.message.get("error").is_some())
    };
    let took = until("the server's request gets an error", answered).await;
    assert!(took <= timeout + Duration::from_secs(1), "{took:?}");
    assert!(
        servers
            .seen("s")
            .iter()
            .any(|s| s.message["method"] == "notifications/cancelled"),
        "the server's call is cancelled"
    );
    // The round is gone: its state is refused.
    let late = front
        .request("tools/call", retry(&params, &round, answer_of))
        .await;
    assert_eq!(late["error"]["code"], INVALID_PARAMS, "{late}");
    // And the server takes new calls.
    let again = front.request("tools/call", params.clone()).await;
    assert!(is_round(&again), "{again}");
    let done = front
        .request("tools/call", retry(&params, &again, answer_of))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_the_call_did_not_declare_the_capability_for_is_refused_with_32021() {
    let (gw, mut front) = gateway(None).await;
    let params = ask_params(
        json!([
            {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}},
            {"method": "elicitation/create", "params": {"mode": "url", "message": "go", "url": "https://example.com", "elicitationId": "e"}},
        ]),
        false,
        json!({"roots": {}, "elicitation": {"form": {}}}),
    );
    let done = front.request("tools/call", params).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let answers = &done["result"]["structuredContent"]["answers"];
    assert_eq!(answers[0]["error"]["code"], -32021, "{done}");
    assert_eq!(
        answers[0]["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{done}"
    );
    assert_eq!(answers[1]["error"]["code"], -32021, "{done}");
    assert_eq!(
        answers[1]["error"]["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}}),
        "{done}"
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_call_the_server_answers_before_the_retry_gives_the_retry_its_answer() {
    let (gw, mut front) = gateway(None).await;
    let mut params = ask_params(json!([]), false, all_caps());
    params["name"] = json!("s__ask_then_answer");
    params["arguments"] = json!({"tag": "early"});
    let round = front.request("tools/call", params.clone()).await;
    assert!(is_round(&round), "{round}");
    // The server's request is moot once its call is answered: it gets an
    // error, not the client's late answer.
    let servers = gw.servers.clone();
    until("the server's request is answered", || {
        servers
            .seen("s")
            .iter()
            .any(|s| s.message["id"] == "early-1")
    })
    .await;
    let done = front
        .request("tools/call", retry(&params, &round, answer_of))
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["args"],
        json!({"tag": "early"}),
        "{done}"
    );
    let answers: Vec<_> = servers
        .seen("s")
        .into_iter()
        .filter(|s| s.message["id"] == "early-1")
        .collect();
    assert_eq!(answers.len(), 1, "answered once");
    assert!(
        answers[0].message.get("error").is_some(),
        "{:?}",
        answers[0]
    );
    // The call has ended: the same state again names nothing.
    let again = front
        .request("tools/call", retry(&params, &round, answer_of))
        .await;
    assert_eq!(again["error"]["code"], INVALID_PARAMS, "{again}");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_the_server_withdraws_is_not_offered_or_answered() {
    let (gw, mut front) = gateway(None).await;
    let params = two_roots_lists_together();
    let round = front.request("tools/call", params.clone()).await;
    assert!(is_round(&round), "{round}");
    // Both requests were sent before the round came back; the server now
    // withdraws the second.
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "ask-2", "reason": "changed its mind"}});
    assert_eq!(gw.servers.push("s", &cancel), 1);
    // Paused time moves on only once every task waits: by then the cancel
    // has gone through the server's session to the hub.
    tokio::time::sleep(Duration::from_millis(1)).await;
    // A later round would offer it: the retry answers only the first.
    let retry_params = retry(&params, &round, answer_of);
    let mut offered = round["result"]["inputRequests"]
        .as_object()
        .map_or(0, serde_json::Map::len);
    // Its answer would come only when the server's call ends.
    front.begin("tools/call", retry_params).await;
    let servers = gw.servers.clone();
    until("the server gets the first answer", || {
        servers.seen("s").iter().any(|s| s.message["id"] == "ask-1")
    })
    .await;
    // Only the withdrawn request is left, so no round comes (the server's
    // call waits on), and the withdrawn request is never answered.
    if let Some(m) = front.next(Duration::from_secs(1)).await {
        assert!(!is_round(&m), "the withdrawn request was offered: {m}");
        offered += 1;
    }
    assert_eq!(offered, 1);
    assert!(
        !servers.seen("s").iter().any(|s| s.message["id"] == "ask-2"),
        "the withdrawn request was answered"
    );
    gw.shutdown().await;
}
