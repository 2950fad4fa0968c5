//! Command-line arguments: raw (clap) and resolved.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_session::{CancelAckPolicy, Config, GarbagePolicy, RestartMode};

/// Keeps stdio MCP servers running behind one stable client connection.
#[derive(Debug, Parser)]
#[command(name = "mcpvisor", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Put `mcpvisor run --` in front of every stdio server in your clients' config files (a backup is kept; undo with `unwrap`).
    Wrap(crate::wrap::WrapArgs),
    /// Undo `wrap`: the servers it wrapped start their own command again.
    Unwrap(crate::wrap::UnwrapArgs),
    /// Add an entry that starts `mcpvisor serve --config FILE...` to a client's config (a backup is kept).
    InstallGateway(crate::gateway::InstallArgs),
    /// Remove the entry `install-gateway` added.
    UninstallGateway(crate::gateway::UninstallArgs),
    /// Check every server of your clients' configs: starts and answers (tool count, start time), or why not.
    Doctor(crate::doctor::DoctorArgs),
    /// Supervise an MCP server: `mcpvisor run [OPTIONS] -- CMD [ARGS]...`
    Run(Box<RunArgs>),
    /// Serve every server of one or more config files as one MCP server: `mcpvisor serve --config FILE`
    Serve(Box<crate::serve::ServeArgs>),
    /// Start a server, show what it offers (tools, prompts, resources), stop it.
    Inspect(InspectArgs),
    /// Call one tool of a server from the shell.
    Call(CallArgs),
    /// A stdio server that is a remote one (a `serve --http` gateway): `mcpvisor connect URL`
    Connect(Box<crate::connect::ConnectArgs>),
    /// Show the servers of a running gateway (one started with `serve --ui`).
    Status(crate::ui::StatusArgs),
    /// A remote server's OAuth authorization: `mcpvisor auth login NAME | status | logout NAME`.
    Auth(crate::auth::AuthArgs),
    /// Definitions serve holds back until approved: `mcpvisor tools diff [SERVER] | approve SERVER [NAME...]`.
    Tools(crate::tools::ToolsArgs),
    /// Watch mcpvisor survive a server crash, live, with the bundled example server.
    Demo,
    /// Print shell completions: `mcpvisor completions bash|zsh|fish|elvish|powershell`.
    Completions(crate::docs::CompletionsArgs),
    /// Print the man page (roff), or write every page with --dir.
    Man(crate::docs::ManArgs),
    /// An example MCP server on stdio (tools add, echo, whoami, crash) to try inspect, call and run on.
    ExampleServer,
    /// Applies a server's sandbox to itself, then runs the server (started by mcpvisor's own spawner).
    #[command(hide = true)]
    SandboxExec(crate::sandbox::ExecArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub sup: Supervision,
    #[command(flatten)]
    pub http: crate::http::HttpArgs,
    /// With --http: the era the server is driven in: auto (asked server/discover: 2026-07-28 if it offers it, else the handshake), 2025-11-25 (never asked: initialized, for a server whose tools ask the client the old way), 2026-07-28 (one that does not answer as 2026-07-28 fails to start). Default: the entry's "era" with --config, else auto.
    #[arg(long, value_name = "ERA", value_parser = parse_era, requires = "http")]
    pub era: Option<mcpvisor_config::EraChoice>,
    /// Also watch this file or directory (recursive) for changes; repeatable.
    #[arg(long, value_name = "PATH")]
    pub watch: Vec<PathBuf>,
    /// Ignore changes to paths matching this glob; repeatable. .gitignore files are honoured too.
    #[arg(long, value_name = "GLOB")]
    pub ignore: Vec<String>,
    /// Do not watch anything (no hot reload; SIGHUP still reloads).
    #[arg(long, conflicts_with_all = ["watch", "poll"])]
    pub no_watch: bool,
    /// Poll for changes at this interval instead of using file-system events.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub poll: Option<Duration>,
    /// Wait this long after the last change before reloading.
    #[arg(long, default_value = "300ms", value_parser = parse_duration)]
    pub debounce: Duration,
    /// Run this shell command before each reload; if it fails, the old server stays.
    #[arg(long, value_name = "CMD")]
    pub build: Option<String>,
    /// Bound on --build.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub build_timeout: Duration,
    /// Working directory of the server.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Extra environment for the server (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    #[command(flatten)]
    pub log: Logging,
    /// Run the server NAME from this config file (Claude Desktop, Cursor, VS Code or Codex format).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// With --config: the server's name in the file.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// How a server is supervised: `run`'s flags, and `serve`'s defaults for every server.
#[derive(Debug, Args)]
pub struct Supervision {
    /// Most client requests in flight at once; more are refused with -32011.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub max_in_flight: u32,
    /// Longest message in either direction, e.g. 64MiB, 512KiB, 1000000.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub max_message_bytes: usize,
    /// A request with no answer and no progress for this long times out (the server is sent a cancel).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// No request may run longer than this, progress or not.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub request_ceiling: Duration,
    /// After a cancel, how long the request keeps its slot waiting for the server to finish it.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub cancel_grace: Duration,
    /// The notification a server sends when it has finished a cancelled request.
    #[arg(long, default_value = "notifications/mcpvisor/requestFinished")]
    pub cancel_ack_method: String,
    /// When a cancel's grace runs out: stop servers known to send acks (auto), always stop, or always just release the slot.
    #[arg(long, value_enum, default_value_t = CancelAck::Auto)]
    pub cancel_ack: CancelAck,
    /// A write to the server's stdin stalled this long stops that server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,
    /// A write to the client's stdout stalled this long ends the session as if the client had gone.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub client_write_timeout: Duration,
    /// Bound on the initialize replayed to a restarted server.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub init_timeout: Duration,
    /// Bound on initialize while the server waits on an authorization link it printed (mcp-remote's OAuth).
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub auth_timeout: Duration,
    /// What to do with a server stdout line that is not JSON-RPC.
    #[arg(long, value_enum, default_value_t = Garbage::Drop)]
    pub on_worker_garbage: Garbage,
    /// Where the server's stderr goes.
    #[arg(long, value_enum, default_value_t = WorkerStderr::Inherit)]
    pub worker_stderr: WorkerStderr,
    /// How long a stopping server may take to exit after its stdin closes, before SIGTERM.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub stop_grace: Duration,
    /// How long after SIGTERM before SIGKILL.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub term_grace: Duration,
    /// After the client closes stdin, how long requests in flight may still finish.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub shutdown_drain: Duration,
    /// When a server that ended on its own is started again.
    #[arg(long, default_value_t = RestartMode::Always, value_parser = restart_modes())]
    pub restart: RestartMode,
    /// The longest pause between restarts of a crashing server.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub restart_backoff_max: Duration,
    /// This many exits in a row, each soon after start, is a crash loop: refuse requests for a while.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub crash_loop_exits: u32,
    /// An exit this soon after start counts towards a crash loop, unless the server had been ready for 1 s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub crash_loop_window: Duration,
    /// How long a crash loop refuses requests before trying again (a file change or SIGHUP retries at once).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub failed_cooldown: Duration,
    /// How long a reload waits for requests in flight on the old server; leftovers then fail with -32010.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub reload_drain_timeout: Duration,
    /// Leave the server's last stderr lines, and the start of any stdout lines that were not JSON-RPC, out of error.data and of the -32010/-32011 messages (they are in them by default, with every known secret redacted).
    #[arg(long, overrides_with = "stderr_in_errors")]
    pub no_stderr_in_errors: bool,
    /// The default: the server's last stderr lines in errors (kept for older command lines).
    #[arg(long, hide = true, overrides_with = "no_stderr_in_errors")]
    pub stderr_in_errors: bool,
}

/// Where mcpvisor's own log goes.
#[derive(Debug, Args)]
pub struct Logging {
    /// Write logs to this file instead of stderr.
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// More logging (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less logging: only warnings and errors.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
}

/// How `inspect` and `call` pick and run a server.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Read the server from this config file (Claude Desktop, Cursor, VS Code or Codex format); name it after the flags.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Extra environment for the server (repeatable).
    #[arg(long = "env", value_name = "KEY=VAL", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Working directory of the server (also offered to it as its root).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Print JSON (a stable schema) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Give up after this long in all (a first `npx`/`uvx` run downloads packages).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Bound on initialize (generous: a first `npx`/`uvx` run downloads before the server starts); a config entry's init_timeout wins.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub init_timeout: Duration,
    /// Bound on initialize while the server waits on an authorization link; a config entry's auth_timeout wins.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub auth_timeout: Duration,
    /// Show the server's stderr as it runs (it is always in crash reports).
    #[arg(long)]
    pub show_stderr: bool,
    /// A remote server's URL, instead of a command or --config: its Streamable
    /// HTTP endpoint, or the event stream of an older HTTP+SSE server (tried
    /// when the server refuses Streamable HTTP).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A header for a remote server (--url, or a config entry with a url); repeatable; `${VAR}` is taken from the environment.
    #[arg(long = "header", value_name = "K:V", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    #[command(flatten)]
    pub oauth: crate::auth::OAuthArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// With --config: the server's name in the file.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    /// `[NAME] TOOL [ARGS_JSON]`: NAME only with --config; ARGS_JSON is a JSON object (default {}).
    #[arg(value_name = "ARGS", num_args = 1..=3, required = true)]
    pub words: Vec<String>,
    /// The server command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CancelAck {
    Auto,
    Stop,
    Release,
}

/// `--restart`'s values: the words of a config entry's `"restart"`, each
/// with its line of help.
fn restart_modes() -> impl clap::builder::TypedValueParser<Value = RestartMode> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};
    let values = RestartMode::ALL.map(|mode| {
        PossibleValue::new(mode.as_str()).help(match mode {
            RestartMode::Always => {
                "Restart at once, then with growing pauses while it keeps crashing"
            }
            RestartMode::OnDemand => "Restart when the next request arrives",
            RestartMode::Never => "Do not restart; refuse requests until a reload",
        })
    });
    PossibleValuesParser::new(values).try_map(|word| {
        RestartMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == word)
            .ok_or("not a restart mode")
    })
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Garbage {
    Drop,
    Restart,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum WorkerStderr {
    Inherit,
    Discard,
}

/// Everything `run` needs, checked.
#[derive(Debug)]
pub struct Resolved {
    pub config: Config,
    pub server: crate::server::Chosen,
    pub stderr: Passthrough,
}

impl RunArgs {
    /// Checks what clap cannot and builds the session settings.
    pub fn resolve(&self) -> Result<Resolved, String> {
        let chosen = crate::server::choose(
            self.config.as_deref(),
            self.name.as_deref(),
            &self.command,
            None,
            &[],
            self.cwd.as_deref(),
            &self.env,
        )?;
        let mut config = self.sup.session_config()?;
        config.init_timeout = chosen.init_timeout(self.sup.init_timeout);
        config.auth_timeout = chosen.auth_timeout(self.sup.auth_timeout);
        config.tools = chosen.spec.def.tools.clone();
        Ok(Resolved {
            config,
            server: chosen,
            stderr: self.sup.stderr(),
        })
    }
}

impl Supervision {
    /// The session settings these flags give, before a config entry's own.
    pub fn session_config(&self) -> Result<Config, String> {
        if self.request_ceiling < self.request_timeout {
            return Err("--request-ceiling must not be shorter than --request-timeout".into());
        }
        let stop = StopTimeouts {
            after_close: self.stop_grace,
            after_term: self.term_grace,
        };
        Ok(Config {
            max_in_flight: self.max_in_flight as usize,
            max_message_bytes: self.max_message_bytes,
            request_timeout: self.request_timeout,
            request_ceiling: self.request_ceiling,
            cancel_grace: self.cancel_grace,
            cancel_ack_method: self.cancel_ack_method.clone(),
            cancel_ack: match self.cancel_ack {
                CancelAck::Auto => CancelAckPolicy::Auto,
                CancelAck::Stop => CancelAckPolicy::Stop,
                CancelAck::Release => CancelAckPolicy::Release,
            },
            write_timeout: self.write_timeout,
            client_write_timeout: self.client_write_timeout,
            init_timeout: self.init_timeout,
            auth_timeout: self.auth_timeout,
            on_garbage: match self.on_worker_garbage {
                Garbage::Drop => GarbagePolicy::Drop,
                Garbage::Restart => GarbagePolicy::Restart,
            },
            stop,
            shutdown_drain: self.shutdown_drain,
            restart: self.restart,
            restart_backoff_max: self.restart_backoff_max,
            crash_loop_window: self.crash_loop_window,
            crash_loop_exits: self.crash_loop_exits,
            failed_cooldown: self.failed_cooldown,
            reload_drain_timeout: self.reload_drain_timeout,
            stderr_in_errors: !self.no_stderr_in_errors,
            stdout_in_errors: !self.no_stderr_in_errors,
            tools: mcpvisor_config::ToolFilter::default(),
        })
    }

    /// Where the servers' stderr goes.
    pub fn stderr(&self) -> Passthrough {
        match self.worker_stderr {
            WorkerStderr::Inherit => Passthrough::Inherit,
            WorkerStderr::Discard => Passthrough::Discard,
        }
    }
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    mcpvisor_config::parse_duration(s).map_err(|e| format!("`{s}` is not a duration: {e}"))
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size; use forms like 1000000, 512KiB, 64MiB"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        "g" | "gb" | "gib" => 1024 * 1024 * 1024,
        _ => return Err(format!("`{s}`: unknown unit `{unit}`; use KiB, MiB or GiB")),
    };
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < 1024 {
        return Err(format!(
            "`{s}` is too small; the limit must be at least 1KiB"
        ));
    }
    Ok(bytes)
}

/// `Name: value` (the value's leading spaces are dropped).
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| "expected NAME:VALUE".to_owned())?;
    let name = name.trim();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !valid {
        return Err(format!("{name:?} is not a valid header name"));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(format!("the value of {name:?} has a line break or NUL"));
    }
    Ok((name.to_owned(), value.trim_start().to_owned()))
}

fn parse_era(s: &str) -> Result<mcpvisor_config::EraChoice, String> {
    mcpvisor_config::EraChoice::parse(s).ok_or_else(|| {
        format!(
            "expected one of {}",
            mcpvisor_config::EraChoice::NAMES.join(", ")
        )
    })
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err("expected KEY=VALUE".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2048"), Ok(2048));
        assert!(parse_size("12").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_env("=x").is_err());
    }
}
