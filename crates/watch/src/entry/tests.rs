use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::entry_files_with_path;

/// A project directory with a few entry files, and a `bin/` for `PATH`.
struct Project {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Project {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        let project = Self { _tmp: tmp, root };
        for file in [
            "server.py",
            "build/index.js",
            "x.ts",
            "run.sh",
            "setup.js",
            "pkg/mod.py",
            "app/__main__.py",
            "src/srcpkg/__init__.py",
            "src/srcpkg/__main__.py",
        ] {
            project.write(file);
        }
        project.executable("server");
        project.executable("bin/my-server");
        project
    }

    fn write(&self, rel: &str) -> PathBuf {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, "").expect("write");
        path
    }

    fn executable(&self, rel: &str) -> PathBuf {
        let path = self.write(rel);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn entries(&self, command: &str) -> Vec<String> {
        let command: Vec<OsString> = command.split_whitespace().map(OsString::from).collect();
        let path_var = OsString::from(format!("{}:/usr/bin:/bin", self.root.join("bin").display()));
        entry_files_with_path(&command, Some(&self.root), Some(&path_var))
            .into_iter()
            .map(|p| self.rel(&p))
            .collect()
    }

    fn rel(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }
}

fn check(project: &Project, cases: &[(&str, &[&str])]) {
    for (command, want) in cases {
        assert_eq!(project.entries(command), *want, "entries of `{command}`");
    }
}

#[test]
fn python() {
    let p = Project::new();
    check(
        &p,
        &[
            ("python server.py", &["server.py"]),
            ("python3 -u server.py", &["server.py"]),
            (
                "python3.12 -X utf8 -W ignore server.py --port 1",
                &["server.py"],
            ),
            ("/opt/venv/bin/python -uB server.py", &["server.py"]),
            ("python -m pkg.mod", &["pkg/mod.py"]),
            ("python -m app", &["app/__main__.py"]),
            ("python -m srcpkg", &["src/srcpkg/__main__.py"]),
            ("python -m json.tool", &[]),
            ("python -c print(1)", &[]),
            ("python app", &["app/__main__.py"]),
            ("python missing.py", &[]),
            ("python", &[]),
        ],
    );
}

#[test]
fn javascript_runtimes() {
    let p = Project::new();
    check(
        &p,
        &[
            ("node build/index.js", &["build/index.js"]),
            ("node --inspect build/index.js", &["build/index.js"]),
            ("node --inspect=9229 build/index.js", &["build/index.js"]),
            (
                "node -r ./setup.js build/index.js",
                &["build/index.js", "setup.js"],
            ),
            ("node -r dotenv/config build/index.js", &["build/index.js"]),
            ("node -e 1", &[]),
            ("deno run --allow-net -c deno.json x.ts", &["x.ts"]),
            ("deno x.ts", &["x.ts"]),
            ("deno task dev", &[]),
            ("deno run jsr:@std/http/file-server", &[]),
            ("bun run x.ts", &["x.ts"]),
            ("bun --hot x.ts", &["x.ts"]),
            ("bun x.ts", &["x.ts"]),
            ("bun run dev", &[]),
            ("tsx x.ts", &["x.ts"]),
            ("tsx watch x.ts", &["x.ts"]),
            ("ts-node -P tsconfig.json x.ts", &["x.ts"]),
        ],
    );
}

#[test]
fn launchers_and_package_runners() {
    let p = Project::new();
    check(
        &p,
        &[
            ("uv run server.py", &["server.py"]),
            ("uv run --with mcp python server.py", &["server.py"]),
            (
                "uv run --with=mcp --python 3.12 python -u server.py",
                &["server.py"],
            ),
            (
                "uv --directory build run node index.js",
                &["build/index.js"],
            ),
            ("uv run -m pkg.mod", &["pkg/mod.py"]),
            ("uv run --with mcp mcp run server.py", &["server.py"]),
            ("uv run fastmcp run server.py:mcp", &["server.py"]),
            ("uv run my-server", &["bin/my-server"]),
            ("uv tool run foo", &[]),
            ("uvx mcp-server-fetch", &[]),
            ("uvx --from x mcp-server-fetch", &[]),
            ("npx -y @modelcontextprotocol/server-everything", &[]),
            ("npx tsx x.ts", &["x.ts"]),
            ("pnpm dlx some-server", &[]),
            ("pnpm dlx tsx x.ts", &["x.ts"]),
            ("npm run start", &[]),
            ("env FOO=1 python3 server.py", &["server.py"]),
            ("/usr/bin/env -u X python3 server.py", &["server.py"]),
        ],
    );
}

#[test]
fn programs_and_shell_scripts() {
    let p = Project::new();
    let abs = p.root.join("server").display().to_string();
    check(
        &p,
        &[
            ("./server --flag", &["server"]),
            (&abs, &["server"]),
            ("my-server", &["bin/my-server"]),
            // Found on PATH under a system directory: not ours to watch.
            ("ls -l", &[]),
            ("no-such-program-anywhere", &[]),
            ("sh run.sh", &["run.sh"]),
            ("bash -e -o pipefail run.sh arg", &["run.sh"]),
            ("bash -c ./run.sh", &[]),
            ("", &[]),
        ],
    );
}

#[test]
fn resolves_against_the_given_cwd_and_canonicalizes() {
    let p = Project::new();
    let link = p.root.join("link.py");
    std::os::unix::fs::symlink(p.root.join("server.py"), &link).expect("symlink");
    let command: Vec<OsString> = ["python", "link.py"].map(OsString::from).to_vec();
    assert_eq!(
        entry_files_with_path(&command, Some(&p.root), None),
        vec![p.root.join("server.py")]
    );
    let command: Vec<OsString> = ["node", "index.js"].map(OsString::from).to_vec();
    assert_eq!(
        entry_files_with_path(&command, Some(&p.root.join("build")), None),
        vec![p.root.join("build/index.js")]
    );
    // The same file twice is listed once.
    let command: Vec<OsString> = ["node", "-r", "./setup.js", "setup.js"]
        .map(OsString::from)
        .to_vec();
    assert_eq!(
        entry_files_with_path(&command, Some(&p.root), None),
        vec![p.root.join("setup.js")]
    );
}
