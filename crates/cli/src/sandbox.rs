//! `mcpvisor sandbox-exec`: the hidden helper that applies an entry's
//! sandbox to itself and then becomes the server.
//!
//! The spawner runs `mcpvisor sandbox-exec --name NAME --spec JSON -- CMD
//! ARGS...` in place of `CMD ARGS...`, in the server's process group. The
//! helper, still single-threaded (no runtime is started for it):
//!
//! 1. for `"network": "none"`, moves into a network namespace of its own
//!    (with a user namespace first when it is not root);
//! 2. builds one Landlock ruleset: the file rights of every ABI the kernel
//!    has (the first ABI is required), `read` and `write` plus the
//!    defaults, TCP connect rules for a port list (required when there is
//!    one), and the signal and abstract-socket scopes where the kernel has
//!    them;
//! 3. restricts itself (no new privileges), then `exec`s the server, which
//!    keeps the pid the supervisor holds, and inherits every rule.
//!
//! A step the kernel cannot do ends the helper with one line naming the
//! server and the missing feature, and exit code [`EXIT_UNSANDBOXABLE`];
//! the server is never run without what its entry asked for. With
//! `--check` it stops before the `exec`, so a spawner can learn that
//! before it counts on it.
//!
//! `MCPVISOR_SANDBOX_SIMULATE_MISSING` (a comma-separated list of
//! `landlock`, `landlock-tcp`, `netns`) is a test hook: the helper acts as
//! on a kernel without those features. It can only make a start fail,
//! never loosen a sandbox.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use mcpvisor_config::sandbox::{Network, Sandbox};

/// The exit code of a helper that could not apply a sandbox.
pub const EXIT_UNSANDBOXABLE: u8 = 125;

/// The test hook's variable (see the module's documentation).
const SIMULATE_VAR: &str = "MCPVISOR_SANDBOX_SIMULATE_MISSING";

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The entry's name, for the error line.
    #[arg(long)]
    name: String,
    /// The entry's sandbox, as one line of JSON.
    #[arg(long)]
    spec: String,
    /// Let the server write under $TMPDIR (its private temporary directory).
    #[arg(long)]
    private_tmp: bool,
    /// Apply the sandbox, then exit 0 instead of running the command.
    #[arg(long)]
    check: bool,
    /// The server's command line.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// What stops a sandbox from being applied.
#[derive(Debug, thiserror::Error)]
enum SandboxError {
    #[error(
        "this kernel has no Landlock, which the sandbox's file rules need (Linux 5.13 or later, with landlock among the enabled LSMs)"
    )]
    NoLandlock,
    #[error(
        "this kernel's Landlock has no TCP rules, which \"network\": {0} needs (Linux 6.7 or later)"
    )]
    NoTcpRules(String),
    #[error(
        "\"network\": \"none\" needs a network namespace of its own, which this system refused ({0}); user namespaces may be disabled"
    )]
    NoNetns(String),
    #[error("\"sandbox.{field}\": {}: {why}", path.display())]
    Path {
        field: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("{0}")]
    Other(String),
}

pub fn main(args: ExecArgs) -> ExitCode {
    let refuse = |e: &dyn std::fmt::Display| {
        eprintln!(
            "mcpvisor: server {:?}: sandbox: {e}; the server was not started",
            args.name
        );
        ExitCode::from(EXIT_UNSANDBOXABLE)
    };
    let sandbox = match Sandbox::from_json(&args.spec) {
        Ok(sandbox) => sandbox,
        Err(e) => return refuse(&e),
    };
    let program = Path::new(&args.command[0]);
    let path_var = std::env::var_os("PATH");
    let cwd = std::env::current_dir().ok();
    // Resolved before the rules apply, so a PATH search never meets a
    // directory the sandbox hides.
    let resolved = match mcpvisor_config::find_program(program, cwd.as_deref(), path_var.as_deref())
    {
        Ok(path) => path,
        Err(e) => {
            eprintln!(
                "mcpvisor: server {:?}: cannot run `{}`: {e}",
                args.name,
                program.display()
            );
            return ExitCode::from(127);
        }
    };
    let tmp = args
        .private_tmp
        .then(|| std::env::var_os("TMPDIR"))
        .flatten();
    if let Err(e) = apply(&sandbox, &resolved, tmp.as_deref().map(Path::new)) {
        return refuse(&e);
    }
    if args.check {
        return ExitCode::SUCCESS;
    }
    let err = Command::new(&resolved)
        .arg0(&args.command[0])
        .args(&args.command[1..])
        .exec();
    eprintln!(
        "mcpvisor: server {:?}: cannot run `{}` in its sandbox: {err}",
        args.name,
        resolved.display()
    );
    ExitCode::from(126)
}

/// Which features the test hook says are missing.
#[derive(Debug, Default)]
struct Simulated {
    landlock: bool,
    tcp: bool,
    netns: bool,
}

impl Simulated {
    fn from_env() -> Self {
        let mut simulated = Self::default();
        let value = std::env::var(SIMULATE_VAR).unwrap_or_default();
        for word in value.split(',').map(str::trim) {
            match word {
                "landlock" => simulated.landlock = true,
                "landlock-tcp" => simulated.tcp = true,
                "netns" => simulated.netns = true,
                _ => {}
            }
        }
        simulated
    }
}

/// Applies `sandbox` (and the defaults `program` needs) to this process.
fn apply(sandbox: &Sandbox, program: &Path, tmp: Option<&Path>) -> Result<(), SandboxError> {
    let simulated = Simulated::from_env();
    if sandbox.network == Network::None {
        own_network(&simulated)?;
    }
    if simulated.landlock {
        return Err(SandboxError::NoLandlock);
    }
    let hard = |e: landlock::RulesetError| match e {
        landlock::RulesetError::HandleAccesses(_) | landlock::RulesetError::CreateRuleset(_) => {
            SandboxError::NoLandlock
        }
        other => SandboxError::Other(other.to_string()),
    };
    // The first ABI's file rights are required; later ones (refer,
    // truncate, ioctl on devices, unix sockets) are taken where the kernel
    // has them.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .map_err(hard)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V10))
        .map_err(hard)?
        .scope(Scope::from_all(ABI::V6))
        .map_err(hard)?;
    if let Network::Ports(_) = &sandbox.network {
        if simulated.tcp {
            return Err(SandboxError::NoTcpRules(sandbox.network.to_string()));
        }
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(|_| SandboxError::NoTcpRules(sandbox.network.to_string()))?
            .set_compatibility(CompatLevel::BestEffort);
    }
    let mut created = ruleset.create().map_err(hard)?;

    let read = AccessFs::from_read(ABI::V10);
    let write = AccessFs::from_all(ABI::V10);
    let defaults = Defaults::collect(program, tmp);
    for (paths, access, field) in [
        (&sandbox.read, read, "read"),
        (&sandbox.write, write, "write"),
    ] {
        for path in paths {
            let fd = PathFd::new(path).map_err(|e| SandboxError::Path {
                field,
                path: path.clone(),
                why: e.to_string(),
            })?;
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| SandboxError::Other(e.to_string()))?;
        }
    }
    for (paths, access) in [(&defaults.read, read), (&defaults.write, write)] {
        // A default that is not there on this system is skipped.
        for fd in paths.iter().filter_map(|path| PathFd::new(path).ok()) {
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| SandboxError::Other(e.to_string()))?;
        }
    }
    if let Network::Ports(endpoints) = &sandbox.network {
        for endpoint in endpoints {
            created = created
                .add_rule(NetPort::new(endpoint.port, AccessNet::ConnectTcp))
                .map_err(|e| SandboxError::Other(e.to_string()))?;
        }
    }
    let status = created.restrict_self().map_err(hard)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::NoLandlock);
    }
    Ok(())
}

/// A network namespace of this process's own: no interface is up in it.
fn own_network(simulated: &Simulated) -> Result<(), SandboxError> {
    use nix::sched::{CloneFlags, unshare};
    if simulated.netns {
        return Err(SandboxError::NoNetns("simulated".to_owned()));
    }
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return unshare(CloneFlags::CLONE_NEWNET)
            .map_err(|e| SandboxError::NoNetns(format!("unshare: {e}")));
    }
    // Without root, a user namespace gives the right to make a network
    // one; this process keeps its own uid and gid inside it.
    let gid = nix::unistd::getegid();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .map_err(|e| SandboxError::NoNetns(format!("unshare: {e}")))?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| SandboxError::NoNetns(format!("{file}: {e}")))
    };
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/setgroups", "deny\n".to_owned())?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// What every sandbox may use besides what its entry lists, so that
/// `npx`, `uvx`, `node`, `python` and plain binaries start. Paths that do
/// not exist are skipped when the rules are made.
#[derive(Debug, Default)]
struct Defaults {
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
}

/// The system's read-only directories.
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
    "/run/current-system/sw",
    // What programs read of /etc: the loader, names and users, time,
    // certificates, interpreters' own settings. Not all of it: no
    // /etc/shadow, no ssh keys.
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/passwd",
    "/etc/group",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/alternatives",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
    "/etc/mime.types",
    "/etc/locale.alias",
    "/etc/npmrc",
    "/etc/pip.conf",
    // Devices that read as noise or nothing.
    "/dev/random",
    "/dev/urandom",
    // This process (after exec, the server) and what runtimes ask of the
    // machine; other processes' entries stay hidden.
    "/proc/self",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys/kernel",
    "/proc/sys/vm/overcommit_memory",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
];

/// Devices every program may write to.
const SYSTEM_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The package caches `npx` and `uvx` write to even when the package is
/// already there (a temporary file, a lock), and uv's data directory,
/// where `uvx` keeps its tools' locks, under `$HOME`.
const HOME_WRITE: &[&str] = &[".npm", ".cache/uv", ".local/share/uv"];

/// Variables that move those elsewhere.
const VAR_WRITE: &[&str] = &[
    "npm_config_cache",
    "NPM_CONFIG_CACHE",
    "UV_CACHE_DIR",
    "UV_TOOL_DIR",
    "UV_PYTHON_INSTALL_DIR",
];

/// Tool directories under `$HOME`.
const HOME_READ: &[&str] = &[
    ".cache/pip",
    ".cache/node-gyp",
    ".local/bin",
    ".local/lib",
    ".cargo/bin",
    // Interpreter version managers: their shims run their own code.
    ".pyenv",
    ".nvm",
    ".volta",
    ".asdf",
    ".local/share/mise",
    ".local/share/fnm",
];

/// Variables that move a package cache or tool directory elsewhere.
const VAR_READ: &[&str] = &[
    "npm_config_prefix",
    "NPM_CONFIG_PREFIX",
    "PIP_CACHE_DIR",
    "VIRTUAL_ENV",
];

impl Defaults {
    fn collect(program: &Path, tmp: Option<&Path>) -> Self {
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        let mut write: Vec<PathBuf> = SYSTEM_WRITE.iter().map(PathBuf::from).collect();
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(home) = var("HOME").map(PathBuf::from) {
            read.extend(HOME_READ.iter().map(|rel| home.join(rel)));
            write.extend(HOME_WRITE.iter().map(|rel| home.join(rel)));
        }
        if let Some(cache) = var("XDG_CACHE_HOME").map(PathBuf::from) {
            read.push(cache.join("pip"));
            write.push(cache.join("uv"));
        }
        write.extend(
            VAR_WRITE
                .iter()
                .filter_map(|name| var(name).map(PathBuf::from)),
        );
        if let Some(data) = var("XDG_DATA_HOME").map(PathBuf::from) {
            write.push(data.join("uv"));
        }
        // A cache that is not there yet is made now, as its tool would
        // make it: a rule can only name a path that exists.
        for cache in &write[SYSTEM_WRITE.len()..] {
            let _ = std::fs::create_dir_all(cache);
        }
        if let Some(cargo) = var("CARGO_HOME").map(PathBuf::from) {
            read.push(cargo.join("bin"));
        }
        read.extend(
            VAR_READ
                .iter()
                .filter_map(|name| var(name).map(PathBuf::from)),
        );
        // The program's own installation, wherever it is (a virtual
        // environment, pyenv, nvm, a build directory): the directory above
        // its `bin`, or its own directory; both as found and with links
        // followed.
        // Never a whole home directory or the root, though: then the
        // program alone.
        let home = var("HOME").map(PathBuf::from);
        let too_wide = |dir: &Path| {
            home.as_deref().is_some_and(|h| h.starts_with(dir)) || dir.parent().is_none()
        };
        let mut found = vec![program.to_path_buf()];
        if let Ok(real) = std::fs::canonicalize(program) {
            found.push(real);
        }
        for path in found {
            read.push(path.clone());
            if let Some(dir) = path.parent() {
                let prefix = match dir.file_name() {
                    Some(name) if name == "bin" => dir.parent().unwrap_or(dir),
                    _ => dir,
                };
                if !too_wide(prefix) {
                    read.push(prefix.to_path_buf());
                }
            }
        }
        if let Some(tmp) = tmp {
            write.push(tmp.to_path_buf());
        }
        Self { read, write }
    }
}
