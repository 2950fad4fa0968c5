//! What one run measures, in order, and the figures it keeps.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::gateway;
use crate::inspect::{self, InspectOutcome};
use crate::load::{self, Load, Stop};
use crate::machine;
use crate::payload::Payloads;
use crate::peer::{Binaries, Peer, Via};
use crate::stats::Latencies;

use mcpvisor_jsonrpc::WORKER_LOST;

/// How long and how often each part runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Payload sizes × concurrencies of the throughput cells.
    pub cells: Vec<(usize, usize)>,
    /// Measured time per cell, per side, per round.
    pub cell_time: Duration,
    /// Unmeasured load on each fresh peer before a cell is measured.
    pub warmup: Duration,
    /// Rounds per cell; the side that goes first alternates.
    pub rounds: usize,
    pub big_payload: usize,
    pub big_samples: usize,
    /// Requests after which mcpvisor's peak memory is read (cumulative).
    pub memory_marks: [u64; 2],
    pub cold_samples: usize,
    pub crash_samples: usize,
    /// Runs of `mcpvisor inspect` on server-everything, and as many direct
    /// starts of it.
    pub inspect_samples: usize,
    /// What is measured of `mcpvisor serve`.
    pub gateway: gateway::Plan,
}

impl Plan {
    /// The documented run: about a minute on two cores.
    pub fn full() -> Self {
        Self {
            quick: false,
            cells: vec![(64, 1), (64, 32), (65_536, 1), (65_536, 32)],
            cell_time: Duration::from_secs(1),
            warmup: Duration::from_millis(300),
            // A multiple of the three sides of a cell, so that each goes
            // first as often as the others.
            rounds: 3,
            big_payload: 16 << 20,
            big_samples: 5,
            memory_marks: [100_000, 1_000_000],
            cold_samples: 20,
            crash_samples: 20,
            inspect_samples: 5,
            gateway: gateway::Plan::full(),
        }
    }

    /// A smoke test of every part, in seconds.
    pub fn quick() -> Self {
        Self {
            quick: true,
            cell_time: Duration::from_millis(200),
            warmup: Duration::from_millis(50),
            rounds: 1,
            big_samples: 2,
            memory_marks: [10_000, 50_000],
            cold_samples: 4,
            crash_samples: 3,
            inspect_samples: 2,
            gateway: gateway::Plan::quick(),
            ..Self::full()
        }
    }
}

/// Both sides of one comparison.
#[derive(Debug, Serialize)]
pub struct Pair<T> {
    pub direct: T,
    pub mcpvisor: T,
}

/// One throughput cell: a payload size at a concurrency.
#[derive(Debug, Serialize)]
pub struct Cell {
    pub payload_bytes: usize,
    pub concurrency: usize,
    #[serde(flatten)]
    pub figures: Pair<Throughput>,
    /// The same load through [`Via::Relay`]: the floor for a process in
    /// between, measured in the same rounds.
    pub relay: Throughput,
}

#[derive(Debug, Serialize)]
pub struct Throughput {
    pub requests: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Throughput {
    /// The figures of one side's rounds taken together.
    pub fn of(requests: u64, elapsed: Duration, latencies: &Latencies) -> Self {
        Self {
            requests,
            seconds: elapsed.as_secs_f64(),
            per_second: requests as f64 / elapsed.as_secs_f64().max(1e-9),
            p50_us: latencies.quantile_us(0.5),
            p99_us: latencies.quantile_us(0.99),
        }
    }
}

/// Repeated one-off timings.
#[derive(Debug, Serialize)]
pub struct Samples {
    pub median_ms: f64,
    pub samples_ms: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct Big {
    pub payload_bytes: usize,
    #[serde(flatten)]
    pub round_trip: Pair<Samples>,
}

/// mcpvisor's own peak resident memory (VmHWM) under a 64 B, concurrency
/// 32 load.
#[derive(Debug, Serialize)]
pub struct Memory {
    pub after_handshake_kib: u64,
    pub marks: Vec<MemoryMark>,
    pub growth_percent: f64,
}

#[derive(Debug, Serialize)]
pub struct MemoryMark {
    pub requests: u64,
    pub peak_kib: u64,
    /// What is resident at the mark, private and file-backed apart.
    pub now: machine::Resident,
}

#[derive(Debug, Serialize)]
pub struct Crash {
    /// From sending the `crash` call to the next call answered.
    pub recovery: Samples,
    /// From sending the `crash` call to its `-32010` error.
    pub detection: Samples,
    /// The fake worker's own spawn → `initialize` answer (the direct cold
    /// start of this run).
    pub worker_start_median_ms: f64,
    pub over_worker_start_ms: f64,
}

/// Everything one run measured.
#[derive(Debug, Serialize)]
pub struct Results {
    pub date: String,
    pub cores: usize,
    pub cpu: String,
    pub quick: bool,
    pub cells: Vec<Cell>,
    pub big: Big,
    pub memory: Memory,
    pub cold_start: Pair<Samples>,
    pub crash: Crash,
    pub inspect: InspectOutcome,
    pub gateway: gateway::Figures,
}

/// Runs the whole plan, reporting progress on stderr.
/// `everything` is server-everything's `dist/index.js`.
pub async fn run(bins: &Binaries, plan: &Plan, everything: &Path) -> anyhow::Result<Results> {
    let mut cells = Vec::new();
    for &(payload, concurrency) in &plan.cells {
        progress(format_args!(
            "throughput: {payload} B at concurrency {concurrency}"
        ));
        cells.push(cell(bins, plan, payload, concurrency).await?);
    }
    progress(format_args!(
        "round trip of one {} MiB message",
        plan.big_payload >> 20
    ));
    let big = big(bins, plan).await?;
    progress(format_args!(
        "mcpvisor's peak memory over {} requests",
        plan.memory_marks[1]
    ));
    let memory = memory(bins, plan).await?;
    progress(format_args!("cold start, {} times each", plan.cold_samples));
    let cold_start = cold_start(bins, plan).await?;
    progress(format_args!("crash recovery, {} times", plan.crash_samples));
    let crash = crash(bins, plan, cold_start.direct.median_ms).await?;
    progress(format_args!(
        "mcpvisor inspect on server-everything, {} times",
        plan.inspect_samples
    ));
    let inspect = inspect::run(bins, everything, plan.inspect_samples).await?;
    if let InspectOutcome::Skipped { reason } = &inspect {
        progress(format_args!("skipped the inspect measurement: {reason}"));
    }
    let gateway = gateway::run(bins, plan).await?;
    Ok(Results {
        date: machine::today(),
        cores: machine::cores(),
        cpu: machine::cpu_model(),
        quick: plan.quick,
        cells,
        big,
        memory,
        cold_start,
        crash,
        inspect,
        gateway,
    })
}

pub fn progress(what: std::fmt::Arguments<'_>) {
    eprintln!("mcpvisor-bench: {what}");
}

/// A fresh peer with the handshake done.
async fn ready_peer(bins: &Binaries, via: Via) -> anyhow::Result<Peer> {
    let mut peer = Peer::spawn(bins, via)?;
    peer.initialize().await?;
    Ok(peer)
}

async fn cell(
    bins: &Binaries,
    plan: &Plan,
    payload: usize,
    concurrency: usize,
) -> anyhow::Result<Cell> {
    let payloads = Payloads::new(payload);
    let sides = [Via::Direct, Via::Mcpvisor, Via::Relay];
    let mut totals: [(u64, Duration, Latencies); 3] = Default::default();
    for round in 0..plan.rounds {
        // Each side goes first in turn.
        for side in (0..sides.len()).map(|k| (round + k) % sides.len()) {
            let via = sides[side];
            let mut peer = ready_peer(bins, via).await?;
            let warmup = Load {
                payload,
                concurrency,
                stop: Stop::After(plan.warmup),
            };
            load::run(&mut peer, warmup, &payloads).await?;
            let measured = Load {
                stop: Stop::After(plan.cell_time),
                ..warmup
            };
            let outcome = load::run(&mut peer, measured, &payloads).await?;
            peer.close().await?;
            let total = &mut totals[side];
            total.0 += outcome.requests;
            total.1 += outcome.elapsed;
            total.2.extend(&outcome.latencies);
        }
    }
    let [direct, mcpvisor, relay] =
        totals.map(|(requests, elapsed, latencies)| Throughput::of(requests, elapsed, &latencies));
    Ok(Cell {
        payload_bytes: payload,
        concurrency,
        figures: Pair { direct, mcpvisor },
        relay,
    })
}

pub fn samples(latencies: &Latencies) -> Samples {
    Samples {
        median_ms: latencies.median_ms(),
        samples_ms: latencies.samples_ms(),
    }
}

async fn big(bins: &Binaries, plan: &Plan) -> anyhow::Result<Big> {
    let payloads = Payloads::new(plan.big_payload);
    let mut peers = [
        ready_peer(bins, Via::Direct).await?,
        ready_peer(bins, Via::Mcpvisor).await?,
    ];
    let mut times = [Latencies::default(), Latencies::default()];
    let one = Load {
        payload: plan.big_payload,
        concurrency: 1,
        stop: Stop::Count(1),
    };
    for round in 0..plan.big_samples {
        for via in Via::order(round) {
            let outcome = load::run(&mut peers[via as usize], one, &payloads).await?;
            times[via as usize].extend(&outcome.latencies);
        }
    }
    for peer in peers {
        peer.close().await?;
    }
    Ok(Big {
        payload_bytes: plan.big_payload,
        round_trip: Pair {
            direct: samples(&times[0]),
            mcpvisor: samples(&times[1]),
        },
    })
}

async fn memory(bins: &Binaries, plan: &Plan) -> anyhow::Result<Memory> {
    let payloads = Payloads::new(64);
    // File watching on, as `run` has it by default: the worker's own file
    // is watched, as a server author's would be.
    let mut command = tokio::process::Command::new(&bins.mcpvisor);
    command.args(["run", "-q", "--"]).arg(&bins.worker);
    let mut peer = Peer::start(Via::Mcpvisor, command, bins.show_stderr)?;
    peer.initialize().await?;
    let after_handshake_kib = machine::peak_rss_kib(peer.pid)?;
    let mut marks = Vec::new();
    let mut done = 0;
    for requests in plan.memory_marks {
        let load = Load {
            payload: 64,
            concurrency: 32,
            stop: Stop::Count(requests - done),
        };
        let outcome = load::run(&mut peer, load, &payloads).await?;
        done += outcome.requests;
        marks.push(MemoryMark {
            requests: done,
            peak_kib: machine::peak_rss_kib(peer.pid)?,
            now: machine::resident(peer.pid)?,
        });
    }
    peer.close().await?;
    let growth_percent = match marks.as_slice() {
        [first, .., last] => {
            (last.peak_kib as f64 - first.peak_kib as f64) / first.peak_kib.max(1) as f64 * 100.0
        }
        _ => 0.0,
    };
    Ok(Memory {
        after_handshake_kib,
        marks,
        growth_percent,
    })
}

async fn cold_start(bins: &Binaries, plan: &Plan) -> anyhow::Result<Pair<Samples>> {
    let mut times = [Latencies::default(), Latencies::default()];
    for round in 0..plan.cold_samples {
        for via in Via::order(round) {
            let spawned = Instant::now();
            let mut peer = Peer::spawn(bins, via)?;
            let answered = peer.initialize().await?;
            times[via as usize].push(answered - spawned);
            peer.close().await?;
        }
    }
    Ok(Pair {
        direct: samples(&times[0]),
        mcpvisor: samples(&times[1]),
    })
}

async fn crash(bins: &Binaries, plan: &Plan, worker_start_ms: f64) -> anyhow::Result<Crash> {
    let mut recovery = Latencies::default();
    let mut detection = Latencies::default();
    for _ in 0..plan.crash_samples {
        let mut peer = ready_peer(bins, Via::Mcpvisor).await?;
        let (first_pid, generation) = whoami(&mut peer).await?;
        ensure!(
            generation == 1,
            "the first worker reports generation {generation}"
        );
        let crashed = Instant::now();
        let answer = peer
            .call("tools/call", r#"{"name":"crash","arguments":{}}"#)
            .await?;
        let detected = Instant::now();
        if answer["error"]["code"].as_i64() != Some(WORKER_LOST) {
            bail!("the crashing call was answered with {answer}, not error {WORKER_LOST}");
        }
        let (pid, generation) = whoami(&mut peer).await?;
        let recovered = Instant::now();
        ensure!(
            pid != first_pid && generation == 2,
            "after the crash the call was answered by pid {pid} generation {generation}, \
             not a new worker of generation 2"
        );
        peer.close().await?;
        detection.push(detected - crashed);
        recovery.push(recovered - crashed);
    }
    let recovery = samples(&recovery);
    Ok(Crash {
        over_worker_start_ms: recovery.median_ms - worker_start_ms,
        recovery,
        detection: samples(&detection),
        worker_start_median_ms: worker_start_ms,
    })
}

/// The fake worker's `whoami` tool: (pid, generation).
async fn whoami(peer: &mut Peer) -> anyhow::Result<(u64, u64)> {
    let answer = peer
        .call("tools/call", r#"{"name":"whoami","arguments":{}}"#)
        .await?;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .with_context(|| format!("whoami was answered with {answer}"))?;
    let me: Value = serde_json::from_str(text).context("whoami's text is not JSON")?;
    match (me["pid"].as_u64(), me["generation"].as_u64()) {
        (Some(pid), Some(generation)) => Ok((pid, generation)),
        _ => bail!("whoami answered {text}"),
    }
}
