//! The front client: random operations, each written down where it
//! happened in the stream of what the gateway sent back.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use mcpvisor_gateway::{Control, ServerPlan};
use mcpvisor_jsonrpc::{INVALID_PARAMS, NOT_STARTED, PARSE_ERROR, REQUEST_TIMEOUT, WORKER_LOST};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{REUSED_ID, WAIT};

/// The fake worker tool a call runs, with what its answer must say.
#[derive(Debug, Clone, PartialEq)]
pub enum Tool {
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
    pub fn name(&self) -> &'static str {
        match self {
            Tool::Echo(_) => "echo",
            Tool::Sleep { .. } => "sleep",
            Tool::Hang => "hang",
            Tool::Crash => "crash",
            Tool::Whoami => "whoami",
        }
    }

    pub fn arguments(&self) -> Value {
        match self {
            Tool::Echo(args) => args.clone(),
            Tool::Sleep { ms, every } => json!({"ms": ms, "progress_ms": every}),
            Tool::Hang | Tool::Crash | Tool::Whoami => json!({}),
        }
    }
}

/// Something done to a server that may cost its calls their answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upset {
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
    pub const ALL: [Upset; 5] = [
        Upset::Crash,
        Upset::Kill,
        Upset::Freeze,
        Upset::Reload,
        Upset::Reconfigure,
    ];
}

/// An [`Upset`] of one server, and when.
#[derive(Debug, Clone, Copy)]
pub struct Disruption {
    pub backend: usize,
    /// How much of the stream had arrived when it was done.
    pub at: usize,
    pub upset: Upset,
}

/// One `tools/call` the driver sent.
#[derive(Debug)]
pub struct Call {
    pub id: Value,
    pub backend: usize,
    pub tool: Tool,
    pub token: Option<Value>,
    /// How much of the stream had arrived when it was sent.
    pub sent: usize,
    /// The earlier call, still in flight, whose id it reuses.
    pub reuses: Option<usize>,
    /// A later call reuses its id.
    pub reused: bool,
    /// The id of the ping sent right after its cancel.
    pub barrier: Option<Value>,
}

/// The front client: sends, and keeps everything received in order.
pub struct Driver {
    pub seed: u64,
    pub rng: fastrand::Rng,
    pub names: Vec<String>,
    pub tx: Option<DuplexStream>,
    pub lines: mpsc::Receiver<String>,
    /// Everything the gateway sent the front, in order.
    pub log: Vec<Value>,
    /// Responses so far, by id as JSON text.
    pub answered: HashMap<String, usize>,
    /// Every id sent so far, as JSON text.
    pub used: HashSet<String>,
    /// The calls under each id, by id as JSON text.
    pub by_id: HashMap<String, Vec<usize>>,
    pub calls: Vec<Call>,
    /// The gateway's own answers expected: `ping`s, `initialize`, the list.
    pub plain: Vec<Value>,
    /// What may cost a server's calls their answers, where in the stream.
    pub disruptions: Vec<Disruption>,
    /// Servers may crash-loop into their failed state, their tools
    /// withdrawn meanwhile.
    pub crash_loops: bool,
    /// Lines sent that are not JSON.
    pub garbage: usize,
    /// A server whose worker is stopped: (backend, pid, when it is let go
    /// on). Nothing is sent to it meanwhile.
    pub frozen: Option<(usize, i32, Instant)>,
    /// The configuration the gateway runs, and its control channel.
    pub plans: Vec<ServerPlan>,
    pub control: mpsc::Sender<Control>,
}

impl Driver {
    pub fn take(&mut self, line: String) {
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

    pub fn answers(&self, id: &Value) -> usize {
        self.answered.get(&id.to_string()).copied().unwrap_or(0)
    }

    /// Receives until `done` holds, at most [`WAIT`].
    pub async fn wait_until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
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

    pub async fn send(&mut self, m: Value) {
        self.write(m.to_string()).await;
    }

    /// A request the gateway answers itself; returns its id.
    pub async fn plain(&mut self, id: Value, method: &str, params: Value) -> Value {
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
            None if self.rng.u64(..3) == 0 => json!(format!("s{}-{k}", self.seed)),
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
        match self.rng.u64(..4) {
            0 => None,
            1 => Some(json!(format!("tok-{}-{k}", self.seed))),
            // Far from the gateway's own ids, so a token it forgot to
            // rewrite back cannot pass for one of the client's.
            _ => Some(json!(5_000_000 + k as u64)),
        }
    }

    pub async fn random_op(&mut self, n: usize) {
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
        let backend = self.rng.choice(&awake).copied().expect("a server awake");
        match self.rng.u64(..100) {
            0..30 => {
                let tag = format!("{}-{n}-{:x}", self.seed, self.rng.u64(..));
                let args = json!({"server": self.names[backend], "tag": tag});
                self.call(backend, Tool::Echo(args), None, None).await;
            }
            30..48 => {
                let ms = 20 + self.rng.u64(..280);
                let every = 10 + self.rng.u64(..40);
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
                self.control(Control::Reload {
                    server: name,
                    cause: mcpvisor_gateway::ReloadCause::Asked,
                })
                .await;
            }
            _ => {
                // Think time: lets calls overlap and finish in between.
                let pause = Duration::from_millis(self.rng.u64(..30));
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// Cancels a call in flight, then pings: once the ping is answered, the
    /// gateway has taken the cancel, and nothing more may come for the call.
    async fn cancel(&mut self) {
        let open = self.open(&["echo", "sleep", "hang", "whoami"]);
        if let Some(k) = self.rng.choice(&open).copied() {
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
        let Some(k) = self.rng.choice(&open).copied() else {
            return;
        };
        let tag = format!("{}-{n}-reused-{:x}", self.seed, self.rng.u64(..));
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
            let until = Instant::now() + Duration::from_millis(800 + self.rng.u64(..800));
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
    pub fn fits(&self, k: usize, pos: usize) -> Result<(), String> {
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
        let page_size = (1 + self.rng.u64(..4)).to_string();
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
    pub fn settled(&self) -> bool {
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

pub fn whoami_pid(answer: &Value) -> Option<i32> {
    let me: Value = serde_json::from_str(text_of(answer)?).ok()?;
    i32::try_from(me["pid"].as_i64()?).ok()
}
