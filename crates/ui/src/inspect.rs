//! The add-server wizard's inspections: what a pasted command line or
//! config entry is, and what the server offers when started.
//!
//! An inspection runs the server the way `mcpvisor inspect` does (the
//! runner's [`Connection`]: the supervising session in-process, stderr
//! discarded), bounded by [`crate::Limits::inspect_timeout`]. At most
//! [`crate::Limits::max_inspections`] run at once. Each job's progress is
//! kept in a table (a short mutex, never held across an await) and
//! published on a broadcast channel that the event streams read. Finished
//! jobs are forgotten after [`crate::Limits::job_ttl`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use mcpvisor_config::ServerDef;
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_runner::{CallError, Connection, ServerSpec, SessionEvent};
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, broadcast};

use crate::Limits;
use crate::api::ApiError;

/// Longest source accepted.
const MAX_SOURCE: usize = 16 * 1024;
/// Progress lines kept per job.
const MAX_PROGRESS: usize = 50;

/// The wizard's jobs.
pub(crate) struct Jobs {
    table: Arc<Mutex<HashMap<String, Job>>>,
    running: Arc<Semaphore>,
    events: broadcast::Sender<Value>,
    limits: Limits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobState {
    Running,
    Done,
    Failed,
}

struct Job {
    id: String,
    state: JobState,
    started: Instant,
    ended: Option<Instant>,
    progress: Vec<String>,
    suggested_name: String,
    /// The entry as it will be saved.
    entry: Map<String, Value>,
    tools: Vec<Value>,
    report: Option<Value>,
}

impl Jobs {
    pub fn new(limits: Limits) -> Self {
        Self {
            table: Arc::new(Mutex::new(HashMap::new())),
            running: Arc::new(Semaphore::new(limits.max_inspections)),
            events: broadcast::channel(256).0,
            limits,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.events.subscribe()
    }

    /// Starts inspecting `source`; relative paths in it are taken from
    /// `base`. Returns the job's id.
    pub fn start(&self, source: &str, base: &Path) -> Result<String, ApiError> {
        let parsed =
            parse_source(source, base).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))?;
        let Ok(permit) = self.running.clone().try_acquire_owned() else {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{} inspections are running already; wait for one to finish",
                    self.limits.max_inspections
                ),
            ));
        };
        let id = job_id();
        {
            let mut table = lock(&self.table);
            let ttl = self.limits.job_ttl;
            table.retain(|_, job| job.ended.is_none_or(|at| at.elapsed() < ttl));
            while table.len() >= self.limits.max_jobs {
                let oldest = table
                    .values()
                    .filter(|j| j.state != JobState::Running)
                    .min_by_key(|j| j.started)
                    .map(|j| j.id.clone());
                match oldest {
                    Some(oldest) => table.remove(&oldest),
                    None => break,
                };
            }
            table.insert(
                id.clone(),
                Job {
                    id: id.clone(),
                    state: JobState::Running,
                    started: Instant::now(),
                    ended: None,
                    progress: Vec::new(),
                    suggested_name: parsed.name.clone(),
                    entry: parsed.entry.clone(),
                    tools: Vec::new(),
                    report: None,
                },
            );
        }
        let runner = Runner {
            id: id.clone(),
            table: self.table.clone(),
            events: self.events.clone(),
        };
        let timeout = self.limits.inspect_timeout;
        tokio::spawn(async move {
            runner.run(parsed.def, timeout).await;
            drop(permit);
        });
        Ok(id)
    }

    /// The job's state as the API shows it.
    pub fn view(&self, id: &str) -> Option<Value> {
        lock(&self.table).get(id).map(Job::view)
    }

    /// The entry to save for job `id`: 404 unknown, 409 still running, 422
    /// failed (unless `force`).
    pub fn entry_for_save(&self, id: &str, force: bool) -> Result<Map<String, Value>, ApiError> {
        let table = lock(&self.table);
        let Some(job) = table.get(id) else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no inspection {id:?}; inspect the server again"),
            ));
        };
        match job.state {
            JobState::Running => Err(ApiError::new(
                StatusCode::CONFLICT,
                "the inspection is still running",
            )),
            JobState::Failed if !force => Err(ApiError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                message:
                    "the server failed its inspection; save with \"force\": true to add it anyway"
                        .to_owned(),
                extra: Some(json!({ "report": job.report })),
            }),
            JobState::Done | JobState::Failed => Ok(job.entry.clone()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn job_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Ids need only be distinct, not secret.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = now.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Job {
    fn view(&self) -> Value {
        let ended = self.ended.unwrap_or_else(Instant::now);
        let mut entry = Map::new();
        for key in ["command", "args", "cwd"] {
            if let Some(v) = self.entry.get(key) {
                entry.insert(key.to_owned(), v.clone());
            }
        }
        // Inline env values may be secrets: their names only.
        let env: Vec<&String> = self
            .entry
            .get("env")
            .and_then(Value::as_object)
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        entry.insert("env".to_owned(), json!(env));
        entry.insert(
            "env_keys".to_owned(),
            self.entry.get("env_keys").cloned().unwrap_or(json!([])),
        );
        json!({
            "job": self.id,
            "state": match self.state {
                JobState::Running => "running",
                JobState::Done => "done",
                JobState::Failed => "failed",
            },
            "elapsed_ms": ended.duration_since(self.started).as_millis() as u64,
            "progress": self.progress,
            "suggested_name": self.suggested_name,
            "entry": entry,
            "tools": self.tools,
            "report": self.report,
        })
    }
}

/// One job's task: reports into the table and the broadcast.
struct Runner {
    id: String,
    table: Arc<Mutex<HashMap<String, Job>>>,
    events: broadcast::Sender<Value>,
}

impl Runner {
    fn update(&self, f: impl FnOnce(&mut Job)) {
        let view = {
            let mut table = lock(&self.table);
            let Some(job) = table.get_mut(&self.id) else {
                return;
            };
            f(job);
            job.view()
        };
        let _ = self.events.send(view);
    }

    fn progress(&self, line: String) {
        self.update(|job| {
            if job.progress.len() < MAX_PROGRESS {
                job.progress.push(line);
            }
        });
    }

    async fn run(self, def: ServerDef, timeout: Duration) {
        let program = def.command.clone();
        // The server's work is done once it has listed its tools.
        let stop = StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_secs(2),
        };
        let spec = ServerSpec {
            def,
            env_overrides: Vec::new(),
        };
        let cfg = mcpvisor_session::Config {
            stop,
            auth_timeout: timeout,
            ..mcpvisor_session::Config::default()
        };
        let spawner = mcpvisor_runner::spawner(&spec, &cfg, Passthrough::Discard);
        let mut conn = Connection::start(spawner, cfg, None);
        let closer = conn.closer();
        let events = conn.take_events();
        self.progress(format!("starting {program}"));
        let work = async {
            let init = tokio::select! {
                init = conn.initialize(timeout, timeout) => init?,
                () = self.watch(events, &program) => unreachable!("watch never ends"),
            };
            let name = init.server_info["name"].as_str().unwrap_or("(unnamed)");
            let version = init.server_info["version"].as_str().unwrap_or("");
            self.progress(
                format!("initialize answered: {name} {version}")
                    .trim_end()
                    .to_owned(),
            );
            let tools = if init.capabilities.get("tools").is_some_and(Value::is_object) {
                conn.list_all("tools/list", "tools", timeout).await?
            } else {
                Vec::new()
            };
            self.progress(format!(
                "listed {} tool{}",
                tools.len(),
                if tools.len() == 1 { "" } else { "s" }
            ));
            Ok::<_, CallError>(tools)
        };
        let outcome = tokio::time::timeout(timeout, work).await;
        match outcome {
            Ok(Ok(tools)) => {
                conn.close().await;
                self.update(|job| {
                    job.tools = tools
                        .into_iter()
                        .map(|t| {
                            json!({
                                "name": t.get("name").cloned().unwrap_or(Value::Null),
                                "description": t.get("description").cloned().unwrap_or(Value::Null),
                                "inputSchema": t.get("inputSchema").cloned().unwrap_or(Value::Null),
                            })
                        })
                        .collect();
                    job.state = JobState::Done;
                    job.ended = Some(Instant::now());
                });
            }
            Ok(Err(e)) => {
                conn.close().await;
                let report = report_of(&e);
                self.update(|job| {
                    job.progress.push(format!("failed: {e}"));
                    job.report = Some(report);
                    job.state = JobState::Failed;
                    job.ended = Some(Instant::now());
                });
            }
            Err(_) => {
                closer.abort().await;
                let reason = format!("no answer within {}s; stopped it", timeout.as_secs());
                self.update(|job| {
                    job.progress.push(format!("failed: {reason}"));
                    job.report = Some(json!({ "reason": reason }));
                    job.state = JobState::Failed;
                    job.ended = Some(Instant::now());
                });
            }
        }
    }

    /// Turns the session's events into progress lines. Never ends.
    async fn watch(
        &self,
        events: Option<tokio::sync::mpsc::Receiver<SessionEvent>>,
        program: &str,
    ) {
        if let Some(mut events) = events {
            while let Some(event) = events.recv().await {
                match event {
                    SessionEvent::Starting { pid, .. } => match pid {
                        Some(pid) => self.progress(format!("started {program} (pid {pid})")),
                        None => self.progress(format!("started {program}")),
                    },
                    SessionEvent::AuthPending { url, reason, .. } => {
                        let why = reason.map(|r| format!(" ({r})")).unwrap_or_default();
                        self.progress(format!("waiting for authorization{why}: open {url}"));
                    }
                    SessionEvent::Authorized { .. } => self.progress("authorized".to_owned()),
                    SessionEvent::Exited { data, .. } => {
                        self.progress(format!("exited: {}", data.reason));
                    }
                    _ => {}
                }
            }
        }
        std::future::pending().await
    }
}

/// A failure as the wizard shows it: the crash report of `inspect --json`
/// when there is one, always with a `reason`.
fn report_of(e: &CallError) -> Value {
    match e {
        CallError::Crashed(report) => {
            let mut value = serde_json::to_value(report).unwrap_or_else(|_| json!({}));
            if let Some(map) = value.as_object_mut() {
                let reason = map.get("reason").and_then(Value::as_str).unwrap_or("");
                if reason.is_empty() {
                    map.insert("reason".to_owned(), json!(report.to_string()));
                }
            }
            value
        }
        other => json!({ "reason": other.to_string() }),
    }
}

// === sources ===

/// What a pasted source says: the definition to run, its entry as it will
/// be saved, and a name for it.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub def: ServerDef,
    pub entry: Map<String, Value>,
    pub name: String,
}

/// Reads a command line, a JSON entry, a JSON `mcpServers` (or `servers`)
/// snippet, a TOML `[mcp_servers.NAME]` table or a bare TOML entry.
pub(crate) fn parse_source(source: &str, base: &Path) -> Result<Parsed, String> {
    let text = source.trim();
    if text.is_empty() {
        return Err("paste a command line or a config entry".to_owned());
    }
    if text.len() > MAX_SOURCE {
        return Err(format!("the source is longer than {MAX_SOURCE} bytes"));
    }
    if text.starts_with('{') {
        return parse_json(text, base);
    }
    let first = text.lines().next().unwrap_or("");
    if first.starts_with('[') || looks_like_toml(first) {
        return parse_toml(text, base);
    }
    parse_command(text, base)
}

/// `key = value` with a bare key: TOML, not a command line.
fn looks_like_toml(line: &str) -> bool {
    line.split_once('=').is_some_and(|(key, rest)| {
        let key = key.trim();
        !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && rest.starts_with(' ')
            && key.len() < line.len()
            && line.contains(" = ")
    })
}

fn parse_command(text: &str, base: &Path) -> Result<Parsed, String> {
    let words = shell_words::split(text).map_err(|e| format!("not a command line: {e}"))?;
    let mut env = Map::new();
    let mut words = words.into_iter().peekable();
    // `KEY=value cmd ...`: leading assignments are the server's env.
    while let Some((key, value)) = words.peek().and_then(|w| w.split_once('=')) {
        if !mcpvisor_config::edit::valid_env_key(key) {
            break;
        }
        env.insert(key.to_owned(), Value::String(value.to_owned()));
        words.next();
    }
    let Some(command) = words.next() else {
        return Err("the command line has no program".to_owned());
    };
    let args: Vec<String> = words.collect();
    let mut entry = Map::new();
    entry.insert("command".to_owned(), json!(command));
    entry.insert("args".to_owned(), json!(args));
    if !env.is_empty() {
        entry.insert("env".to_owned(), Value::Object(env));
    }
    let name = suggest_name(&command, &args);
    finish(entry, name, base)
}

fn parse_json(text: &str, base: &Path) -> Result<Parsed, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("the JSON must be an object".to_owned());
    };
    let table = map
        .get("mcpServers")
        .or_else(|| map.get("servers"))
        .or_else(|| map.get("mcp_servers"));
    match table {
        Some(Value::Object(servers)) => {
            let (name, entry) = one_entry(servers)?;
            finish(entry, name, base)
        }
        Some(_) => Err("the servers table must be an object".to_owned()),
        None => {
            let name = map
                .get("command")
                .and_then(Value::as_str)
                .map(|c| {
                    let args: Vec<String> = map
                        .get("args")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default();
                    suggest_name(c, &args)
                })
                .unwrap_or_else(|| "server".to_owned());
            finish(map, name, base)
        }
    }
}

fn parse_toml(text: &str, base: &Path) -> Result<Parsed, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("not valid TOML: {}", e.message().trim()))?;
    let value = serde_json::to_value(&table).map_err(|e| format!("not valid TOML: {e}"))?;
    let Value::Object(map) = value else {
        return Err("the TOML must be a table".to_owned());
    };
    match map.get("mcp_servers") {
        Some(Value::Object(servers)) => {
            let (name, entry) = one_entry(servers)?;
            finish(entry, name, base)
        }
        Some(_) => Err("[mcp_servers] must be a table".to_owned()),
        None => parse_json(&Value::Object(map).to_string(), base),
    }
}

/// The only entry of a pasted servers table.
fn one_entry(servers: &Map<String, Value>) -> Result<(String, Map<String, Value>), String> {
    let mut entries = servers.iter();
    match (entries.next(), entries.next()) {
        (Some((name, Value::Object(entry))), None) => Ok((sanitize(name), entry.clone())),
        (Some(_), None) => Err("the server's entry must be an object".to_owned()),
        (None, _) => Err("the servers table is empty".to_owned()),
        (Some(_), Some(_)) => Err(format!(
            "the snippet has {} servers; paste one at a time",
            servers.len()
        )),
    }
}

/// Checks `entry` the way the config loader will, resolving relative
/// paths against `base`.
fn finish(entry: Map<String, Value>, name: String, base: &Path) -> Result<Parsed, String> {
    let doc = json!({ "mcpServers": { "pasted": entry } });
    let file = mcpvisor_config::server::parse(&doc.to_string(), &base.join("pasted.json"))
        .map_err(|e| {
            // "…/pasted.json: server "pasted": X" → "X".
            let text = e.to_string();
            text.split_once("server \"pasted\": ")
                .map_or(text.clone(), |(_, rest)| rest.to_owned())
        })?;
    let def = file.get("pasted").map_err(|e| e.to_string())?.clone();
    let name = if name.is_empty() {
        "server".to_owned()
    } else {
        name
    };
    Ok(Parsed {
        def: ServerDef {
            name: name.clone(),
            ..def
        },
        entry,
        name,
    })
}

/// A name for a server from its command line: the package a runner
/// (`npx`, `uvx`, ...) starts, or the script or program, without the
/// usual `mcp-server-` decorations.
pub(crate) fn suggest_name(command: &str, args: &[String]) -> String {
    let program = Path::new(command)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let runners = [
        "npx", "uvx", "bunx", "pnpx", "pipx", "uv", "node", "python", "python3", "deno", "bun",
        "docker",
    ];
    let subject = if runners.contains(&program.as_str()) {
        args.iter()
            .filter(|a| !a.starts_with('-'))
            .find(|a| !matches!(a.as_str(), "run" | "exec" | "dlx" | "tool" | "x"))
            .cloned()
            .unwrap_or(program)
    } else {
        program
    };
    // `@scope/server-x@1.2` → `server-x`; `pkg==1.0` → `pkg`; `dir/x.py` → `x`.
    let base = subject.rsplit('/').next().unwrap_or(&subject);
    let base = base.split('@').find(|s| !s.is_empty()).unwrap_or(base);
    let base = base.split("==").next().unwrap_or(base);
    let base = base
        .strip_suffix(".py")
        .or_else(|| base.strip_suffix(".js"))
        .or_else(|| base.strip_suffix(".mjs"))
        .or_else(|| base.strip_suffix(".ts"))
        .unwrap_or(base);
    let mut name = base.to_ascii_lowercase();
    for prefix in ["mcp-server-", "server-", "mcp-"] {
        if let Some(rest) = name.strip_prefix(prefix).filter(|r| !r.is_empty()) {
            name = rest.to_owned();
            break;
        }
    }
    for suffix in ["-mcp-server", "-mcp", "-server"] {
        if let Some(rest) = name.strip_suffix(suffix).filter(|r| !r.is_empty()) {
            name = rest.to_owned();
            break;
        }
    }
    let name = sanitize(&name);
    if name.is_empty() {
        "server".to_owned()
    } else {
        name
    }
}

/// Only `[A-Za-z0-9_-]`, at most 64 of them.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect::<String>()
        .trim_matches('-')
        .to_owned()
}

#[cfg(test)]
mod tests;
