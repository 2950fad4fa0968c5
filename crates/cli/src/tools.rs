//! `mcpvisor tools diff|approve`: what `serve` holds back of a server's
//! definitions, and a person's approval of it.
//!
//! Both read the pin store (`mcpvisor_gateway::pins`). What a server
//! offers comes from the store's `pending` part when a gateway has written
//! one (exactly what that gateway holds back), else from the server
//! itself, started from `--config` as `inspect` does and stopped again. An
//! approval is a read-modify-write of the store under its lock, so two
//! people (or a person and a gateway) approving at once both keep theirs;
//! a running gateway watches the store and lets the approved definitions
//! through, its clients told once.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use mcpvisor_config::{PinPolicy, ServerDef, ServerSet};
use mcpvisor_gateway::monitor::{Change, DefinitionKind};
use mcpvisor_gateway::pins::{self, Edit, PinFile, PinStore};
use mcpvisor_runner::{Connection, ServerSpec};
use serde_json::Value;

use crate::cli::parse_duration;

#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(subcommand)]
    pub command: ToolsCommand,
}

#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Print each held-back tool, prompt and resource template of SERVER (or of every server): its approved and its offered definition, changed lines marked - and +.
    Diff(DiffArgs),
    /// Approve SERVER's held-back definitions named NAME, as tools diff showed them with NAME@DIGEST (all of them without a NAME); a running gateway lets them through.
    Approve(ApproveArgs),
}

#[derive(Debug, Args)]
pub struct Common {
    /// A config file, as given to serve; repeatable.
    #[arg(long = "config", value_name = "FILE", required = true)]
    pub configs: Vec<PathBuf>,
    /// The pin policy of entries that name none, as given to serve.
    #[arg(long, value_name = "POLICY", default_value = "tofu", value_parser = parse_pin)]
    pub pin: PinPolicy,
    /// Bound on starting a server to read what it offers (when no gateway has written what it holds).
    #[arg(long, value_name = "DUR", default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub common: Common,
    /// The server's name in the config (default: every enabled server).
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub common: Common,
    /// The server's name in the config.
    #[arg(value_name = "SERVER")]
    pub server: String,
    /// The tools, prompts or resource templates (their URI template) to approve, each as NAME@DIGEST (as tools diff prints it: refused if the definition changed again since) or NAME; none: every held-back one.
    #[arg(value_name = "NAME[@DIGEST]")]
    pub names: Vec<String>,
}

/// `--pin`'s values.
pub fn parse_pin(s: &str) -> Result<PinPolicy, String> {
    PinPolicy::parse(s).ok_or_else(|| format!("expected one of {}", PinPolicy::NAMES.join(", ")))
}

pub fn main(args: ToolsArgs) -> ExitCode {
    let Some(runtime) = crate::runtime() else {
        return ExitCode::from(2);
    };
    let done = runtime.block_on(async {
        match args.command {
            ToolsCommand::Diff(args) => diff(args).await,
            ToolsCommand::Approve(args) => approve(args).await.map(|text| (text, Vec::new())),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(4));
    match done {
        Ok((text, failed)) => {
            if let Err(e) = crate::output::print(&text) {
                return ExitCode::from(e.report());
            }
            // What could not be read is said after what could.
            for e in &failed {
                eprintln!("mcpvisor: {e}");
            }
            if failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Err(e) => crate::refuse(e),
    }
}

/// A definition held back.
#[derive(Debug)]
struct HeldItem {
    kind: DefinitionKind,
    name: String,
    change: Change,
    approved: Option<Value>,
    offered: Value,
    /// The offered definition's `pins::digest`.
    digest: String,
}

/// Where the offered definitions came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A gateway wrote what it holds back.
    Gateway,
    /// The server was started just now.
    Server,
}

/// One server's held-back definitions.
#[derive(Debug)]
struct Held {
    server: String,
    source: Source,
    items: Vec<HeldItem>,
}

/// The config's servers, and the store.
struct Setup {
    set: ServerSet,
    store: PinStore,
    file: PinFile,
}

fn setup(common: &Common) -> Result<Setup, String> {
    let set = ServerSet::load(&common.configs, None).map_err(|e| e.to_string())?;
    let store = PinStore::default_location()?;
    let file = store.load()?;
    Ok(Setup { set, store, file })
}

/// The entry named `name`, or an error that lists the names.
fn entry<'a>(set: &'a ServerSet, name: &str) -> Result<&'a ServerDef, String> {
    match set.get(name) {
        Some(member) => Ok(&member.def),
        None => {
            let names: Vec<&str> = set.servers().iter().map(|m| m.def.name.as_str()).collect();
            Err(format!(
                "no server is named `{name}` in the config (servers: {})",
                names.join(", ")
            ))
        }
    }
}

/// What every server (or the one named) holds back, and the servers that
/// could not be read: one that fails to start does not hide the others.
async fn diff(args: DiffArgs) -> Result<(String, Vec<String>), String> {
    let s = setup(&args.common)?;
    let defs: Vec<ServerDef> = match &args.server {
        Some(name) => vec![entry(&s.set, name)?.clone()],
        None => s.set.enabled().map(|m| m.def.clone()).collect(),
    };
    let mut out = String::new();
    let mut failed = Vec::new();
    let mut total = 0;
    for def in &defs {
        let held = match held(def, &s.file, &args.common).await {
            Ok(held) => held,
            Err(e) if args.server.is_none() => {
                failed.push(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        total += held.items.len();
        write_held(&mut out, &held);
    }
    if total == 0 {
        let which = match &args.server {
            Some(name) => format!("server `{name}`"),
            None if failed.is_empty() => "any server".to_owned(),
            None => "the other servers".to_owned(),
        };
        let _ = writeln!(out, "nothing of {which} is held back");
    }
    Ok((out, failed))
}

/// One `NAME[@DIGEST]` argument: a name held back as given is a name, even
/// with an `@` in it (a URI template may have one); else what follows its
/// last `@`, when it has a digest's form, is the digest.
fn pick(arg: &str, held: &[HeldItem]) -> (String, Option<String>) {
    if held.iter().any(|h| h.name == arg) {
        return (arg.to_owned(), None);
    }
    match arg.rsplit_once('@') {
        Some((name, digest)) if pins::is_digest(digest) => {
            (name.to_owned(), Some(digest.to_owned()))
        }
        _ => (arg.to_owned(), None),
    }
}

async fn approve(args: ApproveArgs) -> Result<String, String> {
    let s = setup(&args.common)?;
    let def = entry(&s.set, &args.server)?;
    let held = held(def, &s.file, &args.common).await?;
    let picks: Vec<(String, Option<String>)> =
        args.names.iter().map(|a| pick(a, &held.items)).collect();
    if let Some((missing, _)) = picks
        .iter()
        .find(|(n, _)| !held.items.iter().any(|h| h.name == *n))
    {
        let what = if held.items.is_empty() {
            "nothing is held back".to_owned()
        } else {
            let names: Vec<&str> = held.items.iter().map(|h| h.name.as_str()).collect();
            format!("held back: {}", names.join(", "))
        };
        return Err(format!(
            "the server `{}` holds nothing named `{missing}` back ({what})",
            args.server
        ));
    }
    for (name, seen) in &picks {
        let Some(seen) = seen else { continue };
        if !held
            .items
            .iter()
            .any(|h| h.name == *name && h.digest == *seen)
        {
            let now: Vec<&str> = held
                .items
                .iter()
                .filter(|h| h.name == *name)
                .map(|h| h.digest.as_str())
                .collect();
            return Err(format!(
                "`{name}` of server `{}` changed again since it was shown (shown: {seen}, offered now: {}); nothing was approved: look at it again with mcpvisor tools diff {}",
                args.server,
                now.join(", "),
                args.server
            ));
        }
    }
    // Under a name given with digests, only the definitions shown.
    let chosen: Vec<&HeldItem> = held
        .items
        .iter()
        .filter(|h| {
            picks.is_empty()
                || picks
                    .iter()
                    .any(|(n, d)| *n == h.name && d.as_ref().is_none_or(|d| *d == h.digest))
        })
        .collect();
    if chosen.is_empty() {
        return Ok(format!(
            "nothing of server `{}` is held back\n",
            args.server
        ));
    }
    let edit = Edit::Approve {
        server: args.server.clone(),
        defs: chosen
            .iter()
            .map(|h| (h.kind, h.name.clone(), h.offered.clone()))
            .collect(),
        seen: Vec::new(),
    };
    s.store.update(|file| file.apply(&edit)).await?;
    let mut out = String::new();
    for h in chosen {
        let _ = writeln!(
            out,
            "approved {} `{}` of server `{}`",
            h.kind.noun(),
            h.name,
            args.server
        );
    }
    Ok(out)
}

/// What `def`'s server offers that is not approved.
async fn held(def: &ServerDef, file: &PinFile, common: &Common) -> Result<Held, String> {
    let server = def.name.clone();
    let policy = def.pin.unwrap_or(common.pin);
    if policy == PinPolicy::Off {
        return Ok(Held {
            server,
            source: Source::Server,
            items: Vec::new(),
        });
    }
    let pending = file.server(&server).map(|s| &s.pending);
    if let Some(pending) = pending.filter(|p| !p.is_empty()) {
        let items = pending
            .iter()
            .filter_map(|(kind, name, offered)| {
                let approved = file.approved(&server, kind, name).cloned();
                held_item(kind, name, approved, offered)
            })
            .collect();
        return Ok(Held {
            server,
            source: Source::Gateway,
            items,
        });
    }
    // Nothing written by a gateway: the server itself is asked.
    let lists = read_server(def, common.timeout).await.map_err(|e| {
        format!(
            "{e} (no gateway has written what it holds back of `{server}`, so it was started from the config to read what it offers; fix its entry, or run this while serve runs it)"
        )
    })?;
    let mut items = Vec::new();
    for (kind, list) in DefinitionKind::ALL.into_iter().zip(lists) {
        // What serve approves on first sight is not held.
        if policy == PinPolicy::Tofu && !file.approved_any(&server, kind) {
            continue;
        }
        for (name, offered) in pins::offered(def, kind, &list) {
            let approved = file.approved(&server, kind, &name).cloned();
            items.extend(held_item(kind, &name, approved, &offered));
        }
    }
    Ok(Held {
        server,
        source: Source::Server,
        items,
    })
}

fn held_item(
    kind: DefinitionKind,
    name: &str,
    approved: Option<Value>,
    offered: &Value,
) -> Option<HeldItem> {
    let change = match &approved {
        Some(a) if a == offered => return None,
        Some(_) => Change::Changed,
        None => Change::New,
    };
    Some(HeldItem {
        kind,
        name: name.to_owned(),
        change,
        approved,
        offered: offered.clone(),
        digest: pins::digest(offered),
    })
}

/// One server's held definitions, each with its diff, and the command that
/// approves them.
fn write_held(out: &mut String, held: &Held) {
    if held.items.is_empty() {
        return;
    }
    let server = &held.server;
    let from = match held.source {
        Source::Gateway => "as a gateway holds it",
        Source::Server => "as the server offers it now",
    };
    for h in &held.items {
        let what = match h.change {
            Change::Changed => "changed since it was approved",
            Change::New => "is new (never approved)",
        };
        let _ = writeln!(
            out,
            "server `{server}`: {} `{}` {what} ({from}), digest {}",
            h.kind.noun(),
            h.name,
            h.digest
        );
        out.push_str(&pins::diff(h.approved.as_ref(), &h.offered));
        out.push('\n');
    }
    // Each as shown: one that changes again before this is run is refused.
    let names: Vec<String> = held
        .items
        .iter()
        .map(|h| shell_word(&format!("{}@{}", h.name, h.digest)))
        .collect();
    let _ = writeln!(
        out,
        "approve with: mcpvisor tools approve {} {}\n",
        shell_word(server),
        names.join(" ")
    );
}

/// `s` as one word of a shell command: as it is when no shell reads any
/// of its characters specially, else in single quotes. A resource
/// template's name is its URI template (`search://{?q}`, `...?a=1&b=2`):
/// pasted bare, a `&` or `?` would run something else.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.,:/@%+=".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Starts the server, reads its tools, prompts and resource templates,
/// stops it.
async fn read_server(def: &ServerDef, limit: Duration) -> Result<[Vec<Value>; 3], String> {
    let name = &def.name;
    if !def.is_remote() {
        crate::server::check_program(std::path::Path::new(&def.command), def.cwd.as_deref())
            .map_err(|e| format!("server `{name}`: {e}"))?;
    }
    let spec = ServerSpec {
        def: def.clone(),
        env_overrides: Vec::new(),
    };
    let cfg = mcpvisor_session::Config {
        stop: mcpvisor_process::StopTimeouts {
            after_close: Duration::from_millis(100),
            after_term: Duration::from_secs(2),
        },
        ..mcpvisor_session::Config::default()
    };
    let spawner =
        mcpvisor_runner::spawner(&spec, &cfg, mcpvisor_process::stderr::Passthrough::Discard);
    let root = def.cwd.clone().or_else(|| std::env::current_dir().ok());
    let conn = Connection::start(spawner, cfg, root);
    let read = async {
        let init = conn
            .initialize(
                def.init_timeout.unwrap_or(limit),
                def.auth_timeout.unwrap_or(limit),
            )
            .await
            .map_err(|e| e.to_string())?;
        let caps = &init.capabilities;
        let mut lists: [Vec<Value>; 3] = Default::default();
        for (i, (cap, method, key)) in [
            ("tools", "tools/list", "tools"),
            ("prompts", "prompts/list", "prompts"),
            ("resources", "resources/templates/list", "resourceTemplates"),
        ]
        .into_iter()
        .enumerate()
        {
            if !caps.get(cap).is_some_and(Value::is_object) {
                continue;
            }
            lists[i] = match conn.list_all(method, key, limit).await {
                Ok(items) => items,
                // A server may declare resources without templates.
                Err(mcpvisor_runner::CallError::Rpc { code: -32601, .. })
                    if key == "resourceTemplates" =>
                {
                    Vec::new()
                }
                Err(e) => return Err(e.to_string()),
            };
        }
        Ok(lists)
    };
    let lists = tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| Err(format!("it did not answer within {limit:?} (--timeout)")));
    conn.close().await;
    lists.map_err(|e| format!("server `{name}`: cannot read what it offers: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approve_command_quotes_a_name_a_shell_would_read() {
        assert_eq!(shell_word("add@0123456789ab"), "add@0123456789ab");
        assert_eq!(shell_word("my-server.v2"), "my-server.v2");
        assert_eq!(
            shell_word("https://x/{id}?a=1&b=2@0123456789ab"),
            "'https://x/{id}?a=1&b=2@0123456789ab'"
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
        let held = Held {
            server: "calc".into(),
            source: Source::Gateway,
            items: vec![HeldItem {
                kind: DefinitionKind::ResourceTemplate,
                name: "search://{?q}".into(),
                change: Change::New,
                approved: None,
                offered: serde_json::json!({"uriTemplate": "search://{?q}"}),
                digest: "0123456789ab".into(),
            }],
        };
        let mut out = String::new();
        write_held(&mut out, &held);
        assert!(
            out.contains(
                "approve with: mcpvisor tools approve calc 'search://{?q}@0123456789ab'\n"
            ),
            "{out}"
        );
    }
}
