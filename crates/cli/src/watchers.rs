//! `serve`'s watching of each server's own files: a debounced change asks
//! the gateway to reload that server ([`Control::Reload`]). The gateway
//! itself watches nothing; the binary wires the watching, as it does for
//! `run`.

use std::collections::HashMap;
use std::path::PathBuf;

use mcpvisor_gateway::{Control, ReloadCause, ServerPlan};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// One watcher per server that asks for it, kept in step with the plans
/// the gateway serves.
#[derive(Debug)]
pub(crate) struct ServerWatchers {
    control: mpsc::Sender<Control>,
    /// By server name: the files watched, and the task watching them.
    by_name: HashMap<String, (Vec<PathBuf>, JoinHandle<()>)>,
}

impl ServerWatchers {
    pub(crate) fn new(control: mpsc::Sender<Control>) -> Self {
        Self {
            control,
            by_name: HashMap::new(),
        }
    }

    /// Watches the files of the servers in `plans` that ask for it, and no
    /// others: a server that is gone (or disabled, or no longer watched)
    /// stops being watched, a new one starts, and one whose entry files
    /// changed is watched anew. Needs a tokio runtime.
    pub(crate) fn follow(&mut self, plans: &[ServerPlan], watch: bool) {
        let mut wanted: HashMap<&str, Vec<PathBuf>> = HashMap::new();
        if watch {
            for plan in plans.iter().filter(|p| !p.def.disabled) {
                let files = mcpvisor_watch::server_files(&plan.def);
                if !files.is_empty() {
                    wanted.insert(&plan.name, files);
                }
            }
        }
        self.by_name.retain(|name, (files, task)| {
            let keep = wanted.get(name.as_str()) == Some(files);
            if !keep {
                task.abort();
            }
            keep
        });
        for (name, files) in wanted {
            if self.by_name.contains_key(name) {
                continue;
            }
            if let Some(task) = watch_server(name, &files, self.control.clone()) {
                self.by_name.insert(name.to_owned(), (files, task));
            }
        }
    }
}

impl Drop for ServerWatchers {
    fn drop(&mut self) {
        for (_, task) in self.by_name.values() {
            task.abort();
        }
    }
}

/// Watches one server's files; each debounced change becomes a reload of
/// that server.
fn watch_server(
    name: &str,
    files: &[PathBuf],
    control: mpsc::Sender<Control>,
) -> Option<JoinHandle<()>> {
    let config = mcpvisor_watch::WatchConfig {
        paths: files.to_vec(),
        ignore: Vec::new(),
        debounce: mcpvisor_watch::DEFAULT_DEBOUNCE,
        poll: None,
    };
    let mut watcher = match mcpvisor_watch::watch(config) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(server = name, "its files are not watched: {e}");
            return None;
        }
    };
    let server = name.to_owned();
    Some(tokio::spawn(async move {
        while let Some(change) = watcher.changed().await {
            let cause = ReloadCause::FilesChanged(files_changed(&change));
            let reload = Control::Reload {
                server: server.clone(),
                cause,
            };
            if control.send(reload).await.is_err() {
                return;
            }
        }
    }))
}

/// Watches the pin store's file; each debounced change asks the gateway to
/// read it again ([`Control::PinsChanged`]). The file exists: `serve`
/// creates it before it starts.
pub(crate) fn watch_pins(
    store: &mcpvisor_gateway::pins::PinStore,
    control: mpsc::Sender<Control>,
) -> Option<JoinHandle<()>> {
    let file = store.file();
    let config = mcpvisor_watch::WatchConfig {
        paths: vec![file],
        ignore: Vec::new(),
        debounce: std::time::Duration::from_millis(100),
        poll: None,
    };
    let mut watcher = match mcpvisor_watch::watch(config) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(
                "the pin store is not watched (approvals made elsewhere are not seen until a restart): {e}"
            );
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while watcher.changed().await.is_some() {
            if control.send(Control::PinsChanged).await.is_err() {
                return;
            }
        }
    }))
}

/// One line on a burst of file changes: the file names (never their
/// folders), and how many more.
fn files_changed(change: &mcpvisor_watch::Change) -> String {
    let names: Vec<String> = change
        .paths
        .iter()
        .take(3)
        .map(|p| {
            p.file_name()
                .unwrap_or(p.as_os_str())
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let more = change.count.saturating_sub(names.len());
    match (names.is_empty(), more) {
        (true, _) => "its files changed".to_owned(),
        (false, 0) => format!("{} changed", names.join(", ")),
        (false, n) => format!("{} and {n} more changed", names.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::files_changed;

    fn change(paths: &[&str], count: usize) -> mcpvisor_watch::Change {
        mcpvisor_watch::Change {
            paths: paths.iter().map(PathBuf::from).collect(),
            count,
        }
    }

    #[test]
    fn a_reload_names_the_files_that_changed_without_their_folders() {
        assert_eq!(
            files_changed(&change(&["/home/me/srv/server.py"], 1)),
            "server.py changed"
        );
        assert_eq!(
            files_changed(&change(
                &["/a/one.py", "/a/two.py", "/a/three.py", "/a/four.py"],
                9
            )),
            "one.py, two.py, three.py and 6 more changed"
        );
        assert_eq!(files_changed(&change(&[], 0)), "its files changed");
    }
}
