//! `mcpvisor wrap` and `mcpvisor unwrap`: every stdio server of a person's
//! client configs put under `mcpvisor run --`, and back.
//!
//! The files are the ones named with `--config`, or else every client's
//! file found in its usual place ([`mcpvisor_config::clients`]). Every file
//! is read and its change worked out before anything is written: one file
//! that cannot be changed (a syntax error, say) refuses the whole command
//! with its one line, and nothing is written. `--dry-run` prints the
//! changes as a diff instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use mcpvisor_config::ConfigError;
use mcpvisor_config::clients::{self, Client, Places};
use mcpvisor_config::wrap::{self, Change, Outcome, WrapError};

use crate::output;

/// Which config files, and which of their servers (`wrap`, `unwrap`, `doctor`).
#[derive(Debug, Args)]
pub struct Sources {
    /// A config file (repeatable); without it, every client's file found in its usual place.
    #[arg(long, value_name = "FILE")]
    pub config: Vec<PathBuf>,
    /// Only the usual files of these clients (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "CLIENT,...",
        conflicts_with = "config"
    )]
    pub client: Vec<ClientArg>,
    /// Only the servers of these names (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub only: Vec<String>,
}

/// Which files, and whether to write them.
#[derive(Debug, Args)]
pub struct FileArgs {
    #[command(flatten)]
    pub sources: Sources,
    /// Print the changes as a diff and write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct WrapArgs {
    #[command(flatten)]
    pub files: FileArgs,
    /// The mcpvisor the wrapped entries start [default: this mcpvisor's absolute path].
    #[arg(long, value_name = "PATH")]
    pub program: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct UnwrapArgs {
    #[command(flatten)]
    pub files: FileArgs,
}

/// A client, as named on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ClientArg {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
    Codex,
    Windsurf,
}

impl From<ClientArg> for Client {
    fn from(arg: ClientArg) -> Client {
        match arg {
            ClientArg::ClaudeDesktop => Client::ClaudeDesktop,
            ClientArg::ClaudeCode => Client::ClaudeCode,
            ClientArg::Cursor => Client::Cursor,
            ClientArg::Vscode => Client::VsCode,
            ClientArg::Codex => Client::Codex,
            ClientArg::Windsurf => Client::Windsurf,
        }
    }
}

pub fn wrap_main(args: WrapArgs) -> ExitCode {
    let program = match program(args.program.as_deref()) {
        Ok(program) => program,
        Err(e) => return crate::refuse(e),
    };
    run(&args.files, "wrap", |path, only| {
        wrap::wrap(path, &program, only)
    })
}

pub fn unwrap_main(args: UnwrapArgs) -> ExitCode {
    run(&args.files, "unwrap", wrap::unwrap)
}

/// The mcpvisor wrapped entries start: an absolute path, since a client
/// started from a desktop does not have the shell's `PATH`.
pub fn program(given: Option<&Path>) -> Result<String, String> {
    let path = match given {
        Some(path) if path.is_absolute() || path.components().count() == 1 => path.to_owned(),
        Some(path) => std::path::absolute(path).map_err(|e| format!("--program: {e}"))?,
        None => std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|e| {
                format!("cannot tell where this mcpvisor is ({e}); give --program PATH")
            })?,
    };
    path.into_os_string()
        .into_string()
        .map_err(|_| "the path of mcpvisor is not UTF-8; give --program PATH".to_owned())
}

fn run(
    args: &FileArgs,
    verb: &str,
    change: impl Fn(&Path, Option<&[String]>) -> Result<Change, WrapError>,
) -> ExitCode {
    let files = match files(&args.sources) {
        Ok(files) => files,
        Err(e) => return crate::refuse(e),
    };
    let only = args.sources.only();

    // Every change is worked out before anything is written.
    let mut changes = Vec::new();
    let mut refused = Vec::new();
    for file in &files {
        match change(&file.path, only) {
            Ok(change) => changes.push(change),
            // A file found in a usual place that holds no servers table
            // (user settings without an `mcp` section, ...) is not ours.
            Err(WrapError::Config(ConfigError::File { .. })) if file.found => {}
            Err(e) => refused.push(e.to_string()),
        }
    }
    if !refused.is_empty() {
        for line in &refused {
            eprintln!("mcpvisor: {line}");
        }
        eprintln!("mcpvisor: nothing was changed");
        return ExitCode::from(2);
    }
    if let Some(only) = only {
        let missing: Vec<&str> = only
            .iter()
            .map(String::as_str)
            .filter(|name| {
                !changes
                    .iter()
                    .any(|c| c.entries.iter().any(|e| e.name == *name))
            })
            .collect();
        if !missing.is_empty() {
            return crate::refuse(format!(
                "--only: no server named {} in {}",
                missing.join(", "),
                list(changes.iter().map(|c| c.path.display().to_string()))
            ));
        }
    }
    if changes.is_empty() {
        return crate::refuse(
            "no client config with servers found in the usual places; name one with --config FILE",
        );
    }

    let mut text = String::new();
    let mut failed = false;
    let mut wrote = false;
    for change in &changes {
        if args.dry_run {
            text.push_str(&summary(change, verb, true));
            text.push_str(&diff(change));
            continue;
        }
        match wrap::write(change) {
            Ok(backup) => {
                text.push_str(&summary(change, verb, false));
                if let Some(backup) = backup {
                    text.push_str(&format!("  backup: {}\n", backup.display()));
                    wrote = true;
                }
            }
            Err(e) => {
                // Files already written stay written: each is whole.
                text.push_str(&format!("{}: not changed\n", change.path.display()));
                eprintln!("mcpvisor: {e}");
                failed = true;
            }
        }
    }
    if wrote {
        text.push_str(
            "Restart the clients (or reload their MCP servers) to start the servers the new way.\n",
        );
    }
    if let Err(e) = output::print(&text) {
        return ExitCode::from(e.report());
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// A config file to work on.
pub struct File {
    pub path: PathBuf,
    /// Found in a usual place rather than named: one without a servers
    /// table is passed over.
    pub found: bool,
}

impl Sources {
    /// `--only`, when given.
    pub fn only(&self) -> Option<&[String]> {
        (!self.only.is_empty()).then_some(self.only.as_slice())
    }
}

/// The files named with `--config`, or else those of the usual places that
/// exist, each once.
pub fn files(args: &Sources) -> Result<Vec<File>, String> {
    if !args.config.is_empty() {
        return Ok(args
            .config
            .iter()
            .map(|path| File {
                path: path.clone(),
                found: false,
            })
            .collect());
    }
    let places = Places::from_env()
        .ok_or("cannot tell the home folder (HOME is not set); name a file with --config FILE")?;
    let clients: Vec<Client> = if args.client.is_empty() {
        Client::ALL.to_vec()
    } else {
        args.client.iter().map(|&c| c.into()).collect()
    };
    // In the home folder, a project file is the user file: each file once.
    let mut seen = Vec::new();
    let mut files = Vec::new();
    for known in clients::known_files(&places, &clients) {
        let Ok(real) = std::fs::canonicalize(&known.path) else {
            continue;
        };
        if real.is_file() && !seen.contains(&real) {
            seen.push(real);
            files.push(File {
                path: known.path,
                found: true,
            });
        }
    }
    Ok(files)
}

fn summary(change: &Change, verb: &str, dry_run: bool) -> String {
    let done: Vec<&str> = match verb {
        "wrap" => change.with(&Outcome::Wrapped),
        _ => change.with(&Outcome::Unwrapped),
    };
    let mut line = format!("{}: ", change.path.display());
    let would = if dry_run { "would " } else { "" };
    if done.is_empty() {
        line.push_str(&format!("nothing to {verb}"));
    } else {
        let past = if verb == "wrap" {
            "wrapped"
        } else {
            "unwrapped"
        };
        let verb_form = if dry_run { verb } else { past };
        line.push_str(&format!("{would}{verb_form} {}", done.join(", ")));
    }
    let left: Vec<String> = change
        .entries
        .iter()
        .filter_map(|entry| {
            let why = match &entry.outcome {
                Outcome::Wrapped | Outcome::Unwrapped => return None,
                Outcome::RunsMcpvisor => "runs mcpvisor already".to_owned(),
                Outcome::Remote => "remote".to_owned(),
                Outcome::OtherTransport(t) => format!("{t} transport"),
                // Unwrap lists only what it could have undone.
                Outcome::NotWrapped => return None,
                Outcome::NotWrappedByWrap => {
                    "not wrapped by mcpvisor wrap, or its arguments changed since".to_owned()
                }
            };
            Some(format!("{} ({why})", entry.name))
        })
        .collect();
    if !left.is_empty() {
        line.push_str(&format!("; left alone: {}", left.join(", ")));
    }
    line.push('\n');
    line
}

pub fn diff(change: &Change) -> String {
    if !change.changed() {
        return String::new();
    }
    let path = change.path.display().to_string();
    similar::TextDiff::from_lines(&change.before, &change.after)
        .unified_diff()
        .context_radius(3)
        .header(&path, &path)
        .to_string()
}

fn list(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "no file".to_owned()
    } else {
        items.join(", ")
    }
}
