//! mcpvisor's HTTP front against the bridges people use, in one run.
//!
//! `mcpvisor-bench peers` puts each of these in front of the same fake
//! worker and calls its `echo` tool (a 64 B payload) over Streamable HTTP:
//!
//! - `mcpvisor run --http` (the fake worker served as itself);
//! - supergateway (npm), `--stdio WORKER --outputTransport streamableHttp
//!   --stateful` (one worker per session, as one client here has);
//! - mcp-proxy (PyPI), `--port P -- WORKER` (its Streamable HTTP at /mcp);
//!
//! and, as the floor, the fake worker's own stdio pipes with the bench's
//! stdio client ("direct"). Each side gets one session (one process
//! behind it); a warm-up, then concurrency 1 (one call at a time: its p50
//! is the latency) and concurrency 32 (32 calls in flight on the one
//! session: its rate is the throughput). Every answer is checked to be its
//! own request's echo. The sides take turns going first over `rounds`
//! rounds. The peers are installed by `scripts/bench-peers-setup.sh` under
//! `.cache/bench-peers/` (run from the repository's root).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use serde::Serialize;
use tokio::process::Command;
use tokio::time::Instant;

use crate::http::{Client, Front, Session, check_echo, join_all, worker_path};
use crate::load::{self, Load, Stop};
use crate::payload::{Echo, Payloads, Scratch};
use crate::peer::{Binaries, Peer, Via};
use crate::scenario::progress;
use crate::stats::Latencies;

const SETUP: &str = "scripts/bench-peers-setup.sh";
const SUPERGATEWAY: &str = ".cache/bench-peers/npm/node_modules/supergateway/dist/index.js";
const MCP_PROXY: &str = ".cache/bench-peers/venv/bin/mcp-proxy";
const PAYLOAD: usize = 64;
const CONCURRENCY: usize = 32;

#[derive(Debug, clap::Args)]
pub struct PeersArgs {
    /// Seconds of each measured load (after a one-second warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Rounds; the sides take turns going first.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Do not run the installer (the peers are already under .cache/).
    #[arg(long)]
    no_setup: bool,
    /// `node` for supergateway.
    #[arg(long, default_value = "node")]
    node: PathBuf,
    /// Write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    raw: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Side {
    Direct,
    McpvisorRunHttp,
    Supergateway,
    McpProxy,
}

const SIDES: [Side; 4] = [
    Side::Direct,
    Side::McpvisorRunHttp,
    Side::Supergateway,
    Side::McpProxy,
];

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Direct => "direct (stdio, the floor)",
            Side::McpvisorRunHttp => "mcpvisor run --http",
            Side::Supergateway => "supergateway 4.0.0 (streamableHttp, stateful)",
            Side::McpProxy => "mcp-proxy 0.13.0 (streamable HTTP)",
        }
    }
}

#[derive(Debug, Default, Serialize)]
struct Figures {
    side: Option<Side>,
    c1_calls: u64,
    c1_p50_us: f64,
    c1_p99_us: f64,
    c32_calls: u64,
    c32_per_sec: f64,
    c32_p50_us: f64,
    #[serde(skip)]
    c1: Latencies,
    #[serde(skip)]
    c32: Latencies,
    #[serde(skip)]
    c32_time: Duration,
}

pub async fn run(bins: &Binaries, args: &PeersArgs) -> anyhow::Result<()> {
    if !args.no_setup {
        ensure!(
            Path::new(SETUP).is_file(),
            "{SETUP} not found: run mcpvisor-bench peers from the repository's root"
        );
        progress(format_args!("installing the peers ({SETUP})"));
        let status = Command::new("bash").arg(SETUP).status().await?;
        ensure!(status.success(), "{SETUP} failed: {status}");
    }
    for path in [SUPERGATEWAY, MCP_PROXY] {
        ensure!(
            Path::new(path).is_file(),
            "{path} is missing: run {SETUP} first"
        );
    }
    let length = Duration::from_secs_f64(args.seconds);
    let mut figures: Vec<Figures> = SIDES
        .iter()
        .map(|s| Figures {
            side: Some(*s),
            ..Figures::default()
        })
        .collect();
    for round in 0..args.rounds {
        let mut order = SIDES;
        order.rotate_left(round % SIDES.len());
        for side in order {
            progress(format_args!("round {}: {}", round + 1, side.label()));
            let f = &mut figures[side as usize];
            measure(bins, args, side, length, f)
                .await
                .with_context(|| side.label())?;
        }
    }
    for f in &mut figures {
        f.c1_calls = f.c1.len() as u64;
        f.c1_p50_us = f.c1.quantile_us(0.5);
        f.c1_p99_us = f.c1.quantile_us(0.99);
        f.c32_calls = f.c32.len() as u64;
        f.c32_per_sec = f.c32_calls as f64 / f.c32_time.as_secs_f64().max(1e-9);
        f.c32_p50_us = f.c32.quantile_us(0.5);
    }
    print!("{}", table(&figures));
    if let Some(path) = &args.raw {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn table(figures: &[Figures]) -> String {
    use std::fmt::Write as _;
    let ours = &figures[Side::McpvisorRunHttp as usize];
    let peers = &figures[Side::Supergateway as usize..];
    let best_p50 = peers
        .iter()
        .map(|f| f.c1_p50_us)
        .fold(f64::INFINITY, f64::min);
    let best_rate = peers.iter().map(|f| f.c32_per_sec).fold(0.0, f64::max);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| front | c=1 p50 | c=1 p99 | c=32 calls/s | c=32 p50 |\n| --- | ---: | ---: | ---: | ---: |"
    );
    for f in figures {
        let side = f.side.map(Side::label).unwrap_or_default();
        let _ = writeln!(
            out,
            "| {side} | {:.0} µs | {:.0} µs | {:.0} | {:.0} µs |",
            f.c1_p50_us, f.c1_p99_us, f.c32_per_sec, f.c32_p50_us
        );
    }
    let _ = writeln!(
        out,
        "\nmcpvisor run --http against the best peer: p50 at concurrency 1 {:.2}x, throughput at concurrency 32 {:.2}x",
        ours.c1_p50_us / best_p50,
        ours.c32_per_sec / best_rate
    );
    out
}

async fn measure(
    bins: &Binaries,
    args: &PeersArgs,
    side: Side,
    length: Duration,
    f: &mut Figures,
) -> anyhow::Result<()> {
    let payloads = Payloads::with(PAYLOAD, Echo::Tool(vec!["echo".to_owned()]));
    if side == Side::Direct {
        let mut peer = Peer::spawn(bins, Via::Direct)?;
        peer.initialize().await?;
        for (concurrency, stop) in [
            (1, Stop::After(Duration::from_secs(1))),
            (1, Stop::After(length)),
            (CONCURRENCY, Stop::After(length)),
        ] {
            let load = Load {
                payload: PAYLOAD,
                concurrency,
                stop,
            };
            let outcome = load::run(&mut peer, load, &payloads).await?;
            if let Stop::After(d) = stop
                && d == length
            {
                if concurrency == 1 {
                    f.c1.extend(&outcome.latencies);
                } else {
                    f.c32.extend(&outcome.latencies);
                    f.c32_time += outcome.elapsed;
                }
            }
        }
        peer.close().await?;
        return Ok(());
    }
    let front = start(bins, args, side).await?;
    let client = Client::new(CONCURRENCY)?;
    let session = client.open(&front.url).await?;
    let mut next = 1u64;
    calls(&session, &payloads, 1, Duration::from_secs(1), &mut next).await?;
    let (c1, _) = calls(&session, &payloads, 1, length, &mut next).await?;
    f.c1.extend(&c1);
    let (c32, took) = calls(&session, &payloads, CONCURRENCY, length, &mut next).await?;
    f.c32.extend(&c32);
    f.c32_time += took;
    session.close().await;
    front.stop().await;
    Ok(())
}

/// `concurrency` loops of calls on one session for `length`; every answer
/// checked. Returns the latencies and the time from first send to last
/// answer.
async fn calls(
    session: &Session,
    payloads: &Payloads,
    concurrency: usize,
    length: Duration,
    next: &mut u64,
) -> anyhow::Result<(Latencies, Duration)> {
    let start = Instant::now();
    let until = start + length;
    // Each loop takes ids from its own range.
    let base = *next;
    *next += 1 << 32;
    let loops = (0..concurrency).map(|n| async move {
        let mut latencies = Latencies::default();
        let mut scratch = Scratch::default();
        let mut id = base + ((n as u64) << 24);
        while Instant::now() < until {
            id += 1;
            let body = payloads.request(id, &mut scratch).concat();
            let sent = Instant::now();
            let answer = session.request(body).await?;
            check_echo(payloads, &answer)?;
            latencies.push(sent.elapsed());
        }
        anyhow::Ok(latencies)
    });
    let results = join_all(loops.collect()).await;
    let took = start.elapsed();
    let mut all = Latencies::default();
    for r in results {
        all.extend(&r?);
    }
    Ok((all, took))
}

async fn start(bins: &Binaries, args: &PeersArgs, side: Side) -> anyhow::Result<Front> {
    let worker = worker_path(bins)?;
    match side {
        Side::Direct => unreachable!("direct is measured on pipes"),
        Side::McpvisorRunHttp => Front::run(bins).await,
        Side::Supergateway => {
            let port = free_port()?;
            let mut command = Command::new(&args.node);
            command.arg(SUPERGATEWAY).args([
                "--stdio",
                worker,
                "--outputTransport",
                "streamableHttp",
                "--stateful",
                "--logLevel",
                "none",
                "--port",
                &port.to_string(),
            ]);
            Front::peer(command, format!("http://127.0.0.1:{port}/mcp"), port).await
        }
        Side::McpProxy => {
            let port = free_port()?;
            let mut command = Command::new(MCP_PROXY);
            command.args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--log-level",
                "WARNING",
                "--",
                worker,
            ]);
            Front::peer(command, format!("http://127.0.0.1:{port}/mcp"), port).await
        }
    }
}

/// A port nothing listens on now (bound, then let go).
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
