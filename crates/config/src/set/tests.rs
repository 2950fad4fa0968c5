use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Writes `text` to `dir/name` and returns the path.
fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

fn names(set: &ServerSet) -> Vec<&str> {
    set.servers().iter().map(|m| m.def.name.as_str()).collect()
}

fn load_err(paths: &[PathBuf], only: Option<&[String]>) -> String {
    match ServerSet::load(paths, only) {
        Ok(set) => panic!("expected an error, loaded {set:?}"),
        Err(err) => err.to_string(),
    }
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn config_order_is_file_order_then_entry_order() -> Result {
    let dir = TempDir::new()?;
    let claude = write(
        dir.path(),
        "claude.json",
        r#"{"mcpServers": {"zeta": {"command": "z"}, "alpha": {"command": "a"}}}"#,
    )?;
    let codex = write(
        dir.path(),
        "codex.toml",
        "[mcp_servers.mid]\ncommand = \"m\"\n[mcp_servers.beta]\ncommand = \"b\"\n",
    )?;
    let set = ServerSet::load(&[codex.clone(), claude.clone()], None)?;
    assert_eq!(names(&set), ["mid", "beta", "zeta", "alpha"]);
    assert_eq!(set.files(), [codex.clone(), claude.clone()]);
    let sources: Vec<&Path> = set.servers().iter().map(|m| m.source.as_path()).collect();
    assert_eq!(sources, [&codex, &codex, &claude, &claude]);
    assert_eq!(set.get("alpha").map(|m| m.def.command.as_str()), Some("a"));
    assert!(set.get("nope").is_none());
    assert!(set.skipped().is_empty());
    Ok(())
}

#[test]
fn identical_definitions_in_two_files_are_one_server() -> Result {
    let dir = TempDir::new()?;
    // Same server, written in two dialects, with fields mcpvisor ignores
    // differing.
    let a = write(
        dir.path(),
        "a.json",
        r#"{"mcpServers": {"git": {"command": "uvx", "args": ["mcp-server-git"], "autoApprove": ["x"]},
            "one": {"command": "1"}}}"#,
    )?;
    let b = write(
        dir.path(),
        "b.toml",
        "[mcp_servers.two]\ncommand = \"2\"\n[mcp_servers.git]\ncommand = \"uvx\"\nargs = [\"mcp-server-git\"]\n",
    )?;
    let set = ServerSet::load(&[a.clone(), b], None)?;
    assert_eq!(names(&set), ["git", "one", "two"]);
    assert_eq!(set.get("git").map(|m| m.source.clone()), Some(a));
    Ok(())
}

#[test]
fn different_definitions_are_an_error_unless_left_out() -> Result {
    let dir = TempDir::new()?;
    let a = write(
        dir.path(),
        "a.json",
        r#"{"mcpServers": {"git": {"command": "uvx", "args": ["mcp-server-git"]}, "x": {"command": "x"}}}"#,
    )?;
    let b = write(
        dir.path(),
        "b.json",
        r#"{"servers": {"git": {"command": "uvx", "args": ["mcp-server-git", "--repo", "."]}}}"#,
    )?;
    let paths = [a.clone(), b.clone()];
    assert_eq!(
        load_err(&paths, None),
        format!(
            "server \"git\" is defined differently in {} and {}; rename one or make them the same",
            a.display(),
            b.display()
        )
    );
    // Supervision overrides are part of the definition.
    let c = write(
        dir.path(),
        "c.json",
        r#"{"mcpServers": {"x": {"command": "x", "restart": "never"}}}"#,
    )?;
    assert!(matches!(
        ServerSet::load(&[a.clone(), c], None),
        Err(SetError::Conflict { name, .. }) if name == "x"
    ));

    let set = ServerSet::load(&paths, Some(&strings(&["x"])))?;
    assert_eq!(names(&set), ["x"]);
    Ok(())
}

#[test]
fn only_selects_in_config_order_and_refuses_unknown_names() -> Result {
    let dir = TempDir::new()?;
    let a = write(
        dir.path(),
        "a.json",
        r#"{"mcpServers": {"c": {"command": "c"}, "b": {"command": "b"}, "web": {"url": "https://x"}}}"#,
    )?;
    let set = ServerSet::load(std::slice::from_ref(&a), Some(&strings(&["b", "c"])))?;
    assert_eq!(names(&set), ["c", "b"], "config order, not the order asked");

    assert_eq!(
        load_err(
            std::slice::from_ref(&a),
            Some(&strings(&["zz", "b", "aa", "zz"]))
        ),
        format!(
            "no server named \"zz\", \"aa\" in {} (available: b, c, web)",
            a.display()
        )
    );
    // A remote entry is served like the others.
    let set = ServerSet::load(std::slice::from_ref(&a), Some(&strings(&["web"])))?;
    assert_eq!(names(&set), ["web"]);
    assert!(set.skipped().is_empty());

    let empty = write(dir.path(), "empty.json", r#"{"mcpServers": {}}"#)?;
    assert_eq!(
        load_err(std::slice::from_ref(&empty), Some(&strings(&["a"]))),
        format!(
            "no server named \"a\" in {} (the files define no servers)",
            empty.display()
        )
    );
    Ok(())
}

#[test]
fn disabled_servers_are_kept_and_marked() -> Result {
    let dir = TempDir::new()?;
    let a = write(
        dir.path(),
        "a.toml",
        "[mcp_servers.on]\ncommand = \"1\"\n[mcp_servers.off]\ncommand = \"0\"\nenabled = false\n",
    )?;
    let set = ServerSet::load(&[a], None)?;
    assert_eq!(names(&set), ["on", "off"]);
    assert!(set.get("off").is_some_and(|m| m.def.disabled));
    let enabled: Vec<&str> = set.enabled().map(|m| m.def.name.as_str()).collect();
    assert_eq!(enabled, ["on"]);
    Ok(())
}

#[test]
fn the_gateway_name_is_reserved() -> Result {
    let dir = TempDir::new()?;
    let a = write(
        dir.path(),
        "a.json",
        r#"{"mcpServers": {"ok": {"command": "x"}, "mcpvisor": {"command": "y"}}}"#,
    )?;
    assert_eq!(
        load_err(std::slice::from_ref(&a), None),
        format!(
            "{}: server \"mcpvisor\": the name is reserved for mcpvisor's own tools; rename the entry",
            a.display()
        )
    );
    // Left out, it is no one's business.
    let set = ServerSet::load(std::slice::from_ref(&a), Some(&strings(&["ok"])))?;
    assert_eq!(names(&set), ["ok"]);
    // An entry of a transport we do not serve, of that name, is skipped.
    let b = write(
        dir.path(),
        "b.json",
        r#"{"mcpServers": {"mcpvisor": {"type": "ws", "url": "wss://x/mcp"}}}"#,
    )?;
    let set = ServerSet::load(&[b], None)?;
    assert_eq!(set.skipped().len(), 1);
    Ok(())
}

#[test]
fn an_entry_that_starts_this_gateway_is_skipped() -> Result {
    let dir = TempDir::new()?;
    let other = write(dir.path(), "other.json", r#"{"mcpServers": {}}"#)?;
    std::fs::create_dir(dir.path().join("sub"))?;
    // Claude Desktop's file, with the gateway registered in it, read by
    // that same gateway: every spelling of "this file" is caught.
    let text = format!(
        r#"{{"mcpServers": {{
            "mcpvisor": {{"command": "mcpvisor", "args": ["serve", "--config", {claude:?}]}},
            "gw2": {{"command": "/usr/local/bin/mcpvisor", "args": ["-q", "serve", "--config=claude.json"], "cwd": "."}},
            "gw3": {{"command": "mcpvisor", "args": ["serve", "--config", "../claude.json"], "cwd": "sub"}},
            "nested": {{"command": "mcpvisor", "args": ["serve", "--config", {other:?}]}},
            "runner": {{"command": "mcpvisor", "args": ["run", "--config", {claude:?}, "x"]}},
            "tool": {{"command": "npx", "args": ["serve", "--config", {claude:?}]}}
        }}}}"#,
        claude = dir.path().join("claude.json").display().to_string(),
        other = other.display().to_string(),
    );
    let claude = write(dir.path(), "claude.json", &text)?;
    let set = ServerSet::load(std::slice::from_ref(&claude), None)?;
    assert_eq!(names(&set), ["nested", "runner", "tool"]);
    let real = std::fs::canonicalize(&claude)?;
    let skipped: Vec<(&str, &SkipReason)> = set
        .skipped()
        .iter()
        .map(|s| (s.name.as_str(), &s.reason))
        .collect();
    let reason = SkipReason::SelfReference {
        config: real.clone(),
    };
    assert_eq!(
        skipped,
        [("mcpvisor", &reason), ("gw2", &reason), ("gw3", &reason)]
    );
    assert_eq!(
        set.skipped()[0].to_string(),
        format!(
            "{}: server \"mcpvisor\" skipped: it runs this gateway itself (mcpvisor serve --config {})",
            claude.display(),
            real.display()
        )
    );

    // Served alongside the other file, "nested" is a loop too.
    let set = ServerSet::load(&[claude, other], None)?;
    assert_eq!(names(&set), ["runner", "tool"]);
    Ok(())
}

#[test]
fn remote_entries_are_skipped_with_a_reason() -> Result {
    let dir = TempDir::new()?;
    let a = write(
        dir.path(),
        "mcp.json",
        r#"{"servers": {"linear": {"type": "ws", "url": "wss://mcp.linear.app/ws"},
            "local": {"command": "l"}, "api": {"url": "https://api.example.com/mcp"},
            "old": {"type": "sse", "url": "https://old.example.com/sse"}}}"#,
    )?;
    let set = ServerSet::load(std::slice::from_ref(&a), None)?;
    assert_eq!(names(&set), ["local", "api", "old"]);
    let messages: Vec<String> = set.skipped().iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [format!(
            "{}: server \"linear\" skipped: it uses the \"ws\" transport; mcpvisor serves stdio, Streamable HTTP and HTTP+SSE servers only",
            a.display()
        )]
    );
    // An entry of a transport we do not serve and a stdio one of the same
    // name do not conflict: only the stdio one can be served.
    let b = write(
        dir.path(),
        "b.json",
        r#"{"mcpServers": {"linear": {"command": "linear-mcp"}}}"#,
    )?;
    let set = ServerSet::load(&[a, b.clone()], None)?;
    assert_eq!(names(&set), ["local", "api", "old", "linear"]);
    assert_eq!(set.get("linear").map(|m| m.source.clone()), Some(b));
    Ok(())
}

#[test]
fn files_are_read_once_and_errors_name_them() -> Result {
    let dir = TempDir::new()?;
    std::fs::create_dir(dir.path().join("d"))?;
    let a = write(
        dir.path(),
        "a.json",
        r#"{"mcpServers": {"x": {"command": "x"}}}"#,
    )?;
    let again = dir.path().join("d").join("..").join("a.json");
    let set = ServerSet::load(&[a.clone(), again], None)?;
    assert_eq!(set.files(), std::slice::from_ref(&a));
    assert_eq!(names(&set), ["x"]);

    assert_eq!(load_err(&[], None), "no config file given");
    let missing = dir.path().join("missing.json");
    assert_eq!(
        load_err(&[a, missing.clone()], None),
        format!(
            "{}: cannot read: No such file or directory (os error 2)",
            missing.display()
        )
    );
    let bad = write(
        dir.path(),
        "bad.json",
        r#"{"mcpServers": {"x": {"command": "x", "start": "later"}}}"#,
    )?;
    assert_eq!(
        load_err(std::slice::from_ref(&bad), None),
        format!(
            "{}: server \"x\": \"start\" must be \"eager\" or \"lazy\"",
            bad.display()
        )
    );
    Ok(())
}
