//! `mcpvisor-bench instructions`: mcpvisor's own instructions per request,
//! counted by callgrind, a figure that other load on the machine cannot
//! move.
//!
//! mcpvisor runs under `valgrind --tool=callgrind --trace-children=no`, so
//! only its own user-space instructions are counted: not the worker's (it
//! runs natively), not the client's (this process, outside valgrind), not
//! the kernel's. Each figure is two traced runs of the same scenario: one
//! with `requests` requests at concurrency 1 and one with none, both with
//! the same start, handshake and shutdown. Their difference over
//! `requests` is the cost of one request: read, peek, splice and write on
//! the way in, the same on the way out, and the task hops between.
//!
//! The scenarios are a table ([`SCENARIOS`]) of how mcpvisor is put in front
//! of the fake worker ([`Launch`]: `run` wraps it and is sent `bench/echo`;
//! `serve` has it as the one server of a config file and is sent a
//! `tools/call` of its `echo` tool) and how the client reaches it
//! ([`Front`]: stdio, or HTTP with a client of either protocol era); each
//! is measured at its [`Scenario::loads`] ([`LOADS`] for mcpvisor's own).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use tokio::process::Command;

use crate::baseline::{Baseline, Figure};
use crate::gateway::{self, Gateway, Server};
use crate::keepalive::{self, Revision};
use crate::load::{self, Load, Stop};
use crate::payload::{Echo, Payloads};
use crate::peer::{Binaries, Peer, Via};

/// The options of `mcpvisor-bench instructions`.
#[derive(Debug, clap::Args)]
pub struct InstructionsArgs {
    /// Compare with the baseline in FILE; fail when a figure is more than
    /// its tolerance over it.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// Show each figure's change from the baseline in FILE, without failing.
    #[arg(long, value_name = "FILE", conflicts_with = "check")]
    against: Option<PathBuf>,
    /// Write the figures to FILE as the new baseline.
    #[arg(long, value_name = "FILE")]
    write: Option<PathBuf>,
    /// Requests per measured run [default: 2000].
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// Keep callgrind's output files in DIR (for `callgrind_annotate`).
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// The valgrind binary.
    #[arg(long, value_name = "PATH", default_value = "valgrind")]
    valgrind: PathBuf,
    /// Measure only this scenario (run, serve, run-http,
    /// run-http-2026-07-28, serve-http, serve-http-2026-07-28, tokio-relay;
    /// may be repeated):
    /// a quicker count while working on one path. Not with --check or
    /// --write, which need every figure.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["check", "write"])]
    scenario: Vec<String>,
}

/// How the client reaches mcpvisor in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// JSON-RPC lines on the traced process's own stdin and stdout.
    Stdio,
    /// Streamable HTTP: mcpvisor's arguments include `--http 127.0.0.1:0`,
    /// the address it prints on stderr is where a plain HTTP/1.1 client
    /// ([`crate::keepalive::Client`]) of this protocol revision posts each
    /// request on one keep-alive connection, asking for JSON answers. The
    /// run ends with SIGTERM.
    Http(Revision),
}

/// How mcpvisor is given the fake worker, and what the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    /// The fake worker's path follows mcpvisor's arguments; the client
    /// sends `bench/echo` on stdio, and a `tools/call` of its `echo` tool
    /// over HTTP (the HTTP front routes only MCP's own methods).
    Wrap,
    /// A config file with the fake worker as its one server, `bench`,
    /// follows mcpvisor's arguments; the client calls the tool
    /// `bench__echo` (the gateway routes only MCP's own methods).
    Gateway,
    /// Not mcpvisor: `mcpvisor-bench relay --` ([`crate::relay`]) in front
    /// of the fake worker, traced the same way. The floor of any relay on
    /// tokio; the client sends `bench/echo`.
    Relay,
}

/// One way of putting mcpvisor in front of the fake worker.
#[derive(Debug)]
pub struct Scenario {
    /// Its name in reports and in the baseline.
    pub name: &'static str,
    /// mcpvisor's arguments, before the fake worker or its config file.
    pub args: &'static [&'static str],
    pub launch: Launch,
    pub front: Front,
    /// The loads it is measured at: (payload bytes, concurrency).
    pub loads: &'static [(usize, usize)],
}

impl Scenario {
    /// Its command line, as the baseline records it.
    fn command(&self) -> String {
        let mut words = vec![match self.launch {
            Launch::Relay => "mcpvisor-bench",
            Launch::Wrap | Launch::Gateway => "mcpvisor",
        }];
        words.extend(self.args);
        match self.launch {
            Launch::Wrap | Launch::Relay => words.push("mcpvisor-fake-worker"),
            Launch::Gateway => words.extend([
                "FILE",
                "(FILE: one server, bench, the mcpvisor-fake-worker; tools/call bench__echo)",
            ]),
        }
        match self.front {
            Front::Stdio => {}
            Front::Http(Revision::Handshake) => words.push(
                "(a 2025-11-25 client: HTTP POSTs in one session on one keep-alive connection; tools/call)",
            ),
            Front::Http(Revision::Stateless) => words.push(
                "(a 2026-07-28 client: HTTP POSTs with no session on one keep-alive connection; tools/call)",
            ),
        }
        words.join(" ")
    }

    /// The requests of one load on this scenario.
    fn payloads(&self, payload: usize) -> Payloads {
        let payloads = match (self.launch, self.front) {
            (Launch::Wrap | Launch::Relay, Front::Stdio) => Payloads::new(payload),
            // The HTTP front is the gateway's hub, which routes only MCP's
            // own methods.
            (Launch::Wrap | Launch::Relay, Front::Http(_)) => {
                Payloads::with(payload, Echo::Tool(vec!["echo".to_owned()]))
            }
            (Launch::Gateway, _) => {
                Payloads::with(payload, Echo::Tool(vec![gateway::TOOL.to_owned()]))
            }
        };
        match self.front {
            Front::Http(Revision::Stateless) => payloads.stateless(),
            Front::Stdio | Front::Http(Revision::Handshake) => payloads,
        }
    }
}

/// Every scenario measured, in report order.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "run",
        args: &["run", "-q", "--no-watch", "--"],
        launch: Launch::Wrap,
        front: Front::Stdio,
        loads: LOADS,
    },
    Scenario {
        name: "serve",
        args: &gateway::SERVE_ARGS,
        launch: Launch::Gateway,
        front: Front::Stdio,
        loads: LOADS,
    },
    Scenario {
        name: "run-http",
        args: &RUN_HTTP_ARGS,
        launch: Launch::Wrap,
        front: Front::Http(Revision::Handshake),
        loads: LOADS,
    },
    // A call from a client of each era through each HTTP front: the
    // 2026-07-28 request (no session; its envelope checked by the front,
    // taken off for the worker, and resultType added to its answer) is to
    // cost no more than the 2025-11-25 one.
    Scenario {
        name: "run-http-2026-07-28",
        args: &RUN_HTTP_ARGS,
        launch: Launch::Wrap,
        front: Front::Http(Revision::Stateless),
        loads: SMALL,
    },
    Scenario {
        name: "serve-http",
        args: &SERVE_HTTP_ARGS,
        launch: Launch::Gateway,
        front: Front::Http(Revision::Handshake),
        loads: SMALL,
    },
    Scenario {
        name: "serve-http-2026-07-28",
        args: &SERVE_HTTP_ARGS,
        launch: Launch::Gateway,
        front: Front::Http(Revision::Stateless),
        loads: SMALL,
    },
    Scenario {
        name: "tokio-relay",
        args: &["relay", "--"],
        launch: Launch::Relay,
        front: Front::Stdio,
        // At 64 KiB the relay's count is how many reads the copy's 8 KiB
        // buffer took, which moves with the pipes' timing by more than the
        // check's tolerance; the floor that matters is the small request's.
        loads: SMALL,
    },
];

/// `run --http`'s arguments, before the fake worker.
const RUN_HTTP_ARGS: [&str; 6] = ["run", "-q", "--no-watch", "--http", "127.0.0.1:0", "--"];

/// `serve --http`'s arguments, before its config file.
const SERVE_HTTP_ARGS: [&str; 6] = [
    "serve",
    "-q",
    "--no-watch",
    "--http",
    "127.0.0.1:0",
    "--config",
];

/// Payload sizes at concurrency 1, measured for mcpvisor's own scenarios.
pub const LOADS: &[(usize, usize)] = &[(64, 1), (65_536, 1)];

/// Only the small request, where the hops are the cost.
const SMALL: &[(usize, usize)] = &[(64, 1)];

/// Requests per measured run unless `--requests` says otherwise: enough
/// that the sweep timer and the first requests' allocations are lost in
/// the figure (it repeats within 1%).
const REQUESTS: u64 = 2000;

/// How much a figure may grow over its baseline before `--check` fails.
pub const TOLERANCE_PERCENT: f64 = 10.0;

pub async fn run(bins: &Binaries, args: &InstructionsArgs) -> anyhow::Result<()> {
    let scenarios = chosen(&args.scenario)?;
    let valgrind = valgrind_version(&args.valgrind).await?;
    let requests = args.requests.unwrap_or(REQUESTS).max(1);
    let dir = match &args.keep {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("mcpvisor-instructions-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tracer = Tracer {
        valgrind: args.valgrind.clone(),
        dir: dir.clone(),
    };
    let measured = measure_all(bins, &tracer, &scenarios, requests).await;
    if args.keep.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let figures = measured?;
    let fresh = Baseline::new(valgrind, figures);
    let old = match args.check.as_ref().or(args.against.as_ref()) {
        Some(path) => Some(Baseline::read(path)?),
        None => None,
    };
    print!("{}", fresh.table(old.as_ref()));
    if let Some(path) = &args.write {
        fresh.write(path)?;
        eprintln!("mcpvisor-bench: wrote the baseline {}", path.display());
    }
    if let (Some(old), Some(path)) = (&old, &args.check) {
        old.check(&fresh, path)?;
        println!(
            "every figure is within {TOLERANCE_PERCENT}% of the baseline {}",
            path.display()
        );
    }
    Ok(())
}

/// The scenarios `names` asks for, in report order; every one when empty.
fn chosen(names: &[String]) -> anyhow::Result<Vec<&'static Scenario>> {
    if let Some(unknown) = names
        .iter()
        .find(|name| !SCENARIOS.iter().any(|s| s.name == name.as_str()))
    {
        let known: Vec<_> = SCENARIOS.iter().map(|s| s.name).collect();
        anyhow::bail!(
            "--scenario {unknown}: no such scenario (known: {})",
            known.join(", ")
        );
    }
    Ok(SCENARIOS
        .iter()
        .filter(|s| names.is_empty() || names.iter().any(|name| name == s.name))
        .collect())
}

async fn measure_all(
    bins: &Binaries,
    tracer: &Tracer,
    scenarios: &[&Scenario],
    requests: u64,
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for scenario in scenarios {
        for &(payload, concurrency) in scenario.loads {
            eprintln!(
                "mcpvisor-bench: instructions: {}, {payload} B at concurrency {concurrency}, \
                 {requests} requests and none",
                scenario.name
            );
            // A state directory of this figure's own (the gateway keeps its
            // pinned definitions there), written by a first run with no
            // requests, whose count is not kept: the two counted runs then
            // start alike, each reading the same store. Left to the counted
            // runs, the first would write the store and the next read it,
            // and the difference, a one-off, would be counted per request.
            let state = tracer
                .dir
                .join(format!("{}-{payload}-c{concurrency}.state", scenario.name));
            let _ = std::fs::remove_dir_all(&state);
            std::fs::create_dir_all(&state)
                .with_context(|| format!("cannot create {}", state.display()))?;
            let run = Run {
                state: &state,
                concurrency,
                payload,
            };
            if scenario.launch == Launch::Gateway {
                tracer.count(bins, scenario, &run, 0, "prime").await?;
            }
            let empty = tracer.count(bins, scenario, &run, 0, "").await?;
            let full = tracer.count(bins, scenario, &run, requests, "").await?;
            let per_request = full.saturating_sub(empty) as f64 / requests as f64;
            figures.push(Figure {
                scenario: scenario.name.to_owned(),
                command: scenario.command(),
                payload_bytes: payload,
                concurrency,
                requests,
                instructions_per_request: per_request.round() as u64,
            });
        }
    }
    Ok(figures)
}

/// What the runs counted for one figure share.
#[derive(Debug, Clone, Copy)]
struct Run<'a> {
    /// The gateway's state directory (`XDG_STATE_HOME`).
    state: &'a Path,
    payload: usize,
    concurrency: usize,
}

/// Runs scenarios under callgrind, its files in `dir`.
#[derive(Debug)]
struct Tracer {
    valgrind: PathBuf,
    dir: PathBuf,
}

impl Tracer {
    /// One traced run: start, handshake, `requests` requests, shutdown.
    /// Returns every instruction mcpvisor executed.
    async fn count(
        &self,
        bins: &Binaries,
        scenario: &Scenario,
        run: &Run<'_>,
        requests: u64,
        tag: &str,
    ) -> anyhow::Result<u64> {
        let Run {
            state,
            payload,
            concurrency,
        } = *run;
        let label = format!("{}-{payload}-c{concurrency}-{requests}{tag}", scenario.name);
        // Held until the run is over: its config file and list cache.
        let served = match scenario.launch {
            Launch::Wrap | Launch::Relay => None,
            Launch::Gateway => Some(Gateway::new(
                bins,
                &format!("instructions-{label}"),
                &[Server::eager(gateway::SERVER)],
            )?),
        };
        let mut command = Command::new(&self.valgrind);
        command
            .env("XDG_STATE_HOME", state)
            .arg("--tool=callgrind")
            .arg("--trace-children=no")
            .arg(flag(
                "--callgrind-out-file=",
                &self.dir,
                &label,
                "callgrind",
            ))
            .arg(flag("--log-file=", &self.dir, &label, "log"));
        match scenario.launch {
            Launch::Relay => command
                .arg(std::env::current_exe().context("cannot find mcpvisor-bench's own path")?),
            Launch::Wrap | Launch::Gateway => command.arg(&bins.mcpvisor),
        };
        command.args(scenario.args);
        let via = match &served {
            None if scenario.launch == Launch::Relay => {
                command.arg(&bins.worker);
                Via::Relay
            }
            None => {
                command.arg(&bins.worker);
                Via::Mcpvisor
            }
            Some(served) => {
                command.arg(served.config());
                served.cache_env(&mut command);
                Via::Serve
            }
        };
        let pid = match scenario.front {
            Front::Stdio => {
                let mut peer = Peer::start(via, command, bins.show_stderr)?;
                let pid = peer.pid;
                let payloads = scenario.payloads(payload);
                let driven = drive(&mut peer, &payloads, concurrency, requests).await;
                let status = peer.close().await;
                let log = self.dir.join(format!("{label}.{pid}.log"));
                driven.with_context(|| valgrind_log(&log))?;
                let status = status.with_context(|| valgrind_log(&log))?;
                if !status.success() {
                    bail!(
                        "{label}: mcpvisor under valgrind {status}; {}",
                        valgrind_log(&log)
                    );
                }
                pid
            }
            Front::Http(revision) => {
                let payloads = scenario.payloads(payload);
                drive_http(command, &self.dir, &label, &payloads, revision, requests).await?
            }
        };
        let out = self.dir.join(format!("{label}.{pid}.callgrind"));
        let text = std::fs::read_to_string(&out)
            .with_context(|| format!("callgrind wrote no {}", out.display()))?;
        total_instructions(&text).with_context(|| format!("no totals in {}", out.display()))
    }
}

/// The client's side of one run on a stdio front.
async fn drive(
    peer: &mut Peer,
    payloads: &Payloads,
    concurrency: usize,
    requests: u64,
) -> anyhow::Result<()> {
    peer.initialize().await?;
    if requests > 0 {
        let load = Load {
            payload: payloads.size(),
            concurrency,
            stop: Stop::Count(requests),
        };
        load::run(peer, load, payloads).await?;
    }
    Ok(())
}

/// How long mcpvisor under valgrind may take to say where it listens, and
/// to exit once asked to stop.
const HTTP_START_TIMEOUT: Duration = Duration::from_secs(60);

/// One run on an HTTP front: starts `command` (mcpvisor under valgrind with
/// `--http 127.0.0.1:0`), reads the address it listens on from its stderr,
/// does the handshake (a 2025-11-25 client's) and `requests` requests one
/// at a time on one keep-alive connection, then stops it with SIGTERM.
/// Returns its pid.
async fn drive_http(
    mut command: Command,
    dir: &Path,
    label: &str,
    payloads: &Payloads,
    revision: Revision,
    requests: u64,
) -> anyhow::Result<u32> {
    use tokio::io::AsyncBufReadExt as _;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().context("cannot start valgrind")?;
    let pid = child
        .id()
        .context("mcpvisor under valgrind exited at once")?;
    let log = dir.join(format!("{label}.{pid}.log"));
    let stderr = child.stderr.take().context("no stderr pipe")?;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let listening = async {
        while let Some(line) = lines.next_line().await? {
            if let Some(url) = line.split("listening on http://").nth(1) {
                return Ok::<_, anyhow::Error>(Some(url.trim().to_owned()));
            }
        }
        Ok(None)
    };
    let url = tokio::time::timeout(HTTP_START_TIMEOUT, listening)
        .await
        .map_err(|_| {
            anyhow!(
                "{label}: mcpvisor did not say where it listens within {HTTP_START_TIMEOUT:?}; {}",
                valgrind_log(&log)
            )
        })??
        .with_context(|| {
            format!(
                "{label}: mcpvisor ended before listening; {}",
                valgrind_log(&log)
            )
        })?;
    // The rest of its stderr is read and dropped, so that it never blocks
    // on a full pipe.
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (addr, path) = match url.find('/') {
        Some(at) => (&url[..at], &url[at..]),
        None => (url.as_str(), "/"),
    };
    let addr: std::net::SocketAddr = addr
        .parse()
        .with_context(|| format!("{label}: mcpvisor listens on {url:?}, not an address"))?;
    let driven = async {
        let mut client = keepalive::Client::connect(addr, path, revision).await?;
        client.initialize().await?;
        client.echo(payloads, requests).await
    }
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid)?),
        nix::sys::signal::Signal::SIGTERM,
    )
    .context("cannot signal mcpvisor")?;
    let status = tokio::time::timeout(HTTP_START_TIMEOUT, child.wait()).await;
    drain.abort();
    driven.with_context(|| valgrind_log(&log))?;
    let status = match status {
        Ok(status) => status?,
        Err(_) => {
            child.kill().await?;
            bail!("{label}: mcpvisor did not exit within {HTTP_START_TIMEOUT:?} of SIGTERM");
        }
    };
    if !status.success() {
        bail!(
            "{label}: mcpvisor under valgrind {status}; {}",
            valgrind_log(&log)
        );
    }
    Ok(pid)
}

/// `--name=DIR/LABEL.%p.EXT`: valgrind puts the traced process's pid in
/// place of `%p`.
fn flag(name: &str, dir: &Path, label: &str, ext: &str) -> OsString {
    let mut flag = OsString::from(name);
    flag.push(dir.join(format!("{label}.%p.{ext}")));
    flag
}

/// The end of valgrind's log, for an error message.
fn valgrind_log(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(log) => {
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            format!("valgrind's log {} ends:\n{tail}", path.display())
        }
        Err(_) => format!("valgrind wrote no log at {}", path.display()),
    }
}

/// The `totals:` line of a callgrind output file (`summary:` in older
/// formats): every instruction the process executed.
fn total_instructions(callgrind: &str) -> Option<u64> {
    let line = |key: &str| {
        callgrind
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    line("totals:").or_else(|| line("summary:"))
}

/// `valgrind --version`, such as `valgrind-3.19.0`.
async fn valgrind_version(valgrind: &Path) -> anyhow::Result<String> {
    let out = Command::new(valgrind)
        .arg("--version")
        .output()
        .await
        .with_context(|| {
            format!(
                "cannot run {}: install valgrind (scripts/instructions does) or pass --valgrind PATH",
                valgrind.display()
            )
        })?;
    if !out.status.success() {
        bail!("{} --version failed: {}", valgrind.display(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_callgrind_totals() {
        let file = "version: 1\ncmd: mcpvisor run\nevents: Ir\nfn=(1) main\n3 10\n\
                    summary: 41000\n\ntotals: 42000\n";
        assert_eq!(total_instructions(file), Some(42000));
        assert_eq!(total_instructions("events: Ir\nsummary: 7\n"), Some(7));
        assert_eq!(total_instructions("events: Ir\n"), None);
    }

    #[test]
    fn scenario_names_are_unique() {
        let mut names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len());
    }

    #[test]
    fn scenarios_are_chosen_by_name_in_report_order() {
        let names = |chosen: Vec<&Scenario>| chosen.iter().map(|s| s.name).collect::<Vec<_>>();
        let all = names(chosen(&[]).expect("every one"));
        assert_eq!(
            all,
            [
                "run",
                "serve",
                "run-http",
                "run-http-2026-07-28",
                "serve-http",
                "serve-http-2026-07-28",
                "tokio-relay"
            ]
        );
        let asked = ["run-http".to_owned(), "run".to_owned()];
        assert_eq!(names(chosen(&asked).expect("known")), ["run", "run-http"]);
        let err = chosen(&["gateway".to_owned()]).expect_err("unknown");
        assert!(
            err.to_string().contains(
                "--scenario gateway: no such scenario (known: run, serve, run-http, \
                 run-http-2026-07-28, serve-http, serve-http-2026-07-28, tokio-relay)"
            ),
            "{err}"
        );
    }
}
