//! `mcpvisor doctor`: every server of every config, started and asked for
//! its tools, with a one-line verdict each.
//!
//! A server is checked the way its client would start it, with the checks
//! that say most first: its program must be found (on `PATH` or as a path),
//! its `env_file` and the keys it lists must be there (a remote server's
//! header placeholders filled), and then it must start and answer
//! `initialize` and `tools/list` within `--timeout`. An entry that runs
//! `mcpvisor run -- CMD` is checked as `CMD`, since that is what mcpvisor
//! would start. A server that prints an authorization link is reported as
//! waiting for it, with the link, and stopped there.
//!
//! Servers are checked one at a time; each is stopped (its whole process
//! group) before the next starts.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use mcpvisor_config::wrap::runs_mcpvisor;
use mcpvisor_config::{ConfigEntry, ConfigError, CrashReport, ServerDef, secrets};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_runner::{CallError, Connection, ServerSpec, SessionEvent};
use mcpvisor_session::Config;
use serde::Serialize;

use crate::output;
use crate::wrap::{Sources, files};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub sources: Sources,
    /// Print JSON (one object per server) instead of text.
    #[arg(long)]
    pub json: bool,
    /// How long each server may take to start and list its tools (a first `npx`/`uvx` run downloads first).
    #[arg(long, default_value = "60s", value_parser = crate::cli::parse_duration)]
    pub timeout: Duration,
}

/// The verdict on one server (one element of `doctor --json`).
#[derive(Debug, Serialize)]
struct Verdict {
    /// The config file.
    file: PathBuf,
    /// The server's name (empty for a file that could not be read).
    server: String,
    /// `ok`, `failed`, `auth` (waiting for authorization), `disabled` or
    /// `skipped` (a transport mcpvisor does not run).
    status: Status,
    /// With `ok`: how many tools it offers.
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<usize>,
    /// With `ok`: from start to the `initialize` answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    startup_ms: Option<u128>,
    /// What is wrong (or why it was not checked), in a few words.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
    /// With `auth`: the link to open.
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_url: Option<String>,
    /// When the server ended: the crash report.
    #[serde(skip_serializing_if = "Option::is_none")]
    crash: Option<Box<CrashReport>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Failed,
    Auth,
    Disabled,
    Skipped,
}

impl Verdict {
    fn new(file: &Path, server: &str, status: Status) -> Self {
        Verdict {
            file: file.to_owned(),
            server: server.to_owned(),
            status,
            tools: None,
            startup_ms: None,
            problem: None,
            fix: None,
            auth_url: None,
            crash: None,
        }
    }

    fn failed(file: &Path, server: &str, problem: String, fix: String) -> Self {
        Verdict {
            problem: Some(problem),
            fix: Some(fix),
            ..Verdict::new(file, server, Status::Failed)
        }
    }

    fn is_fine(&self) -> bool {
        matches!(self.status, Status::Ok | Status::Disabled | Status::Skipped)
    }

    /// `ok    NAME  FILE: 12 tools, started in 1.4s`
    fn line(&self, width: usize) -> String {
        let tag = match self.status {
            Status::Ok => "ok",
            Status::Failed => "FAIL",
            Status::Auth => "AUTH",
            Status::Disabled => "off",
            Status::Skipped => "skip",
        };
        let what = match self.status {
            Status::Ok => {
                let tools = self.tools.unwrap_or(0);
                let plural = if tools == 1 { "tool" } else { "tools" };
                let ms = self.startup_ms.unwrap_or(0);
                let took = if ms < 1000 {
                    format!("{ms}ms")
                } else {
                    format!("{:.1}s", ms as f64 / 1000.0)
                };
                format!("{tools} {plural}, started in {took}")
            }
            _ => {
                let mut text = self.problem.clone().unwrap_or_default();
                if let Some(fix) = &self.fix {
                    text.push_str(" -> ");
                    text.push_str(fix);
                }
                text
            }
        };
        format!(
            "{tag:<4}  {:<width$}  {}: {what}\n",
            self.server,
            self.file.display()
        )
    }
}

pub fn main(args: DoctorArgs) -> ExitCode {
    let files = match files(&args.sources) {
        Ok(files) => files,
        Err(e) => return crate::refuse(e),
    };
    let only = args.sources.only();
    // Every file's servers first, so that a name --only asks for and no
    // file has is refused before anything starts.
    let mut servers: Vec<(PathBuf, Checked)> = Vec::new();
    let mut verdicts = Vec::new();
    for file in &files {
        match mcpvisor_config::server::load(&file.path) {
            Ok(loaded) => {
                for entry in loaded.entries() {
                    let checked = match entry {
                        ConfigEntry::Stdio(def) => Checked::Server(Box::new(def.clone())),
                        ConfigEntry::Unsupported(other) => Checked::Other {
                            name: other.name.clone(),
                            transport: other.transport.clone(),
                        },
                    };
                    if only.is_none_or(|only| only.iter().any(|n| n == checked.name())) {
                        servers.push((file.path.clone(), checked));
                    }
                }
            }
            Err(ConfigError::File { .. }) if file.found => {}
            Err(e) => verdicts.push(Verdict::failed(
                &file.path,
                "",
                e.to_string(),
                "fix the file; `mcpvisor doctor --config FILE` checks it again".to_owned(),
            )),
        }
    }
    if let Some(only) = only {
        let missing: Vec<&str> = only
            .iter()
            .map(String::as_str)
            .filter(|name| !servers.iter().any(|(_, s)| s.name() == *name))
            .collect();
        if !missing.is_empty() {
            return crate::refuse(format!("--only: no server named {}", missing.join(", ")));
        }
    }
    if servers.is_empty() && verdicts.is_empty() {
        return crate::refuse(
            "no client config with servers found in the usual places; name one with --config FILE",
        );
    }
    let Some(runtime) = crate::runtime() else {
        return ExitCode::from(2);
    };
    let width = servers
        .iter()
        .map(|(_, s)| s.name().len())
        .max()
        .unwrap_or(0)
        .min(32);
    // Text lines go out as each server is done: a slow one shows where it is.
    let mut printed = 0;
    if !args.json {
        let text: String = verdicts.iter().map(|v| v.line(width)).collect();
        if let Err(e) = output::print(&text) {
            return ExitCode::from(e.report());
        }
        printed = verdicts.len();
    }
    let printing: Result<(), output::Error> = runtime.block_on(async {
        for (file, server) in &servers {
            verdicts.push(check(file, server, args.timeout).await);
            if !args.json {
                let text: String = verdicts[printed..].iter().map(|v| v.line(width)).collect();
                printed = verdicts.len();
                output::print(&text)?;
            }
        }
        Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(4));
    let printing = printing.and_then(|()| {
        if args.json {
            let mut text = serde_json::to_string_pretty(&verdicts).unwrap_or_default();
            text.push('\n');
            output::print(&text)?;
        }
        Ok(())
    });
    if let Err(e) = printing {
        return ExitCode::from(e.report());
    }
    if verdicts.iter().all(Verdict::is_fine) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// One entry to check.
enum Checked {
    Server(Box<ServerDef>),
    Other { name: String, transport: String },
}

impl Checked {
    fn name(&self) -> &str {
        match self {
            Checked::Server(def) => &def.name,
            Checked::Other { name, .. } => name,
        }
    }
}

async fn check(file: &Path, server: &Checked, timeout: Duration) -> Verdict {
    let def = match server {
        Checked::Other { name, transport } => {
            return Verdict {
                problem: Some(format!(
                    "not checked: the {transport:?} transport is not one mcpvisor speaks"
                )),
                ..Verdict::new(file, name, Status::Skipped)
            };
        }
        Checked::Server(def) => unwrapped(def),
    };
    let name = def.name.as_str();
    if def.disabled {
        return Verdict {
            problem: Some("disabled in the file; not started".to_owned()),
            ..Verdict::new(file, name, Status::Disabled)
        };
    }
    if def.is_remote() {
        if let Err(e) = secrets::expand_headers(&def) {
            return Verdict::failed(
                file,
                name,
                format!("missing secret: {e}"),
                "set the variable in the environment or in the entry's env_file".to_owned(),
            );
        }
    } else {
        if let Err(e) = crate::server::check_program(Path::new(&def.command), def.cwd.as_deref()) {
            return Verdict::failed(
                file,
                name,
                format!("missing program: {e}"),
                "install it, or write its full path in \"command\"".to_owned(),
            );
        }
        if let Err(e) = secrets::resolve_env(&def) {
            return Verdict::failed(
                file,
                name,
                format!("missing secret: {e}"),
                "add it to the env file (`mcpvisor` reads it again at every start)".to_owned(),
            );
        }
    }
    probe(file, def, timeout).await
}

/// The server an entry starts: `mcpvisor run -- CMD ARGS` is `CMD ARGS`.
fn unwrapped(def: &ServerDef) -> ServerDef {
    let mut def = def.clone();
    if runs_mcpvisor(&def) && def.args.len() >= 3 && def.args[0] == "run" && def.args[1] == "--" {
        def.command = def.args[2].clone();
        def.args.drain(..3);
    }
    def
}

/// Starts the server, asks for its tools, stops it.
async fn probe(file: &Path, def: ServerDef, timeout: Duration) -> Verdict {
    let name = def.name.clone();
    let cfg = Config {
        stop: StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_secs(2),
        },
        ..Config::default()
    };
    let init_timeout = def.init_timeout.map_or(timeout, |t| t.min(timeout));
    let spec = ServerSpec {
        def,
        env_overrides: Vec::new(),
    };
    let root = spec
        .def
        .cwd
        .clone()
        .or_else(|| std::env::current_dir().ok());
    let spawner = mcpvisor_runner::spawner(&spec, &cfg, Passthrough::Discard);
    let mut conn = Connection::start(spawner, cfg, root);
    let mut events = conn.take_events();
    let closer = conn.closer();
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;

    let outcome = tokio::select! {
        init = conn.initialize(init_timeout, timeout) => match init {
            Ok(_) => {
                let startup = started.elapsed();
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match conn.list_all("tools/list", "tools", left).await {
                    Ok(tools) => Ok((tools.len(), startup)),
                    // A server with no tools capability answers "method not found".
                    Err(CallError::Rpc { code: -32601, .. }) => Ok((0, startup)),
                    Err(e) => Err(Outcome::Error(e)),
                }
            }
            Err(e) => Err(Outcome::Error(e)),
        },
        url = auth_link(events.as_mut()) => Err(Outcome::Auth(url)),
        () = tokio::time::sleep_until(deadline) => Err(Outcome::Timeout),
    };
    match outcome {
        Ok(_) => conn.close().await,
        Err(_) => closer.abort().await,
    }
    let spent = started.elapsed();
    match outcome {
        Ok((tools, startup)) => Verdict {
            tools: Some(tools),
            startup_ms: Some(startup.as_millis()),
            ..Verdict::new(file, &name, Status::Ok)
        },
        Err(Outcome::Auth(url)) => Verdict {
            problem: Some(format!("waiting for authorization: open {url}")),
            fix: Some(format!(
                "authorize it once with `mcpvisor inspect --config {} {name}`",
                file.display()
            )),
            auth_url: Some(url),
            ..Verdict::new(file, &name, Status::Auth)
        },
        Err(Outcome::Timeout) => Verdict::failed(
            file,
            &name,
            format!("no answer within {:.0?}", spent),
            "see what it prints with `mcpvisor inspect --show-stderr`, or give it longer with --timeout".to_owned(),
        ),
        Err(Outcome::Error(CallError::Crashed(report))) => {
            let last = report
                .stderr_tail
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .map(|line| format!("; last stderr: {}", line.trim()))
                .unwrap_or_default();
            Verdict {
                problem: Some(format!("{}{last}", report.summary())),
                fix: Some(format!(
                    "run it by hand to see all it prints: `mcpvisor inspect --show-stderr --config {} {name}`",
                    file.display()
                )),
                crash: Some(report),
                ..Verdict::new(file, &name, Status::Failed)
            }
        }
        Err(Outcome::Error(e)) => Verdict::failed(
            file,
            &name,
            e.to_string(),
            format!(
                "see what it says with `mcpvisor inspect --show-stderr --config {} {name}`",
                file.display()
            ),
        ),
    }
}

enum Outcome {
    Error(CallError),
    Auth(String),
    Timeout,
}

/// The first authorization link the session reports; never ends without one.
async fn auth_link(events: Option<&mut tokio::sync::mpsc::Receiver<SessionEvent>>) -> String {
    if let Some(events) = events {
        while let Some(event) = events.recv().await {
            if let SessionEvent::AuthPending { url, .. } = event {
                return url;
            }
        }
    }
    std::future::pending().await
}
