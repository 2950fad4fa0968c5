//! `mcpvisor install-gateway` and `uninstall-gateway`: one entry in a
//! client's config that starts `mcpvisor serve --config F...`, and its
//! removal.
//!
//! The entry is added the way `mcpvisor_config::edit` adds a server (the
//! file's dialect and indentation, its other entries and fields kept), and
//! written like `wrap` writes: a backup next to the file first, `--dry-run`
//! as a diff. A client file that does not exist yet is created.
//!
//! `--move` also takes the client's own servers (stdio and remote; not the
//! ones that run mcpvisor, nor other transports) out of its file and adds
//! them to the gateway's first file, with a relative `cwd` or env file made
//! absolute, so that no server is started twice. `uninstall-gateway
//! --move-back FILE` puts back, as they were written, the entries that the
//! client file's backups hold and the gateway file still has.

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
    /// Also move the client's own servers into the first --config file, so they are not started twice.
    #[arg(long = "move")]
    pub move_servers: bool,
}

#[derive(Debug, Args)]
pub struct UninstallArgs {
    #[command(flatten)]
    pub target: Target,
    /// Also move back, from this gateway file, the servers `install-gateway --move` took from the client.
    #[arg(long = "move-back", value_name = "FILE")]
    pub move_back: Option<PathBuf>,
}

pub fn install(args: InstallArgs) -> ExitCode {
    let changes = (|| {
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
        let before = read_or_empty(&path)?;
        let mut text = if before.is_empty() {
            skeleton(&path)
        } else {
            before.clone()
        };
        let mut changes = Vec::new();
        if args.move_servers && !before.is_empty() {
            let gateway_file = &args.config[0];
            let gateway_before = read_or_empty(gateway_file)?;
            let mut gateway_text = gateway_before.clone();
            let mut moved = Vec::new();
            let loaded = server::parse(&text, &path).map_err(|e| e.to_string())?;
            let base = path.parent().unwrap_or(Path::new(""));
            for (name, fields) in server::raw_entries(&text, &path).map_err(|e| e.to_string())? {
                let movable = match loaded.get(&name) {
                    Ok(def) => !runs_mcpvisor(def),
                    // Other transports stay with the client.
                    Err(_) => false,
                };
                if !movable || name == args.target.name {
                    continue;
                }
                let fields = absolute_paths(fields, base);
                gateway_text = edit::add_server_text(&gateway_text, gateway_file, &name, &fields)
                    .map_err(|e| e.to_string())?;
                text = edit::remove_server_text(&text, &path, &name).map_err(|e| e.to_string())?;
                moved.push(EntryOutcome {
                    name,
                    outcome: Outcome::Wrapped,
                });
            }
            changes.push(Change {
                path: gateway_file.clone(),
                before: gateway_before,
                after: gateway_text,
                entries: moved,
            });
        }
        let after = edit::add_server_text(&text, &path, &args.target.name, &entry)
            .map_err(|e| e.to_string())?;
        changes.push(Change {
            path,
            before,
            after,
            entries: vec![EntryOutcome {
                name: args.target.name.clone(),
                outcome: Outcome::Wrapped,
            }],
        });
        Ok(changes)
    })();
    finish(changes, &args.target, "added", "moved")
}

pub fn uninstall(args: UninstallArgs) -> ExitCode {
    let changes = (|| {
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
        let mut after =
            edit::remove_server_text(&before, &path, name).map_err(|e| e.to_string())?;
        let mut changes = Vec::new();
        if let Some(gateway_file) = &args.move_back {
            let gateway_before = std::fs::read_to_string(gateway_file)
                .map_err(|e| format!("{}: cannot read: {e}", gateway_file.display()))?;
            let mut gateway_text = gateway_before.clone();
            let gateway =
                server::parse(&gateway_before, gateway_file).map_err(|e| e.to_string())?;
            let mut moved = Vec::new();
            // The client's entries as they were before the move, from its
            // backups (newest first): each goes back as it was written.
            for backup in wrap::backups(&path).map_err(|e| e.to_string())? {
                let Ok(old) = std::fs::read_to_string(&backup) else {
                    continue;
                };
                let Ok(entries) = server::raw_entries(&old, &path) else {
                    continue;
                };
                for (server_name, fields) in entries {
                    let taken = server::parse(&after, &path)
                        .map(|now| now.get(&server_name).is_ok())
                        .unwrap_or(true);
                    if taken || gateway.get(&server_name).is_err() || server_name == *name {
                        continue;
                    }
                    after = edit::add_server_text(&after, &path, &server_name, &fields)
                        .map_err(|e| e.to_string())?;
                    gateway_text =
                        edit::remove_server_text(&gateway_text, gateway_file, &server_name)
                            .map_err(|e| e.to_string())?;
                    moved.push(EntryOutcome {
                        name: server_name,
                        outcome: Outcome::Unwrapped,
                    });
                }
            }
            changes.push(Change {
                path: gateway_file.clone(),
                before: gateway_before,
                after: gateway_text,
                entries: moved,
            });
        }
        changes.push(Change {
            path,
            before,
            after,
            entries: vec![EntryOutcome {
                name: name.clone(),
                outcome: Outcome::Unwrapped,
            }],
        });
        Ok(changes)
    })();
    finish(changes, &args.target, "removed", "moved back")
}

fn read_or_empty(path: &Path) -> Result<String, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// An entry's relative `cwd` and env file made absolute against the folder
/// of the file it came from, so that it means the same in another file.
fn absolute_paths(mut fields: Map<String, Value>, base: &Path) -> Map<String, Value> {
    for key in ["cwd", "env_file", "envFile"] {
        if let Some(Value::String(value)) = fields.get(key) {
            let path = Path::new(value);
            if path.is_relative() && !value.starts_with("${") {
                let absolute = base.join(path);
                let absolute = std::path::absolute(&absolute).unwrap_or(absolute);
                fields.insert(key.into(), Value::from(absolute.display().to_string()));
            }
        }
    }
    fields
}

/// Writes `changes` in order (each with its backup), or prints them as
/// diffs with `--dry-run`.
fn finish(
    changes: Result<Vec<Change>, String>,
    target: &Target,
    done: &str,
    moved: &str,
) -> ExitCode {
    let changes = match changes {
        Ok(changes) => changes,
        Err(e) => return crate::refuse(e),
    };
    let mut text = String::new();
    let name = &target.name;
    for change in &changes {
        let what = if change.entries.iter().any(|e| e.name == *name) {
            format!("{done} {name:?}")
        } else {
            let names: Vec<&str> = change.entries.iter().map(|e| e.name.as_str()).collect();
            if names.is_empty() {
                "no servers to move".to_owned()
            } else {
                format!("{moved} {}", names.join(", "))
            }
        };
        if target.dry_run {
            text.push_str(&format!("{}: would have {what}\n", change.path.display()));
            text.push_str(&crate::wrap::diff(change));
            continue;
        }
        match wrap::write(change) {
            Ok(backup) => {
                text.push_str(&format!("{}: {what}\n", change.path.display()));
                if let Some(backup) = backup {
                    text.push_str(&format!("  backup: {}\n", backup.display()));
                }
            }
            Err(e) => {
                let _ = output::print(&text);
                return crate::refuse(e);
            }
        }
    }
    if !target.dry_run {
        text.push_str("Restart the client (or reload its MCP servers) to pick it up.\n");
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
