//! `mcpvisor serve` and what an entry says of its server's tools: tool
//! overrides (`"tools": {"override": {...}}`) as a client sees them.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::{Proc, fake_worker, temp_dir};

/// `mcpvisor serve --config <config>`, with a list cache of its own.
fn serve(config: &Path, flags: &[&str]) -> Proc {
    let mut args: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ];
    args.extend(flags.iter().map(|s| s.to_string()));
    let cache = config.with_file_name("cache");
    Proc::spawn_with_env(
        &args,
        &[("MCPVISOR_CACHE_DIR", cache.display().to_string())],
    )
}

/// The gateway's `tools/list`, by exposed name.
fn tools(p: &mut Proc) -> serde_json::Map<String, Value> {
    let r = p.request(json!("list"), "tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tools/list result: {r}"))
        .iter()
        .map(|t| (t["name"].as_str().expect("a name").to_owned(), t.clone()))
        .collect()
}

/// What every override test expects: `echo` rewritten, `sleep` as the
/// server wrote it, and a warning for the tool the server does not list.
fn check_overrides(p: &mut Proc) {
    p.initialize();
    let tools = tools(p);
    let echo = &tools["fake__echo"];
    assert_eq!(echo["title"], "Say it back", "{echo}");
    assert_eq!(
        echo["description"], "Repeats the text it is given.",
        "{echo}"
    );
    assert_eq!(
        echo["annotations"],
        json!({"readOnlyHint": true, "idempotentHint": true}),
        "{echo}"
    );
    assert_eq!(echo["inputSchema"], json!({"type": "object"}), "{echo}");
    let sleep = &tools["fake__sleep"];
    assert!(
        sleep["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Waits ms milliseconds")),
        "{sleep}"
    );
    assert!(sleep.get("title").is_none(), "{sleep}");
    let line = p.wait_stderr("tools.override names tools the server does not list: no_such_tool");
    assert!(
        line.contains("fake"),
        "the warning names the server: {line}"
    );
    // The call still reaches the server under the tool's own name.
    let r = p.call(json!("call"), "fake__echo", json!({"text": "hi"}));
    assert_eq!(r["result"]["content"][0]["text"], r#"{"text":"hi"}"#, "{r}");
}

#[test]
fn a_json_entry_overrides_title_description_and_annotations() {
    let dir = temp_dir("trust-override-json");
    let config = dir.join("mcp.json");
    let entry = json!({
        "command": fake_worker(),
        "tools": {"override": {
            "echo": {
                "title": "Say it back",
                "description": "Repeats the text it is given.",
                "annotations": {"readOnlyHint": true, "idempotentHint": true}
            },
            "no_such_tool": {"description": "never listed"}
        }}
    });
    std::fs::write(&config, json!({"mcpServers": {"fake": entry}}).to_string()).expect("config");
    let mut p = serve(&config, &[]);
    check_overrides(&mut p);
}

#[test]
fn a_toml_entry_overrides_the_same() {
    let dir = temp_dir("trust-override-toml");
    let config = dir.join("config.toml");
    let text = format!(
        r#"[mcp_servers.fake]
command = {command:?}

[mcp_servers.fake.tools.override.echo]
title = "Say it back"
description = "Repeats the text it is given."
annotations = {{ readOnlyHint = true, idempotentHint = true }}

[mcp_servers.fake.tools.override.no_such_tool]
description = "never listed"
"#,
        command = fake_worker().display().to_string()
    );
    std::fs::write(&config, text).expect("config");
    let mut p = serve(&config, &[]);
    check_overrides(&mut p);
}

#[test]
fn a_bad_override_is_a_config_error_naming_the_entry() {
    let dir = temp_dir("trust-override-bad");
    let config = dir.join("mcp.json");
    let entry = json!({
        "command": fake_worker(),
        "tools": {"override": {"echo": {"description": ["not", "text"]}}}
    });
    std::fs::write(&config, json!({"mcpServers": {"fake": entry}}).to_string()).expect("config");
    let mut p = serve(&config, &[]);
    let status = p.wait_exit(support::WAIT);
    assert!(!status.success(), "{status:?}");
    let stderr = p.stderr_text();
    assert!(
        stderr.contains("server \"fake\": \"tools.override.echo.description\" must be a string"),
        "{stderr}"
    );
}
