//! The gateway's figures and targets, for stdout and for the markdown
//! report.

use std::fmt::Write as _;

use super::{Cell, Figures};
use crate::report::{Target, count_name, num, ratio, size_name, targets_markdown, targets_text};
use crate::scenario::Plan;

/// The most a 64 B call at concurrency 1 may take through the gateway,
/// as a multiple of direct (p50).
const LATENCY_RATIO: f64 = 1.5;
/// The least throughput at concurrency 32, as a fraction of direct.
const THROUGHPUT_RATIO: f64 = 0.6;
/// From spawn to `tools/list` answered with every server lazy and cached.
const LAZY_START_MS: f64 = 20.0;
/// The gateway's own peak memory: a base, and so much per server.
const MEMORY_BASE_MIB: f64 = 8.0;
const MEMORY_PER_SERVER_MIB: f64 = 1.0;

/// One row: a figure on the three sides (`None` where it means nothing).
struct Row {
    figure: String,
    direct: Option<f64>,
    run: Option<f64>,
    serve: Option<f64>,
}

impl Row {
    fn serve_only(figure: String, serve: f64) -> Self {
        Self {
            figure,
            direct: None,
            run: None,
            serve: Some(serve),
        }
    }

    fn over(&self, base: Option<f64>) -> Option<f64> {
        Some(self.serve? / base?)
    }
}

fn cell_name(c: &Cell) -> String {
    format!(
        "tools/call {}, concurrency {}",
        size_name(c.payload_bytes),
        c.concurrency
    )
}

/// "1 eager server", "5 eager servers".
fn servers(n: usize) -> String {
    match n {
        1 => "1 eager server".to_owned(),
        n => format!("{n} eager servers"),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn rows(g: &Figures) -> Vec<Row> {
    let mut rows = Vec::new();
    for c in &g.cells {
        let name = cell_name(c);
        let three = |what: &str, pick: fn(&crate::scenario::Throughput) -> f64| Row {
            figure: format!("{name}: {what}"),
            direct: Some(pick(&c.direct)),
            run: Some(pick(&c.run)),
            serve: Some(pick(&c.serve)),
        };
        rows.push(three("throughput (req/s)", |t| t.per_second));
        rows.push(three("p50 latency (µs)", |t| t.p50_us));
        rows.push(three("p99 latency (µs)", |t| t.p99_us));
    }
    let l = &g.lazy_start;
    let k = l.tools_list.samples_ms.len();
    rows.push(Row::serve_only(
        format!(
            "{} lazy servers, lists cached: spawn → initialize answered (ms, median of {k})",
            l.servers
        ),
        l.initialize.median_ms,
    ));
    rows.push(Row::serve_only(
        format!(
            "{} lazy servers, lists cached: spawn → tools/list answered (ms, median of {k})",
            l.servers
        ),
        l.tools_list.median_ms,
    ));
    for m in &g.memory {
        rows.push(Row::serve_only(
            format!(
                "gateway peak RSS, {}: after the handshake (MiB)",
                servers(m.backends)
            ),
            mib(m.after_handshake_kib),
        ));
        rows.push(Row::serve_only(
            format!(
                "gateway peak RSS, {}: after {} calls (MiB)",
                servers(m.backends),
                count_name(m.requests)
            ),
            mib(m.after_load_kib),
        ));
    }
    rows
}

fn targets(g: &Figures) -> Vec<Target> {
    let mut out = Vec::new();
    let find = |payload: usize, concurrency: usize| {
        g.cells
            .iter()
            .find(|c| c.payload_bytes == payload && c.concurrency == concurrency)
    };
    if let Some(c) = find(64, 1) {
        let (d, r, s) = (c.direct.p50_us, c.run.p50_us, c.serve.p50_us);
        out.push(Target {
            what: "serve, tools/call 64 B, concurrency 1: p50 latency".into(),
            goal: format!("≤ {LATENCY_RATIO}× direct"),
            measured: format!(
                "{:.2}× ({s:.1} µs vs {d:.1} µs; run: {r:.1} µs, {:.2}×)",
                s / d,
                r / d
            ),
            pass: Some(s <= LATENCY_RATIO * d),
        });
    }
    if let Some(c) = find(64, 32) {
        let (d, r, s) = (c.direct.per_second, c.run.per_second, c.serve.per_second);
        out.push(Target {
            what: "serve, tools/call 64 B, concurrency 32: throughput".into(),
            goal: format!("≥ {THROUGHPUT_RATIO}× direct"),
            measured: format!(
                "{:.2}× ({s:.0} vs {d:.0} req/s; run: {r:.0} req/s, {:.2}×)",
                s / d,
                r / d
            ),
            pass: Some(s >= THROUGHPUT_RATIO * d),
        });
    }
    let l = &g.lazy_start;
    let k = l.tools_list.samples_ms.len();
    let slowest = l
        .tools_list
        .samples_ms
        .iter()
        .copied()
        .fold(0.0_f64, f64::max);
    out.push(Target {
        what: format!("serve start, {} lazy servers, lists cached", l.servers),
        goal: format!("initialize and tools/list answered ≤ {LAZY_START_MS} ms after spawn"),
        measured: format!(
            "tools/list answered at {:.1} ms, initialize at {:.1} ms (medians of {k}; slowest \
             list {slowest:.1} ms)",
            l.tools_list.median_ms, l.initialize.median_ms
        ),
        pass: Some(l.tools_list.median_ms <= LAZY_START_MS),
    });
    out.push(Target {
        what: format!("serve start, {} lazy servers: no server started", l.servers),
        goal: "none".into(),
        measured: format!(
            "{} in the most of {k} runs (the run that filled the cache started {} of {}, as \
             the check saw)",
            l.started, l.started_filling, l.servers
        ),
        pass: Some(l.started == 0),
    });
    for m in &g.memory {
        let limit = MEMORY_BASE_MIB + MEMORY_PER_SERVER_MIB * m.backends as f64;
        let peak = mib(m.after_load_kib);
        out.push(Target {
            what: format!("gateway peak RSS, {}", servers(m.backends)),
            goal: format!("≤ {limit} MiB (8 MiB + 1 MiB per server)"),
            measured: format!(
                "{peak:.2} MiB after {} calls ({:.2} MiB after the handshake)",
                count_name(m.requests),
                mib(m.after_handshake_kib)
            ),
            pass: Some(peak <= limit),
        });
    }
    out
}

/// The gateway's part of the stdout report.
pub fn text(g: &Figures) -> String {
    let rows = rows(g);
    let width = rows
        .iter()
        .map(|row| row.figure.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:>10}  {:>10}  {:>8}  {:>8}",
        "mcpvisor serve", "direct", "run", "serve", "÷ direct", "÷ run"
    );
    for row in &rows {
        let cell = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), num);
        let _ = writeln!(
            out,
            "{:<width$}  {:>10}  {:>10}  {:>10}  {:>8}  {:>8}",
            row.figure,
            cell(row.direct),
            cell(row.run),
            cell(row.serve),
            ratio(row.over(row.direct)),
            ratio(row.over(row.run))
        );
    }
    let _ = writeln!(out);
    out.push_str(&targets_text(&targets(g)));
    out
}

/// The gateway's section of the markdown report.
pub fn markdown(g: &Figures, plan: &Plan) -> String {
    let mut out = String::new();
    let l = &g.lazy_start;
    let requests = g.memory.first().map_or(0, |m| m.requests);
    let servers: Vec<String> = g.memory.iter().map(|m| m.backends.to_string()).collect();
    let _ = writeln!(out, "### The gateway: `mcpvisor serve`\n");
    let _ = writeln!(
        out,
        "- Throughput cells: a `tools/call` of the fake worker's `echo` tool with arguments \
         `{{\"s\":\"…\"}}`, the string of the payload size, on three sides in the same rounds: \
         direct (the fake worker's own pipes, tool `echo`), `mcpvisor run -q --no-watch -- \
         mcpvisor-fake-worker` (tool `echo`), and `mcpvisor serve -q --no-watch --config \
         FILE` with the fake worker as FILE's one server `bench` (tool `{tool}`). {} s per \
         side and round after a {} s warm-up on a fresh process, {} rounds; the side that \
         goes first rotates.\n\
         - Start: FILE with {n} servers, each the fake worker with `\"start\": \"lazy\"`, and \
         the list cache (`MCPVISOR_CACHE_DIR`, a temp dir) filled by a first run. Timed from \
         the spawn of `serve` to its answers to `initialize` and to `tools/list` (sent right \
         after `notifications/initialized`), {k} fresh runs. A server started would show as \
         a child of the gateway in `/proc` when the list is answered, or as the file the \
         fake worker creates at start (`--log-file`); the run that filled the cache left \
         {filled} of those files.\n\
         - Memory: VmHWM of the gateway process alone (not the fake workers) with {} eager \
         servers, after the handshake and after {} 64 B calls at concurrency 32 spread over \
         every server.\n",
        plan.cell_time.as_secs_f64(),
        plan.warmup.as_secs_f64(),
        plan.rounds,
        servers.join(", "),
        count_name(requests),
        tool = super::TOOL,
        n = l.servers,
        k = l.tools_list.samples_ms.len(),
        filled = l.started_filling,
    );
    let _ = writeln!(out, "#### Targets\n");
    out.push_str(&targets_markdown(&targets(g)));
    let _ = writeln!(out, "\n#### Figures\n");
    let _ = writeln!(
        out,
        "| figure | direct | run | serve | serve ÷ direct | serve ÷ run |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for row in rows(g) {
        let cell = |x: Option<f64>| x.map_or_else(|| "—".to_owned(), num);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            row.figure,
            cell(row.direct),
            cell(row.run),
            cell(row.serve),
            ratio(row.over(row.direct)),
            ratio(row.over(row.run))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{LazyStart, Memory};
    use crate::scenario::{Samples, Throughput};

    fn throughput(per_second: f64, p50_us: f64) -> Throughput {
        Throughput {
            requests: 1,
            seconds: 1.0,
            per_second,
            p50_us,
            p99_us: p50_us,
        }
    }

    fn samples(ms: f64) -> Samples {
        Samples {
            median_ms: ms,
            samples_ms: vec![ms],
        }
    }

    fn figures(serve_p50: f64, serve_rate: f64, list_ms: f64, started: usize, kib: u64) -> Figures {
        let cell = |concurrency, serve| Cell {
            payload_bytes: 64,
            concurrency,
            direct: throughput(1000.0, 10.0),
            run: throughput(800.0, 12.0),
            serve,
        };
        Figures {
            cells: vec![
                cell(1, throughput(500.0, serve_p50)),
                cell(32, throughput(serve_rate, 20.0)),
            ],
            lazy_start: LazyStart {
                servers: 20,
                tools: 240,
                initialize: samples(list_ms - 1.0),
                tools_list: samples(list_ms),
                started_filling: 20,
                started,
            },
            memory: vec![Memory {
                backends: 20,
                after_handshake_kib: kib,
                requests: 100,
                after_load_kib: kib,
            }],
        }
    }

    fn verdicts(f: &Figures) -> Vec<Option<bool>> {
        targets(f).iter().map(|t| t.pass).collect()
    }

    #[test]
    fn every_target_is_judged_against_its_own_bound() {
        let good = figures(15.0, 600.0, 20.0, 0, 28 * 1024);
        assert_eq!(verdicts(&good), [Some(true); 5]);
        let bad = figures(15.1, 599.0, 20.1, 1, 28 * 1024 + 1);
        assert_eq!(verdicts(&bad), [Some(false); 5]);
    }

    #[test]
    fn the_memory_bound_grows_with_the_servers() {
        let t = targets(&figures(10.0, 1000.0, 1.0, 0, 9 * 1024));
        let memory = t.last().expect("a memory target");
        assert_eq!(memory.what, "gateway peak RSS, 20 eager servers");
        assert!(memory.goal.starts_with("≤ 28 MiB"), "{}", memory.goal);
    }
}
