//! `mcpvisor-bench scan`: the envelope reading against serde_json for as
//! long as asked, the long version of the test
//! `the_envelope_reading_agrees_with_serde_json` (crates/jsonrpc).
//!
//! Each seed checks the same fixed cases first (the edge cases and every
//! single-byte change of a few messages), then random lines from that seed
//! until the budget is spent; seeds follow one another from `--seed`, so a
//! long run covers many streams of random lines, and a disagreement names
//! its seed for a rerun. It stands in for a coverage-guided fuzzer, which
//! would need a nightly toolchain.

use std::time::{Duration, Instant};

use anyhow::bail;
use mcpvisor_jsonrpc::differential::{self, Counts};

/// The options of `mcpvisor-bench scan`.
#[derive(Debug, clap::Args)]
pub struct ScanArgs {
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Random lines per seed.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    lines: u64,
    /// Stop after this many seconds (the seed under way is cut short).
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    seconds: u64,
    /// Stop after this many seeds.
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
}

/// Runs seeds until the time or the seeds are spent; fails on the first
/// disagreement.
pub fn run(args: &ScanArgs) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut total = Counts::default();
    let mut seed = args.seed;
    let mut seeds = 0;
    while Instant::now() < until && args.seeds.is_none_or(|n| seeds < n) {
        let mut random = 0;
        let counts = differential::run(seed, |_| {
            random += 1;
            // The clock is read every 1,024 lines.
            random <= args.lines && (random % 1024 != 0 || Instant::now() < until)
        });
        let counts = match counts {
            Ok(counts) => counts,
            Err(disagreement) => bail!("seed {seed}: {disagreement}"),
        };
        total.lines += counts.lines;
        total.scanned += counts.scanned;
        total.serde += counts.serde;
        total.refused += counts.refused;
        total.streams += counts.streams;
        seeds += 1;
        seed += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{} lines in {elapsed:.1} s ({:.0} lines/s), seeds {}..{}: {} messages scanned, {} left to serde, {} refused; {} streams framed; no disagreement",
        total.lines,
        total.lines as f64 / elapsed.max(1e-9),
        args.seed,
        seed,
        total.scanned,
        total.serde,
        total.refused,
        total.streams
    );
    Ok(())
}
