//! Where tokens and client registrations live: one JSON file per server
//! under `$XDG_STATE_HOME/mcpvisor/oauth` (`~/.local/state/mcpvisor/oauth`
//! without it), mode 0600 in a 0700 directory, replaced atomically (a
//! temporary file renamed over it), so that a reader never sees half a
//! file and a crash never loses the previous one. Beside each file, a lock
//! file serializes refreshes across processes.
//!
//! Asked for (`oauth.store: "keyring"`, `--token-store keyring`), the
//! tokens and clients go to the OS keyring instead: the Linux kernel's
//! keyutils keyring, which works headless (no D-Bus Secret Service needed)
//! and keeps them in kernel memory until reboot. The server's file then holds
//! only its URL and a mark saying where the rest is, so that `auth status`
//! and the lock file work as before. A keyring that does not work is an
//! error, never a quiet fallback to the file.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::Secret;

/// The longest wait for another process's refresh.
const LOCK_WAIT: Duration = Duration::from_secs(60);
/// Most bytes of a store file.
const FILE_BYTES: u64 = 1 << 20;

/// The token store.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    /// Tokens and clients go to the OS keyring, the file holds a mark.
    keyring: bool,
}

/// The keyring's service name for mcpvisor's entries (one per server, its
/// file's name as the user).
const KEYRING_SERVICE: &str = "mcpvisor-oauth";
/// Set (to anything) in a process's environment, the keyring is taken not
/// to work: the test hook of the not-working path.
const KEYRING_SIMULATE_MISSING: &str = "MCPVISOR_KEYRING_SIMULATE_MISSING";
/// The reason given when a server's file says the keyring holds its tokens
/// and it does not (any more).
pub const KEYRING_LOST: &str =
    "the OS keyring no longer holds its tokens (the kernel keyring is cleared at reboot)";

/// What is kept for one server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredServer {
    /// The server's URL.
    pub server: String,
    /// The clients mcpvisor registered (or was given), by issuer.
    #[serde(default)]
    pub clients: BTreeMap<String, StoredClient>,
    /// The tokens, when authorized.
    pub tokens: Option<StoredTokens>,
    /// In a file: the rest is in the OS keyring.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_keyring: bool,
    /// Why the server must be authorized again, when its tokens were
    /// dropped (a refused refresh); cleared when new tokens come.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A client at one authorization server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredClient {
    /// Its id.
    pub client_id: String,
    /// Its secret, when it has one.
    pub client_secret: Option<Secret>,
    /// How it authenticates at the token endpoint: `none`,
    /// `client_secret_basic` or `client_secret_post`.
    pub auth_method: String,
    /// The redirect URI it was registered with.
    pub redirect_uri: Option<String>,
}

/// Tokens from one issuer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredTokens {
    /// The issuer that gave them.
    pub issuer: String,
    /// The access token.
    pub access_token: Secret,
    /// The refresh token, when one came.
    pub refresh_token: Option<Secret>,
    /// When the access token expires (seconds since the epoch), when said.
    pub expires_at: Option<u64>,
    /// When it was issued (seconds since the epoch).
    #[serde(default)]
    pub issued_at: Option<u64>,
    /// The scopes granted (or asked for, when the answer did not say).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The resource indicator they were asked for.
    pub resource: Option<String>,
}

impl StoredTokens {
    /// Whether the access token is to be refreshed now: it expires within
    /// `margin`, or within a third of its lifetime when that is shorter.
    pub fn needs_refresh(&self, margin: Duration) -> bool {
        let Some(at) = self.expires_at else {
            return false;
        };
        let lifetime = self
            .issued_at
            .map_or(u64::MAX, |issued| at.saturating_sub(issued));
        let margin = Duration::from_secs(margin.as_secs().min(lifetime / 3));
        self.expires_within(margin)
    }

    /// Whether the access token expires within `margin`.
    pub fn expires_within(&self, margin: Duration) -> bool {
        self.expires_at
            .is_some_and(|at| at <= now_secs().saturating_add(margin.as_secs()))
    }
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Held while a process refreshes or authorizes a server; released on drop.
pub type StoreLock = crate::state::FileLock;

impl Store {
    /// The store under `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            keyring: false,
        }
    }

    /// The same store with tokens and clients in the OS keyring, once a
    /// probe entry was written, read back and deleted there; else why not.
    pub fn in_keyring(self) -> Result<Self, String> {
        let simulated = std::env::var_os(KEYRING_SIMULATE_MISSING).is_some();
        self.in_keyring_checked(simulated)
    }

    fn in_keyring_checked(self, simulate_missing: bool) -> Result<Self, String> {
        let probe = || -> Result<(), String> {
            if simulate_missing {
                return Err(format!("{KEYRING_SIMULATE_MISSING} is set"));
            }
            let entry = keyring_entry(&format!("probe-{}", std::process::id()))?;
            entry.set_password("probe").map_err(|e| e.to_string())?;
            let read = entry.get_password().map_err(|e| e.to_string());
            let _ = entry.delete_credential();
            match read? {
                back if back == "probe" => Ok(()),
                _ => Err("it gave back another value than was written".into()),
            }
        };
        probe().map_err(|why| {
            format!(
                "the OS keyring was asked for (oauth.store \"keyring\", --token-store keyring) and does not work: {why}; no token is written to a file instead (without it, tokens are kept in {})",
                self.dir.display()
            )
        })?;
        Ok(Self {
            keyring: true,
            ..self
        })
    }

    /// Whether tokens go to the OS keyring.
    pub fn uses_keyring(&self) -> bool {
        self.keyring
    }

    /// The store in the user's state directory:
    /// `$XDG_STATE_HOME/mcpvisor/oauth`, else
    /// `$HOME/.local/state/mcpvisor/oauth` (see [`crate::state::dir`]).
    pub fn default_location() -> Result<Self, String> {
        Ok(Self::at(crate::state::dir()?.join("oauth")))
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn stem(server: &str) -> String {
        let digest = Sha256::digest(server.as_bytes());
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The file of `server`.
    pub fn file(&self, server: &str) -> PathBuf {
        self.dir.join(format!("{}.json", Self::stem(server)))
    }

    fn ensure_dir(&self) -> Result<(), String> {
        crate::state::ensure_dir(&self.dir)
    }

    /// What is kept for `server`, if anything.
    pub fn load(&self, server: &str) -> Result<Option<StoredServer>, String> {
        let path = self.file(server);
        let loaded = read_file(&path)?.map(from_keyring).transpose()?;
        // A file of another server whose name has the same digest prefix is
        // not ours.
        Ok(loaded.filter(|s| s.server == server))
    }

    /// Writes what is kept for a server, atomically, mode 0600.
    pub fn save(&self, stored: &StoredServer) -> Result<(), String> {
        self.ensure_dir()?;
        let path = self.file(&stored.server);
        let mark;
        let stored = if self.keyring {
            let secret = serde_json::to_string(stored).map_err(|e| e.to_string())?;
            keyring_entry(&Self::stem(&stored.server))?
                .set_password(&secret)
                .map_err(|e| format!("cannot write to the OS keyring: {e}"))?;
            mark = StoredServer {
                server: stored.server.clone(),
                in_keyring: true,
                ..StoredServer::default()
            };
            &mark
        } else {
            stored
        };
        let text = serde_json::to_vec_pretty(stored).map_err(|e| e.to_string())?;
        crate::state::write_atomic(&path, &text)
    }

    /// Forgets a server's tokens and clients; whether there was anything.
    pub fn forget(&self, server: &str) -> Result<bool, String> {
        if self.load(server)?.is_none() {
            return Ok(false);
        }
        let path = self.file(server);
        if read_file(&path)?.is_some_and(|s| s.in_keyring) {
            match keyring_entry(&Self::stem(server))?.delete_credential() {
                Ok(()) | Err(keyring::Error::NoEntry) => {}
                Err(e) => return Err(format!("cannot delete from the OS keyring: {e}")),
            }
        }
        fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
        let _ = fs::remove_file(path.with_extension("lock"));
        Ok(true)
    }

    /// Every server something is kept for.
    pub fn list(&self) -> Result<Vec<StoredServer>, String> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot read {}: {e}", self.dir.display())),
        };
        let mut servers = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                if let Ok(Some(server)) =
                    read_file(&path).and_then(|s| s.map(from_keyring).transpose())
                {
                    servers.push(server);
                }
            }
        }
        servers.sort_by(|a, b| a.server.cmp(&b.server));
        Ok(servers)
    }

    /// Takes the lock of `server` (every mcpvisor process on the machine
    /// takes it to refresh or store its tokens), waiting a bounded time for
    /// another holder.
    pub async fn lock(&self, server: &str) -> Result<StoreLock, String> {
        self.ensure_dir()?;
        let path = self.file(server).with_extension("lock");
        crate::state::lock(&path, LOCK_WAIT).await
    }
}

/// The keyring's entry for a server's file stem.
fn keyring_entry(user: &str) -> Result<keyring::Entry, String> {
    #[cfg(target_os = "linux")]
    {
        let credential =
            keyring::keyutils::KeyutilsCredential::new_with_target(None, KEYRING_SERVICE, user)
                .map_err(|e| e.to_string())?;
        Ok(keyring::Entry::new_with_credential(Box::new(credential)))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = user;
        Err("mcpvisor keeps tokens in the OS keyring on Linux only (the kernel keyring)".into())
    }
}

/// What a file read says is kept for its server: the file itself, or, for
/// a mark, what the keyring holds (a server whose keyring entry is gone is
/// not authorized, and says why).
fn from_keyring(file: StoredServer) -> Result<StoredServer, String> {
    if !file.in_keyring {
        return Ok(file);
    }
    match keyring_entry(&Store::stem(&file.server))?.get_password() {
        Ok(text) => {
            let mut stored: StoredServer = serde_json::from_str(&text)
                .map_err(|e| format!("the OS keyring's entry is not a token store entry: {e}"))?;
            stored.in_keyring = false;
            Ok(stored)
        }
        Err(keyring::Error::NoEntry) => Ok(StoredServer {
            server: file.server,
            reason: Some(KEYRING_LOST.to_owned()),
            ..StoredServer::default()
        }),
        Err(e) => Err(format!("cannot read the OS keyring: {e}")),
    }
}

fn read_file(path: &Path) -> Result<Option<StoredServer>, String> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > FILE_BYTES {
        return Err(format!("{} is over {FILE_BYTES} bytes", path.display()));
    }
    let text = fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| format!("{} is not a token file: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn tokens(access: &str) -> StoredTokens {
        StoredTokens {
            issuer: "https://as.example".into(),
            access_token: Secret::new(access),
            refresh_token: Some(Secret::new("r1")),
            expires_at: Some(now_secs() + 30),
            issued_at: None,
            scopes: vec!["a".into()],
            resource: None,
        }
    }

    #[test]
    fn saves_atomically_with_mode_0600_and_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::at(dir.path().join("oauth"));
        let server = "https://mcp.example/mcp";
        assert_eq!(store.load(server).expect("load"), None);
        let stored = StoredServer {
            server: server.into(),
            clients: BTreeMap::new(),
            tokens: Some(tokens("a1")),
            reason: None,
            in_keyring: false,
        };
        store.save(&stored).expect("save");
        let mode = fs::metadata(store.file(server))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = fs::metadata(store.dir())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(store.load(server).expect("load"), Some(stored.clone()));
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(store.dir())
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert_eq!(store.list().expect("list"), vec![stored]);
        assert!(store.forget(server).expect("forget"));
        assert!(!store.forget(server).expect("forget again"));
        assert_eq!(store.load(server).expect("load"), None);
    }

    #[test]
    fn expiry_margin() {
        let t = tokens("a");
        assert!(t.expires_within(Duration::from_secs(60)));
        assert!(!t.expires_within(Duration::from_secs(5)));
        let forever = StoredTokens {
            expires_at: None,
            ..t
        };
        assert!(!forever.expires_within(Duration::from_secs(3600)));
        assert!(!forever.needs_refresh(Duration::from_secs(3600)));
        // A short-lived token is refreshed in the last third of its life.
        let short = StoredTokens {
            issued_at: Some(now_secs()),
            expires_at: Some(now_secs() + 9),
            ..forever
        };
        assert!(!short.needs_refresh(Duration::from_secs(60)));
        let late = StoredTokens {
            issued_at: Some(now_secs() - 7),
            expires_at: Some(now_secs() + 2),
            ..short
        };
        assert!(late.needs_refresh(Duration::from_secs(60)));
    }

    #[tokio::test]
    async fn the_lock_is_exclusive_until_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::at(dir.path());
        let held = store.lock("s").await.expect("lock");
        let other = store.clone();
        let waiter = tokio::spawn(async move { other.lock("s").await.map(drop) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "a second holder got the lock");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("bounded")
            .expect("join")
            .expect("second lock");
    }

    /// A server URL of this test run's own, so that runs never share a
    /// keyring entry.
    fn unique_server() -> String {
        format!(
            "https://keyring-{}-{}.example/mcp",
            std::process::id(),
            now_secs()
        )
    }

    #[test]
    fn the_keyring_holds_the_tokens_and_the_file_only_a_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = match Store::at(dir.path().join("oauth")).in_keyring() {
            Ok(store) => store,
            Err(why) => {
                eprintln!("skipped: the kernel keyring does not work here: {why}");
                return;
            }
        };
        let server = unique_server();
        let mut stored = StoredServer {
            server: server.clone(),
            tokens: Some(StoredTokens {
                refresh_token: Some(Secret::new("refresh-in-keyring-0123")),
                ..tokens("access-in-keyring-0123")
            }),
            ..StoredServer::default()
        };
        store.save(&stored).expect("save");
        let file = fs::read_to_string(store.file(&server)).expect("the mark file");
        assert!(
            !file.contains("in-keyring-0123"),
            "a token in the file: {file}"
        );
        assert!(file.contains("\"in_keyring\": true"), "{file}");
        // Read back through the keyring, by this store and by a plain one
        // (`auth status` opens the store without asking for the keyring).
        assert_eq!(store.load(&server).expect("load"), Some(stored.clone()));
        let plain = Store::at(dir.path().join("oauth"));
        assert_eq!(plain.load(&server).expect("load"), Some(stored.clone()));
        assert_eq!(plain.list().expect("list"), vec![stored.clone()]);
        // A new token replaces the entry.
        stored.tokens = Some(tokens("access-in-keyring-4567"));
        store.save(&stored).expect("save again");
        assert_eq!(store.load(&server).expect("load"), Some(stored.clone()));
        // The entry gone (a reboot): not authorized, and saying why.
        keyring_entry(&Store::stem(&server))
            .expect("entry")
            .delete_credential()
            .expect("delete");
        let lost = store.load(&server).expect("load").expect("the mark");
        assert_eq!(lost.tokens, None);
        assert_eq!(lost.reason.as_deref(), Some(KEYRING_LOST));
        // Forgetting removes the entry and the file.
        store.save(&stored).expect("save");
        assert!(store.forget(&server).expect("forget"));
        assert!(!store.file(&server).exists());
        assert!(matches!(
            keyring_entry(&Store::stem(&server))
                .expect("entry")
                .get_password(),
            Err(keyring::Error::NoEntry)
        ));
    }

    #[test]
    fn a_keyring_that_does_not_work_is_an_error_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Store::at(dir.path().join("oauth"))
            .in_keyring_checked(true)
            .expect_err("refused");
        assert!(
            err.contains("OS keyring") && err.contains("does not work"),
            "{err}"
        );
        assert!(err.contains("no token is written to a file"), "{err}");
        assert!(!dir.path().join("oauth").exists(), "nothing was written");
    }
}
