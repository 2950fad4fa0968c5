//! One peer process on the other end of a pair of pipes: the fake worker
//! itself ("direct"), `mcpvisor run` in front of it, `mcpvisor serve` with
//! it in a config file, or the relay floor (`cat | fake-worker | cat`).

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

use crate::payload::snippet;

/// Bound on any single answer the benchmark waits for.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on a peer's exit after its stdin is closed.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Pipe buffers on our side; a 64 KiB payload goes straight through.
const PIPE_BUFFER: usize = 64 * 1024;

/// How the client reaches the fake worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// Client ↔ fake worker.
    Direct,
    /// Client ↔ `mcpvisor run -q --no-watch -- fake-worker`.
    Mcpvisor,
    /// Client ↔ `mcpvisor serve -q --no-watch --config FILE`, the fake
    /// worker among FILE's servers ([`crate::gateway::Gateway`]).
    Serve,
    /// Client ↔ `cat | fake-worker | cat`: a process in each direction that
    /// only copies bytes, the floor for anything that sits between the two
    /// as its own process.
    Relay,
}

impl Via {
    /// Both ways, in an order that alternates with `round` so that neither
    /// side always runs first (a machine warming up or getting busier
    /// favours one side otherwise).
    pub fn order(round: usize) -> [Via; 2] {
        if round % 2 == 0 {
            [Via::Direct, Via::Mcpvisor]
        } else {
            [Via::Mcpvisor, Via::Direct]
        }
    }
}

/// The binaries under test.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub mcpvisor: PathBuf,
    pub worker: PathBuf,
    /// Let the peers' stderr through (for diagnosing a failing run).
    pub show_stderr: bool,
}

impl Binaries {
    /// The command of a peer that needs nothing but the binaries.
    fn command(&self, via: Via) -> anyhow::Result<Command> {
        match via {
            Via::Direct => Ok(Command::new(&self.worker)),
            Via::Mcpvisor => {
                let mut c = Command::new(&self.mcpvisor);
                c.args(["run", "-q", "--no-watch", "--"]).arg(&self.worker);
                Ok(c)
            }
            Via::Relay => {
                let mut c = Command::new("sh");
                c.args(["-c", r#"cat | "$0" | cat"#]).arg(&self.worker);
                Ok(c)
            }
            Via::Serve => bail!("a serve peer starts from its config file (Gateway::spawn)"),
        }
    }
}

/// A running peer and our ends of its pipes.
#[derive(Debug)]
pub struct Peer {
    pub via: Via,
    child: Child,
    pub pid: u32,
    pub stdin: BufWriter<ChildStdin>,
    pub stdout: BufReader<ChildStdout>,
    /// The next request id; ids are never reused on one peer.
    pub next_id: u64,
    line: Vec<u8>,
}

// === impl Peer ===

impl Peer {
    /// Starts a direct or `run` peer. Time it from just before this call.
    pub fn spawn(binaries: &Binaries, via: Via) -> anyhow::Result<Self> {
        Self::start(via, binaries.command(via)?, binaries.show_stderr)
    }

    /// Starts `command` as the peer `via` names (a wrapper such as valgrind
    /// around mcpvisor, say), on our pipes.
    pub fn start(via: Via, mut command: Command, show_stderr: bool) -> anyhow::Result<Self> {
        let stderr = if show_stderr {
            Stdio::inherit()
        } else {
            Stdio::null()
        };
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {:?}", command.as_std().get_program()))?;
        let pid = child.id().context("the peer exited at once")?;
        let stdin = child.stdin.take().context("no stdin pipe")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        Ok(Self {
            via,
            child,
            pid,
            stdin: BufWriter::with_capacity(PIPE_BUFFER, stdin),
            stdout: BufReader::with_capacity(PIPE_BUFFER, stdout),
            next_id: 1,
            line: Vec::new(),
        })
    }

    /// The MCP handshake: `initialize`, answered, then
    /// `notifications/initialized`. Returns when the answer arrived.
    pub async fn initialize(&mut self) -> anyhow::Result<Instant> {
        let params = r#"{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpvisor-bench","version":"0"}}"#;
        let answer = self.call("initialize", params).await?;
        let at = Instant::now();
        if answer["result"]["protocolVersion"].as_str().is_none() {
            bail!(
                "{:?}: initialize was answered without a protocol version: {answer}",
                self.via
            );
        }
        self.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        Ok(at)
    }

    /// Sends one request and waits for its answer (result or error),
    /// skipping notifications.
    pub async fn call(&mut self, method: &str, params: &str) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        self.send(line.as_bytes()).await?;
        let via = self.via;
        loop {
            let line = self.read_line().await?;
            let value: Value = serde_json::from_slice(line)
                .with_context(|| format!("{via:?}: a line that is not JSON: {}", snippet(line)))?;
            match value.get("id") {
                Some(got) if got == id => return Ok(value),
                Some(other) => bail!(
                    "{:?}: answer to unknown id {other} while waiting for {id}",
                    self.via
                ),
                None => continue,
            }
        }
    }

    /// Writes one line (terminator added) and flushes.
    pub async fn send(&mut self, line: &[u8]) -> anyhow::Result<()> {
        self.stdin.write_all(line).await?;
        self.stdin.write_all(b"\n").await?;
        self.stdin
            .flush()
            .await
            .with_context(|| format!("{:?}: writing to the peer", self.via))
    }

    /// The next line, without its terminator, within [`ANSWER_TIMEOUT`].
    async fn read_line(&mut self) -> anyhow::Result<&[u8]> {
        self.line.clear();
        let n = tokio::time::timeout(
            ANSWER_TIMEOUT,
            self.stdout.read_until(b'\n', &mut self.line),
        )
        .await
        .map_err(|_| anyhow!("{:?}: no answer within {ANSWER_TIMEOUT:?}", self.via))??;
        if n == 0 {
            bail!("{:?}: the peer closed its stdout", self.via);
        }
        Ok(self.line.strip_suffix(b"\n").unwrap_or(&self.line))
    }

    /// Why the peer may have stopped answering: its exit status if it has
    /// ended (or ends within a moment), for error messages.
    pub async fn exit_note(&mut self) -> String {
        match tokio::time::timeout(Duration::from_millis(200), self.child.wait()).await {
            Ok(Ok(status)) => format!(
                "the {:?} peer (pid {}) exited: {status}",
                self.via, self.pid
            ),
            Ok(Err(e)) => format!("cannot wait for the {:?} peer: {e}", self.via),
            Err(_) => format!(
                "the {:?} peer (pid {}) is still running",
                self.via, self.pid
            ),
        }
    }

    /// Closes the peer's stdin and waits for it to exit (killing it if it
    /// does not within a bound).
    pub async fn close(self) -> anyhow::Result<ExitStatus> {
        let Self {
            via,
            mut child,
            stdin,
            stdout,
            ..
        } = self;
        drop(stdin);
        // Keep reading so a peer flushing its last lines is not stuck on a
        // full pipe while it exits.
        let drain = async move {
            let mut stdout = stdout;
            let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
        };
        let wait = async { tokio::join!(drain, child.wait()).1 };
        match tokio::time::timeout(EXIT_TIMEOUT, wait).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                child.kill().await?;
                bail!("{via:?}: the peer did not exit within {EXIT_TIMEOUT:?} of its stdin closing")
            }
        }
    }
}
