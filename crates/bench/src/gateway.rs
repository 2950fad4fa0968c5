//! `mcpvisor serve` measured: the gateway in front of the same fake worker.
//!
//! Three parts, each against its own yardstick:
//!
//! - Throughput cells: one server (the fake worker, named `bench`) behind
//!   `serve`, called as `bench__echo`: a `tools/call` of its `echo` tool
//!   with a payload string of the cell's size. The same call is measured
//!   in the same rounds on the fake worker's own pipes ("direct", tool
//!   `echo`) and through `mcpvisor run`, so the gateway is compared with
//!   both; which side goes first rotates from round to round.
//! - Lazy start: servers with `"start": "lazy"` whose lists are already in
//!   the list cache (a first run, not timed, fills it). Timed from the
//!   spawn of `serve` to its answers to `initialize` and to `tools/list`
//!   (sent right after `notifications/initialized`). Every fake worker runs
//!   with `--log-file`, which it creates as it starts: no file after a run
//!   and no child of the gateway in `/proc` when the list was answered
//!   mean that no server was started. The filling run must leave one file
//!   per server, which shows that the check sees a start.
//! - Memory: the gateway's own peak RSS (VmHWM; its children, the fake
//!   workers, are not counted) with 1, 5 and 20 eager servers, after the
//!   handshake and after a load of 64 B calls at concurrency 32 spread
//!   over every server.
//!
//! Every gateway runs with `-q --no-watch`, as `run` does here, and with
//! `MCPVISOR_CACHE_DIR` set to a directory of its own under the temp dir,
//! removed afterwards: the user's list cache is neither read nor written.

pub mod report;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use serde_json::json;
use tokio::process::Command;
use tokio::time::Instant;

use crate::load::{self, Load, Stop};
use crate::machine;
use crate::payload::{Echo, Payloads};
use crate::peer::{Binaries, Peer, Via};
use crate::scenario::{self, Samples, Throughput, progress, samples};
use crate::stats::Latencies;

/// The variable that moves mcpvisor's caches (the gateway's list cache).
const CACHE_DIR_VAR: &str = "MCPVISOR_CACHE_DIR";
/// Set in every server's environment to `<this bench's pid>/<name>`, so
/// that its processes can be told apart in `/proc` (which server a pid
/// is, and whether any is left after the gateway stopped).
pub const SERVER_MARK: &str = "MCPVISOR_BENCH_SERVER";
/// `mcpvisor serve`'s arguments before its config file.
pub const SERVE_ARGS: [&str; 4] = ["serve", "-q", "--no-watch", "--config"];
/// The one server of the throughput cells, and the tool they call.
pub const SERVER: &str = "bench";
pub const TOOL: &str = "bench__echo";

/// What is measured of the gateway, and how much.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Payload sizes × concurrencies of the throughput cells.
    pub cells: Vec<(usize, usize)>,
    /// Lazy servers in the start-up config.
    pub lazy_servers: usize,
    /// Timed starts of that config.
    pub lazy_samples: usize,
    /// Eager servers behind the gateway, one memory figure each.
    pub memory_backends: Vec<usize>,
    /// Calls of the load before the last memory reading.
    pub memory_requests: u64,
}

impl Plan {
    pub fn full() -> Self {
        Self {
            cells: vec![(64, 1), (64, 32)],
            lazy_servers: 20,
            lazy_samples: 10,
            memory_backends: vec![1, 5, 20],
            memory_requests: 100_000,
        }
    }

    pub fn quick() -> Self {
        Self {
            lazy_samples: 3,
            memory_requests: 10_000,
            ..Self::full()
        }
    }
}

/// Everything measured of the gateway in one run.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub cells: Vec<Cell>,
    pub lazy_start: LazyStart,
    pub memory: Vec<Memory>,
}

/// One throughput cell, the same `tools/call` on all three sides.
#[derive(Debug, Serialize)]
pub struct Cell {
    pub payload_bytes: usize,
    pub concurrency: usize,
    /// The fake worker's own pipes, tool `echo`.
    pub direct: Throughput,
    /// `mcpvisor run`, tool `echo`.
    pub run: Throughput,
    /// `mcpvisor serve`, tool `bench__echo`.
    pub serve: Throughput,
}

#[derive(Debug, Serialize)]
pub struct LazyStart {
    pub servers: usize,
    /// Tools the gateway listed (every server's, from the cache).
    pub tools: usize,
    /// Spawn → `initialize` answered.
    pub initialize: Samples,
    /// Spawn → `tools/list` answered.
    pub tools_list: Samples,
    /// Servers the run that filled the cache started (each once).
    pub started_filling: usize,
    /// The most servers any timed run started (0: none ever did).
    pub started: usize,
}

/// The gateway's own peak memory with `backends` eager servers.
#[derive(Debug, Serialize)]
pub struct Memory {
    pub backends: usize,
    pub after_handshake_kib: u64,
    /// Calls in the load before `after_load_kib` was read.
    pub requests: u64,
    pub after_load_kib: u64,
}

/// Measures every part of `plan.gateway`, reporting progress on stderr.
pub async fn run(bins: &Binaries, plan: &scenario::Plan) -> anyhow::Result<Figures> {
    let gw = &plan.gateway;
    let one = Gateway::new(bins, "cells", &[Server::eager(SERVER)])?;
    let mut cells = Vec::new();
    for &(payload, concurrency) in &gw.cells {
        progress(format_args!(
            "serve: tools/call, {payload} B at concurrency {concurrency} (direct, run, serve)"
        ));
        cells.push(cell(bins, plan, &one, payload, concurrency).await?);
    }
    drop(one);
    progress(format_args!(
        "serve: start with {} lazy servers, lists cached, {} times",
        gw.lazy_servers, gw.lazy_samples
    ));
    let lazy_start = lazy_start(bins, gw).await?;
    let mut memory = Vec::new();
    for &backends in &gw.memory_backends {
        progress(format_args!(
            "serve: peak memory with {backends} servers over {} calls",
            gw.memory_requests
        ));
        memory.push(peak_memory(bins, backends, gw.memory_requests).await?);
    }
    Ok(Figures {
        cells,
        lazy_start,
        memory,
    })
}

// === the config ===

/// One server of a config file: the fake worker with these flags.
#[derive(Debug, Clone)]
pub struct Server {
    name: String,
    args: Vec<String>,
    lazy: bool,
}

impl Server {
    pub fn eager(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            args: Vec::new(),
            lazy: false,
        }
    }

    /// Started at first use, its lists read from the cache until then; it
    /// creates `log` as it starts.
    fn lazy(name: &str, log: &Path) -> anyhow::Result<Self> {
        let log = log
            .to_str()
            .with_context(|| format!("{} is not UTF-8", log.display()))?;
        Ok(Self {
            name: name.to_owned(),
            args: vec!["--log-file".to_owned(), log.to_owned()],
            lazy: true,
        })
    }
}

/// A config file of fake workers and a list cache, in a directory of the
/// temp dir that is removed on drop.
#[derive(Debug)]
pub struct Gateway {
    dir: TempDir,
    config: PathBuf,
}

impl Gateway {
    /// Writes a config file (Claude Desktop's format) with `servers`.
    pub fn new(bins: &Binaries, label: &str, servers: &[Server]) -> anyhow::Result<Self> {
        let dir = TempDir::new(label)?;
        let config = dir.path().join("servers.json");
        let gateway = Self { dir, config };
        gateway.rewrite(bins, servers)?;
        Ok(gateway)
    }

    /// Replaces the config file with one of `servers`, at once (written
    /// beside it, then renamed over it): a gateway reading it sees the old
    /// file or the new one, never a part.
    pub fn rewrite(&self, bins: &Binaries, servers: &[Server]) -> anyhow::Result<()> {
        let worker = bins
            .worker
            .to_str()
            .with_context(|| format!("{} is not UTF-8", bins.worker.display()))?;
        let entries: serde_json::Map<String, serde_json::Value> = servers
            .iter()
            .map(|s| {
                let start = if s.lazy { "lazy" } else { "eager" };
                let mark = server_mark(&s.name);
                let entry = json!({
                    "command": worker,
                    "args": s.args,
                    "start": start,
                    "env": { SERVER_MARK: mark },
                });
                (s.name.clone(), entry)
            })
            .collect();
        let text = serde_json::to_string_pretty(&json!({ "mcpServers": entries }))?;
        let next = self.dir.path().join("servers.json.next");
        std::fs::write(&next, text).with_context(|| format!("cannot write {}", next.display()))?;
        std::fs::rename(&next, &self.config)
            .with_context(|| format!("cannot replace {}", self.config.display()))
    }

    /// The config file.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// Points `command`'s list cache at this directory.
    pub fn cache_env(&self, command: &mut Command) {
        command.env(CACHE_DIR_VAR, self.dir.path().join("cache"));
    }

    /// Points `command`'s list cache and its state directory (the pin
    /// store) at this directory: a gateway started so reads only the pins
    /// of its own servers, not those every earlier cell left, and never
    /// writes to the state directory of whoever runs the benchmark.
    pub fn own_env(&self, command: &mut Command) {
        self.cache_env(command);
        command.env("XDG_STATE_HOME", self.dir.path().join("state"));
    }

    /// Starts `mcpvisor serve` on this config. Time it from just before
    /// this call.
    pub fn spawn(&self, bins: &Binaries) -> anyhow::Result<Peer> {
        let mut command = Command::new(&bins.mcpvisor);
        command.args(SERVE_ARGS).arg(self.config());
        self.own_env(&mut command);
        Peer::start(Via::Serve, command, bins.show_stderr)
    }
}

/// The value of [`SERVER_MARK`] in the environment of server `name`'s
/// processes.
pub fn server_mark(name: &str) -> String {
    format!("{}/{name}", std::process::id())
}

/// A fresh directory under the temp dir, removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> anyhow::Result<Self> {
        let path =
            std::env::temp_dir().join(format!("mcpvisor-bench-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// === throughput ===

/// How the client reaches the fake worker in a gateway cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Direct,
    Run,
    Serve,
}

impl Side {
    /// All three, rotated by `round` so that none always goes first.
    fn order(round: usize) -> [Side; 3] {
        let mut sides = [Side::Direct, Side::Run, Side::Serve];
        sides.rotate_left(round % 3);
        sides
    }
}

async fn cell(
    bins: &Binaries,
    plan: &scenario::Plan,
    gateway: &Gateway,
    payload: usize,
    concurrency: usize,
) -> anyhow::Result<Cell> {
    let own = Payloads::with(payload, Echo::Tool(vec!["echo".to_owned()]));
    let routed = Payloads::with(payload, Echo::Tool(vec![TOOL.to_owned()]));
    let mut totals: [(u64, Duration, Latencies); 3] = Default::default();
    for round in 0..plan.rounds {
        for side in Side::order(round) {
            let (mut peer, payloads) = match side {
                Side::Direct => (Peer::spawn(bins, Via::Direct)?, &own),
                Side::Run => (Peer::spawn(bins, Via::Mcpvisor)?, &own),
                Side::Serve => (gateway.spawn(bins)?, &routed),
            };
            peer.initialize().await?;
            let warmup = Load {
                payload,
                concurrency,
                stop: Stop::After(plan.warmup),
            };
            load::run(&mut peer, warmup, payloads).await?;
            let measured = Load {
                stop: Stop::After(plan.cell_time),
                ..warmup
            };
            let outcome = load::run(&mut peer, measured, payloads).await?;
            peer.close().await?;
            let total = &mut totals[side as usize];
            total.0 += outcome.requests;
            total.1 += outcome.elapsed;
            total.2.extend(&outcome.latencies);
        }
    }
    let [direct, run, serve] =
        totals.map(|(requests, elapsed, latencies)| Throughput::of(requests, elapsed, &latencies));
    Ok(Cell {
        payload_bytes: payload,
        concurrency,
        direct,
        run,
        serve,
    })
}

// === lazy start ===

async fn lazy_start(bins: &Binaries, plan: &Plan) -> anyhow::Result<LazyStart> {
    let n = plan.lazy_servers;
    let logs = TempDir::new("lazy-started")?;
    let servers = (1..=n)
        .map(|i| {
            let name = format!("lazy{i:02}");
            let log = logs.path().join(format!("{name}.log"));
            Server::lazy(&name, &log)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let gateway = Gateway::new(bins, "lazy", &servers)?;

    // No lists cached yet: the gateway starts each server once to read
    // them, and its initialize waits for that.
    let mut peer = gateway.spawn(bins)?;
    peer.initialize().await?;
    let tools = list_tools(&mut peer).await?;
    peer.close().await?;
    let started_filling = started(logs.path())?;
    ensure!(
        started_filling == n,
        "the run that fills the list cache started {started_filling} of the {n} lazy servers \
         (each should start once to be listed)"
    );
    ensure!(tools > 0, "the gateway listed no tools");
    forget_starts(logs.path())?;

    let mut initialize = Latencies::default();
    let mut tools_list = Latencies::default();
    let mut most_started = 0;
    for _ in 0..plan.lazy_samples {
        let spawned = Instant::now();
        let mut peer = gateway.spawn(bins)?;
        let initialized = peer.initialize().await?;
        let listed_tools = list_tools(&mut peer).await?;
        let listed = Instant::now();
        let children = machine::children(peer.pid).len();
        peer.close().await?;
        ensure!(
            listed_tools == tools,
            "the gateway listed {listed_tools} tools from the cache, {tools} when it started \
             the servers"
        );
        initialize.push(initialized - spawned);
        tools_list.push(listed - spawned);
        most_started = most_started.max(children).max(started(logs.path())?);
        forget_starts(logs.path())?;
    }
    drop(gateway);
    Ok(LazyStart {
        servers: n,
        tools,
        initialize: samples(&initialize),
        tools_list: samples(&tools_list),
        started_filling,
        started: most_started,
    })
}

/// The gateway's whole tool list (one page), counted.
async fn list_tools(peer: &mut Peer) -> anyhow::Result<usize> {
    let answer = peer.call("tools/list", "{}").await?;
    let result = &answer["result"];
    ensure!(
        result["nextCursor"].is_null(),
        "the tool list has more than one page"
    );
    match result["tools"].as_array() {
        Some(tools) => Ok(tools.len()),
        None => bail!("tools/list was answered with {answer}"),
    }
}

/// How many fake workers started: the log files they created.
fn started(logs: &Path) -> anyhow::Result<usize> {
    let entries =
        std::fs::read_dir(logs).with_context(|| format!("cannot read {}", logs.display()))?;
    Ok(entries.filter_map(Result::ok).count())
}

fn forget_starts(logs: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(logs)? {
        std::fs::remove_file(entry?.path())?;
    }
    Ok(())
}

// === memory ===

async fn peak_memory(bins: &Binaries, backends: usize, requests: u64) -> anyhow::Result<Memory> {
    let names: Vec<String> = (1..=backends).map(|i| format!("s{i:02}")).collect();
    let servers: Vec<Server> = names.iter().map(|name| Server::eager(name)).collect();
    let gateway = Gateway::new(bins, "memory", &servers)?;
    let mut peer = gateway.spawn(bins)?;
    peer.initialize().await?;
    list_tools(&mut peer).await?;
    let after_handshake_kib = machine::peak_rss_kib(peer.pid)?;
    let tools = names.iter().map(|name| format!("{name}__echo")).collect();
    let payloads = Payloads::with(64, Echo::Tool(tools));
    let load = Load {
        payload: 64,
        concurrency: 32,
        stop: Stop::Count(requests),
    };
    let outcome = load::run(&mut peer, load, &payloads).await?;
    let after_load_kib = machine::peak_rss_kib(peer.pid)?;
    peer.close().await?;
    Ok(Memory {
        backends,
        after_handshake_kib,
        requests: outcome.requests,
        after_load_kib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_goes_first_in_turn() {
        let firsts: Vec<Side> = (0..3).map(|round| Side::order(round)[0]).collect();
        assert_eq!(firsts, [Side::Direct, Side::Run, Side::Serve]);
        assert_eq!(Side::order(3), Side::order(0));
    }
}
