use std::path::Path;

use super::*;

fn parsed(source: &str) -> Parsed {
    parse_source(source, Path::new("/base")).unwrap_or_else(|e| panic!("{source}: {e}"))
}

#[test]
fn a_command_line_is_split_like_a_shell() {
    let p = parsed("npx -y '@modelcontextprotocol/server-everything'");
    assert_eq!(p.def.command, "npx");
    assert_eq!(
        p.def.args,
        ["-y", "@modelcontextprotocol/server-everything"]
    );
    assert_eq!(p.name, "everything");
    assert_eq!(
        p.entry["args"],
        json!(["-y", "@modelcontextprotocol/server-everything"])
    );

    let p = parsed("API_KEY=abc python3 \"my server.py\" --flag");
    assert_eq!(p.def.command, "python3");
    assert_eq!(p.def.args, ["my server.py", "--flag"]);
    assert_eq!(p.def.env.get("API_KEY").map(String::as_str), Some("abc"));
    // The job shows env names, never values.
    assert!(!p.entry.is_empty());
    assert!(parse_source("npx 'unterminated", Path::new("/")).is_err());
    assert!(parse_source("   ", Path::new("/")).is_err());
}

#[test]
fn json_entries_and_snippets() {
    let p = parsed(r#"{"command": "uvx", "args": ["mcp-server-fetch"]}"#);
    assert_eq!(p.def.command, "uvx");
    assert_eq!(p.name, "fetch");

    let p = parsed(r#"{"mcpServers": {"github": {"command": "gh-mcp", "env": {"T": "x"}}}}"#);
    assert_eq!(p.name, "github");
    assert_eq!(p.def.command, "gh-mcp");

    let e = parse_source(
        r#"{"mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}}}"#,
        Path::new("/"),
    )
    .expect_err("two servers");
    assert!(e.contains("paste one"), "{e}");
    let e = parse_source(r#"{"args": ["x"]}"#, Path::new("/")).expect_err("no command");
    assert!(!e.contains("pasted"), "{e}");
    assert!(parse_source("{not json", Path::new("/")).is_err());
}

#[test]
fn toml_tables_and_bare_entries() {
    let p = parsed("[mcp_servers.docs]\ncommand = \"docs-mcp\"\nargs = [\"--stdio\"]\n");
    assert_eq!(p.name, "docs");
    assert_eq!(p.def.args, ["--stdio"]);

    let p = parsed("command = \"node\"\nargs = [\"build/index.js\"]\ncwd = \"srv\"\n");
    assert_eq!(p.def.command, "node");
    assert_eq!(p.name, "index");
    assert_eq!(p.def.cwd.as_deref(), Some(Path::new("/base/srv")));
    assert!(parse_source("[mcp_servers.x]\ncommand = ", Path::new("/")).is_err());
}

#[test]
fn suggested_names() {
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        suggest_name(
            "npx",
            &args(&["-y", "@modelcontextprotocol/server-github@1.2.0"])
        ),
        "github"
    );
    assert_eq!(
        suggest_name("uvx", &args(&["mcp-server-time==0.6"])),
        "time"
    );
    assert_eq!(
        suggest_name("/usr/bin/python3", &args(&["-u", "tools/weather.py"])),
        "weather"
    );
    assert_eq!(suggest_name("/opt/bin/sqlite-mcp", &[]), "sqlite");
    assert_eq!(suggest_name("npx", &[]), "npx");
    assert_eq!(suggest_name("a b!", &[]), "a-b");
}
