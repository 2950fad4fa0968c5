//! Which paths count: the watched roots, built-in ignores, `--ignore` globs
//! and `.gitignore` files.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use ignore::gitignore::Gitignore;

use crate::WatchError;

/// Names never worth a reload, matched against every path component below a
/// watched directory: version control, caches, dependency trees, build
/// output, and the scratch files editors write beside the file they save.
pub const ALWAYS_IGNORED: &[&str] = &[
    // Version control.
    ".git",
    ".hg",
    ".svn",
    // Python caches and environments.
    "__pycache__",
    "*.pyc",
    "*.pyo",
    ".venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    // Dependency trees and build output.
    "node_modules",
    "target",
    // Editors: vim swap files, backups and its write probe; Emacs lock and
    // autosave files; JetBrains "safe write" temporaries; Finder metadata.
    ".*.sw[a-px]",
    "*.swp",
    "*~",
    "4913",
    ".#*",
    "#*#",
    "*___jb_tmp___",
    "*___jb_old___",
    ".DS_Store",
];

/// Decides whether an event's path is one the watcher cares about.
#[derive(Debug)]
pub struct Filter {
    /// Files watched by name: always relevant, whatever the ignores say.
    files: Vec<PathBuf>,
    /// Directories watched recursively, none inside another.
    dirs: Vec<PathBuf>,
    builtin: GlobSet,
    user: GlobSet,
    /// `.gitignore` matchers by the directory they sit in, deepest first.
    gitignores: Vec<(PathBuf, Gitignore)>,
}

// === impl Filter ===

impl Filter {
    /// A filter for canonical `files` and `dirs`, ignoring the `ignore` globs.
    pub fn new(
        files: Vec<PathBuf>,
        dirs: Vec<PathBuf>,
        ignore: &[String],
    ) -> Result<Self, WatchError> {
        let mut user = GlobSetBuilder::new();
        for glob in ignore {
            let parsed = GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|source| WatchError::Glob {
                    glob: glob.clone(),
                    source,
                })?;
            user.add(parsed);
        }
        let user = user.build().map_err(|source| WatchError::Glob {
            glob: ignore.join(" "),
            source,
        })?;
        Ok(Self {
            files,
            dirs: outermost(dirs),
            builtin: builtin(),
            user,
            gitignores: Vec::new(),
        })
    }

    /// The directories watched recursively.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The files watched by name.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Honours `dir/.gitignore` from now on, if there is one.
    pub fn add_gitignore(&mut self, dir: &Path) {
        let file = dir.join(".gitignore");
        if !file.is_file() || self.gitignores.iter().any(|(d, _)| d == dir) {
            return;
        }
        let (matcher, err) = Gitignore::new(&file);
        if let Some(err) = err {
            tracing::warn!("{}: {err}", file.display());
        }
        self.gitignores.push((dir.to_path_buf(), matcher));
        // The deepest decides, as in git.
        self.gitignores
            .sort_by_key(|(dir, _)| std::cmp::Reverse(dir.components().count()));
    }

    /// Honours the `.gitignore` files between `root` and the top of the git
    /// work tree it is in (if it is in one), as git would.
    pub fn add_enclosing_gitignores(&mut self, root: &Path) {
        let mut found = Vec::new();
        for dir in root.ancestors().skip(1) {
            found.push(dir);
            if dir.join(".git").exists() {
                for dir in found {
                    self.add_gitignore(dir);
                }
                return;
            }
        }
    }

    /// Whether a change to `path` matters.
    pub fn accepts(&self, path: &Path, is_dir: bool) -> bool {
        if self.files.iter().any(|f| f == path) {
            return true;
        }
        match self.dirs.iter().find(|root| path.starts_with(root)) {
            Some(root) => !self.ignored(root, path, is_dir),
            None => false,
        }
    }

    fn ignored(&self, root: &Path, path: &Path, is_dir: bool) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return true;
        };
        // Every component is checked, so a file inside an ignored directory
        // is ignored even when an event names the file directly.
        let mut prefix = PathBuf::new();
        let mut components = rel.components().peekable();
        while let Some(component) = components.next() {
            let name: &OsStr = component.as_os_str();
            prefix.push(name);
            if self.builtin.is_match(name)
                || self.user.is_match(name)
                || self.user.is_match(&prefix)
            {
                return true;
            }
            // `docs/**` matches `docs/`, not `docs`: a directory is tried
            // with its trailing slash too.
            let dir_here = components.peek().is_some() || is_dir;
            if dir_here && self.user.is_match(prefix.join("")) {
                return true;
            }
        }
        for (dir, matcher) in &self.gitignores {
            // The matcher panics on paths outside its directory.
            if path == dir || !path.starts_with(dir) {
                continue;
            }
            let decision = matcher.matched_path_or_any_parents(path, is_dir);
            if decision.is_ignore() {
                return true;
            }
            if decision.is_whitelist() {
                return false;
            }
        }
        false
    }
}

fn builtin() -> GlobSet {
    let mut set = GlobSetBuilder::new();
    for pattern in ALWAYS_IGNORED {
        set.add(globset::Glob::new(pattern).expect("built-in ignore patterns are valid globs"));
    }
    set.build().expect("built-in ignore patterns build")
}

/// Drops every directory that lies inside another: the outer one covers it.
fn outermost(mut dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    dirs.sort();
    dirs.dedup();
    let mut kept: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        // Sorted order puts an ancestor before everything under it.
        if !kept.iter().any(|k| dir.starts_with(k)) {
            kept.push(dir);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(ignore: &[&str]) -> Filter {
        let globs: Vec<String> = ignore.iter().map(|s| s.to_string()).collect();
        Filter::new(
            vec![PathBuf::from("/w/build/keep.js")],
            vec![PathBuf::from("/w")],
            &globs,
        )
        .expect("valid globs")
    }

    fn ok(f: &Filter, p: &str) -> bool {
        f.accepts(Path::new(p), false)
    }

    #[test]
    fn builtin_names_are_ignored_at_any_depth() {
        let f = filter(&[]);
        assert!(ok(&f, "/w/server.py"));
        assert!(ok(&f, "/w/src/pkg/mod.py"));
        for p in [
            "/w/.git/index",
            "/w/__pycache__/x.cpython-312.pyc",
            "/w/pkg/__pycache__/x.pyc",
            "/w/old.pyc",
            "/w/node_modules/a/index.js",
            "/w/target/debug/x",
            "/w/.server.py.swp",
            "/w/.server.py.swx",
            "/w/server.py~",
            "/w/.#server.py",
            "/w/#server.py#",
            "/w/4913",
            "/w/src/4913",
        ] {
            assert!(!ok(&f, p), "{p} should be ignored");
        }
    }

    #[test]
    fn outside_the_roots_is_ignored() {
        let f = filter(&[]);
        assert!(!ok(&f, "/other/server.py"));
        assert!(!ok(&f, "/wx/server.py"));
    }

    #[test]
    fn named_files_win_over_ignores() {
        let f = filter(&["build"]);
        assert!(ok(&f, "/w/build/keep.js"));
        assert!(!ok(&f, "/w/build/other.js"));
    }

    #[test]
    fn user_globs_match_names_and_relative_paths() {
        let f = filter(&["*.log", "gen/*", "docs/**"]);
        assert!(!ok(&f, "/w/a.log"));
        assert!(!ok(&f, "/w/sub/deep/a.log"));
        assert!(!ok(&f, "/w/gen/x.py"));
        // `gen/*` matches the directory `gen/sub`, so its contents go too.
        assert!(!ok(&f, "/w/gen/sub/x.py"));
        assert!(!ok(&f, "/w/docs/a/b.md"));
        assert!(!f.accepts(Path::new("/w/docs"), true));
        assert!(f.accepts(Path::new("/w/docs"), false));
        assert!(ok(&f, "/w/src/gen/x.py"));
        assert!(ok(&f, "/w/a.py"));
    }

    #[test]
    fn bad_glob_names_the_glob() {
        let err = Filter::new(vec![], vec![], &["a[".to_string()]).expect_err("invalid glob");
        assert!(err.to_string().starts_with("--ignore a[:"), "{err}");
    }

    #[test]
    fn nested_roots_collapse() {
        let f = Filter::new(
            vec![],
            vec!["/w/src".into(), "/w".into(), "/w/src/x".into(), "/v".into()],
            &[],
        )
        .expect("filter");
        assert_eq!(f.dirs(), [PathBuf::from("/v"), PathBuf::from("/w")]);
    }

    #[test]
    fn gitignores_nest_and_the_deepest_decides() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        std::fs::create_dir_all(root.join("sub/keep")).expect("mkdir");
        std::fs::write(root.join(".gitignore"), "*.gen.py\n/out\n").expect("write");
        std::fs::write(root.join("sub/.gitignore"), "local.py\n!keep.gen.py\n").expect("write");
        let mut f = Filter::new(vec![], vec![root.clone()], &[]).expect("filter");
        f.add_gitignore(&root);
        f.add_gitignore(&root.join("sub"));
        let ok = |p: &str| f.accepts(&root.join(p), false);
        assert!(ok("server.py"));
        assert!(!ok("a.gen.py"));
        assert!(!ok("sub/b.gen.py"));
        assert!(!ok("out/x.py"));
        // Anchored to the top .gitignore: `sub/out` is not `/out`.
        assert!(ok("sub/out/x.py"));
        assert!(!ok("sub/local.py"));
        assert!(ok("local.py"));
        assert!(ok("sub/keep.gen.py"));
    }

    #[test]
    fn enclosing_gitignores_count_inside_a_work_tree_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let top = tmp.path().canonicalize().expect("canonical tempdir");
        let root = top.join("a/b");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(top.join(".gitignore"), "*.tmp.py\n").expect("write");
        std::fs::write(top.join("a/.gitignore"), "b/skip.py\n").expect("write");

        let mut f = Filter::new(vec![], vec![root.clone()], &[]).expect("filter");
        f.add_enclosing_gitignores(&root);
        assert!(
            f.accepts(&root.join("x.tmp.py"), false),
            "no .git: not a work tree"
        );

        std::fs::create_dir(top.join(".git")).expect("mkdir .git");
        let mut f = Filter::new(vec![], vec![root.clone()], &[]).expect("filter");
        f.add_enclosing_gitignores(&root);
        assert!(!f.accepts(&root.join("x.tmp.py"), false));
        assert!(!f.accepts(&root.join("skip.py"), false));
        assert!(f.accepts(&root.join("server.py"), false));
    }
}
