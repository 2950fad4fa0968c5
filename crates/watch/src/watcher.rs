//! The file watcher: roots, the notify backend, and the task-facing stream
//! of debounced changes.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::{Event, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::debounce::{Change, Debouncer};
use crate::event::{Msg, classify};
use crate::filter::Filter;

/// The quiet period that ends a burst when the caller has no opinion.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(300);

/// At most this many directories are watched; past it [`watch`] fails
/// rather than exhaust the system's watch limit on a tree nobody meant.
pub const MAX_DIRS: usize = 10_000;

/// Events queued between the backend's thread and [`Watcher::changed`].
const QUEUE: usize = 1024;

/// What to watch and how.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Files (watched by name) and directories (watched recursively).
    pub paths: Vec<PathBuf>,
    /// `--ignore` globs, matched against the path relative to its watched
    /// directory and against each path component's name.
    pub ignore: Vec<String>,
    /// A burst ends once this long has passed without a relevant event.
    pub debounce: Duration,
    /// Poll at this interval instead of using the OS's change events, for
    /// file systems that have none (network mounts, some containers). Each
    /// poll reads the watched files to compare their contents (the poll
    /// backend sees write times only to the second), so poll a source tree,
    /// not a data directory.
    pub poll: Option<Duration>,
}

impl WatchConfig {
    /// Watches `paths` with the default debounce, no extra ignores, and the
    /// OS's change events.
    pub fn new(paths: Vec<PathBuf>) -> Self {
        Self {
            paths,
            ignore: Vec::new(),
            debounce: DEFAULT_DEBOUNCE,
            poll: None,
        }
    }
}

/// Why watching could not start. Each names the path or glob at fault as the
/// user wrote it.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("nothing to watch: give at least one file or directory")]
    Empty,
    #[error("--watch {}: no such file or directory", path.display())]
    NotFound { path: PathBuf },
    #[error("--watch {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--ignore {glob}: {source}")]
    Glob {
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error(
        "--watch {}: more than {limit} directories below it; watch a narrower path or exclude some with --ignore",
        path.display()
    )]
    TooManyDirs { path: PathBuf, limit: usize },
    #[error(
        "--watch {}: the system's limit on watched directories is reached; raise it (fs.inotify.max_user_watches) or poll instead",
        path.display()
    )]
    WatchLimit { path: PathBuf },
    #[error("--watch {}: {source}", path.display())]
    Notify {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
    #[error("cannot start the file watcher: {0}")]
    Start(#[source] notify::Error),
}

/// Debounced changes under the watched paths. Dropping it stops watching.
pub struct Watcher {
    backend: Box<dyn notify::Watcher + Send>,
    events: mpsc::Receiver<Msg>,
    /// Set by the backend's thread when the queue was full and an event was
    /// dropped: something changed, we no longer know what.
    overflow: Arc<AtomicBool>,
    filter: Arc<Filter>,
    /// Paths with a (non-recursive) watch of ours: directories, and in poll
    /// mode the watched files themselves.
    watched: HashSet<PathBuf>,
    debouncer: Debouncer,
}

/// Starts watching. Every directory to watch is found now, with the
/// `.gitignore` files along the way; later only new directories are added.
pub fn watch(cfg: WatchConfig) -> Result<Watcher, WatchError> {
    let roots = Roots::resolve(&cfg.paths)?;
    let mut filter = Filter::new(roots.files.clone(), roots.dirs.clone(), &cfg.ignore)?;
    let to_watch = plan(&roots, &mut filter, cfg.poll.is_some(), MAX_DIRS)?;
    let filter = Arc::new(filter);

    let (tx, events) = mpsc::channel(QUEUE);
    let overflow = Arc::new(AtomicBool::new(false));
    let handler = {
        let filter = Arc::clone(&filter);
        let overflow = Arc::clone(&overflow);
        move |event: notify::Result<Event>| {
            let msg = match event {
                Ok(event) => match classify(&filter, event) {
                    Some(msg) => msg,
                    None => return,
                },
                Err(err) => Msg::Error(err),
            };
            if let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(msg) {
                overflow.store(true, Ordering::Release);
            }
        }
    };
    let backend: Box<dyn notify::Watcher + Send> = match cfg.poll {
        Some(interval) => {
            // The poll backend sees write times only to the second, so it
            // compares contents too, or a second save within a second is lost.
            let config = notify::Config::default()
                .with_poll_interval(interval)
                .with_compare_contents(true);
            Box::new(notify::PollWatcher::new(handler, config).map_err(WatchError::Start)?)
        }
        None => Box::new(
            notify::RecommendedWatcher::new(handler, notify::Config::default())
                .map_err(WatchError::Start)?,
        ),
    };

    let mut watcher = Watcher {
        backend,
        events,
        overflow,
        filter,
        watched: HashSet::new(),
        debouncer: Debouncer::new(cfg.debounce),
    };
    for path in to_watch {
        if let Err(source) = watcher.add(&path) {
            let path = roots.as_given(&path);
            return Err(match source.kind {
                notify::ErrorKind::MaxFilesWatch => WatchError::WatchLimit { path },
                _ => WatchError::Notify { path, source },
            });
        }
    }
    Ok(watcher)
}

/// The watched paths, canonical, split into files and directories.
#[derive(Debug)]
struct Roots {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    /// Each root's canonical form with the spelling the user gave, for
    /// error messages.
    given: Vec<(PathBuf, PathBuf)>,
}

impl Roots {
    fn resolve(paths: &[PathBuf]) -> Result<Self, WatchError> {
        if paths.is_empty() {
            return Err(WatchError::Empty);
        }
        let mut roots = Self {
            files: Vec::new(),
            dirs: Vec::new(),
            given: Vec::new(),
        };
        for path in paths {
            let io_err = |source: io::Error| match source.kind() {
                io::ErrorKind::NotFound => WatchError::NotFound { path: path.clone() },
                _ => WatchError::Io {
                    path: path.clone(),
                    source,
                },
            };
            let real = path.canonicalize().map_err(io_err)?;
            if real.metadata().map_err(io_err)?.is_dir() {
                roots.dirs.push(real.clone());
            } else {
                roots.files.push(real.clone());
            }
            roots.given.push((real, path.clone()));
        }
        Ok(roots)
    }

    /// The root that `real` (a root, a path below one, or a file root's
    /// directory) belongs to, as the user spelled it.
    fn as_given(&self, real: &Path) -> PathBuf {
        self.given
            .iter()
            .find(|(root, _)| real.starts_with(root) || root.parent() == Some(real))
            .map_or_else(|| real.to_path_buf(), |(_, given)| given.clone())
    }
}

/// Every path to place a watch on, at most `limit`, reading `.gitignore`
/// files into `filter` on the way down.
fn plan(
    roots: &Roots,
    filter: &mut Filter,
    poll: bool,
    limit: usize,
) -> Result<Vec<PathBuf>, WatchError> {
    let mut to_watch: Vec<PathBuf> = Vec::new();
    for file in filter.files() {
        // Events come for names in a directory, so the parent is watched and
        // a file renamed over the original is seen. The poll backend compares
        // the path itself, and so would read every sibling file at each poll
        // if given the parent: it gets the file.
        let target = if poll {
            file.clone()
        } else {
            file.parent().unwrap_or(Path::new("/")).to_path_buf()
        };
        if !to_watch.contains(&target) {
            to_watch.push(target);
        }
    }
    for root in filter.dirs().to_vec() {
        filter.add_enclosing_gitignores(&root);
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            // A directory's own .gitignore applies to what is listed in it.
            filter.add_gitignore(&dir);
            match subdirs(filter, &dir) {
                Ok(listed) => pending.extend(listed),
                Err(source) if dir == root => {
                    let path = roots.as_given(&root);
                    return Err(WatchError::Io { path, source });
                }
                Err(err) => {
                    tracing::warn!("not watching {}: {err}", dir.display());
                    continue;
                }
            }
            to_watch.push(dir);
            if to_watch.len() > limit {
                let path = roots.as_given(&root);
                return Err(WatchError::TooManyDirs { path, limit });
            }
        }
    }
    Ok(to_watch)
}

// === impl Watcher ===

impl Watcher {
    /// The next burst of changes, once it is over. `None` only if the
    /// backend stopped, after which no change will come.
    ///
    /// Cancel-safe: a burst in progress survives the future being dropped,
    /// so this can sit in a `select!` loop.
    pub async fn changed(&mut self) -> Option<Change> {
        loop {
            let deadline = self.debouncer.deadline();
            tokio::select! {
                msg = self.events.recv() => {
                    let Some(msg) = msg else {
                        return self.debouncer.flush();
                    };
                    self.handle(msg);
                    // Checked here too, so a never-ending stream of events
                    // cannot starve the deadline.
                    if let Some(change) = self.debouncer.poll(Instant::now()) {
                        return Some(change);
                    }
                }
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    if let Some(change) = self.debouncer.poll(Instant::now()) {
                        return Some(change);
                    }
                }
            }
        }
    }

    /// How many paths are watched now (each non-recursively): directories,
    /// and in poll mode the watched files too.
    pub fn watch_count(&self) -> usize {
        self.watched.len()
    }

    fn handle(&mut self, msg: Msg) {
        let now = Instant::now();
        match msg {
            Msg::Changed {
                paths,
                new_dirs,
                gone,
            } => {
                for path in &gone {
                    self.watched.retain(|dir| !dir.starts_with(path));
                }
                for dir in new_dirs {
                    self.add_tree(&dir);
                }
                self.debouncer.push(now, paths);
            }
            Msg::Rescan => {
                tracing::warn!("file watcher lost events; treating it as a change");
                self.debouncer.push(now, []);
            }
            Msg::Error(err) => tracing::warn!("file watcher: {err}"),
        }
        if self.overflow.swap(false, Ordering::AcqRel) {
            tracing::warn!("file watcher queue full; treating it as a change");
            self.debouncer.push(now, []);
        }
    }

    /// Watches a directory that appeared, and everything accepted below it.
    /// Files written before its watch took hold are missed, but the
    /// directory's own appearance already counts as a change.
    fn add_tree(&mut self, root: &Path) {
        let mut pending = vec![root.to_path_buf()];
        while let Some(dir) = pending.pop() {
            if self.watched.len() >= MAX_DIRS {
                tracing::warn!(
                    "not watching {}: already watching {MAX_DIRS} directories",
                    dir.display()
                );
                return;
            }
            if let Err(err) = self.add(&dir) {
                tracing::debug!("not watching {}: {err}", dir.display());
                continue;
            }
            match subdirs(&self.filter, &dir) {
                Ok(listed) => pending.extend(listed),
                Err(err) => tracing::debug!("not listing {}: {err}", dir.display()),
            }
        }
    }

    fn add(&mut self, dir: &Path) -> notify::Result<()> {
        // Always asked of the backend, even for a known path: a directory
        // removed and created again needs a new watch.
        self.backend.watch(dir, RecursiveMode::NonRecursive)?;
        self.watched.insert(dir.to_path_buf());
        Ok(())
    }
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("filter", &self.filter)
            .field("watched", &self.watched.len())
            .field("debouncer", &self.debouncer)
            .finish_non_exhaustive()
    }
}

/// The directories directly in `dir` that the filter accepts (symlinks to
/// directories are not followed).
fn subdirs(filter: &Filter, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) && filter.accepts(&path, true) {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planning_is_bounded_and_skips_ignored_trees() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        for dir in ["a/b", "c", "node_modules/x/y", "out/deep", "d"] {
            std::fs::create_dir_all(root.join(dir)).expect("mkdir");
        }
        std::fs::write(root.join(".gitignore"), "out/\n").expect("write");
        std::fs::write(root.join("a/main.py"), "").expect("write");

        let given = PathBuf::from("./proj");
        let roots = Roots {
            files: vec![root.join("a/main.py")],
            dirs: vec![root.clone()],
            given: vec![(root.clone(), given.clone())],
        };
        let fresh = || Filter::new(roots.files.clone(), roots.dirs.clone(), &[]).expect("filter");

        let mut planned = plan(&roots, &mut fresh(), false, 100).expect("plan");
        planned.sort();
        planned.dedup();
        let mut want = vec![root.clone()];
        want.extend(["a", "a/b", "c", "d"].map(|d| root.join(d)));
        assert_eq!(planned, want);

        let err = plan(&roots, &mut fresh(), false, 3).expect_err("over the limit");
        assert!(
            matches!(err, WatchError::TooManyDirs { limit: 3, .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("--watch ./proj: more than 3 directories"),
            "{err}"
        );

        // Polling watches a file itself rather than its directory.
        let planned = plan(&roots, &mut fresh(), true, 100).expect("plan");
        assert!(planned.contains(&root.join("a/main.py")));
    }
}
