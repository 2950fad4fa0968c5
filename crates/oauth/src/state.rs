//! mcpvisor's state directory and the way its files are written: where it
//! is (`$XDG_STATE_HOME/mcpvisor`, else `~/.local/state/mcpvisor`), a lock
//! file that serializes a read-modify-write across processes, and a write
//! that replaces a file atomically with mode 0600 in a 0700 directory.
//! The token store ([`crate::store`]) and the gateway's pin store keep
//! their files this way.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

/// mcpvisor's directory under the user's state directory:
/// `$XDG_STATE_HOME/mcpvisor`, else `$HOME/.local/state/mcpvisor`.
pub fn dir() -> Result<PathBuf, String> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".local/state"))
        })
        .ok_or("neither XDG_STATE_HOME nor HOME is set to an absolute path")?;
    Ok(state.join("mcpvisor"))
}

/// Creates `dir` (and its parents) and restricts it to its owner.
pub fn ensure_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))
}

/// Replaces `path` with `bytes`: written to a temporary file in the same
/// directory (mode 0600), synced, and renamed over it, so that a reader
/// never sees half a file and a crash never loses the previous one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path
        .parent()
        .ok_or_else(|| format!("{} has no directory", path.display()))?;
    ensure_dir(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| format!("cannot replace {}: {}", path.display(), e.error))?;
    Ok(())
}

/// An exclusive lock on a lock file, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    _lock: Flock<File>,
}

/// Takes the exclusive lock of the lock file `path` (created, mode 0600,
/// with its directory), waiting up to `wait` for another holder, in this
/// process or another: every writer of a state file takes it around its
/// read-modify-write.
pub async fn lock(path: &Path, wait: Duration) -> Result<FileLock, String> {
    if let Some(dir) = path.parent() {
        ensure_dir(dir)?;
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(FileLock { _lock: lock }),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!(
                        "another mcpvisor process has held {} for {wait:?}",
                        path.display()
                    ));
                }
                file = back;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err((_, errno)) => return Err(format!("cannot lock {}: {errno}", path.display())),
        }
    }
}
