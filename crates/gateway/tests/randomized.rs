//! Seeded random traffic through the gateway to several real fake workers:
//! calls to every server's tools, progress, cancels, crashes, kills,
//! freezes, reused ids, reloads and restarts, with the routing invariants
//! checked over everything the front client saw.
//!
//! [`Hub::run`] runs in this process on a pipe; each server is a real
//! `mcpvisor-fake-worker` under its own session. The driver writes down
//! where in the received stream each thing it did happened, so the checks
//! can speak of order: an answer after its request, progress before its
//! answer, nothing for a cancelled request once the gateway has taken the
//! cancel. `MCPVISOR_RANDOM_SEEDS=N` runs more seeds.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcpvisor_config::ServerDef;
use mcpvisor_gateway::{Control, Hub, Outcome, ServerPlan, Settings};
use mcpvisor_jsonrpc::{INVALID_PARAMS, NOT_STARTED, PARSE_ERROR, REQUEST_TIMEOUT, WORKER_LOST};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Operations per seed.
const OPS: usize = 200;
/// Seeds run when `MCPVISOR_RANDOM_SEEDS` is not set.
const DEFAULT_SEEDS: u64 = 6;
/// The bound on every wait for the gateway.
const WAIT: Duration = Duration::from_secs(20);
/// The servers, in config order; a seed uses the first three or all four.
const NAMES: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
/// What the gateway says when it refuses a reused id.
const REUSED_ID: &str = "a request with this id is already in flight";

/// xorshift64*: small, seedable, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len() as u64) as usize])
    }
}

/// The fake worker, built next to this test (`cargo build --workspace`
/// builds it; `cargo test -p mcpvisor-gateway` alone does not).
fn fake_worker() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // <target>/<profile>/deps/<this test>
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

/// One server: the fake worker under a session with short bounds, so that
/// hangs time out and crashed workers come back within a seed.
fn plan(name: &str, worker: &Path, ack_cancels: bool, crash_loop_exits: u32) -> ServerPlan {
    let args = if ack_cancels {
        vec!["--ack-cancels".to_owned()]
    } else {
        Vec::new()
    };
    let session = mcpvisor_session::Config {
        request_timeout: Duration::from_millis(1500),
        cancel_grace: Duration::from_millis(300),
        restart_backoff_max: Duration::from_millis(100),
        crash_loop_exits,
        failed_cooldown: Duration::from_millis(500),
        reload_drain_timeout: Duration::from_millis(300),
        // A frozen worker ignores all but SIGKILL: its session ends a
        // while after the gateway has replaced it, not much later.
        stop: StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_secs(1),
        },
        ..mcpvisor_session::Config::default()
    };
    ServerPlan {
        name: name.to_owned(),
        def: ServerDef {
            name: name.to_owned(),
            command: worker.display().to_string(),
            args,
            ..ServerDef::default()
        },
        session,
        stderr: Passthrough::Discard,
        lazy: false,
        idle_timeout: None,
        health_interval: Some(Duration::from_millis(200)),
        health_misses: 3,
        cached: None,
        cache_key: None,
    }
}

/// The fake worker tool a call runs, with what its answer must say.
#[derive(Debug, Clone, PartialEq)]
enum Tool {
    /// Answers with its arguments, which name the server and carry a tag
    /// used by no other call.
    Echo(Value),
    /// Answers `slept <ms> ms`, with progress on the way if asked.
    Sleep { ms: u64, every: u64 },
    /// Never answers: cancelled, or timed out by the session.
    Hang,
    /// The worker exits without answering.
    Crash,
    /// Answers with the worker's pid.
    Whoami,
}

impl Tool {
    fn name(&self) -> &'static str {
        match self {
            Tool::Echo(_) => "echo",
            Tool::Sleep { .. } => "sleep",
            Tool::Hang => "hang",
            Tool::Crash => "crash",
            Tool::Whoami => "whoami",
        }
    }

    fn arguments(&self) -> Value {
        match self {
            Tool::Echo(args) => args.clone(),
            Tool::Sleep { ms, every } => json!({"ms": ms, "progress_ms": every}),
            Tool::Hang | Tool::Crash | Tool::Whoami => json!({}),
        }
    }
}

/// Something done to a server that may cost its calls their answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upset {
    /// A `crash` call sent.
    Crash,
    /// Its worker killed with SIGKILL.
    Kill,
    /// Its worker stopped with SIGSTOP: health checks go unanswered, and
    /// the gateway may restart it.
    Freeze,
    /// A reload asked of its session.
    Reload,
    /// Its definition changed: the gateway restarts it.
    Reconfigure,
}

impl Upset {
    const ALL: [Upset; 5] = [
        Upset::Crash,
        Upset::Kill,
        Upset::Freeze,
        Upset::Reload,
        Upset::Reconfigure,
    ];
}

/// An [`Upset`] of one server, and when.
#[derive(Debug, Clone, Copy)]
struct Disruption {
    backend: usize,
    /// How much of the stream had arrived when it was done.
    at: usize,
    upset: Upset,
}

/// One `tools/call` the driver sent.
#[derive(Debug)]
struct Call {
    id: Value,
    backend: usize,
    tool: Tool,
    token: Option<Value>,
    /// How much of the stream had arrived when it was sent.
    sent: usize,
    /// The earlier call, still in flight, whose id it reuses.
    reuses: Option<usize>,
    /// A later call reuses its id.
    reused: bool,
    /// The id of the ping sent right after its cancel.
    barrier: Option<Value>,
}

/// The front client: sends, and keeps everything received in order.
struct Driver {
    seed: u64,
    rng: Rng,
    names: Vec<String>,
    tx: Option<DuplexStream>,
    lines: mpsc::Receiver<String>,
    /// Everything the gateway sent the front, in order.
    log: Vec<Value>,
    /// Responses so far, by id as JSON text.
    answered: HashMap<String, usize>,
    /// Every id sent so far, as JSON text.
    used: HashSet<String>,
    /// The calls under each id, by id as JSON text.
    by_id: HashMap<String, Vec<usize>>,
    calls: Vec<Call>,
    /// The gateway's own answers expected: `ping`s, `initialize`, the list.
    plain: Vec<Value>,
    /// What may cost a server's calls their answers, where in the stream.
    disruptions: Vec<Disruption>,
    /// Servers may crash-loop into their failed state, their tools
    /// withdrawn meanwhile.
    crash_loops: bool,
    /// Lines sent that are not JSON.
    garbage: usize,
    /// A server whose worker is stopped: (backend, pid, when it is let go
    /// on). Nothing is sent to it meanwhile.
    frozen: Option<(usize, i32, Instant)>,
    /// The configuration the gateway runs, and its control channel.
    plans: Vec<ServerPlan>,
    control: mpsc::Sender<Control>,
}

impl Driver {
    fn take(&mut self, line: String) {
        let seed = self.seed;
        let m: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON on the front: {line:?}: {e}"));
        if let (Some(id), None) = (m.get("id"), m.get("method")) {
            let id = id.to_string();
            // Checked at once: a stray id would otherwise show only as a
            // call that is never answered.
            let parse_error = id == "null" && m["error"]["code"] == PARSE_ERROR;
            assert!(
                parse_error || self.used.contains(&id),
                "seed {seed}: an answer to {id}, an id the client never used: {m}"
            );
            *self.answered.entry(id.clone()).or_default() += 1;
            // An id used once is checked at once too: an answer routed to
            // the wrong call would otherwise show only as one never
            // answered. A reused id's two answers are matched at the end.
            if let Some(&[k]) = self.by_id.get(&id).map(Vec::as_slice) {
                let pos = self.log.len();
                self.log.push(m);
                if let Err(e) = self.fits(k, pos) {
                    panic!(
                        "seed {seed}: call {k} ({:?}): {e}: {}",
                        self.calls[k], self.log[pos]
                    );
                }
                return;
            }
        }
        self.log.push(m);
    }

    /// Takes in whatever has arrived, so that positions are current.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.take(line);
        }
    }

    fn answers(&self, id: &Value) -> usize {
        self.answered.get(&id.to_string()).copied().unwrap_or(0)
    }

    /// Receives until `done` holds, at most [`WAIT`].
    async fn wait_until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        self.drain();
        while !done(self) {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => self.take(line),
                Ok(None) => panic!("seed {}: the front output ended before {what}", self.seed),
                Err(_) => panic!(
                    "seed {}: no {what} within {WAIT:?}; calls unanswered: {:#?}; the last lines: {:#?}",
                    self.seed,
                    self.unanswered(),
                    &self.log[self.log.len().saturating_sub(20)..]
                ),
            }
        }
    }

    async fn write(&mut self, line: String) {
        self.drain();
        let tx = self.tx.as_mut().expect("the front input is open");
        tokio::time::timeout(WAIT, tx.write_all(format!("{line}\n").as_bytes()))
            .await
            .expect("the gateway reads its input")
            .expect("the gateway's input is open");
    }

    async fn send(&mut self, m: Value) {
        self.write(m.to_string()).await;
    }

    /// A request the gateway answers itself; returns its id.
    async fn plain(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.plain.push(id.clone());
        self.used.insert(id.to_string());
        self.send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
        id
    }

    /// Calls `tool` on `backend`, under a fresh id or the id of call
    /// `reuse`; returns the call's index.
    async fn call(
        &mut self,
        backend: usize,
        tool: Tool,
        token: Option<Value>,
        reuse: Option<usize>,
    ) -> usize {
        let k = self.calls.len();
        let id = match reuse {
            Some(r) => self.calls[r].id.clone(),
            None if self.rng.below(3) == 0 => json!(format!("s{}-{k}", self.seed)),
            None => json!(k),
        };
        let mut params = json!({
            "name": format!("{}__{}", self.names[backend], tool.name()),
            "arguments": tool.arguments(),
        });
        if let Some(token) = &token {
            params["_meta"] = json!({ "progressToken": token });
        }
        let line = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params});
        self.drain();
        if let Some(r) = reuse {
            self.calls[r].reused = true;
        }
        self.used.insert(id.to_string());
        self.by_id.entry(id.to_string()).or_default().push(k);
        self.calls.push(Call {
            id,
            backend,
            tool,
            token,
            sent: self.log.len(),
            reuses: reuse,
            reused: false,
            barrier: None,
        });
        self.send(line).await;
        k
    }

    /// Calls still unanswered as far as the driver has seen, that no
    /// cancel or reused id has touched.
    fn open(&self, tools: &[&str]) -> Vec<usize> {
        (0..self.calls.len())
            .filter(|&k| {
                let c = &self.calls[k];
                tools.contains(&c.tool.name())
                    && c.barrier.is_none()
                    && c.reuses.is_none()
                    && !c.reused
                    && self.answers(&c.id) == 0
            })
            .collect()
    }

    fn token(&mut self, k: usize) -> Option<Value> {
        match self.rng.below(4) {
            0 => None,
            1 => Some(json!(format!("tok-{}-{k}", self.seed))),
            // Far from the gateway's own ids, so a token it forgot to
            // rewrite back cannot pass for one of the client's.
            _ => Some(json!(5_000_000 + k as u64)),
        }
    }

    async fn random_op(&mut self, n: usize) {
        if self
            .frozen
            .is_some_and(|(_, _, until)| Instant::now() >= until)
        {
            self.thaw();
        }
        let frozen = self.frozen.map(|(b, _, _)| b);
        let awake: Vec<usize> = (0..self.names.len())
            .filter(|b| Some(*b) != frozen)
            .collect();
        let backend = self.rng.pick(&awake).expect("a server awake");
        match self.rng.below(100) {
            0..30 => {
                let tag = format!("{}-{n}-{:x}", self.seed, self.rng.next());
                let args = json!({"server": self.names[backend], "tag": tag});
                self.call(backend, Tool::Echo(args), None, None).await;
            }
            30..48 => {
                let ms = 20 + self.rng.below(280);
                let every = 10 + self.rng.below(40);
                let token = self.token(self.calls.len());
                self.call(backend, Tool::Sleep { ms, every }, token, None)
                    .await;
            }
            48..53 => {
                let token = self.token(self.calls.len());
                self.call(backend, Tool::Hang, token, None).await;
            }
            53..63 => self.cancel().await,
            63..67 => {
                self.disrupt(backend, Upset::Crash);
                self.call(backend, Tool::Crash, None, None).await;
            }
            67..70 => self.kill(backend).await,
            70 => self.freeze(backend).await,
            71..75 => self.reuse_id(backend, n).await,
            75..78 => {
                self.garbage += 1;
                self.write("{not json".to_owned()).await;
            }
            78..83 => {
                self.call(backend, Tool::Whoami, None, None).await;
            }
            83..85 => self.reconfigure(backend).await,
            85..87 => {
                self.disrupt(backend, Upset::Reload);
                let name = self.names[backend].clone();
                self.control(Control::Reload(name)).await;
            }
            _ => {
                // Think time: lets calls overlap and finish in between.
                let pause = Duration::from_millis(self.rng.below(30));
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Cancels a call in flight, then pings: once the ping is answered, the
    /// gateway has taken the cancel, and nothing more may come for the call.
    async fn cancel(&mut self) {
        let open = self.open(&["echo", "sleep", "hang", "whoami"]);
        if let Some(k) = self.rng.pick(&open) {
            self.cancel_call(k).await;
        }
    }

    async fn cancel_call(&mut self, k: usize) {
        let id = self.calls[k].id.clone();
        self.send(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id,"reason":"random"}}))
            .await;
        let barrier = self.plain(json!(format!("b-{k}")), "ping", json!({})).await;
        self.calls[k].barrier = Some(barrier);
    }

    /// A second call under the id of one still in flight: refused, or, if
    /// the first was answered meanwhile, routed like any other.
    async fn reuse_id(&mut self, backend: usize, n: usize) {
        let open = self.open(&["sleep", "hang"]);
        let Some(k) = self.rng.pick(&open) else {
            return;
        };
        let tag = format!("{}-{n}-reused-{:x}", self.seed, self.rng.next());
        let args = json!({"server": self.names[backend], "tag": tag});
        self.call(backend, Tool::Echo(args), None, Some(k)).await;
    }

    /// The pid of `backend`'s worker, asked with `whoami`, if it answers.
    async fn worker_pid(&mut self, backend: usize) -> Option<i32> {
        let k = self.call(backend, Tool::Whoami, None, None).await;
        let id = self.calls[k].id.clone();
        self.wait_until("whoami's answer", |d| d.answers(&id) > 0)
            .await;
        let answer = self
            .log
            .iter()
            .rev()
            .find(|m| m["id"] == id && m.get("method").is_none())
            .expect("the answer just seen");
        whoami_pid(answer)
    }

    /// Kills `backend`'s worker with SIGKILL.
    async fn kill(&mut self, backend: usize) {
        if let Some(pid) = self.worker_pid(backend).await {
            self.disrupt(backend, Upset::Kill);
            signal_worker(pid, Signal::SIGKILL);
        }
    }

    /// Cancels what a server has in flight, stops its worker with SIGSTOP
    /// and leaves the server alone for a while: its health checks go
    /// unanswered, and the gateway may restart it before the worker is let
    /// go on again.
    async fn freeze(&mut self, backend: usize) {
        // An id used twice has an answer to spare until it has two.
        let held: Vec<usize> = (0..self.calls.len())
            .filter(|&k| {
                let c = &self.calls[k];
                let id = c.id.to_string();
                c.backend == backend
                    && c.barrier.is_none()
                    && self.answers(&c.id) < self.by_id[&id].len()
            })
            .collect();
        // A call whose id another call shares cannot be cancelled alone.
        let shared = held
            .iter()
            .any(|&k| self.calls[k].reused || self.calls[k].reuses.is_some());
        if self.frozen.is_some() || shared {
            return;
        }
        for k in held {
            self.cancel_call(k).await;
        }
        if let Some(pid) = self.worker_pid(backend).await {
            self.disrupt(backend, Upset::Freeze);
            signal_worker(pid, Signal::SIGSTOP);
            let until = Instant::now() + Duration::from_millis(800 + self.rng.below(800));
            self.frozen = Some((backend, pid, until));
        }
    }

    /// Lets a frozen worker go on, if the gateway has not replaced it.
    fn thaw(&mut self) {
        if let Some((_, pid, _)) = self.frozen.take() {
            signal_worker(pid, Signal::SIGCONT);
        }
    }

    /// Notes that what comes next may cost `backend`'s calls their answers.
    fn disrupt(&mut self, backend: usize, upset: Upset) {
        self.drain();
        self.disruptions.push(Disruption {
            backend,
            at: self.log.len(),
            upset,
        });
    }

    /// Whether the answer at `pos` can be call `k`'s.
    fn fits(&self, k: usize, pos: usize) -> Result<(), String> {
        let c = &self.calls[k];
        let m = &self.log[pos];
        let name = &self.names[c.backend];
        if pos < c.sent {
            return Err("answered before it was sent".into());
        }
        // Whether one of these was done to its server before the answer.
        let upset = |kinds: &[Upset]| {
            self.disruptions
                .iter()
                .any(|d| d.backend == c.backend && d.at <= pos && kinds.contains(&d.upset))
        };
        if let Some(error) = m.get("error") {
            if let Some(server) = error["data"]["server"].as_str() {
                if server != name {
                    return Err(format!("an error about `{server}`, not `{name}`"));
                }
            }
            let message = error["message"].as_str().unwrap_or_default();
            let code = error["code"].as_i64().unwrap_or_default();
            // The gateway's own reasons for stopping a server.
            match error["data"]["reason"].as_str().unwrap_or_default() {
                "its session ended" => {
                    return Err("its session ended, and none ends by itself here".into());
                }
                "its configuration changed" if !upset(&[Upset::Reconfigure]) => {
                    return Err("stopped for a configuration change never made".into());
                }
                r if r.contains("health checks") && !upset(&[Upset::Freeze]) => {
                    return Err("health checks unanswered by a server that answers".into());
                }
                _ => {}
            }
            return match code {
                NOT_STARTED if message.contains(REUSED_ID) => match c.reuses {
                    Some(_) => Ok(()),
                    None => Err("refused as a reused id, but its id was new".into()),
                },
                WORKER_LOST | NOT_STARTED if upset(&Upset::ALL) => Ok(()),
                INVALID_PARAMS
                    if upset(&Upset::ALL)
                        && self.crash_loops
                        && message.starts_with("Unknown tool") =>
                {
                    Ok(())
                }
                REQUEST_TIMEOUT if c.tool == Tool::Hang => Ok(()),
                _ => Err(format!("an error it has no reason for ({code})")),
            };
        }
        let text = text_of(m).ok_or("a result without text")?;
        match &c.tool {
            Tool::Echo(args) => {
                let echoed: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
                if echoed == *args {
                    Ok(())
                } else {
                    Err(format!("echoed {echoed}, not its own {args}"))
                }
            }
            Tool::Sleep { ms, .. } if text == format!("slept {ms} ms") => Ok(()),
            Tool::Whoami if whoami_pid(m).is_some() => Ok(()),
            _ => Err("not the answer of its tool".into()),
        }
    }

    async fn control(&mut self, control: Control) {
        tokio::time::timeout(WAIT, self.control.send(control))
            .await
            .expect("the gateway takes controls")
            .expect("the gateway runs");
    }

    /// Changes one server's definition (its `--page-size`), so the gateway
    /// restarts it and fails what it held itself.
    async fn reconfigure(&mut self, backend: usize) {
        let page_size = (1 + self.rng.below(4)).to_string();
        let args = &mut self.plans[backend].def.args;
        if let Some(at) = args.iter().position(|a| a == "--page-size") {
            args.drain(at..at + 2);
        }
        args.extend(["--page-size".to_owned(), page_size]);
        self.disrupt(backend, Upset::Reconfigure);
        self.control(Control::Reconfigure(self.plans.clone())).await;
    }

    /// Calls not cancelled whose ids have fewer answers than calls.
    fn unanswered(&self) -> Vec<&Call> {
        self.by_id
            .values()
            .filter(|calls| {
                let expected = calls
                    .iter()
                    .filter(|k| self.calls[**k].barrier.is_none())
                    .count();
                self.answers(&self.calls[calls[0]].id) < expected
            })
            .flatten()
            .map(|k| &self.calls[*k])
            .collect()
    }

    /// Every call not cancelled is answered, and every ping.
    fn settled(&self) -> bool {
        self.unanswered().is_empty() && self.plain.iter().all(|id| self.answers(id) > 0)
    }
}

/// Signals a worker, if `pid` is still one: it may have exited meanwhile.
fn signal_worker(pid: i32, signal: Signal) {
    let needle = b"mcpvisor-fake-worker";
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"));
    let ours = cmdline.map_or(!Path::new("/proc/self").exists(), |c| {
        c.windows(needle.len()).any(|w| w == needle)
    });
    if ours {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

fn text_of(answer: &Value) -> Option<&str> {
    answer["result"]["content"][0]["text"].as_str()
}

fn whoami_pid(answer: &Value) -> Option<i32> {
    let me: Value = serde_json::from_str(text_of(answer)?).ok()?;
    i32::try_from(me["pid"].as_i64()?).ok()
}

/// The checks, over everything the front received.
struct Checker<'a> {
    d: &'a Driver,
    /// Position of each answer in the stream, by id as JSON text.
    answers: HashMap<String, Vec<usize>>,
}

impl Checker<'_> {
    fn new(d: &Driver) -> Checker<'_> {
        let seed = d.seed;
        let mut answers: HashMap<String, Vec<usize>> = HashMap::new();
        let mut parse_errors = 0;
        for (pos, m) in d.log.iter().enumerate() {
            assert_eq!(m["jsonrpc"], "2.0", "seed {seed}: {m}");
            match (m.get("id"), m.get("method")) {
                (Some(id), None) => {
                    assert!(
                        m.get("result").is_some() != m.get("error").is_some(),
                        "seed {seed}: a response needs a result or an error: {m}"
                    );
                    if id.is_null() && m["error"]["code"] == PARSE_ERROR {
                        parse_errors += 1;
                        continue;
                    }
                    answers.entry(id.to_string()).or_default().push(pos);
                }
                (None, Some(method)) => {
                    let method = method.as_str().unwrap_or_default();
                    assert!(
                        method.starts_with("notifications/"),
                        "seed {seed}: not a notification: {m}"
                    );
                }
                // Nothing here asks the client anything.
                _ => panic!("seed {seed}: neither a response nor a notification: {m}"),
            }
        }
        assert_eq!(
            parse_errors, d.garbage,
            "seed {seed}: one parse error per line that was not JSON"
        );
        Checker { d, answers }
    }

    fn positions(&self, id: &Value) -> &[usize] {
        self.answers
            .get(&id.to_string())
            .map_or(&[][..], Vec::as_slice)
    }

    /// The gateway's own answers come once each. (That every answer goes
    /// to an id the client used is checked as lines arrive.)
    fn plain_answers_come_once(&self) {
        let seed = self.d.seed;
        for id in &self.d.plain {
            let at = self.positions(id);
            assert_eq!(at.len(), 1, "seed {seed}: {id} answered {} times", at.len());
            let m = &self.d.log[at[0]];
            assert!(m.get("result").is_some(), "seed {seed}: {m}");
        }
    }

    /// Each call gets at most one answer, exactly one unless cancelled, and
    /// none once the gateway took its cancel; a reused id gets one answer
    /// per call. Returns where each call was answered.
    fn answers_match_calls(&self) -> HashMap<usize, usize> {
        let seed = self.d.seed;
        let mut answered_at = HashMap::new();
        for (id, calls) in &self.d.by_id {
            let at = self.positions(&self.d.calls[calls[0]].id);
            match calls.as_slice() {
                [k] => {
                    let c = &self.d.calls[*k];
                    assert!(
                        at.len() <= 1,
                        "seed {seed}: call {id} answered {} times: {:#?}",
                        at.len(),
                        at.iter().map(|p| &self.d.log[*p]).collect::<Vec<_>>()
                    );
                    if let Some(barrier) = &c.barrier {
                        let cut = self.positions(barrier)[0];
                        if let Some(p) = at.first() {
                            assert!(
                                *p < cut,
                                "seed {seed}: call {id} answered after its cancel was taken: {}",
                                self.d.log[*p]
                            );
                        }
                    } else {
                        assert_eq!(at.len(), 1, "seed {seed}: call {id} ({c:?}) never answered");
                    }
                    if let Some(p) = at.first() {
                        if let Err(e) = self.d.fits(*k, *p) {
                            panic!("seed {seed}: call {id} ({c:?}): {e}: {}", self.d.log[*p]);
                        }
                        answered_at.insert(*k, *p);
                    }
                }
                [first, second] => {
                    assert_eq!(
                        at.len(),
                        2,
                        "seed {seed}: id {id}, used by two calls, answered {} times",
                        at.len()
                    );
                    let orders = [[*first, *second], [*second, *first]];
                    let fitting = orders.iter().find(|o| {
                        self.d.fits(o[0], at[0]).is_ok() && self.d.fits(o[1], at[1]).is_ok()
                    });
                    let Some(order) = fitting else {
                        panic!(
                            "seed {seed}: id {id}: the answers {} and {} do not fit its calls {:?} and {:?} ({:?}, {:?} the other way round)",
                            self.d.log[at[0]],
                            self.d.log[at[1]],
                            self.d.calls[*first],
                            self.d.calls[*second],
                            self.d.fits(*second, at[0]),
                            self.d.fits(*first, at[1]),
                        );
                    };
                    answered_at.insert(order[0], at[0]);
                    answered_at.insert(order[1], at[1]);
                    // The second call was refused if and only if the first
                    // was still in flight: answered after the refusal. (An
                    // answer to the second before the first's means the
                    // gateway held both under one id.)
                    let refused = self.d.log[answered_at[second]]["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(REUSED_ID));
                    let first_still_open = answered_at[second] < answered_at[first];
                    assert_eq!(
                        refused, first_still_open,
                        "seed {seed}: id {id}: its reuse answered {} and its first call {}",
                        self.d.log[answered_at[second]], self.d.log[answered_at[first]]
                    );
                }
                _ => panic!("seed {seed}: id {id} used by more than two calls"),
            }
        }
        answered_at
    }

    /// Progress carries the client's own token and comes only while its
    /// call is live: after it was sent, before its answer, before its
    /// cancel was taken. It is the call's own: `sleep` counts 1, 2, ... up
    /// to its own total, all of it before a result.
    fn progress_is_the_calls_own(&self, answered_at: &HashMap<usize, usize>) {
        let seed = self.d.seed;
        let by_token: HashMap<String, usize> = self
            .d
            .calls
            .iter()
            .enumerate()
            .filter_map(|(k, c)| Some((c.token.as_ref()?.to_string(), k)))
            .collect();
        let mut counted: HashMap<usize, u64> = HashMap::new();
        for (pos, m) in self.d.log.iter().enumerate() {
            if m["method"] != "notifications/progress" {
                continue;
            }
            let token = &m["params"]["progressToken"];
            let Some(&k) = by_token.get(&token.to_string()) else {
                panic!("seed {seed}: progress with a token the client never sent: {m}");
            };
            let c = &self.d.calls[k];
            let live_until = [
                answered_at.get(&k).copied(),
                c.barrier.as_ref().map(|b| self.positions(b)[0]),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(usize::MAX);
            assert!(
                c.sent <= pos && pos < live_until,
                "seed {seed}: progress for call {} when it was not live: {m}",
                c.id
            );
            let Tool::Sleep { ms, every } = c.tool else {
                panic!("seed {seed}: progress for a call that makes none ({c:?}): {m}");
            };
            let count = counted.entry(k).or_default();
            *count += 1;
            let expected = json!({"progress": *count, "total": (ms - 1) / every});
            assert!(
                m["params"]["progress"] == expected["progress"]
                    && m["params"]["total"] == expected["total"],
                "seed {seed}: progress for call {} is not its own (expected {expected}): {m}",
                c.id
            );
        }
        for (&k, &pos) in answered_at {
            let c = &self.d.calls[k];
            if let (Tool::Sleep { ms, every }, Some(_)) = (&c.tool, &c.token) {
                if self.d.log[pos].get("result").is_some() {
                    let got = counted.get(&k).copied().unwrap_or(0);
                    assert_eq!(
                        got,
                        (ms - 1) / every,
                        "seed {seed}: call {} has its result after {got} progress notifications",
                        c.id
                    );
                }
            }
        }
    }

    /// A worker's pid is seen from one server only.
    fn pids_stay_with_their_server(&self, answered_at: &HashMap<usize, usize>) {
        let seed = self.d.seed;
        let mut owner: HashMap<i32, usize> = HashMap::new();
        for (&k, &pos) in answered_at {
            let c = &self.d.calls[k];
            if c.tool != Tool::Whoami {
                continue;
            }
            if let Some(pid) = whoami_pid(&self.d.log[pos]) {
                let first = *owner.entry(pid).or_insert(c.backend);
                assert_eq!(
                    first, c.backend,
                    "seed {seed}: pid {pid} answered for `{}` and `{}`",
                    self.d.names[first], self.d.names[c.backend]
                );
            }
        }
    }
}

async fn run_seed(seed: u64, worker: &Path) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let count = 3 + (seed % 2) as usize;
    let names: Vec<String> = NAMES[..count].iter().map(|s| s.to_string()).collect();
    // Some seeds let a server crash-loop into its failed state.
    let crash_loops = seed % 4 == 3;
    let crash_loop_exits = if crash_loops { 3 } else { 1000 };
    let plans: Vec<ServerPlan> = names
        .iter()
        .map(|name| plan(name, worker, rng.below(2) == 0, crash_loop_exits))
        .collect();
    let settings = Settings {
        list_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let (front_in, hub_in) = tokio::io::duplex(64 * 1024);
    let (hub_out, front_out) = tokio::io::duplex(64 * 1024);
    let (control_tx, control) = mpsc::channel(4);
    let hub = tokio::spawn(Hub::run(settings, plans.clone(), hub_in, hub_out, control));
    let (line_tx, lines) = mpsc::channel(1 << 16);
    let reader = tokio::spawn(async move {
        let mut out = BufReader::new(front_out).lines();
        while let Ok(Some(line)) = out.next_line().await {
            if line_tx.send(line).await.is_err() {
                return;
            }
        }
    });
    let mut d = Driver {
        seed,
        rng,
        names,
        tx: Some(front_in),
        lines,
        log: Vec::new(),
        answered: HashMap::new(),
        used: HashSet::new(),
        by_id: HashMap::new(),
        calls: Vec::new(),
        plain: Vec::new(),
        disruptions: Vec::new(),
        crash_loops,
        garbage: 0,
        frozen: None,
        plans,
        control: control_tx,
    };

    let init = d
        .plain(
            json!("init"),
            "initialize",
            json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"randomized","version":"1"}}),
        )
        .await;
    d.wait_until("initialize's answer", |d| d.answers(&init) > 0)
        .await;
    d.send(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    let list = d.plain(json!("tools"), "tools/list", json!({})).await;
    d.wait_until("the tool list", |d| d.answers(&list) > 0)
        .await;
    let listed: HashSet<&str> = d
        .log
        .iter()
        .find(|m| m["id"] == list)
        .and_then(|m| m["result"]["tools"].as_array())
        .expect("a tool list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in &d.names {
        for tool in ["echo", "sleep", "hang", "crash", "whoami"] {
            let exposed = format!("{name}__{tool}");
            assert!(
                listed.contains(exposed.as_str()),
                "seed {seed}: {exposed} not listed"
            );
        }
    }

    // At least OPS operations, and none of the servers left frozen.
    let mut n = 0;
    while n < OPS || d.frozen.is_some() {
        d.random_op(n).await;
        n += 1;
    }
    d.wait_until("an answer to every call not cancelled", Driver::settled)
        .await;
    // Closing the input ends the gateway once nothing is left in flight.
    d.tx = None;
    let outcome = tokio::time::timeout(WAIT, hub)
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the gateway did not end"))
        .expect("the gateway's task");
    assert_eq!(outcome, Outcome::ClientClosed, "seed {seed}");
    tokio::time::timeout(WAIT, reader)
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the front output did not end"))
        .expect("the reader");
    while let Some(line) = d.lines.recv().await {
        d.take(line);
    }

    let check = Checker::new(&d);
    check.plain_answers_come_once();
    let answered_at = check.answers_match_calls();
    check.progress_is_the_calls_own(&answered_at);
    check.pids_stay_with_their_server(&answered_at);
    // What the seed exercised, for `--nocapture`.
    let count = |f: &dyn Fn(&Value) -> bool| d.log.iter().filter(|m| f(m)).count();
    eprintln!(
        "seed {seed}: {} calls ({} cancelled), {} crashes, kills and restarts; {} results, {} lost, {} not started, {} progress",
        d.calls.len(),
        d.calls.iter().filter(|c| c.barrier.is_some()).count(),
        d.disruptions.len(),
        count(&|m| m.get("result").is_some()),
        count(&|m| m["error"]["code"] == WORKER_LOST),
        count(&|m| m["error"]["code"] == NOT_STARTED),
        count(&|m| m["method"] == "notifications/progress"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_traffic_through_the_gateway_keeps_the_invariants() {
    let worker = fake_worker();
    let seeds: u64 = std::env::var("MCPVISOR_RANDOM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEEDS);
    for seed in 0..seeds {
        run_seed(seed, &worker).await;
    }
}
