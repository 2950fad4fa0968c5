//! Runs the real `mcpvisor` binary over pipes, as a client would.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the support module"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Every wait in these tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn mcpvisor() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcpvisor"))
}

/// The fake worker binary, built by `cargo build --workspace`.
pub fn fake_worker() -> PathBuf {
    let path = mcpvisor().with_file_name("mcpvisor-fake-worker");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` first (scripts/test does)",
        path.display()
    );
    path
}

/// A running `mcpvisor run` with the client's end of its pipes.
pub struct Proc {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub lines: Receiver<String>,
    pub stderr: Arc<Mutex<String>>,
    stderr_lines: Receiver<String>,
}

impl Proc {
    /// `mcpvisor run <run_args> -- <fake worker> <worker_args>`.
    pub fn fake(run_args: &[&str], worker_args: &[&str]) -> Self {
        let mut args: Vec<String> = vec!["run".into()];
        args.extend(run_args.iter().map(|s| s.to_string()));
        args.push("--".into());
        args.push(fake_worker().display().to_string());
        args.extend(worker_args.iter().map(|s| s.to_string()));
        Self::spawn(&args)
    }

    pub fn spawn(args: &[String]) -> Self {
        Self::spawn_with_env(args, &[])
    }

    /// Like `spawn`, with these variables added to mcpvisor's environment.
    /// A `serve` keeps its state (pinned definitions, tokens) in a
    /// directory of its own unless `env` names one (`XDG_STATE_HOME`):
    /// tests reuse server names with other tools, which a shared pin store
    /// would hold back.
    pub fn spawn_with_env(args: &[String], env: &[(&str, String)]) -> Self {
        let own_state = (args.first().is_some_and(|a| a == "serve")
            && !env.iter().any(|(k, _)| *k == "XDG_STATE_HOME"))
        .then(fresh_state_dir);
        let mut child = Command::new(mcpvisor())
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .envs(own_state.iter().map(|dir| ("XDG_STATE_HOME", dir)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mcpvisor");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (etx, stderr_lines) = channel();
        let sink = Arc::clone(&stderr);
        let mut err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let mut pending = String::new();
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]);
                sink.lock().expect("stderr").push_str(&text);
                pending.push_str(&text);
                while let Some(i) = pending.find('\n') {
                    let line: String = pending.drain(..=i).collect();
                    let _ = etx.send(line.trim_end().to_owned());
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            stderr_lines,
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }

    pub fn send(&mut self, v: Value) {
        self.send_raw(&v.to_string());
    }

    pub fn recv_within(&mut self, limit: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(limit).ok()?;
        Some(
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("mcpvisor wrote invalid JSON ({e}): {line:.200}")),
        )
    }

    pub fn recv(&mut self) -> Value {
        self.recv_within(WAIT).unwrap_or_else(|| {
            panic!(
                "no message within {WAIT:?}; stderr:\n{}",
                self.stderr_text()
            )
        })
    }

    /// The next response with this id (notifications before it are skipped).
    pub fn response(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self
                .recv_within(left)
                .unwrap_or_else(|| panic!("no answer for {id}; stderr:\n{}", self.stderr_text()));
            if m.get("id") == Some(id) && m.get("method").is_none() {
                return m;
            }
        }
    }

    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        self.response(&id)
    }

    pub fn call(&mut self, id: Value, tool: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": tool, "arguments": args}))
    }

    pub fn send_call(&mut self, id: Value, tool: &str, args: Value) {
        self.send(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}));
    }

    /// Sends a `tools/call` that asks for progress (its id is its token) and
    /// returns at its first progress notification: the call is then running
    /// in the worker. For tools that report progress (`sleep`); other
    /// notifications before it are skipped, anything else is a failure.
    pub fn start_call(&mut self, id: Value, tool: &str, args: Value) {
        let meta = json!({"progressToken": id});
        self.send(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args,"_meta":meta}}));
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.recv_within(left).unwrap_or_else(|| {
                panic!(
                    "no progress from call {id}; stderr:\n{}",
                    self.stderr_text()
                )
            });
            match m["method"].as_str() {
                Some("notifications/progress") if m["params"]["progressToken"] == id => return,
                Some(_) => {}
                None => panic!("call {id} ended before it reported progress: {m}"),
            }
        }
    }

    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}),
        );
        self.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        r
    }

    /// The text of a tool result, parsed as JSON when it is JSON.
    pub fn tool_json(resp: &Value) -> Value {
        let text = resp["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("not a tool result: {resp}"));
        serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()))
    }

    pub fn whoami(&mut self, id: Value) -> Value {
        let r = self.call(id, "whoami", json!({}));
        Self::tool_json(&r)
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    /// Waits for a stderr line containing `needle`; returns it.
    pub fn wait_stderr(&mut self, needle: &str) -> String {
        self.stderr_within(needle, WAIT).unwrap_or_else(|| {
            panic!(
                "no stderr line with {needle:?}; stderr:\n{}",
                self.stderr_text()
            )
        })
    }

    /// The next stderr line containing `needle`, if one comes within `limit`.
    pub fn stderr_within(&mut self, needle: &str, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Every stdout line still to come, once the pipe is closed (the
    /// process and everything sharing its stdout are gone).
    pub fn stdout_to_end(&mut self, limit: Duration) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => out.push(line),
                Err(RecvTimeoutError::Disconnected) => return out,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("stdout still open after {limit:?}; got {out:?}")
                }
            }
        }
    }

    /// All of stderr, once the pipe is closed.
    pub fn stderr_to_end(&mut self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_lines.recv_timeout(left) {
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => return self.stderr_text(),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "stderr still open after {limit:?}; so far:\n{}",
                    self.stderr_text()
                ),
            }
        }
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "mcpvisor did not exit within {limit:?}; stderr:\n{}",
                    self.stderr_text()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The `host:port` an mcpvisor started with `--http` listens on, from
    /// the line it logs once it does.
    pub fn http_address(&mut self) -> String {
        let line = self.wait_stderr("mcpvisor: listening on http://");
        line.split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .expect("an address")
            .trim()
            .to_owned()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Proc {
    /// A test that ends with mcpvisor still running (it failed, or it does
    /// not wait for the exit) stops it the way a person would, SIGTERM, so
    /// that it stops its servers too; SIGKILL only if it does not exit.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Not `signal`: it may have just exited, and a panic here
            // (perhaps while a failed test unwinds) would abort.
            let pid = nix::unistd::Pid::from_raw(self.pid());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at its state instead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits until `pid` is gone.
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

pub fn signal(pid: i32, sig: i32) {
    let sig = nix::sys::signal::Signal::try_from(sig).expect("a signal number");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig)
        .unwrap_or_else(|e| panic!("kill -{sig} {pid}: {e}"));
}

/// Waits (bounded by [`WAIT`]) for a started `mcpvisor args` and collects
/// what is left of its output.
pub fn finish(mut child: Child, args: &[&str]) -> std::process::Output {
    let deadline = Instant::now() + WAIT;
    while child.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "mcpvisor {args:?} did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

/// `mcpvisor serve --config <config> <flags>`, with a list cache of its
/// own beside the config (never the user's).
pub fn serve(config: &Path, flags: &[&str]) -> Proc {
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let cache = config.with_file_name("cache");
    Proc::spawn_with_env(
        &args,
        &[("MCPVISOR_CACHE_DIR", cache.display().to_string())],
    )
}

/// The `Mcp-Session-Id` an HTTP answer's head names, if any.
pub fn session_id(head: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    })
}

/// `mcpvisor serve --config <config> --http 127.0.0.1:0 --pin off`, then
/// `extra`.
pub fn serve_http(config: &Path, extra: &[&str]) -> Proc {
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
        "--http".into(),
        "127.0.0.1:0".into(),
        "--pin".into(),
        "off".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::spawn(&args)
}

/// `_meta` of a 2026-07-28 request from the client `client` that declares
/// `caps`.
pub fn meta_2026(client: &str, caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "0"},
    })
}

/// A 2026-07-28 POST of `body` to `url`: method `method`, name `name` if
/// any, accepting `accept`.
pub fn post_2026(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: Option<&str>,
    accept: &str,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut req = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", accept)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .body(body.to_string());
    if let Some(name) = name {
        req = req.header("Mcp-Name", name);
    }
    req
}

/// POSTs a 2026-07-28 `tools/call` with `params` (its `Mcp-Name` is
/// `params.name`), accepting `accept`.
pub async fn post_call(
    http: &reqwest::Client,
    url: &str,
    id: &str,
    params: &Value,
    accept: &str,
) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    post_2026(
        http,
        url,
        "tools/call",
        params["name"].as_str(),
        accept,
        &body,
    )
    .send()
    .await
    .expect("the POST")
}

/// The JSON answer of a response: its body, or, for an event stream, the
/// stream's last message.
pub async fn answer(resp: reqwest::Response) -> Value {
    let kind = resp.headers()["content-type"]
        .to_str()
        .unwrap_or_default()
        .to_owned();
    let text = resp.text().await.expect("a body");
    if kind.starts_with("text/event-stream") {
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .rfind(|d| !d.is_empty())
            .unwrap_or_default()
            .to_owned();
        return serde_json::from_str(&data).unwrap_or_else(|_| panic!("JSON: {text}"));
    }
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"))
}

/// A new, empty state directory (`XDG_STATE_HOME`) for one mcpvisor.
pub fn fresh_state_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    temp_dir(&format!("state-{n}"))
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcpvisor-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
