//! Watching a worker's code for hot reload.
//!
//! # Theory of operation
//!
//! [`entry_files`] reads a worker's command line the way its interpreter
//! would (`python -u server.py`, `uv run --with mcp server.py`,
//! `node build/index.js`, `./server`) and names the local files it runs, so
//! `mcpvisor` can watch something sensible when the user names nothing.
//!
//! [`watch`] starts a [`Watcher`] on files and directories. A file is watched
//! through its parent directory, filtered to its name, so a save that writes
//! a temporary file and renames it over the original (vim, "atomic save" in
//! most editors) is seen like any other. A directory is watched recursively,
//! but one directory at a time: version control, caches, dependency trees,
//! `.gitignore`d paths and `--ignore` globs are left out before a watch is
//! ever placed, so `node_modules` costs nothing, and a directory that appears
//! later gets its watch when its creation is seen. The `.gitignore` files are
//! read once, at start.
//!
//! Events are filtered on the backend's thread, so only relevant ones cross
//! the bounded queue into the async side. There a [`debounce::Debouncer`]
//! (a pure state machine, fed timestamps) folds a burst of them into one
//! [`Change`]: it ends when the debounce period passes quietly, or at a hard
//! cap for a burst that never goes quiet. [`Watcher::changed`] is
//! cancel-safe, for a supervisor's `select!` loop. If the queue or the
//! kernel's own queue overflows, events are lost but not the fact that
//! something changed: the burst is reported without those paths.

pub mod debounce;
mod entry;
mod event;
mod filter;
mod watcher;

pub use debounce::{Change, MAX_LISTED};
pub use entry::{SYSTEM_DIRS, entry_files, server_files};
pub use filter::ALWAYS_IGNORED;
pub use watcher::{DEFAULT_DEBOUNCE, MAX_DIRS, WatchConfig, WatchError, Watcher, watch};
