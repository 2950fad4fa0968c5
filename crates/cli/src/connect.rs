//! `mcpvisor connect URL`: a stdio server that is a remote one.
//!
//! For clients that only start stdio servers: what they write on our stdin
//! goes to the remote server (a `serve --http` gateway, usually), what it
//! sends comes back on our stdout. It is `run`'s session with a remote
//! worker, so a dropped connection is resumed or reconnected, the client's
//! handshake is replayed to a new remote session, and a request that is
//! really lost gets `-32010` once. It ends when the client closes stdin
//! (the remote session is deleted) or on SIGTERM/SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use mcpvisor_config::ServerDef;
use mcpvisor_runner::ServerSpec;
use mcpvisor_session::Outcome;
use tokio::sync::mpsc;

use crate::cli::{Logging, Supervision, parse_header};

#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The remote server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8808/mcp.
    #[arg(value_name = "URL")]
    pub url: String,
    /// A header sent with every request; repeatable; `${VAR}` is taken from the environment.
    #[arg(long = "header", value_name = "K:V", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// Send the token in this file as `Authorization: Bearer TOKEN` (as `serve --http --auth-token-file` expects).
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub oauth: crate::auth::OAuthArgs,
    #[command(flatten)]
    pub sup: Supervision,
    #[command(flatten)]
    pub log: Logging,
}

pub fn main(args: ConnectArgs) -> ExitCode {
    let def = match definition(&args) {
        Ok(def) => def,
        Err(e) => return crate::refuse(e),
    };
    let config = match args.sup.session_config() {
        Ok(config) => config,
        Err(e) => return crate::refuse(e),
    };
    if let Err(e) = crate::run::init_logging(&args.log) {
        return crate::refuse(e);
    }
    // A remote server's OAuth link opens in the browser (and is logged).
    mcpvisor_oauth::set_open_browser(true);
    let Some(runtime) = crate::runtime() else {
        return ExitCode::FAILURE;
    };
    let spec = ServerSpec {
        def,
        env_overrides: Vec::new(),
    };
    let spawner = mcpvisor_runner::spawner(&spec, &config, args.sup.stderr());
    // Every ending (stdin closed, stdout gone, a signal) is a clean one.
    let outcome = runtime.block_on(async move {
        let (control_tx, control_rx) = mpsc::channel(4);
        crate::run::on_stdio(config, spawner, control_tx, control_rx).await
    });
    crate::finish(runtime, Ok(matches!(outcome, Outcome::ClientGone)))
}

/// The remote server to reach, checked.
fn definition(args: &ConnectArgs) -> Result<ServerDef, String> {
    let has_host = args
        .url
        .strip_prefix("http://")
        .or_else(|| args.url.strip_prefix("https://"))
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
    if !has_host {
        return Err("URL must be an http:// or https:// URL with a host".into());
    }
    let mut def = ServerDef::remote("remote", &args.url);
    def.headers = args.headers.iter().cloned().collect();
    args.oauth.apply(&mut def)?;
    if let Some(path) = &args.auth_token_file {
        if def
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            return Err("give --auth-token-file or an Authorization --header, not both".into());
        }
        let token = crate::http::read_token_text(path)?;
        // A literal `${` in a token must not be taken for a placeholder.
        if token.contains("${") {
            return Err(format!(
                "--auth-token-file {}: the token contains \"${{\"",
                path.display()
            ));
        }
        def.headers
            .insert("Authorization".to_owned(), format!("Bearer {token}"));
    }
    Ok(def)
}
