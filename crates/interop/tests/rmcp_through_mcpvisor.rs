//! An rmcp 3.x client talking to an rmcp 3.x server (`rmcp-test-server`), DIRECT
//! and THROUGH `mcpvisor run -- rmcp-test-server`.
//!
//! rmcp enforces the legacy lifecycle strictly on both sides: the server drops
//! the connection if anything but `initialize` / `notifications/initialized`
//! comes first. So a call that succeeds on a restarted worker proves that
//! mcpvisor replayed the client's handshake to it before any client traffic.
//!
//! The mcpvisor binary comes from `MCPVISOR_BIN`, else from the target directory
//! this test was built into (`target/debug/mcpvisor`): run `cargo build
//! --workspace` first.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use rmcp::{
    ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError,
    model::{CallToolRequestParams, CallToolResult, ErrorCode, ProtocolVersion},
    service::RunningService,
    transport::TokioChildProcess,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

/// JSON-RPC error code mcpvisor answers an in-flight request with when its worker dies.
const WORKER_DIED: ErrorCode = ErrorCode(mcpvisor_jsonrpc::WORKER_LOST as i32);
/// Bound on every scenario.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on one request.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

type Client = RunningService<RoleClient, ()>;

/// The peer's stderr, line by line (through mcpvisor: its log and the
/// server's own lines); each line is also passed on to the test's stderr.
type StderrLines = mpsc::UnboundedReceiver<String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    Mcpvisor,
}

fn server_exe() -> &'static str {
    env!("CARGO_BIN_EXE_rmcp-test-server")
}

/// `MCPVISOR_BIN`, or `mcpvisor` in the target directory of this test executable
/// (`<target>/<profile>/deps/<test>` → `<target>/<profile>/mcpvisor`).
fn mcpvisor_exe() -> PathBuf {
    if let Some(path) = std::env::var_os("MCPVISOR_BIN") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "MCPVISOR_BIN={} is not a file",
            path.display()
        );
        return path;
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let candidate = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile_dir| profile_dir.join(format!("mcpvisor{}", std::env::consts::EXE_SUFFIX)));
    match candidate {
        Some(path) if path.is_file() => path,
        other => panic!(
            "the mcpvisor binary is missing (looked for {}): run `cargo build --workspace` \
             first, or set MCPVISOR_BIN",
            other.map_or_else(|| "<no target dir>".to_owned(), |p| p.display().to_string())
        ),
    }
}

fn command(route: Route) -> Command {
    match route {
        Route::Direct => Command::new(server_exe()),
        Route::Mcpvisor => {
            let mut cmd = Command::new(mcpvisor_exe());
            cmd.arg("run").arg("--").arg(server_exe());
            cmd
        }
    }
}

async fn connect(route: Route, lifecycle: ClientLifecycleMode) -> (Client, StderrLines) {
    let (transport, stderr) = TokioChildProcess::builder(command(route))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the peer");
    let (tx, lines) = mpsc::unbounded_channel();
    let stderr = stderr.expect("the peer's stderr is piped");
    tokio::spawn(async move {
        let mut stderr = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = stderr.next_line().await {
            eprintln!("{line}");
            // The test may have stopped listening; the line was shown anyway.
            let _ = tx.send(line);
        }
    });
    let client = tokio::time::timeout(CALL_TIMEOUT, ().serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("handshake timed out")
        .expect("handshake failed");
    (client, lines)
}

/// Waits (bounded) for a line of the peer's stderr that contains `needle`.
async fn wait_stderr(lines: &mut StderrLines, needle: &str) {
    let seen = tokio::time::timeout(CALL_TIMEOUT, async {
        while let Some(line) = lines.recv().await {
            if line.contains(needle) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "no stderr line with {needle:?}");
}

fn legacy() -> ClientLifecycleMode {
    ClientLifecycleMode::Initialize
}

fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

async fn call(
    client: &Client,
    name: &'static str,
    args: serde_json::Value,
) -> Result<CallToolResult, ServiceError> {
    let mut params = CallToolRequestParams::new(name);
    if let serde_json::Value::Object(map) = args {
        params = params.with_arguments(map);
    }
    tokio::time::timeout(CALL_TIMEOUT, client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("tools/call {name} timed out"))
}

fn text(result: &CallToolResult) -> String {
    assert_ne!(result.is_error, Some(true), "tool error: {result:?}");
    let value = serde_json::to_value(result).expect("serialise the result");
    match value["content"][0]["text"].as_str() {
        Some(text) => text.to_owned(),
        None => panic!("no text content: {value}"),
    }
}

async fn echo(client: &Client, what: &str) -> String {
    text(
        &call(client, "echo", serde_json::json!({ "text": what }))
            .await
            .expect("echo failed"),
    )
}

async fn pid(client: &Client) -> u32 {
    text(
        &call(client, "pid", serde_json::json!({}))
            .await
            .expect("pid failed"),
    )
    .parse()
    .expect("a pid")
}

async fn tool_names(client: &Client) -> Vec<String> {
    let tools = tokio::time::timeout(CALL_TIMEOUT, client.list_all_tools())
        .await
        .expect("tools/list timed out")
        .expect("tools/list failed");
    tools
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect()
}

/// What happened to the call that was in flight when the server died.
#[derive(Debug, PartialEq, Eq)]
enum Died {
    /// An error response with this code (mcpvisor's -32010).
    Code(i32),
    /// The client's transport closed (what DIRECT shows: the session is gone).
    TransportClosed,
    Other(String),
}

fn died(outcome: Result<CallToolResult, ServiceError>) -> Died {
    match outcome {
        Ok(result) => panic!("the call survived its server: {result:?}"),
        Err(ServiceError::McpError(error)) => Died::Code(error.code.0),
        Err(ServiceError::TransportClosed) => Died::TransportClosed,
        Err(other) => Died::Other(other.to_string()),
    }
}

fn kill9(pid: u32) {
    let status = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid} failed");
}

async fn wait_gone(pid: u32) {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    for _ in 0..250 {
        let zombie_or_gone = std::fs::read_to_string(proc_dir.join("stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        });
        if zombie_or_gone {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("process {pid} did not die");
}

/// The scenario: list, echo, crash mid-call, call again. Returns what the
/// crashed call saw and, when the session survived, the tools listed after it.
async fn crash_flow(
    route: Route,
    lifecycle: ClientLifecycleMode,
    kill_from_outside: bool,
) -> (Died, Option<Vec<String>>) {
    let (client, mut stderr) = connect(route, lifecycle).await;
    let info = client.peer_info().expect("server info after the handshake");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("interop-rmcp-server")
    );
    let before = tool_names(&client).await;
    assert_eq!(before, ["crash", "echo", "pid", "sleep"]);
    assert_eq!(echo(&client, "hello rmcp").await, "hello rmcp");
    let old_pid = pid(&client).await;

    let outcome = if kill_from_outside {
        let in_flight = {
            let peer = client.peer().clone();
            tokio::spawn(async move {
                let params = CallToolRequestParams::new("sleep").with_arguments(
                    serde_json::json!({ "millis": 30_000 })
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                );
                tokio::time::timeout(CALL_TIMEOUT, peer.call_tool(params)).await
            })
        };
        // The server says so once the call has reached it.
        wait_stderr(&mut stderr, "rmcp-test-server: sleeping").await;
        kill9(old_pid);
        in_flight
            .await
            .expect("join")
            .expect("the killed call timed out instead of failing")
    } else {
        call(&client, "crash", serde_json::json!({ "code": 9 })).await
    };
    let died = died(outcome);
    wait_gone(old_pid).await;

    let after = if route == Route::Mcpvisor {
        // The next call starts a new worker; in legacy mode it must have been given
        // the client's initialize + notifications/initialized first.
        assert_eq!(echo(&client, "after the crash").await, "after the crash");
        let new_pid = pid(&client).await;
        assert_ne!(new_pid, old_pid, "the worker was not replaced");
        Some(tool_names(&client).await)
    } else {
        None
    };
    let _ = tokio::time::timeout(CALL_TIMEOUT, client.cancel()).await;
    (died, after)
}

async fn bounded<F: std::future::Future>(scenario: F) -> F::Output {
    tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .expect("scenario timed out")
}

#[tokio::test]
async fn direct_crash_ends_the_session() {
    let (died, after) = bounded(crash_flow(Route::Direct, legacy(), false)).await;
    assert_eq!(died, Died::TransportClosed);
    assert_eq!(after, None);
}

#[tokio::test]
async fn mcpvisor_crash_tool_then_next_call_succeeds() {
    let (died, after) = bounded(crash_flow(Route::Mcpvisor, legacy(), false)).await;
    assert_eq!(died, Died::Code(WORKER_DIED.0));
    assert_eq!(
        after.as_deref(),
        Some(&["crash", "echo", "pid", "sleep"].map(String::from)[..])
    );
}

#[tokio::test]
async fn mcpvisor_sigkill_mid_call_then_next_call_succeeds() {
    let (died, after) = bounded(crash_flow(Route::Mcpvisor, legacy(), true)).await;
    assert_eq!(died, Died::Code(WORKER_DIED.0));
    assert!(after.is_some());
}

#[tokio::test]
async fn direct_discover_mode_crash_ends_the_session() {
    let (died, after) = bounded(crash_flow(Route::Direct, discover(), false)).await;
    assert_eq!(died, Died::TransportClosed);
    assert_eq!(after, None);
}

#[tokio::test]
async fn mcpvisor_discover_mode_crash_then_next_call_succeeds() {
    // 2026-07-28: no handshake to replay; every request carries its own _meta.
    let (died, after) = bounded(crash_flow(Route::Mcpvisor, discover(), false)).await;
    assert_eq!(died, Died::Code(WORKER_DIED.0));
    assert!(after.is_some());
}

/// What a client observes of a healthy session: the handshake result, the full
/// tool listing and an echo result, as JSON.
async fn observe(route: Route) -> serde_json::Value {
    let (client, _stderr) = connect(route, legacy()).await;
    let info = client.peer_info().expect("server info after the handshake");
    let tools = tokio::time::timeout(CALL_TIMEOUT, client.list_all_tools())
        .await
        .expect("tools/list timed out")
        .expect("tools/list failed");
    let echoed = call(
        &client,
        "echo",
        serde_json::json!({ "text": "héllo ✓\n\"rmcp\"" }),
    )
    .await
    .expect("echo failed");
    let _ = tokio::time::timeout(CALL_TIMEOUT, client.cancel()).await;
    serde_json::json!({ "info": *info, "tools": tools, "echo": echoed })
}

/// mcpvisor advertises `listChanged: true` for every list the server declares
/// (so clients re-read lists after a hot reload): returns whether it was already
/// so, after setting it, so the rest can be compared with DIRECT.
fn normalise_list_changed(observed: &mut serde_json::Value) -> bool {
    let mut all_advertised = true;
    if let Some(capabilities) = observed["info"]["capabilities"].as_object_mut() {
        for list in ["tools", "prompts", "resources"] {
            if let Some(declared) = capabilities
                .get_mut(list)
                .and_then(serde_json::Value::as_object_mut)
            {
                all_advertised &=
                    declared.get("listChanged") == Some(&serde_json::Value::Bool(true));
                declared.insert("listChanged".to_owned(), serde_json::Value::Bool(true));
            }
        }
    }
    all_advertised
}

#[tokio::test]
async fn mcpvisor_session_looks_like_direct() {
    let mut direct = bounded(observe(Route::Direct)).await;
    let mut through = bounded(observe(Route::Mcpvisor)).await;
    assert!(
        normalise_list_changed(&mut through),
        "mcpvisor should advertise listChanged: {through}"
    );
    normalise_list_changed(&mut direct);
    assert_eq!(through, direct);
}
