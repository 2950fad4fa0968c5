//! `mcpvisor-bench`: what mcpvisor costs, measured against a direct
//! connection to the same server.
//!
//! # Theory of operation
//!
//! The benchmark is an MCP client. It runs every load at least twice in one
//! run, on the same machine within seconds: once on the fake worker's own
//! pipes ("direct") and once through `mcpvisor run -q --no-watch --` in
//! front of the same fake worker, and reports each figure with its ratio to
//! direct. The throughput cells run a third time through `cat |
//! fake-worker | cat`, the floor for any relay that is a process of its
//! own. Other work on the machine moves every side alike, so the ratios are
//! what to trust; the absolute figures only hold for this machine at this
//! moment. The side that goes first changes from round to round.
//!
//! The load ([`load`]) is the fake worker's `bench/echo` method, which
//! answers with the request's params as sent and does no other work, so
//! what is measured is the wire: pipes, framing and, through mcpvisor, its
//! envelope peek, id splicing and task hops. The client is one process on
//! a current-thread runtime: a writer keeps N requests in flight on the one
//! pipe, a reader matches answers by id and timestamps them. Every answer is
//! compared byte for byte with what its own request sent ([`payload`]), and
//! a missing, duplicated or foreign answer aborts the run: a fast wrong
//! answer is not a result.
//!
//! The other parts ([`scenario`]) time one-off events with fresh processes:
//! a 16 MiB round trip, spawn to `initialize` answered, and a worker crash
//! to the next call answered (compared with the worker's own start time,
//! measured directly in the same run). mcpvisor's peak memory is its VmHWM
//! from `/proc`, read after 100k and again after 1M requests.
//!
//! Last, [`inspect`] times `mcpvisor inspect --json` on a real server
//! (`@modelcontextprotocol/server-everything` under node, as the interop
//! tier installs it) against that server's own spawn → `tools/list`
//! answered, and polls the inspect process's VmHWM while it runs; without
//! the server installed, that part is skipped and the report says so.
//! Then [`gateway`] measures `mcpvisor serve`: the same kind of load
//! through the gateway (a `tools/call`, compared with direct and `run` in
//! the same rounds), its start with lazy servers whose lists are cached,
//! and its own peak memory with 1, 5 and 20 servers behind it.
//! [`report`] prints the table and writes the markdown report and raw JSON.
//!
//! `mcpvisor-bench instructions` ([`instructions`]) is separate from all of
//! this: it counts mcpvisor's own instructions per request under callgrind
//! and compares them with a committed [`baseline`], a figure that the rest
//! of the machine cannot move. Beside mcpvisor it counts `mcpvisor-bench
//! relay` ([`relay`]), a relay on tokio that only copies bytes: the floor
//! under every figure.

mod baseline;
mod churn;
mod gateway;
mod hostile;
mod http;
mod idle;
mod inspect;
mod instructions;
mod keepalive;
mod load;
mod machine;
mod payload;
mod peer;
mod peers;
mod relay;
mod report;
mod scan;
mod scenario;
mod soak;
mod stats;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser;

use crate::peer::Binaries;
use crate::scenario::Plan;

/// Measures mcpvisor against a direct connection to the same fake worker.
///
/// Without a subcommand, runs every measurement and prints the table.
#[derive(Debug, Parser)]
#[command(name = "mcpvisor-bench", version)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The mcpvisor binary [default: `mcpvisor` next to this binary].
    #[arg(long, value_name = "PATH")]
    mcpvisor: Option<PathBuf>,
    /// The fake worker binary [default: `mcpvisor-fake-worker` next to this
    /// binary].
    #[arg(long, value_name = "PATH")]
    worker: Option<PathBuf>,
    /// A short run that exercises every part (a smoke test; rough figures).
    #[arg(long)]
    quick: bool,
    /// Write the report as markdown to FILE (its text above the generated
    /// part is kept).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write the raw figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    raw: Option<PathBuf>,
    /// server-everything's `dist/index.js`, for the `inspect` measurement
    /// (skipped when it does not exist) [default: where
    /// `tests/interop/setup.sh` installs it, under `.cache/interop/`].
    #[arg(long, value_name = "PATH")]
    everything: Option<PathBuf>,
    /// Let mcpvisor's and the worker's stderr through.
    #[arg(long, global = true)]
    show_stderr: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Runs one load on one peer and prints its figures: a steady load for
    /// a profiler to attach to (the peer's pid is printed first).
    Load(soak::SoakArgs),
    /// Counts mcpvisor's own instructions per request under callgrind and
    /// compares them with (or writes) a baseline.
    Instructions(instructions::InstructionsArgs),
    /// `serve --http` with many sessions: all calling one server at once
    /// (p50/p99, errors), and the memory of idle sessions.
    Http(http::HttpArgs),
    /// `mcpvisor run --http` against supergateway and mcp-proxy in front of
    /// the same fake worker, with direct stdio as the floor (installs the
    /// peers under .cache/bench-peers/ first).
    Peers(peers::PeersArgs),
    /// Copies bytes between its own pipes and CMD's on tokio, and does
    /// nothing else: the floor `instructions` measures beside mcpvisor.
    Relay(relay::RelayArgs),
    /// `serve --http` against clients that misbehave (trickled and oversized
    /// headers, thousands of connections and initialize attempts, unread
    /// streams, bodies that are not UTF-8 or nest 100,000 deep, POSTs cut
    /// off), while well-behaved sessions call it throughout.
    BadClients(hostile::BadClientsArgs),
    /// `serve --http` with many servers and nothing to do: its CPU time and
    /// wake-ups over an idle window.
    Idle(idle::IdleArgs),
    /// Checks the envelope reading (mcpvisor's JSON scan) against serde_json
    /// on generated lines, for as long as asked.
    Scan(scan::ScanArgs),
    /// `serve --http` with several servers and many sessions under steady
    /// load (quick calls and slow ones) for minutes, while the servers are
    /// SIGKILLed in turn and the config is edited and reloaded: every
    /// answer checked, the errors explained, the memory kept flat, nothing
    /// left after SIGTERM.
    Soak(churn::SoakArgs),
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcpvisor-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    if let Some(Command::Scan(scan)) = &args.command {
        return scan::run(scan);
    }
    let binaries = Binaries {
        mcpvisor: binary(args.mcpvisor, "mcpvisor", "--mcpvisor")?,
        worker: binary(args.worker, "mcpvisor-fake-worker", "--worker")?,
        show_stderr: args.show_stderr,
    };
    // One thread, like mcpvisor itself: on a two-core machine the client
    // must not take a core from the processes it measures.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    match &args.command {
        Some(Command::Load(soak)) => return runtime.block_on(soak::run(&binaries, soak)),
        Some(Command::Instructions(count)) => {
            return runtime.block_on(instructions::run(&binaries, count));
        }
        Some(Command::Http(args)) => return runtime.block_on(http::run(&binaries, args)),
        Some(Command::Peers(args)) => return runtime.block_on(peers::run(&binaries, args)),
        Some(Command::Relay(args)) => return runtime.block_on(relay::run(args)),
        Some(Command::BadClients(args)) => return runtime.block_on(hostile::run(&binaries, args)),
        Some(Command::Idle(args)) => return runtime.block_on(idle::run(&binaries, args)),
        Some(Command::Soak(args)) => return runtime.block_on(churn::run(&binaries, args)),
        Some(Command::Scan(_)) | None => {}
    }
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    let everything = args
        .everything
        .unwrap_or_else(|| PathBuf::from(inspect::DEFAULT_EVERYTHING));
    let results = runtime.block_on(scenario::run(&binaries, &plan, &everything))?;
    print!("{}", report::text(&results));
    if let Some(path) = &args.out {
        report::write_markdown(path, &results, &plan)?;
    }
    if let Some(path) = &args.raw {
        report::write_raw(path, &results)?;
    }
    Ok(())
}

/// The binary given by `flag`, or `name` next to this one.
fn binary(given: Option<PathBuf>, name: &str, flag: &str) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .context("cannot find this binary's own path")?
            .parent()
            .unwrap_or(Path::new("."))
            .join(name),
    };
    if !path.is_file() {
        bail!(
            "{} does not exist: build it (`cargo build --release --workspace`) or pass {flag} PATH",
            path.display()
        );
    }
    Ok(path)
}
