//! `mcpvisor serve`: every configured server as one MCP server on stdio.
//!
//! This module only wires things: it loads the config files, turns each
//! server into a [`ServerPlan`] (the supervision flags as defaults, the
//! entry's own fields over them), and runs the gateway's owning task with
//! signals, config-file watching and each server's own file watching as
//! controls. With `--ui` it also serves the web UI (`crate::ui`), whose
//! monitor the hub publishes to and whose config edits come back as the
//! same reconfiguration SIGHUP asks for.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use mcpvisor_config::{ServerSet, SessionMode, StartMode, Timer};
use mcpvisor_gateway::audit::{Audit, Rotation};
use mcpvisor_gateway::cache::{Cache, Key};
use mcpvisor_gateway::monitor::Monitor;
use mcpvisor_gateway::naming::Separator;
use mcpvisor_gateway::{Cached, Control, Hub, Outcome, ServerPlan, Settings};
use tokio::sync::mpsc;

use crate::cli::{Logging, Supervision, parse_duration};
use crate::ui::UiPlan;
use crate::watchers::ServerWatchers;

/// `--public-url`: an http:// or https:// URL, kept without a trailing `/`.
fn parse_replica_id(s: &str) -> Result<String, String> {
    mcpvisor_gateway::check_replica_id(s)?;
    Ok(s.to_owned())
}

fn parse_public_url(s: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(format!("{s:?} is not an http:// or https:// URL"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{s:?} has a query or fragment; give the UI's base address"
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// Where a gateway with a UI has OAuth redirects sent: the UI's callback at
/// `--public-url`, else at the address it listens on; none (each flow's
/// loopback listener, and a pasted URL) when it listens on every address,
/// whose name for a browser is not known.
fn oauth_redirect(public_url: Option<&str>, local: std::net::SocketAddr) -> Option<String> {
    let path = mcpvisor_ui::OAUTH_CALLBACK_PATH;
    if let Some(base) = public_url {
        return Some(format!("{base}{path}"));
    }
    (!local.ip().is_unspecified()).then(|| format!("http://{local}{path}"))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A config file (Claude Desktop, Cursor, VS Code or Codex format); repeatable. Every enabled server in it is served.
    #[arg(long = "config", value_name = "FILE", required = true)]
    pub configs: Vec<PathBuf>,
    /// Serve only these servers (comma-separated names).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// What joins a server's name and a tool's or prompt's name (`github__create_issue`).
    #[arg(long, default_value = "__")]
    pub separator: String,
    /// The longest the client's initialize or a list waits for servers that are still starting.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub list_timeout: Duration,
    /// Ping an idle server this often; any answer counts as alive.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub health_interval: Duration,
    /// This many unanswered pings in a row restart the server.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub health_misses: u32,
    /// Start every server at its first use, listing its tools from the cache until then.
    #[arg(long)]
    pub lazy: bool,
    /// Offer two tools (search, call) instead of every server's tools, for clients with hundreds of tools.
    #[arg(long)]
    pub tool_search: bool,
    /// Most requests from each server in flight at once (the client's own bound is --max-in-flight).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub backend_max_in_flight: u32,
    /// Do not watch the config files or the servers' files (SIGHUP still reloads the config).
    #[arg(long)]
    pub no_watch: bool,
    /// Serve the web UI and its JSON API at this address (default 127.0.0.1:8809; port 0 picks a free one). The same address as --http shares its listener.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = crate::ui::DEFAULT_ADDR)]
    pub ui: Option<std::net::SocketAddr>,
    /// The address people's browsers reach the web UI at, when not the one it listens on (behind a proxy, or another machine's name for it): OAuth authorization servers send the browser back to URL/oauth/callback.
    #[arg(long, value_name = "URL", requires = "ui", value_parser = parse_public_url)]
    pub public_url: Option<String>,
    /// Append one JSON line per tool call, prompt get and resource read (who, what, how long, how it ended, sizes; never arguments or results) to FILE.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Rotate the audit log once it reaches this many bytes: FILE becomes FILE.1, FILE.1 FILE.2, ...
    #[arg(long, value_name = "BYTES", default_value_t = Rotation::default().max_bytes, value_parser = clap::value_parser!(u64).range(1024..), requires = "audit_log")]
    pub audit_log_max_bytes: u64,
    /// Rotated audit logs kept (FILE.1 ... FILE.N); older ones are deleted.
    #[arg(long, value_name = "N", default_value_t = Rotation::default().keep, requires = "audit_log")]
    pub audit_log_keep: usize,
    /// How servers' tool, prompt and resource template definitions are pinned, for entries without a "pin": tofu (what a server first offers is approved; later changes are held back until `mcpvisor tools approve`), strict (even the first), off.
    #[arg(long, value_name = "POLICY", default_value = "tofu", value_parser = crate::tools::parse_pin)]
    pub pin: mcpvisor_config::PinPolicy,
    /// This replica's name behind a load balancer: written in clear in the requestState of a multi-round call's input-required result (the balancer sends the retry to the replica it names) and in the Mcp-Replica header of responses to 2026-07-28 requests. 1 to 64 ASCII letters, digits, - and _ (default: 16 random hex digits, new at every start).
    #[arg(long, value_name = "ID", value_parser = parse_replica_id)]
    pub replica_id: Option<String>,
    #[command(flatten)]
    pub http: crate::http::HttpArgs,
    #[command(flatten)]
    pub sup: Supervision,
    #[command(flatten)]
    pub log: Logging,
}

pub fn main(args: ServeArgs) -> ExitCode {
    let loaded = load(&args);
    let (mut settings, plans) = match loaded {
        Ok(done) => done,
        Err(e) => return crate::refuse(e),
    };
    // The audit trail feeds the UI's Activity view and /metrics too.
    settings.audit = match &args.audit_log {
        Some(path) => {
            let rotation = Rotation {
                max_bytes: args.audit_log_max_bytes,
                keep: args.audit_log_keep,
            };
            match Audit::with_file(path, rotation) {
                Ok(audit) => Some(audit),
                Err(e) => {
                    return crate::refuse(format!(
                        "--audit-log: cannot write {}: {e}",
                        path.display()
                    ));
                }
            }
        }
        None => args.ui.is_some().then(Audit::new),
    };
    if let Err(e) = crate::run::init_logging(&args.log) {
        return crate::refuse(e);
    }
    let Some(runtime) = crate::runtime() else {
        return ExitCode::FAILURE;
    };
    let mut http = match args.http.config(
        args.sup.max_message_bytes,
        args.sup.max_in_flight as usize,
        args.ui.is_some(),
    ) {
        Ok(http) => http,
        Err(e) => return crate::refuse(e),
    };
    if let Some((_, cfg)) = &mut http {
        // Checked to be letters, digits, - and _: a valid header value.
        cfg.replica = settings
            .replica_id
            .as_deref()
            .and_then(|id| axum::http::HeaderValue::from_str(id).ok());
    }
    let ui = match args.ui {
        Some(addr) => {
            match UiPlan::new(addr, args.http.auth_token_file.as_deref(), &args.configs) {
                Ok(plan) => Some(plan),
                Err(e) => return crate::refuse(e),
            }
        }
        None => None,
    };
    let source = ReloadSource::from(&args);
    let outcome = runtime.block_on(async move {
        let (control_tx, control_rx) = mpsc::channel(16);
        let mut settings = settings;
        let mut tasks = Vec::new();
        // The UI: on the HTTP front's listener when it has the same
        // address, else on its own, bound before anything starts.
        let mut shared_ui: Option<crate::http::SharedUi> = None;
        let mut _runtime_file = None;
        if let Some(plan) = ui {
            let (monitor, tap) = Monitor::new(control_tx.clone());
            let monitor = monitor.with_activity(settings.audit.clone().unwrap_or_default());
            settings.monitor = Some(tap);
            let source = source.clone();
            let control = control_tx.clone();
            let ui_addr = plan.addr;
            let public_url = args.public_url.clone();
            let start = move |local: std::net::SocketAddr| {
                mcpvisor_oauth::set_redirect_uri(oauth_redirect(public_url.as_deref(), local));
                let plans = move |added: Option<&str>| {
                    if let Some(name) = added {
                        source.serve_also(name);
                    }
                    source.try_plans()
                };
                let cfg = plan.config(monitor, control, plans, local);
                let file = crate::ui::announce(local, &plan.token);
                (mcpvisor_ui::router(cfg), file)
            };
            match &http {
                Some((addr, _)) if *addr == ui_addr => shared_ui = Some(Box::new(start)),
                _ => {
                    let listener = match tokio::net::TcpListener::bind(ui_addr).await {
                        Ok(listener) => listener,
                        Err(e) => return Err(format!("--ui: cannot listen on {ui_addr}: {e}")),
                    };
                    let local = listener
                        .local_addr()
                        .map_err(|e| format!("--ui: cannot listen on {ui_addr}: {e}"))?;
                    let (router, file) = start(local);
                    _runtime_file = file;
                    // Bounded as the HTTP front is: headers within 10 s,
                    // at most 1,024 connections.
                    tasks.push(tokio::spawn(mcpvisor_http::serve_router(listener, router)));
                }
            }
        }
        source.watch_servers(control_tx.clone(), &plans);
        if !args.no_watch {
            tasks.extend(watch_configs(&args, source.clone(), control_tx.clone()));
        }
        // Approvals made by `mcpvisor tools approve` (or another gateway)
        // arrive through the store's file, watched even with --no-watch:
        // without it they would wait for a restart.
        if let Some(store) = &settings.pins {
            tasks.extend(crate::watchers::watch_pins(store, control_tx.clone()));
        }
        let outcome = match http {
            Some((addr, cfg)) => {
                let source = source.clone();
                crate::http::serve(
                    addr,
                    cfg,
                    settings,
                    plans,
                    (control_tx, control_rx),
                    move || source.plans().map(Control::Reconfigure),
                    shared_ui,
                )
                .await
            }
            None => {
                tasks.push(tokio::spawn(forward_signals(
                    control_tx.clone(),
                    source.clone(),
                )));
                // A task of its own, not the runtime's `block_on` future:
                // a backend's answer then wakes it straight from the run
                // queue, where waking the `block_on` future costs the
                // scheduler one more poll of the I/O driver per answer.
                tokio::spawn(Hub::run(
                    settings,
                    plans,
                    crate::stdio::client_stdin(),
                    crate::stdio::client_stdout(),
                    control_rx,
                ))
                .await
                .map_err(|e| format!("the gateway stopped: {e}"))
            }
        };
        for task in tasks {
            task.abort();
        }
        outcome
    });
    crate::finish(
        runtime,
        outcome.map(|outcome| matches!(outcome, Outcome::ClientGone)),
    )
}

/// What a config reload needs, cloned into the tasks that trigger one
/// (SIGHUP, the config files' watcher, the HTTP front's reload, the UI's
/// edits). The clones share the names served under `--only`.
#[derive(Debug, Clone)]
struct ReloadSource {
    configs: Vec<PathBuf>,
    /// `--only`, and every server added from the UI since the start.
    only: Option<Arc<Mutex<Vec<String>>>>,
    defaults: Defaults,
    /// The servers' own files' watchers, kept in step with every reload;
    /// `None` until the runtime runs.
    watchers: Arc<Mutex<Option<ServerWatchers>>>,
}

impl From<&ServeArgs> for ReloadSource {
    fn from(args: &ServeArgs) -> Self {
        Self {
            configs: args.configs.clone(),
            only: args.only.clone().map(|names| Arc::new(Mutex::new(names))),
            defaults: Defaults::from(args),
            watchers: Arc::default(),
        }
    }
}

impl ReloadSource {
    /// Reads the config files again; an error keeps the running servers.
    fn plans(&self) -> Option<Vec<ServerPlan>> {
        match self.try_plans() {
            Ok(plans) => Some(plans),
            Err(e) => {
                tracing::error!("config not reloaded, the servers keep running: {e}");
                None
            }
        }
    }

    /// Reads the config files again, or says why they cannot be served.
    /// The servers' files are watched as the new plans say.
    fn try_plans(&self) -> Result<Vec<ServerPlan>, String> {
        let only = self.only.as_ref().map(|names| names_of(names).clone());
        let set = ServerSet::load(&self.configs, only.as_deref()).map_err(|e| e.to_string())?;
        let plans = self.defaults.plans(&set);
        self.follow(&plans);
        Ok(plans)
    }

    /// Starts watching the files of `plans`' servers (with `--no-watch`,
    /// none), asking `control` for each server's reload. Needs the runtime.
    fn watch_servers(&self, control: mpsc::Sender<Control>, plans: &[ServerPlan]) {
        *lock(&self.watchers) = Some(ServerWatchers::new(control));
        self.follow(plans);
    }

    fn follow(&self, plans: &[ServerPlan]) {
        if let Some(watchers) = lock(&self.watchers).as_mut() {
            watchers.follow(plans, self.defaults.watch);
        }
    }

    /// Serves `name` from now on, and across every later reload, even
    /// under `--only`: a person has just added it from the UI. Without
    /// `--only` every server is served already.
    fn serve_also(&self, name: &str) {
        if let Some(names) = &self.only {
            let mut names = names_of(names);
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
}

/// The `--only` names; a panic elsewhere while they were held leaves them
/// as they were, a list of names, still usable.
fn names_of(names: &Mutex<Vec<String>>) -> std::sync::MutexGuard<'_, Vec<String>> {
    lock(names)
}

/// What a mutex holds, even after a panic elsewhere while it was held: each
/// one here holds a value that is whole between two statements.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The flags every server starts from.
#[derive(Debug, Clone)]
struct Defaults {
    session: mcpvisor_session::Config,
    stderr: mcpvisor_process::stderr::Passthrough,
    lazy: bool,
    health_interval: Duration,
    health_misses: u32,
    cache: Option<Cache>,
    watch: bool,
}

impl From<&ServeArgs> for Defaults {
    fn from(args: &ServeArgs) -> Self {
        let mut session = args.sup.session_config().unwrap_or_default();
        session.max_in_flight = args.backend_max_in_flight as usize;
        Self {
            session,
            stderr: args.sup.stderr(),
            lazy: args.lazy,
            health_interval: args.health_interval,
            health_misses: args.health_misses,
            cache: Cache::from_env(),
            watch: !args.no_watch,
        }
    }
}

impl Defaults {
    fn plans(&self, set: &ServerSet) -> Vec<ServerPlan> {
        for skipped in set.skipped() {
            tracing::warn!(
                server = %skipped.name,
                file = %skipped.source.display(),
                "not served: {}",
                skipped.reason
            );
        }
        set.servers().iter().map(|m| self.plan(&m.def)).collect()
    }

    /// One server's plan: these defaults, with its entry's fields over them.
    fn plan(&self, def: &mcpvisor_config::ServerDef) -> ServerPlan {
        let own = &def.supervision;
        let mut session = self.session.clone();
        if let Some(t) = def.init_timeout {
            session.init_timeout = t;
        }
        if let Some(t) = def.auth_timeout {
            session.auth_timeout = t;
        }
        if let Some(t) = own.request_timeout {
            session.request_timeout = t;
        }
        if let Some(t) = own.request_ceiling {
            session.request_ceiling = t.max(session.request_timeout);
        }
        if let Some(n) = own.max_in_flight {
            session.max_in_flight = n as usize;
        }
        if let Some(n) = own.crash_loop_exits {
            session.crash_loop_exits = n;
        }
        if let Some(restart) = own.restart {
            session.restart = restart;
        }
        session.tools = def.tools.clone();
        let cache_key = self.cache.as_ref().map(|_| Key::new(def, entry_mtime(def)));
        let per_client = own.sessions == Some(SessionMode::PerClient);
        // A per-client server starts for each client that uses it; until
        // then it is listed like a lazy one.
        let lazy = per_client
            || match own.start {
                Some(StartMode::Lazy) => true,
                Some(StartMode::Eager) => false,
                None => self.lazy,
            };
        // Only a lazy server is listed from the cache: an eager one is
        // listed as it answers, so its list is never older than the server.
        let cached = match (&self.cache, &cache_key) {
            (Some(cache), Some(key)) if lazy => cache.get(key).map(|l| Cached::from_lists(&l)),
            _ => None,
        };
        let timer = |t: Option<Timer>, default: Option<Duration>| match t {
            Some(Timer::Off) => None,
            Some(Timer::On(d)) => Some(d),
            None => default,
        };
        ServerPlan {
            name: def.name.clone(),
            def: def.clone(),
            session,
            stderr: self.stderr,
            lazy,
            idle_timeout: timer(own.idle_timeout, None),
            health_interval: timer(own.health_interval, Some(self.health_interval)),
            health_misses: own.health_misses.unwrap_or(self.health_misses),
            cached,
            cache_key,
            env_overrides: Vec::new(),
            per_client,
        }
    }
}

/// Checks the arguments and the config files before anything starts.
fn load(args: &ServeArgs) -> Result<(Settings, Vec<ServerPlan>), String> {
    let separator = Separator::new(args.separator.clone()).map_err(|e| e.to_string())?;
    args.sup.session_config()?;
    let set = ServerSet::load(&args.configs, args.only.as_deref()).map_err(|e| e.to_string())?;
    let plans = Defaults::from(args).plans(&set);
    let settings = Settings {
        separator,
        list_timeout: args.list_timeout,
        max_in_flight: args.sup.max_in_flight as usize,
        max_message_bytes: args.sup.max_message_bytes,
        tool_search: args.tool_search,
        cache_dir: mcpvisor_gateway::cache::default_dir(),
        transparent: false,
        monitor: None,
        spawners: None,
        audit: None,
        pins: pin_store(args, &plans)?,
        pin_default: args.pin,
        replica_id: Some(
            args.replica_id
                .clone()
                .unwrap_or_else(mcpvisor_gateway::random_replica_id),
        ),
    };
    Ok((settings, plans))
}

/// The pin store, read once to check it (`None` when nothing is pinned:
/// `--pin off` and no entry asks for pinning).
fn pin_store(
    args: &ServeArgs,
    plans: &[ServerPlan],
) -> Result<Option<mcpvisor_gateway::pins::PinStore>, String> {
    use mcpvisor_config::PinPolicy;
    let pinned = |plan: &ServerPlan| plan.def.pin.unwrap_or(args.pin) != PinPolicy::Off;
    if args.pin == PinPolicy::Off && !plans.iter().any(pinned) {
        return Ok(None);
    }
    let store = mcpvisor_gateway::pins::PinStore::default_location()
        .map_err(|e| format!("the pin store has no place: {e} (or serve with --pin off)"))?;
    store.load()?;
    // Watched from the start: the file must be there.
    store.create()?;
    Ok(Some(store))
}

/// SIGTERM and SIGINT stop the gateway; SIGHUP reloads the config files.
async fn forward_signals(control: mpsc::Sender<Control>, source: ReloadSource) {
    let hub = control.clone();
    crate::signals::until_stop(move || {
        let hub = hub.clone();
        let plans = source.plans();
        Box::pin(async move {
            match plans {
                Some(plans) => hub.send(Control::Reconfigure(plans)).await.is_ok(),
                None => true,
            }
        })
    })
    .await;
    tracing::info!("signal: stopping");
    let _ = control.send(Control::Shutdown).await;
}

/// Watches the config files; a debounced change reloads them.
fn watch_configs(
    args: &ServeArgs,
    source: ReloadSource,
    control: mpsc::Sender<Control>,
) -> Option<tokio::task::JoinHandle<()>> {
    let config = mcpvisor_watch::WatchConfig {
        paths: args.configs.clone(),
        ignore: Vec::new(),
        debounce: Duration::from_millis(300),
        poll: None,
    };
    let mut watcher = match mcpvisor_watch::watch(config) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("config files not watched ({e}); SIGHUP reloads them");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while watcher.changed().await.is_some() {
            tracing::info!("a config file changed: reloading the configuration");
            if let Some(plans) = source.plans() {
                if control.send(Control::Reconfigure(plans)).await.is_err() {
                    return;
                }
            }
        }
    }))
}

/// When the file a server runs last changed (its entry file: the script or
/// binary its command names), so that an edit invalidates cached lists.
fn entry_mtime(def: &mcpvisor_config::ServerDef) -> Option<std::time::SystemTime> {
    mcpvisor_watch::server_files(def)
        .iter()
        .filter_map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oauth_redirect_follows_the_ui() {
        let local: std::net::SocketAddr = "127.0.0.1:8809".parse().expect("addr");
        assert_eq!(
            oauth_redirect(None, local).as_deref(),
            Some("http://127.0.0.1:8809/oauth/callback")
        );
        assert_eq!(
            oauth_redirect(Some("https://gw.example/mcpvisor"), local).as_deref(),
            Some("https://gw.example/mcpvisor/oauth/callback")
        );
        let any: std::net::SocketAddr = "0.0.0.0:8809".parse().expect("addr");
        assert_eq!(oauth_redirect(None, any), None);
        assert_eq!(
            parse_public_url("https://gw.example/").as_deref(),
            Ok("https://gw.example")
        );
        assert!(parse_public_url("ftp://gw.example").is_err());
        assert!(parse_public_url("https://gw.example/?a=b").is_err());
        assert!(parse_public_url("gw.example").is_err());
    }
}
