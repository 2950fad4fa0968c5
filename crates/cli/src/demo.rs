//! `mcpvisor demo`: a scripted client that shows a crash being survived.
//!
//! It runs `mcpvisor run -- mcpvisor example-server` (this same binary, twice)
//! and talks to it as an MCP client would, narrating each step.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::output;

/// Why the demo ended early.
enum Stop {
    /// A step went wrong.
    Failed(String),
    /// stdout could not be written.
    Output(output::Error),
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Failed(e)
    }
}

impl From<output::Error> for Stop {
    fn from(e: output::Error) -> Self {
        Stop::Output(e)
    }
}

struct Client {
    child: Child,
    /// `None` once closed, to end the session.
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
    /// Copies mcpvisor's stderr (its log and the server's) to ours, line by
    /// line, while the demo runs. When the demo stops early (its own stdout
    /// gone) the copy stops with it, and what mcpvisor logs while it winds
    /// down goes nowhere: a closed stdout is not worth a word.
    log: std::thread::JoinHandle<()>,
    /// Set when the client goes away: the copy stops at once.
    quiet: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Client {
    fn drop(&mut self) {
        // Before the fields: mcpvisor sees its stdin close only after this.
        self.quiet.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Client {
    fn start() -> Result<Self, String> {
        let me =
            std::env::current_exe().map_err(|e| format!("cannot find the mcpvisor binary: {e}"))?;
        let mut child = Command::new(&me)
            .args(["run", "--no-watch", "--"])
            .arg(&me)
            .arg("example-server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start mcpvisor: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let quiet = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hush = quiet.clone();
        let log = std::thread::spawn(move || {
            let mut ours = std::io::stderr();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if hush.load(std::sync::atomic::Ordering::SeqCst)
                    || writeln!(ours, "{line}").is_err()
                {
                    break;
                }
            }
        });
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self {
            child,
            stdin: Some(stdin),
            lines,
            next_id: 1,
            log,
            quiet,
        })
    }

    fn send(&mut self, msg: &Value) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("mcpvisor's stdin is closed")?;
        writeln!(stdin, "{msg}").map_err(|e| format!("mcpvisor's stdin closed: {e}"))
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .map_err(|_| format!("no answer to {method} within 20s"))?;
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| format!("mcpvisor wrote invalid JSON: {e}"))?;
            if v.get("id") == Some(&json!(id)) {
                return Ok(v);
            }
        }
    }

    fn call(&mut self, tool: &str, args: Value) -> Result<Value, String> {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }
}

fn text(resp: &Value) -> String {
    resp.pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| resp.to_string())
}

/// One line of narration on stdout.
fn say(line: &str) -> Result<(), output::Error> {
    output::print(&format!("{line}\n"))
}

fn step(n: u32, what: &str) -> Result<(), output::Error> {
    say(&format!("\n[{n}] {what}"))?;
    // Let mcpvisor's own log lines for the step land before the next one.
    std::thread::sleep(Duration::from_millis(150));
    Ok(())
}

pub fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Stop::Output(e)) => ExitCode::from(e.report()),
        Err(Stop::Failed(e)) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Stop> {
    say("mcpvisor demo: a client talks to the bundled example server through `mcpvisor run`.")?;
    say("Lines from mcpvisor's log and the server's stderr appear as they happen.")?;
    let mut c = Client::start()?;
    step(
        1,
        "initialize (the client's handshake, forwarded to generation 1)",
    )?;
    let init = c.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "demo", "version": "1"}}),
    )?;
    say(&format!(
        "    server: {}",
        init.pointer("/result/serverInfo")
            .cloned()
            .unwrap_or_default()
    ))?;
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    step(2, "call whoami and add")?;
    say(&format!(
        "    whoami -> {}",
        text(&c.call("whoami", json!({}))?)
    ))?;
    say(&format!(
        "    add(2, 3) -> {}",
        text(&c.call("add", json!({"a": 2, "b": 3}))?)
    ))?;
    step(3, "call crash: the server process exits mid-request")?;
    let crashed = c.call("crash", json!({}))?;
    let err = crashed.get("error").cloned().unwrap_or_default();
    say(&format!(
        "    error {}: {}",
        err["code"],
        err["message"].as_str().unwrap_or_default()
    ))?;
    step(
        4,
        "call whoami again: a new process, same client connection, handshake replayed",
    )?;
    say(&format!(
        "    whoami -> {}",
        text(&c.call("whoami", json!({}))?)
    ))?;
    say(&format!(
        "    add(40, 2) -> {}",
        text(&c.call("add", json!({"a": 40, "b": 2}))?)
    ))?;
    step(5, "close stdin: mcpvisor stops the server and exits 0")?;
    drop(c.stdin.take());
    let status = wait_bounded(&mut c.child, Duration::from_secs(15))?;
    // mcpvisor's last log lines land before the demo's own last words; the
    // pipe ends once mcpvisor and its server have both exited.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !c.log.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    say(&format!("    mcpvisor exited: {status}"))?;
    say(
        "\nThat is all. Put `mcpvisor run --` in front of your own server command to get the same.",
    )?;
    Ok(())
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus, String> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return Err("mcpvisor did not exit in time".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
