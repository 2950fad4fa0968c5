//! The HTTP front measured: many sessions at once, and what an idle session
//! costs.
//!
//! `mcpvisor-bench http` starts `mcpvisor serve --http 127.0.0.1:0` with
//! one fake worker behind it (the `bench` server of [`crate::gateway`]) and
//! plays many MCP clients over Streamable HTTP, each its own session:
//!
//! - Scale: `sessions` sessions are opened, then all of them call
//!   `bench__echo` at once, one call in flight each, for `seconds`. Every
//!   answer must be its own request's echo; an error or a wrong answer is
//!   counted, and the run fails unless there are none. Latencies are per
//!   call, sent to answered.
//! - Idle sessions: the gateway's resident memory (VmRSS) after one
//!   session, then after `idle` more initialized sessions that do nothing;
//!   the difference divided by `idle` is what one idle session costs.
//!
//! The client is [`Client`]: a plain HTTP/1.1 client (reqwest) that reads a
//! JSON answer or an event stream that ends with the answer.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::gateway::{self, Gateway, Server};
use crate::payload::{Echo, Payloads, Scratch};
use crate::peer::{ANSWER_TIMEOUT, Binaries};
use crate::scenario::progress;
use crate::stats::Latencies;

/// The sizes of one run.
#[derive(Debug, clap::Args)]
pub struct HttpArgs {
    /// Sessions calling the one server at once.
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    /// How long they call, in seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Idle sessions opened for the memory figure.
    #[arg(long, default_value_t = 1000)]
    idle: usize,
    /// Write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    raw: Option<std::path::PathBuf>,
}

/// Everything `http` measured.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub scale: Scale,
    pub idle: Idle,
}

#[derive(Debug, Serialize)]
pub struct Scale {
    pub sessions: usize,
    pub calls: u64,
    pub errors: u64,
    pub seconds: f64,
    pub calls_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Serialize)]
pub struct Idle {
    pub sessions: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    pub per_session_kib: f64,
}

pub async fn run(bins: &Binaries, args: &HttpArgs) -> anyhow::Result<()> {
    let config = Gateway::new(bins, "http", &[Server::eager(gateway::SERVER)])?;
    progress(format_args!(
        "serve --http: {} sessions calling one server at once for {} s",
        args.sessions, args.seconds
    ));
    let scale = scale(bins, &config, args).await?;
    progress(format_args!(
        "serve --http: memory of {} idle sessions",
        args.idle
    ));
    let idle = idle(bins, &config, args.idle).await?;
    println!(
        "{} sessions at once: {} calls in {:.1} s ({:.0}/s), {} errors; p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        scale.sessions,
        scale.calls,
        scale.seconds,
        scale.calls_per_sec,
        scale.errors,
        scale.p50_us,
        scale.p99_us,
        scale.max_us
    );
    println!(
        "{} idle sessions: VmRSS {} KiB -> {} KiB, {:.1} KiB per session",
        idle.sessions, idle.rss_before_kib, idle.rss_after_kib, idle.per_session_kib
    );
    let figures = Figures { scale, idle };
    if let Some(path) = &args.raw {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    ensure!(
        figures.scale.errors == 0,
        "{} calls of {} sessions at once failed",
        figures.scale.errors,
        figures.scale.sessions
    );
    Ok(())
}

async fn scale(bins: &Binaries, config: &Gateway, args: &HttpArgs) -> anyhow::Result<Scale> {
    // The defaults must allow the default run: the limit is raised only
    // past `--max-sessions`'s default of 256.
    let max = args.sessions.to_string();
    let extra: &[&str] = if args.sessions > 256 {
        &["--max-sessions", &max]
    } else {
        &[]
    };
    let front = Front::serve(bins, config, extra).await?;
    let client = Client::new(args.sessions)?;
    let mut sessions = Vec::with_capacity(args.sessions);
    for _ in 0..args.sessions {
        sessions.push(client.open(&front.url).await?);
    }
    let payloads = Payloads::with(64, Echo::Tool(vec![gateway::TOOL.to_owned()]));
    let length = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let until = start + length;
    let runs = sessions.iter().enumerate().map(|(n, session)| {
        let payloads = &payloads;
        async move {
            let mut latencies = Latencies::default();
            let mut errors = 0u64;
            let mut first_error = None;
            let mut scratch = Scratch::default();
            // Ids differ across sessions only to make a misrouted answer
            // show; each session's own ids are its own anyway.
            let mut id = (n as u64) << 32;
            while Instant::now() < until {
                id += 1;
                let body = payloads.request(id, &mut scratch).concat();
                let sent = Instant::now();
                match session.request(body).await.and_then(|answer| {
                    check_echo(payloads, &answer).with_context(|| snippet_of(&answer))
                }) {
                    Ok(()) => latencies.push(sent.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (latencies, errors, first_error)
        }
    });
    let outcomes = join_all(runs.collect()).await;
    let elapsed = start.elapsed();
    let mut all = Latencies::default();
    let mut errors = 0;
    for (latencies, e, first) in outcomes {
        all.extend(&latencies);
        errors += e;
        if let Some(first) = first {
            progress(format_args!("a failed call: {first:#}"));
        }
    }
    for session in &sessions {
        session.close().await;
    }
    front.stop().await;
    let calls = all.len() as u64;
    Ok(Scale {
        sessions: args.sessions,
        calls,
        errors,
        seconds: elapsed.as_secs_f64(),
        calls_per_sec: calls as f64 / elapsed.as_secs_f64(),
        p50_us: all.quantile_us(0.5),
        p99_us: all.quantile_us(0.99),
        max_us: all.quantile_us(1.0),
    })
}

async fn idle(bins: &Binaries, config: &Gateway, n: usize) -> anyhow::Result<Idle> {
    let max = (n + 10).to_string();
    let front = Front::serve(bins, config, &["--max-sessions", &max]).await?;
    let client = Client::new(4)?;
    // One session first, with a call, so that what every session shares
    // (the server started, its lists read, the runtime's buffers) is in
    // the figure before.
    let first = client.open(&front.url).await?;
    let payloads = Payloads::with(64, Echo::Tool(vec![gateway::TOOL.to_owned()]));
    let answer = first
        .request(payloads.request(1, &mut Scratch::default()).concat())
        .await?;
    check_echo(&payloads, &answer)?;
    settle().await;
    let rss_before_kib = crate::machine::rss_kib(front.pid)?;
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions.push(client.open(&front.url).await?);
    }
    settle().await;
    let rss_after_kib = crate::machine::rss_kib(front.pid)?;
    front.stop().await;
    Ok(Idle {
        sessions: n,
        rss_before_kib,
        rss_after_kib,
        per_session_kib: rss_after_kib.saturating_sub(rss_before_kib) as f64 / n as f64,
    })
}

/// A moment for the server's tasks to finish what the last request began.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Whether `answer` is the `echo` tool's answer to its own request: the
/// arguments come back as text.
pub fn check_echo(payloads: &Payloads, answer: &Value) -> anyhow::Result<()> {
    let id = answer["id"]
        .as_u64()
        .with_context(|| format!("an answer without a numeric id: {answer}"))?;
    if let Some(error) = answer.get("error") {
        bail!("request {id} was answered with an error: {error}");
    }
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .with_context(|| format!("request {id} was answered without text: {answer}"))?;
    let args: Value = serde_json::from_str(text)
        .with_context(|| format!("request {id}: the echoed text is not JSON"))?;
    let s = args["s"].as_str().unwrap_or_default();
    ensure!(
        s.len() == payloads.size() && s.starts_with(&format!("{id:016x}")),
        "request {id} was answered with another payload: {text:.60}"
    );
    Ok(())
}

/// The first 200 characters of `v` as JSON, for error messages.
pub fn snippet_of(v: &Value) -> String {
    let text = v.to_string();
    format!("answer: {:.200}", text)
}

/// Polls every future on this task until all are done (no spawn, so they
/// may borrow).
pub async fn join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

// === the server under test ===

/// How long a front has to end after SIGTERM: mcpvisor's drain of requests
/// in flight (`--http-drain`, 10 s) and its servers' stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A running HTTP server (mcpvisor or a peer) and its URL.
#[derive(Debug)]
pub struct Front {
    child: Child,
    pub pid: u32,
    pub url: String,
}

impl Front {
    /// `mcpvisor serve -q --no-watch --config FILE --http 127.0.0.1:0`.
    pub async fn serve(bins: &Binaries, config: &Gateway, extra: &[&str]) -> anyhow::Result<Self> {
        let mut command = Command::new(&bins.mcpvisor);
        command
            .args(gateway::SERVE_ARGS)
            .arg(config.config())
            .args(["--http", "127.0.0.1:0"])
            .args(extra);
        config.own_env(&mut command);
        Self::start_mcpvisor(command).await
    }

    /// `mcpvisor run -q --no-watch --http 127.0.0.1:0 -- WORKER`.
    pub async fn run(bins: &Binaries) -> anyhow::Result<Self> {
        let mut command = Command::new(&bins.mcpvisor);
        command
            .args(["run", "-q", "--no-watch", "--http", "127.0.0.1:0", "--"])
            .arg(&bins.worker);
        Self::start_mcpvisor(command).await
    }

    /// Starts mcpvisor and reads the URL from its "listening on" line.
    async fn start_mcpvisor(command: Command) -> anyhow::Result<Self> {
        let (child, pid, url) = start_reading(
            command,
            |line| {
                line.strip_prefix("mcpvisor: listening on ")
                    .map(|u| u.trim().to_owned())
            },
            true,
        )
        .await?;
        Ok(Self { child, pid, url })
    }

    /// Starts a peer that serves `url` on `port`, ready once that port
    /// takes connections (within 60 s).
    pub async fn peer(command: Command, url: String, port: u16) -> anyhow::Result<Self> {
        let (mut child, pid, ()) = start_reading(command, |_| None::<()>, false).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(Self { child, pid, url });
            }
            if let Ok(Some(status)) = child.try_wait() {
                bail!("{url}: the server exited before it listened: {status}");
            }
            ensure!(
                Instant::now() < deadline,
                "{url}: not listening within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then SIGKILL if it has not ended within `STOP_TIMEOUT`.
    /// Its exit status when it ended by itself; `None` when it had to be
    /// killed (or could not be waited for).
    pub async fn stop(mut self) -> Option<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            // SIGTERM first: mcpvisor drains and stops its servers.
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        }
    }
}

/// Spawns `command` and, with `wait`, waits (bounded) until `found` picks
/// something from a line of its stdout or stderr; its output is drained.
async fn start_reading<T: Default + Send + 'static>(
    mut command: Command,
    found: impl Fn(&str) -> Option<T>,
    wait: bool,
) -> anyhow::Result<(Child, u32, T)> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {:?}", command.as_std().get_program()))?;
    let pid = child.id().context("the server exited at once")?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for out in [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    if !wait {
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        return Ok((child, pid, T::default()));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let line = tokio::time::timeout_at(deadline, rx.recv()).await;
        match line {
            Ok(Some(line)) => {
                if let Some(v) = found(&line) {
                    // Keep draining, so the server never blocks on a full pipe.
                    tokio::spawn(async move { while rx.recv().await.is_some() {} });
                    return Ok((child, pid, v));
                }
                seen.push(line);
            }
            Ok(None) => bail!(
                "the server ended before it was listening: {}",
                seen.join("\n")
            ),
            Err(_) => bail!(
                "the server was not listening within 60 s: {}",
                seen.join("\n")
            ),
        }
    }
}

// === the client ===

/// One HTTP client (a connection pool) for many sessions.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
}

/// One MCP session over Streamable HTTP, or a client of the 2026-07-28
/// revision, which has none.
#[derive(Debug)]
pub struct Session {
    http: reqwest::Client,
    url: String,
    id: Option<String>,
    /// Each request a 2026-07-28 one: no session, its envelope in
    /// `params._meta`, its method and name in headers.
    stateless: bool,
}

const PROTOCOL: &str = "2025-06-18";
/// The revision of requests without a session.
const STATELESS: &str = "2026-07-28";

impl Client {
    pub fn new(connections: usize) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(connections)
            .timeout(ANSWER_TIMEOUT)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Self { http })
    }

    /// `initialize` (its answer must carry a protocol version), then
    /// `notifications/initialized`.
    pub async fn open(&self, url: &str) -> anyhow::Result<Session> {
        let mut session = Session {
            http: self.http.clone(),
            url: url.to_owned(),
            id: None,
            stateless: false,
        };
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL}","capabilities":{{}},"clientInfo":{{"name":"mcpvisor-bench","version":"0"}}}}}}"#
        );
        let resp = session.post(init.into_bytes()).await?;
        session.id = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = read_answer(resp).await?;
        ensure!(
            answer["result"]["protocolVersion"].is_string(),
            "initialize was answered with {answer}"
        );
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec();
        let resp = session.post(note).await?;
        ensure!(
            resp.status().is_success(),
            "notifications/initialized got {}",
            resp.status()
        );
        Ok(session)
    }
}

impl Client {
    /// A client of the 2026-07-28 revision: nothing to open, each request
    /// stands alone.
    pub fn stateless(&self, url: &str) -> Session {
        Session {
            http: self.http.clone(),
            url: url.to_owned(),
            id: None,
            stateless: true,
        }
    }
}

impl Session {
    /// The session's `Mcp-Session-Id`.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    async fn post(&self, body: Vec<u8>) -> anyhow::Result<reqwest::Response> {
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body);
        if let Some(id) = &self.id {
            req = req
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", PROTOCOL);
        }
        req.send().await.context("the POST failed")
    }

    /// POSTs one request and reads its answer.
    pub async fn request(&self, body: Vec<u8>) -> anyhow::Result<Value> {
        if self.stateless {
            return self.request_stateless(&body).await;
        }
        let resp = self.post(body).await?;
        read_answer(resp).await
    }

    /// `body` as a 2026-07-28 request: the envelope goes into
    /// `params._meta`, and the headers name the revision, the method and
    /// (for a call) the tool.
    async fn request_stateless(&self, body: &[u8]) -> anyhow::Result<Value> {
        let mut message: Value =
            serde_json::from_slice(body).context("a request that is not JSON")?;
        let method = message["method"]
            .as_str()
            .context("a request without a method")?
            .to_owned();
        let name = message["params"]["name"].as_str().map(str::to_owned);
        message["params"]["_meta"] = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let mut req = self
            .http
            .post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", STATELESS)
            .header("mcp-method", method);
        if let Some(name) = name {
            req = req.header("mcp-name", name);
        }
        let resp = req
            .body(serde_json::to_vec(&message)?)
            .send()
            .await
            .context("the POST failed")?;
        read_answer(resp).await
    }

    /// DELETE, best effort.
    pub async fn close(&self) {
        if let Some(id) = &self.id {
            let _ = self
                .http
                .delete(&self.url)
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", PROTOCOL)
                .send()
                .await;
        }
    }
}

/// The answer in a JSON body, or the first event with an `id` and a result
/// or error in an event stream.
async fn read_answer(resp: reqwest::Response) -> anyhow::Result<Value> {
    let status = resp.status();
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        bail!("HTTP {status}: {text:.200}");
    }
    if !sse {
        let bytes = resp.bytes().await.context("reading the answer")?;
        return serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "an answer that is not JSON: {}",
                String::from_utf8_lossy(&bytes)
            )
        });
    }
    let mut resp = resp;
    let mut buf = Vec::new();
    let mut answer: Option<Value> = None;
    loop {
        // Whole events so far: look for the answer among them.
        while let Some(end) = find_event_end(&buf) {
            let event: Vec<u8> = buf.drain(..end).collect();
            let text = String::from_utf8_lossy(&event);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            if data.is_empty() {
                continue;
            }
            let msg: Value = serde_json::from_str(&data)
                .with_context(|| format!("an event that is not JSON: {data:.200}"))?;
            if msg.get("id").is_some()
                && (msg.get("result").is_some() || msg.get("error").is_some())
            {
                if let Some(first) = &answer {
                    bail!(
                        "one request was answered twice on its stream: {} then {}",
                        snippet_of(first),
                        snippet_of(&msg)
                    );
                }
                answer = Some(msg);
            }
        }
        // Read on to the stream's end (the server ends it after the
        // answer): a second answer would be a fault.
        match resp.chunk().await.context("reading the event stream")? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None => return answer.context("the event stream ended without the answer"),
        }
    }
}

/// Where the first complete event ends (past its blank line).
fn find_event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The worker's path as text, for peers' command lines.
pub fn worker_path(bins: &Binaries) -> anyhow::Result<&str> {
    bins.worker
        .to_str()
        .with_context(|| format!("{} is not UTF-8", Path::new(&bins.worker).display()))
}
