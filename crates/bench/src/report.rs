//! The results as a table on stdout, as a markdown file with the targets,
//! and as raw JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use crate::gateway;
use crate::inspect::InspectOutcome;
use crate::scenario::{Cell, Plan, Results};

/// The line under which `--out` rewrites the file; what is above it (the
/// hand-written introduction) is kept.
const MARKER: &str = "<!-- Everything below this line is written by mcpvisor-bench --out. -->";

/// The introduction written when the file does not exist yet.
const DEFAULT_HEADER: &str = "# mcpvisor benchmarks\n\n\
Measured by `mcpvisor-bench`:\n\n\
```sh\n\
cargo build --release --workspace && target/release/mcpvisor-bench --out BENCHMARKS.md\n\
```\n";

/// One row of the figures table.
struct Row {
    figure: String,
    direct: Option<f64>,
    mcpvisor: Option<f64>,
    /// mcpvisor ÷ direct, when the comparison means something.
    ratio: Option<f64>,
}

/// One figure of a throughput cell as a ratio to direct, for the relay
/// floor and for mcpvisor.
struct Floor {
    figure: String,
    relay: f64,
    mcpvisor: f64,
}

fn floor_rows(r: &Results) -> Vec<Floor> {
    let mut rows = Vec::new();
    for c in &r.cells {
        let name = cell_name(c);
        let (d, m, relay) = (&c.figures.direct, &c.figures.mcpvisor, &c.relay);
        rows.push(Floor {
            figure: format!("{name}: throughput"),
            relay: relay.per_second / d.per_second,
            mcpvisor: m.per_second / d.per_second,
        });
        rows.push(Floor {
            figure: format!("{name}: p50 latency"),
            relay: relay.p50_us / d.p50_us,
            mcpvisor: m.p50_us / d.p50_us,
        });
    }
    rows
}

/// What the floor rows mean, for both renderings.
const FLOOR_NOTE: &str = "The floor: the same loads, in the same rounds, through `cat | \
     mcpvisor-fake-worker | cat`, a process in each direction that only copies bytes: about \
     the least a relay that runs as its own process costs on this machine. It tells the cost \
     of the extra hop apart from mcpvisor's own work.";

/// One goal and whether this run met it.
pub struct Target {
    pub what: String,
    pub goal: String,
    pub measured: String,
    /// `None`: not measured in this run.
    pub pass: Option<bool>,
}

fn rows(r: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    let pair = |figure: String, d: f64, m: f64| Row {
        figure,
        direct: Some(d),
        mcpvisor: Some(m),
        ratio: Some(m / d),
    };
    for c in &r.cells {
        let name = cell_name(c);
        let (d, m) = (&c.figures.direct, &c.figures.mcpvisor);
        rows.push(pair(
            format!("{name}: throughput (req/s)"),
            d.per_second,
            m.per_second,
        ));
        rows.push(pair(
            format!("{name}: p50 latency (µs)"),
            d.p50_us,
            m.p50_us,
        ));
        rows.push(pair(
            format!("{name}: p99 latency (µs)"),
            d.p99_us,
            m.p99_us,
        ));
    }
    let big = &r.big.round_trip;
    rows.push(pair(
        format!(
            "{} round trip (ms, median of {})",
            size_name(r.big.payload_bytes),
            big.direct.samples_ms.len()
        ),
        big.direct.median_ms,
        big.mcpvisor.median_ms,
    ));
    let cold = &r.cold_start;
    rows.push(pair(
        format!(
            "cold start: spawn → initialize answered (ms, median of {})",
            cold.direct.samples_ms.len()
        ),
        cold.direct.median_ms,
        cold.mcpvisor.median_ms,
    ));
    rows.push(pair(
        format!(
            "crash → next call answered (ms, median of {}); direct: the worker's own start",
            r.crash.recovery.samples_ms.len()
        ),
        r.crash.worker_start_median_ms,
        r.crash.recovery.median_ms,
    ));
    rows.push(Row {
        figure: "crash → its -32010 error (ms, median)".to_owned(),
        direct: None,
        mcpvisor: Some(r.crash.detection.median_ms),
        ratio: None,
    });
    let mib = |kib: u64| kib as f64 / 1024.0;
    rows.push(Row {
        figure: "mcpvisor peak RSS after the handshake (MiB)".to_owned(),
        direct: None,
        mcpvisor: Some(mib(r.memory.after_handshake_kib)),
        ratio: None,
    });
    for mark in &r.memory.marks {
        rows.push(Row {
            figure: format!(
                "mcpvisor peak RSS after {} requests (MiB)",
                count_name(mark.requests)
            ),
            direct: None,
            mcpvisor: Some(mib(mark.peak_kib)),
            ratio: None,
        });
    }
    if let Some(last) = r.memory.marks.last() {
        let n = count_name(last.requests);
        rows.push(Row {
            figure: format!("of its RSS after {n} requests: private (RssAnon, MiB)"),
            direct: None,
            mcpvisor: Some(mib(last.now.anon_kib)),
            ratio: None,
        });
        rows.push(Row {
            figure: format!(
                "of its RSS after {n} requests: mapped from files, shared (RssFile, MiB)"
            ),
            direct: None,
            mcpvisor: Some(mib(last.now.file_kib)),
            ratio: None,
        });
    }
    if let InspectOutcome::Measured(i) = &r.inspect {
        let n = i.mcpvisor_output.samples_ms.len();
        rows.push(Row {
            figure: format!("server-everything: spawn → initialize answered (ms, median of {n})"),
            direct: Some(i.direct_initialize.median_ms),
            mcpvisor: None,
            ratio: None,
        });
        rows.push(pair(
            format!(
                "server-everything: spawn → tools listed (ms, median of {n}); mcpvisor: \
                 inspect's JSON printed"
            ),
            i.direct_tools_list.median_ms,
            i.mcpvisor_output.median_ms,
        ));
        rows.push(Row {
            figure: "mcpvisor inspect: spawn → exit (ms, median)".to_owned(),
            direct: None,
            mcpvisor: Some(i.mcpvisor_exit.median_ms),
            ratio: None,
        });
        rows.push(Row {
            figure: "mcpvisor inspect: JSON printed → exit (ms, median)".to_owned(),
            direct: None,
            mcpvisor: Some(i.mcpvisor_stop.median_ms),
            ratio: None,
        });
        rows.push(Row {
            figure: format!("mcpvisor inspect: peak RSS (MiB, max of {n})"),
            direct: None,
            mcpvisor: Some(mib(i.peak_kib())),
            ratio: None,
        });
    }
    rows
}

fn targets(r: &Results) -> Vec<Target> {
    let mut out = Vec::new();
    let find = |payload: usize, concurrency: usize| {
        r.cells
            .iter()
            .find(|c| c.payload_bytes == payload && c.concurrency == concurrency)
    };
    if let Some(c) = find(64, 1) {
        let (d, m) = (c.figures.direct.p50_us, c.figures.mcpvisor.p50_us);
        out.push(Target {
            what: "concurrency 1, 64 B: p50 latency".into(),
            goal: "≤ 1.2× direct".into(),
            measured: format!("{:.2}× ({m:.1} µs vs {d:.1} µs)", m / d),
            pass: Some(m <= 1.2 * d),
        });
    }
    if let Some(c) = find(64, 32) {
        let (d, m) = (c.figures.direct.per_second, c.figures.mcpvisor.per_second);
        out.push(Target {
            what: "concurrency 32, 64 B: throughput".into(),
            goal: "≥ 0.7× direct".into(),
            measured: format!("{:.2}× ({m:.0} vs {d:.0} req/s)", m / d),
            pass: Some(m >= 0.7 * d),
        });
    }
    let (d, m) = (
        r.big.round_trip.direct.median_ms,
        r.big.round_trip.mcpvisor.median_ms,
    );
    out.push(Target {
        what: "16 MiB round trip".into(),
        goal: "≤ 1.5× direct".into(),
        measured: format!("{:.2}× ({m:.1} ms vs {d:.1} ms)", m / d),
        pass: Some(m <= 1.5 * d),
    });
    if let Some(last) = r.memory.marks.last() {
        let mib = last.peak_kib as f64 / 1024.0;
        out.push(Target {
            what: "mcpvisor peak RSS, file watching on".into(),
            goal: "≤ 6 MiB".into(),
            measured: format!("{mib:.2} MiB after {} requests", count_name(last.requests)),
            pass: Some(last.peak_kib <= 6 * 1024),
        });
        let first = &r.memory.marks[0];
        out.push(Target {
            what: "mcpvisor peak RSS growth".into(),
            goal: "< 5% from 100k to 1M requests".into(),
            measured: format!(
                "{:+.1}% ({} → {} requests)",
                r.memory.growth_percent,
                count_name(first.requests),
                count_name(last.requests)
            ),
            pass: Some(r.memory.growth_percent < 5.0),
        });
    }
    let over = r.cold_start.mcpvisor.median_ms - r.cold_start.direct.median_ms;
    out.push(Target {
        what: "cold start".into(),
        goal: "≤ 5 ms over direct".into(),
        measured: format!(
            "{over:+.2} ms ({:.2} ms vs {:.2} ms)",
            r.cold_start.mcpvisor.median_ms, r.cold_start.direct.median_ms
        ),
        pass: Some(over <= 5.0),
    });
    out.push(Target {
        what: "crash recovery".into(),
        goal: "≤ 5 ms over the worker's own start".into(),
        measured: format!(
            "{:+.2} ms ({:.2} ms vs {:.2} ms)",
            r.crash.over_worker_start_ms,
            r.crash.recovery.median_ms,
            r.crash.worker_start_median_ms
        ),
        pass: Some(r.crash.over_worker_start_ms <= 5.0),
    });
    inspect_targets(&r.inspect, &mut out);
    out
}

/// Budget of `mcpvisor inspect` over the server's own start.
const INSPECT_BUDGET_MS: f64 = 50.0;
const INSPECT_MEMORY_MIB: f64 = 10.0;

fn inspect_targets(outcome: &InspectOutcome, out: &mut Vec<Target>) {
    const TIME: &str = "inspect server-everything";
    const TIME_GOAL: &str = "≤ server start + 50 ms";
    const MEMORY: &str = "inspect memory";
    const MEMORY_GOAL: &str = "< 10 MiB";
    let i = match outcome {
        InspectOutcome::Measured(i) => i,
        InspectOutcome::Skipped { .. } => {
            for (what, goal) in [(TIME, TIME_GOAL), (MEMORY, MEMORY_GOAL)] {
                out.push(Target {
                    what: what.into(),
                    goal: goal.into(),
                    measured: "not measured: server-everything is not installed".to_owned(),
                    pass: None,
                });
            }
            return;
        }
    };
    let start = i.direct_tools_list.median_ms;
    let printed = i.mcpvisor_output.median_ms;
    let exited = i.mcpvisor_exit.median_ms;
    let stop = i.mcpvisor_stop.median_ms;
    // The server's stop is the server's business (server-everything does
    // not exit on stdin EOF, so mcpvisor waits out a grace period and
    // signals it): when it is most of mcpvisor's time over the server's
    // start, judge on the moment the tools were printed.
    let dominated = stop > 0.5 * (exited - start);
    let measured = if dominated {
        format!(
            "{:+.1} ms: JSON printed at {printed:.1} ms vs tools/list answered at {start:.1} ms \
             direct; exit at {exited:.0} ms ({stop:.0} ms stopping the server, which ignores \
             stdin EOF)",
            printed - start
        )
    } else {
        format!(
            "{:+.1} ms: exit at {exited:.1} ms vs tools/list answered at {start:.1} ms direct \
             (JSON printed at {printed:.1} ms)",
            exited - start
        )
    };
    let judged = if dominated { printed } else { exited };
    out.push(Target {
        what: TIME.into(),
        goal: TIME_GOAL.into(),
        measured,
        pass: Some(judged - start <= INSPECT_BUDGET_MS),
    });
    let mib = i.peak_kib() as f64 / 1024.0;
    out.push(Target {
        what: MEMORY.into(),
        goal: MEMORY_GOAL.into(),
        measured: format!(
            "{mib:.2} MiB (its own VmHWM, the most of {} runs; {} tools listed)",
            i.mcpvisor_peak_kib.len(),
            i.tools
        ),
        pass: Some(mib < INSPECT_MEMORY_MIB),
    });
}

fn cell_name(c: &Cell) -> String {
    format!(
        "{}, concurrency {}",
        size_name(c.payload_bytes),
        c.concurrency
    )
}

pub fn size_name(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

pub fn count_name(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// A figure with sensible precision for its size.
pub fn num(x: f64) -> String {
    match x.abs() {
        a if a >= 1000.0 => format!("{x:.0}"),
        a if a >= 10.0 => format!("{x:.1}"),
        _ => format!("{x:.2}"),
    }
}

pub fn ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "—".to_owned(), |r| format!("{r:.2}×"))
}

pub fn verdict(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "pass",
        Some(false) => "FAIL",
        None => "skipped",
    }
}

/// The human table for stdout.
pub fn text(r: &Results) -> String {
    let rows = rows(r);
    let width = rows
        .iter()
        .map(|row| row.figure.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:>10}  {:>7}",
        "", "direct", "mcpvisor", "ratio"
    );
    for row in &rows {
        let direct = row.direct.map_or_else(|| "—".to_owned(), num);
        let mcpvisor = row.mcpvisor.map_or_else(|| "—".to_owned(), num);
        let _ = writeln!(
            out,
            "{:<width$}  {direct:>10}  {mcpvisor:>10}  {:>7}",
            row.figure,
            ratio(row.ratio)
        );
    }
    let _ = writeln!(out, "\n{FLOOR_NOTE}\n");
    let _ = writeln!(out, "{:<width$}  {:>10}  {:>10}", "", "relay", "mcpvisor");
    for row in floor_rows(r) {
        let _ = writeln!(
            out,
            "{:<width$}  {:>10}  {:>10}",
            row.figure,
            ratio(Some(row.relay)),
            ratio(Some(row.mcpvisor))
        );
    }
    let _ = writeln!(out);
    out.push_str(&targets_text(&targets(r)));
    if let InspectOutcome::Skipped { reason } = &r.inspect {
        let _ = writeln!(out, "\ninspect: skipped: {reason}");
    }
    let _ = writeln!(out);
    out.push_str(&gateway::report::text(&r.gateway));
    out
}

/// Targets as aligned lines: goal, verdict, what was measured.
pub fn targets_text(targets: &[Target]) -> String {
    let width = targets
        .iter()
        .map(|t| t.what.chars().count() + t.goal.chars().count() + 2)
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for t in targets {
        let goal = format!("{}: {}", t.what, t.goal);
        let _ = writeln!(out, "{goal:<width$}  {}  {}", verdict(t.pass), t.measured);
    }
    out
}

/// Targets as a markdown table.
pub fn targets_markdown(targets: &[Target]) -> String {
    let mut out = String::from("| target | goal | measured | |\n| --- | --- | --- | --- |\n");
    for t in targets {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            t.what,
            t.goal,
            t.measured,
            verdict(t.pass)
        );
    }
    out
}

/// The markdown bullet that says how `inspect` was measured.
fn inspect_note(outcome: &InspectOutcome) -> String {
    match outcome {
        InspectOutcome::Measured(i) => format!(
            "Inspect: `mcpvisor inspect --json -- node dist/index.js stdio` on {}, {} fresh \
             runs, against as many direct starts of the same server (node spawned, \
             `initialize` sent at once with the capabilities mcpvisor declares, then \
             `notifications/initialized` and `tools/list`). \
             mcpvisor is timed from its spawn to its JSON complete on stdout and to its exit; \
             its memory is its own VmHWM, polled every few milliseconds while it runs (the \
             node server not counted). Each run's JSON was checked: the same tool names as \
             the direct `tools/list`.",
            i.server,
            i.mcpvisor_output.samples_ms.len()
        ),
        InspectOutcome::Skipped { .. } => "Inspect: not measured in this run, server-everything \
             is not installed (`tests/interop/setup.sh` installs it; `--everything PATH` points \
             at its `dist/index.js`)."
            .to_owned(),
    }
}

/// The generated part of the markdown file.
fn markdown(r: &Results, plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Run of {}\n", r.date);
    let _ = writeln!(out, "- Machine: {} cores ({}).", r.cores, r.cpu);
    if r.quick {
        let _ = writeln!(
            out,
            "- **Quick run** (`--quick`): a smoke test; the figures are rough."
        );
    }
    let _ = writeln!(
        out,
        "- Direct: the client on the fake worker's own pipes. mcpvisor: the same client on \
         `mcpvisor run -q --no-watch -- mcpvisor-fake-worker`.\n\
         - Throughput cells: `bench/echo` with a params string of the payload size; the \
         concurrency is the number of requests kept in flight on the one pipe. Each side \
         runs {} s per round after a {} s warm-up on a fresh process, in {} round{}; the \
         side that goes first rotates.\n\
         - Memory: VmHWM of the mcpvisor process (not the worker) under 64 B requests at \
         concurrency 32, with file watching on as by default (`mcpvisor run -q -- \
         mcpvisor-fake-worker`: the worker's own file is watched). What is resident at the \
         last mark is split into mcpvisor's private memory and the pages it maps from \
         files (its code, the libraries'), which the page cache holds once for every \
         process of the same binary.\n\
         - {}\n\
         - Every answer was checked byte for byte against its own request's payload; each \
         request was answered exactly once.\n",
        plan.cell_time.as_secs_f64(),
        plan.warmup.as_secs_f64(),
        plan.rounds,
        if plan.rounds == 1 { "" } else { "s" },
        inspect_note(&r.inspect)
    );
    let _ = writeln!(out, "### Targets\n");
    out.push_str(&targets_markdown(&targets(r)));
    let _ = writeln!(out, "\n### Figures\n");
    let _ = writeln!(
        out,
        "Reading them: the ratios compare the two sides of one run; the absolute figures \
         move with the machine (on a virtual machine, a pipe hop to an idle vCPU costs far \
         more than one to a busy vCPU, so the same build can show a direct round trip of \
         10 µs or 75 µs). With 64 KiB payloads at concurrency 32 a direct client's writes \
         wait on the full pipe, so fewer of the 32 requests are really in flight, while \
         mcpvisor reads ahead into its bounded queues: there the latency ratio measures \
         queueing, and throughput is the figure to compare.\n"
    );
    let _ = writeln!(
        out,
        "| figure | direct | mcpvisor | mcpvisor ÷ direct |\n| --- | ---: | ---: | ---: |"
    );
    for row in rows(r) {
        let direct = row.direct.map_or_else(|| "—".to_owned(), num);
        let mcpvisor = row.mcpvisor.map_or_else(|| "—".to_owned(), num);
        let _ = writeln!(
            out,
            "| {} | {direct} | {mcpvisor} | {} |",
            row.figure,
            ratio(row.ratio)
        );
    }
    let _ = writeln!(out, "\n### The floor\n\n{FLOOR_NOTE}\n");
    let _ = writeln!(
        out,
        "| figure | relay ÷ direct | mcpvisor ÷ direct |\n| --- | ---: | ---: |"
    );
    for row in floor_rows(r) {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            row.figure,
            ratio(Some(row.relay)),
            ratio(Some(row.mcpvisor))
        );
    }
    let _ = writeln!(out);
    out.push_str(&gateway::report::markdown(&r.gateway, plan));
    out
}

/// Writes the markdown report to `path`, keeping the introduction above
/// the marker line of an existing file.
pub fn write_markdown(path: &Path, r: &Results, plan: &Plan) -> anyhow::Result<()> {
    let header = match std::fs::read_to_string(path) {
        Ok(old) => match old.find(MARKER) {
            Some(at) => old[..at].to_owned(),
            None => format!("{DEFAULT_HEADER}\n"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("{DEFAULT_HEADER}\n"),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let text = format!("{header}{MARKER}\n\n{}", markdown(r, plan));
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Writes the raw results as JSON.
pub fn write_raw(path: &Path, r: &Results) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(r)?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}
