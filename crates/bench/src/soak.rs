//! `mcpvisor-bench load`: one steady load on one peer, for a profiler.

use std::time::Duration;

use crate::load::{self, Load, Stop};
use crate::payload::Payloads;
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
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ViaArg {
    Direct,
    Mcpvisor,
}

pub async fn run(bins: &Binaries, args: &SoakArgs) -> anyhow::Result<()> {
    let via = match args.via {
        ViaArg::Direct => Via::Direct,
        ViaArg::Mcpvisor => Via::Mcpvisor,
    };
    let mut peer = Peer::spawn(bins, via)?;
    peer.initialize().await?;
    eprintln!("mcpvisor-bench: loading {via:?} peer pid {}", peer.pid);
    let payloads = Payloads::new(args.payload);
    let load = Load {
        payload: args.payload,
        concurrency: args.concurrency,
        stop: Stop::After(Duration::from_secs_f64(args.seconds)),
    };
    let outcome = load::run(&mut peer, load, &payloads).await?;
    peer.close().await?;
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
