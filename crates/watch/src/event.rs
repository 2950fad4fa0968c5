//! Backend events: which kinds count, and filtering them down to what the
//! async side needs, on the backend's own thread.

use std::path::PathBuf;

use notify::event::{
    AccessKind, AccessMode, CreateKind, MetadataKind, ModifyKind, RemoveKind, RenameMode,
};
use notify::{Event, EventKind};

use crate::filter::Filter;

/// What the backend's thread hands over, already filtered.
#[derive(Debug)]
pub enum Msg {
    Changed {
        paths: Vec<PathBuf>,
        /// Accepted directories that just appeared and need watches.
        new_dirs: Vec<PathBuf>,
        /// Accepted paths that went away.
        gone: Vec<PathBuf>,
    },
    /// The backend lost events (kernel queue overflow).
    Rescan,
    Error(notify::Error),
}

/// How an event kind bears on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// The path's content changed (or may have).
    Content,
    /// The path appeared (created, or renamed to).
    Appeared,
    /// The path went away (removed, or renamed from).
    Gone,
    /// A rename whose direction the backend did not say.
    Renamed,
}

impl Effect {
    /// Only content-relevant kinds count: not reads, not permission or
    /// ownership changes. A write time change counts, as that is how the
    /// poll backend reports writes, and so does closing a file opened for
    /// writing (`touch`, and the end of most saves).
    fn of(kind: &EventKind) -> Option<Self> {
        Some(match kind {
            EventKind::Create(_) => Self::Appeared,
            EventKind::Remove(_) => Self::Gone,
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Self::Appeared,
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) => Self::Gone,
            EventKind::Modify(ModifyKind::Name(_)) => Self::Renamed,
            EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any | ModifyKind::Other)
            | EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime))
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Any => Self::Content,
            EventKind::Modify(ModifyKind::Metadata(_))
            | EventKind::Access(_)
            | EventKind::Other => return None,
        })
    }
}

/// Runs on the backend's thread: keeps only what matters.
pub fn classify(filter: &Filter, event: Event) -> Option<Msg> {
    if event.need_rescan() {
        return Some(Msg::Rescan);
    }
    let effect = Effect::of(&event.kind)?;
    let mut paths = Vec::new();
    let mut new_dirs = Vec::new();
    let mut gone = Vec::new();
    for path in event.paths {
        let is_dir = match event.kind {
            EventKind::Create(CreateKind::Folder) | EventKind::Remove(RemoveKind::Folder) => true,
            _ if effect == Effect::Gone => false,
            _ => std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()),
        };
        // A directory's own write time changes with every file added to it;
        // what matters is the file, which has its own event.
        if is_dir && effect == Effect::Content {
            continue;
        }
        if !filter.accepts(&path, is_dir) {
            continue;
        }
        match effect {
            Effect::Appeared | Effect::Renamed if is_dir => new_dirs.push(path.clone()),
            Effect::Gone => gone.push(path.clone()),
            Effect::Renamed if !path.exists() => gone.push(path.clone()),
            _ => {}
        }
        paths.push(path);
    }
    if paths.is_empty() {
        return None;
    }
    Some(Msg::Changed {
        paths,
        new_dirs,
        gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relevant_kinds() {
        use notify::event::DataChange;
        let yes = [
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::Any),
            EventKind::Modify(ModifyKind::Data(DataChange::Content)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ];
        let no = [
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Permissions)),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Other,
        ];
        for kind in yes {
            assert!(Effect::of(&kind).is_some(), "{kind:?} counts");
        }
        for kind in no {
            assert!(Effect::of(&kind).is_none(), "{kind:?} does not count");
        }
    }

    #[test]
    fn classify_filters_and_finds_new_dirs() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        std::fs::create_dir(root.join("pkg")).expect("mkdir");
        let filter = Filter::new(vec![], vec![root.clone()], &[]).expect("filter");
        let event = |kind, paths: &[&str]| {
            let mut e = Event::new(kind);
            for p in paths {
                e = e.add_path(root.join(p));
            }
            classify(&filter, e)
        };

        let Some(Msg::Changed {
            paths, new_dirs, ..
        }) = event(
            EventKind::Create(CreateKind::Folder),
            &["pkg", "__pycache__"],
        )
        else {
            panic!("a new directory is a change");
        };
        assert_eq!(paths, vec![root.join("pkg")]);
        assert_eq!(new_dirs, vec![root.join("pkg")]);

        // The directory's own write time: not a change.
        let dir_mtime = EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime));
        assert!(event(dir_mtime, &["pkg"]).is_none());
        assert!(event(EventKind::Create(CreateKind::File), &["x.pyc"]).is_none());

        let rescan = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert!(matches!(classify(&filter, rescan), Some(Msg::Rescan)));
    }
}
