//! `mcpvisor wrap` and `unwrap` through the real binary, on the usual
//! places of a home folder made for the test.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::{Proc, WAIT, fake_worker, mcpvisor, temp_dir};

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../config/testdata/clients")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs mcpvisor with `args` in `home` (as `HOME` and the current folder).
fn mcpvisor_in(home: &Path, args: &[&str]) -> Output {
    Command::new(mcpvisor())
        .args(args)
        .current_dir(home)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODEX_HOME")
        .output()
        .expect("run mcpvisor")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A home folder holding Cursor's, Codex's and Claude Code's files, and
/// VS Code settings with no servers.
fn home(name: &str) -> (PathBuf, Vec<(PathBuf, String)>) {
    let home = temp_dir(name);
    let files = [
        (".cursor/mcp.json", fixture("cursor.mcp.json")),
        (".codex/config.toml", fixture("codex.config.toml")),
        (".claude.json", fixture("claude.json")),
        (
            ".config/Code/User/settings.json",
            "{\"editor.fontSize\": 12}\n".to_owned(),
        ),
    ];
    let mut written = Vec::new();
    for (path, text) in files {
        let path = home.join(path);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
        std::fs::write(&path, &text).expect("write");
        written.push((path, text));
    }
    (home, written)
}

fn backups_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".bak"))
        .collect();
    names.sort();
    names
}

#[test]
fn wrap_and_unwrap_every_usual_file_round_trip() {
    let (home, files) = home("wrap-home");
    let dry = mcpvisor_in(&home, &["wrap", "--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    let out = text(&dry.stdout);
    assert!(
        out.contains("would wrap docs, time; left alone: search (remote)"),
        "{out}"
    );
    assert!(
        out.contains("would wrap docs, shell, inline, bare; left alone: figma (remote)"),
        "{out}"
    );
    assert!(out.contains("-command = \"npx\"   # from npm\n"), "{out}");
    assert!(!out.contains("settings.json"), "no servers there: {out}");
    for (path, original) in &files {
        assert_eq!(&std::fs::read_to_string(path).expect("read"), original);
    }
    assert!(backups_in(&home.join(".cursor")).is_empty());

    let wrap = mcpvisor_in(&home, &["wrap"]);
    assert!(wrap.status.success(), "{}", text(&wrap.stderr));
    let out = text(&wrap.stdout);
    assert!(
        out.contains(
            ".claude.json: wrapped playwright; left alone: context7 (remote), sentry (remote)"
        ),
        "{out}"
    );
    assert!(out.contains("backup: "), "{out}");
    assert_eq!(
        backups_in(&home.join(".cursor")),
        ["mcp.json.mcpvisor-1.bak"]
    );
    let cursor: String = std::fs::read_to_string(&files[0].0).expect("read");
    let exe = std::fs::canonicalize(mcpvisor()).expect("canonical");
    assert!(
        cursor.contains(&format!(
            "\"command\": {:?}, // from npm",
            exe.display().to_string()
        )),
        "{cursor}"
    );

    let unwrap = mcpvisor_in(&home, &["unwrap", "--client", "cursor,codex,claude-code"]);
    assert!(unwrap.status.success(), "{}", text(&unwrap.stderr));
    for (path, original) in &files {
        assert_eq!(
            &std::fs::read_to_string(path).expect("read"),
            original,
            "{}",
            path.display()
        );
    }
}

#[test]
fn a_broken_file_refuses_the_whole_command() {
    let (home, files) = home("wrap-broken");
    let windsurf = home.join(".codeium/windsurf/mcp_config.json");
    std::fs::create_dir_all(windsurf.parent().expect("folder")).expect("mkdir");
    std::fs::write(&windsurf, "{\"mcpServers\": {\"a\": {\"command\": \"x\"}\n").expect("write");
    let out = mcpvisor_in(&home, &["wrap"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(
        err.starts_with(&format!("mcpvisor: {}:2:", windsurf.display())),
        "{err}"
    );
    assert!(err.ends_with("mcpvisor: nothing was changed\n"), "{err}");
    for (path, original) in &files {
        assert_eq!(&std::fs::read_to_string(path).expect("read"), original);
    }

    // A name that no file has is refused too.
    std::fs::remove_file(&windsurf).expect("rm");
    let out = mcpvisor_in(&home, &["wrap", "--only", "docs,nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--only: no server named nope in "),
        "{}",
        text(&out.stderr)
    );
    // And so is a home with nothing in it.
    let empty = temp_dir("wrap-empty");
    let out = mcpvisor_in(&empty, &["unwrap"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no client config with servers found"));
}

#[test]
fn a_wrapped_entry_starts_and_answers() {
    let dir = temp_dir("wrap-runs");
    let config = dir.join("claude_desktop_config.json");
    let worker = fake_worker().display().to_string();
    std::fs::write(
        &config,
        serde_json::to_string_pretty(&json!({
            "mcpServers": {"fake": {"command": worker, "args": ["--strict"], "env": {"FAKE": "1"}}}
        }))
        .expect("json"),
    )
    .expect("write");
    let config_arg = config.display().to_string();
    let out = mcpvisor_in(&dir, &["wrap", "--config", &config_arg]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // What a client reads from the file: the command and its arguments.
    let wrapped: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("read")).expect("json");
    let entry = &wrapped["mcpServers"]["fake"];
    let command = entry["command"].as_str().expect("command");
    assert_eq!(
        Path::new(command),
        std::fs::canonicalize(mcpvisor()).expect("exe")
    );
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).expect("args");
    assert_eq!(args, ["run", "--", worker.as_str(), "--strict"]);
    let mut p = Proc::spawn(&args);
    p.initialize();
    let first = p.whoami(json!(1));
    assert_eq!(first["generation"], 1);
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
}
