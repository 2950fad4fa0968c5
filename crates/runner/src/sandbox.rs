//! Starting a server inside its sandbox: the command line goes through
//! the binary's hidden `sandbox-exec` helper, which applies the rules to
//! itself and then `exec`s the server (same pid, same process group).

use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mcpvisor_config::Sandbox;
use mcpvisor_process::Spec;
use mcpvisor_session::Preflight;

/// The executable whose `sandbox-exec` applies a sandbox: mcpvisor itself,
/// set once by the binary. Unset (a library user), a sandboxed entry does
/// not start.
static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();

/// The bound on the check before a sandboxed spawn.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The most of the check's stderr read for its error line.
const CHECK_STDERR_BYTES: u64 = 4096;

/// Names the executable whose hidden `sandbox-exec` subcommand applies a
/// sandbox (the running mcpvisor). The first call wins.
pub fn set_sandbox_launcher(path: PathBuf) {
    let _ = LAUNCHER.set(path);
}

/// `spec` run through `sandbox-exec` with `rules`.
pub(crate) fn wrap(spec: Spec, name: &str, rules: &Sandbox) -> Result<Spec, String> {
    if !cfg!(target_os = "linux") {
        return Err(format!(
            "server {name:?} has a \"sandbox\", which needs Linux (Landlock); it was not started"
        ));
    }
    let launcher = LAUNCHER.get().ok_or_else(|| {
        format!(
            "server {name:?} has a \"sandbox\", which needs the mcpvisor executable to apply it"
        )
    })?;
    let mut args: Vec<OsString> = [
        "sandbox-exec",
        "--name",
        name,
        "--spec",
        &rules.to_json(),
        "--private-tmp",
        "--",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.push(spec.program);
    args.extend(spec.args);
    Ok(Spec {
        program: launcher.as_os_str().to_owned(),
        args,
        env: spec.env,
        cwd: spec.cwd,
    })
}

/// Before a sandboxed spawn, runs the same helper with `--check`: it
/// applies the sandbox and exits, so a kernel that lacks a feature fails
/// the start with the helper's one line rather than a crash. Kernels do
/// not lose features, so once it has passed it is not run again. It
/// blocks the caller for the few milliseconds the helper takes.
pub(crate) fn preflight() -> Preflight {
    let passed = Arc::new(AtomicBool::new(false));
    Arc::new(move |spec: &Spec| {
        if passed.load(Ordering::Relaxed) {
            return Ok(());
        }
        check(spec)?;
        passed.store(true, Ordering::Relaxed);
        Ok(())
    })
}

fn check(spec: &Spec) -> Result<(), String> {
    let mut args = spec.args.clone();
    args.insert(1, OsString::from("--check"));
    let mut command = Command::new(&spec.program);
    command
        .args(&args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start the sandbox helper: {e}"))?;
    let deadline = Instant::now() + CHECK_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the sandbox helper's check did not finish within {}s",
                    CHECK_TIMEOUT.as_secs()
                ));
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut said = String::new();
    if let Some(stderr) = child.stderr.take() {
        let _ = stderr.take(CHECK_STDERR_BYTES).read_to_string(&mut said);
    }
    let line = said
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(|line| line.strip_prefix("mcpvisor: ").unwrap_or(line).to_owned());
    Err(line.unwrap_or_else(|| format!("the sandbox helper failed ({status})")))
}
