//! Scripted servers inside the test, and fronts on channels, for the hub on
//! paused time.
//!
//! Each backend's session gets its workers from [`Servers`] (through
//! [`Settings::spawners`]): a task on in-memory pipes that speaks MCP as its
//! server's [`Script`] says. No process starts, so tokio's clock advances
//! whenever every task waits, and a 30-second health interval costs
//! nothing. Every wait here is bounded in that paused time.

#![allow(
    dead_code,
    reason = "each test module uses a different part of the support"
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use mcpvisor_config::{ExitKind, ServerDef};
use mcpvisor_gateway::fronts::{FrontCommand, FrontId, Outbound};
use mcpvisor_gateway::{Cached, Control, Hub, Outcome, ServerPlan, Settings, Spawners};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_session::{SpawnFailure, Spawner, WorkerExit, WorkerIo, WorkerReporter};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// The bound on every wait for the hub (paused time: free to be long).
pub const WAIT: Duration = Duration::from_secs(600);

/// How one server's workers behave. A worker reads its script when it is
/// spawned; changing it affects the next worker.
#[derive(Debug, Clone)]
pub struct Script {
    /// The tools `tools/list` reports, all on one page (read at each list:
    /// a change reaches running workers too).
    pub tools: Vec<String>,
    /// Answer `ping`.
    pub answer_pings: bool,
    /// Exit with this code as soon as it starts, before reading anything.
    pub exit_at_start: Option<i32>,
    /// Exit with this code when `initialize` arrives, unanswered.
    pub exit_on_initialize: Option<i32>,
    /// This many of the next workers answer `initialize` with an error
    /// (each one spawned takes one).
    pub initialize_errors: u32,
    /// Spawning fails with this message.
    pub spawn_error: Option<String>,
    /// Report this authorization link when spawned (as a stderr prompt
    /// would), and answer `initialize` only after `initialize_delay`.
    pub auth_prompt: Option<String>,
    /// Answer `initialize` only after this long.
    pub initialize_delay: Option<Duration>,
    /// The resources `resources/list` reports (read at each list); with
    /// any, the server declares `resources` with `subscribe` and
    /// `listChanged`, and takes `resources/subscribe` and `unsubscribe`.
    pub resources: Vec<String>,
    /// Declare tasks (2025-11-25): a task-augmented `tools/call` creates
    /// the task `task-1`, which `tasks/get`, `tasks/result`,
    /// `tasks/cancel` and `tasks/update` know (any other id: -32602).
    pub tasks: bool,
    /// Tools' descriptions by name (read at each list, as `tools`).
    pub descriptions: HashMap<String, String>,
    /// How it answers `server/discover`.
    pub discover: Discover,
    /// How a 2026-07-28 server (`Discover::Modern`) takes
    /// `subscriptions/listen`; anything but `Listens::No` declares
    /// `tools.listChanged` (and with resources, `resources.subscribe` and
    /// `listChanged`) in its discovery.
    pub listens: Listens,
}

/// How a scripted 2026-07-28 server takes `subscriptions/listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listens {
    /// It declares nothing to listen for, and answers `-32601`.
    No,
    /// It acknowledges what it was asked for and holds the listen open
    /// until it is cancelled.
    Hold,
    /// It answers every listen at once with `-32602`.
    Refuse,
}

/// How a scripted server answers `server/discover`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discover {
    /// `-32601`, as a server of the handshake era does.
    NotFound,
    /// A result that names only versions of the handshake era.
    Handshake,
    /// A 2026-07-28 server: it lists that version, answers `ping` and
    /// `initialize` with `-32601`, every result carries `resultType`, and
    /// its tool `ask` answers `input_required` until its retry brings
    /// `inputResponses` and `requestState` (`state-1`, or its
    /// `arguments.state`).
    Modern,
    /// A server of both eras that is slow to discover: its discovery
    /// names 2026-07-28, but comes only after this long; it answers
    /// everything else as a server of the handshake era.
    ModernAfter(Duration),
    /// A server of both eras as their SDKs serve them: its discovery names
    /// 2026-07-28 alone, and a worker's first word fixes its era
    /// (one that answered a discovery is a [`Discover::Modern`] one and
    /// refuses `initialize`; one that was initialized stays in the
    /// handshake era).
    Both,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            tools: vec!["echo".into()],
            answer_pings: true,
            exit_at_start: None,
            exit_on_initialize: None,
            initialize_errors: 0,
            spawn_error: None,
            auth_prompt: None,
            initialize_delay: None,
            resources: Vec::new(),
            tasks: false,
            descriptions: HashMap::new(),
            discover: Discover::NotFound,
            listens: Listens::No,
        }
    }
}

/// One message a worker received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub server: String,
    /// Which worker (see [`Servers::spawned`]), counted from 1 across all
    /// servers.
    pub worker: u64,
    pub message: Value,
}

#[derive(Default)]
struct State {
    scripts: HashMap<String, Script>,
    /// (server, worker) in the order they were spawned.
    spawned: Vec<(String, u64)>,
    /// (server, worker) in the order they ended.
    ended: Vec<(String, u64)>,
    seen: Vec<Seen>,
    /// The live workers' outputs, for lines the test pushes.
    outs: Vec<(String, u64, mpsc::UnboundedSender<String>)>,
}

/// Every scripted server of one gateway, and what their workers saw.
#[derive(Clone, Default)]
pub struct Servers(Arc<Mutex<State>>);

impl Servers {
    /// Sets `name`'s script (servers without one get the default).
    pub fn script(&self, name: &str, script: Script) {
        self.lock().scripts.insert(name.to_owned(), script);
    }

    /// Changes `name`'s script for its next workers.
    pub fn edit(&self, name: &str, edit: impl FnOnce(&mut Script)) {
        edit(self.lock().scripts.entry(name.to_owned()).or_default());
    }

    /// The workers started for `name`, in order.
    pub fn spawned(&self, name: &str) -> Vec<u64> {
        let s = self.lock();
        s.spawned
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, w)| *w)
            .collect()
    }

    /// The workers of `name` that have ended, in the order they ended.
    pub fn ended(&self, name: &str) -> Vec<u64> {
        let s = self.lock();
        s.ended
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, w)| *w)
            .collect()
    }

    /// The workers of `name` still running.
    pub fn running(&self, name: &str) -> Vec<u64> {
        let ended = self.ended(name);
        self.spawned(name)
            .into_iter()
            .filter(|w| !ended.contains(w))
            .collect()
    }

    /// The methods `name`'s workers received (answers as "response").
    pub fn methods(&self, name: &str) -> Vec<String> {
        self.seen(name)
            .into_iter()
            .map(|s| {
                s.message
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or("response")
                    .to_owned()
            })
            .collect()
    }

    /// How many `method` messages `name`'s workers received.
    pub fn count(&self, name: &str, method: &str) -> usize {
        self.methods(name).iter().filter(|m| *m == method).count()
    }

    pub fn seen(&self, name: &str) -> Vec<Seen> {
        let s = self.lock();
        s.seen
            .iter()
            .filter(|m| m.server == name)
            .cloned()
            .collect()
    }

    /// Writes `message` out of every running worker of `name`, as if the
    /// server had sent it. Returns how many wrote it.
    pub fn push(&self, name: &str, message: &Value) -> usize {
        let s = self.lock();
        s.outs
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter(|(_, _, out)| out.send(message.to_string()).is_ok())
            .count()
    }

    /// Sends `message` as worker `worker` of `name` would; whether it runs.
    pub fn push_to(&self, name: &str, worker: u64, message: &Value) -> bool {
        let s = self.lock();
        s.outs
            .iter()
            .filter(|(n, w, _)| n == name && *w == worker)
            .any(|(_, _, out)| out.send(message.to_string()).is_ok())
    }

    /// The hook that gives the hub these servers' workers.
    pub fn spawners(&self) -> Spawners {
        let servers = self.clone();
        Spawners(Arc::new(move |plan: &ServerPlan| {
            Box::new(ScriptedSpawner {
                name: plan.name.clone(),
                servers: servers.clone(),
            }) as Box<dyn Spawner>
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().expect("the servers' state")
    }
}

/// Makes the workers of one backend session.
struct ScriptedSpawner {
    name: String,
    servers: Servers,
}

impl Spawner for ScriptedSpawner {
    fn spawn(
        &mut self,
        _generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure> {
        let (script, worker) = {
            let mut s = self.servers.lock();
            let script = s.scripts.get(&self.name).cloned().unwrap_or_default();
            if let Some(next) = s.scripts.get_mut(&self.name) {
                next.initialize_errors = next.initialize_errors.saturating_sub(1);
            }
            if let Some(e) = &script.spawn_error {
                return Err(SpawnFailure(e.clone()));
            }
            let worker = s.spawned.len() as u64 + 1;
            s.spawned.push((self.name.clone(), worker));
            (script, worker)
        };
        if let Some(url) = &script.auth_prompt {
            reporter.auth_prompt(url.clone(), None);
        }
        let (stdin_ours, stdin_theirs) = tokio::io::duplex(1 << 16);
        let (stdout_theirs, stdout_ours) = tokio::io::duplex(1 << 16);
        let (exit_tx, exit_rx) = oneshot::channel::<WorkerExit>();
        let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
        self.servers
            .lock()
            .outs
            .push((self.name.clone(), worker, out_tx.clone()));
        let task = tokio::spawn(run_worker(
            Worker {
                name: self.name.clone(),
                worker,
                script,
                servers: self.servers.clone(),
            },
            stdin_theirs,
            stdout_theirs,
            out_tx,
            out_rx,
        ));
        let abort = task.abort_handle();
        let servers = self.servers.clone();
        let name = self.name.clone();
        tokio::spawn(async move {
            let result = task.await;
            {
                let mut s = servers.lock();
                s.ended.push((name, worker));
                s.outs.retain(|(_, w, _)| *w != worker);
            }
            let (status, requested) = match result {
                Ok(code) => (ExitKind::Code(code), false),
                Err(_) => (ExitKind::signal(15), true),
            };
            let _ = exit_tx.send(WorkerExit {
                status,
                uptime: Duration::ZERO,
                requested,
            });
        });
        Ok(WorkerIo {
            stdin: Box::pin(stdin_ours),
            stdout: Box::pin(stdout_ours),
            pid: None,
            stop: Box::new(move || abort.abort()),
            exited: exit_rx
                .map(|r| {
                    r.unwrap_or(WorkerExit {
                        status: ExitKind::Unknown,
                        uptime: Duration::ZERO,
                        requested: true,
                    })
                })
                .boxed(),
            stderr_tail: Default::default(),
            unread: None,
        })
    }
}

struct Worker {
    name: String,
    worker: u64,
    script: Script,
    servers: Servers,
}

/// One scripted worker: returns its exit code.
async fn run_worker(
    w: Worker,
    stdin: DuplexStream,
    stdout: DuplexStream,
    out: mpsc::UnboundedSender<String>,
    mut out_rx: mpsc::UnboundedReceiver<String>,
) -> i32 {
    if let Some(code) = w.script.exit_at_start {
        return code;
    }
    let writer = tokio::spawn(async move {
        let mut stdout = stdout;
        while let Some(line) = out_rx.recv().await {
            if stdout
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let mut lines = BufReader::new(stdin).lines();
    // A call of the tool `ask` that waits for the client's answers.
    let mut asking: Option<Asking> = None;
    // Whether this worker speaks 2026-07-28 (a server of both eras: once
    // it answered a discovery).
    let mut modern_now = w.script.discover == Discover::Modern;
    while let Ok(Some(line)) = lines.next_line().await {
        let msg: Value = serde_json::from_str(&line).expect("the session wrote JSON");
        w.servers.lock().seen.push(Seen {
            server: w.name.clone(),
            worker: w.worker,
            message: msg.clone(),
        });
        let method = msg["method"].as_str().unwrap_or("").to_owned();
        let Some(id) = msg.get("id").cloned() else {
            continue;
        };
        if method.is_empty() {
            // An answer to one of the server's own requests.
            if let Some(mut a) = asking.take() {
                a.answers.push(msg.clone());
                if a.answers.len() == a.total {
                    let done = json!({"jsonrpc": "2.0", "id": a.call, "result": {
                        "content": [{"type": "text", "text": "done"}],
                        "structuredContent": {"answers": a.answers},
                    }});
                    let _ = out.send(done.to_string());
                } else {
                    if !a.rest.is_empty() {
                        let _ = out.send(a.rest.remove(0).to_string());
                    }
                    asking = Some(a);
                }
            }
            continue;
        }
        let modern = modern_now;
        let reply = |mut result: Value| {
            if modern {
                result["resultType"] = json!("complete");
            }
            json!({"jsonrpc":"2.0","id":id,"result":result}).to_string()
        };
        let not_found =
            json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}})
                .to_string();
        match method.as_str() {
            "server/discover" => {
                let mut capabilities = json!({"tools": {}});
                if w.script.listens != Listens::No {
                    capabilities["tools"] = json!({"listChanged": true});
                    if !w.script.resources.is_empty() {
                        capabilities["resources"] = json!({"subscribe": true, "listChanged": true});
                    }
                }
                let discovered = json!({
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": capabilities,
                    "serverInfo": {"name": w.name, "version": "0"},
                });
                match w.script.discover {
                    Discover::NotFound => {
                        let _ = out.send(not_found);
                    }
                    Discover::Handshake => {
                        let answer = json!({"supportedVersions": ["2025-11-25", "2025-06-18"]});
                        let _ = out.send(reply(answer));
                    }
                    Discover::Modern => {
                        let _ = out.send(reply(discovered));
                    }
                    Discover::Both => {
                        modern_now = true;
                        let mut both = discovered;
                        both["resultType"] = json!("complete");
                        let _ =
                            out.send(json!({"jsonrpc":"2.0","id":id,"result":both}).to_string());
                    }
                    Discover::ModernAfter(delay) => {
                        let out = out.clone();
                        let answer = reply(discovered);
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = out.send(answer);
                        });
                    }
                }
            }
            "initialize" | "ping" if modern => {
                let _ = out.send(not_found);
            }
            "subscriptions/listen" if modern && w.script.listens == Listens::Refuse => {
                let err = json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"no subscriptions here"}});
                let _ = out.send(err.to_string());
            }
            "subscriptions/listen" if modern && w.script.listens == Listens::Hold => {
                // Acknowledged, and held open: what it hears is pushed by
                // the test, with this id in `_meta`.
                let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                        "notifications": msg["params"]["notifications"]}});
                let _ = out.send(ack.to_string());
            }
            "tools/call" if modern && msg["params"]["name"] == "ask" => {
                let params = &msg["params"];
                // `arguments.state`: the state to hand out and expect back.
                let expected = params["arguments"]["state"].as_str().unwrap_or("state-1");
                let answer = match (params.get("inputResponses"), params.get("requestState")) {
                    (Some(responses), Some(state)) if state == expected => reply(
                        json!({"content": [], "structuredContent": {"server": w.name, "worker": w.worker, "responses": responses}}),
                    ),
                    _ => {
                        let ask = json!({"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {"type": "object"}}});
                        // `arguments.count`: that many input requests
                        // (`k0`, `k1`, ...) in place of the one `name`.
                        let asks = match params["arguments"]["count"].as_u64() {
                            Some(n) => (0..n).map(|i| (format!("k{i}"), ask.clone())).collect(),
                            None => serde_json::Map::from_iter([("name".to_owned(), ask)]),
                        };
                        json!({"jsonrpc":"2.0","id":id,"result":{
                            "resultType": "input_required",
                            "inputRequests": asks,
                            "requestState": expected,
                        }})
                        .to_string()
                    }
                };
                let _ = out.send(answer);
            }
            "initialize" if w.script.exit_on_initialize.is_some() => {
                drop(writer);
                return w.script.exit_on_initialize.unwrap_or(3);
            }
            "initialize" if w.script.initialize_errors > 0 => {
                let err = json!({"jsonrpc":"2.0","id":id,"error":{"code":-32603,"message":"cannot start: no key"}});
                let _ = out.send(err.to_string());
            }
            "initialize" => {
                let mut capabilities = json!({"tools": {"listChanged": true}});
                if !w.script.resources.is_empty() {
                    capabilities["resources"] = json!({"subscribe": true, "listChanged": true});
                }
                if w.script.tasks {
                    capabilities["tasks"] =
                        json!({"cancel": {}, "requests": {"tools": {"call": {}}}});
                }
                let answer = reply(json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": capabilities,
                    "serverInfo": {"name": w.name, "version": "0"},
                }));
                match w.script.initialize_delay {
                    Some(delay) => {
                        let out = out.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = out.send(answer);
                        });
                    }
                    None => {
                        let _ = out.send(answer);
                    }
                }
            }
            "ping" => {
                if w.script.answer_pings {
                    let _ = out.send(reply(json!({})));
                }
            }
            "tools/list" => {
                // Read at each list, so that a test can change a running
                // server's tools.
                let (tools, descriptions) = w.servers.lock().scripts.get(&w.name).map_or_else(
                    || (w.script.tools.clone(), w.script.descriptions.clone()),
                    |s| (s.tools.clone(), s.descriptions.clone()),
                );
                let tools: Vec<Value> = tools
                    .iter()
                    .map(|t| match descriptions.get(t) {
                        Some(d) => {
                            json!({"name": t, "description": d, "inputSchema": {"type": "object"}})
                        }
                        None => json!({"name": t, "inputSchema": {"type": "object"}}),
                    })
                    .collect();
                let _ = out.send(reply(json!({ "tools": tools })));
            }
            "resources/list" => {
                let resources = w
                    .servers
                    .lock()
                    .scripts
                    .get(&w.name)
                    .map_or_else(|| w.script.resources.clone(), |s| s.resources.clone());
                let resources: Vec<Value> = resources
                    .iter()
                    .map(|uri| json!({"uri": uri, "name": uri}))
                    .collect();
                let _ = out.send(reply(json!({ "resources": resources })));
            }
            "resources/templates/list" => {
                let _ = out.send(reply(json!({ "resourceTemplates": [] })));
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let _ = out.send(reply(json!({})));
            }
            "tools/call" if w.script.tasks && msg["params"].get("task").is_some() => {
                let task = json!({"taskId": "task-1", "status": "working", "ttl": 60000,
                    "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"});
                let _ = out.send(reply(json!({ "task": task })));
            }
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/update" if w.script.tasks => {
                if msg["params"]["taskId"] != "task-1" {
                    let err = json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"Failed to retrieve task: Task not found"}});
                    let _ = out.send(err.to_string());
                    continue;
                }
                let state = |status: &str| {
                    json!({"taskId": "task-1", "status": status, "statusMessage": w.name, "ttl": 60000,
                        "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"})
                };
                if method == "tasks/result" {
                    // The task asks the client something on the way.
                    let ask = json!({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
                        "params": {"message": "sure?", "requestedSchema": {"type": "object", "properties": {}},
                            "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "task-1"}}}});
                    let _ = out.send(ask.to_string());
                }
                let result = match method.as_str() {
                    "tasks/get" => state("completed"),
                    "tasks/cancel" => state("cancelled"),
                    "tasks/update" => json!({}),
                    _ => json!({
                        "content": [{"type": "text", "text": "done"}],
                        "structuredContent": {"server": w.name, "worker": w.worker, "args": {}},
                        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "task-1"}},
                    }),
                };
                let _ = out.send(reply(result));
            }
            "tools/call" => {
                let name = msg["params"]["name"].as_str().unwrap_or("");
                let args = msg["params"]["arguments"].clone();
                match name {
                    "crash" => {
                        drop(writer);
                        return 3;
                    }
                    "hang" => {}
                    "ask_then_answer" => {
                        // Asks the client roots/list and answers the call at
                        // once, without waiting for the client.
                        let ask = json!({"jsonrpc": "2.0", "id": "early-1",
                            "method": "roots/list", "params": {}});
                        let _ = out.send(ask.to_string());
                        let _ = out.send(reply(tool_result(&w, &args)));
                    }
                    "ask" => {
                        // Asks the client each of `asks` ({method, params}),
                        // one after the other's answer (or all at once with
                        // `together`), and answers with every answer.
                        let mut asks: Vec<Value> = args["asks"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                            .into_iter()
                            .enumerate()
                            .map(|(i, a)| {
                                json!({"jsonrpc": "2.0", "id": format!("ask-{}", i + 1),
                                    "method": a["method"], "params": a["params"]})
                            })
                            .collect();
                        let total = asks.len();
                        let first: Vec<Value> = if args["together"] == true {
                            std::mem::take(&mut asks)
                        } else {
                            asks.drain(..1.min(total)).collect()
                        };
                        for m in first {
                            let _ = out.send(m.to_string());
                        }
                        asking = Some(Asking {
                            call: id.clone(),
                            rest: asks,
                            answers: Vec::new(),
                            total,
                        });
                    }
                    "sleep" => {
                        let ms = args["ms"].as_u64().unwrap_or(100);
                        let out = out.clone();
                        let answer = reply(tool_result(&w, &args));
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            let _ = out.send(answer);
                        });
                    }
                    _ => {
                        let _ = out.send(reply(tool_result(&w, &args)));
                    }
                }
            }
            _ => {
                let err = json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}});
                let _ = out.send(err.to_string());
            }
        }
    }
    drop(writer);
    0
}

/// The scripted tool `ask` in progress.
struct Asking {
    /// The call's id.
    call: Value,
    /// The requests still to send.
    rest: Vec<Value>,
    /// The client's answers (the whole responses), in order.
    answers: Vec<Value>,
    total: usize,
}

/// A tool's answer: who answered, and its arguments back.
fn tool_result(w: &Worker, args: &Value) -> Value {
    json!({
        "content": [{"type": "text", "text": "done"}],
        "structuredContent": {"server": w.name, "worker": w.worker, "args": args},
    })
}

/// Who answered a tool call: (server, worker).
pub fn answered_by(answer: &Value) -> (String, u64) {
    let s = &answer["result"]["structuredContent"];
    (
        s["server"]
            .as_str()
            .unwrap_or_else(|| panic!("not a tool's answer: {answer}"))
            .to_owned(),
        s["worker"].as_u64().expect("a worker"),
    )
}

/// A plan for the scripted server `name`, with short session bounds.
pub fn plan(name: &str) -> ServerPlan {
    let session = mcpvisor_session::Config {
        restart_backoff_max: Duration::from_millis(200),
        stop: StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_millis(500),
        },
        ..mcpvisor_session::Config::default()
    };
    ServerPlan {
        name: name.to_owned(),
        def: ServerDef::new(name, "scripted"),
        session,
        stderr: Passthrough::Discard,
        lazy: false,
        idle_timeout: None,
        health_interval: None,
        health_misses: 3,
        cached: None,
        cache_key: None,
        env_overrides: Vec::new(),
        per_client: false,
    }
}

/// The lists of a server with `tools`, as the cache would hold them.
pub fn cached(name: &str, tools: &[&str]) -> Cached {
    Cached::from_lists(&mcpvisor_gateway::cache::Lists {
        initialize: json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": name, "version": "0"},
        }),
        tools: tools
            .iter()
            .map(|t| json!({"name": t, "inputSchema": {"type": "object"}}))
            .collect(),
        ..Default::default()
    })
}

/// A gateway on paused time: the real hub, its servers scripted.
pub struct Gateway {
    pub servers: Servers,
    pub control: mpsc::Sender<Control>,
    fronts: mpsc::Sender<FrontCommand>,
    pub hub: JoinHandle<Outcome>,
    next_front: u64,
}

impl Gateway {
    pub fn start(servers: &Servers, plans: Vec<ServerPlan>) -> Self {
        Self::start_with(servers, plans, Settings::default())
    }

    pub fn start_with(servers: &Servers, plans: Vec<ServerPlan>, settings: Settings) -> Self {
        let (control, control_rx) = mpsc::channel(16);
        let mut gw = Self::start_with_control(servers, plans, settings, control_rx);
        gw.control = control;
        gw
    }

    /// A gateway whose controls come from `control_rx` (a monitor's, say);
    /// [`Gateway::control`] then reaches nothing.
    pub fn start_with_control(
        servers: &Servers,
        plans: Vec<ServerPlan>,
        settings: Settings,
        control_rx: mpsc::Receiver<Control>,
    ) -> Self {
        let settings = Settings {
            spawners: Some(servers.spawners()),
            ..settings
        };
        let (control, _) = mpsc::channel(1);
        let (fronts, fronts_rx) = mpsc::channel(64);
        let hub = tokio::spawn(Hub::serve(settings, plans, fronts_rx, control_rx, None));
        Self {
            servers: servers.clone(),
            control,
            fronts,
            hub,
            next_front: 0,
        }
    }

    /// Opens a front (not yet initialized).
    pub async fn open(&mut self) -> Front {
        self.next_front += 1;
        let id = FrontId(self.next_front);
        let (out_tx, out) = mpsc::channel(1024);
        self.fronts
            .send(FrontCommand::Open {
                front: id,
                out: out_tx,
            })
            .await
            .expect("the hub runs");
        Front {
            id,
            fronts: self.fronts.clone(),
            out,
            next_id: 0,
            unread: Vec::new(),
        }
    }

    /// Opens a front and initializes it.
    pub async fn client(&mut self) -> Front {
        let mut front = self.open().await;
        front.initialize().await;
        front
    }

    pub async fn control(&self, control: Control) {
        self.control.send(control).await.expect("the hub runs");
    }

    /// Stops the gateway; how it ended.
    pub async fn shutdown(self) -> Outcome {
        self.control(Control::Shutdown).await;
        tokio::time::timeout(WAIT, self.hub)
            .await
            .expect("the hub ends")
            .expect("the hub's task")
    }
}

/// One front client on a channel.
pub struct Front {
    pub id: FrontId,
    fronts: mpsc::Sender<FrontCommand>,
    out: mpsc::Receiver<Outbound>,
    next_id: u64,
    /// What arrived while an answer was awaited, in order.
    unread: Vec<Value>,
}

impl Front {
    pub async fn send(&self, message: Value) {
        self.fronts
            .send(FrontCommand::Message {
                front: self.id,
                line: Bytes::from(message.to_string()),
                scan: None,
            })
            .await
            .expect("the hub runs");
    }

    /// Sends a request; its id.
    pub async fn begin(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a 2026-07-28 request (its envelope in `_meta`, added to
    /// `params`); its id.
    pub async fn begin_modern(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "core", "version": "0"},
        });
        self.begin(method, params).await
    }

    /// A 2026-07-28 request and its answer.
    pub async fn request_modern(&mut self, method: &str, params: Value) -> Value {
        let id = self.begin_modern(method, params).await;
        self.answer(&id).await
    }

    /// The next message that is not the answer to a request (kept ones
    /// first), within [`WAIT`].
    pub async fn notification(&mut self) -> Value {
        if let Some(at) = self.unread.iter().position(|m| m.get("method").is_some()) {
            return self.unread.remove(at);
        }
        loop {
            let m = self
                .recv_within(WAIT)
                .await
                .unwrap_or_else(|| panic!("no notification within {WAIT:?}"));
            if m.get("method").is_some() {
                return m;
            }
            self.unread.push(m);
        }
    }

    /// Sends a request and waits for its answer; what else arrives is kept
    /// for [`Front::next`].
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.begin(method, params).await;
        self.answer(&id).await
    }

    /// The answer to `id`, within [`WAIT`].
    pub async fn answer(&mut self, id: &Value) -> Value {
        if let Some(at) = self
            .unread
            .iter()
            .position(|m| m.get("method").is_none() && m["id"] == *id)
        {
            return self.unread.remove(at);
        }
        loop {
            let m = self
                .recv_within(WAIT)
                .await
                .unwrap_or_else(|| panic!("no answer to {id} within {WAIT:?}"));
            if m.get("method").is_none() && m["id"] == *id {
                return m;
            }
            self.unread.push(m);
        }
    }

    /// The next message (kept ones first), within `limit`.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        if !self.unread.is_empty() {
            return Some(self.unread.remove(0));
        }
        self.recv_within(limit).await
    }

    async fn recv_within(&mut self, limit: Duration) -> Option<Value> {
        match tokio::time::timeout(limit, self.out.recv()).await {
            Ok(Some(msg)) => Some(serde_json::from_slice(&msg.line).expect("the hub wrote JSON")),
            _ => None,
        }
    }

    /// Every message that arrives within `limit` (kept ones first).
    pub async fn drain(&mut self, limit: Duration) -> Vec<Value> {
        let mut all = std::mem::take(&mut self.unread);
        let until = tokio::time::Instant::now() + limit;
        while let Ok(Some(msg)) = tokio::time::timeout_at(until, self.out.recv()).await {
            all.push(serde_json::from_slice(&msg.line).expect("the hub wrote JSON"));
        }
        all
    }

    pub async fn initialize(&mut self) -> Value {
        let init = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "core", "version": "0"}}),
            )
            .await;
        assert!(init.get("result").is_some(), "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        init
    }

    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// The names `tools/list` gives.
    pub async fn tools(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({})).await;
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("a tool list: {r}"))
            .iter()
            .map(|t| t["name"].as_str().expect("a name").to_owned())
            .collect()
    }

    /// Closes the front; the hub answers what it still owes, then forgets it.
    pub async fn close(&self) {
        self.fronts
            .send(FrontCommand::Close { front: self.id })
            .await
            .expect("the hub runs");
    }
}

/// Whether `m` is a `notifications/tools/list_changed`.
pub fn is_tools_changed(m: &Value) -> bool {
    m["method"] == "notifications/tools/list_changed"
}

/// Waits (in paused time, in steps of 10 ms, at most [`WAIT`]) until
/// `done` holds; how long that took.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let start = tokio::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// How many of `messages` are a `notifications/tools/list_changed`.
pub fn tools_changes(messages: &[Value]) -> usize {
    messages.iter().filter(|m| is_tools_changed(m)).count()
}
