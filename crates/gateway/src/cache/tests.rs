use std::collections::BTreeMap;
use std::time::Duration;

use mcpvisor_config::{RestartMode, ToolFilter};
use serde_json::json;
use tempfile::TempDir;

use super::*;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

fn def() -> ServerDef {
    ServerDef {
        args: vec![
            "-y".into(),
            "@modelcontextprotocol/server-everything".into(),
        ],
        env: BTreeMap::from([("API_TOKEN".to_owned(), "sk-live-hunter2".to_owned())]),
        ..ServerDef::new("everything", "npx")
    }
}

fn lists() -> Lists {
    Lists {
        initialize: json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}, "prompts": {}},
            "serverInfo": {"name": "everything", "version": "2026.8.31"},
            "instructions": "Try the echo tool."
        }),
        tools: vec![
            json!({"name": "echo", "description": "Echoes back the input string",
            "inputSchema": {"type": "object"}}),
        ],
        prompts: vec![json!({"name": "simple-prompt"})],
        resources: vec![json!({"uri": "demo://resource/static/document/architecture.md"})],
        resource_templates: vec![json!({"uriTemplate": "demo://resource/dynamic/text/{index}"})],
    }
}

fn mtime(secs: u64) -> Option<SystemTime> {
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Every file in `dir`, by name.
fn files(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

#[test]
fn where_the_cache_lives() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(*value))
        }
    };
    assert_eq!(
        dir_from(env(&[
            ("MCPVISOR_CACHE_DIR", "/tmp/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ])),
        Some(PathBuf::from("/tmp/c/lists"))
    );
    assert_eq!(
        dir_from(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
        Some(PathBuf::from("/x/mcpvisor/lists"))
    );
    assert_eq!(
        dir_from(env(&[
            ("MCPVISOR_CACHE_DIR", ""),
            ("XDG_CACHE_HOME", "relative"),
            ("HOME", "/h"),
        ])),
        Some(PathBuf::from("/h/.cache/mcpvisor/lists")),
        "empty and relative values are ignored"
    );
    assert_eq!(dir_from(env(&[])), None);
}

#[test]
fn put_then_get_round_trips() -> Result {
    let tmp = TempDir::new()?;
    let cache = Cache::at(tmp.path().join("deep").join("lists"));
    let key = Key::new(&def(), mtime(1_700_000_000));
    assert_eq!(cache.get(&key), None, "nothing yet");
    cache.put(&key, &lists())?;
    assert_eq!(cache.get(&key), Some(lists()));

    let mut changed = lists();
    changed.tools.push(json!({"name": "get-sum"}));
    cache.put(&key, &changed)?;
    assert_eq!(cache.get(&key), Some(changed), "a put replaces");
    assert_eq!(
        files(cache.dir())?,
        [format!("{key}.json")],
        "no temp file left"
    );

    cache.remove(&key)?;
    assert_eq!(cache.get(&key), None);
    cache.remove(&key)?;
    Ok(())
}

#[test]
fn the_file_layout_uses_mcp_names() -> Result {
    let tmp = TempDir::new()?;
    let cache = Cache::at(tmp.path());
    let key = Key::new(&def(), None);
    cache.put(&key, &lists())?;
    let stored: Value = serde_json::from_slice(&fs::read(tmp.path().join(format!("{key}.json")))?)?;
    assert_eq!(stored["format"], json!(1));
    assert_eq!(stored["key"], json!(key.to_string()));
    assert_eq!(
        stored["lists"]["resourceTemplates"][0]["uriTemplate"],
        json!("demo://resource/dynamic/text/{index}")
    );
    assert_eq!(
        stored["lists"]["initialize"]["serverInfo"]["name"],
        json!("everything")
    );
    Ok(())
}

#[cfg(unix)]
#[test]
fn files_and_directories_are_private() -> Result {
    use std::os::unix::fs::PermissionsExt;
    let tmp = TempDir::new()?;
    let dir = tmp.path().join("mcpvisor").join("lists");
    let cache = Cache::at(&dir);
    let key = Key::new(&def(), None);
    cache.put(&key, &lists())?;
    let mode =
        |path: &Path| -> Result<u32> { Ok(fs::metadata(path)?.permissions().mode() & 0o777) };
    assert_eq!(mode(&dir)?, 0o700);
    assert_eq!(mode(&tmp.path().join("mcpvisor"))?, 0o700);
    assert_eq!(mode(&dir.join(format!("{key}.json")))?, 0o600);
    Ok(())
}

#[test]
fn no_environment_value_is_written_in_clear() -> Result {
    let tmp = TempDir::new()?;
    let cache = Cache::at(tmp.path());
    let key = Key::new(&def(), None);
    cache.put(&key, &lists())?;
    for name in files(tmp.path())? {
        let text = fs::read_to_string(tmp.path().join(&name))?;
        assert!(
            !name.contains("hunter2") && !text.contains("hunter2"),
            "{name}"
        );
        assert!(!text.contains("API_TOKEN"), "{name}");
    }
    assert!(!format!("{key:?}").contains("hunter2"));
    Ok(())
}

#[test]
fn unusable_files_read_as_absent() -> Result {
    let tmp = TempDir::new()?;
    let cache = Cache::at(tmp.path());
    let key = Key::new(&def(), None);
    let path = tmp.path().join(format!("{key}.json"));
    let good = serde_json::to_string(&Stored {
        format: FORMAT,
        key: key.to_string(),
        lists: &lists(),
    })?;
    let other = Key::new(&def(), mtime(1));
    let cases = [
        String::new(),
        "not json".to_owned(),
        good[..good.len() / 2].to_owned(),
        good.replace("\"format\":1", "\"format\":99"),
        good.replace(&key.to_string(), &other.to_string()),
        json!({"format": 1, "key": key.to_string(), "lists": {"tools": []}}).to_string(),
        "[]".to_owned(),
    ];
    for text in cases {
        fs::write(&path, &text)?;
        assert_eq!(cache.get(&key), None, "{text:.60}");
    }
    fs::write(&path, &good)?;
    assert_eq!(cache.get(&key), Some(lists()));
    // A directory where the file should be.
    fs::remove_file(&path)?;
    fs::create_dir(&path)?;
    assert_eq!(cache.get(&key), None);
    Ok(())
}

#[test]
fn a_cache_that_cannot_be_written_says_so_and_reads_as_empty() -> Result {
    let tmp = TempDir::new()?;
    let blocker = tmp.path().join("file");
    fs::write(&blocker, "")?;
    let cache = Cache::at(blocker.join("lists"));
    let key = Key::new(&def(), None);
    assert!(cache.put(&key, &lists()).is_err());
    assert_eq!(cache.get(&key), None);
    Ok(())
}

#[test]
fn the_key_follows_what_changes_the_lists() {
    let base = Key::new(&def(), mtime(100));
    assert_eq!(base, Key::new(&def(), mtime(100)), "stable");
    assert_eq!(base.to_string().len(), 64);

    let differs = |change: &dyn Fn(&mut ServerDef), when: Option<SystemTime>| {
        let mut changed = def();
        change(&mut changed);
        Key::new(&changed, when) != base
    };
    assert!(differs(&|_| {}, mtime(101)), "entry file modified");
    assert!(differs(&|_| {}, None), "no entry file");
    assert!(differs(&|d| d.command = "node".into(), mtime(100)));
    assert!(differs(&|d| d.args.push("--verbose".into()), mtime(100)));
    assert!(differs(
        &|d| d.args = vec!["-y@modelcontextprotocol/server-everything".into()],
        mtime(100)
    ));
    assert!(differs(
        &|d| {
            d.env.insert("API_TOKEN".into(), "sk-live-other".into());
        },
        mtime(100)
    ));
    assert!(differs(
        &|d| {
            d.env.insert("DEBUG".into(), "1".into());
        },
        mtime(100)
    ));
    assert!(differs(&|d| d.cwd = Some("/srv".into()), mtime(100)));
    assert!(differs(&|d| d.env_file = Some(".env".into()), mtime(100)));

    // Overrides are in the lists kept, so a changed one is a new key.
    assert!(differs(
        &|d| {
            let over = mcpvisor_config::ToolOverride {
                description: Some("Mine.".into()),
                ..Default::default()
            };
            d.tools.overrides.insert("echo".into(), over);
        },
        mtime(100)
    ));

    // What the gateway does with the lists is not part of the key.
    assert!(!differs(&|d| d.name = "renamed".into(), mtime(100)));
    assert!(!differs(
        &|d| {
            d.tools = ToolFilter {
                allow: None,
                deny: vec!["echo".into()],
                ..Default::default()
            };
        },
        mtime(100)
    ));
    assert!(!differs(&|d| d.disabled = true, mtime(100)));
    assert!(!differs(
        &|d| d.supervision.restart = Some(RestartMode::Never),
        mtime(100)
    ));
    assert!(!differs(
        &|d| d.init_timeout = Some(Duration::from_secs(5)),
        mtime(100)
    ));
    assert!(!differs(
        &|d| {
            d.extra.insert("autoApprove".into(), json!([]));
        },
        mtime(100)
    ));
    // Before the epoch is a time too, and not the same as after it.
    let before = Key::new(&def(), UNIX_EPOCH.checked_sub(Duration::from_secs(100)));
    assert_ne!(before, base);
}
