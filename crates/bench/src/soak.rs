//! `mcpvisor-bench load`: one steady load on one peer, for a profiler.

use std::time::Duration;

use crate::gateway::{self, Gateway, Server};
use crate::load::{self, Load, Stop};
use crate::payload::{Echo, Payloads};
use crate::peer::{Binaries, Peer, Via};

/// The load's shape and length.
#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Which peer to load.
    #[arg(long, value_enum, default_value = "mcpvisor")]
    via: ViaArg,
    /// The payload string's size in bytes.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Call the fake worker's `echo` tool instead of sending `bench/echo`
    /// (always so through `serve`, as `bench__echo`).
    #[arg(long)]
    tool: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ViaArg {
    Direct,
    /// `mcpvisor run`.
    Mcpvisor,
    /// `mcpvisor serve` with the fake worker as its one server.
    Serve,
    /// `cat | fake-worker | cat`: the floor for a relay process.
    Relay,
}

pub async fn run(bins: &Binaries, args: &SoakArgs) -> anyhow::Result<()> {
    // Held while the load runs: the config file of `serve`.
    let mut served = None;
    let (mut peer, echo) = match args.via {
        ViaArg::Direct | ViaArg::Mcpvisor | ViaArg::Relay => {
            let via = match args.via {
                ViaArg::Direct => Via::Direct,
                ViaArg::Relay => Via::Relay,
                _ => Via::Mcpvisor,
            };
            let echo = if args.tool {
                Echo::Tool(vec!["echo".to_owned()])
            } else {
                Echo::Method
            };
            (Peer::spawn(bins, via)?, echo)
        }
        ViaArg::Serve => {
            let config = served.insert(Gateway::new(
                bins,
                "load",
                &[Server::eager(gateway::SERVER)],
            )?);
            let echo = Echo::Tool(vec![gateway::TOOL.to_owned()]);
            (config.spawn(bins)?, echo)
        }
    };
    peer.initialize().await?;
    eprintln!(
        "mcpvisor-bench: loading {:?} peer pid {}",
        peer.via, peer.pid
    );
    let payloads = Payloads::with(args.payload, echo);
    let load = Load {
        payload: args.payload,
        concurrency: args.concurrency,
        stop: Stop::After(Duration::from_secs_f64(args.seconds)),
    };
    let outcome = load::run(&mut peer, load, &payloads).await?;
    peer.close().await?;
    drop(served);
    let secs = outcome.elapsed.as_secs_f64();
    println!(
        "{} requests in {secs:.2} s: {:.0} req/s, p50 {:.1} µs, p99 {:.1} µs",
        outcome.requests,
        outcome.requests as f64 / secs.max(1e-9),
        outcome.latencies.quantile_us(0.5),
        outcome.latencies.quantile_us(0.99)
    );
    Ok(())
}
