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

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("json")
}

/// A gateway config in `dir` serving the fake worker as `fake`: its path,
/// and the worker's.
fn gateway_config(dir: &Path) -> (PathBuf, String) {
    let worker = fake_worker().display().to_string();
    let gateway = dir.join("gateway.json");
    std::fs::write(
        &gateway,
        json!({"mcpServers": {"fake": {"command": worker}}}).to_string(),
    )
    .expect("write");
    (gateway, worker)
}

/// `mcpvisor install-gateway --config GATEWAY --into CLIENT EXTRA...` in
/// `dir`.
fn install_gateway(dir: &Path, gateway: &str, client: &str, extra: &[&str]) -> Output {
    let mut args = vec!["install-gateway", "--config", gateway, "--into", client];
    args.extend_from_slice(extra);
    mcpvisor_in(dir, &args)
}

/// Starts mcpvisor with a client entry's `args`, and gives the names of
/// the tools it serves after the handshake; then closes it.
fn tools_served(args: &[String]) -> Vec<String> {
    let mut p = Proc::spawn(args);
    p.initialize();
    let tools = p.request(json!(1), "tools/list", json!({}));
    let names = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    p.close_stdin();
    assert!(p.wait_exit(WAIT).success());
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
    let wrapped = read_json(&config);
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

#[test]
fn doctor_gives_one_line_per_server_and_the_exit_status() {
    let dir = temp_dir("doctor");
    let worker = fake_worker().display().to_string();
    std::fs::write(dir.join(".env"), "OTHER=1\n").expect("env file");
    let config = dir.join("mcp.json");
    let servers = json!({
        "good": {"command": worker, "args": ["--strict"]},
        "wrapped": {"command": mcpvisor(), "args": ["run", "--", worker]},
        "missing": {"command": "no-such-mcp-server-here"},
        "crash": {"command": "sh", "args": ["-c", "echo starting >&2; echo 'Error: DATABASE_URL is not set' >&2; exit 3"]},
        "secret": {"command": worker, "env_file": ".env", "env_keys": ["API_KEY"]},
        "auth": {"command": "sh", "args": ["-c", "echo 'Please authorize this client by visiting:' >&2; echo 'https://auth.example.com/authorize?client_id=x' >&2; exec sleep 30"]},
        "off": {"command": "x", "disabled": true},
        "ws": {"type": "ws", "url": "wss://example.com/mcp"}
    });
    std::fs::write(&config, json!({"mcpServers": servers}).to_string()).expect("write");
    let config_arg = config.display().to_string();

    let out = mcpvisor_in(
        &dir,
        &["doctor", "--config", &config_arg, "--timeout", "20s"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 8, "{stdout}");
    let line = |name: &str| {
        lines
            .iter()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .copied()
            .unwrap_or_else(|| panic!("no line for {name}: {stdout}"))
    };
    assert!(line("good").starts_with("ok "), "{stdout}");
    assert!(line("good").contains("12 tools, started in "), "{stdout}");
    assert!(line("wrapped").starts_with("ok "), "{stdout}");
    assert!(line("missing").contains("missing program: cannot run `no-such-mcp-server-here`: command not found on PATH -> install it"), "{stdout}");
    assert!(line("crash").starts_with("FAIL"), "{stdout}");
    assert!(line("crash").contains("exit code 3"), "{stdout}");
    assert!(
        line("crash").contains("last stderr: Error: DATABASE_URL is not set"),
        "{stdout}"
    );
    assert!(
        line("secret").contains("missing secret: ")
            && line("secret").contains("\"API_KEY\" (listed in env_keys) is not set"),
        "{stdout}"
    );
    assert!(line("auth").starts_with("AUTH"), "{stdout}");
    assert!(
        line("auth").contains("open https://auth.example.com/authorize?client_id=x"),
        "{stdout}"
    );
    assert!(line("off").starts_with("off "), "{stdout}");
    assert!(line("ws").starts_with("skip"), "{stdout}");

    let out = mcpvisor_in(
        &dir,
        &[
            "doctor",
            "--config",
            &config_arg,
            "--json",
            "--only",
            "good,crash",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let verdict = |name: &str| {
        report
            .as_array()
            .and_then(|all| all.iter().find(|v| v["server"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no verdict for {name}: {report}"))
    };
    assert_eq!(report.as_array().map(Vec::len), Some(2));
    let good = verdict("good");
    assert_eq!(good["status"], "ok");
    assert_eq!(good["tools"], 12);
    assert!(good["startup_ms"].is_u64());
    let crash = verdict("crash");
    assert_eq!(crash["status"], "failed");
    assert_eq!(crash["crash"]["exit"]["code"], 3);

    // All fine: exit status 0.
    let out = mcpvisor_in(
        &dir,
        &["doctor", "--config", &config_arg, "--only", "good,off,ws"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

/// What bash offers after `words`, with mcpvisor's completions loaded.
fn bash_complete(words: &[&str]) -> Vec<String> {
    let script = format!(
        "source <({exe} completions bash) || exit 3\n\
         complete -p mcpvisor >/dev/null || exit 4\n\
         COMP_WORDS=({words})\n\
         COMP_CWORD={cword}\n\
         COMP_LINE=\"${{COMP_WORDS[*]}}\"\n\
         COMP_POINT=${{#COMP_LINE}}\n\
         _mcpvisor mcpvisor \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        exe = mcpvisor().display(),
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
    );
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &script])
        .output()
        .expect("run bash");
    assert!(out.status.success(), "bash: {}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn bash_loads_the_completions_and_completes_commands_flags_and_values() {
    assert_eq!(bash_complete(&["mcpvisor", "wr"]), ["wrap"]);
    let flags = bash_complete(&["mcpvisor", "wrap", "--"]);
    for flag in ["--config", "--client", "--only", "--dry-run", "--program"] {
        assert!(flags.iter().any(|f| f == flag), "{flag} in {flags:?}");
    }
    let clients = bash_complete(&["mcpvisor", "doctor", "--client", ""]);
    assert_eq!(
        clients,
        [
            "claude-desktop",
            "claude-code",
            "cursor",
            "vscode",
            "codex",
            "windsurf"
        ]
    );
    // zsh and fish get theirs from the same definitions.
    for shell in ["zsh", "fish"] {
        let out = mcpvisor_in(&temp_dir("completions"), &["completions", shell]);
        assert!(out.status.success());
        let script = text(&out.stdout);
        assert!(
            script.contains("doctor") && script.contains("dry-run"),
            "{shell}"
        );
    }
}

#[test]
fn the_man_pages_are_written_and_render() {
    let dir = temp_dir("man");
    let out = mcpvisor_in(&dir, &["man"]);
    assert!(out.status.success());
    let page = text(&out.stdout);
    assert!(page.contains(".TH mcpvisor 1"), "{page}");
    assert!(page.contains("mcpvisor\\-wrap(1)"), "{page}");
    let pages = dir.join("pages");
    std::fs::create_dir_all(&pages).expect("mkdir");
    let pages_arg = pages.display().to_string();
    let out = mcpvisor_in(&dir, &["man", "--dir", &pages_arg]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for name in [
        "mcpvisor.1",
        "mcpvisor-wrap.1",
        "mcpvisor-doctor.1",
        "mcpvisor-run.1",
    ] {
        assert!(pages.join(name).is_file(), "{name}");
    }
    let wrap = std::fs::read_to_string(pages.join("mcpvisor-wrap.1")).expect("page");
    assert!(wrap.contains("\\-\\-dry\\-run"), "{wrap}");
    // Rendered by groff where it is installed.
    if let Ok(out) = Command::new("groff")
        // Plain text: no overstriking for bold and underline.
        .args(["-man", "-Tascii", "-P-cbou"])
        .arg(pages.join("mcpvisor-doctor.1"))
        .output()
    {
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("--json"),
            "{}",
            text(&out.stdout)
        );
    }
}

#[test]
fn install_gateway_adds_an_entry_that_serves_and_uninstall_removes_it() {
    let dir = temp_dir("install-gateway");
    let (gateway, _) = gateway_config(&dir);
    let client = dir.join("claude_desktop_config.json");
    let original = "{\n  \"mcpServers\": {\n    \"other\": {\n      \"command\": \"x\"\n    }\n  },\n  \"globalShortcut\": \"\"\n}\n";
    std::fs::write(&client, original).expect("write");
    let (gateway_arg, client_arg) = (gateway.display().to_string(), client.display().to_string());

    let dry = install_gateway(&dir, &gateway_arg, &client_arg, &["--dry-run"]);
    assert!(dry.status.success(), "{}", text(&dry.stderr));
    assert!(
        text(&dry.stdout).contains("+    \"mcpvisor\": {"),
        "{}",
        text(&dry.stdout)
    );
    assert_eq!(std::fs::read_to_string(&client).expect("read"), original);

    let out = install_gateway(&dir, &gateway_arg, &client_arg, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = read_json(&client);
    assert_eq!(written["globalShortcut"], "");
    assert_eq!(written["mcpServers"]["other"]["command"], "x");
    let entry = &written["mcpServers"]["mcpvisor"];
    let args: Vec<String> = serde_json::from_value(entry["args"].clone()).expect("args");
    assert_eq!(args, ["serve", "--config", gateway_arg.as_str()]);
    // A second install is refused: the name is taken.
    let again = install_gateway(&dir, &gateway_arg, &client_arg, &[]);
    assert_eq!(again.status.code(), Some(2));

    // The entry starts the gateway, which serves the fake worker's tools.
    let names = tools_served(&args);
    assert!(names.iter().any(|n| n == "fake__echo"), "{names:?}");

    // Only a gateway entry is removed.
    let out = mcpvisor_in(
        &dir,
        &[
            "uninstall-gateway",
            "--into",
            &client_arg,
            "--name",
            "other",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let out = mcpvisor_in(&dir, &["uninstall-gateway", "--into", &client_arg]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&client).expect("read"), original);
    assert_eq!(backups_in(&dir).len(), 2);
}

#[test]
fn install_gateway_moves_the_clients_servers_and_uninstall_moves_them_back() {
    let dir = temp_dir("install-move");
    let (gateway, worker) = gateway_config(&dir);
    let client = dir.join("claude_desktop_config.json");
    let original = format!(
        "{{\n  \"mcpServers\": {{\n    \"mine\": {{\n      \"command\": {worker:?},\n      \"args\": [\n        \"--strict\"\n      ],\n      \"cwd\": \"work\"\n    }},\n    \"web\": {{\n      \"url\": \"http://127.0.0.1:9/mcp\"\n    }}\n  }}\n}}\n"
    );
    std::fs::create_dir_all(dir.join("work")).expect("mkdir");
    std::fs::write(&client, &original).expect("write");
    let (gateway_arg, client_arg) = (gateway.display().to_string(), client.display().to_string());

    let out = install_gateway(&dir, &gateway_arg, &client_arg, &["--move"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("gateway.json: moved mine, web"),
        "{}",
        text(&out.stdout)
    );
    let client_now = read_json(&client);
    let names: Vec<&String> = client_now["mcpServers"]
        .as_object()
        .expect("servers")
        .keys()
        .collect();
    assert_eq!(names, ["mcpvisor"]);
    let gateway_now = read_json(&gateway);
    assert_eq!(
        gateway_now["mcpServers"]["web"]["url"],
        "http://127.0.0.1:9/mcp"
    );
    assert_eq!(
        gateway_now["mcpServers"]["mine"]["cwd"],
        dir.join("work").display().to_string(),
        "a relative cwd is made absolute"
    );

    // The gateway now serves both stdio servers.
    let args: Vec<String> =
        serde_json::from_value(client_now["mcpServers"]["mcpvisor"]["args"].clone()).expect("args");
    let names = tools_served(&args);
    assert!(
        names.iter().any(|n| n == "fake__echo") && names.iter().any(|n| n == "mine__echo"),
        "{names:?}"
    );

    let out = mcpvisor_in(
        &dir,
        &[
            "uninstall-gateway",
            "--into",
            &client_arg,
            "--move-back",
            &gateway_arg,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("moved back mine, web"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(std::fs::read_to_string(&client).expect("read"), original);
    let gateway_now = read_json(&gateway);
    let names: Vec<&String> = gateway_now["mcpServers"]
        .as_object()
        .expect("servers")
        .keys()
        .collect();
    assert_eq!(names, ["fake"]);
}
