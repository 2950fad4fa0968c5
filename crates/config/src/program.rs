//! The file a server's command runs: a path as given, or a bare name looked
//! up on `PATH` the way `execvp` does.
//!
//! Checking before spawning turns the usual mistakes (a typo, a missing
//! `chmod +x`, a directory) into one line that says which, instead of a
//! worker that fails at every restart. The hot-reload watcher uses the same
//! lookup to find a bare-named program's file, so what is watched is what
//! runs.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a command cannot be run; shown after "cannot run `PROGRAM`: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// A bare name that no `PATH` directory holds as a program.
    #[error("command not found on PATH")]
    NotOnPath,
    /// A path to nothing.
    #[error("no such file")]
    NoSuchFile,
    /// A path to a directory.
    #[error("it is a directory, not a program")]
    Directory,
    /// A file without execute permission (for a bare name: the only match
    /// on `PATH` is such a file).
    #[error("permission denied (the file is not executable)")]
    NotExecutable,
}

/// Finds the file that running `program` would execute.
///
/// A program with a slash is a path, relative to `cwd` (the server's
/// working directory; the current one when `None`). A bare name is looked
/// up in the directories of `path_var`, in order; a relative directory is
/// relative to `cwd` too, as it is for the server once it runs there.
pub fn find_program(
    program: &Path,
    cwd: Option<&Path>,
    path_var: Option<&OsStr>,
) -> Result<PathBuf, ProgramError> {
    let under_cwd = |path: &Path| match cwd {
        Some(cwd) => cwd.join(path),
        None => path.to_path_buf(),
    };
    if program.components().count() > 1 {
        let path = under_cwd(program);
        return match std::fs::metadata(&path) {
            Err(_) => Err(ProgramError::NoSuchFile),
            Ok(meta) if meta.is_dir() => Err(ProgramError::Directory),
            Ok(meta) if is_executable(&meta) => Ok(path),
            Ok(_) => Err(ProgramError::NotExecutable),
        };
    }
    let mut found_not_executable = false;
    for dir in path_var.map(std::env::split_paths).into_iter().flatten() {
        let path = under_cwd(&dir).join(program);
        // Like execvp: skip what cannot run, remember why.
        match std::fs::metadata(&path) {
            Ok(meta) if is_executable(&meta) => return Ok(path),
            Ok(meta) => found_not_executable |= meta.is_file(),
            Err(_) => {}
        }
    }
    Err(if found_not_executable {
        ProgramError::NotExecutable
    } else {
        ProgramError::NotOnPath
    })
}

fn is_executable(meta: &std::fs::Metadata) -> bool {
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    /// A scratch directory with `bin/tool` (executable), `bin/notes`
    /// (not executable), `bin/sub/` and `other/tool` (executable).
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("mcpvisor-program-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin/sub")).expect("mkdir");
        std::fs::create_dir_all(dir.join("other")).expect("mkdir");
        for (file, mode) in [
            ("bin/tool", 0o755),
            ("bin/notes", 0o644),
            ("other/tool", 0o755),
        ] {
            let path = dir.join(file);
            std::fs::write(&path, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
        dir
    }

    fn path_var(dirs: &[&Path]) -> OsString {
        std::env::join_paths(dirs).expect("PATH")
    }

    #[test]
    fn paths_are_taken_as_given_relative_to_the_working_directory() {
        let dir = scratch("paths");
        let find = |p: &str, cwd: Option<&Path>| find_program(Path::new(p), cwd, None);
        let tool = dir.join("bin/tool");
        assert_eq!(find(&tool.display().to_string(), None), Ok(tool.clone()));
        assert_eq!(find("./bin/tool", Some(&dir)), Ok(dir.join("./bin/tool")));
        assert_eq!(
            find("./bin/notes", Some(&dir)),
            Err(ProgramError::NotExecutable)
        );
        assert_eq!(
            find("./bin/nothing", Some(&dir)),
            Err(ProgramError::NoSuchFile)
        );
        assert_eq!(find("bin/sub", Some(&dir)), Err(ProgramError::Directory));
        assert_eq!(
            find(&dir.display().to_string(), None),
            Err(ProgramError::Directory)
        );
    }

    #[test]
    fn bare_names_are_looked_up_on_path_in_order() {
        let dir = scratch("bare");
        let (bin, other) = (dir.join("bin"), dir.join("other"));
        let find = |p: &str, var: &OsString| find_program(Path::new(p), None, Some(var));
        assert_eq!(
            find("tool", &path_var(&[&bin, &other])),
            Ok(bin.join("tool"))
        );
        assert_eq!(
            find("tool", &path_var(&[&other, &bin])),
            Ok(other.join("tool"))
        );
        // A directory or a non-executable file on the way is skipped.
        assert_eq!(
            find("sub", &path_var(&[&bin])),
            Err(ProgramError::NotOnPath)
        );
        assert_eq!(
            find("notes", &path_var(&[&bin])),
            Err(ProgramError::NotExecutable)
        );
        assert_eq!(
            find("nothing", &path_var(&[&bin])),
            Err(ProgramError::NotOnPath)
        );
        assert_eq!(
            find_program(Path::new("tool"), None, None),
            Err(ProgramError::NotOnPath)
        );
        // A relative PATH entry is relative to the working directory.
        assert_eq!(
            find_program(Path::new("tool"), Some(&dir), Some(OsStr::new("other"))),
            Ok(dir.join("other").join("tool"))
        );
    }

    #[test]
    fn errors_read_after_the_program_name() {
        assert_eq!(ProgramError::NoSuchFile.to_string(), "no such file");
        assert_eq!(
            ProgramError::Directory.to_string(),
            "it is a directory, not a program"
        );
        assert_eq!(
            ProgramError::NotOnPath.to_string(),
            "command not found on PATH"
        );
    }
}
