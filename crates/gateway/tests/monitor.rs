//! What a [`Monitor`] sees of a running gateway, and what its actions do:
//! the hub in this process, each server a real `mcpvisor-fake-worker` under
//! its own session, one front client on a channel.
//!
//! Every wait is for the thing itself (a row in a state, an answer), read
//! from the hub's broadcast or its snapshot, and bounded by [`WAIT`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_config::ServerDef;
use mcpvisor_gateway::fronts::{FrontCommand, FrontId, Outbound};
use mcpvisor_gateway::monitor::{
    Action, ActionError, EventKind, Monitor, MonitorEvent, ServerState, ServerStatus,
};
use mcpvisor_gateway::{Cached, Control, Hub, Outcome, ServerPlan, Settings};
use mcpvisor_jsonrpc::{NOT_STARTED, REQUEST_TIMEOUT, WORKER_LOST};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

/// The bound on every wait for the gateway.
const WAIT: Duration = Duration::from_secs(20);

/// The fake worker, built next to this test (`cargo build --workspace`
/// builds it; `cargo test -p mcpvisor-gateway` alone does not).
fn fake_worker() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("mcpvisor-fake-worker"))
        .expect("the target directory");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p mcpvisor-fixtures` (or `cargo build --workspace`) first",
        path.display()
    );
    path
}

/// One server running `command args` under a session with short bounds.
fn plan(name: &str, command: &str, args: &[&str]) -> ServerPlan {
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
        def: ServerDef {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..ServerDef::new(name, command)
        },
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

fn fake(name: &str, args: &[&str]) -> ServerPlan {
    plan(name, &fake_worker().display().to_string(), args)
}

/// A gateway with one front client, and a monitor on it.
struct Gateway {
    monitor: Monitor,
    events: broadcast::Receiver<MonitorEvent>,
    control: mpsc::Sender<Control>,
    fronts: mpsc::Sender<FrontCommand>,
    out: mpsc::Receiver<Outbound>,
    hub: tokio::task::JoinHandle<Outcome>,
    next_id: u64,
}

impl Gateway {
    /// The stderr tail of a kept crash of `name`, a known server.
    async fn stderr(&self, name: &str, generation: Option<u64>) -> Vec<String> {
        self.monitor
            .stderr(name, generation)
            .await
            .expect("answers")
            .expect("known")
    }

    async fn start(plans: Vec<ServerPlan>) -> Self {
        let (control, control_rx) = mpsc::channel(16);
        let (monitor, tap) = Monitor::new(control.clone());
        let events = monitor.subscribe();
        let settings = Settings {
            monitor: Some(tap),
            cache_dir: None,
            list_timeout: Duration::from_secs(10),
            ..Settings::default()
        };
        let (fronts, fronts_rx) = mpsc::channel(64);
        let hub = tokio::spawn(Hub::serve(settings, plans, fronts_rx, control_rx, None));
        let (out_tx, out) = mpsc::channel(1024);
        fronts
            .send(FrontCommand::Open {
                front: FrontId(1),
                out: out_tx,
            })
            .await
            .expect("hub running");
        let mut gw = Self {
            monitor,
            events,
            control,
            fronts,
            out,
            hub,
            next_id: 1,
        };
        let init = gw
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
            )
            .await;
        assert!(init.get("result").is_some(), "{init}");
        gw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        gw
    }

    async fn send(&self, message: Value) {
        self.fronts
            .send(FrontCommand::Message {
                front: FrontId(1),
                line: Bytes::from(message.to_string()),
                scan: None,
            })
            .await
            .expect("hub running");
    }

    /// Sends a request and waits for its answer (other messages are
    /// dropped).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.begin(method, params).await;
        self.answer(id).await
    }

    async fn begin(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    async fn answer(&mut self, id: u64) -> Value {
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let msg = self.out.recv().await.expect("front open");
                let v: Value = serde_json::from_slice(&msg.line).expect("json");
                if v["id"] == json!(id) {
                    return v;
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no answer to request {id} within {WAIT:?}"))
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    async fn row(&self, name: &str) -> ServerStatus {
        let snapshot = self.monitor.snapshot().await.expect("hub answers");
        snapshot
            .servers
            .into_iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no row for {name}"))
    }

    /// Waits until `name`'s row satisfies `done`, reading the broadcast
    /// (and the snapshot when it fell behind). Returns the row and every
    /// row of `name` published meanwhile.
    async fn until(
        &mut self,
        name: &str,
        what: &str,
        done: impl Fn(&ServerStatus) -> bool,
    ) -> (ServerStatus, Vec<ServerStatus>) {
        let mut seen = Vec::new();
        // What was published before the snapshot is older than it.
        while let Ok(event) = self.events.try_recv() {
            if let MonitorEvent::Server { status } = event {
                if status.name == name {
                    seen.push(*status);
                }
            }
        }
        let row = self.row(name).await;
        if done(&row) {
            return (row, seen);
        }
        let found = tokio::time::timeout(WAIT, async {
            loop {
                match self.events.recv().await {
                    Ok(MonitorEvent::Server { status }) if status.name == name => {
                        seen.push((*status).clone());
                        if done(&status) {
                            return *status;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let row = self.row(name).await;
                        if done(&row) {
                            return row;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => panic!("the hub ended"),
                }
            }
        })
        .await;
        match found {
            Ok(row) => (row, seen),
            Err(_) => panic!(
                "{name} never became {what} within {WAIT:?}; now {:?}; rows seen: {:?}",
                self.row(name).await,
                seen.iter().map(|s| s.state).collect::<Vec<_>>()
            ),
        }
    }

    async fn state(&mut self, name: &str, state: ServerState) -> ServerStatus {
        self.state_with(name, state).await.0
    }

    /// [`Gateway::state`], with every row of `name` published meanwhile.
    async fn state_with(
        &mut self,
        name: &str,
        state: ServerState,
    ) -> (ServerStatus, Vec<ServerStatus>) {
        self.until(name, &format!("{state:?}"), |s| s.state == state)
            .await
    }

    async fn events_of(&self, name: &str) -> Vec<(EventKind, String)> {
        let detail = self
            .monitor
            .server(name)
            .await
            .expect("hub answers")
            .expect("known server");
        detail
            .events
            .into_iter()
            .map(|e| (e.kind, e.message))
            .collect()
    }

    async fn stop(self) {
        let _ = self.control.send(Control::Shutdown).await;
        let _ = tokio::time::timeout(WAIT, self.hub).await;
    }
}

/// A shell script that prints an authorization link as `mcp-remote` does,
/// then runs the fake worker, whose `initialize` waits 1.5 s.
fn authorizing(link: &str) -> String {
    format!(
        "echo '[7] Please authorize this client by visiting:' >&2; echo '[7] {link}' >&2; exec {} --initialize-delay 1500",
        fake_worker().display()
    )
}

/// A tool result's text, parsed as JSON (the fake worker's `whoami`).
fn tool_json(answer: &Value) -> Value {
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a tool result: {answer}"));
    serde_json::from_str(text).expect("JSON text")
}

fn code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

#[tokio::test]
async fn a_crash_is_seen_as_restarting_then_ready_again_with_its_reason() {
    let mut gw = Gateway::start(vec![fake("a", &[])]).await;
    let first = gw.state("a", ServerState::Ready).await;
    assert_eq!(first.generation, Some(1));
    assert!(first.pid.is_some(), "{first:?}");
    assert!(first.started_at_ms.is_some(), "{first:?}");
    assert_eq!(first.restarts, 0);
    assert_eq!(first.transport, "stdio");
    assert!(first.command.ends_with("mcpvisor-fake-worker"), "{first:?}");

    let lost = gw.call("a__crash", json!({"code": 3})).await;
    assert_eq!(code(&lost), WORKER_LOST, "{lost}");
    let (again, seen) = gw
        .until("a", "ready again", |s| {
            s.state == ServerState::Ready && s.generation == Some(2)
        })
        .await;
    assert_eq!(again.restarts, 1);
    assert_ne!(again.pid, first.pid);
    assert!(
        seen.iter().any(|s| s.state == ServerState::Restarting),
        "{:?}",
        seen.iter().map(|s| s.state).collect::<Vec<_>>()
    );

    let events = gw.events_of("a").await;
    let exited = events
        .iter()
        .find(|(kind, _)| *kind == EventKind::Exited)
        .expect("an exited event");
    assert!(
        exited.1.contains("exited with code 3 during serving"),
        "{exited:?}"
    );
    assert!(
        events
            .iter()
            .any(|(k, m)| *k == EventKind::Restarting && m == "restarting now"),
        "{events:?}"
    );
    let kinds: Vec<EventKind> = events.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Starting,
            EventKind::Ready,
            EventKind::Exited,
            EventKind::Restarting,
            EventKind::Starting,
            EventKind::Ready,
        ]
    );

    let detail = gw
        .monitor
        .server("a")
        .await
        .expect("answers")
        .expect("known");
    let crash = detail.last_crash.expect("a crash report");
    assert_eq!(crash["exit"]["code"], 3, "{crash}");
    assert_eq!(crash["phase"], "serving", "{crash}");
    assert_eq!(crash["generation"], 1, "{crash}");
    assert!(crash.get("stderr").is_none(), "{crash}");
    assert_eq!(detail.errors_by_code.get(&WORKER_LOST), Some(&1));
    assert!(
        detail.tools.iter().any(|t| t["name"] == "echo"),
        "its own names: {:?}",
        detail.tools
    );
    // The stderr tail is asked for on its own.
    let tail = gw.stderr("a", None).await;
    assert!(
        tail.iter().any(|l| l.contains("fake-worker: pid=")),
        "{tail:?}"
    );
    assert_eq!(
        gw.monitor.stderr("nobody", None).await.expect("answers"),
        None
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_crash_loop_ends_failed_with_its_reason_and_restarts_counted() {
    let mut p = plan("loop", "sh", &["-c", "echo 'boom: no config' >&2; exit 1"]);
    p.session.crash_loop_exits = 3;
    let mut gw = Gateway::start(vec![p, fake("ok", &[])]).await;
    let (failed, seen) = gw
        .until("loop", "failed in a crash loop", |s| {
            s.state == ServerState::Failed
                && s.detail
                    .as_deref()
                    .is_some_and(|d| d.contains("crash-looping"))
        })
        .await;
    let detail = failed.detail.clone().expect("a detail");
    assert!(!detail.contains('\n'), "{detail}");
    assert_eq!(failed.restarts, 2, "{failed:?}");
    assert_eq!(
        failed.pid, None,
        "a failed session runs no worker: {failed:?}"
    );
    assert_eq!(failed.started_at_ms, None, "{failed:?}");
    // The second restart waited its backoff, and said until when.
    let waiting = seen
        .iter()
        .find(|s| s.state == ServerState::Restarting && s.next_try_at_ms.is_some())
        .unwrap_or_else(|| panic!("a restart with a pause among {seen:?}"));
    let why = waiting.detail.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("exited with code 1") && why.contains("; restarting"),
        "{why}"
    );
    let events = gw.events_of("loop").await;
    assert!(
        events.iter().any(|(k, _)| *k == EventKind::Failed),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(k, m)| *k == EventKind::Exited && m.contains("exited with code 1")),
        "{events:?}"
    );
    let tail = gw.stderr("loop", None).await;
    assert_eq!(tail, ["boom: no config"]);
    // Every crash of the loop is kept, newest first, each with its stderr.
    let detail = gw
        .monitor
        .server("loop")
        .await
        .expect("answers")
        .expect("known");
    let generations: Vec<u64> = detail
        .crashes
        .iter()
        .filter_map(|c| c["generation"].as_u64())
        .collect();
    assert_eq!(generations, [3, 2, 1], "{:?}", detail.crashes);
    assert_eq!(detail.last_crash.as_ref(), detail.crashes.first());
    assert!(detail.crashes.iter().all(|c| c["at_ms"].as_u64().is_some()));
    for generation in [1, 2] {
        let tail = gw.stderr("loop", Some(generation)).await;
        assert_eq!(tail, ["boom: no config"], "generation {generation}");
    }
    let none = gw.monitor.stderr("loop", Some(9)).await.expect("answers");
    assert_eq!(none, Some(Vec::new()), "a crash not kept has no lines");
    // The other server is not held up.
    gw.state("ok", ServerState::Ready).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_server_that_never_answers_initialize_is_never_shown_ready() {
    // Its session enters its failed state and fails the gateway's
    // initialize. A cooldown later it would start processes again that
    // nobody initializes, each taken for ready at spawn; the gateway stops
    // it instead, so no row ever says ready, and the last crash's phase is
    // the handshake's.
    let mut p = plan("boom", "sh", &["-c", "echo boom >&2; exit 3"]);
    p.session.crash_loop_exits = 2;
    p.session.failed_cooldown = Duration::from_millis(200);
    let mut gw = Gateway::start(vec![p, fake("ok", &[])]).await;
    let (_, mut seen) = gw.state_with("boom", ServerState::Failed).await;
    // Three cooldowns: time for a session left running to start again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    while let Ok(event) = gw.events.try_recv() {
        if let MonitorEvent::Server { status } = event {
            if status.name == "boom" {
                seen.push(*status);
            }
        }
    }
    let states: Vec<ServerState> = seen.iter().map(|s| s.state).collect();
    assert!(!states.contains(&ServerState::Ready), "{states:?}");
    // Each cooldown's retry is a process that lives a few milliseconds,
    // its pid on the row meanwhile: the row is read between two of them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let row = loop {
        let row = gw.row("boom").await;
        assert_eq!(row.state, ServerState::Failed, "{row:?}");
        if row.pid.is_none() || tokio::time::Instant::now() >= deadline {
            break row;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(row.pid, None, "{row:?}");
    let detail = gw
        .monitor
        .server("boom")
        .await
        .expect("answers")
        .expect("known");
    let crash = detail.last_crash.expect("a crash report");
    assert_eq!(crash["phase"], "initialize", "{crash}");
    gw.state("ok", ServerState::Ready).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_server_waiting_for_authorization_shows_its_link_until_it_is_ready() {
    let link = "https://auth.example.com/authorize?client_id=gw&state=1";
    let script = authorizing(link);
    let mut gw = Gateway::start(vec![plan("auth", "sh", &["-c", &script])]).await;
    let waiting = gw.state("auth", ServerState::WaitingAuth).await;
    assert_eq!(waiting.auth_url.as_deref(), Some(link));
    let ready = gw.state("auth", ServerState::Ready).await;
    assert_eq!(ready.auth_url, None);
    let kinds: Vec<EventKind> = gw
        .events_of("auth")
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert!(kinds.contains(&EventKind::AuthPending), "{kinds:?}");
    assert!(kinds.contains(&EventKind::Authorized), "{kinds:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_server_that_asks_again_mid_session_is_ready_once_it_answers() {
    // A bridge (mcp-remote) whose grant was revoked prints a new link while
    // a call is in flight; once the person authorized it, that call is
    // answered. The answer ends the waiting: later calls are served.
    let link = "https://auth.example.com/authorize?client_id=gw&state=again";
    let mut gw = Gateway::start(vec![fake("remote", &[])]).await;
    gw.state("remote", ServerState::Ready).await;
    let slow = gw
        .begin(
            "tools/call",
            json!({"name": "remote__sleep", "arguments": {"ms": 800}}),
        )
        .await;
    let prompt = format!("[7] Please authorize this client by visiting:\n[7] {link}");
    let printed = gw.call("remote__stderr", json!({"text": prompt})).await;
    assert_eq!(printed["result"]["isError"], false, "{printed}");
    let answered = gw.answer(slow).await;
    assert!(answered.get("result").is_some(), "{answered}");
    // Its answers after the prompt (the slow call's, at least) end the
    // waiting, whichever of them came after it was seen.
    let ready = gw.state("remote", ServerState::Ready).await;
    assert_eq!(ready.auth_url, None);
    let events = gw.events_of("remote").await;
    let pending = events
        .iter()
        .position(|(k, _)| *k == EventKind::AuthPending);
    let authorized = events
        .iter()
        .rposition(|(k, _)| *k == EventKind::Authorized);
    assert!(
        pending.is_some() && authorized > pending,
        "the prompt, then its end: {events:?}"
    );
    let after = gw.call("remote__echo", json!({"after": 1})).await;
    assert_eq!(tool_json(&after), json!({"after": 1}), "{after}");
    gw.stop().await;
}

#[tokio::test]
async fn a_per_client_server_s_row_shows_a_client_s_process_waiting_for_authorization() {
    let link = "https://auth.example.com/authorize?client_id=gw&state=2";
    let script = authorizing(link);
    let mut p = plan("auth", "sh", &["-c", &script]);
    p.per_client = true;
    let mut gw = Gateway::start(vec![p]).await;
    // Its lists read by a start of its own, the configured server rests.
    gw.state("auth", ServerState::Idle).await;
    let call = gw
        .begin("tools/call", json!({"name": "auth__echo", "arguments": {}}))
        .await;
    let (waiting, _) = gw
        .until(
            "auth",
            "the client's process waiting for authorization",
            |s| s.state == ServerState::WaitingAuth && s.instances.len() == 1,
        )
        .await;
    assert_eq!(waiting.auth_url.as_deref(), Some(link));
    assert_eq!(
        waiting.detail.as_deref(),
        Some("client 1's process: waiting for a person to authorize it")
    );
    assert_eq!(waiting.instances[0].state, ServerState::WaitingAuth);
    // The call itself is answered with the link to open, then retried.
    let answer = gw.answer(call).await;
    assert_eq!(code(&answer), NOT_STARTED, "{answer}");
    assert_eq!(answer["error"]["data"]["authorization_url"], link);
    let (ready, _) = gw
        .until("auth", "the client's process ready", |s| {
            s.state == ServerState::Ready
        })
        .await;
    assert_eq!(ready.auth_url, None);
    let retried = gw.call("auth__echo", json!({})).await;
    assert!(retried.get("result").is_some(), "{retried}");
    gw.stop().await;
}

#[tokio::test]
async fn a_lazy_server_is_idle_until_its_first_call() {
    let mut p = fake("lazy", &[]);
    p.lazy = true;
    let lists = mcpvisor_gateway::cache::Lists {
        initialize: json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "fake-worker", "version": "0"}}),
        tools: vec![json!({"name": "echo", "inputSchema": {"type": "object"}})],
        ..Default::default()
    };
    p.cached = Some(Cached::from_lists(&lists));
    let mut gw = Gateway::start(vec![p]).await;
    let idle = gw.row("lazy").await;
    assert_eq!(idle.state, ServerState::Idle);
    assert!(idle.lazy);
    assert_eq!(idle.generation, None);
    assert_eq!(idle.pid, None);
    let ok = gw.call("lazy__echo", json!({"x": 1})).await;
    assert!(ok.get("result").is_some(), "{ok}");
    let ready = gw.state("lazy", ServerState::Ready).await;
    assert_eq!(ready.generation, Some(1));
    assert_eq!(ready.restarts, 0, "a lazy start is no restart");
    assert_eq!(ready.calls, 1);
    gw.stop().await;
}

#[tokio::test]
async fn stop_start_restart_and_reload_act_on_one_server() {
    let mut gw = Gateway::start(vec![fake("s", &[])]).await;
    gw.state("s", ServerState::Ready).await;

    gw.monitor.act("s", Action::Stop).await.expect("stopped");
    let stopped = gw.state("s", ServerState::Stopped).await;
    assert_eq!(stopped.pid, None);
    let refused = gw.call("s__echo", json!({})).await;
    assert_eq!(code(&refused), NOT_STARTED, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("stopped by a person"), "{refused}");
    // Not started again by a call, nor by a second stop.
    gw.monitor
        .act("s", Action::Stop)
        .await
        .expect("still stopped");
    assert_eq!(gw.row("s").await.state, ServerState::Stopped);

    gw.monitor.act("s", Action::Start).await.expect("started");
    let started = gw.state("s", ServerState::Ready).await;
    assert_eq!(started.generation, Some(2));
    assert_eq!(started.restarts, 0, "a person's start is no restart");
    let ok = gw.call("s__echo", json!({})).await;
    assert!(ok.get("result").is_some(), "{ok}");

    gw.monitor
        .act("s", Action::Restart)
        .await
        .expect("restarted");
    let (restarted, _) = gw
        .until("s", "ready in generation 3", |s| {
            s.state == ServerState::Ready && s.generation == Some(3)
        })
        .await;
    assert_eq!(restarted.restarts, 1);
    assert_ne!(restarted.pid, started.pid);

    gw.monitor
        .act("s", Action::Reload)
        .await
        .expect("reloading");
    let (reloaded, _) = gw
        .until("s", "ready in generation 4", |s| {
            s.state == ServerState::Ready && s.generation == Some(4)
        })
        .await;
    assert_eq!(reloaded.restarts, 2);

    // Restart of a stopped server starts it.
    gw.monitor.act("s", Action::Stop).await.expect("stopped");
    gw.state("s", ServerState::Stopped).await;
    gw.monitor.act("s", Action::Restart).await.expect("started");
    let (back, _) = gw
        .until("s", "ready in generation 5", |s| {
            s.state == ServerState::Ready && s.generation == Some(5)
        })
        .await;
    assert_eq!(back.restarts, 2);

    assert_eq!(
        gw.monitor.act("nobody", Action::Start).await,
        Err(ActionError::NoSuchServer("nobody".into()))
    );
    let kinds: Vec<EventKind> = gw.events_of("s").await.into_iter().map(|e| e.0).collect();
    for kind in [
        EventKind::Stopped,
        EventKind::Started,
        EventKind::Restarting,
        EventKind::Reloading,
    ] {
        assert!(kinds.contains(&kind), "{kind:?} in {kinds:?}");
    }
    let detail = gw
        .monitor
        .server("s")
        .await
        .expect("answers")
        .expect("known");
    assert_eq!(detail.errors_by_code.get(&NOT_STARTED), Some(&1));
    gw.stop().await;
}

#[tokio::test]
async fn a_disabled_server_refuses_actions() {
    let mut p = fake("off", &[]);
    p.def.disabled = true;
    let gw = Gateway::start(vec![p]).await;
    assert_eq!(gw.row("off").await.state, ServerState::Disabled);
    let refused = gw.monitor.act("off", Action::Start).await;
    assert!(
        matches!(&refused, Err(ActionError::Refused(m)) if m.contains("disabled")),
        "{refused:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn calls_errors_in_flight_and_latency_are_counted() {
    let mut p = fake("c", &[]);
    p.session.request_timeout = Duration::from_millis(500);
    let mut gw = Gateway::start(vec![p]).await;
    gw.state("c", ServerState::Ready).await;
    for i in 0..5 {
        let ok = gw.call("c__echo", json!({"i": i})).await;
        assert!(ok.get("result").is_some(), "{ok}");
    }
    // Its session times this one out (-32001).
    let timed_out = gw.call("c__sleep", json!({"ms": 3000})).await;
    assert_eq!(code(&timed_out), REQUEST_TIMEOUT, "{timed_out}");
    // One in flight while it sleeps.
    let slow = gw
        .begin(
            "tools/call",
            json!({"name": "c__sleep", "arguments": {"ms": 300}}),
        )
        .await;
    let (busy, _) = gw.until("c", "busy", |s| s.in_flight == 1).await;
    assert_eq!(busy.calls, 7);
    let answer = gw.answer(slow).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let (row, _) = gw
        .until("c", "idle with every call timed", |s| {
            s.in_flight == 0 && s.latency.count == 7
        })
        .await;
    assert_eq!(row.calls, 7);
    assert_eq!(row.errors, 1);
    assert_eq!(row.latency.buckets.len(), 13);
    assert_eq!(row.latency.buckets.iter().sum::<u64>(), 7);
    assert!(row.latency.sum_seconds >= 0.8, "{:?}", row.latency);
    let (p50, p99) = (
        row.latency.p50_ms.expect("p50"),
        row.latency.p99_ms.expect("p99"),
    );
    assert!(p50 <= p99, "{:?}", row.latency);
    assert!(p99 >= 300.0, "{:?}", row.latency);
    let detail = gw
        .monitor
        .server("c")
        .await
        .expect("answers")
        .expect("known");
    assert_eq!(
        detail.errors_by_code.into_iter().collect::<Vec<_>>(),
        [(REQUEST_TIMEOUT, 1)]
    );
    // The JSON the UI reads.
    let json = serde_json::to_value(gw.row("c").await).expect("json");
    for field in [
        "name",
        "state",
        "detail",
        "next_try_at_ms",
        "auth_url",
        "lazy",
        "transport",
        "command",
        "generation",
        "pid",
        "started_at_ms",
        "restarts",
        "calls",
        "errors",
        "in_flight",
        "latency",
    ] {
        assert!(json.get(field).is_some(), "{field} in {json}");
    }
    assert_eq!(json["state"], "ready");
    gw.stop().await;
}

#[tokio::test]
async fn counter_updates_are_throttled_but_state_changes_are_not() {
    let mut gw = Gateway::start(vec![fake("busy", &[])]).await;
    gw.state("busy", ServerState::Ready).await;
    // Drain what was published so far.
    while gw.events.try_recv().is_ok() {}
    let started = std::time::Instant::now();
    let calls = 200;
    for _ in 0..calls {
        let ids: Vec<u64> = {
            let mut ids = Vec::new();
            for _ in 0..4 {
                ids.push(
                    gw.begin("tools/call", json!({"name": "busy__echo", "arguments": {}}))
                        .await,
                );
            }
            ids
        };
        for id in ids {
            gw.answer(id).await;
        }
    }
    let mut rows = 0;
    while let Ok(event) = gw.events.try_recv() {
        if matches!(event, MonitorEvent::Server { .. }) {
            rows += 1;
        }
    }
    let elapsed = started.elapsed();
    // At most one counter-only row per 250 ms, plus the first at once.
    let bound = elapsed.as_millis() / 250 + 2;
    assert!(
        rows as u128 <= bound,
        "{rows} rows in {elapsed:?} (bound {bound})"
    );
    // The last change is not held back for good: its row goes out once
    // its time comes, with nothing else happening.
    let last = tokio::time::timeout(WAIT, async {
        loop {
            match gw.events.recv().await {
                Ok(MonitorEvent::Server { status })
                    if status.calls == calls * 4 && status.in_flight == 0 =>
                {
                    return *status;
                }
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the last counts published");
    assert_eq!(last.state, ServerState::Ready);
    assert_eq!(last.latency.count, calls * 4);
    gw.stop().await;
}

#[tokio::test]
async fn env_keys_are_listed_set_or_unset_and_never_with_their_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = dir.path().join("s.env");
    std::fs::write(
        &env,
        "ALPHA=secret-alpha-value\nBETA=\n# comment\nGAMMA=x\n",
    )
    .expect("write");
    let config = dir.path().join("servers.json");
    let mut named = fake("named", &[]);
    named.def.env_file = Some(env.clone());
    named.def.env_keys = vec!["ALPHA".into(), "BETA".into(), "DELTA".into()];
    named.def.source = Some(config.clone());
    let mut all = fake("all", &[]);
    all.def.env_file = Some(env.clone());
    let gw = Gateway::start(vec![named, all]).await;

    let detail = gw
        .monitor
        .server("named")
        .await
        .expect("answers")
        .expect("known");
    let keys: Vec<(String, bool)> = detail
        .env_keys
        .iter()
        .map(|k| (k.key.clone(), k.set))
        .collect();
    assert_eq!(
        keys,
        [
            ("ALPHA".to_owned(), true),
            ("BETA".to_owned(), false),
            ("DELTA".to_owned(), false)
        ]
    );
    assert_eq!(detail.config_file.as_deref(), Some(config.as_path()));
    assert_eq!(detail.env_file.as_deref(), Some(env.as_path()));
    let text = serde_json::to_string(&detail).expect("json");
    assert!(!text.contains("secret-alpha-value"), "{text}");

    let detail = gw
        .monitor
        .server("all")
        .await
        .expect("answers")
        .expect("known");
    let keys: Vec<(String, bool)> = detail
        .env_keys
        .iter()
        .map(|k| (k.key.clone(), k.set))
        .collect();
    assert_eq!(
        keys,
        [
            ("ALPHA".to_owned(), true),
            ("BETA".to_owned(), false),
            ("GAMMA".to_owned(), true)
        ]
    );
    assert_eq!(detail.config_file, None);
    // A secret written by the UI is an event of the server's.
    let known = gw
        .monitor
        .record("named", EventKind::SecretSet, "DELTA was set")
        .await
        .expect("answers");
    assert!(known);
    let events = gw.events_of("named").await;
    assert!(
        events.contains(&(EventKind::SecretSet, "DELTA was set".to_owned())),
        "{events:?}"
    );
    let unknown = gw
        .monitor
        .record("nobody", EventKind::SecretSet, "x")
        .await
        .expect("answers");
    assert!(!unknown);
    let snapshot =
        serde_json::to_string(&gw.monitor.snapshot().await.expect("answers")).expect("json");
    assert!(!snapshot.contains("secret-alpha-value"), "{snapshot}");
    gw.stop().await;
}

#[tokio::test]
async fn a_reconfiguration_publishes_removed_and_added_servers() {
    let mut gw = Gateway::start(vec![fake("old", &[])]).await;
    gw.state("old", ServerState::Ready).await;
    gw.control
        .send(Control::Reconfigure(vec![fake("new", &[])]))
        .await
        .expect("hub running");
    let (mut removed, mut added) = (false, false);
    let seen = tokio::time::timeout(WAIT, async {
        while !(removed && added) {
            match gw.events.recv().await {
                Ok(MonitorEvent::Removed { server }) if server == "old" => removed = true,
                Ok(MonitorEvent::Event { server, event })
                    if server == "new" && event.kind == EventKind::Added =>
                {
                    added = true;
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the hub ended"),
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "removed {removed}, added {added}");
    let first = gw.state("new", ServerState::Ready).await;
    assert!(gw.monitor.server("old").await.expect("answers").is_none());

    // Disabled, then enabled again, in its entry.
    let mut off = fake("new", &[]);
    off.def.disabled = true;
    gw.control
        .send(Control::Reconfigure(vec![off]))
        .await
        .expect("hub running");
    let disabled = gw.state("new", ServerState::Disabled).await;
    assert_eq!(disabled.pid, None);
    gw.control
        .send(Control::Reconfigure(vec![fake("new", &[])]))
        .await
        .expect("hub running");
    let (back, _) = gw
        .until("new", "ready in generation 2", |s| {
            s.state == ServerState::Ready && s.generation == Some(2)
        })
        .await;
    assert_eq!(back.restarts, first.restarts, "enabling is no restart");
    let kinds: Vec<EventKind> = gw.events_of("new").await.into_iter().map(|e| e.0).collect();
    assert_eq!(kinds.first(), Some(&EventKind::Added), "{kinds:?}");
    assert!(kinds.contains(&EventKind::Disabled), "{kinds:?}");
    assert!(kinds.contains(&EventKind::Enabled), "{kinds:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_is_seen_as_reloading_until_the_next_generation_is_ready() {
    let mut gw = Gateway::start(vec![fake("r", &[])]).await;
    gw.state("r", ServerState::Ready).await;
    let slow = gw
        .begin(
            "tools/call",
            json!({"name": "r__sleep", "arguments": {"ms": 1000}}),
        )
        .await;
    gw.until("r", "busy", |s| s.in_flight == 1).await;
    gw.monitor
        .act("r", Action::Reload)
        .await
        .expect("reloading");
    let reloading = gw.state("r", ServerState::Reloading).await;
    assert_eq!(reloading.generation, Some(1));
    let answer = gw.answer(slow).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let (row, _) = gw
        .until("r", "ready in generation 2", |s| {
            s.state == ServerState::Ready && s.generation == Some(2)
        })
        .await;
    assert_eq!(row.restarts, 1);
    let events = gw.events_of("r").await;
    assert!(
        events
            .iter()
            .any(|(k, m)| *k == EventKind::Reloading && m == "reloading: asked for by a person"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(k, m)| *k == EventKind::Exited && m == "stopped for a reload"),
        "{events:?}"
    );
    // A reload is no crash.
    let detail = gw
        .monitor
        .server("r")
        .await
        .expect("answers")
        .expect("known");
    assert_eq!(detail.last_crash, None);
    gw.stop().await;
}

#[tokio::test]
async fn a_per_client_server_s_calls_are_counted_on_its_row() {
    let mut p = fake("own", &[]);
    p.per_client = true;
    let mut gw = Gateway::start(vec![p]).await;
    for _ in 0..3 {
        let ok = gw.call("own__echo", json!({})).await;
        assert!(ok.get("result").is_some(), "{ok}");
    }
    let (row, _) = gw
        .until("own", "three calls timed", |s| s.latency.count == 3)
        .await;
    assert_eq!(row.calls, 3);
    assert_eq!(row.errors, 0);
    // Stopped, it refuses every client, and its clients' processes stop.
    gw.monitor.act("own", Action::Stop).await.expect("stopped");
    let refused = gw.call("own__echo", json!({})).await;
    assert_eq!(code(&refused), NOT_STARTED, "{refused}");
    gw.monitor.act("own", Action::Start).await.expect("started");
    let ok = gw.call("own__echo", json!({})).await;
    assert!(ok.get("result").is_some(), "{ok}");
    gw.stop().await;
}

#[tokio::test]
async fn a_per_client_server_s_row_lists_each_client_s_process() {
    let mut p = fake("own", &[]);
    p.per_client = true;
    let mut gw = Gateway::start(vec![p]).await;
    let ok = gw.call("own__whoami", json!({})).await;
    let first_pid = tool_json(&ok)["pid"].as_u64().expect("a pid");

    // A second client, with a process of its own.
    let (out_tx, mut out) = mpsc::channel(64);
    gw.fronts
        .send(FrontCommand::Open {
            front: FrontId(2),
            out: out_tx,
        })
        .await
        .expect("hub running");
    let second = |id: u64, method: &str, params: Value| FrontCommand::Message {
        front: FrontId(2),
        line: Bytes::from(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        ),
        scan: None,
    };
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b", "version": "0"}});
    gw.fronts
        .send(second(1, "initialize", init))
        .await
        .expect("hub running");
    let call = json!({"name": "own__whoami", "arguments": {}});
    gw.fronts
        .send(second(2, "tools/call", call))
        .await
        .expect("hub running");
    let answer = tokio::time::timeout(WAIT, async {
        loop {
            let msg = out.recv().await.expect("front open");
            let v: Value = serde_json::from_slice(&msg.line).expect("json");
            if v["id"] == json!(2) {
                return v;
            }
        }
    })
    .await
    .expect("the second client's call answered");
    let second_pid = tool_json(&answer)["pid"].as_u64().expect("a pid");
    assert_ne!(first_pid, second_pid, "each client has its own process");

    let (row, _) = gw
        .until("own", "both clients' processes ready", |s| {
            s.instances.len() == 2 && s.instances.iter().all(|i| i.state == ServerState::Ready)
        })
        .await;
    let clients: Vec<u64> = row.instances.iter().map(|i| i.client).collect();
    assert_eq!(clients, [1, 2]);
    let pids: Vec<Option<u32>> = row.instances.iter().map(|i| i.pid).collect();
    let expected = [first_pid, second_pid].map(|pid| u32::try_from(pid).ok());
    assert_eq!(pids, expected);
    assert_eq!(
        row.pid, None,
        "the configured server itself runs no process"
    );
    assert_eq!(row.state, ServerState::Ready, "{row:?}");
    assert_eq!(
        row.detail.as_deref(),
        Some("a process of its own for each client: 2 clients")
    );

    // The second client leaves: its process goes from the row.
    gw.fronts
        .send(FrontCommand::Close { front: FrontId(2) })
        .await
        .expect("hub running");
    let (row, _) = gw
        .until("own", "the second client's process gone", |s| {
            s.instances.len() == 1
        })
        .await;
    assert_eq!(row.instances[0].client, 1);
    gw.stop().await;
}

#[tokio::test]
async fn a_list_change_is_an_event_with_what_changed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tools = dir.path().join("tools.txt");
    std::fs::write(&tools, "extra_one\n").expect("write");
    let tools_arg = tools.display().to_string();
    let mut gw = Gateway::start(vec![fake("l", &["--tools-file", &tools_arg])]).await;
    gw.state("l", ServerState::Ready).await;
    std::fs::write(&tools, "extra_two\nextra_three\n").expect("write");
    let ok = gw.call("l__list_changed", json!({})).await;
    assert!(ok.get("result").is_some(), "{ok}");
    let event = tokio::time::timeout(WAIT, async {
        loop {
            match gw.events.recv().await {
                Ok(MonitorEvent::Event { server, event })
                    if server == "l" && event.kind == EventKind::ListChanged =>
                {
                    return event;
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("a list_changed event");
    assert_eq!(event.message, "tools list changed: +2 \u{2212}1");
    assert_eq!(event.generation, Some(1));
    gw.stop().await;
}

#[tokio::test]
async fn an_idle_stop_is_no_crash_and_the_next_start_no_restart() {
    let mut p = fake("i", &[]);
    p.idle_timeout = Some(Duration::from_millis(300));
    let mut gw = Gateway::start(vec![p]).await;
    gw.state("i", ServerState::Ready).await;
    let idle = gw.state("i", ServerState::Idle).await;
    assert_eq!(idle.pid, None);
    assert_eq!(idle.generation, Some(1));
    let ok = gw.call("i__echo", json!({})).await;
    assert!(ok.get("result").is_some(), "{ok}");
    let (again, _) = gw
        .until("i", "ready in generation 2", |s| {
            s.state == ServerState::Ready && s.generation == Some(2)
        })
        .await;
    assert_eq!(again.restarts, 0);
    let events = gw.events_of("i").await;
    assert!(
        events.iter().any(|(k, m)| *k == EventKind::Stopped
            && m.starts_with("stopped after")
            && m.ends_with("idle")),
        "{events:?}"
    );
    let detail = gw
        .monitor
        .server("i")
        .await
        .expect("answers")
        .expect("known");
    assert_eq!(detail.last_crash, None);
    gw.stop().await;
}
