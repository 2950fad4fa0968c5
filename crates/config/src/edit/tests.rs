use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;

use super::*;
use crate::server::load;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

fn entry(value: Value) -> Map<String, Value> {
    value.as_object().expect("an object").clone()
}

#[test]
fn json_mcp_servers_add_keeps_other_entries_and_unknown_fields() {
    let d = dir();
    let path = d.path().join("claude.json");
    let text = r#"{
    "theme": "dark",
    "mcpServers": {
        "zeta": {"command": "z", "args": ["1"], "custom": {"keep": true}},
        "alpha": {"command": "a"}
    },
    "zz_last": 1
}
"#;
    write(&path, text, 0o640);
    add_server(
        &path,
        "new",
        &entry(json!({"command": "npx", "args": ["-y", "pkg"]})),
    )
    .expect("added");
    let after = read(&path);
    let file = load(&path).expect("loads");
    let names: Vec<&str> = file
        .entries()
        .map(|e| match e {
            crate::ConfigEntry::Stdio(def) => def.name.as_str(),
            crate::ConfigEntry::Unsupported(u) => u.name.as_str(),
        })
        .collect();
    assert_eq!(names, ["zeta", "alpha", "new"], "file order kept, new last");
    assert_eq!(file.get("new").expect("new").args, ["-y", "pkg"]);
    assert_eq!(
        file.get("zeta").expect("zeta").extra.get("custom"),
        Some(&json!({"keep": true}))
    );
    // Top-level keys keep their order, the indentation is the file's.
    let theme = after.find("\"theme\"").expect("theme");
    let servers = after.find("\"mcpServers\"").expect("servers");
    let last = after.find("\"zz_last\"").expect("last");
    assert!(theme < servers && servers < last, "{after}");
    assert!(after.contains("\n    \"theme\""), "{after}");
    assert!(after.ends_with("}\n"));
    let new = after.find("\"new\"").expect("the new entry");
    let command = after[new..].find("\"command\"").expect("command");
    let args = after[new..].find("\"args\"").expect("args");
    assert!(command < args, "command first: {after}");
    assert_eq!(mode(&path), 0o640, "the file keeps its mode");

    let err = add_server(&path, "alpha", &entry(json!({"command": "x"}))).expect_err("taken");
    assert!(matches!(err, EditError::Exists { .. }), "{err}");
}

#[test]
fn json_vscode_entries_take_the_files_shape() {
    let d = dir();
    let path = d.path().join("mcp.json");
    write(
        &path,
        r#"{"servers": {"a": {"type": "stdio", "command": "a", "envFile": "a.env"}}}"#,
        0o600,
    );
    add_server(
        &path,
        "b",
        &entry(json!({"command": "b", "env_file": "b.env", "env_keys": ["K"]})),
    )
    .expect("added");
    let value: Value = serde_json::from_str(&read(&path)).expect("json");
    assert_eq!(value["servers"]["b"]["type"], "stdio");
    assert_eq!(value["servers"]["b"]["envFile"], "b.env");
    assert!(value["servers"]["b"].get("env_file").is_none());
    assert_eq!(env_file_field(&path).expect("dialect"), "envFile");
}

#[test]
fn json_with_comments_is_refused_untouched() {
    let d = dir();
    let path = d.path().join("mcp.json");
    let text = "{\n  // mine\n  \"servers\": {\"a\": {\"command\": \"a\"}}\n}\n";
    write(&path, text, 0o600);
    let err = set_disabled(&path, "a", true).expect_err("comments");
    assert!(matches!(err, EditError::Comments { .. }), "{err}");
    assert_eq!(read(&path), text);
}

#[test]
fn json_disable_and_enable() {
    let d = dir();
    let path = d.path().join("c.json");
    write(
        &path,
        r#"{"mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}}}"#,
        0o600,
    );
    set_disabled(&path, "a", true).expect("disabled");
    assert!(load(&path).expect("loads").get("a").expect("a").disabled);
    assert!(!load(&path).expect("loads").get("b").expect("b").disabled);
    set_disabled(&path, "a", false).expect("enabled");
    let value: Value = serde_json::from_str(&read(&path)).expect("json");
    assert_eq!(value["mcpServers"]["a"]["disabled"], false);
    let err = set_disabled(&path, "nope", true).expect_err("unknown");
    assert!(matches!(err, EditError::NoSuchServer { .. }), "{err}");
}

#[test]
fn toml_codex_edits_keep_comments_and_formatting() {
    let d = dir();
    let path = d.path().join("config.toml");
    let text = r#"# my Codex config
model = "o3"  # the model

[mcp_servers.docs]
# the docs server
command = "docs-mcp"
args = ["--port",   "1"]  # odd spacing kept
enabled = true

[mcp_servers.other]
command = "other"
"#;
    write(&path, text, 0o644);
    set_disabled(&path, "docs", true).expect("disabled");
    let after = read(&path);
    assert!(after.contains("# my Codex config"), "{after}");
    assert!(after.contains("model = \"o3\"  # the model"), "{after}");
    assert!(after.contains("# the docs server"), "{after}");
    assert!(
        after.contains("args = [\"--port\",   \"1\"]  # odd spacing kept"),
        "{after}"
    );
    assert!(
        after.contains("enabled = false"),
        "Codex's own flag flipped: {after}"
    );
    assert!(!after.contains("disabled"), "{after}");
    assert!(
        load(&path)
            .expect("loads")
            .get("docs")
            .expect("docs")
            .disabled
    );

    set_disabled(&path, "other", true).expect("disabled");
    assert!(read(&path).contains("disabled = true"));

    add_server(
        &path,
        "fresh",
        &entry(json!({"command": "npx", "args": ["-y", "x"], "env": {"A": "b"}, "tools": {"allow": ["t"]}})),
    )
    .expect("added");
    let after = read(&path);
    assert!(after.contains("[mcp_servers.fresh]"), "{after}");
    assert!(after.contains("env = { A = \"b\" }"), "{after}");
    assert!(after.contains("# the docs server"), "{after}");
    let file = load(&path).expect("loads");
    let fresh = file.get("fresh").expect("fresh");
    assert_eq!(fresh.args, ["-y", "x"]);
    assert_eq!(fresh.tools.allow, Some(vec!["t".to_owned()]));
    assert_eq!(mode(&path), 0o644);

    set_server_field(&path, "fresh", "env_file", &json!("fresh.env")).expect("set");
    std::fs::write(d.path().join("fresh.env"), "").expect("env");
    assert_eq!(
        load(&path)
            .expect("loads")
            .get("fresh")
            .expect("fresh")
            .env_file,
        Some(d.path().join("fresh.env"))
    );
}

#[test]
fn toml_without_servers_gets_its_table() {
    let d = dir();
    let path = d.path().join("config.toml");
    // Not loadable yet (no [mcp_servers]): refused, since an edit starts
    // from a valid file.
    write(&path, "model = \"x\"\n", 0o600);
    assert!(add_server(&path, "a", &entry(json!({"command": "a"}))).is_err());
    write(&path, "model = \"x\"\n[mcp_servers]\n", 0o600);
    add_server(&path, "a", &entry(json!({"command": "a"}))).expect("added");
    assert_eq!(
        load(&path).expect("loads").get("a").expect("a").command,
        "a"
    );
}

#[test]
fn an_edit_that_breaks_the_file_is_not_written() {
    let d = dir();
    let path = d.path().join("c.json");
    let text = r#"{"mcpServers": {"a": {"command": "a"}}}"#;
    write(&path, text, 0o600);
    let err = set_server_field(&path, "a", "args", &json!("not a list")).expect_err("invalid");
    assert!(matches!(err, EditError::Config(_)), "{err}");
    assert_eq!(read(&path), text);
}

#[test]
fn a_symlinked_config_is_written_where_it_points() {
    let d = dir();
    let real = d.path().join("real.json");
    let link = d.path().join("link.json");
    write(&real, r#"{"mcpServers": {"a": {"command": "a"}}}"#, 0o600);
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    set_disabled(&link, "a", true).expect("disabled");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("stat")
            .file_type()
            .is_symlink()
    );
    assert!(load(&real).expect("loads").get("a").expect("a").disabled);
}

#[test]
fn env_file_set_keeps_other_lines_and_is_0600() {
    let d = dir();
    let path = d.path().join("s.env");
    let text = "# tokens\nexport A=1\nPEM=\"-----BEGIN\nB=inside\n-----END\"\nB=old # comment\nB=older\nC='x y'\n";
    write(&path, text, 0o644);
    set_env_var(&path, "B", "new value with \"quotes\" and $HOME\nline2").expect("set");
    let after = read(&path);
    assert!(
        after.starts_with("# tokens\nexport A=1\nPEM=\"-----BEGIN\nB=inside\n-----END\"\n"),
        "{after}"
    );
    assert!(after.contains("C='x y'\n"), "{after}");
    assert!(!after.contains("older"), "{after}");
    assert_eq!(mode(&path), 0o600);
    let vars = crate::secrets::parse_dotenv(&after, &path).expect("parses");
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.expose().to_owned())
    };
    assert_eq!(
        get("B").as_deref(),
        Some("new value with \"quotes\" and $HOME\nline2")
    );
    assert_eq!(get("A").as_deref(), Some("1"));
    assert_eq!(
        get("PEM").as_deref(),
        Some("-----BEGIN\nB=inside\n-----END")
    );

    set_env_var(&path, "D", "plain").expect("added");
    assert!(read(&path).ends_with("D=plain\n"));
    assert_eq!(env_keys(&path).expect("keys"), ["A", "PEM", "B", "C", "D"]);
}

#[test]
fn env_file_is_created_and_keys_checked() {
    let d = dir();
    let path = d.path().join("new.env");
    set_env_var(&path, "TOKEN", "s3cret").expect("created");
    assert_eq!(read(&path), "TOKEN=s3cret\n");
    assert_eq!(mode(&path), 0o600);
    for bad in ["", "1A", "A-B", "A B", "A=B"] {
        let err = set_env_var(&path, bad, "s3cret").expect_err(bad);
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }
    let err = set_env_var(&path, "K", "s3cret\0").expect_err("NUL");
    assert!(!err.to_string().contains("s3cret"), "{err}");
    assert_eq!(
        read(&path),
        "TOKEN=s3cret\n",
        "a refused write changes nothing"
    );
    assert_eq!(
        env_keys(&d.path().join("missing.env")).expect("none"),
        Vec::<String>::new()
    );
}
