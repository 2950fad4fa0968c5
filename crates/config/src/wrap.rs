//! Putting `mcpvisor run --` in front of a config file's servers, and
//! taking it away again.
//!
//! [`wrap`] turns an entry's `"command": "npx", "args": ["-y", "pkg"]` into
//! `"command": "/path/to/mcpvisor", "args": ["run", "--", "npx", "-y",
//! "pkg"]` by changing the command's token and inserting three items at the
//! front of the array (or adding the array after the command when there is
//! none). Nothing else in the file moves: comments, key order, spacing,
//! unknown fields and the other entries stay byte for byte, in JSON (with
//! comments) and TOML alike. Remote (`url`) entries, entries of other
//! transports and entries that already run mcpvisor are left alone.
//!
//! [`unwrap`] is the inverse edit, made only where [`wrap`] made it: a
//! backup that [`write()`] keeps next to the file before every change
//! (`FILE.mcpvisor-N.bak`) must hold the entry as it was, unwrapped, with
//! the command and arguments the wrapped entry still runs. An entry wrapped
//! by hand, or whose arguments were edited since, is left as it is; an
//! entry whose other fields were edited since keeps those edits. Unwrapping
//! right after wrapping gives back the original file byte for byte.
//!
//! Every change is checked before it is offered: the new text must load,
//! and every entry must read as expected (the wrapped ones with the new
//! command line, all others exactly as before). A file that does not load
//! is refused with its one-line [`ConfigError`].

mod spans;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::edit::{self, EditError};
use crate::server::{self, ConfigEntry, ConfigError, ConfigFile, ServerDef, document};
use spans::EntrySpans;

/// A wrap or unwrap that was not done; the file is as it was.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    /// The file cannot be read, does not load, or cannot be written.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Writing failed.
    #[error(transparent)]
    Edit(#[from] EditError),
    /// The edit could not be made without changing something else.
    #[error("{}: {message}; nothing was changed", path.display())]
    Layout {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The file changed between reading and writing.
    #[error("{}: the file changed while it was being edited; run the command again", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// The backup could not be written, so the file was not changed.
    #[error("{}: cannot write a backup: {error}; nothing was changed", path.display())]
    Backup {
        /// The backup that could not be written.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
}

/// One file's text before and after a wrap or unwrap, with what happened to
/// each entry. Nothing is written until [`write()`].
#[derive(Debug, Clone)]
pub struct Change {
    /// The file, as given.
    pub path: PathBuf,
    /// Its text as read.
    pub before: String,
    /// Its text after the change (equal to `before` when nothing changes).
    pub after: String,
    /// Each entry considered, in the file's order.
    pub entries: Vec<EntryOutcome>,
}

/// What a wrap or unwrap did with one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryOutcome {
    /// The entry's name.
    pub name: String,
    /// What happened.
    pub outcome: Outcome,
}

/// What happened to one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Now runs under `mcpvisor run --`.
    Wrapped,
    /// Runs its own command again.
    Unwrapped,
    /// Left alone: it runs mcpvisor already.
    RunsMcpvisor,
    /// Left alone: a remote server (`url`).
    Remote,
    /// Left alone: a transport mcpvisor does not run (`"type": "ws"`, ...).
    OtherTransport(String),
    /// Left alone by unwrap: it is not wrapped.
    NotWrapped,
    /// Left alone by unwrap: it is wrapped, but no backup shows that
    /// `wrap` did it with these arguments (wrapped by hand, or edited
    /// since).
    NotWrappedByWrap,
}

impl Change {
    /// Whether the file would change.
    pub fn changed(&self) -> bool {
        self.before != self.after
    }

    /// The entries that had `outcome`.
    pub fn with(&self, outcome: &Outcome) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|entry| entry.outcome == *outcome)
            .map(|entry| entry.name.as_str())
            .collect()
    }
}

/// Whether `def` starts mcpvisor itself (any subcommand).
pub fn runs_mcpvisor(def: &ServerDef) -> bool {
    let program = Path::new(&def.command).file_name();
    program.is_some_and(|name| name == "mcpvisor")
}

/// Whether `def` is in the form [`wrap`] writes: `mcpvisor run -- CMD ...`.
fn wrapped_form(def: &ServerDef) -> bool {
    runs_mcpvisor(def) && def.args.len() >= 3 && def.args[0] == "run" && def.args[1] == "--"
}

/// The change that puts `program run --` in front of every stdio entry of
/// the file at `path` (those named in `only`, when given).
pub fn wrap(path: &Path, program: &str, only: Option<&[String]>) -> Result<Change, WrapError> {
    let open = Open::read(path)?;
    let program_token = serde_json::to_string(program).map_err(|e| open.layout(e.to_string()))?;
    let mut edits = Vec::new();
    let mut expected = BTreeMap::new();
    let mut entries = Vec::new();
    for entry in open.file.entries() {
        let name = entry_name(entry);
        if !wanted(only, name) {
            continue;
        }
        let outcome = match entry {
            ConfigEntry::Unsupported(other) => Outcome::OtherTransport(other.transport.clone()),
            ConfigEntry::Stdio(def) if def.is_remote() => Outcome::Remote,
            ConfigEntry::Stdio(def) if runs_mcpvisor(def) => Outcome::RunsMcpvisor,
            ConfigEntry::Stdio(def) => {
                let spans = open.spans_of(name)?;
                wrap_edits(&open.text, spans, &program_token, &mut edits);
                let mut args = vec!["run".to_owned(), "--".to_owned(), def.command.clone()];
                args.extend(def.args.iter().cloned());
                expected.insert(name.to_owned(), (program.to_owned(), args));
                Outcome::Wrapped
            }
        };
        entries.push(EntryOutcome {
            name: name.to_owned(),
            outcome,
        });
    }
    open.finish(edits, &expected, entries)
}

/// The change that undoes [`wrap`] on the file at `path` (on the entries
/// named in `only`, when given), where a backup shows `wrap` made it.
pub fn unwrap(path: &Path, only: Option<&[String]>) -> Result<Change, WrapError> {
    let open = Open::read(path)?;
    // Older states of the file, newest first; one that no longer loads
    // cannot say anything and is passed over.
    let mut earlier = Vec::new();
    for backup in backups(path)? {
        let Ok(text) = std::fs::read_to_string(&backup) else {
            continue;
        };
        let Ok(file) = server::parse(&text, path) else {
            continue;
        };
        let format = document::detect(path, &text);
        let Ok(spans) = spans::locate(&text, format, file.dialect()) else {
            continue;
        };
        earlier.push((file, spans));
    }

    let mut edits = Vec::new();
    let mut expected = BTreeMap::new();
    let mut entries = Vec::new();
    for entry in open.file.entries() {
        let name = entry_name(entry);
        if !wanted(only, name) {
            continue;
        }
        let outcome = match entry {
            ConfigEntry::Stdio(def) if wrapped_form(def) => {
                // The newest backup that holds this entry unwrapped, running
                // what the wrapped entry runs.
                let original = earlier.iter().find_map(|(file, spans)| {
                    let old = file.get(name).ok()?;
                    let same = !old.is_remote()
                        && !runs_mcpvisor(old)
                        && old.command == def.args[2]
                        && old.args == def.args[3..];
                    same.then(|| (old, spans.get(name).is_some_and(|s| s.args.is_some())))
                });
                match original {
                    Some((old, had_args)) => {
                        let spans = open.spans_of(name)?;
                        unwrap_edits(&open.text, spans, had_args, &mut edits).map_err(
                            |message| open.layout(format!("server {name:?}: {message}")),
                        )?;
                        expected.insert(name.to_owned(), (old.command.clone(), old.args.clone()));
                        Outcome::Unwrapped
                    }
                    None => Outcome::NotWrappedByWrap,
                }
            }
            _ => Outcome::NotWrapped,
        };
        entries.push(EntryOutcome {
            name: name.to_owned(),
            outcome,
        });
    }
    open.finish(edits, &expected, entries)
}

/// Writes `change`: first a backup of the file as it was, next to it, then
/// the new text, atomically. Returns the backup's path, or `None` when
/// there was nothing to change or the file is new (`before` empty and no
/// file there: it is created, readable by its owner only). Refused when the file changed since
/// `change` was made.
pub fn write(change: &Change) -> Result<Option<PathBuf>, WrapError> {
    if !change.changed() {
        return Ok(None);
    }
    let real = real_path(&change.path);
    let now = match std::fs::read_to_string(&real) {
        // A new file: nothing to back up.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && change.before.is_empty() => {
            if let Some(dir) = real.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|error| EditError::Write {
                    path: dir.to_owned(),
                    error,
                })?;
            }
            edit::write_atomic(&real, change.after.as_bytes(), Some(0o600))?;
            return Ok(None);
        }
        now => now.map_err(|error| ConfigError::Read {
            path: change.path.clone(),
            error,
        })?,
    };
    if now != change.before {
        return Err(WrapError::Changed {
            path: change.path.clone(),
        });
    }
    let backup = write_backup(&real, change.before.as_bytes())?;
    edit::write_atomic(&real, change.after.as_bytes(), None)?;
    Ok(Some(backup))
}

/// The backups [`write()`] left next to the file at `path`, newest first.
pub fn backups(path: &Path) -> Result<Vec<PathBuf>, WrapError> {
    let real = real_path(path);
    let (dir, name) = dir_and_name(&real);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(ConfigError::Read {
                path: dir.clone(),
                error,
            }
            .into());
        }
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file_name = entry.file_name();
            let number = backup_number(file_name.to_str()?, &name)?;
            Some((number, entry.path()))
        })
        .collect();
    found.sort_by_key(|(number, _)| std::cmp::Reverse(*number));
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

// === the edits ===

fn wrap_edits(
    text: &str,
    spans: &EntrySpans,
    program_token: &str,
    edits: &mut Vec<(Range<usize>, String)>,
) {
    let command = &text[spans.command.clone()];
    let prefix = format!("\"run\", \"--\", {command}");
    edits.push((spans.command.clone(), program_token.to_owned()));
    match &spans.args {
        Some(args) => match args.items.first() {
            Some(first) => edits.push((first.start..first.start, format!("{prefix}, "))),
            None => {
                let at = args.whole.start + 1;
                edits.push((at..at, prefix));
            }
        },
        None => edits.push((
            spans.insert_at..spans.insert_at,
            spans.style.new_field(&prefix),
        )),
    }
}

fn unwrap_edits(
    text: &str,
    spans: &EntrySpans,
    had_args: bool,
    edits: &mut Vec<(Range<usize>, String)>,
) -> Result<(), String> {
    let args = spans
        .args
        .as_ref()
        .filter(|args| args.items.len() >= 3)
        .ok_or("its args are not where they were read")?;
    let items = &args.items;
    edits.push((spans.command.clone(), text[items[2].clone()].to_owned()));
    match items.get(3) {
        Some(fourth) => edits.push((items[0].start..fourth.start, String::new())),
        None => {
            // The three items are all there is: the field goes if `wrap`
            // added it and it is still as written, else the array empties.
            let added = spans.style.new_field(&text[items[0].start..items[2].end]);
            let field = spans.insert_at..args.whole.end;
            let whole_field = !had_args && text.get(field.clone()) == Some(added.as_str());
            if whole_field {
                edits.push((field, String::new()));
            } else {
                edits.push((items[0].start..items[2].end, String::new()));
            }
        }
    }
    Ok(())
}

/// Applies non-overlapping `edits` to `text`.
fn apply(text: &str, mut edits: Vec<(Range<usize>, String)>) -> Option<String> {
    edits.sort_by_key(|(range, _)| (range.start, range.end));
    let mut out = String::with_capacity(text.len() + 64 * edits.len());
    let mut at = 0;
    for (range, replacement) in edits {
        if range.start < at {
            return None;
        }
        out.push_str(text.get(at..range.start)?);
        out.push_str(&replacement);
        at = range.end;
    }
    out.push_str(text.get(at..)?);
    Some(out)
}

// === a file open for a change ===

struct Open {
    path: PathBuf,
    text: String,
    file: ConfigFile,
    spans: BTreeMap<String, EntrySpans>,
}

impl Open {
    fn read(path: &Path) -> Result<Open, WrapError> {
        let text = std::fs::read_to_string(real_path(path)).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        let file = server::parse(&text, path)?;
        let format = document::detect(path, &text);
        let spans =
            spans::locate(&text, format, file.dialect()).map_err(|message| WrapError::Layout {
                path: path.to_owned(),
                message,
            })?;
        Ok(Open {
            path: path.to_owned(),
            text,
            file,
            spans,
        })
    }

    fn layout(&self, message: String) -> WrapError {
        WrapError::Layout {
            path: self.path.clone(),
            message,
        }
    }

    fn spans_of(&self, name: &str) -> Result<&EntrySpans, WrapError> {
        self.spans
            .get(name)
            .ok_or_else(|| self.layout(format!("server {name:?}: its command was not found")))
    }

    /// Applies `edits` and checks the result: it loads, the entries in
    /// `expected` run (command, args) as given, every other entry reads
    /// exactly as before.
    fn finish(
        self,
        edits: Vec<(Range<usize>, String)>,
        expected: &BTreeMap<String, (String, Vec<String>)>,
        entries: Vec<EntryOutcome>,
    ) -> Result<Change, WrapError> {
        let after = apply(&self.text, edits)
            .ok_or_else(|| self.layout("two edits of the file overlap".to_owned()))?;
        let reloaded = server::parse(&after, &self.path)
            .map_err(|e| self.layout(format!("the edited file would not load ({e})")))?;
        let before: Vec<ConfigEntry<'_>> = self.file.entries().collect();
        let now: Vec<ConfigEntry<'_>> = reloaded.entries().collect();
        let same_names = before.len() == now.len()
            && before
                .iter()
                .zip(&now)
                .all(|(a, b)| entry_name(*a) == entry_name(*b));
        if !same_names {
            return Err(self.layout("the edit would change which servers the file has".into()));
        }
        for (old, new) in before.iter().zip(&now) {
            let name = entry_name(*old);
            let ok = match (expected.get(name), old, new) {
                (Some((command, args)), ConfigEntry::Stdio(old), ConfigEntry::Stdio(new)) => {
                    let mut want = (*old).clone();
                    want.command = command.clone();
                    want.args = args.clone();
                    **new == want
                }
                (Some(_), _, _) => false,
                (None, old, new) => old == new,
            };
            if !ok {
                return Err(self.layout(format!(
                    "server {name:?} would not read as intended after the edit"
                )));
            }
        }
        Ok(Change {
            path: self.path,
            before: self.text,
            after,
            entries,
        })
    }
}

fn entry_name(entry: ConfigEntry<'_>) -> &str {
    match entry {
        ConfigEntry::Stdio(def) => &def.name,
        ConfigEntry::Unsupported(other) => &other.name,
    }
}

fn wanted(only: Option<&[String]>, name: &str) -> bool {
    only.is_none_or(|only| only.iter().any(|n| n == name))
}

// === backups ===

fn real_path(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

fn dir_and_name(real: &Path) -> (PathBuf, String) {
    let dir = match real.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = real
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}

/// `N` of `{name}.mcpvisor-N.bak`.
fn backup_number(file_name: &str, name: &str) -> Option<u64> {
    let number = file_name
        .strip_prefix(name)?
        .strip_prefix(".mcpvisor-")?
        .strip_suffix(".bak")?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse().ok()
}

/// Writes `bytes` as the next backup of `real` (which keeps the file's
/// mode: a config with secrets in its `env` stays private).
fn write_backup(real: &Path, bytes: &[u8]) -> Result<PathBuf, WrapError> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let (dir, name) = dir_and_name(real);
    let mode = std::fs::metadata(real)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0o600);
    let next = backups(real)?
        .first()
        .and_then(|newest| {
            newest
                .file_name()?
                .to_str()
                .and_then(|n| backup_number(n, &name))
        })
        .map_or(1, |n| n + 1);
    // A backup written by another run at the same moment takes its number;
    // this one takes the next.
    for number in next..next + 100 {
        let path = dir.join(format!("{name}.mcpvisor-{number}.bak"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path);
        let mut file = match file {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(WrapError::Backup { path, error }),
        };
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        return match written {
            Ok(()) => Ok(path),
            Err(error) => {
                let _ = std::fs::remove_file(&path);
                Err(WrapError::Backup { path, error })
            }
        };
    }
    Err(WrapError::Backup {
        path: dir.join(format!("{name}.mcpvisor-{next}.bak")),
        error: std::io::Error::other("too many backups"),
    })
}
