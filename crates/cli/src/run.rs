//! `mcpvisor run`: logging, signals and the session.

use std::process::ExitCode;

use mcpvisor_session::{Control, EventSink, Outcome, Session};
use tokio::sync::mpsc;

use crate::cli::RunArgs;

pub fn main(args: RunArgs) -> ExitCode {
    let resolved = match args.resolve() {
        Ok(r) => r,
        Err(e) => return crate::refuse(e),
    };
    if let Err(e) = init_logging(&args.log) {
        return crate::refuse(e);
    }
    let Some(runtime) = crate::runtime() else {
        return ExitCode::FAILURE;
    };
    let reload_plan = crate::reload::plan(&args, &resolved.server.spec.def);
    let http = match args.http.config(
        args.sup.max_message_bytes,
        args.sup.max_in_flight as usize,
        false,
    ) {
        Ok(http) => http,
        Err(e) => return crate::refuse(e),
    };
    if let Some((addr, cfg)) = http {
        let mut resolved = resolved;
        if let Some(era) = args.era {
            if resolved.server.spec.def.is_remote() {
                return crate::refuse(
                    "--era is for a stdio server: a remote server's connection finds its era",
                );
            }
            resolved.server.spec.def.era = era;
        }
        return http_main(addr, cfg, resolved, reload_plan, runtime);
    }
    let outcome = runtime.block_on(async move {
        let (control_tx, control_rx) = mpsc::channel(4);
        let watcher = match reload_plan.map(|p| crate::reload::start(p, control_tx.clone())) {
            Some(Err(e)) => return Err(e),
            Some(Ok(task)) => Some(task),
            None => None,
        };
        let spawner =
            mcpvisor_runner::spawner(&resolved.server.spec, &resolved.config, resolved.stderr);
        let outcome = on_stdio(resolved.config, spawner, control_tx, control_rx).await;
        if let Some(task) = watcher {
            task.abort();
        }
        Ok(outcome)
    });
    crate::finish(
        runtime,
        outcome.map(|outcome| matches!(outcome, Outcome::ClientGone)),
    )
}

/// `run --http`: the one server served as itself over HTTP, to any number
/// of clients at once, through the gateway's hub in its transparent mode.
fn http_main(
    addr: std::net::SocketAddr,
    cfg: mcpvisor_http::HttpConfig,
    resolved: crate::cli::Resolved,
    reload_plan: Option<crate::reload::Plan>,
    runtime: tokio::runtime::Runtime,
) -> ExitCode {
    let spec = resolved.server.spec;
    let name = if spec.def.name.is_empty() {
        "server".to_owned()
    } else {
        spec.def.name.clone()
    };
    let plan = mcpvisor_gateway::ServerPlan {
        name: name.clone(),
        def: spec.def,
        session: resolved.config.clone(),
        stderr: resolved.stderr,
        lazy: false,
        idle_timeout: None,
        health_interval: None,
        health_misses: 3,
        cached: None,
        cache_key: None,
        // `run`'s own watcher (with --watch and --build) reloads it.
        env_overrides: spec.env_overrides,
        per_client: false,
    };
    let settings = mcpvisor_gateway::Settings {
        max_in_flight: resolved.config.max_in_flight,
        max_message_bytes: resolved.config.max_message_bytes,
        transparent: true,
        ..mcpvisor_gateway::Settings::default()
    };
    let outcome = runtime.block_on(async move {
        let (control_tx, control_rx) = mpsc::channel(16);
        // The watcher asks for a reload of the session; the hub reloads its
        // one server.
        let (reload_tx, mut reload_rx) = mpsc::channel(4);
        let watcher = match reload_plan.map(|p| crate::reload::start(p, reload_tx)) {
            Some(Err(e)) => return Err(e),
            Some(Ok(task)) => Some(task),
            None => None,
        };
        let hub = control_tx.clone();
        let reload_name = name.clone();
        let relay = tokio::spawn(async move {
            while let Some(control) = reload_rx.recv().await {
                if let Control::Reload(_) = control {
                    if hub
                        .send(mcpvisor_gateway::Control::Reload {
                            server: name.clone(),
                            cause: mcpvisor_gateway::ReloadCause::FilesChanged(
                                "its files changed".into(),
                            ),
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        });
        let outcome = crate::http::serve(
            addr,
            cfg,
            settings,
            vec![plan],
            (control_tx, control_rx),
            move || {
                Some(mcpvisor_gateway::Control::Reload {
                    server: reload_name.clone(),
                    cause: mcpvisor_gateway::ReloadCause::Asked,
                })
            },
            None,
        )
        .await;
        relay.abort();
        if let Some(task) = watcher {
            task.abort();
        }
        outcome
    });
    // No client of HTTP can be gone the way a stdio client is.
    crate::finish(runtime, outcome.map(|_| false))
}

/// A session over mcpvisor's own stdin and stdout, with SIGTERM, SIGINT
/// and SIGHUP forwarded to it as controls, until it ends: `run` and
/// `connect`.
pub(crate) async fn on_stdio<S: mcpvisor_session::Spawner>(
    config: mcpvisor_session::Config,
    spawner: S,
    control_tx: mpsc::Sender<Control>,
    control_rx: mpsc::Receiver<Control>,
) -> Outcome {
    let signals = tokio::spawn(forward_signals(control_tx));
    let outcome = Session::run(
        config,
        spawner,
        crate::stdio::client_stdin(),
        crate::stdio::client_stdout(),
        control_rx,
        EventSink::none(),
    )
    .await;
    signals.abort();
    outcome
}

/// SIGTERM and SIGINT stop the session; SIGHUP reloads the server.
pub(crate) async fn forward_signals(control: mpsc::Sender<Control>) {
    let hub = control.clone();
    crate::signals::until_stop(move || {
        let hub = hub.clone();
        Box::pin(async move { hub.send(Control::Reload("SIGHUP")).await.is_ok() })
    })
    .await;
    tracing::info!("signal: stopping");
    let _ = control.send(Control::Shutdown).await;
}

pub(crate) fn init_logging(args: &crate::cli::Logging) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let default = match (args.quiet, args.verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    // Our crates at the chosen level; dependencies only when they warn.
    let directives = format!(
        "warn,mcpvisor={default},mcpvisor_session={default},mcpvisor_process={default},mcpvisor_watch={default},mcpvisor_config={default}"
    );
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directives));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false);
    match &args.log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("--log-file {}: {e}", path.display()))?;
            builder
                .with_writer(Redacting(std::sync::Mutex::new(file)))
                .init();
        }
        None => builder.with_writer(Redacting(std::io::stderr)).init(),
    }
    Ok(())
}

/// The log's writer: each event goes out with every known secret replaced
/// by `[redacted:NAME]` (`mcpvisor_config::redact`), whatever the level.
pub(crate) struct Redacting<M>(pub M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for Redacting<M>
{
    type Writer = mcpvisor_config::redact::Writer<'static, M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        mcpvisor_config::redact::Writer::global(self.0.make_writer())
    }
}
