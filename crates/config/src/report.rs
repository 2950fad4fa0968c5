//! Crash reports: what a worker said last, and how and when it stopped.
//!
//! The stderr reader pushes every line into a [`StderrTail`], a small ring
//! that keeps the last [`TAIL_MAX_LINES`] lines or [`TAIL_MAX_BYTES`] bytes,
//! whichever is fewer, so a worker that floods stderr costs bounded memory.
//! Known secrets are taken out of each line as it is kept, so the tail can
//! be shown wherever a crash is.
//! When the worker dies, the session answers the requests it held with an
//! [`ErrorData`] in `error.data`: the [`CrashPhase`] it died in, its
//! [`ExitKind`], its uptime, optionally the tail, and a count of the stdout
//! lines it wrote that were not JSON-RPC ([`StrayStdout`]). The runner reads
//! the same type back and makes a [`CrashReport`] of it: `Display` is for
//! people (a summary line, then the tail indented); `Serialize` is for
//! `--json` output and logs.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::auth::strip_ansi;

mod error_data;

pub use error_data::{ErrorData, StrayStdout};

/// Most lines a [`StderrTail`] keeps.
pub const TAIL_MAX_LINES: usize = 50;
/// Most bytes a [`StderrTail`]'s text may have, newlines included. Also the
/// longest line kept; longer ones are cut and end in `…`.
pub const TAIL_MAX_BYTES: usize = 8 * 1024;

/// The last lines a worker wrote to stderr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StderrTail {
    lines: VecDeque<String>,
    /// Sum of the lengths of `lines`, without separators.
    bytes: usize,
}

/// What the worker was doing when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CrashPhase {
    /// Starting the process.
    Spawn,
    /// The `initialize` handshake.
    Initialize,
    /// After the handshake, serving requests.
    Serving,
}

/// How a process ended: what the process owner reports, what `error.data`
/// carries and what a [`CrashReport`] shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitKind {
    /// It exited with this status code.
    Code(i32),
    /// A signal ended it: the number and its name (`"SIGKILL"`; empty when
    /// the number has no well-known name).
    Signal(i32, String),
    /// The platform gave neither a code nor a signal.
    Unknown,
    /// A remote server's HTTP session ended: it answered with an HTTP
    /// status that ends it, or could not be reached.
    Http(HttpEnd),
}

/// How a remote server's HTTP session ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpEnd {
    /// The HTTP status that ended it; `None` when no answer came (the
    /// connection was refused, reset or timed out).
    pub status: Option<u16>,
    /// What mcpvisor was doing.
    pub stage: HttpStage,
    /// What went wrong, in words (`"connection refused"`); never a URL or
    /// a header value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// What a remote server's client was doing when its HTTP session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpStage {
    /// Sending a message (a POST), `initialize` included.
    Post,
    /// Holding the standalone stream open (a GET).
    Listen,
    /// Resuming a dropped stream (a GET with `Last-Event-ID`).
    Resume,
    /// Ending the session when mcpvisor was done with it (a DELETE).
    Close,
}

/// Why and how a worker stopped, with its last words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CrashReport {
    /// What the worker was doing.
    pub phase: CrashPhase,
    /// How the process ended; `None` when it did not start or has not been
    /// reaped.
    pub exit: Option<ExitKind>,
    /// Time from spawn to the crash.
    #[serde(rename = "uptime_ms", serialize_with = "as_millis")]
    pub uptime: Duration,
    /// [`StderrTail::text`] at the time of the crash.
    pub stderr_tail: String,
    /// What mcpvisor saw, e.g. `"stdout closed"` or an I/O error; may be
    /// empty.
    pub reason: String,
    /// What it wrote to stdout that was not JSON-RPC.
    #[serde(skip_serializing_if = "StrayStdout::is_empty")]
    pub stray_stdout: StrayStdout,
}

// === impl StderrTail ===

impl StderrTail {
    /// An empty tail.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one line. A trailing `\n` or `\r\n` and ANSI escape codes are
    /// removed, every known secret is replaced by `[redacted:NAME]`
    /// ([`crate::redact`]), and a line longer than [`TAIL_MAX_BYTES`] is
    /// cut.
    pub fn push_line(&mut self, line: &str) {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = crate::redact::global().redact(line);
        let line = strip_ansi(&line);
        let line = truncate(&line, TAIL_MAX_BYTES);
        self.bytes += line.len();
        self.lines.push_back(line);
        while self.lines.len() > TAIL_MAX_LINES || self.text_len() > TAIL_MAX_BYTES {
            let Some(oldest) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= oldest.len();
        }
    }

    /// The kept lines joined with `\n`, without a final newline.
    pub fn text(&self) -> String {
        let mut text = String::with_capacity(self.text_len());
        for (i, line) in self.lines.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(line);
        }
        text
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
    }

    /// How many lines are kept.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether no line is kept.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Forgets every line, e.g. when a new worker starts.
    pub fn clear(&mut self) {
        self.lines.clear();
        self.bytes = 0;
    }

    fn text_len(&self) -> usize {
        self.bytes + self.lines.len().saturating_sub(1)
    }
}

/// `line` cut to at most `max` bytes on a character boundary, ending in `…`
/// when cut.
fn truncate(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_owned();
    }
    const MARK: &str = "…";
    let mut end = max - MARK.len();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &line[..end])
}

// === impl CrashPhase ===

impl fmt::Display for CrashPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CrashPhase::Spawn => "spawn",
            CrashPhase::Initialize => "initialize",
            CrashPhase::Serving => "serving",
        })
    }
}

// === impl ExitKind ===

impl ExitKind {
    /// A signal exit, named when the number is a well-known signal.
    pub fn signal(number: i32) -> Self {
        ExitKind::Signal(number, signal_name(number).unwrap_or_default().to_owned())
    }

    /// Whether the process exited with code 0.
    pub fn success(&self) -> bool {
        *self == ExitKind::Code(0)
    }
}

#[cfg(unix)]
impl From<std::process::ExitStatus> for ExitKind {
    fn from(status: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitKind::Code(code),
            (None, Some(signal)) => ExitKind::signal(signal),
            (None, None) => ExitKind::Unknown,
        }
    }
}

/// Names of the signals whose numbers are the same on Linux and macOS,
/// plus the platform's own numbers for a few more.
fn signal_name(number: i32) -> Option<&'static str> {
    Some(match number {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        #[cfg(target_os = "linux")]
        7 => "SIGBUS",
        #[cfg(target_os = "linux")]
        10 => "SIGUSR1",
        #[cfg(target_os = "linux")]
        12 => "SIGUSR2",
        #[cfg(target_os = "macos")]
        10 => "SIGBUS",
        #[cfg(target_os = "macos")]
        30 => "SIGUSR1",
        #[cfg(target_os = "macos")]
        31 => "SIGUSR2",
        _ => return None,
    })
}

impl fmt::Display for ExitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitKind::Code(code) => write!(f, "exited with code {code}"),
            ExitKind::Signal(number, name) if name.is_empty() => {
                write!(f, "was killed by signal {number}")
            }
            ExitKind::Signal(number, name) => write!(f, "was killed by {name} (signal {number})"),
            ExitKind::Unknown => f.write_str("exited with an unknown status"),
            ExitKind::Http(end) => end.fmt(f),
        }
    }
}

impl fmt::Display for HttpEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = match self.stage {
            HttpStage::Post => "to a POST",
            HttpStage::Listen => "on its standalone stream",
            HttpStage::Resume => "to a stream's resumption",
            HttpStage::Close => "to the DELETE that closed it",
        };
        match self.status {
            Some(404) => write!(f, "ended its session (HTTP 404 {to})")?,
            Some(status) => write!(f, "answered HTTP {status} {to}")?,
            None => write!(f, "gave no answer {to}")?,
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// `{"kind": "code", "code": 3}`, `{"kind": "signal", "signal": 9, "name":
/// "SIGKILL"}`, `{"kind": "http", "status": 404, "stage": "post"}` or
/// `{"kind": "unknown"}`.
impl Serialize for ExitKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        enum Repr<'a> {
            Code {
                code: i32,
            },
            Signal {
                signal: i32,
                #[serde(skip_serializing_if = "str::is_empty")]
                name: &'a str,
            },
            Unknown,
            Http {
                status: Option<u16>,
                stage: HttpStage,
                #[serde(skip_serializing_if = "str::is_empty")]
                detail: &'a str,
            },
        }
        match self {
            ExitKind::Code(code) => Repr::Code { code: *code },
            ExitKind::Signal(signal, name) => Repr::Signal {
                signal: *signal,
                name,
            },
            ExitKind::Unknown => Repr::Unknown,
            ExitKind::Http(end) => Repr::Http {
                status: end.status,
                stage: end.stage,
                detail: &end.detail,
            },
        }
        .serialize(serializer)
    }
}

// === impl CrashReport ===

impl CrashReport {
    /// The first line of the `Display` form, e.g. `server exited with code
    /// 3 during initialize after 1.2s`, for one-line logs and error
    /// messages.
    pub fn summary(&self) -> String {
        let how = match &self.exit {
            Some(exit) => exit.to_string(),
            None => "failed".to_owned(),
        };
        let mut line = format!(
            "server {how} during {} after {}",
            self.phase,
            format_uptime(self.uptime)
        );
        // A remote server's reason repeats how it ended.
        if !self.reason.is_empty() && !self.reason.contains(&how) {
            line.push_str(": ");
            line.push_str(&self.reason);
        }
        line
    }
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())?;
        let tail = self.stderr_tail.trim_end();
        // A remote server has no stderr; its tail is what its HTTP errors said.
        let remote = matches!(self.exit, Some(ExitKind::Http(_)));
        if tail.is_empty() {
            if !remote {
                f.write_str("\n  stderr: (empty)")?;
            }
        } else {
            let count = tail.lines().count();
            let plural = if count == 1 { "line" } else { "lines" };
            let what = if remote { "HTTP errors" } else { "stderr" };
            write!(f, "\n  {what} (last {count} {plural}):")?;
            for line in tail.lines() {
                write!(f, "\n    {line}")?;
            }
        }
        let stray = &self.stray_stdout;
        if !stray.is_empty() {
            let (what, verb) = if stray.lines == 1 {
                ("line", "is")
            } else {
                ("lines", "are")
            };
            write!(
                f,
                "\n  stdout: {} {what} that {verb} not JSON-RPC ({} bytes)",
                stray.lines, stray.bytes
            )?;
            if !stray.heads.is_empty() {
                f.write_str(", starting:")?;
                for head in &stray.heads {
                    write!(f, "\n    {head}")?;
                }
            }
        }
        Ok(())
    }
}

/// `850ms`, `1.2s`, `3m05s`, `2h07m`.
pub fn format_uptime(uptime: Duration) -> String {
    let secs = uptime.as_secs();
    if uptime < Duration::from_secs(1) {
        format!("{}ms", uptime.as_millis())
    } else if secs < 60 {
        // Tenths, truncated so that 59.96s does not print as "60.0s".
        let tenths = uptime.as_millis() / 100;
        format!("{}.{}s", tenths / 10, tenths % 10)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, secs % 3600 / 60)
    }
}

fn as_millis<S: Serializer>(uptime: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(uptime.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
