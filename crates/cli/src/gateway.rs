//! `mcpvisor install-gateway` and `uninstall-gateway`: one entry in a
//! client's config that starts `mcpvisor serve --config F...`, and its
//! removal.
//!
//! The entry is added the way `mcpvisor_config::edit` adds a server (the
//! file's dialect and indentation, its other entries and fields kept), and
//! written like `wrap` writes: a backup next to the file first, `--dry-run`
//! as a diff. A client file that does not exist yet is created.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use mcpvisor_config::clients::{self, Client, Places};
use mcpvisor_config::wrap::{self, Change, EntryOutcome, Outcome, runs_mcpvisor};
use mcpvisor_config::{ServerSet, edit, server};
use serde_json::{Map, Value};

use crate::output;
use crate::wrap::ClientArg;

/// Which client file.
#[derive(Debug, Args)]
pub struct Target {
    /// The client whose user config gets the entry (its first usual file).
    #[arg(
        long,
        value_enum,
        required_unless_present = "into",
        conflicts_with = "into"
    )]
    pub client: Option<ClientArg>,
    /// The client config file to change, instead of --client.
    #[arg(long, value_name = "FILE")]
    pub into: Option<PathBuf>,
    /// The entry's name.
    #[arg(long, default_value = "mcpvisor")]
    pub name: String,
    /// Print the change as a diff and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The gateway's config file (repeatable), as `serve --config` takes it.
    #[arg(long, value_name = "FILE", required = true)]
    pub config: Vec<PathBuf>,
    #[command(flatten)]
    pub target: Target,
    /// The mcpvisor the entry starts [default: this mcpvisor's absolute path].
    #[arg(long, value_name = "PATH")]
    pub program: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub target: Target,
}

pub fn install(args: InstallArgs) -> ExitCode {
    let change = (|| {
        let program = crate::wrap::program(args.program.as_deref())?;
        // The gateway must be able to serve what it is given.
        let set = ServerSet::load(&args.config, None).map_err(|e| e.to_string())?;
        let mut cmd_args = vec![Value::from("serve")];
        for file in set.files() {
            let absolute =
                std::path::absolute(file).map_err(|e| format!("{}: {e}", file.display()))?;
            cmd_args.push(Value::from("--config"));
            cmd_args.push(Value::from(absolute.display().to_string()));
        }
        let mut entry = Map::new();
        entry.insert("command".into(), Value::from(program));
        entry.insert("args".into(), Value::Array(cmd_args));
        let path = target_file(&args.target)?;
        let before = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
        };
        let base = if before.is_empty() {
            skeleton(&path)
        } else {
            before.clone()
        };
        let after = edit::add_server_text(&base, &path, &args.target.name, &entry)
            .map_err(|e| e.to_string())?;
        Ok(Change {
            path,
            before,
            after,
            entries: vec![EntryOutcome {
                name: args.target.name.clone(),
                outcome: Outcome::Wrapped,
            }],
        })
    })();
    finish(change, &args.target, "added")
}

pub fn uninstall(args: UninstallArgs) -> ExitCode {
    let change = (|| {
        let path = target_file(&args.target)?;
        let name = &args.target.name;
        let loaded = server::load(&path).map_err(|e| e.to_string())?;
        let def = loaded.get(name).map_err(|e| e.to_string())?;
        if !(runs_mcpvisor(def) && def.args.first().is_some_and(|a| a == "serve")) {
            return Err(format!(
                "{}: server {name:?} does not run `mcpvisor serve`; left as it is",
                path.display()
            ));
        }
        let before = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        let after = edit::remove_server_text(&before, &path, name).map_err(|e| e.to_string())?;
        Ok(Change {
            path,
            before,
            after,
            entries: vec![EntryOutcome {
                name: name.clone(),
                outcome: Outcome::Unwrapped,
            }],
        })
    })();
    finish(change, &args.target, "removed")
}

fn finish(change: Result<Change, String>, target: &Target, done: &str) -> ExitCode {
    let change = match change {
        Ok(change) => change,
        Err(e) => return crate::refuse(e),
    };
    let mut text = String::new();
    let name = &target.name;
    if target.dry_run {
        text.push_str(&format!(
            "{}: would have {done} {name:?}\n",
            change.path.display()
        ));
        text.push_str(&crate::wrap::diff(&change));
    } else {
        match wrap::write(&change) {
            Ok(backup) => {
                text.push_str(&format!("{}: {done} {name:?}\n", change.path.display()));
                if let Some(backup) = backup {
                    text.push_str(&format!("  backup: {}\n", backup.display()));
                }
                text.push_str("Restart the client (or reload its MCP servers) to pick it up.\n");
            }
            Err(e) => return crate::refuse(e),
        }
    }
    match output::print(&text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => ExitCode::from(e.report()),
    }
}

/// `--into FILE`, or the client's first usual user file.
fn target_file(target: &Target) -> Result<PathBuf, String> {
    if let Some(into) = &target.into {
        return Ok(into.clone());
    }
    let client: Client = target
        .client
        .map(Into::into)
        .ok_or("give --client CLIENT or --into FILE")?;
    let places = Places::from_env()
        .ok_or("cannot tell the home folder (HOME is not set); give --into FILE")?;
    let known = clients::known_files(&places, &[client]);
    // The first user file that exists, else the first one.
    known
        .iter()
        .filter(|k| !k.project)
        .find(|k| k.path.is_file())
        .or_else(|| known.iter().find(|k| !k.project))
        .map(|k| k.path.clone())
        .ok_or_else(|| format!("{client} has no user config file"))
}

/// The text of an empty config of the file's dialect, to add to.
fn skeleton(path: &Path) -> String {
    let toml = path.extension().is_some_and(|e| e == "toml");
    let vscode = path.ends_with("Code/User/mcp.json") || path.ends_with(".vscode/mcp.json");
    if toml {
        "[mcp_servers]\n".to_owned()
    } else if vscode {
        "{\n  \"servers\": {}\n}\n".to_owned()
    } else {
        "{\n  \"mcpServers\": {}\n}\n".to_owned()
    }
}
