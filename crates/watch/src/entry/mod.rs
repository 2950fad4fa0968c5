//! Finding a worker's own entry files from its command line.
//!
//! The program's name picks how to read the rest: an interpreter
//! (`python`, `node`, `deno`, `bun`, `tsx`, `ts-node`, a shell) runs its first
//! operand; a launcher (`uv run`, `env`, `mcp run`, `fastmcp run`) runs a
//! command or script of its own, which is read the same way; a package runner
//! (`uvx`, `npx`, `bunx`, `pnpm dlx`) fetches a package, which is nothing
//! local to watch, unless the package is one of the interpreters above
//! (`npx tsx server.ts`). Any other program is itself the entry.
//!
//! Decisions, for the cases that are a matter of taste:
//! - `python -m pkg.mod` (and `uv run -m`) resolves to `pkg/mod.py` or
//!   `pkg/mod/__main__.py` under the working directory or its `src/`; a
//!   module from an installed package resolves to nothing.
//! - A bare program name is looked up on `PATH` with
//!   [`mcpvisor_config::find_program`], the lookup that checks the command
//!   before it runs; what it finds is watched unless it lies under a system
//!   directory ([`SYSTEM_DIRS`]), where package managers, not the user,
//!   change it. A program given as a path
//!   (`./server`, `/abs/server`) is always watched.
//! - `node -r ./setup.js` and `--import ./hooks.mjs` preloads are entries
//!   too when they are local files.

mod scan;
#[cfg(test)]
mod tests;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use scan::{Grammar, Scan};

/// Directories whose programs are never watched when found on `PATH`.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/nix/store",
    "/snap",
];

/// How deep launchers may nest (`env uv run python …`).
const MAX_DEPTH: usize = 8;

/// The worker's own entry files, from its command line: existing files only,
/// relative paths resolved against `cwd` (or the current directory), and
/// canonicalized. See the module documentation for what each program means.
pub fn entry_files(command: &[OsString], cwd: Option<&Path>) -> Vec<PathBuf> {
    entry_files_with_path(command, cwd, std::env::var_os("PATH").as_deref())
}

/// A configured server's entry files: none for a remote server, whose code
/// is not here.
pub fn server_files(def: &mcpvisor_config::ServerDef) -> Vec<PathBuf> {
    if def.is_remote() {
        return Vec::new();
    }
    let command: Vec<OsString> = std::iter::once(def.command.clone())
        .chain(def.args.iter().cloned())
        .map(Into::into)
        .collect();
    entry_files(&command, def.cwd.as_deref())
}

/// [`entry_files`] with an explicit `PATH`, for tests.
pub(crate) fn entry_files_with_path(
    command: &[OsString],
    cwd: Option<&Path>,
    path_var: Option<&OsStr>,
) -> Vec<PathBuf> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let base = match cwd {
        Some(cwd) => here.join(cwd),
        None => here,
    };
    let mut finder = Finder {
        path_var,
        found: Vec::new(),
    };
    finder.command(command, &base, 0);
    let mut out: Vec<PathBuf> = Vec::new();
    for file in finder.found {
        if let Ok(real) = file.canonicalize() {
            if real.is_file() && !out.contains(&real) {
                out.push(real);
            }
        }
    }
    out
}

struct Finder<'p> {
    path_var: Option<&'p OsStr>,
    /// Candidates, not yet checked.
    found: Vec<PathBuf>,
}

const PYTHON: Grammar = Grammar {
    short_value: "WX",
    short_stop: "cm",
    long_value: &["--check-hash-based-pycs"],
    long_stop: &[],
    clusters: true,
    plus: false,
};

const NODE: Grammar = Grammar {
    short_value: "rC",
    short_stop: "ep",
    long_value: &[
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "--conditions",
        "--env-file",
        "--input-type",
        "--title",
        "--tsconfig",
        "--project",
        "--compiler",
        "--compiler-options",
        "--ignore",
        "--cwd",
    ],
    long_stop: &["--eval", "--print", "--run"],
    clusters: false,
    plus: false,
};

const TS_NODE: Grammar = Grammar {
    short_value: "rPOCID",
    short_stop: "epi",
    ..NODE
};

const DENO: Grammar = Grammar {
    short_value: "cL",
    short_stop: "",
    long_value: &[
        "--config",
        "--import-map",
        "--cert",
        "--location",
        "--seed",
        "--log-level",
        "--preload",
        "--ext",
    ],
    long_stop: &[],
    clusters: false,
    plus: false,
};

const BUN: Grammar = Grammar {
    short_value: "rc",
    short_stop: "e",
    long_value: &[
        "--preload",
        "--require",
        "--import",
        "--cwd",
        "--config",
        "--env-file",
        "--tsconfig-override",
        "--conditions",
        "--port",
    ],
    long_stop: &["--eval", "--print"],
    clusters: false,
    plus: false,
};

const SHELL: Grammar = Grammar {
    short_value: "oO",
    short_stop: "cs",
    long_value: &["--rcfile", "--init-file"],
    long_stop: &[],
    clusters: true,
    plus: true,
};

const UV: Grammar = Grammar {
    short_value: "pifPC",
    short_stop: "m",
    long_value: &[
        "--directory",
        "--project",
        "--cache-dir",
        "--config-file",
        "--color",
        "--with",
        "--with-editable",
        "--with-requirements",
        "--python",
        "--package",
        "--extra",
        "--group",
        "--only-group",
        "--no-group",
        "--index",
        "--default-index",
        "--index-url",
        "--extra-index-url",
        "--find-links",
        "--env-file",
        "--index-strategy",
        "--keyring-provider",
        "--resolution",
        "--prerelease",
        "--exclude-newer",
        "--link-mode",
        "--upgrade-package",
        "--reinstall-package",
        "--refresh-package",
        "--no-binary-package",
        "--no-build-package",
        "--config-setting",
        "--allow-insecure-host",
        "--python-platform",
    ],
    long_stop: &["--module"],
    clusters: true,
    plus: false,
};

/// `npx`, `uvx`, `bunx`, `pnpm dlx` and friends: options before the package.
const PACKAGE_RUNNER: Grammar = Grammar {
    short_value: "p",
    short_stop: "c",
    long_value: &["--package", "--from", "--with", "--python", "--workspace"],
    long_stop: &["--call"],
    clusters: false,
    plus: false,
};

const ENV: Grammar = Grammar {
    short_value: "uCS",
    short_stop: "",
    long_value: &["--unset", "--chdir", "--split-string"],
    long_stop: &[],
    clusters: true,
    plus: false,
};

const MCP_CLI: Grammar = Grammar {
    short_value: "tnwe",
    short_stop: "",
    long_value: &[
        "--transport",
        "--host",
        "--port",
        "--path",
        "--log-level",
        "--name",
        "--with",
        "--with-editable",
        "--env-file",
        "--python",
        "--project",
        "--with-requirements",
    ],
    long_stop: &[],
    clusters: false,
    plus: false,
};

// === impl Finder ===

impl Finder<'_> {
    fn command(&mut self, command: &[OsString], base: &Path, depth: usize) {
        let Some((program, args)) = command.split_first() else {
            return;
        };
        if depth > MAX_DEPTH {
            return;
        }
        let name = Path::new(program)
            .file_name()
            .and_then(OsStr::to_str)
            .unwrap_or("");
        match name {
            _ if is_python(name) => self.python(args, base),
            "node" | "nodejs" => self.node(&NODE, args, base),
            "tsx" => {
                let args = match args.first().and_then(|a| a.to_str()) {
                    Some("watch") => &args[1..],
                    _ => args,
                };
                self.node(&NODE, args, base);
            }
            "ts-node" | "ts-node-esm" | "ts-node-script" | "ts-node-transpile-only" => {
                self.node(&TS_NODE, args, base);
            }
            "deno" => {
                let args = match args.first().and_then(|a| a.to_str()) {
                    Some("run" | "serve") => &args[1..],
                    _ => args,
                };
                self.node(&DENO, args, base);
            }
            "bun" => self.bun(args, base),
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" | "fish" => {
                if let Scan::Operand(i) = SHELL.scan(args, |_, _| {}) {
                    self.found.push(base.join(&args[i]));
                }
            }
            "uv" => self.uv(args, base, depth),
            "uvx" | "npx" | "bunx" | "pnpx" => self.package_runner(args, base, depth),
            "pnpm" | "yarn" | "npm" => match args.first().and_then(|a| a.to_str()) {
                Some("dlx" | "exec") => self.package_runner(&args[1..], base, depth),
                Some("node") => self.node(&NODE, &args[1..], base),
                _ => {}
            },
            "env" => {
                if let Scan::Operand(i) = ENV.scan(args, |_, _| {}) {
                    // `NAME=value` assignments come before the command.
                    let rest = &args[i..];
                    let skip = rest
                        .iter()
                        .take_while(|a| a.to_str().is_some_and(|a| a.contains('=')))
                        .count();
                    self.command(&rest[skip..], base, depth + 1);
                }
            }
            "mcp" | "fastmcp" => self.mcp_cli(args, base),
            _ => self.program(program, base),
        }
    }

    fn python(&mut self, args: &[OsString], base: &Path) {
        match PYTHON.scan(args, |_, _| {}) {
            Scan::Operand(i) => self.python_script(&args[i], base),
            Scan::Stop(flag, Some(module)) if flag == "-m" => self.python_module(module, base),
            _ => {}
        }
    }

    /// A script, or a directory or zip file with a `__main__.py`.
    fn python_script(&mut self, script: &OsStr, base: &Path) {
        let path = base.join(script);
        if path.is_dir() {
            self.found.push(path.join("__main__.py"));
        } else {
            self.found.push(path);
        }
    }

    fn python_module(&mut self, module: &OsStr, base: &Path) {
        let Some(module) = module.to_str() else {
            return;
        };
        for root in [base.to_path_buf(), base.join("src")] {
            let mut path = root;
            path.extend(module.split('.'));
            let file = path.with_extension("py");
            if file.is_file() {
                self.found.push(file);
                return;
            }
            let main = path.join("__main__.py");
            if main.is_file() {
                self.found.push(main);
                return;
            }
        }
    }

    fn node(&mut self, grammar: &Grammar, args: &[OsString], base: &Path) {
        let mut preloads = Vec::new();
        let scan = grammar.scan(args, |flag, value| {
            if matches!(
                flag,
                "-r" | "--require"
                    | "--import"
                    | "--loader"
                    | "--experimental-loader"
                    | "--preload"
            ) {
                preloads.push(base.join(value));
            }
        });
        if let Scan::Operand(i) = scan {
            self.found.push(base.join(&args[i]));
        }
        self.found.extend(preloads);
    }

    fn bun(&mut self, args: &[OsString], base: &Path) {
        if let Scan::Operand(i) = BUN.scan(args, |_, _| {}) {
            if args[i] == "run" {
                self.node(&BUN, &args[i + 1..], base);
            } else {
                self.node(&BUN, args, base);
            }
        }
    }

    /// `uv [options] run [options] (SCRIPT.py | COMMAND …)`.
    fn uv(&mut self, args: &[OsString], base: &Path, depth: usize) {
        let mut base = base.to_path_buf();
        let Scan::Operand(sub) = scan_uv(args, &mut base) else {
            return;
        };
        if args[sub] != "run" {
            return;
        }
        let args = &args[sub + 1..];
        match scan_uv(args, &mut base) {
            Scan::Operand(i) => {
                let rest = &args[i..];
                let first = Path::new(&rest[0]);
                let script = first
                    .extension()
                    .is_some_and(|ext| ext == "py" || ext == "pyw");
                if script {
                    self.python_script(&rest[0], &base);
                } else {
                    self.command(rest, &base, depth + 1);
                }
            }
            Scan::Stop(_, Some(module)) => self.python_module(module, &base),
            _ => {}
        }
    }

    /// A package runner: nothing local, unless the package is an interpreter
    /// running a local file (`npx tsx server.ts`).
    fn package_runner(&mut self, args: &[OsString], base: &Path, depth: usize) {
        if let Scan::Operand(i) = PACKAGE_RUNNER.scan(args, |_, _| {}) {
            let name = args[i].to_str().unwrap_or("");
            let interpreter = is_python(name)
                || matches!(
                    name,
                    "node" | "tsx" | "ts-node" | "ts-node-esm" | "deno" | "bun" | "mcp" | "fastmcp"
                );
            if interpreter {
                self.command(&args[i..], base, depth + 1);
            }
        }
    }

    /// `mcp run server.py[:obj]`, `fastmcp run server.py[:obj]`.
    fn mcp_cli(&mut self, args: &[OsString], base: &Path) {
        let Some((sub, args)) = args.split_first() else {
            return;
        };
        if !(sub == "run" || sub == "dev") {
            return;
        }
        let Scan::Operand(i) = MCP_CLI.scan(args, |_, _| {}) else {
            return;
        };
        let spec = base.join(&args[i]);
        if spec.exists() {
            self.found.push(spec);
        } else if let Some((file, _object)) = args[i].to_str().and_then(|s| s.rsplit_once(':')) {
            self.found.push(base.join(file));
        }
    }

    /// A program run directly: a path, or a name looked up on `PATH`.
    fn program(&mut self, program: &OsStr, base: &Path) {
        let as_path = Path::new(program);
        if as_path.components().count() > 1 {
            self.found.push(base.join(as_path));
            return;
        }
        let Ok(hit) = mcpvisor_config::find_program(as_path, Some(base), self.path_var) else {
            return;
        };
        let real = hit.canonicalize().unwrap_or(hit);
        if !SYSTEM_DIRS.iter().any(|dir| real.starts_with(dir)) {
            self.found.push(real);
        }
    }
}

/// Scans `uv` options, following `--directory` (`uv run` runs its command
/// there; `--project` only finds the project).
fn scan_uv<'a>(args: &'a [OsString], base: &mut PathBuf) -> Scan<'a> {
    UV.scan(args, |flag, value| {
        if flag == "--directory" {
            *base = base.join(value);
        }
    })
}

/// `python`, `python3`, `python3.12`, `python3.13t`, `pypy3`…
fn is_python(name: &str) -> bool {
    let Some(version) = name
        .strip_prefix("python")
        .or_else(|| name.strip_prefix("pypy"))
    else {
        return false;
    };
    let version = version.strip_suffix(['t', 'w']).unwrap_or(version);
    version.chars().all(|c| c.is_ascii_digit() || c == '.')
}
