//! Hot reload: file changes, then the optional build, then a reload.
//!
//! The watcher task owns the notify watcher and the build command. It never
//! touches the session's state: a change that builds cleanly becomes one
//! `Control::Reload`, and the session picks the quiet moment.

use std::path::PathBuf;
use std::time::Duration;

use mcpvisor_process::{Spec, StopTimeouts};
use mcpvisor_session::Control;
use mcpvisor_watch::{WatchConfig, Watcher};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::cli::RunArgs;

/// What to watch and what to build, resolved from the arguments.
#[derive(Debug)]
pub struct Plan {
    pub config: WatchConfig,
    pub build: Option<String>,
    pub build_timeout: Duration,
    pub cwd: Option<PathBuf>,
}

/// `None` when there is nothing to watch (`--no-watch`, or a command that
/// names no local file and no `--watch`).
pub fn plan(args: &RunArgs, def: &mcpvisor_config::ServerDef) -> Option<Plan> {
    if args.no_watch {
        return None;
    }
    let mut paths = mcpvisor_watch::server_files(def);
    paths.extend(args.watch.iter().cloned());
    if paths.is_empty() {
        tracing::info!(
            "hot reload: the command names no local file to watch; add --watch PATH to watch one"
        );
        return None;
    }
    Some(Plan {
        config: WatchConfig {
            paths,
            ignore: args.ignore.clone(),
            debounce: args.debounce,
            poll: args.poll,
        },
        build: args.build.clone(),
        build_timeout: args.build_timeout,
        cwd: def.cwd.clone(),
    })
}

/// Starts watching; errors are for the user (a missing `--watch` path).
pub fn start(
    plan: Plan,
    control: mpsc::Sender<Control>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let shown: Vec<String> = plan
        .config
        .paths
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let watcher = mcpvisor_watch::watch(plan.config).map_err(|e| e.to_string())?;
    tracing::info!(paths = %shown.join(", "), "hot reload: watching");
    Ok(tokio::spawn(run(
        watcher,
        plan.build,
        plan.build_timeout,
        plan.cwd,
        control,
    )))
}

async fn run(
    mut watcher: Watcher,
    build: Option<String>,
    build_timeout: Duration,
    cwd: Option<PathBuf>,
    control: mpsc::Sender<Control>,
) {
    while let Some(change) = watcher.changed().await {
        let first = change
            .paths
            .first()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "files".into());
        let more = change.count.saturating_sub(1);
        tracing::info!(
            "change detected: {first}{}",
            if more > 0 {
                format!(" (+{more} more)")
            } else {
                String::new()
            }
        );
        if let Some(cmd) = &build {
            if let Err(e) = run_build(cmd, cwd.as_ref(), build_timeout).await {
                tracing::error!("build failed, keeping the current server: {e}");
                continue;
            }
        }
        if control.send(Control::Reload("file change")).await.is_err() {
            return;
        }
    }
    tracing::warn!("hot reload: the file watcher stopped; SIGHUP still reloads");
}

/// The most build output kept for the error report.
const BUILD_OUTPUT: usize = 64 * 1024;

/// Runs `cmd` with `sh -c`, bounded. On failure its output goes to stderr.
async fn run_build(cmd: &str, cwd: Option<&PathBuf>, limit: Duration) -> Result<(), String> {
    let spec = Spec {
        program: "sh".into(),
        args: vec!["-c".into(), cmd.into()],
        env: Vec::new(),
        cwd: cwd.cloned(),
    };
    let started = std::time::Instant::now();
    let spawned =
        mcpvisor_process::spawn(&spec, StopTimeouts::default()).map_err(|e| e.to_string())?;
    drop(spawned.stdin);
    let mut process = spawned.process;
    let read = async {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut stdout = spawned.stdout.take(BUILD_OUTPUT as u64);
        let mut stderr = spawned.stderr.take(BUILD_OUTPUT as u64);
        let _ = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        (out, err)
    };
    let finished = tokio::time::timeout(limit, async {
        let (out, err) = read.await;
        (process.wait().await, out, err)
    })
    .await;
    let (exit, out, err) = match finished {
        Ok(done) => done,
        Err(_) => {
            process.stop();
            let _ = process.wait().await;
            return Err(format!("`{cmd}` did not finish within {limit:?}"));
        }
    };
    let status = exit
        .status
        .map_or(mcpvisor_config::ExitKind::Unknown, Into::into);
    if status.success() {
        tracing::info!(
            "build `{cmd}` succeeded in {} ms",
            started.elapsed().as_millis()
        );
        return Ok(());
    }
    // The build's own output is the user's, not a payload: show it as is.
    eprint!(
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    Err(format!(
        "`{cmd}` ended with {status} after {:.1?}",
        exit.uptime
    ))
}
