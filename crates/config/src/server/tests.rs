use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

fn parse_at(path: &str, text: &str) -> Result<ConfigFile, ConfigError> {
    parse(text, Path::new(path))
}

/// The one-line message for a file that must not load.
fn error(path: &str, text: &str) -> String {
    match parse_at(path, text) {
        Ok(file) => panic!("expected an error, loaded {file:?}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn claude_desktop_file() -> Result<(), ConfigError> {
    let file = parse_at(
        "/home/u/.config/Claude/claude_desktop_config.json",
        r#"{
          "mcpServers": {
            "github": {
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-github"],
              "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secretvalue"},
              "init_timeout": "45s",
              "auth_timeout": 600,
              "tools": {"allow": ["search_repositories", "get_issue"], "deny": ["get_issue"]},
              "autoApprove": ["search_repositories"]
            },
            "files": {
              "command": "uvx",
              "args": ["mcp-server-filesystem", "."],
              "cwd": "projects/site",
              "env_file": "../secrets.env",
              "env_keys": ["API_KEY"],
              "disabled": true
            }
          },
          "globalShortcut": "Ctrl+Space"
        }"#,
    )?;
    assert_eq!(file.dialect(), Dialect::McpServers);
    let names: Vec<&str> = file.servers().map(|def| def.name.as_str()).collect();
    assert_eq!(names, ["files", "github"]);

    let github = file.get("github")?;
    assert_eq!(github.command, "npx");
    assert_eq!(github.args, ["-y", "@modelcontextprotocol/server-github"]);
    assert_eq!(
        github
            .env
            .get("GITHUB_PERSONAL_ACCESS_TOKEN")
            .map(String::as_str),
        Some("ghp_secretvalue")
    );
    assert_eq!(github.init_timeout, Some(Duration::from_secs(45)));
    assert_eq!(github.auth_timeout, Some(Duration::from_secs(600)));
    assert!(github.tools.permits("search_repositories"));
    assert!(!github.tools.permits("get_issue"), "deny wins over allow");
    assert!(!github.tools.permits("create_issue"), "not in allow");
    assert_eq!(
        github.extra.get("autoApprove"),
        Some(&serde_json::json!(["search_repositories"]))
    );
    assert!(!github.disabled);
    assert_eq!(github.cwd, None);

    let files = file.get("files")?;
    assert!(files.disabled);
    assert_eq!(
        files.cwd.as_deref(),
        Some(Path::new("/home/u/.config/Claude/projects/site"))
    );
    assert_eq!(
        files.env_file.as_deref(),
        Some(Path::new("/home/u/.config/Claude/../secrets.env"))
    );
    assert_eq!(files.env_keys, ["API_KEY"]);
    assert!(files.tools.is_open());
    Ok(())
}

#[test]
fn debug_output_hides_env_values() -> Result<(), ConfigError> {
    let file = parse_at(
        "c.json",
        r#"{"mcpServers": {"a": {"command": "x", "env": {"TOKEN": "hunter2"}, "headers": "hunter3"},
            "r": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer hunter4"}}}}"#,
    )?;
    let debug = format!("{file:?}");
    assert!(debug.contains("TOKEN"), "{debug}");
    for value in ["hunter2", "hunter3", "hunter4"] {
        assert!(!debug.contains(value), "{debug}");
    }
    Ok(())
}

#[test]
fn vscode_file_with_comments_and_remote_entries() -> Result<(), ConfigError> {
    let file = parse_at(
        "/srv/proj/.vscode/mcp.json",
        r#"{
          // Servers for this workspace.
          "inputs": [],
          "servers": {
            "memory": {
              "type": "stdio",
              "command": "npx",
              "args": ["-y", "@modelcontextprotocol/server-memory",],
              "envFile": "${workspaceFolder}/.env", /* kept literally */
            },
            "remote": {"type": "http", "url": "https://api.example.com/mcp"},
            "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
            "either": {"url": "https://new-or-old.example.com/mcp"},
            "socket": {"type": "ws", "url": "wss://example.com/mcp"},
          },
        }"#,
    )?;
    assert_eq!(file.dialect(), Dialect::VsCode);
    let memory = file.get("memory")?;
    assert_eq!(memory.args, ["-y", "@modelcontextprotocol/server-memory"]);
    assert_eq!(
        memory.env_file.as_deref(),
        Some(Path::new("/srv/proj/.vscode/${workspaceFolder}/.env"))
    );
    let unsupported: Vec<(&str, &str)> = file
        .unsupported()
        .map(|s| (s.name.as_str(), s.transport.as_str()))
        .collect();
    assert_eq!(unsupported, [("socket", "ws")]);
    let remote = file.get("remote")?;
    assert_eq!(remote.url.as_deref(), Some("https://api.example.com/mcp"));
    assert!(remote.command.is_empty() && remote.is_remote());
    assert_eq!(remote.transport, RemoteTransport::Http);
    let legacy = file.get("legacy")?;
    assert_eq!(legacy.url.as_deref(), Some("https://old.example.com/sse"));
    assert!(legacy.is_remote());
    assert_eq!(legacy.transport, RemoteTransport::Sse);
    assert_eq!(file.get("either")?.transport, RemoteTransport::Auto);
    assert_eq!(memory.transport, RemoteTransport::Auto, "unused for stdio");
    assert_eq!(
        file.get("socket").map(drop).map_err(|e| e.to_string()),
        Err(
            "/srv/proj/.vscode/mcp.json: server \"socket\" uses the \"ws\" transport; \
             mcpvisor runs stdio, Streamable HTTP and HTTP+SSE servers only"
                .to_owned()
        )
    );
    Ok(())
}

#[test]
fn vscode_user_settings_nest_servers_under_mcp() -> Result<(), ConfigError> {
    let file = parse_at(
        "settings.json",
        r#"{"editor.fontSize": 14, "mcp": {"servers": {"t": {"command": "t"}}}}"#,
    )?;
    assert_eq!(file.dialect(), Dialect::VsCode);
    assert_eq!(file.get("t")?.command, "t");
    Ok(())
}

#[test]
fn url_entries_are_remote_servers_with_headers() -> Result<(), ConfigError> {
    let file = parse_at(
        "/cfg/mcp.json",
        r#"{"mcpServers": {
            "linear": {"url": "https://mcp.linear.app/mcp",
                       "headers": {"Authorization": "Bearer ${LINEAR_TOKEN}"},
                       "env_file": "linear.env", "request_timeout": "30s"},
            "typed": {"type": "streamable-http", "url": "http://127.0.0.1:8808/mcp"}}}"#,
    )?;
    assert_eq!(file.unsupported().count(), 0);
    let linear = file.get("linear")?;
    assert_eq!(linear.url.as_deref(), Some("https://mcp.linear.app/mcp"));
    assert_eq!(
        linear.headers.get("Authorization").map(String::as_str),
        Some("Bearer ${LINEAR_TOKEN}")
    );
    assert_eq!(
        linear.env_file.as_deref(),
        Some(Path::new("/cfg/linear.env"))
    );
    assert!(file.get("typed")?.is_remote());

    let codex = parse_at(
        "config.toml",
        r#"
[mcp_servers.gh]
url = "https://api.example.com/mcp"
bearer_token_env_var = "GH_TOKEN"
env_http_headers = { "X-Team" = "TEAM" }
"#,
    )?;
    let gh = codex.get("gh")?;
    assert_eq!(
        gh.headers.get("Authorization").map(String::as_str),
        Some("Bearer ${GH_TOKEN}")
    );
    assert_eq!(
        gh.headers.get("X-Team").map(String::as_str),
        Some("${TEAM}")
    );

    for (entry, message) in [
        (
            r#"{"url": "ftp://x"}"#,
            "\"url\" must start with http:// or https://",
        ),
        (r#"{"url": "https:///mcp"}"#, "\"url\" has no host"),
        (r#"{"type": "http"}"#, "\"url\" is missing"),
        (
            r#"{"type": "http", "url": "http://x", "command": "y"}"#,
            "a remote server (\"url\") has no \"command\"",
        ),
        (
            r#"{"url": "http://x", "headers": {"Bad Name": "v"}}"#,
            "header name \"Bad Name\" is not a valid HTTP header name",
        ),
    ] {
        let text = format!(r#"{{"mcpServers": {{"r": {entry}}}}}"#);
        let err = parse_at("m.json", &text)
            .map(drop)
            .map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err(format!("m.json: server \"r\": {message}")),
            "{entry}"
        );
    }
    Ok(())
}

#[test]
fn codex_toml_file() -> Result<(), ConfigError> {
    let file = parse_at(
        "/home/u/.codex/config.toml",
        r#"
model = "o3"

[mcp_servers.docs]
command = "docs-server"
args = ["--port", "4000"]
cwd = "/srv/docs"
startup_timeout_sec = 20.5
tool_timeout_sec = 60
disabled_tools = ["delete_page"]

[mcp_servers.docs.env]
API_KEY = "abc"

[mcp_servers.off]
command = "off"
enabled = false
startup_timeout_ms = 1500
enabled_tools = ["one"]

[mcp_servers.ours]
command = "ours"
init_timeout = "2m"
startup_timeout_sec = 5
"#,
    )?;
    assert_eq!(file.dialect(), Dialect::Codex);
    let docs = file.get("docs")?;
    assert_eq!(docs.args, ["--port", "4000"]);
    assert_eq!(docs.cwd.as_deref(), Some(Path::new("/srv/docs")));
    assert_eq!(docs.env.get("API_KEY").map(String::as_str), Some("abc"));
    assert_eq!(docs.init_timeout, Some(Duration::from_millis(20_500)));
    assert_eq!(
        docs.supervision.request_timeout,
        Some(Duration::from_secs(60)),
        "Codex's tool_timeout_sec"
    );
    assert_eq!(docs.extra.get("tool_timeout_sec"), None);
    assert!(!docs.tools.permits("delete_page"));
    assert!(docs.tools.permits("read_page"));
    assert!(!docs.disabled);

    let off = file.get("off")?;
    assert!(off.disabled);
    assert_eq!(off.init_timeout, Some(Duration::from_millis(1500)));
    assert_eq!(off.tools.allow.as_deref(), Some(&["one".to_owned()][..]));

    // Our own field wins over Codex's.
    assert_eq!(
        file.get("ours")?.init_timeout,
        Some(Duration::from_secs(120))
    );
    Ok(())
}

#[test]
fn relative_config_path_resolves_against_its_folder() -> Result<(), ConfigError> {
    let file = parse_at(
        "config.json",
        r#"{"mcpServers": {"a": {"command": "a", "cwd": "sub"}}}"#,
    )?;
    assert_eq!(file.get("a")?.cwd, Some(PathBuf::from("sub")));
    let file = parse_at(
        "conf/x.json",
        r#"{"mcpServers": {"a": {"command": "a", "cwd": "sub"}}}"#,
    )?;
    assert_eq!(file.get("a")?.cwd, Some(PathBuf::from("conf/sub")));
    Ok(())
}

#[test]
fn format_is_sniffed_without_an_extension() -> Result<(), ConfigError> {
    let json = parse_at("mcp", r#"{"mcpServers": {"a": {"command": "a"}}}"#)?;
    assert_eq!(json.dialect(), Dialect::McpServers);
    let toml = parse_at("mcp", "[mcp_servers.a]\ncommand = \"a\"\n")?;
    assert_eq!(toml.dialect(), Dialect::Codex);
    Ok(())
}

#[test]
fn syntax_errors_give_line_and_column() {
    assert_eq!(
        error(
            "config.json",
            "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n    \"b\": {}\n  }\n}"
        ),
        "config.json:4:5: expected `,` or `}` (JSON syntax)"
    );
    assert_eq!(
        error("config.json", "{\"mcpServers\": {\n"),
        "config.json:2:1: EOF while parsing an object (JSON syntax)"
    );
    assert_eq!(
        error("config.toml", "[mcp_servers.a]\ncommand = \"x\nargs = []\n"),
        "config.toml:2:13: invalid basic string, expected `\"` (TOML syntax)"
    );
    assert_eq!(
        error(
            "config.toml",
            "[mcp_servers.a]\ncommand = \"x\"\ncommand = \"y\"\n"
        ),
        "config.toml:3:1: duplicate key (TOML syntax)"
    );
}

#[test]
fn layout_errors() {
    assert_eq!(
        error("config.json", r#"{"servers_typo": {}}"#),
        "config.json: no \"mcpServers\" or \"servers\" object found"
    );
    assert_eq!(
        error("config.toml", "[servers.a]\ncommand = \"a\"\n"),
        "config.toml: no [mcp_servers] table found"
    );
    assert_eq!(
        error("config.json", "[1, 2]"),
        "config.json: the top level must be an object"
    );
    assert_eq!(
        error("config.json", r#"{"mcpServers": []}"#),
        "config.json: \"mcpServers\" must be an object"
    );
    assert_eq!(
        error("config.toml", "mcp_servers = 3\n"),
        "config.toml: \"mcp_servers\" must be a table"
    );
}

#[test]
fn entry_errors_name_the_server_and_field() {
    let cases = [
        (r#"{"a": 1}"#, "server \"a\": the entry must be an object"),
        (
            r#"{"github": {"args": []}}"#,
            "server \"github\": \"command\" is missing",
        ),
        (
            r#"{"github": {"command": 7}}"#,
            "server \"github\": \"command\" must be a string",
        ),
        (
            r#"{"a": {"command": " "}}"#,
            "server \"a\": \"command\" must not be empty",
        ),
        (
            r#"{"a": {"command": "x", "args": "-y"}}"#,
            "server \"a\": \"args\" must be a list of strings",
        ),
        (
            r#"{"a": {"command": "x", "args": ["-y", 3]}}"#,
            "server \"a\": \"args[1]\" must be a string",
        ),
        (
            r#"{"a": {"command": "x", "env": ["A=1"]}}"#,
            "server \"a\": \"env\" must be an object",
        ),
        (
            r#"{"a": {"command": "x", "env": {"PORT": 80}}}"#,
            "server \"a\": \"env.PORT\" must be a string",
        ),
        (
            r#"{"a": {"command": "x", "cwd": false}}"#,
            "server \"a\": \"cwd\" must be a string",
        ),
        (
            r#"{"a": {"command": "x", "cwd": ""}}"#,
            "server \"a\": \"cwd\" must not be empty",
        ),
        (
            r#"{"a": {"command": "x", "disabled": "yes"}}"#,
            "server \"a\": \"disabled\" must be true or false",
        ),
        (
            r#"{"a": {"command": "x", "type": 1}}"#,
            "server \"a\": \"type\" must be a string",
        ),
        (
            r#"{"a": {"command": "x", "init_timeout": "30"}}"#,
            "server \"a\": \"init_timeout\": expected a duration like \"30s\", \"5m\" or \"1500ms\"",
        ),
        (
            r#"{"a": {"command": "x", "init_timeout": "3d"}}"#,
            "server \"a\": \"init_timeout\": unknown unit \"d\" (use ms, s, m or h)",
        ),
        (
            r#"{"a": {"command": "x", "auth_timeout": 0}}"#,
            "server \"a\": \"auth_timeout\" must be greater than zero",
        ),
        (
            r#"{"a": {"command": "x", "auth_timeout": -1}}"#,
            "server \"a\": \"auth_timeout\" must be a positive number of seconds",
        ),
        (
            r#"{"a": {"command": "x", "init_timeout": [30]}}"#,
            "server \"a\": \"init_timeout\" must be a number of seconds or a string like \"30s\"",
        ),
        (
            r#"{"a": {"command": "x", "tools": ["x"]}}"#,
            "server \"a\": \"tools\" must be an object with \"allow\" and/or \"deny\" lists",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"alow": ["x"]}}}"#,
            "server \"a\": \"tools\" has unknown key \"alow\" (expected \"allow\", \"deny\" or \"override\")",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"override": ["x"]}}}"#,
            "server \"a\": \"tools.override\" must be an object of tool names to {title, description, annotations}",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"override": {"echo": "hi"}}}}"#,
            "server \"a\": \"tools.override.echo\" must be an object with \"title\", \"description\" and/or \"annotations\"",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"override": {"echo": {"description": 3}}}}}"#,
            "server \"a\": \"tools.override.echo.description\" must be a string",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"override": {"echo": {"annotations": true}}}}}"#,
            "server \"a\": \"tools.override.echo.annotations\" must be an object",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"override": {"echo": {"inputSchema": {}}}}}}"#,
            "server \"a\": \"tools.override.echo\" has unknown key \"inputSchema\" (expected \"title\", \"description\" or \"annotations\"; the name, the schemas and the rest stay the server's)",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"deny": "x"}}}"#,
            "server \"a\": \"tools.deny\" must be a list of strings",
        ),
        (
            r#"{"a": {"command": "x", "tools": {"allow": [1]}}}"#,
            "server \"a\": \"tools.allow[0]\" must be a string",
        ),
        (
            r#"{"a": {"command": "x", "env_keys": ["K"]}}"#,
            "server \"a\": \"env_keys\" needs \"env_file\" to say where the keys are",
        ),
        (
            r#"{"a": {"command": "x", "env_file": "a", "envFile": "b"}}"#,
            "server \"a\": both \"env_file\" and \"envFile\" are set",
        ),
    ];
    for (servers, expected) in cases {
        let text = format!("{{\"mcpServers\": {servers}}}");
        assert_eq!(
            error("config.json", &text),
            format!("config.json: {expected}")
        );
    }
}

#[test]
fn tool_overrides_in_json_and_toml() -> Result<(), ConfigError> {
    let json = parse_at(
        "c.json",
        r#"{"mcpServers": {"a": {"command": "x", "tools": {"deny": ["rm"], "override": {
            "echo": {"title": "Echo", "description": "Says it back.", "annotations": {"readOnlyHint": true, "openWorldHint": null}}
        }}}}}"#,
    )?;
    let toml = parse_at(
        "c.toml",
        "[mcp_servers.a]\ncommand = \"x\"\n[mcp_servers.a.tools]\ndeny = [\"rm\"]\n\
         [mcp_servers.a.tools.override.echo]\ntitle = \"Echo\"\ndescription = \"Says it back.\"\n\
         [mcp_servers.a.tools.override.echo.annotations]\nreadOnlyHint = true\n",
    )?;
    for file in [&json, &toml] {
        let tools = &file.get("a")?.tools;
        assert!(!tools.permits("rm"));
        let echo = &tools.overrides["echo"];
        assert_eq!(echo.title.as_deref(), Some("Echo"));
        assert_eq!(echo.description.as_deref(), Some("Says it back."));
        assert_eq!(echo.annotations["readOnlyHint"], true);
    }
    let mut tool = serde_json::json!({
        "name": "echo", "description": "old", "inputSchema": {"type": "object"},
        "annotations": {"openWorldHint": true, "destructiveHint": false}
    });
    let echo = &json.get("a")?.tools.overrides["echo"];
    echo.apply(tool.as_object_mut().expect("an object"));
    assert_eq!(
        tool,
        serde_json::json!({
            "name": "echo", "title": "Echo", "description": "Says it back.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "destructiveHint": false}
        }),
        "title and description replaced, hints merged, a null hint removed"
    );
    let mut bare = serde_json::json!({"name": "echo", "annotations": "junk"});
    echo.apply(bare.as_object_mut().expect("an object"));
    assert_eq!(
        bare["annotations"],
        serde_json::json!({"readOnlyHint": true})
    );
    Ok(())
}

#[test]
fn codex_entry_errors() {
    assert_eq!(
        error(
            "c.toml",
            "[mcp_servers.a]\ncommand = \"x\"\nenv = [\"A\"]\n"
        ),
        "c.toml: server \"a\": \"env\" must be a table"
    );
    assert_eq!(
        error(
            "c.toml",
            "[mcp_servers.a]\ncommand = \"x\"\nstartup_timeout_ms = 1.5\n"
        ),
        "c.toml: server \"a\": \"startup_timeout_ms\" must be a whole number of milliseconds"
    );
    assert_eq!(
        error("c.toml", "[mcp_servers.a]\ncommand = \"x\"\nenabled = 0\n"),
        "c.toml: server \"a\": \"enabled\" must be true or false"
    );
}

#[test]
fn errors_never_quote_env_values() {
    let message = error(
        "c.json",
        r#"{"mcpServers": {"a": {"command": "x", "env": {"TOKEN": "sk-live-123", "N": 5}}}}"#,
    );
    assert!(!message.contains("sk-live-123"), "{message}");
}

#[test]
fn unknown_server_lists_the_names() -> Result<(), ConfigError> {
    let file = parse_at(
        "config.json",
        r#"{"mcpServers": {"github": {"command": "g"}, "files": {"command": "f"}, "web": {"type": "sse", "url": "https://x/sse"}}}"#,
    )?;
    let err = file.get("gh").map(drop).map_err(|e| e.to_string());
    assert_eq!(
        err,
        Err("config.json: no server named \"gh\" (available: files, github, web)".to_owned())
    );
    let empty = parse_at("config.json", r#"{"mcpServers": {}}"#)?;
    assert_eq!(
        empty.get("x").map(drop).map_err(|e| e.to_string()),
        Err("config.json: no server named \"x\" (the file defines no servers)".to_owned())
    );
    Ok(())
}

#[test]
fn load_reads_the_file_and_names_it_on_failure() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("mcpvisor-config-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("servers.toml");
    std::fs::write(&path, "[mcp_servers.a]\ncommand = \"a\"\ncwd = \"w\"\n")?;
    let file = load(&path)?;
    assert_eq!(file.path(), path);
    assert_eq!(file.get("a")?.cwd, Some(dir.join("w")));

    let missing = dir.join("missing.json");
    let err = load(&missing).map(drop).map_err(|e| e.to_string());
    assert_eq!(
        err,
        Err(format!(
            "{}: cannot read: No such file or directory (os error 2)",
            missing.display()
        ))
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn tool_filter_rules() {
    let open = ToolFilter::default();
    assert!(open.permits("anything"));
    assert!(open.is_open());
    let none = ToolFilter {
        allow: Some(vec![]),
        deny: vec![],
        ..Default::default()
    };
    assert!(!none.permits("anything"));
    let deny = ToolFilter {
        allow: None,
        deny: vec!["rm".into()],
        ..Default::default()
    };
    assert!(!deny.permits("rm"));
    assert!(deny.permits("ls"));
}

#[test]
fn server_def_new_has_defaults() {
    let def = ServerDef::new("adhoc", "npx");
    assert_eq!(def.name, "adhoc");
    assert_eq!(def.command, "npx");
    assert!(def.args.is_empty() && def.env.is_empty() && !def.disabled);
    assert!(def.tools.is_open());
}

#[test]
fn entries_keep_the_file_order() -> Result<(), ConfigError> {
    let names = |file: &ConfigFile| -> Vec<String> {
        file.entries()
            .map(|entry| match entry {
                ConfigEntry::Stdio(def) => def.name.clone(),
                ConfigEntry::Unsupported(other) => format!("{}({})", other.name, other.transport),
            })
            .collect()
    };
    let json = parse_at(
        "c.json",
        r#"{"mcpServers": {"zeta": {"command": "z"}, "web": {"url": "https://x"},
            "alpha": {"command": "a"}}}"#,
    )?;
    assert_eq!(names(&json), ["zeta", "web", "alpha"]);
    let vscode = parse_at(
        "settings.json",
        r#"{"mcp": {"servers": {"b": {"command": "b"}, "a": {"command": "a"}}}}"#,
    )?;
    assert_eq!(names(&vscode), ["b", "a"]);
    let toml = parse_at(
        "c.toml",
        "[mcp_servers.zeta]\ncommand = \"z\"\n[mcp_servers.alpha]\ncommand = \"a\"\n",
    )?;
    assert_eq!(names(&toml), ["zeta", "alpha"]);
    Ok(())
}

#[test]
fn supervision_overrides() -> Result<(), ConfigError> {
    let file = parse_at(
        "c.json",
        r#"{"mcpServers": {
            "all": {
              "command": "x",
              "restart": "on-demand",
              "request_timeout": "2m",
              "request_ceiling": 3600,
              "max_in_flight": 8,
              "crash_loop_exits": 3,
              "idle_timeout": "10m",
              "start": "lazy",
              "sessions": "per-client",
              "health_interval": "30s",
              "health_misses": 2,
              "autoApprove": []
            },
            "none": {"command": "y"},
            "off": {"command": "z", "idle_timeout": false, "health_interval": "off",
                    "restart": "never", "start": "eager", "sessions": "shared"}
        }}"#,
    )?;
    let all = &file.get("all")?.supervision;
    assert_eq!(
        *all,
        Supervision {
            restart: Some(RestartMode::OnDemand),
            request_timeout: Some(Duration::from_secs(120)),
            request_ceiling: Some(Duration::from_secs(3600)),
            max_in_flight: Some(8),
            crash_loop_exits: Some(3),
            idle_timeout: Some(Timer::On(Duration::from_secs(600))),
            start: Some(StartMode::Lazy),
            sessions: Some(SessionMode::PerClient),
            health_interval: Some(Timer::On(Duration::from_secs(30))),
            health_misses: Some(2),
        }
    );
    let extra: Vec<&String> = file.get("all")?.extra.keys().collect();
    assert_eq!(extra, ["autoApprove"], "only unknown fields stay in extra");

    let none = &file.get("none")?.supervision;
    assert!(none.is_empty());

    let off = &file.get("off")?.supervision;
    assert_eq!(off.idle_timeout, Some(Timer::Off));
    assert_eq!(off.idle_timeout.and_then(Timer::duration), None);
    assert_eq!(off.health_interval, Some(Timer::Off));
    assert_eq!(off.restart, Some(RestartMode::Never));
    assert_eq!(off.start, Some(StartMode::Eager));
    assert_eq!(off.sessions, Some(SessionMode::Shared));
    assert_eq!(
        [
            RestartMode::Always.to_string(),
            RestartMode::OnDemand.to_string(),
            StartMode::Lazy.to_string(),
            SessionMode::PerClient.to_string(),
        ],
        ["always", "on-demand", "lazy", "per-client"]
    );
    Ok(())
}

#[test]
fn supervision_in_codex_toml() -> Result<(), ConfigError> {
    let file = parse_at(
        "c.toml",
        "[mcp_servers.a]\ncommand = \"a\"\nrestart = \"always\"\nmax_in_flight = 65536\n\
         idle_timeout = false\nrequest_timeout = 30\ntool_timeout_sec = 90\n",
    )?;
    let a = &file.get("a")?.supervision;
    assert_eq!(a.restart, Some(RestartMode::Always));
    assert_eq!(a.max_in_flight, Some(65_536));
    assert_eq!(a.idle_timeout, Some(Timer::Off));
    assert_eq!(
        a.request_timeout,
        Some(Duration::from_secs(30)),
        "our own field wins over Codex's"
    );
    Ok(())
}

#[test]
fn supervision_errors_name_the_server_and_field() {
    let cases = [
        (
            r#""restart": "sometimes""#,
            "\"restart\" must be \"always\", \"on-demand\" or \"never\"",
        ),
        (
            r#""restart": true"#,
            "\"restart\" must be \"always\", \"on-demand\" or \"never\"",
        ),
        (
            r#""start": "Lazy""#,
            "\"start\" must be \"eager\" or \"lazy\"",
        ),
        (
            r#""sessions": "per_client""#,
            "\"sessions\" must be \"shared\" or \"per-client\"",
        ),
        (
            r#""request_timeout": "soon""#,
            "\"request_timeout\": expected a duration like \"30s\", \"5m\" or \"1500ms\"",
        ),
        (
            r#""request_ceiling": 0"#,
            "\"request_ceiling\" must be greater than zero",
        ),
        (
            r#""request_timeout": "2m", "request_ceiling": "1m""#,
            "\"request_ceiling\" must not be shorter than \"request_timeout\"",
        ),
        (
            r#""tool_timeout_sec": "x""#,
            "\"tool_timeout_sec\": expected a duration like \"30s\", \"5m\" or \"1500ms\"",
        ),
        (
            r#""max_in_flight": 0"#,
            "\"max_in_flight\" must be a whole number from 1 to 65536",
        ),
        (
            r#""max_in_flight": 65537"#,
            "\"max_in_flight\" must be a whole number from 1 to 65536",
        ),
        (
            r#""max_in_flight": "8""#,
            "\"max_in_flight\" must be a whole number from 1 to 65536",
        ),
        (
            r#""crash_loop_exits": 2.5"#,
            "\"crash_loop_exits\" must be a whole number of at least 1",
        ),
        (
            r#""health_misses": -1"#,
            "\"health_misses\" must be a whole number of at least 1",
        ),
        (
            r#""idle_timeout": true"#,
            "\"idle_timeout\" must be a duration such as \"10m\", or false to turn it off",
        ),
        (
            r#""idle_timeout": 0"#,
            "\"idle_timeout\" must be greater than zero",
        ),
        (
            r#""health_interval": ["30s"]"#,
            "\"health_interval\" must be a number of seconds or a string like \"30s\"",
        ),
    ];
    for (field, expected) in cases {
        let text = format!("{{\"mcpServers\": {{\"s\": {{\"command\": \"x\", {field}}}}}}}");
        assert_eq!(
            error("/etc/mcp.json", &text),
            format!("/etc/mcp.json: server \"s\": {expected}"),
            "{field}"
        );
    }
}

#[test]
fn sandbox_in_json_and_toml() -> Result<(), ConfigError> {
    use crate::sandbox::{Endpoint, Network, Sandbox};
    let json = parse_at(
        "/srv/mcp/servers.json",
        r#"{"mcpServers": {
          "fs": {"command": "npx", "sandbox": {"read": ["docs"], "write": ["/tmp/out"], "network": "none"}},
          "web": {"command": "fetch", "sandbox": {"network": ["api.example.com:443"]}},
          "plain": {"command": "x"}
        }}"#,
    )?;
    assert_eq!(
        json.get("fs")?.sandbox,
        Some(Sandbox {
            read: vec![PathBuf::from("/srv/mcp/docs")],
            write: vec![PathBuf::from("/tmp/out")],
            network: Network::None,
        })
    );
    assert_eq!(
        json.get("web")?.sandbox.as_ref().map(|s| &s.network),
        Some(&Network::Ports(vec![Endpoint {
            host: "api.example.com".to_owned(),
            port: 443
        }]))
    );
    assert_eq!(json.get("plain")?.sandbox, None);
    assert!(
        json.get("fs")?.extra.is_empty(),
        "sandbox is not an unknown field"
    );

    let toml = parse_at(
        "/srv/mcp/config.toml",
        r#"
[mcp_servers.fs]
command = "npx"
sandbox = { read = ["docs"], write = ["/tmp/out"], network = "none" }

[mcp_servers.web]
command = "fetch"
[mcp_servers.web.sandbox]
network = ["api.example.com:443"]
"#,
    )?;
    assert_eq!(toml.get("fs")?.sandbox, json.get("fs")?.sandbox);
    assert_eq!(toml.get("web")?.sandbox, json.get("web")?.sandbox);
    Ok(())
}

#[test]
fn sandbox_errors_name_the_entry_and_field() {
    assert_eq!(
        error(
            "/c.json",
            r#"{"mcpServers": {"a": {"command": "a", "sandbox": {"network": ["localhost"]}}}}"#
        ),
        "/c.json: server \"a\": \"sandbox.network[0]\": \"localhost\" is not HOST:PORT"
    );
    assert_eq!(
        error(
            "/c.json",
            r#"{"mcpServers": {"a": {"url": "https://x.example/mcp", "sandbox": {}}}}"#
        ),
        "/c.json: server \"a\": a remote server (\"url\") has no \"sandbox\": it runs elsewhere"
    );
}

#[test]
fn pin_policy_in_json_and_toml() -> Result<(), ConfigError> {
    let json = parse_at(
        "c.json",
        r#"{"mcpServers": {"a": {"command": "x", "pin": "strict"}, "b": {"command": "y", "pin": "off"}, "c": {"command": "z"}}}"#,
    )?;
    let toml = parse_at(
        "c.toml",
        "[mcp_servers.a]\ncommand = \"x\"\npin = \"strict\"\n[mcp_servers.b]\ncommand = \"y\"\npin = \"off\"\n[mcp_servers.c]\ncommand = \"z\"\n",
    )?;
    for file in [&json, &toml] {
        assert_eq!(file.get("a")?.pin, Some(PinPolicy::Strict));
        assert_eq!(file.get("b")?.pin, Some(PinPolicy::Off));
        assert_eq!(file.get("c")?.pin, None, "left to serve --pin");
        assert!(!file.get("a")?.extra.contains_key("pin"));
    }
    assert_eq!(
        error(
            "config.json",
            r#"{"mcpServers": {"a": {"command": "x", "pin": "always"}}}"#
        ),
        "config.json: server \"a\": \"pin\" is \"always\"; expected one of tofu, strict, off"
    );
    assert_eq!(
        error(
            "config.json",
            r#"{"mcpServers": {"a": {"command": "x", "pin": true}}}"#
        ),
        "config.json: server \"a\": \"pin\" must be a string"
    );
    Ok(())
}

#[test]
fn era_in_json_and_toml() -> Result<(), ConfigError> {
    let json = parse_at(
        "c.json",
        r#"{"mcpServers": {"a": {"command": "x", "era": "2025-11-25"}, "b": {"command": "y", "era": "2026-07-28"}, "c": {"command": "z", "era": "auto"}, "d": {"command": "w"}}}"#,
    )?;
    let toml = parse_at(
        "c.toml",
        "[mcp_servers.a]\ncommand = \"x\"\nera = \"2025-11-25\"\n[mcp_servers.b]\ncommand = \"y\"\nera = \"2026-07-28\"\n[mcp_servers.c]\ncommand = \"z\"\nera = \"auto\"\n[mcp_servers.d]\ncommand = \"w\"\n",
    )?;
    for file in [&json, &toml] {
        assert_eq!(file.get("a")?.era, EraChoice::Handshake);
        assert_eq!(file.get("b")?.era, EraChoice::Modern);
        assert_eq!(file.get("c")?.era, EraChoice::Auto);
        assert_eq!(file.get("d")?.era, EraChoice::Auto, "probed by default");
        assert!(!file.get("a")?.extra.contains_key("era"));
    }
    assert_eq!(
        error(
            "config.json",
            r#"{"mcpServers": {"a": {"command": "x", "era": "2025-06-18"}}}"#
        ),
        "config.json: server \"a\": \"era\" is \"2025-06-18\"; expected one of auto, 2025-11-25, 2026-07-28"
    );
    assert_eq!(
        error(
            "config.toml",
            "[mcp_servers.a]\ncommand = \"x\"\nera = 2025\n"
        ),
        "config.toml: server \"a\": \"era\" must be a string"
    );
    assert_eq!(
        error(
            "config.json",
            r#"{"mcpServers": {"a": {"url": "https://example.com/mcp", "era": "2025-11-25"}}}"#
        ),
        "config.json: server \"a\": a remote server (\"url\") has no \"era\": its connection finds its era"
    );
    Ok(())
}
