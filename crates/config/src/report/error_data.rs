//! `error.data` of mcpvisor's own errors, one type for both ends.
//!
//! The session writes an [`ErrorData`] into the `error.data` of every
//! `-32010` (the server stopped with the request in flight) and `-32011`
//! (not started); the runner reads the same type back and turns it into a
//! [`CrashReport`]. The wire shape is
//!
//! ```json
//! {"generation": 2, "reason": "it exited with exit code 3",
//!  "phase": "serving", "exit": {"code": 3}, "uptime_ms": 1234,
//!  "stderr": ["last", "lines"],
//!  "stray_stdout": {"lines": 1, "bytes": 8}}
//! ```
//!
//! where only `reason` is always present: a refusal that involved no server
//! (a duplicate id) carries nothing else, a server that could not be started
//! has `phase: "spawn"` and no `exit`, and `exit` is `null` when the status
//! is not known.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CrashPhase, CrashReport, ExitKind, truncate};
use crate::auth::strip_ansi;

/// What happened to the server, for the `error.data` of mcpvisor's errors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorData {
    /// The worker generation concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// What happened, in words.
    pub reason: String,
    /// What the server was doing; absent when no server was involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<CrashPhase>,
    /// How the process ended: `{"code": N}`, `{"signal": N}`, or `null`
    /// when not known (yet); absent when no process ran.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "exit_wire")]
    pub exit: Option<ExitKind>,
    /// How long the process ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_ms: Option<u64>,
    /// Its last stderr lines, only when asked for (they may hold secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Vec<String>>,
    /// What it wrote to stdout that was not JSON-RPC.
    #[serde(default, skip_serializing_if = "StrayStdout::is_empty")]
    pub stray_stdout: StrayStdout,
}

/// Lines a worker wrote to its stdout that were not JSON-RPC messages (a
/// stray `print()` is the commonest way to break a stdio server). Counted
/// always; their heads are kept only when asked for, since they may hold
/// secrets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StrayStdout {
    /// How many lines.
    pub lines: u64,
    /// Their total size, without line terminators.
    pub bytes: u64,
    /// The first [`StrayStdout::MAX_HEADS`] lines, each cut to
    /// [`StrayStdout::HEAD_BYTES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heads: Vec<String>,
}

// === impl ErrorData ===

impl ErrorData {
    /// A refusal that involved no server.
    pub fn reason(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            ..Self::default()
        }
    }

    /// A server that could not be started.
    pub fn spawn(reason: impl Into<String>, generation: Option<u64>) -> Self {
        Self {
            generation,
            phase: Some(CrashPhase::Spawn),
            ..Self::reason(reason)
        }
    }

    /// The last line of stderr it carries that says something, cut to
    /// [`ErrorData::LAST_LINE_CHARS`] characters, for a one-line message.
    pub fn last_stderr_line(&self) -> Option<String> {
        let line = self
            .stderr
            .as_deref()?
            .iter()
            .rev()
            .map(|line| line.trim())
            .find(|line| !line.is_empty())?;
        Some(match line.char_indices().nth(Self::LAST_LINE_CHARS) {
            Some((at, _)) => format!("{}…", &line[..at]),
            None => line.to_owned(),
        })
    }

    /// `; its last stderr line: ...` when `data` (an `error.data`) carries
    /// stderr, else nothing: for the message of an error, which a person
    /// reads first.
    pub fn last_words(data: &serde_json::Value) -> String {
        Self::deserialize(data)
            .ok()
            .and_then(|data| data.last_stderr_line())
            .map(|line| format!("; its last stderr line: {line}"))
            .unwrap_or_default()
    }

    /// Most characters of [`ErrorData::last_stderr_line`].
    pub const LAST_LINE_CHARS: usize = 300;

    /// Every text it holds with the known secrets replaced
    /// ([`crate::redact`]): for what was put together before a secret was
    /// known, or from text that never passed through a stderr tail.
    pub fn redacted(mut self) -> Self {
        let redactor = crate::redact::global();
        let stderr = self.stderr.iter_mut().flatten();
        let heads = self.stray_stdout.heads.iter_mut();
        let detail = match &mut self.exit {
            Some(ExitKind::Http(end)) => Some(&mut end.detail),
            _ => None,
        };
        redactor.redact_all(
            std::iter::once(&mut self.reason)
                .chain(stderr)
                .chain(heads)
                .chain(detail),
        );
        self
    }

    /// How long the server ran, if known.
    pub fn uptime(&self) -> Option<Duration> {
        self.uptime_ms.map(Duration::from_millis)
    }

    /// The report for a person, when this says what a server did (it has a
    /// phase); `None` for a refusal that involved no server.
    pub fn crash_report(&self) -> Option<CrashReport> {
        let phase = self.phase?;
        let exit = match (&self.exit, phase) {
            (Some(exit), _) => Some(exit.clone()),
            (None, CrashPhase::Spawn) => None,
            (None, _) => Some(ExitKind::Unknown),
        };
        Some(CrashReport {
            phase,
            exit,
            uptime: self.uptime().unwrap_or_default(),
            stderr_tail: self.stderr.as_deref().unwrap_or_default().join("\n"),
            reason: self.reason.clone(),
            stray_stdout: self.stray_stdout.clone(),
        })
    }
}

// === impl StrayStdout ===

impl StrayStdout {
    /// Most lines whose heads are kept.
    pub const MAX_HEADS: usize = 3;
    /// Most bytes kept of each head.
    pub const HEAD_BYTES: usize = 120;

    /// Counts one line (without its terminator); keeps its head if
    /// `keep_head` and fewer than [`StrayStdout::MAX_HEADS`] are kept.
    pub fn record(&mut self, line: &[u8], keep_head: bool) {
        self.lines += 1;
        self.bytes += line.len() as u64;
        if keep_head && self.heads.len() < Self::MAX_HEADS {
            // Room for escape codes; `truncate` marks a cut head with `…`.
            let cut = &line[..line.len().min(2 * Self::HEAD_BYTES)];
            let text = String::from_utf8_lossy(cut);
            let text = crate::redact::global().redact(&text);
            let text = strip_ansi(text.trim_end_matches(['\r', '\n']));
            self.heads.push(truncate(&text, Self::HEAD_BYTES));
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }
}

/// `exit` on the wire: `{"code": N}`, `{"signal": N}` or `null`
/// ([`ExitKind::Unknown`]). An absent field is `None` (via `default`).
mod exit_wire {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::ExitKind;
    use crate::report::HttpEnd;

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Wire {
        Code(i32),
        Signal(i32),
        Http(HttpEnd),
    }

    pub fn serialize<S: Serializer>(exit: &Option<ExitKind>, s: S) -> Result<S::Ok, S::Error> {
        let wire = match exit {
            Some(ExitKind::Code(code)) => Some(Wire::Code(*code)),
            Some(ExitKind::Signal(signal, _)) => Some(Wire::Signal(*signal)),
            Some(ExitKind::Http(end)) => Some(Wire::Http(end.clone())),
            Some(ExitKind::Unknown) | None => None,
        };
        wire.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ExitKind>, D::Error> {
        Ok(Some(match Option::<Wire>::deserialize(d)? {
            Some(Wire::Code(code)) => ExitKind::Code(code),
            Some(Wire::Signal(signal)) => ExitKind::signal(signal),
            Some(Wire::Http(end)) => ExitKind::Http(end),
            None => ExitKind::Unknown,
        }))
    }
}
