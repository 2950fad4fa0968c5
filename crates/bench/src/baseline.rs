//! The committed instruction counts and the comparison with a new run.
//!
//! A figure that grows more than [`TOLERANCE_PERCENT`] over its baseline
//! fails the check; one that shrinks as much only earns a note, since
//! locking a gain in is a decision for whoever made it (`--write`).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::instructions::TOLERANCE_PERCENT;

/// What the figures are, for whoever reads the baseline file.
const MEASURED: &str = "User-space instructions (callgrind Ir) executed by the mcpvisor \
process per request: a run of `requests` requests minus a run with none (the same start, \
handshake and shutdown), divided by `requests`. The requests are bench/echo through run, tools/call \
of the fake worker's echo tool as HTTP POSTs on one keep-alive connection through run --http, \
and tools/call of that tool (bench__echo) through serve and serve --http; over HTTP from a \
2025-11-25 client in its session, and in the rows named 2026-07-28 from a 2026-07-28 client, \
each call on its own with its envelope in _meta. The tokio-relay rows are not \
mcpvisor: `mcpvisor-bench relay`, which only copies bytes on tokio, traced the same way with \
bench/echo, the floor under the others. The fake worker runs untraced \
(--trace-children=no) and the client outside valgrind. Written by `mcpvisor-bench \
instructions --write`; see BENCHMARKS.md.";

/// A set of instruction counts, as written to and read from the file.
#[derive(Debug, Serialize, Deserialize)]
pub struct Baseline {
    pub measured: String,
    /// `valgrind --version` of the run.
    pub valgrind: String,
    pub tolerance_percent: f64,
    pub figures: Vec<Figure>,
}

/// One scenario at one load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figure {
    pub scenario: String,
    /// What ran under valgrind.
    pub command: String,
    pub payload_bytes: usize,
    pub concurrency: usize,
    pub requests: u64,
    pub instructions_per_request: u64,
}

impl Figure {
    fn same_load(&self, other: &Figure) -> bool {
        self.scenario == other.scenario
            && self.payload_bytes == other.payload_bytes
            && self.concurrency == other.concurrency
    }

    fn name(&self) -> String {
        format!(
            "{}, {} B, concurrency {}",
            self.scenario, self.payload_bytes, self.concurrency
        )
    }
}

/// `new` over `old` in per cent.
fn change(old: u64, new: u64) -> f64 {
    (new as f64 - old as f64) / old.max(1) as f64 * 100.0
}

impl Baseline {
    pub fn new(valgrind: String, figures: Vec<Figure>) -> Self {
        Self {
            measured: MEASURED.to_owned(),
            valgrind,
            tolerance_percent: TOLERANCE_PERCENT,
            figures,
        }
    }

    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the baseline {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("the baseline {} is not valid", path.display()))
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }

    fn find(&self, like: &Figure) -> Option<&Figure> {
        self.figures.iter().find(|f| f.same_load(like))
    }

    /// The figures as a table, with their change from `old` when given.
    pub fn table(&self, old: Option<&Baseline>) -> String {
        let mut out = format!(
            "mcpvisor's own instructions per request (callgrind, {}):\n\n",
            self.valgrind
        );
        let _ = writeln!(
            out,
            "{:<36} {:>9} {:>14} {:>14} {:>8}",
            "figure", "requests", "per request", "baseline", "change"
        );
        for f in &self.figures {
            let was = old.and_then(|b| b.find(f));
            let (base, delta) = match was {
                Some(b) => (
                    b.instructions_per_request.to_string(),
                    format!(
                        "{:+.1}%",
                        change(b.instructions_per_request, f.instructions_per_request)
                    ),
                ),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let _ = writeln!(
                out,
                "{:<36} {:>9} {:>14} {:>14} {:>8}",
                f.name(),
                f.requests,
                f.instructions_per_request,
                base,
                delta
            );
        }
        out.push('\n');
        out
    }

    /// Fails, naming each figure with its baseline and measurement, when a
    /// figure of `run` is over this baseline by more than its tolerance or
    /// the two do not cover the same figures.
    pub fn check(&self, run: &Baseline, path: &Path) -> anyhow::Result<()> {
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        for base in &self.figures {
            let Some(now) = run.find(base) else {
                failures.push(format!(
                    "{}: in the baseline but not measured any more (rewrite the baseline with --write)",
                    base.name()
                ));
                continue;
            };
            let (was, is) = (base.instructions_per_request, now.instructions_per_request);
            let delta = change(was, is);
            if delta > self.tolerance_percent {
                failures.push(format!(
                    "{}: {is} instructions per request, {delta:+.1}% over the baseline of {was} \
                     (at most +{}% is allowed)",
                    base.name(),
                    self.tolerance_percent
                ));
            } else if delta < -self.tolerance_percent {
                notes.push(format!(
                    "{}: {is} instructions per request, {delta:+.1}% under the baseline of {was}; \
                     lock the gain in with --write",
                    base.name()
                ));
            }
        }
        for now in &run.figures {
            if self.find(now).is_none() {
                failures.push(format!(
                    "{}: measured but not in the baseline (add it with --write)",
                    now.name()
                ));
            }
        }
        if run.valgrind != self.valgrind {
            notes.push(format!(
                "the baseline was counted with {}, this run with {}",
                self.valgrind, run.valgrind
            ));
        }
        for note in &notes {
            eprintln!("mcpvisor-bench: note: {note}");
        }
        if failures.is_empty() {
            return Ok(());
        }
        bail!(
            "instruction counts over the baseline {}:\n  {}\n\
             A change that makes a figure grow on purpose updates the baseline in the same \
             commit (scripts/instructions --write) and says why in its message.",
            path.display(),
            failures.join("\n  ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(per_request: &[(usize, u64)]) -> Baseline {
        Baseline::new(
            "valgrind-3.19.0".into(),
            per_request
                .iter()
                .map(|&(payload, n)| Figure {
                    scenario: "run".into(),
                    command: "mcpvisor run -- mcpvisor-fake-worker".into(),
                    payload_bytes: payload,
                    concurrency: 1,
                    requests: 2000,
                    instructions_per_request: n,
                })
                .collect(),
        )
    }

    #[test]
    fn growth_within_the_tolerance_passes() {
        let base = figures(&[(64, 20_000), (65_536, 400_000)]);
        let run = figures(&[(64, 21_999), (65_536, 100_000)]);
        base.check(&run, Path::new("b.json")).expect("within 10%");
    }

    #[test]
    fn growth_over_the_tolerance_names_the_figure() {
        let base = figures(&[(64, 20_000), (65_536, 400_000)]);
        let run = figures(&[(64, 20_100), (65_536, 440_400)]);
        let err = base
            .check(&run, Path::new("b.json"))
            .expect_err("over 10%")
            .to_string();
        assert!(err.contains("run, 65536 B, concurrency 1"), "{err}");
        assert!(err.contains("440400") && err.contains("400000"), "{err}");
        assert!(!err.contains("64 B"), "{err}");
    }

    #[test]
    fn figures_missing_on_either_side_fail() {
        let base = figures(&[(64, 20_000)]);
        let run = figures(&[(65_536, 1)]);
        let err = base
            .check(&run, Path::new("b.json"))
            .expect_err("different figures")
            .to_string();
        assert!(err.contains("not measured any more"), "{err}");
        assert!(err.contains("not in the baseline"), "{err}");
    }

    #[test]
    fn the_file_round_trips() {
        let base = figures(&[(64, 19_800)]);
        let text = serde_json::to_string(&base).expect("json");
        let back: Baseline = serde_json::from_str(&text).expect("read back");
        assert_eq!(back.figures[0].instructions_per_request, 19_800);
        assert_eq!(back.tolerance_percent, TOLERANCE_PERCENT);
    }
}
