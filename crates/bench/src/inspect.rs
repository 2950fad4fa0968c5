//! `mcpvisor inspect` on a real server, against that server's own start.
//!
//! The server is `@modelcontextprotocol/server-everything` (`node
//! dist/index.js stdio`), as the interop tier installs it. Two figures are
//! compared, from fresh processes, the side that goes first alternating:
//!
//! - direct: node spawned with the script, `initialize` sent at once;
//!   spawn → `initialize` answered and spawn → `tools/list` answered (sent
//!   right after `notifications/initialized`), declaring the capabilities
//!   mcpvisor declares (the server's tool list depends on them). That is
//!   the server's own start, the least any client can take to list its
//!   tools.
//! - mcpvisor: the whole `mcpvisor inspect --json -- node ... stdio`
//!   process. Its stdout is read as it comes, so both the moment the JSON
//!   was complete and the process's exit are timed: the exit includes
//!   stopping the server, and server-everything does not exit when its
//!   stdin closes, so mcpvisor waits out its grace period and signals it.
//!   mcpvisor's own peak memory is its VmHWM from `/proc`, polled every few
//!   milliseconds while it runs (the last value read before it exits; the
//!   node child is not counted).
//!
//! Every mcpvisor run must print JSON with a non-empty `tools` array, with
//! the same tool names as the direct `tools/list` when that was one page.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{ChildStdout, Command};
use tokio::time::Instant;

use crate::machine;
use crate::peer::{ANSWER_TIMEOUT, Binaries};
use crate::scenario::{Samples, samples};
use crate::stats::Latencies;

/// Where `tests/interop/setup.sh` installs server-everything, relative to
/// the repository root.
pub const DEFAULT_EVERYTHING: &str =
    ".cache/interop/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js";

/// How often mcpvisor's VmHWM is read while it runs.
const POLL: Duration = Duration::from_millis(2);
/// Bound on one whole `mcpvisor inspect` run.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The measurement, or why it was not taken.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InspectOutcome {
    Measured(Inspect),
    Skipped { reason: String },
}

#[derive(Debug, Serialize)]
pub struct Inspect {
    /// The server package and version, e.g. `@modelcontextprotocol/server-everything 2026.8.31`.
    pub server: String,
    /// Tools the server listed.
    pub tools: usize,
    /// Direct: spawn → `initialize` answered.
    pub direct_initialize: Samples,
    /// Direct: spawn → `tools/list` answered.
    pub direct_tools_list: Samples,
    /// mcpvisor: spawn → its JSON complete on stdout.
    pub mcpvisor_output: Samples,
    /// mcpvisor: spawn → exit (stopping the server included).
    pub mcpvisor_exit: Samples,
    /// mcpvisor: JSON complete → exit, the server's stop.
    pub mcpvisor_stop: Samples,
    /// mcpvisor's own VmHWM in each run.
    pub mcpvisor_peak_kib: Vec<u64>,
}

impl Inspect {
    pub fn peak_kib(&self) -> u64 {
        self.mcpvisor_peak_kib.iter().copied().max().unwrap_or(0)
    }
}

/// Measures `count` runs of each side, or says why it cannot.
pub async fn run(bins: &Binaries, script: &Path, count: usize) -> anyhow::Result<InspectOutcome> {
    if !script.is_file() {
        return Ok(InspectOutcome::Skipped {
            reason: format!(
                "server-everything is not installed at {} (run tests/interop/setup.sh, or pass \
                 --everything PATH)",
                script.display()
            ),
        });
    }
    let server = package_name(script);
    let mut direct_init = Latencies::default();
    let mut direct_list = Latencies::default();
    let mut output = Latencies::default();
    let mut exit = Latencies::default();
    let mut stop = Latencies::default();
    let mut peaks = Vec::new();
    // The tool names of the last direct `tools/list`, when it was one page.
    let mut direct_names: Option<Vec<String>> = None;
    let mut tools = 0;
    for round in 0..count {
        let direct_first = round % 2 == 0;
        for direct in [direct_first, !direct_first] {
            if direct {
                let d = match direct_once(bins, script).await {
                    Ok(d) => d,
                    Err(e) if round == 0 && is_not_found(&e) => {
                        return Ok(InspectOutcome::Skipped {
                            reason: format!("cannot run node: {e:#}"),
                        });
                    }
                    Err(e) => return Err(e),
                };
                direct_init.push(d.initialized);
                direct_list.push(d.listed);
                direct_names = d.names;
            } else {
                let m = mcpvisor_once(bins, script).await?;
                if let Some(names) = &direct_names {
                    ensure!(
                        &m.names == names,
                        "mcpvisor inspect listed the tools {:?}, the server itself {names:?}",
                        m.names
                    );
                }
                tools = m.names.len();
                output.push(m.printed);
                exit.push(m.exited);
                stop.push(m.exited.saturating_sub(m.printed));
                peaks.push(m.peak_kib);
            }
        }
    }
    Ok(InspectOutcome::Measured(Inspect {
        server,
        tools,
        direct_initialize: samples(&direct_init),
        direct_tools_list: samples(&direct_list),
        mcpvisor_output: samples(&output),
        mcpvisor_exit: samples(&exit),
        mcpvisor_stop: samples(&stop),
        mcpvisor_peak_kib: peaks,
    }))
}

/// `name version` from the package.json above `dist/`, or a generic name.
fn package_name(script: &Path) -> String {
    let manifest = script
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("package.json"));
    let read = manifest
        .and_then(|m| std::fs::read_to_string(m).ok())
        .and_then(|text| serde_json::from_str::<Value>(&text).ok());
    match read {
        Some(p) => match (p["name"].as_str(), p["version"].as_str()) {
            (Some(name), Some(version)) => format!("{name} {version}"),
            (Some(name), None) => name.to_owned(),
            _ => "server-everything".to_owned(),
        },
        None => "server-everything".to_owned(),
    }
}

/// Whether `e` is a spawn failing because the program does not exist.
fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    })
}

fn stderr(bins: &Binaries) -> Stdio {
    if bins.show_stderr {
        Stdio::inherit()
    } else {
        Stdio::null()
    }
}

/// One direct start of the server.
struct Direct {
    initialized: Duration,
    listed: Duration,
    /// The tool names, unless the list had more pages.
    names: Option<Vec<String>>,
}

async fn direct_once(bins: &Binaries, script: &Path) -> anyhow::Result<Direct> {
    let spawned = Instant::now();
    let mut child = Command::new("node")
        .arg(script)
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr(bins))
        .kill_on_drop(true)
        .spawn()
        .context("cannot start node")?;
    let mut stdin = child.stdin.take().context("no stdin pipe")?;
    let mut stdout = BufReader::new(child.stdout.take().context("no stdout pipe")?);
    // The capabilities mcpvisor declares: the server registers some tools
    // only for a client that offers roots, so both sides get the same list.
    let init = concat!(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","#,
        r#""capabilities":{"roots":{"listChanged":false}},"#,
        r#""clientInfo":{"name":"mcpvisor-bench","version":"0"}}}"#,
        "\n"
    );
    stdin.write_all(init.as_bytes()).await?;
    let answer = answer_to(&mut stdout, 1).await?;
    let initialized = spawned.elapsed();
    ensure!(
        answer["result"]["protocolVersion"].is_string(),
        "server-everything answered initialize with {answer}"
    );
    let list = concat!(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
        "\n"
    );
    stdin.write_all(list.as_bytes()).await?;
    let answer = answer_to(&mut stdout, 2).await?;
    let listed = spawned.elapsed();
    let tools = answer["result"]["tools"]
        .as_array()
        .with_context(|| format!("server-everything answered tools/list with {answer}"))?;
    let names = answer["result"]["nextCursor"]
        .is_null()
        .then(|| tool_names(tools));
    // It does not exit when its stdin closes.
    child.kill().await.context("cannot stop node")?;
    Ok(Direct {
        initialized,
        listed,
        names,
    })
}

/// The answer to request `id`, skipping anything else the server sends.
async fn answer_to(stdout: &mut BufReader<ChildStdout>, id: u64) -> anyhow::Result<Value> {
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = tokio::time::timeout(ANSWER_TIMEOUT, stdout.read_until(b'\n', &mut line))
            .await
            .with_context(|| format!("server-everything: no answer within {ANSWER_TIMEOUT:?}"))??;
        if n == 0 {
            bail!("server-everything closed its stdout before answering request {id}");
        }
        let Ok(value) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if value["id"] == id && value.get("method").is_none() {
            return Ok(value);
        }
    }
}

fn tool_names(tools: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// One whole `mcpvisor inspect --json` run.
struct ViaMcpvisor {
    /// Spawn → the JSON complete on stdout.
    printed: Duration,
    /// Spawn → the process's exit.
    exited: Duration,
    /// The last VmHWM read before it exited.
    peak_kib: u64,
    /// The tool names it printed (sorted).
    names: Vec<String>,
}

async fn mcpvisor_once(bins: &Binaries, script: &Path) -> anyhow::Result<ViaMcpvisor> {
    let spawned = Instant::now();
    let mut child = Command::new(&bins.mcpvisor)
        .args(["inspect", "--json", "--", "node"])
        .arg(script)
        .arg("stdio")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr(bins))
        .kill_on_drop(true)
        .spawn()
        .context("cannot start mcpvisor inspect")?;
    let pid = child.id().context("mcpvisor inspect exited at once")?;
    let mut stdout = child.stdout.take().context("no stdout pipe")?;
    let mut peak_kib = machine::peak_rss_kib(pid).ok();
    let mut out = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    let mut printed = None;
    let mut eof = false;
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let deadline = tokio::time::sleep(RUN_TIMEOUT);
    tokio::pin!(deadline);
    let status = loop {
        tokio::select! {
            read = stdout.read(&mut chunk), if !eof => {
                let n = read.context("reading mcpvisor inspect's stdout")?;
                if n == 0 {
                    eof = true;
                } else {
                    out.extend_from_slice(&chunk[..n]);
                    if printed.is_none() && is_complete(&out) {
                        printed = Some(spawned.elapsed());
                    }
                }
            }
            status = child.wait() => break status.context("waiting for mcpvisor inspect")?,
            _ = poll.tick() => {
                // Gone once it has exited: the last value read stands.
                if let Ok(kib) = machine::peak_rss_kib(pid) {
                    peak_kib = Some(kib);
                }
            }
            () = &mut deadline => bail!("mcpvisor inspect did not finish within {RUN_TIMEOUT:?}"),
        }
    };
    let exited = spawned.elapsed();
    stdout.read_to_end(&mut out).await?;
    ensure!(
        status.success(),
        "mcpvisor inspect exited with {status}: {}",
        String::from_utf8_lossy(&out)
    );
    let report: Value = serde_json::from_slice(&out).with_context(|| {
        format!(
            "mcpvisor inspect --json printed something that is not JSON: {}",
            String::from_utf8_lossy(&out)
        )
    })?;
    let names = report["tools"]
        .as_array()
        .map(|t| tool_names(t))
        .unwrap_or_default();
    ensure!(
        !names.is_empty(),
        "mcpvisor inspect --json printed no tools: {report}"
    );
    Ok(ViaMcpvisor {
        printed: printed.unwrap_or(exited),
        exited,
        peak_kib: peak_kib.context("could not read mcpvisor inspect's VmHWM")?,
        names,
    })
}

/// Whether `out` holds one whole JSON document (the printer ends it with a
/// newline).
fn is_complete(out: &[u8]) -> bool {
    out.ends_with(b"}\n") && serde_json::from_slice::<Value>(out).is_ok()
}
