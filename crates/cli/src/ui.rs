//! `serve --ui`: the web UI's listener, its token and its runtime file;
//! and `mcpvisor status`, which finds a running gateway by that file.
//!
//! The runtime file, `$XDG_RUNTIME_DIR/mcpvisor/ui-<pid>.json` (or
//! `$TMPDIR/mcpvisor-<uid>/` without a runtime dir), holds the UI's
//! address and token so that `status` on the same account needs no flags.
//! Its folder is 0700 and the file 0600; it is removed when the gateway
//! ends (SIGTERM and SIGINT end it the ordinary way, so the removal runs).

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use mcpvisor_gateway::Control;
use mcpvisor_gateway::monitor::Monitor;
use mcpvisor_ui::{Reconfigure, Token, UiConfig};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::output;

/// `--ui` with no address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8809";

/// The UI's settings, checked before anything starts.
#[derive(Debug)]
pub struct UiPlan {
    pub addr: SocketAddr,
    pub token: Token,
    pub configs: Vec<PathBuf>,
}

impl UiPlan {
    /// `--ui ADDR`: a non-loopback address needs `--auth-token-file`,
    /// whose token is then the UI's too.
    pub fn new(
        addr: SocketAddr,
        token: Option<&Path>,
        configs: &[PathBuf],
    ) -> Result<Self, String> {
        let token = match token {
            Some(path) => Token::new(crate::http::read_token_text(path)?),
            None if !addr.ip().is_loopback() => {
                return Err(format!(
                    "--ui {addr} is not a loopback address: give --auth-token-file FILE so that only people with the token get in"
                ));
            }
            None => Token::random().map_err(|e| format!("cannot make the UI's token: {e}"))?,
        };
        Ok(Self {
            addr,
            token,
            configs: configs.to_vec(),
        })
    }

    /// The UI's configuration for a gateway reached through `monitor` and
    /// `control`; `plans` reads the config files again, serving from then
    /// on the server it names (one a person just added), whatever `--only`
    /// said.
    pub fn config(
        &self,
        monitor: Monitor,
        control: mpsc::Sender<Control>,
        plans: impl Fn(Option<&str>) -> Result<Vec<mcpvisor_gateway::ServerPlan>, String>
        + Send
        + Sync
        + 'static,
        local: SocketAddr,
    ) -> UiConfig {
        let plans = Arc::new(plans);
        let reconfigure: Reconfigure = Arc::new(move |added: Option<String>| {
            let plans = plans.clone();
            let control = control.clone();
            Box::pin(async move {
                let plans = plans(added.as_deref())?;
                control
                    .send(Control::Reconfigure(plans))
                    .await
                    .map_err(|_| "the gateway is stopping".to_owned())
            })
        });
        UiConfig {
            token: self.token.clone(),
            monitor,
            configs: self.configs.clone(),
            reconfigure,
            loopback: local.ip().is_loopback(),
            limits: mcpvisor_ui::Limits::default(),
        }
    }
}

/// Says where the UI is, on stderr and in the runtime file.
pub fn announce(local: SocketAddr, token: &Token) -> Option<RuntimeFile> {
    let url = format!("http://{local}/");
    // The file first: once the line is out, `status` finds the gateway.
    let file = match RuntimeFile::write(&url, token) {
        Ok(file) => Some(file),
        Err(e) => {
            tracing::warn!("no runtime file for `mcpvisor status`: {e}");
            None
        }
    };
    crate::output::announce(&format!("mcpvisor: UI at {url}?token={}", token.expose()));
    tracing::info!("web UI at {url}");
    file
}

// === the runtime file ===

/// The runtime file of this process; removed when dropped.
#[derive(Debug)]
pub struct RuntimeFile(PathBuf);

impl RuntimeFile {
    fn write(url: &str, token: &Token) -> Result<Self, String> {
        let dir = runtime_dir(true)?;
        let path = dir.join(format!("ui-{}.json", std::process::id()));
        let body = json!({"url": url, "token": token.expose(), "pid": std::process::id()});
        // A stale file of an earlier process with our pid is not ours to keep.
        let _ = std::fs::remove_file(&path);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        file.write_all(format!("{body}\n").as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for RuntimeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The folder of runtime files: made (0700) when `create`; refused when it
/// is not a folder of ours that only we can read.
fn runtime_dir(create: bool) -> Result<PathBuf, String> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("mcpvisor"),
        None => std::env::temp_dir().join(format!("mcpvisor-{uid}")),
    };
    if create {
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        }
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{}: not a folder of this user's with mode 0700; not used",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The newest runtime file whose process is alive: (url, token).
fn find_running() -> Option<(String, String)> {
    let dir = runtime_dir(false).ok()?;
    let mut found: Vec<(SystemTime, String, String)> = Vec::new();
    for entry in std::fs::read_dir(&dir).ok()?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("ui-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let (Some(url), Some(token), Some(pid)) =
            (v["url"].as_str(), v["token"].as_str(), v["pid"].as_i64())
        else {
            continue;
        };
        let alive = i32::try_from(pid)
            .is_ok_and(|pid| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok());
        if !alive {
            continue;
        }
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(UNIX_EPOCH);
        found.push((modified, url.to_owned(), token.to_owned()));
    }
    found.sort_by_key(|(at, _, _)| *at);
    found.pop().map(|(_, url, token)| (url, token))
}

// === mcpvisor status ===

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The UI's address (default: the running gateway's, from its runtime file).
    #[arg(long, value_name = "URL", requires = "token_file")]
    pub url: Option<String>,
    /// A file holding the UI's token (with --url).
    #[arg(long, value_name = "FILE", requires = "url")]
    pub token_file: Option<PathBuf>,
}

pub fn status(args: StatusArgs) -> ExitCode {
    let (url, token) = match (&args.url, &args.token_file) {
        (Some(url), Some(file)) => match crate::http::read_token_text(file) {
            Ok(token) => (url.clone(), token),
            Err(e) => return crate::refuse(e),
        },
        _ => match find_running() {
            Some(found) => found,
            None => {
                eprintln!(
                    "mcpvisor: no gateway with a UI is running (start one with `mcpvisor serve --config FILE --ui`)"
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let Some(runtime) = crate::runtime() else {
        return ExitCode::from(2);
    };
    let endpoint = format!("{}/api/servers", url.trim_end_matches('/'));
    let fetched = runtime.block_on(fetch(&endpoint, &token));
    let body = match fetched {
        Ok(body) => body,
        Err((code, e)) => {
            eprintln!("mcpvisor: {e}");
            return ExitCode::from(code);
        }
    };
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&body).unwrap_or_default();
        text.push('\n');
        text
    } else {
        table(&body, now_ms())
    };
    match output::print(&text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => ExitCode::from(e.report()),
    }
}

/// `GET endpoint` with the token: the JSON, or an exit code (1: nothing
/// answers there; 2: anything else) and one line.
async fn fetch(endpoint: &str, token: &str) -> Result<Value, (u8, String)> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| (2, format!("cannot make an HTTP client: {e}")))?;
    let resp = client
        .get(endpoint)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| {
            if e.is_connect() {
                (
                    1,
                    format!("no gateway answers at {endpoint} (is it still running?)"),
                )
            } else {
                (2, format!("{endpoint}: {e}"))
            }
        })?;
    let status = resp.status();
    let body: Value = resp
        .json()
        .await
        .map_err(|e| (2, format!("{endpoint}: not the UI's JSON: {e}")))?;
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("no reason given");
        return Err((2, format!("{endpoint}: {status}: {why}")));
    }
    Ok(body)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The servers as a table, one row each, columns aligned.
fn table(body: &Value, now_ms: u64) -> String {
    const HEAD: [&str; 12] = [
        "NAME",
        "STATE",
        "DETAIL",
        "GEN",
        "PID",
        "UPTIME",
        "RESTARTS",
        "CALLS",
        "ERRORS",
        "IN FLIGHT",
        "P50",
        "P99",
    ];
    let text = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let ms = |v: &Value| v.as_f64().map_or("-".to_owned(), |ms| format!("{ms:.1}ms"));
    let mut rows: Vec<Vec<String>> = vec![HEAD.iter().map(|h| (*h).to_owned()).collect()];
    for s in body["servers"].as_array().into_iter().flatten() {
        let uptime = s["started_at_ms"]
            .as_u64()
            .map_or("-".to_owned(), |at| duration(now_ms.saturating_sub(at)));
        let mut detail = text(&s["detail"]);
        if detail.chars().count() > 40 {
            detail = format!("{}…", detail.chars().take(39).collect::<String>());
        }
        rows.push(vec![
            text(&s["name"]),
            text(&s["state"]),
            detail,
            text(&s["generation"]),
            pids(s),
            uptime,
            text(&s["restarts"]),
            text(&s["calls"]),
            text(&s["errors"]),
            text(&s["in_flight"]),
            ms(&s["latency"]["p50_ms"]),
            ms(&s["latency"]["p99_ms"]),
        ]);
    }
    let widths: Vec<usize> = (0..HEAD.len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    let sessions = body["sessions"].as_u64().unwrap_or(0);
    out.push_str(&format!(
        "{sessions} client session{}\n",
        if sessions == 1 { "" } else { "s" }
    ));
    out
}

/// A row's pid, or a per-client server's clients' pids: `4121,4188`, past
/// three `4121,4188,4190+2`.
fn pids(row: &Value) -> String {
    let instances = row["instances"].as_array().map_or(&[][..], Vec::as_slice);
    if instances.is_empty() {
        return row["pid"]
            .as_u64()
            .map_or("-".to_owned(), |pid| pid.to_string());
    }
    let shown: Vec<String> = instances
        .iter()
        .take(3)
        .map(|i| {
            i["pid"]
                .as_u64()
                .map_or("-".to_owned(), |pid| pid.to_string())
        })
        .collect();
    let mut out = shown.join(",");
    if instances.len() > 3 {
        out.push_str(&format!("+{}", instances.len() - 3));
    }
    out
}

/// `3d4h`, `2h5m`, `4m10s`, `12s`.
fn duration(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        let body = json!({"servers": [
            {"name": "echo", "state": "ready", "detail": null, "generation": 2, "pid": 77,
             "started_at_ms": 1_000, "restarts": 1, "calls": 10, "errors": 0, "in_flight": 0,
             "latency": {"p50_ms": 1.25, "p99_ms": null}},
            {"name": "broken-one", "state": "failed", "detail": "crash loop: 5 exits in 60s",
             "generation": null, "pid": null, "started_at_ms": null, "restarts": 5, "calls": 0,
             "errors": 0, "in_flight": 0, "latency": {}}
        ], "sessions": 1});
        let text = table(&body, 126_000);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME        STATE   DETAIL"), "{text}");
        assert!(lines[1].starts_with("echo        ready   -"), "{text}");
        assert!(lines[1].contains("2m5s"), "{text}");
        assert!(lines[1].contains("1.2ms"), "{text}");
        assert!(lines[2].contains("crash loop: 5 exits in 60s"), "{text}");
        assert_eq!(lines[3], "1 client session");
        assert_eq!(duration(90_061_000), "1d1h");
    }

    #[test]
    fn a_per_client_server_shows_its_clients_pids() {
        let instance = |pid: u64| json!({"client": 1, "state": "ready", "pid": pid});
        let row = json!({"pid": null, "instances": [instance(41), instance(42)]});
        assert_eq!(pids(&row), "41,42");
        let many: Vec<Value> = (1..=5).map(instance).collect();
        assert_eq!(pids(&json!({"pid": null, "instances": many})), "1,2,3+2");
        assert_eq!(pids(&json!({"pid": 7, "instances": []})), "7");
        assert_eq!(pids(&json!({"pid": null})), "-");
    }
}
