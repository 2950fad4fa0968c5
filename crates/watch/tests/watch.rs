//! The watcher against real files in a temporary directory.
//!
//! Every wait is bounded. The only sleeps are the gaps inside a save storm
//! and waits that prove nothing arrives, which must outlast the debounce.

use std::path::PathBuf;
use std::time::Duration;

use mcpvisor_watch::{Change, WatchConfig, WatchError, Watcher, watch};
use tokio::time::timeout;

const DEBOUNCE: Duration = Duration::from_millis(250);
/// Long enough for any event to arrive, be debounced and be reported.
const ARRIVAL: Duration = Duration::from_secs(5);
/// How long "nothing happens" is watched for: the debounce and a margin.
const SILENCE: Duration = Duration::from_millis(750);

struct Dir {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Dir {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        Self { _tmp: tmp, root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn write(&self, rel: &str, content: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, content).expect("write");
        path
    }

    fn watch(&self, paths: &[&str], ignore: &[&str]) -> Watcher {
        watch(self.config(paths, ignore)).expect("watch starts")
    }

    fn config(&self, paths: &[&str], ignore: &[&str]) -> WatchConfig {
        WatchConfig {
            paths: paths.iter().map(|p| self.path(p)).collect(),
            ignore: ignore.iter().map(|s| s.to_string()).collect(),
            debounce: DEBOUNCE,
            poll: None,
        }
    }
}

async fn next(watcher: &mut Watcher) -> Change {
    timeout(ARRIVAL, watcher.changed())
        .await
        .expect("a change within the bound")
        .expect("the watcher is running")
}

async fn assert_quiet(watcher: &mut Watcher) {
    if let Ok(change) = timeout(SILENCE, watcher.changed()).await {
        panic!("expected no change, got {change:?}");
    }
}

#[tokio::test]
async fn save_storm_is_one_change() {
    let dir = Dir::new();
    let file = dir.write("server.py", "v0");
    let mut watcher = dir.watch(&["."], &[]);

    for i in 0..20 {
        std::fs::write(&file, format!("v{i}")).expect("write");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let change = next(&mut watcher).await;
    assert_eq!(change.paths, vec![file]);
    assert_eq!(change.count, 1);
    assert_quiet(&mut watcher).await;
}

#[tokio::test]
async fn rename_over_a_watched_file_is_seen_every_time() {
    let dir = Dir::new();
    let file = dir.write("server.py", "v0");
    dir.write("other.py", "");
    let mut watcher = dir.watch(&["server.py"], &[]);

    for round in 1..=2 {
        // What vim and "atomic save" do: write elsewhere, rename over.
        let tmp = dir.write(".server.py.tmp", &format!("v{round}"));
        std::fs::rename(&tmp, &file).expect("rename over");
        let change = next(&mut watcher).await;
        assert_eq!(change.paths, vec![file.clone()], "round {round}");
    }

    // A sibling of the watched file is not watched.
    dir.write("other.py", "changed");
    assert_quiet(&mut watcher).await;
}

#[tokio::test]
async fn ignored_paths_make_no_change() {
    let dir = Dir::new();
    dir.write(".gitignore", "*.log\n/build/\n");
    dir.write("pkg/.gitignore", "local.py\n");
    dir.write("pkg/mod.py", "");
    dir.write("build/out.js", "");
    let keep = dir.write("server.py", "");
    let mut watcher = dir.watch(&["."], &["*.tmp", "docs/**"]);

    for rel in [
        "app.log",
        "pkg/local.py",
        "build/out.js",
        "x.tmp",
        "docs/a/b.md",
        "__pycache__/server.cpython-312.pyc",
        "pkg/__pycache__/mod.cpython-312.pyc",
        "node_modules/a/index.js",
        ".git/index",
        ".server.py.swp",
        "server.py~",
        "4913",
    ] {
        dir.write(rel, "ignored");
    }
    assert_quiet(&mut watcher).await;

    // Still alive, and none of the above leaked into this burst.
    std::fs::write(&keep, "changed").expect("write");
    let change = next(&mut watcher).await;
    assert_eq!(change.paths, vec![keep]);
}

#[tokio::test]
async fn new_directories_are_watched() {
    let dir = Dir::new();
    let mut watcher = dir.watch(&["."], &[]);

    std::fs::create_dir(dir.path("pkg")).expect("mkdir");
    let change = next(&mut watcher).await;
    assert_eq!(change.paths, vec![dir.path("pkg")]);

    let file = dir.write("pkg/new.py", "");
    let change = next(&mut watcher).await;
    assert_eq!(change.paths, vec![file]);
}

#[tokio::test]
async fn poll_mode_sees_changes() {
    let dir = Dir::new();
    let file = dir.write("src/server.py", "v0");
    let mut cfg = dir.config(&["src"], &[]);
    cfg.poll = Some(Duration::from_millis(50));
    let mut watcher = watch(cfg).expect("watch starts");

    // Twice within the same second: the poller compares contents.
    for round in 1..=2 {
        std::fs::write(&file, format!("v{round}")).expect("write");
        let change = next(&mut watcher).await;
        assert_eq!(change.paths, vec![file.clone()], "round {round}");
    }
}

#[tokio::test]
async fn poll_mode_sees_a_rename_over_a_watched_file() {
    let dir = Dir::new();
    let file = dir.write("server.py", "v0");
    let mut cfg = dir.config(&["server.py"], &[]);
    cfg.poll = Some(Duration::from_millis(50));
    let mut watcher = watch(cfg).expect("watch starts");
    assert_eq!(
        watcher.watch_count(),
        1,
        "the file itself, not its directory"
    );

    let tmp = dir.write("server.py.new", "v1");
    std::fs::rename(&tmp, &file).expect("rename over");
    let change = next(&mut watcher).await;
    assert_eq!(change.paths, vec![file]);
}

#[test]
fn errors_name_the_path() {
    let err = watch(WatchConfig::new(vec![PathBuf::from("./nope")])).expect_err("missing path");
    assert!(matches!(err, WatchError::NotFound { .. }));
    assert_eq!(err.to_string(), "--watch ./nope: no such file or directory");

    let dir = Dir::new();
    let mut cfg = dir.config(&["."], &["a{"]);
    cfg.paths = vec![dir.root.clone()];
    let err = watch(cfg).expect_err("bad glob");
    assert!(err.to_string().starts_with("--ignore a{: "), "{err}");

    assert!(matches!(
        watch(WatchConfig::new(Vec::new())),
        Err(WatchError::Empty)
    ));
}
