//! In-process workers and a client harness for session tests.
//!
//! The workers live inside the test on in-memory pipes, so tests can run on
//! paused time: tokio advances the clock whenever every task is idle, and a
//! 10-second timeout costs nothing.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the support module"
)]

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use mcpvisor_config::ExitKind;
use mcpvisor_session::WorkerExit as Exit;
use mcpvisor_session::{
    Config, Control, EventSink, Outcome, Session, SessionEvent, SpawnFailure, Spawner, WorkerIo,
    WorkerReporter,
};
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream, ReadBuf,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How an in-process worker behaves.
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    /// Reject requests before `notifications/initialized` (like the Python SDK).
    pub strict: bool,
    /// Acknowledge cancels with `notifications/mcpvisor/requestFinished`.
    pub ack_cancels: bool,
    /// Spawning fails with this message.
    pub spawn_error: Option<String>,
    /// Never answer `initialize`.
    pub hang_on_initialize: bool,
    /// The tools `tools/list` reports (two per page).
    pub tools: Vec<String>,
    /// Declare prompts too (an empty list).
    pub prompts: bool,
    /// Never read stdin (a stuck pipe).
    pub never_read: bool,
    /// Answer initialize with this protocol version (default 2025-06-18).
    pub protocol_version: Option<String>,
    /// Report this authorization link at spawn (as a stderr prompt would).
    pub auth_prompt: Option<String>,
    /// Answer initialize only after this long.
    pub initialize_delay: Option<Duration>,
}

/// What every worker received, as (generation, message) pairs.
pub type Log = Arc<Mutex<Vec<(u64, Value)>>>;

/// Spawns in-process workers.
#[derive(Clone)]
pub struct TestSpawner {
    pub behaviour: Arc<Mutex<Behaviour>>,
    pub log: Log,
    pub spawned: Arc<Mutex<Vec<u64>>>,
    /// Generations whose worker has ended, in the order they ended.
    pub ended: Arc<Mutex<Vec<u64>>>,
    /// The size of each read by which a worker took bytes from its stdin,
    /// every generation's in the order they happened.
    pub stdin_reads: Arc<Mutex<Vec<u64>>>,
}

impl TestSpawner {
    pub fn new(behaviour: Behaviour) -> Self {
        Self {
            behaviour: Arc::new(Mutex::new(behaviour)),
            log: Log::default(),
            spawned: Arc::default(),
            ended: Arc::default(),
            stdin_reads: Arc::default(),
        }
    }

    pub fn received(&self) -> Vec<(u64, Value)> {
        self.log.lock().expect("log").clone()
    }

    pub fn generations(&self) -> Vec<u64> {
        self.spawned.lock().expect("spawned").clone()
    }

    pub fn ended(&self) -> Vec<u64> {
        self.ended.lock().expect("ended").clone()
    }
}

impl Spawner for TestSpawner {
    fn spawn(
        &mut self,
        generation: u64,
        reporter: WorkerReporter,
    ) -> Result<WorkerIo, SpawnFailure> {
        let behaviour = self.behaviour.lock().expect("behaviour").clone();
        if let Some(e) = behaviour.spawn_error {
            return Err(SpawnFailure(e));
        }
        if let Some(url) = &behaviour.auth_prompt {
            reporter.auth_prompt(url.clone(), None);
        }
        self.spawned.lock().expect("spawned").push(generation);
        let (stdin_ours, stdin_theirs) = tokio::io::duplex(1 << 16);
        // The pipe's byte counts, for the session's question of how much of
        // what it wrote no one will read.
        let pipe = Arc::new(PipeCounts::default());
        let stdin_ours = Counted {
            inner: stdin_ours,
            pipe: Arc::clone(&pipe),
            reads: None,
        };
        let stdin_theirs = Counted {
            inner: stdin_theirs,
            pipe: Arc::clone(&pipe),
            reads: Some(Arc::clone(&self.stdin_reads)),
        };
        let (stdout_theirs, stdout_ours) = tokio::io::duplex(1 << 16);
        let (exit_tx, exit_rx) = oneshot::channel::<Exit>();
        let log = Arc::clone(&self.log);
        let task = tokio::spawn(worker(
            generation,
            behaviour,
            stdin_theirs,
            stdout_theirs,
            log,
            reporter,
        ));
        let abort = task.abort_handle();
        let ended = Arc::clone(&self.ended);
        tokio::spawn(async move {
            let result = task.await;
            ended.lock().expect("ended").push(generation);
            let status = match result {
                Ok(code) => ExitKind::Code(code),
                Err(_) => ExitKind::signal(15),
            };
            let _ = exit_tx.send(Exit {
                status,
                uptime: Duration::ZERO,
                requested: false,
            });
        });
        Ok(WorkerIo {
            stdin: Box::pin(stdin_ours),
            stdout: Box::pin(stdout_ours),
            pid: None,
            stop: Box::new(move || abort.abort()),
            exited: exit_rx
                .map(|r| {
                    r.unwrap_or(Exit {
                        status: ExitKind::Unknown,
                        uptime: Duration::ZERO,
                        requested: true,
                    })
                })
                .boxed(),
            stderr_tail: Default::default(),
            unread: Some(Box::new(move || pipe.unread())),
        })
    }
}

/// Bytes written into a worker's stdin and read out of it, and whether its
/// reader is gone.
#[derive(Debug, Default)]
struct PipeCounts {
    written: AtomicU64,
    read: AtomicU64,
    reader_gone: AtomicBool,
}

impl PipeCounts {
    /// What a pipe's kernel says: once no one reads it, how much was left.
    fn unread(&self) -> Option<u64> {
        self.reader_gone
            .load(Ordering::Acquire)
            .then(|| self.written.load(Ordering::Acquire) - self.read.load(Ordering::Acquire))
    }
}

/// One end of a worker's stdin, counting what passes.
struct Counted {
    inner: DuplexStream,
    pipe: Arc<PipeCounts>,
    /// `Some` on the worker's end, which is read: where it logs the size
    /// of each read that took bytes. `None` on the session's, written.
    reads: Option<Arc<Mutex<Vec<u64>>>>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.reads.is_some() {
            self.pipe.reader_gone.store(true, Ordering::Release);
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.pipe.read.fetch_add(n, Ordering::AcqRel);
        if let Some(reads) = self.reads.as_ref().filter(|_| n > 0) {
            reads.lock().expect("reads").push(n);
        }
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.pipe.written.fetch_add(*n as u64, Ordering::AcqRel);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The worker: returns its exit code.
async fn worker(
    generation: u64,
    b: Behaviour,
    stdin: Counted,
    stdout: DuplexStream,
    log: Log,
    reporter: WorkerReporter,
) -> i32 {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
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
    if b.never_read {
        // Hold the pipe open without reading it.
        let _held = (stdin, writer);
        return std::future::pending::<i32>().await;
    }
    let mut lines = BufReader::new(stdin).lines();
    let mut initialized = false;
    let mut running: std::collections::HashMap<String, JoinHandle<()>> = Default::default();
    let mut asks: std::collections::HashMap<String, oneshot::Sender<Value>> = Default::default();
    let mut next_ask = 0u64;
    let mut close_stdin = false;
    while let Ok(Some(line)) = lines.next_line().await {
        let msg: Value = serde_json::from_str(&line).expect("supervisor sent valid JSON");
        log.lock().expect("log").push((generation, msg.clone()));
        let id = msg.get("id").cloned();
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if method.is_empty() {
            // A response to one of our asks.
            if let Some(tx) = id.and_then(|i| asks.remove(&i.to_string())) {
                let _ = tx.send(msg);
            }
            continue;
        }
        let Some(id) = id else {
            match method.as_str() {
                "notifications/initialized" => initialized = true,
                "notifications/cancelled" => {
                    let target = msg["params"]["requestId"].to_string();
                    if b.ack_cancels {
                        if let Some(task) = running.remove(&target) {
                            task.abort();
                        }
                        let ack = json!({"jsonrpc":"2.0","method":"notifications/mcpvisor/requestFinished","params":{"requestId": msg["params"]["requestId"]}});
                        let _ = out_tx.send(ack.to_string());
                    }
                }
                _ => {}
            }
            continue;
        };
        let reply = |result: Value| json!({"jsonrpc":"2.0","id":id,"result":result}).to_string();
        if method == "initialize" {
            if b.hang_on_initialize {
                continue;
            }
            let mut caps = json!({"tools":{}});
            if b.prompts {
                caps["prompts"] = json!({"listChanged": false});
            }
            let version = b
                .protocol_version
                .clone()
                .unwrap_or_else(|| "2025-06-18".into());
            let answer = reply(
                json!({"protocolVersion":version,"capabilities":caps,"serverInfo":{"name":"test","version":"0"},"generation":generation}),
            );
            match b.initialize_delay {
                Some(delay) => {
                    let out = out_tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = out.send(answer);
                    });
                }
                None => {
                    let _ = out_tx.send(answer);
                }
            }
            continue;
        }
        if method == "tools/list" || method == "prompts/list" {
            let items: Vec<Value> = if method == "tools/list" {
                b.tools
                    .iter()
                    .map(|t| json!({"name": t, "inputSchema": {"type": "object"}}))
                    .collect()
            } else {
                Vec::new()
            };
            let start: usize = msg["params"]["cursor"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let page: Vec<Value> = items.iter().skip(start).take(2).cloned().collect();
            let key = if method == "tools/list" {
                "tools"
            } else {
                "prompts"
            };
            let mut result = json!({ key: page });
            if start + 2 < items.len() {
                result["nextCursor"] = json!((start + 2).to_string());
            }
            let _ = out_tx.send(reply(result));
            continue;
        }
        if b.strict && !initialized {
            let err = json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"Invalid request parameters"}});
            let _ = out_tx.send(err.to_string());
            continue;
        }
        let args = msg["params"]["arguments"].clone();
        let name = msg["params"]["name"].as_str().unwrap_or("").to_owned();
        let token = msg["params"]["_meta"]["progressToken"].clone();
        match (method.as_str(), name.as_str()) {
            ("tools/call", "crash") => {
                drop(writer);
                return 3;
            }
            // It stops reading for `ms`, then dies: a server killed while
            // the shell it runs under holds its pipes a moment longer.
            ("tools/call", "vanish") => {
                let ms = args["ms"].as_u64().unwrap_or(1000);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                drop(writer);
                return 137;
            }
            // The first generation never ran it, says so, and ends (a
            // remote server that forgot its session).
            ("tools/call", "bounce") if generation == 1 => {
                reporter.undelivered(id.as_u64().expect("a worker-side id"));
                drop(writer);
                return 3;
            }
            ("tools/call", "garbage") => {
                let _ = out_tx.send("this is not json".into());
                let _ = out_tx.send(reply(json!({"generation": generation})));
            }
            // Held open, as a server holds a subscription until it is
            // cancelled; never answered.
            ("tools/call", "hang") | ("subscriptions/listen", _) => {}
            ("tools/call", "close_stdin") => {
                let _ = out_tx.send(reply(json!({"generation": generation})));
                close_stdin = true;
                break;
            }
            ("tools/call", "sleep") => {
                let ms = args["ms"].as_u64().unwrap_or(100);
                let progress_every = args["progress_ms"].as_u64();
                let out = out_tx.clone();
                let answer = reply(json!({"slept": ms, "generation": generation}));
                let task = tokio::spawn(async move {
                    let mut left = ms;
                    let mut k = 0;
                    while left > 0 {
                        let step = progress_every.unwrap_or(left).min(left);
                        tokio::time::sleep(Duration::from_millis(step)).await;
                        left -= step;
                        if progress_every.is_some() && !token.is_null() {
                            k += 1;
                            let p = json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":token,"progress":k}});
                            let _ = out.send(p.to_string());
                        }
                    }
                    let _ = out.send(answer);
                });
                running.insert(id.to_string(), task);
            }
            ("tools/call", "ask") => {
                let ask_id = next_ask;
                next_ask += 1;
                let (tx, rx) = oneshot::channel();
                asks.insert(ask_id.to_string(), tx);
                let req = json!({"jsonrpc":"2.0","id":ask_id,"method":args["method"],"params":{}});
                let _ = out_tx.send(req.to_string());
                let out = out_tx.clone();
                let id2 = id.clone();
                tokio::spawn(async move {
                    if let Ok(answer) = rx.await {
                        let r = json!({"jsonrpc":"2.0","id":id2,"result":{"answer": answer}});
                        let _ = out.send(r.to_string());
                    }
                });
            }
            _ => {
                let _ = out_tx.send(reply(json!({"echo": args, "generation": generation})));
            }
        }
    }
    if close_stdin {
        // Keep running with stdout open, like a server that closed its stdin.
        drop(lines);
        let _held = (out_tx, writer, running);
        return std::future::pending::<i32>().await;
    }
    0
}

/// The client side of a session under test.
pub struct Client {
    pub tx: DuplexStream,
    pub rx: tokio::io::Lines<BufReader<DuplexStream>>,
    pub control: mpsc::Sender<Control>,
    pub session: JoinHandle<Outcome>,
}

impl Client {
    pub fn start(cfg: Config, spawner: TestSpawner) -> Self {
        Self::start_with(cfg, spawner, EventSink::none(), 1 << 20)
    }

    /// A session whose status events are kept, up to `capacity` unread.
    pub fn start_observed(
        cfg: Config,
        spawner: TestSpawner,
        capacity: usize,
    ) -> (Self, mpsc::Receiver<SessionEvent>) {
        let (sink, events) = EventSink::channel(capacity);
        (Self::start_with(cfg, spawner, sink, 1 << 20), events)
    }

    /// Like `start`, with a pipe to the client that holds `capacity` bytes.
    pub fn start_with_pipe(cfg: Config, spawner: TestSpawner, capacity: usize) -> Self {
        Self::start_with(cfg, spawner, EventSink::none(), capacity)
    }

    fn start_with(cfg: Config, spawner: TestSpawner, status: EventSink, capacity: usize) -> Self {
        let (client_in_ours, client_in_theirs) = tokio::io::duplex(1 << 20);
        let (client_out_theirs, client_out_ours) = tokio::io::duplex(capacity);
        let (control, control_rx) = mpsc::channel(4);
        let session = tokio::spawn(Session::run(
            cfg,
            spawner,
            client_in_theirs,
            client_out_theirs,
            control_rx,
            status,
        ));
        Self {
            tx: client_in_ours,
            rx: BufReader::new(client_out_ours).lines(),
            control,
            session,
        }
    }

    pub async fn send(&mut self, msg: Value) {
        self.send_raw(&msg.to_string()).await;
    }

    pub async fn send_raw(&mut self, line: &str) {
        self.tx
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("session stdin open");
    }

    /// The next message the session writes, within `limit` (paused time).
    pub async fn recv_within(&mut self, limit: Duration) -> Option<Value> {
        match tokio::time::timeout(limit, self.rx.next_line()).await {
            Ok(Ok(Some(line))) => {
                Some(serde_json::from_str(&line).expect("session wrote valid JSON"))
            }
            _ => None,
        }
    }

    pub async fn recv(&mut self) -> Value {
        self.recv_within(Duration::from_secs(600))
            .await
            .expect("a message from the session")
    }

    pub async fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
        self.recv().await
    }

    pub async fn initialize(&mut self) -> Value {
        let r = self
            .request(json!(0), "initialize", json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}))
            .await;
        self.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
        r
    }

    pub async fn call(&mut self, id: Value, tool: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": tool, "arguments": args}))
            .await
    }

    pub fn send_call(
        &mut self,
        id: Value,
        tool: &str,
        args: Value,
    ) -> impl Future<Output = ()> + '_ {
        self.send(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}}))
    }

    /// Closes the session's stdin but keeps reading its stdout: the next
    /// line it writes (within paused time), then how the session ended.
    pub async fn hang_up_and_read(self) -> (String, Outcome) {
        let Client {
            tx,
            mut rx,
            session,
            ..
        } = self;
        drop(tx);
        let line = rx
            .next_line()
            .await
            .expect("read")
            .expect("a line before the session ends");
        (line, session.await.expect("session task"))
    }

    /// Closes the session's stdin and returns how it ended.
    pub async fn close(self) -> Outcome {
        drop(self.tx);
        tokio::time::timeout(Duration::from_secs(600), self.session)
            .await
            .expect("session ends")
            .expect("session task")
    }
}

/// Settings for tests: the defaults, with short grace periods.
pub fn config() -> Config {
    Config {
        cancel_grace: Duration::from_secs(2),
        request_timeout: Duration::from_secs(30),
        init_timeout: Duration::from_secs(5),
        ..Config::default()
    }
}

pub fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}
