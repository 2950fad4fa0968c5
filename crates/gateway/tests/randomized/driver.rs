//! The front clients: random operations, each written down where it
//! happened in the stream of what the gateway sent back to its front.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_gateway::fronts::{FrontCommand, FrontId};
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
    /// `ask` from a 2026-07-28 front: the worker asks the client
    /// `roots/list` mid-call, so the call is answered with an
    /// input-required round naming that one request.
    Ask,
    /// The client's retry of an [`Tool::Ask`] with its answer to the
    /// round's request (`roots`, under `key`) and the round's `state`:
    /// answered with the call's result, the worker's echo of `roots`.
    Retry {
        roots: Value,
        key: String,
        state: String,
    },
}

impl Tool {
    pub fn name(&self) -> &'static str {
        match self {
            Tool::Echo(_) => "echo",
            Tool::Sleep { .. } => "sleep",
            Tool::Hang => "hang",
            Tool::Crash => "crash",
            Tool::Whoami => "whoami",
            Tool::Ask | Tool::Retry { .. } => "ask",
        }
    }

    pub fn arguments(&self) -> Value {
        match self {
            Tool::Echo(args) => args.clone(),
            Tool::Sleep { ms, every } => json!({"ms": ms, "progress_ms": every}),
            Tool::Hang | Tool::Crash | Tool::Whoami => json!({}),
            Tool::Ask | Tool::Retry { .. } => json!({"method": "roots/list"}),
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
#[derive(Debug, Clone)]
pub struct Disruption {
    pub backend: usize,
    /// How much of each front's stream had arrived when it was done.
    pub at: Vec<usize>,
    pub upset: Upset,
}

/// One `tools/call` the driver sent.
#[derive(Debug)]
pub struct Call {
    /// The front it was sent on.
    pub front: usize,
    pub id: Value,
    pub backend: usize,
    pub tool: Tool,
    pub token: Option<Value>,
    /// How much of its front's stream had arrived when it was sent.
    pub sent: usize,
    /// The earlier call, still in flight, whose id it reuses.
    pub reuses: Option<usize>,
    /// A later call reuses its id.
    pub reused: bool,
    /// The id of the request sent on its front right after its cancel
    /// (`ping`, or `server/discover` from a 2026-07-28 front).
    pub barrier: Option<Value>,
}

/// The protocol era a front speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` first, then requests as they are.
    Handshake,
    /// 2026-07-28: no handshake, the `_meta` envelope on every request,
    /// `resultType` on every result, and nothing sent to it it did not ask
    /// for.
    Modern,
}

/// How a front's lines reach the gateway.
pub enum Link {
    /// The one stdio client of [`mcpvisor_gateway::Hub::run`], on a pipe.
    Pipe(DuplexStream),
    /// A front of [`mcpvisor_gateway::Hub::serve`], on its front channel.
    Channel {
        id: FrontId,
        tx: mpsc::Sender<FrontCommand>,
    },
}

/// One message the gateway sent a front.
#[derive(Debug)]
pub struct Received {
    pub front: usize,
    pub line: String,
    /// The request it belongs to, as the hub told the front's transport
    /// (`Outbound::related`); never known on a pipe.
    pub related: Option<String>,
}

/// One front client: what it sent, and everything it received in order.
pub struct Front {
    pub era: Era,
    /// `None` once closed.
    pub link: Option<Link>,
    /// Everything the gateway sent it, in order.
    pub log: Vec<Value>,
    /// Beside each message of `log`, the request the hub related it to.
    pub related: Vec<Option<String>>,
    /// Whether the hub tells this front's transport what each message
    /// belongs to (a channel does, a pipe cannot).
    pub relates: bool,
    /// Responses so far, by id as JSON text.
    pub answered: HashMap<String, usize>,
    /// Every id sent so far, as JSON text.
    pub used: HashSet<String>,
    /// The calls under each id, by id as JSON text.
    pub by_id: HashMap<String, Vec<usize>>,
    /// The gateway's own answers expected: `ping`s, `server/discover`,
    /// `initialize`, the list.
    pub plain: Vec<Value>,
    /// Lines sent that are not JSON.
    pub garbage: usize,
    /// Calls sent on it so far: ids and tokens are counted per front, so
    /// that fronts use the same ones at once.
    pub sent_calls: usize,
}

impl Front {
    pub fn new(era: Era, link: Link) -> Self {
        Front {
            relates: matches!(link, Link::Channel { .. }),
            era,
            link: Some(link),
            log: Vec::new(),
            related: Vec::new(),
            answered: HashMap::new(),
            used: HashSet::new(),
            by_id: HashMap::new(),
            plain: Vec::new(),
            garbage: 0,
            sent_calls: 0,
        }
    }

    pub fn answers(&self, id: &Value) -> usize {
        self.answered.get(&id.to_string()).copied().unwrap_or(0)
    }

    /// Ends the front: closes its pipe (dropped here), or tells the hub
    /// it closed.
    pub async fn close(&mut self) {
        if let Some(Link::Channel { id, tx }) = self.link.take() {
            tokio::time::timeout(WAIT, tx.send(FrontCommand::Close { front: id }))
                .await
                .expect("the gateway takes front commands")
                .expect("the gateway runs");
        }
    }
}

/// `params` as `era` sends them: a 2026-07-28 request carries its
/// protocol version, capabilities and client in `_meta`, beside what
/// `_meta` already holds (a progress token).
pub fn enveloped(era: Era, mut params: Value) -> Value {
    if era == Era::Modern {
        let meta = &mut params["_meta"];
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        // Roots, for the bridged calls to the per-client server.
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({"roots": {}});
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "randomized", "version": "1"});
    }
    params
}

/// The front clients: send, and keep everything received in order.
pub struct Driver {
    pub seed: u64,
    pub rng: fastrand::Rng,
    pub names: Vec<String>,
    pub fronts: Vec<Front>,
    /// What the gateway sent, every front's, as it arrives.
    pub lines: mpsc::Receiver<Received>,
    pub calls: Vec<Call>,
    /// What may cost a server's calls their answers, where in the streams.
    pub disruptions: Vec<Disruption>,
    /// Servers may crash-loop into their failed state, their tools
    /// withdrawn meanwhile.
    pub crash_loops: bool,
    /// A server whose worker is stopped: (backend, pid, when it is let go
    /// on). Nothing is sent to it meanwhile.
    pub frozen: Option<(usize, i32, Instant)>,
    /// The configuration the gateway runs, and its control channel.
    pub plans: Vec<ServerPlan>,
    pub control: mpsc::Sender<Control>,
    /// Calls sent under an id another front had in flight.
    pub shared_ids: usize,
    /// The per-client server that 2026-07-28 fronts' bridged calls go to
    /// (an index of `names`), if the seed has one: random upsets leave it
    /// alone, and each front has one bridged call at a time, so that the
    /// worker's request is the call's beyond doubt.
    pub oracle: Option<usize>,
}

impl Driver {
    pub fn take(&mut self, r: Received) {
        let seed = self.seed;
        let Received {
            front: at,
            line,
            related,
        } = r;
        let m: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON on front {at}: {line:?}: {e}"));
        let f = &mut self.fronts[at];
        let pos = f.log.len();
        f.log.push(m);
        f.related.push(related);
        let m = &f.log[pos];
        if let (Some(id), None) = (m.get("id"), m.get("method")) {
            let id = id.to_string();
            // Checked at once: a stray id would otherwise show only as a
            // call that is never answered.
            let parse_error = id == "null" && m["error"]["code"] == PARSE_ERROR;
            assert!(
                parse_error || f.used.contains(&id),
                "seed {seed}: an answer on front {at} to {id}, an id its client never used: {m}"
            );
            *f.answered.entry(id.clone()).or_default() += 1;
            // An id used once is checked at once too: an answer routed to
            // the wrong call would otherwise show only as one never
            // answered. A reused id's two answers are matched at the end.
            if let Some(&[k]) = f.by_id.get(&id).map(Vec::as_slice) {
                if let Err(e) = self.fits(k, pos) {
                    panic!(
                        "seed {seed}: call {k} ({:?}): {e}: {}",
                        self.calls[k], self.fronts[at].log[pos]
                    );
                }
            }
        }
    }

    /// Takes in whatever has arrived, so that positions are current.
    fn drain(&mut self) {
        while let Ok(r) = self.lines.try_recv() {
            self.take(r);
        }
    }

    /// How many answers `front` got under `id`.
    pub fn answers(&self, front: usize, id: &Value) -> usize {
        self.fronts[front].answers(id)
    }

    /// Receives until `done` holds, at most [`WAIT`].
    pub async fn wait_until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        self.drain();
        while !done(self) {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(r)) => self.take(r),
                Ok(None) => panic!("seed {}: the fronts' output ended before {what}", self.seed),
                Err(_) => panic!(
                    "seed {}: no {what} within {WAIT:?}; calls unanswered: {:#?}; the last lines of each front: {:#?}",
                    self.seed,
                    self.unanswered(),
                    self.fronts
                        .iter()
                        .map(|f| &f.log[f.log.len().saturating_sub(10)..])
                        .collect::<Vec<_>>()
                ),
            }
        }
    }

    async fn write(&mut self, front: usize, line: String) {
        self.drain();
        // A channel front hands on its own scan of the line half the time,
        // as an HTTP front does for a request without a session.
        let hand_on_scan = self.rng.bool();
        let link = self.fronts[front].link.as_mut().expect("the front is open");
        match link {
            Link::Pipe(tx) => {
                tokio::time::timeout(WAIT, tx.write_all(format!("{line}\n").as_bytes()))
                    .await
                    .expect("the gateway reads its input")
                    .expect("the gateway's input is open");
            }
            Link::Channel { id, tx } => {
                let line = Bytes::from(line);
                let scan = if hand_on_scan { scanned(&line) } else { None };
                let message = FrontCommand::Message {
                    front: *id,
                    line,
                    scan,
                };
                tokio::time::timeout(WAIT, tx.send(message))
                    .await
                    .expect("the gateway takes front commands")
                    .expect("the gateway runs");
            }
        }
    }

    pub async fn send(&mut self, front: usize, m: Value) {
        self.write(front, m.to_string()).await;
    }

    /// A request the gateway answers itself, in `front`'s era; returns its
    /// id.
    pub async fn plain(&mut self, front: usize, id: Value, method: &str, params: Value) -> Value {
        let f = &mut self.fronts[front];
        f.plain.push(id.clone());
        f.used.insert(id.to_string());
        let params = enveloped(f.era, params);
        self.send(
            front,
            json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
        )
        .await;
        id
    }

    /// Calls `tool` on `backend` from `front`, under a fresh id or the id
    /// of call `reuse` (of the same front); returns the call's index.
    async fn call(
        &mut self,
        front: usize,
        backend: usize,
        tool: Tool,
        token: Option<Value>,
        reuse: Option<usize>,
    ) -> usize {
        let k = self.calls.len();
        let j = self.fronts[front].sent_calls;
        // Fronts count their ids alike, so several have the same id in
        // flight: an answer that reached the wrong front would fit another
        // call.
        let id = match reuse {
            Some(r) => self.calls[r].id.clone(),
            None if self.rng.u64(..3) == 0 => json!(format!("s{}-{j}", self.seed)),
            None => json!(j),
        };
        let mut params = json!({
            "name": format!("{}__{}", self.names[backend], tool.name()),
            "arguments": tool.arguments(),
        });
        if let Some(token) = &token {
            params["_meta"] = json!({ "progressToken": token });
        }
        if let Tool::Retry { roots, key, state } = &tool {
            params["inputResponses"] = json!({ key: roots });
            params["requestState"] = json!(state);
        }
        let params = enveloped(self.fronts[front].era, params);
        let line = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params});
        self.drain();
        let key = id.to_string();
        let elsewhere = self.fronts.iter().enumerate().any(|(at, f)| {
            at != front
                && f.by_id
                    .get(&key)
                    .is_some_and(|calls| f.answers(&id) < calls.len())
        });
        self.shared_ids += usize::from(elsewhere);
        if let Some(r) = reuse {
            self.calls[r].reused = true;
        }
        let f = &mut self.fronts[front];
        f.sent_calls += 1;
        f.used.insert(id.to_string());
        f.by_id.entry(key).or_default().push(k);
        let sent = f.log.len();
        self.calls.push(Call {
            front,
            id,
            backend,
            tool,
            token,
            sent,
            reuses: reuse,
            reused: false,
            barrier: None,
        });
        self.send(front, line).await;
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
                    && self.answers(c.front, &c.id) == 0
            })
            .collect()
    }

    /// A progress token for `front`'s next call, or none.
    fn token(&mut self, front: usize) -> Option<Value> {
        let j = self.fronts[front].sent_calls;
        match self.rng.u64(..4) {
            0 => None,
            1 => Some(json!(format!("tok-{}-{j}", self.seed))),
            // Far from the gateway's own ids, so a token it forgot to
            // rewrite back cannot pass for one of the client's.
            _ => Some(json!(5_000_000 + j as u64)),
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
            .filter(|b| Some(*b) != frozen && Some(*b) != self.oracle)
            .collect();
        let backend = self.rng.choice(&awake).copied().expect("a server awake");
        let front = self.rng.usize(..self.fronts.len());
        match self.rng.u64(..100) {
            0..30 => {
                let tag = format!("{}-{n}-{:x}", self.seed, self.rng.u64(..));
                let args = json!({"server": self.names[backend], "tag": tag});
                self.call(front, backend, Tool::Echo(args), None, None)
                    .await;
            }
            30..48 => {
                let ms = 20 + self.rng.u64(..280);
                let every = 10 + self.rng.u64(..40);
                let token = self.token(front);
                self.call(front, backend, Tool::Sleep { ms, every }, token, None)
                    .await;
            }
            48..53 => {
                let token = self.token(front);
                self.call(front, backend, Tool::Hang, token, None).await;
            }
            53..63 => self.cancel().await,
            63..67 => {
                self.disrupt(backend, Upset::Crash);
                self.call(front, backend, Tool::Crash, None, None).await;
            }
            67..70 => self.kill(backend).await,
            70 => self.freeze(backend).await,
            71..75 => self.reuse_id(backend, n).await,
            75..78 => {
                self.fronts[front].garbage += 1;
                self.write(front, "{not json".to_owned()).await;
            }
            78..83 => {
                self.call(front, backend, Tool::Whoami, None, None).await;
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
            87..91 if self.oracle.is_some() => self.bridged(n).await,
            _ => {
                // Think time: lets calls overlap and finish in between.
                let pause = Duration::from_millis(self.rng.u64(..30));
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// A bridged call from a 2026-07-28 front with none in flight: `ask`
    /// on the per-client server, whose worker asks `roots/list` mid-call;
    /// the round that answers it is waited for, and the retry that answers
    /// the worker's request with roots carrying a tag of its own is sent at
    /// once (the worker waits for it within its request timeout). The
    /// retry's answer comes like any call's.
    async fn bridged(&mut self, n: usize) {
        let Some(oracle) = self.oracle else { return };
        let idle: Vec<usize> = (0..self.fronts.len())
            .filter(|&at| {
                self.fronts[at].era == Era::Modern
                    && !self.calls.iter().any(|c| {
                        c.front == at && c.backend == oracle && self.answers(at, &c.id) == 0
                    })
            })
            .collect();
        let Some(front) = self.rng.choice(&idle).copied() else {
            return;
        };
        let k = self.call(front, oracle, Tool::Ask, None, None).await;
        let id = self.calls[k].id.clone();
        self.wait_until("an input-required round", |d| d.answers(front, &id) > 0)
            .await;
        // Its answer fits an `ask` (checked as it came): one request.
        let round = self.fronts[front]
            .log
            .iter()
            .rev()
            .find(|m| m["id"] == id && m.get("method").is_none())
            .expect("the answer just seen");
        let (Some(requests), Some(state)) = (
            round["result"]["inputRequests"].as_object(),
            round["result"]["requestState"].as_str(),
        ) else {
            return;
        };
        let key = requests.keys().next().cloned().unwrap_or_default();
        let state = state.to_owned();
        let tag = format!("{}-{n}-{:x}", self.seed, self.rng.u64(..));
        let roots = json!({"roots": [{"uri": format!("file:///{tag}"), "name": tag}]});
        self.call(front, oracle, Tool::Retry { roots, key, state }, None, None)
            .await;
    }

    /// Cancels a call in flight on any front.
    async fn cancel(&mut self) {
        let open = self.open(&["echo", "sleep", "hang", "whoami"]);
        if let Some(k) = self.rng.choice(&open).copied() {
            self.cancel_call(k).await;
        }
    }

    /// Cancels call `k`, then sends its front a request the gateway answers
    /// itself: once that is answered, the gateway has taken the cancel, and
    /// nothing more may come for the call. A handshake-era front pings; a
    /// 2026-07-28 front, which has no `ping`, asks `server/discover`.
    async fn cancel_call(&mut self, k: usize) {
        let (front, id) = (self.calls[k].front, self.calls[k].id.clone());
        self.send(front, json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id,"reason":"random"}}))
            .await;
        let method = match self.fronts[front].era {
            Era::Handshake => "ping",
            Era::Modern => "server/discover",
        };
        let barrier = self
            .plain(front, json!(format!("b-{k}")), method, json!({}))
            .await;
        self.calls[k].barrier = Some(barrier);
    }

    /// A second call under the id of one still in flight, on its front:
    /// refused, or, if the first was answered meanwhile, routed like any
    /// other.
    async fn reuse_id(&mut self, backend: usize, n: usize) {
        let open = self.open(&["sleep", "hang"]);
        let Some(k) = self.rng.choice(&open).copied() else {
            return;
        };
        let tag = format!("{}-{n}-reused-{:x}", self.seed, self.rng.u64(..));
        let args = json!({"server": self.names[backend], "tag": tag});
        let front = self.calls[k].front;
        self.call(front, backend, Tool::Echo(args), None, Some(k))
            .await;
    }

    /// The pid of `backend`'s worker, asked with `whoami` from any front,
    /// if it answers.
    async fn worker_pid(&mut self, backend: usize) -> Option<i32> {
        let front = self.rng.usize(..self.fronts.len());
        let k = self.call(front, backend, Tool::Whoami, None, None).await;
        let id = self.calls[k].id.clone();
        self.wait_until("whoami's answer", |d| d.answers(front, &id) > 0)
            .await;
        let answer = self.fronts[front]
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
                let f = &self.fronts[c.front];
                c.backend == backend
                    && c.barrier.is_none()
                    && f.answers(&c.id) < f.by_id[&c.id.to_string()].len()
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
            at: self.fronts.iter().map(|f| f.log.len()).collect(),
            upset,
        });
    }

    /// Whether the answer at `pos` of its front's stream can be call `k`'s.
    pub fn fits(&self, k: usize, pos: usize) -> Result<(), String> {
        let c = &self.calls[k];
        let f = &self.fronts[c.front];
        let m = &f.log[pos];
        let name = &self.names[c.backend];
        if pos < c.sent {
            return Err("answered before it was sent".into());
        }
        if f.relates && f.related[pos].as_deref() != Some(c.id.to_string().as_str()) {
            return Err(format!(
                "related to {:?}, not to its own request",
                f.related[pos]
            ));
        }
        // Whether one of these was done to its server before the answer.
        let upset = |kinds: &[Upset]| {
            self.disruptions
                .iter()
                .any(|d| d.backend == c.backend && d.at[c.front] <= pos && kinds.contains(&d.upset))
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
        if c.tool == Tool::Ask {
            let result = &m["result"];
            let requests = result["inputRequests"].as_object();
            return match requests.map(|r| r.values().collect::<Vec<_>>()).as_deref() {
                Some([request])
                    if result["resultType"] == "input_required"
                        && request["method"] == "roots/list"
                        && result["requestState"].is_string() =>
                {
                    Ok(())
                }
                _ => Err("not an input-required round asking roots/list".into()),
            };
        }
        if f.era == Era::Modern && m["result"]["resultType"] != "complete" {
            return Err("a 2026-07-28 result without resultType complete".into());
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
            // The worker answers with what the client answered it.
            Tool::Retry { roots, .. } => match serde_json::from_str::<Value>(text) {
                Ok(answered) if answered == *roots => Ok(()),
                _ => Err(format!("the worker was not answered its own {roots}")),
            },
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
        self.fronts
            .iter()
            .flat_map(|f| {
                f.by_id.values().filter(|calls| {
                    let expected = calls
                        .iter()
                        .filter(|k| self.calls[**k].barrier.is_none())
                        .count();
                    f.answers(&self.calls[calls[0]].id) < expected
                })
            })
            .flatten()
            .map(|k| &self.calls[*k])
            .collect()
    }

    /// Every call not cancelled is answered, and every request the gateway
    /// answers itself.
    pub fn settled(&self) -> bool {
        self.unanswered().is_empty()
            && self
                .fronts
                .iter()
                .all(|f| f.plain.iter().all(|id| f.answers(id) > 0))
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

/// What a front's scan of `line` hands on, when the scan reads it whole.
fn scanned(line: &[u8]) -> Option<Box<mcpvisor_jsonrpc::Scanned>> {
    let (env, params) = mcpvisor_jsonrpc::Envelope::peek_with_params(line).ok()?;
    mcpvisor_jsonrpc::Scanned::of(line, &env, params?).map(Box::new)
}
