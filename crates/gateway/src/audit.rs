//! The audit trail: one [`Record`] per `tools/call`, `prompts/get` and
//! `resources/read` a front client made through the gateway, in a JSON
//! lines file (`serve --audit-log FILE`), in the web UI's Activity view and
//! in `/metrics`' per-tool figures.
//!
//! A record says who asked (the front's session and the client's name),
//! what (server, method, tool or prompt name, resource URI), how long it
//! took, how it ended ([`Outcome`], the JSON-RPC error code) and how many
//! bytes went each way. It never holds arguments, results or anything else
//! from the payloads; every string in it has each known secret replaced by
//! `[redacted:NAME]`, and a resource URI loses its query and fragment
//! (where a link carries its token) before that.
//!
//! The hub makes a record where an answer comes back (`Audit::finish`)
//! and never waits for it: the file is written by a task of its own
//! behind a bounded channel; when that channel is full the record is
//! dropped from the file, counted ([`Audit::dropped`]) and said in the log.
//! The file is rotated by size: `FILE` becomes `FILE.1`, `FILE.1` becomes
//! `FILE.2`, and so on, the oldest beyond [`Rotation::keep`] deleted.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{broadcast, mpsc};

use crate::monitor::LATENCY_BUCKETS;
use crate::raw::RawObject;

/// Records waiting for the file writer; one more is dropped, not waited for.
pub const QUEUE: usize = 4096;
/// Records the Activity view is given when it opens.
pub const RECENT_KEPT: usize = 200;
/// Distinct (server, tool) pairs `/metrics` counts on their own; calls to
/// further tools are counted under the tool name [`OTHER_TOOLS`] of their
/// server, so a server that invents names cannot grow the label set.
pub const TOOLS_KEPT: usize = 500;
/// The tool label of calls beyond [`TOOLS_KEPT`].
pub const OTHER_TOOLS: &str = "_other";
/// Room in the broadcast channel of live records.
const LIVE_CHANNEL: usize = 1024;

/// How the audit file is rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Once the file is this large, it is rotated before the next record.
    pub max_bytes: u64,
    /// Rotated files kept (`FILE.1` ... `FILE.keep`); 0 keeps none.
    pub keep: usize,
}

impl Default for Rotation {
    fn default() -> Self {
        Self {
            max_bytes: 10 * 1024 * 1024,
            keep: 5,
        }
    }
}

/// One audited request, as written to the file (one JSON object a line) and
/// shown in the Activity view.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Record {
    /// When the request reached the gateway (Unix ms).
    pub at_ms: u64,
    /// The front's session, as the gateway numbers them.
    pub session: u64,
    /// The client's name, from its `initialize` (`clientInfo.name`) or a
    /// 2026-07-28 request's `_meta` client info.
    pub client: Option<String>,
    /// The server's name in the config.
    pub server: String,
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub method: String,
    /// The tool or prompt as the client called it (its exposed name,
    /// `server__tool`), or the resource URI without its query and
    /// fragment.
    pub name: String,
    /// From the request reaching the gateway to its answer.
    pub duration_ms: f64,
    pub outcome: Outcome,
    /// The JSON-RPC error code, for [`Outcome::Error`].
    pub error_code: Option<i64>,
    /// The front's request line, in bytes.
    pub request_bytes: usize,
    /// The answer, in bytes, as the server's session wrote it.
    pub answer_bytes: usize,
}

/// A [`Record`] as the Activity view gets it: numbered in the order the
/// gateway made them, so a page that reads the last records and then the
/// live ones can leave out a record it has already.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub seq: u64,
    #[serde(flatten)]
    pub record: Record,
}

/// How an audited request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A result.
    Result,
    /// A `tools/call` result with `"isError": true`: the tool failed.
    IsError,
    /// A JSON-RPC error, from the server or from mcpvisor on its behalf.
    Error,
}

/// An audited request on its way: what is known when it is sent on.
#[derive(Debug, Clone)]
pub struct Call {
    at_ms: u64,
    session: u64,
    client: Option<String>,
    server: String,
    method: &'static str,
    name: String,
    request_bytes: usize,
}

/// One tool's figures for `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolStats {
    pub server: String,
    pub tool: String,
    pub results: u64,
    pub is_errors: u64,
    pub errors: u64,
    /// Counts per bucket of [`LATENCY_BUCKETS`], then `+Inf` (not
    /// cumulative).
    pub buckets: Vec<u64>,
    pub sum_seconds: f64,
}

/// The audit trail's handle: cheap to clone; the hub records through it,
/// the web UI reads it.
#[derive(Debug, Clone)]
pub struct Audit {
    shared: Arc<Shared>,
    file: Option<mpsc::Sender<Record>>,
}

#[derive(Debug)]
struct Shared {
    ledger: Mutex<Ledger>,
    dropped: AtomicU64,
    live: broadcast::Sender<Entry>,
}

/// What is kept in memory: the last records, and figures per tool.
#[derive(Debug, Default)]
struct Ledger {
    seq: u64,
    recent: VecDeque<Entry>,
    tools: BTreeMap<(String, String), ToolStats>,
}

// === impl Audit ===

impl Audit {
    /// An audit trail kept in memory only (the Activity view and
    /// `/metrics`), with no file.
    pub fn new() -> Self {
        let (live, _) = broadcast::channel(LIVE_CHANNEL);
        Self {
            shared: Arc::new(Shared {
                ledger: Mutex::new(Ledger::default()),
                dropped: AtomicU64::new(0),
                live,
            }),
            file: None,
        }
    }

    /// An audit trail also written to `path` (appended to, created private
    /// to the user), by a thread of its own that ends when the last handle
    /// is dropped. The file is opened now, so a path that cannot be written
    /// is an error before anything starts.
    pub fn with_file(path: &Path, rotation: Rotation) -> io::Result<Self> {
        let writer = Writer::open(path, rotation)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || writer.run(rx))?;
        Ok(Self {
            file: Some(tx),
            ..Self::new()
        })
    }

    /// Starts a record for a request sent on to `server`; `None` for a
    /// method that is not audited. `params` are the front request's params
    /// (for the name and a 2026-07-28 request's client info), `client` the
    /// name the front gave in its `initialize`.
    pub(crate) fn start(
        method: &str,
        params: Option<&RawObject<'_>>,
        session: u64,
        client: Option<&str>,
        server: &str,
        request_bytes: usize,
    ) -> Option<Box<Call>> {
        let (method, key) = match method {
            "tools/call" => ("tools/call", "name"),
            "prompts/get" => ("prompts/get", "name"),
            "resources/read" => ("resources/read", "uri"),
            _ => return None,
        };
        let mut name = params.and_then(|p| p.str(key)).unwrap_or_default();
        if key == "uri" {
            name = without_query(&name);
        }
        let client = client.map(str::to_owned).or_else(|| meta_client(params));
        Some(Box::new(Call {
            at_ms: now_ms(),
            session,
            client,
            server: server.to_owned(),
            method,
            name,
            request_bytes,
        }))
    }

    /// Finishes a record with its answer, as it came from the server's
    /// session, and keeps, publishes and queues it for the file.
    /// `answer_bytes`: the answer's size as the server's session wrote it
    /// (`answer` may be its line as the session read it, before the
    /// gateway's id went in).
    pub(crate) fn finish(&self, call: Call, took: Duration, answer: &[u8], answer_bytes: usize) {
        let error_code = mcpvisor_jsonrpc::envelope::error_code(answer);
        let outcome = match error_code {
            Some(_) => Outcome::Error,
            None if call.method == "tools/call" && is_error(answer) => Outcome::IsError,
            None => Outcome::Result,
        };
        let redactor = mcpvisor_config::redact::global();
        let clean = |s: String| redactor.redact(&s).into_owned();
        let record = Record {
            at_ms: call.at_ms,
            session: call.session,
            client: call.client.map(clean),
            server: clean(call.server),
            method: call.method.to_owned(),
            name: clean(call.name),
            duration_ms: took.as_secs_f64() * 1000.0,
            outcome,
            error_code,
            request_bytes: call.request_bytes,
            answer_bytes,
        };
        self.keep(record);
    }

    fn keep(&self, record: Record) {
        // Numbered and published under the lock, so that live entries go
        // out in the order of their numbers.
        if let Ok(mut ledger) = self.shared.ledger.lock() {
            let entry = ledger.add(&record);
            let _ = self.shared.live.send(entry);
        }
        let Some(file) = &self.file else {
            return;
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = file.try_send(record) {
            let dropped = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Said once, then at every thousandth, so a flood of drops is
            // not a flood of log lines.
            if dropped == 1 || dropped % 1000 == 0 {
                tracing::warn!(
                    dropped,
                    "the audit log's writer is behind: records dropped from the file (mcpvisor_audit_dropped_total)"
                );
            }
        }
    }

    /// The last records, oldest first, at most [`RECENT_KEPT`].
    pub fn recent(&self) -> Vec<Entry> {
        self.shared
            .ledger
            .lock()
            .map(|l| l.recent.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Entry> {
        self.shared.live.subscribe()
    }

    /// Each tool's figures, by server and tool.
    pub fn tools(&self) -> Vec<ToolStats> {
        self.shared
            .ledger
            .lock()
            .map(|l| l.tools.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Records the file writer could not take in time.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Default for Audit {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Ledger ===

impl Ledger {
    fn add(&mut self, record: &Record) -> Entry {
        self.seq += 1;
        let entry = Entry {
            seq: self.seq,
            record: record.clone(),
        };
        if self.recent.len() == RECENT_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(entry.clone());
        if record.method == "tools/call" {
            self.count(record);
        }
        entry
    }

    fn count(&mut self, record: &Record) {
        let mut key = (record.server.clone(), record.name.clone());
        if !self.tools.contains_key(&key) && self.tools.len() >= TOOLS_KEPT {
            key.1 = OTHER_TOOLS.to_owned();
        }
        let stats = self
            .tools
            .entry(key)
            .or_insert_with_key(|(server, tool)| ToolStats {
                server: server.clone(),
                tool: tool.clone(),
                buckets: vec![0; LATENCY_BUCKETS.len() + 1],
                ..ToolStats::default()
            });
        match record.outcome {
            Outcome::Result => stats.results += 1,
            Outcome::IsError => stats.is_errors += 1,
            Outcome::Error => stats.errors += 1,
        }
        let seconds = record.duration_ms / 1000.0;
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(LATENCY_BUCKETS.len());
        stats.buckets[bucket] += 1;
        stats.sum_seconds += seconds;
    }
}

// === the file ===

/// The task that owns the audit file.
struct Writer {
    path: PathBuf,
    file: io::BufWriter<File>,
    size: u64,
    rotation: Rotation,
}

impl Writer {
    fn open(path: &Path, rotation: Rotation) -> io::Result<Self> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            file: io::BufWriter::new(file),
            size,
            rotation,
        })
    }

    /// Writes records until every handle is gone, flushing after each
    /// batch that was waiting.
    fn run(mut self, mut rx: mpsc::Receiver<Record>) {
        while let Some(record) = rx.blocking_recv() {
            self.write(&record);
            while let Ok(record) = rx.try_recv() {
                self.write(&record);
            }
            if let Err(e) = self.file.flush() {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot write the audit log");
            }
        }
    }

    fn write(&mut self, record: &Record) {
        if self.size >= self.rotation.max_bytes {
            if let Err(e) = self.rotate() {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot rotate the audit log");
            }
        }
        let Ok(mut line) = serde_json::to_vec(record) else {
            return;
        };
        line.push(b'\n');
        match self.file.write_all(&line) {
            Ok(()) => self.size += line.len() as u64,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot write the audit log");
            }
        }
    }

    /// `FILE.(keep-1)` → `FILE.keep`, ..., `FILE` → `FILE.1`, then a new
    /// `FILE`.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let numbered = |n: usize| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.rotation.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            for n in (1..self.rotation.keep).rev() {
                match std::fs::rename(numbered(n), numbered(n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        self.file = io::BufWriter::new(open_append(&self.path)?);
        self.size = 0;
        Ok(())
    }
}

/// Opens `path` to append, creating it readable by its owner only.
fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

// === reading what a record needs ===

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A URI without its query and fragment, where links carry their tokens.
fn without_query(uri: &str) -> String {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    uri[..end].to_owned()
}

/// The client's name from a 2026-07-28 request's `_meta`.
fn meta_client(params: Option<&RawObject<'_>>) -> Option<String> {
    let meta = params?.get("_meta")?;
    let meta = RawObject::parse(meta.get())?;
    let info = meta.get("io.modelcontextprotocol/clientInfo")?;
    RawObject::parse(info.get())?.str("name")
}

/// Whether a `tools/call` answer's result says `"isError": true`.
fn is_error(answer: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        result: Option<&'a serde_json::value::RawValue>,
    }
    let Ok(answer) = serde_json::from_slice::<Answer<'_>>(answer) else {
        return false;
    };
    answer
        .result
        .and_then(|r| RawObject::parse(r.get()))
        .and_then(|r| r.get("isError"))
        .is_some_and(|v| v.get() == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(audit: &Audit, call: Call, took: Duration, answer: &[u8]) {
        audit.finish(call, took, answer, answer.len());
    }

    fn call(method: &'static str, name: &str) -> Call {
        Call {
            at_ms: 1,
            session: 3,
            client: Some("claude".into()),
            server: "files".into(),
            method,
            name: name.into(),
            request_bytes: 40,
        }
    }

    #[test]
    fn outcomes_are_read_from_the_answer() {
        let audit = Audit::new();
        let took = Duration::from_millis(3);
        finish(
            &audit,
            call("tools/call", "read"),
            took,
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}"#,
        );
        finish(
            &audit,
            call("tools/call", "read"),
            took,
            br#"{"jsonrpc":"2.0","id":2,"result":{"content":[],"isError":true}}"#,
        );
        finish(
            &audit,
            call("tools/call", "read"),
            took,
            br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32010,"message":"lost"}}"#,
        );
        finish(
            &audit,
            call("prompts/get", "p"),
            took,
            br#"{"jsonrpc":"2.0","id":4,"result":{"isError":true}}"#,
        );
        let got: Vec<(Outcome, Option<i64>)> = audit
            .recent()
            .iter()
            .map(|e| (e.record.outcome, e.record.error_code))
            .collect();
        assert_eq!(
            got,
            [
                (Outcome::Result, None),
                (Outcome::IsError, None),
                (Outcome::Error, Some(-32010)),
                (Outcome::Result, None),
            ]
        );
        let tools = audit.tools();
        assert_eq!(tools.len(), 1, "prompts are not tools: {tools:?}");
        assert_eq!(
            (tools[0].results, tools[0].is_errors, tools[0].errors),
            (1, 1, 1)
        );
        assert_eq!(tools[0].buckets.iter().sum::<u64>(), 3);
    }

    #[test]
    fn tools_beyond_the_cap_are_counted_together() {
        let audit = Audit::new();
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        for i in 0..TOOLS_KEPT + 10 {
            finish(
                &audit,
                call("tools/call", &format!("t{i}")),
                Duration::ZERO,
                ok,
            );
        }
        finish(&audit, call("tools/call", "t0"), Duration::ZERO, ok);
        let tools = audit.tools();
        assert_eq!(tools.len(), TOOLS_KEPT + 1);
        let other = tools
            .iter()
            .find(|t| t.tool == OTHER_TOOLS)
            .expect("_other");
        assert_eq!(other.results, 10);
        let t0 = tools.iter().find(|t| t.tool == "t0").expect("t0");
        assert_eq!(t0.results, 2, "a known tool keeps its own row");
        assert_eq!(audit.recent().len(), RECENT_KEPT);
    }

    #[test]
    fn a_uri_loses_its_query_and_fragment() {
        assert_eq!(without_query("https://x/a?token=s3cret#f"), "https://x/a");
        assert_eq!(without_query("file:///tmp/a#b"), "file:///tmp/a");
        assert_eq!(without_query("mem://plain"), "mem://plain");
    }

    #[test]
    fn the_client_comes_from_initialize_or_the_request_s_meta() {
        let params = r#"{"name":"echo","_meta":{"io.modelcontextprotocol/clientInfo":{"name":"modern","version":"1"}}}"#;
        let params = RawObject::parse(params);
        let started =
            Audit::start("tools/call", params.as_ref(), 1, None, "s", 10).expect("audited");
        assert_eq!(started.client.as_deref(), Some("modern"));
        assert_eq!(started.name, "echo");
        let started =
            Audit::start("tools/call", params.as_ref(), 1, Some("old"), "s", 10).expect("audited");
        assert_eq!(started.client.as_deref(), Some("old"));
        assert!(Audit::start("tools/list", None, 1, None, "s", 10).is_none());
    }

    #[test]
    fn the_file_is_rotated_by_size_keeping_the_newest() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("audit.jsonl");
        let rotation = Rotation {
            max_bytes: 1000,
            keep: 2,
        };
        let writer = Writer::open(&path, rotation).expect("open");
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = std::thread::spawn(move || writer.run(rx));
        let audit = Audit {
            file: Some(tx),
            ..Audit::new()
        };
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        for i in 0..40 {
            finish(
                &audit,
                call("tools/call", &format!("tool{i:02}")),
                Duration::ZERO,
                ok,
            );
        }
        drop(audit);
        task.join().expect("the writer ends with its handles");
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let (now, one, two) = (
            read(&path),
            read(&dir.path().join("audit.jsonl.1")),
            read(&dir.path().join("audit.jsonl.2")),
        );
        assert!(!dir.path().join("audit.jsonl.3").exists(), "only 2 kept");
        for file in [&now, &one, &two] {
            assert!(!file.is_empty());
            // Rotated before the record that would pass the bound: at most
            // one record over it.
            assert!(file.len() < 1000 + 400, "{}", file.len());
            for line in file.lines() {
                let _: serde_json::Value = serde_json::from_str(line).expect("whole JSON lines");
            }
        }
        assert!(now.contains("\"tool39\""), "the newest is in FILE");
        assert!(
            !format!("{now}{one}{two}").contains("\"tool00\""),
            "the oldest went"
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
