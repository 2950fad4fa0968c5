//! `mcpvisor auth login | status | logout`: a remote server's OAuth
//! authorization, by hand. The same flow and store the remote transport
//! uses when a server answers 401 (`mcpvisor_oauth`).

use std::io::{BufRead as _, IsTerminal as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use mcpvisor_config::ServerDef;
use mcpvisor_oauth::store::{StoredServer, now_secs};
use mcpvisor_oauth::{Authorizer, Prompt, Settings, Store};
use reqwest::Url;
use serde_json::{Map, Value};

#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub action: AuthAction,
}

#[derive(Debug, Subcommand)]
pub enum AuthAction {
    /// Authorize mcpvisor for a remote server now (a browser opens; the link is printed too).
    Login(OneServer),
    /// Each remote server: authorized or not, its issuer, scopes and token expiry.
    Status(StatusArgs),
    /// Forget a remote server's tokens and client registrations.
    Logout(OneServer),
}

#[derive(Debug, Args)]
pub struct OneServer {
    /// The server's name in the --config file.
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// The config file that holds NAME.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server's URL, instead of --config FILE NAME.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    #[command(flatten)]
    pub oauth: OAuthArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Show the remote servers of this config file (default: every server tokens are kept for).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Show only this server.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// OAuth settings from the command line, over a config entry's `oauth`.
#[derive(Debug, Clone, Default, Args)]
pub struct OAuthArgs {
    /// OAuth: a pre-registered client id (instead of a client ID metadata document or dynamic registration).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// OAuth: the pre-registered client's secret, read from this file.
    #[arg(long, value_name = "FILE", requires = "client_id")]
    pub client_secret_file: Option<PathBuf>,
    /// OAuth: an https URL of mcpvisor's client ID metadata document, used as the client id where the authorization server supports it.
    #[arg(long, value_name = "URL")]
    pub client_metadata_url: Option<String>,
    /// OAuth: ask for this scope (repeatable) instead of the server's.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
    /// OAuth: do not send the resource indicator (RFC 8707), for providers that reject it.
    #[arg(long)]
    pub no_resource_indicator: bool,
    /// OAuth: listen for the authorization's redirect on this port of 127.0.0.1 (default: one derived from the URL).
    #[arg(long, value_name = "PORT")]
    pub redirect_port: Option<u16>,
    /// OAuth: where tokens are kept: `file` (default, under $XDG_STATE_HOME/mcpvisor/oauth) or `keyring` (the OS keyring: the Linux kernel keyring; an error when it does not work).
    #[arg(long, value_name = "STORE", value_parser = ["file", "keyring"])]
    pub token_store: Option<String>,
    /// Do not use OAuth: a 401 is reported as it is.
    #[arg(long, conflicts_with_all = ["client_id", "client_metadata_url", "scopes", "no_resource_indicator", "redirect_port", "token_store"])]
    pub no_oauth: bool,
}

impl OAuthArgs {
    fn is_empty(&self) -> bool {
        self.client_id.is_none()
            && self.client_metadata_url.is_none()
            && self.scopes.is_empty()
            && !self.no_resource_indicator
            && self.redirect_port.is_none()
            && self.token_store.is_none()
            && !self.no_oauth
    }

    /// Writes the flags into the entry's `oauth` object (the flags win).
    pub fn apply(&self, def: &mut ServerDef) -> Result<(), String> {
        if self.is_empty() {
            return Ok(());
        }
        if !def.is_remote() {
            return Err(
                "the OAuth flags are for a remote server (--url, or an entry with a url)".into(),
            );
        }
        if self.no_oauth {
            def.extra.insert("oauth".into(), Value::Bool(false));
            return Ok(());
        }
        let mut oauth = match def.extra.remove("oauth") {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        if let Some(id) = &self.client_id {
            oauth.insert("client_id".into(), id.clone().into());
            oauth.remove("client_secret_env");
            oauth.remove("client_secret_file");
        }
        if let Some(file) = &self.client_secret_file {
            let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            oauth.insert(
                "client_secret_file".into(),
                file.display().to_string().into(),
            );
        }
        if let Some(url) = &self.client_metadata_url {
            oauth.insert("client_metadata_url".into(), url.clone().into());
        }
        if !self.scopes.is_empty() {
            oauth.insert("scopes".into(), self.scopes.clone().into());
        }
        if self.no_resource_indicator {
            oauth.insert("resource".into(), false.into());
        }
        if let Some(port) = self.redirect_port {
            oauth.insert("redirect_port".into(), port.into());
        }
        if let Some(store) = &self.token_store {
            oauth.insert("store".into(), store.clone().into());
        }
        def.extra.insert("oauth".into(), Value::Object(oauth));
        Ok(())
    }
}

pub fn main(args: AuthArgs) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_target(false)
        .with_ansi(false)
        .with_writer(crate::run::Redacting(std::io::stderr))
        .try_init();
    let store = match Store::default_location() {
        Ok(store) => store,
        Err(e) => return crate::refuse(format!("no place for tokens: {e}")),
    };
    let result = match args.action {
        AuthAction::Login(one) => login(&one, store),
        AuthAction::Status(status_args) => status(&status_args, &store),
        AuthAction::Logout(one) => logout(&one, &store),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => crate::refuse(e),
    }
}

/// The remote server `one` names, with the command line's OAuth flags.
fn server_of(one: &OneServer) -> Result<(ServerDef, Url), String> {
    let mut def = match (&one.config, &one.name, &one.url) {
        (None, None, Some(url)) => ServerDef::remote(url_label(url), url),
        (Some(file), Some(name), None) => {
            let loaded = mcpvisor_config::server::load(file).map_err(|e| e.to_string())?;
            loaded.get(name).map_err(|e| e.to_string())?.clone()
        }
        (Some(_), None, None) => {
            return Err("--config FILE needs the NAME of a server in it".into());
        }
        (None, Some(name), None) => {
            return Err(format!("a server NAME ({name}) needs --config FILE"));
        }
        _ => return Err("give --config FILE NAME or --url URL".into()),
    };
    one.oauth.apply(&mut def)?;
    let url = def
        .url
        .as_deref()
        .and_then(|u| Url::parse(u).ok())
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
        .ok_or_else(|| format!("server {:?} has no http:// or https:// url", def.name))?;
    Ok((def, url))
}

/// `--url`'s host, as the server's name in messages.
fn url_label(url: &str) -> String {
    Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "remote".into())
}

fn settings_of(def: &ServerDef) -> Result<Settings, String> {
    let lookup = |key: &str| {
        mcpvisor_config::secrets::resolve_env(def)
            .ok()
            .and_then(|vars| vars.into_iter().find(|(k, _)| k == key))
            .map(|(_, v)| v.expose().to_owned())
            .or_else(|| std::env::var(key).ok())
    };
    let base = def.source.as_deref().and_then(std::path::Path::parent);
    Settings::from_entry(&def.name, &def.extra, base, &lookup).map_err(|e| e.to_string())
}

fn login(one: &OneServer, store: Store) -> Result<(), String> {
    let (def, url) = server_of(one)?;
    let settings = settings_of(&def)?;
    if !settings.enabled {
        return Err(format!(
            "server {:?} has OAuth turned off (\"oauth\": false)",
            def.name
        ));
    }
    let store = if settings.keyring {
        store.in_keyring()?
    } else {
        store
    };
    let wait = def.auth_timeout.unwrap_or(mcpvisor_oauth::DEFAULT_WAIT);
    let runtime = crate::runtime().ok_or("no runtime")?;
    mcpvisor_oauth::set_open_browser(true);
    let name = def.name.clone();
    runtime.block_on(async move {
        let authorizer = Authorizer::for_server(&name, &url, settings, store, wait)
            .map_err(|e| e.to_string())?;
        let prompt: Prompt = Arc::new(show_link);
        let login = authorizer.login(&prompt);
        let tokens = tokio::select! {
            tokens = login => tokens.map_err(|e| e.to_string())?,
            _ = tokio::signal::ctrl_c() => return Err("interrupted".to_owned()),
        };
        eprintln!(
            "mcpvisor: authorized {name} (issuer {}{}{})",
            tokens.issuer,
            scopes_text(&tokens.scopes),
            expiry_text(tokens.expires_at)
        );
        Ok(())
    })
}

/// Prints the authorization link and, on a terminal, offers to paste the
/// URL the browser landed on (for a browser on another machine).
pub fn show_link(link: &str, reason: &str) {
    eprintln!(
        "\nmcpvisor: open this link to authorize ({reason}; a browser should open it):\n\n    {link}\n"
    );
    offer_paste();
}

/// On a terminal: says that the URL the browser landed on may be pasted,
/// and reads it.
pub fn offer_paste() {
    if std::io::stdin().is_terminal() {
        eprintln!(
            "If the browser cannot reach this machine, paste here the address it landed on, and press Enter.\n"
        );
        read_pasted_urls();
    }
}

/// Reads pasted URLs from the terminal (once per process) and hands each
/// to the waiting flow.
fn read_pasted_urls() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    STARTED.call_once(|| {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(4);
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if !line.trim().is_empty() && tx.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        handle.spawn(async move {
            while let Some(line) = rx.recv().await {
                if let Err(e) = mcpvisor_oauth::paste(&line).await {
                    eprintln!("mcpvisor: {e}");
                }
            }
        });
    });
}

fn logout(one: &OneServer, store: &Store) -> Result<(), String> {
    let (def, url) = server_of(one)?;
    if store.forget(url.as_str())? {
        eprintln!(
            "mcpvisor: forgot the tokens and client registrations of {}",
            def.name
        );
    } else {
        eprintln!("mcpvisor: nothing was kept for {}", def.name);
    }
    Ok(())
}

fn status(args: &StatusArgs, store: &Store) -> Result<(), String> {
    let mut rows: Vec<(String, String, Option<StoredServer>)> = Vec::new();
    if let Some(file) = &args.config {
        let loaded = mcpvisor_config::server::load(file).map_err(|e| e.to_string())?;
        for def in loaded.servers().filter(|d| d.is_remote()) {
            let Some(url) = def.url.as_deref().and_then(|u| Url::parse(u).ok()) else {
                continue;
            };
            if args
                .url
                .as_deref()
                .is_some_and(|want| Url::parse(want).ok().as_ref() != Some(&url))
            {
                continue;
            }
            rows.push((def.name.clone(), url.to_string(), store.load(url.as_str())?));
        }
    } else if let Some(want) = &args.url {
        let url = Url::parse(want).map_err(|_| format!("--url {want:?} is not a URL"))?;
        rows.push((url_label(want), url.to_string(), store.load(url.as_str())?));
    } else {
        for stored in store.list()? {
            rows.push((
                url_label(&stored.server),
                stored.server.clone(),
                Some(stored),
            ));
        }
    }
    if args.json {
        let list: Vec<Value> = rows
            .iter()
            .map(|(name, url, stored)| row_json(name, url, stored.as_ref()))
            .collect();
        return print(&format!("{}\n", Value::Array(list)));
    }
    if rows.is_empty() {
        eprintln!(
            "mcpvisor: no remote server has been authorized (tokens are kept in {})",
            store.dir().display()
        );
        return Ok(());
    }
    let mut text = String::new();
    for (name, url, stored) in &rows {
        let line = match stored.as_ref().and_then(|s| s.tokens.as_ref()) {
            Some(tokens) => format!(
                "{name}  {url}  authorized  issuer {}{}{}{}\n",
                tokens.issuer,
                scopes_text(&tokens.scopes),
                expiry_text(tokens.expires_at),
                if tokens.refresh_token.is_some() {
                    ", refreshable"
                } else {
                    ""
                }
            ),
            None => match stored.as_ref().and_then(|s| s.reason.as_deref()) {
                Some(reason) => format!("{name}  {url}  not authorized ({reason})\n"),
                None => format!("{name}  {url}  not authorized\n"),
            },
        };
        text.push_str(&line);
    }
    print(&text)
}

/// Prints on stdout; a closed pipe is not an error.
fn print(text: &str) -> Result<(), String> {
    match crate::output::print(text) {
        Ok(()) | Err(crate::output::Error::Closed) => Ok(()),
        Err(crate::output::Error::Failed(e)) => Err(format!("cannot write to stdout: {e}")),
    }
}

fn row_json(name: &str, url: &str, stored: Option<&StoredServer>) -> Value {
    let tokens = stored.and_then(|s| s.tokens.as_ref());
    serde_json::json!({
        "name": name,
        "url": url,
        "authorized": tokens.is_some(),
        "reason": stored.and_then(|s| s.reason.clone()),
        "issuer": tokens.map(|t| t.issuer.clone()),
        "scopes": tokens.map(|t| t.scopes.clone()).unwrap_or_default(),
        "expires_at": tokens.and_then(|t| t.expires_at),
        "refreshable": tokens.is_some_and(|t| t.refresh_token.is_some()),
        "clients": stored.map(|s| s.clients.keys().cloned().collect::<Vec<_>>()).unwrap_or_default(),
    })
}

fn scopes_text(scopes: &[String]) -> String {
    if scopes.is_empty() {
        String::new()
    } else {
        format!(", scopes {}", scopes.join(" "))
    }
}

fn expiry_text(expires_at: Option<u64>) -> String {
    match expires_at {
        None => String::new(),
        Some(at) => {
            let now = now_secs();
            if at <= now {
                ", access token expired".into()
            } else {
                format!(", access token expires in {}s", at - now)
            }
        }
    }
}
