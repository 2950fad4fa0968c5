use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const PROGRAM: &str = "/opt/mcpvisor/bin/mcpvisor";

/// Real-looking config files of every client, as `(file name, text)`.
const FIXTURES: [(&str, &str); 8] = [
    (
        "claude_desktop_config.json",
        include_str!("../../testdata/clients/claude_desktop_config.json"),
    ),
    (
        ".claude.json",
        include_str!("../../testdata/clients/claude.json"),
    ),
    (
        ".mcp.json",
        include_str!("../../testdata/clients/project.mcp.json"),
    ),
    (
        "mcp.json",
        include_str!("../../testdata/clients/cursor.mcp.json"),
    ),
    (
        "vscode-mcp.json",
        include_str!("../../testdata/clients/vscode.mcp.json"),
    ),
    (
        "settings.json",
        include_str!("../../testdata/clients/vscode.settings.json"),
    ),
    (
        "config.toml",
        include_str!("../../testdata/clients/codex.config.toml"),
    ),
    (
        "mcp_config.json",
        include_str!("../../testdata/clients/windsurf.mcp_config.json"),
    ),
];

fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

fn outcomes(change: &Change) -> Vec<(&str, &Outcome)> {
    change
        .entries
        .iter()
        .map(|e| (e.name.as_str(), &e.outcome))
        .collect()
}

#[test]
fn every_client_format_round_trips_byte_for_byte() -> Result {
    for (name, text) in FIXTURES {
        let dir = TempDir::new()?;
        let path = write_file(dir.path(), name, text)?;
        let before = server::load(&path)?;

        let change = wrap(&path, PROGRAM, None)?;
        assert!(change.changed(), "{name}: something to wrap");
        let wrapped = change.with(&Outcome::Wrapped);
        let backup = write(&change)?.ok_or("a backup")?;
        assert_eq!(std::fs::read_to_string(&backup)?, text, "{name}: backup");
        assert_eq!(
            backup.file_name().and_then(|n| n.to_str()),
            Some(format!("{name}.mcpvisor-1.bak").as_str())
        );

        // Every wrapped entry now runs mcpvisor around what it ran; the
        // others read exactly as before.
        let after = server::load(&path)?;
        for entry in before.entries() {
            let ConfigEntry::Stdio(old) = entry else {
                continue;
            };
            let new = after.get(&old.name)?;
            if wrapped.contains(&old.name.as_str()) {
                assert_eq!(new.command, PROGRAM, "{name}: {}", old.name);
                let mut args = vec!["run".to_owned(), "--".to_owned(), old.command.clone()];
                args.extend(old.args.iter().cloned());
                assert_eq!(new.args, args, "{name}: {}", old.name);
                assert_eq!(new.env, old.env);
                assert_eq!(new.cwd, old.cwd);
                assert_eq!(new.extra, old.extra);
            } else {
                assert_eq!(new, old, "{name}: {} untouched", old.name);
            }
        }

        // A second wrap finds nothing left to do.
        let again = wrap(&path, PROGRAM, None)?;
        assert!(!again.changed(), "{name}: wrapped twice");
        assert_eq!(
            again.with(&Outcome::RunsMcpvisor).len(),
            wrapped.len() + change.with(&Outcome::RunsMcpvisor).len()
        );

        let undo = unwrap(&path, None)?;
        assert_eq!(undo.with(&Outcome::Unwrapped), wrapped, "{name}");
        write(&undo)?;
        assert_eq!(std::fs::read_to_string(&path)?, text, "{name}: round trip");
    }
    Ok(())
}

#[test]
fn what_is_left_alone_and_why() -> Result {
    let dir = TempDir::new()?;
    let (name, text) = FIXTURES[0];
    let path = write_file(dir.path(), name, text)?;
    let change = wrap(&path, PROGRAM, None)?;
    assert_eq!(
        outcomes(&change),
        [
            ("filesystem", &Outcome::Wrapped),
            ("git", &Outcome::Wrapped),
            ("notes", &Outcome::Wrapped),
            ("empty-args", &Outcome::Wrapped),
            ("supervised", &Outcome::RunsMcpvisor),
            ("linear", &Outcome::Remote),
        ]
    );
    let (name, text) = FIXTURES[4];
    let path = write_file(dir.path(), name, text)?;
    let change = wrap(&path, PROGRAM, None)?;
    assert_eq!(
        outcomes(&change),
        [
            ("github", &Outcome::Wrapped),
            ("memory", &Outcome::Wrapped),
            ("remote", &Outcome::Remote),
            ("legacy", &Outcome::Remote),
        ]
    );
    Ok(())
}

#[test]
fn only_the_command_line_changes() -> Result {
    let dir = TempDir::new()?;
    let path = write_file(dir.path(), "config.toml", FIXTURES[6].1)?;
    let change = wrap(&path, PROGRAM, None)?;
    let expected = r#"# Codex settings
model = "gpt-5-codex"
approval_policy = "on-request"

[mcp_servers.docs]
# Pinned: the newest one breaks the search tool.
command = "/opt/mcpvisor/bin/mcpvisor"   # from npm
args = [
  "run", "--", "npx", "-y",
  "docs-mcp@1.2.3", # the version
]
startup_timeout_sec = 20

[mcp_servers.docs.env]
DOCS_TOKEN = "abc"

[mcp_servers.shell]
command = "/opt/mcpvisor/bin/mcpvisor"
args = ["run", "--", 'C:\tools\shell-mcp']
enabled = false

[mcp_servers.figma]
url = "https://mcp.figma.com/mcp"
bearer_token_env_var = "FIGMA_TOKEN"

[mcp_servers]
inline = { command = "/opt/mcpvisor/bin/mcpvisor", args = ["run", "--", "uvx", "mcp-server-time"], env = { TZ = "UTC" } }
bare = { command = "/opt/mcpvisor/bin/mcpvisor", args = ["run", "--", "my-server"] }

[profiles.fast]
model = "gpt-5-mini"
"#;
    assert_eq!(change.after, expected);

    let path = write_file(dir.path(), "mcp.json", FIXTURES[3].1)?;
    let change = wrap(&path, PROGRAM, Some(&["docs".to_owned()]))?;
    let expected = r#"// Cursor: servers for every project.
{
  "mcpServers": {
    /* the docs server, pinned */
    "docs": {
      "command": "/opt/mcpvisor/bin/mcpvisor", // from npm
      "args": ["run", "--", "npx", "-y", "docs-mcp@1.2.3"],
      "cwd": "/home/me/docs",
    },
    "search": {"url": "https://search.example.com/mcp", "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}},
    "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=Europe/Paris"]},
  },
}
"#;
    assert_eq!(change.after, expected);
    assert_eq!(outcomes(&change), [("docs", &Outcome::Wrapped)]);
    Ok(())
}

#[test]
fn unwrap_leaves_hand_wrapped_and_edited_entries() -> Result {
    let dir = TempDir::new()?;
    let text = r#"{
  "mcpServers": {
    "a": {"command": "node", "args": ["a.js"]},
    "b": {"command": "node", "args": ["b.js"]},
    "c": {"command": "node", "args": ["c.js"], "env": {"X": "1"}},
    "by-hand": {"command": "mcpvisor", "args": ["run", "--", "node", "h.js"]}
  }
}
"#;
    let path = write_file(dir.path(), "claude_desktop_config.json", text)?;
    write(&wrap(&path, PROGRAM, None)?)?;
    // Since: b's arguments and c's env are edited by hand.
    let wrapped = std::fs::read_to_string(&path)?;
    let edited = wrapped
        .replace(r#""b.js"]"#, r#""b.js", "--verbose"]"#)
        .replace(r#""X": "1""#, r#""X": "2""#);
    std::fs::write(&path, &edited)?;

    let undo = unwrap(&path, None)?;
    assert_eq!(
        outcomes(&undo),
        [
            ("a", &Outcome::Unwrapped),
            ("b", &Outcome::NotWrappedByWrap),
            ("c", &Outcome::Unwrapped),
            ("by-hand", &Outcome::NotWrappedByWrap),
        ]
    );
    write(&undo)?;
    let expected = format!(
        r#"{{
  "mcpServers": {{
    "a": {{"command": "node", "args": ["a.js"]}},
    "b": {{"command": {PROGRAM:?}, "args": ["run", "--", "node", "b.js", "--verbose"]}},
    "c": {{"command": "node", "args": ["c.js"], "env": {{"X": "2"}}}},
    "by-hand": {{"command": "mcpvisor", "args": ["run", "--", "node", "h.js"]}}
  }}
}}
"#
    );
    assert_eq!(std::fs::read_to_string(&path)?, expected);
    // Two backups now: before the wrap, before the unwrap.
    assert_eq!(backups(&path)?.len(), 2);
    Ok(())
}

#[test]
fn wrapping_in_two_steps_unwraps_in_one() -> Result {
    let dir = TempDir::new()?;
    let text = "[mcp_servers.a]\ncommand = \"a\"\n\n[mcp_servers.b]\ncommand = \"b\"\nargs = []\n";
    let path = write_file(dir.path(), "config.toml", text)?;
    write(&wrap(&path, PROGRAM, Some(&["a".to_owned()]))?)?;
    write(&wrap(&path, PROGRAM, None)?)?;
    let names: Vec<String> = backups(&path)?
        .iter()
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
        .collect();
    assert_eq!(
        names,
        ["config.toml.mcpvisor-2.bak", "config.toml.mcpvisor-1.bak"]
    );
    write(&unwrap(&path, Some(&["b".to_owned()]))?)?;
    write(&unwrap(&path, None)?)?;
    assert_eq!(std::fs::read_to_string(&path)?, text);
    Ok(())
}

#[test]
fn a_broken_file_is_refused_in_one_line_and_left_alone() -> Result {
    let dir = TempDir::new()?;
    let text = "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n    \"b\": {}\n  }\n}\n";
    let path = write_file(dir.path(), "mcp.json", text)?;
    let err = wrap(&path, PROGRAM, None)
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.starts_with(&format!("{}:4:", path.display())), "{err}");
    let toml = write_file(dir.path(), "config.toml", "[mcp_servers.a]\ncommand = \n")?;
    let err = unwrap(&toml, None)
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(err.contains("TOML syntax") && !err.contains('\n'), "{err}");
    assert!(backups(&path)?.is_empty());
    assert_eq!(std::fs::read_to_string(&path)?, text);
    Ok(())
}

#[test]
fn a_file_changed_meanwhile_is_not_overwritten() -> Result {
    let dir = TempDir::new()?;
    let path = write_file(
        dir.path(),
        "mcp.json",
        r#"{"mcpServers": {"a": {"command": "a"}}}"#,
    )?;
    let change = wrap(&path, PROGRAM, None)?;
    std::fs::write(&path, r#"{"mcpServers": {"a": {"command": "b"}}}"#)?;
    assert!(matches!(write(&change), Err(WrapError::Changed { .. })));
    assert!(backups(&path)?.is_empty());
    Ok(())
}

#[test]
fn backups_keep_the_files_mode_and_a_bom_is_kept() -> Result {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new()?;
    let text =
        "\u{feff}{\"mcpServers\": {\"a\": {\"command\": \"a\", \"env\": {\"TOKEN\": \"s\"}}}}";
    let path = write_file(dir.path(), "mcp.json", text)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let change = wrap(&path, PROGRAM, None)?;
    assert!(
        change
            .after
            .starts_with("\u{feff}{\"mcpServers\": {\"a\": {\"command\": \"/opt")
    );
    let backup = write(&change)?.ok_or("a backup")?;
    assert_eq!(
        std::fs::metadata(&backup)?.permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&path)?.permissions().mode() & 0o777,
        0o600
    );
    write(&unwrap(&path, None)?)?;
    assert_eq!(std::fs::read_to_string(&path)?, text);
    Ok(())
}
