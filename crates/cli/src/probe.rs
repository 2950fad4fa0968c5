//! What `inspect` and `call` share: start a server as its client, show
//! progress on a terminal, honour Ctrl-C and the overall timeout, and turn
//! every failure into one report and exit code 2.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use mcpvisor_process::StopTimeouts;
use mcpvisor_process::stderr::Passthrough;
use mcpvisor_runner::{CallError, Connection, InitInfo, SessionEvent};
use mcpvisor_session::Config;
use tokio::sync::mpsc;

use crate::cli::ServerArgs;
use crate::server::{Chosen, choose};

/// A failure that ends the command with exit code 2.
#[derive(Debug)]
pub struct Failed(pub String, pub Option<Box<mcpvisor_runner::CrashReport>>);

impl Failed {
    pub fn msg(message: impl Into<String>) -> Self {
        Failed(message.into(), None)
    }

    /// The `--json` form: `{"error": {"message": ..., "crash": ...}}`.
    fn json(&self) -> serde_json::Value {
        let crash = self
            .1
            .as_ref()
            .and_then(|r| serde_json::to_value(r).ok())
            .unwrap_or(serde_json::Value::Null);
        serde_json::json!({"error": {"message": self.0, "crash": crash}})
    }
}

impl From<CallError> for Failed {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Crashed(report) => Failed(report.to_string(), Some(report)),
            other => Failed::msg(other.to_string()),
        }
    }
}

/// A started, initialized server.
pub struct Probe {
    pub conn: Connection,
    pub init: InitInfo,
    pub chosen: Chosen,
    pub started: Instant,
    /// Time from spawn to the `initialize` answer.
    pub startup: Duration,
}

/// Runs `body` against the chosen server with Ctrl-C and `--timeout`
/// handled; the server is stopped (whole process group) on every path.
pub fn run<F, Fut>(
    args: &ServerArgs,
    name: Option<&str>,
    command: &[std::ffi::OsString],
    body: F,
) -> u8
where
    F: FnOnce(Probe) -> Fut,
    Fut: std::future::Future<Output = (Probe, Result<u8, Failed>)>,
{
    init_logging(args.show_stderr);
    let mut chosen = match choose(
        args.config.as_deref(),
        name,
        command,
        args.url.as_deref(),
        &args.headers,
        args.cwd.as_deref(),
        &args.env,
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcpvisor: {e}");
            return 2;
        }
    };
    if let Err(e) = args.oauth.apply(&mut chosen.spec.def) {
        eprintln!("mcpvisor: {e}");
        return 2;
    }
    // A remote server's OAuth link opens in the browser (and is printed).
    mcpvisor_oauth::set_open_browser(true);
    let Some(runtime) = crate::runtime() else {
        return 2;
    };
    let stderr = if args.show_stderr {
        Passthrough::Inherit
    } else {
        Passthrough::Discard
    };
    let (init_timeout, auth_timeout) = (
        chosen.init_timeout(args.init_timeout),
        chosen.auth_timeout(args.auth_timeout),
    );
    let timeout = args.timeout;
    let json = args.json;
    let show_stderr = args.show_stderr;
    let code = runtime.block_on(async move {
        // The server's work is done once the answer is printed: a short grace
        // before SIGTERM (servers with timers ignore stdin EOF).
        let stop = StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_secs(2),
        };
        let cfg = Config {
            stop,
            auth_timeout,
            // What a stray print wrote is shown only on request.
            stdout_in_errors: show_stderr,
            ..Config::default()
        };
        let spawner = mcpvisor_runner::spawner(&chosen.spec, &cfg, stderr);
        let mut conn = Connection::start(spawner, cfg, chosen.root());
        let events = conn.take_events();
        let closer = conn.closer();
        let started = Instant::now();
        let spinner = Spinner::start(&chosen.label);
        let deadline = started + timeout;
        let work = async {
            let init = tokio::select! {
                init = conn.initialize(init_timeout, auth_timeout) => init,
                () = show_auth(events) => unreachable!("show_auth never ends"),
            };
            spinner.stop();
            let probe = match init {
                Ok(init) => Probe {
                    init,
                    startup: started.elapsed(),
                    conn,
                    chosen,
                    started,
                },
                Err(e) => return (conn, Err(Failed::from(e))),
            };
            let (probe, result) = body(probe).await;
            (probe.conn, result)
        };
        tokio::pin!(work);
        // Ctrl-C and the overall timeout abort the session; its drop path
        // stops the server in layers.
        let outcome = tokio::select! {
            out = &mut work => Ok(out),
            _ = tokio::signal::ctrl_c() => {
                eprintln!("\nmcpvisor: interrupted; stopping the server");
                Err(130)
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                eprintln!("mcpvisor: gave up after {timeout:?} (--timeout); stopping the server");
                Err(2)
            }
        };
        match outcome {
            Ok((conn, result)) => {
                conn.close().await;
                match result {
                    Ok(code) => code,
                    Err(failed) => {
                        crate::output::warn(&format!("mcpvisor: {}", failed.0));
                        if json {
                            // The failure is already said; a closed or full
                            // stdout adds nothing to it.
                            if let Err(e) = crate::output::print(&format!("{}\n", failed.json())) {
                                let _ = e.report();
                            }
                        }
                        2
                    }
                }
            }
            Err(code) => {
                closer.abort().await;
                code
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(4));
    code
}

/// Shows an authorization link the moment the session reports one. Never
/// ends: after the session's last event it waits forever.
async fn show_auth(events: Option<mpsc::Receiver<SessionEvent>>) {
    if let Some(mut events) = events {
        while let Some(event) = events.recv().await {
            if let SessionEvent::AuthPending { url, reason, .. } = event {
                let why = reason.map(|r| format!(" ({r})")).unwrap_or_default();
                eprintln!(
                    "\nmcpvisor: the server is waiting for you to authorize it{why}. Open:\n\n    {url}\n"
                );
                crate::auth::offer_paste();
            }
        }
    }
    std::future::pending().await
}

/// "starting `npx ...` 2.1s" on a terminal while the server starts.
struct Spinner(Option<tokio::task::JoinHandle<()>>);

impl Spinner {
    fn start(label: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self(None);
        }
        let label: String = label.chars().take(60).collect();
        let started = Instant::now();
        Self(Some(tokio::spawn(async move {
            let frames = ['|', '/', '-', '\\'];
            for i in 0.. {
                eprint!(
                    "\r{} starting {label} ({:.1}s) ",
                    frames[i % 4],
                    started.elapsed().as_secs_f32()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })))
    }

    fn stop(&self) {
        if let Some(task) = &self.0 {
            task.abort();
            eprint!("\r\x1b[2K");
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}

fn init_logging(verbose: bool) {
    let level = if verbose { "info" } else { "off" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "warn,mcpvisor_session={level},mcpvisor_process={level}"
        ))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false)
        .with_writer(crate::run::Redacting(std::io::stderr))
        .try_init();
}
