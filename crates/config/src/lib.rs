//! What mcpvisor knows about a server before and after it runs it.
//!
//! # Theory of operation
//!
//! Everything here is plain data and pure functions; nothing spawns,
//! sleeps or holds a lock, so the process and session crates can test their
//! state machines against it without a runtime.
//!
//! * [`server`] reads the config files people already keep for Claude
//!   Desktop, Cursor, VS Code and Codex into [`ServerDef`]s. Validation is
//!   done once, up front: a file that loads holds only runnable definitions
//!   (plus entries for other transports, kept so they can be named in an
//!   error), and every error is one line naming the file, the entry and the
//!   field.
//! * [`set`] reads several config files as the one [`ServerSet`] that the
//!   gateway serves: config order, duplicates merged or refused, remote
//!   and self-referencing entries skipped and reported.
//! * [`secrets`] reads a server's `env_file` again at every spawn, so a
//!   token added while mcpvisor runs reaches the next restart. Values are
//!   [`Secret`]s, which print as `***`; no error quotes a value.
//! * [`redact`] knows every secret value read so far and replaces it by
//!   `[redacted:NAME]` in what mcpvisor writes for people. Its one
//!   process-wide [`Redactor`] is the exception to "nothing holds a lock":
//!   a short one, to swap the compiled matcher.
//! * [`auth`] watches a worker's stderr for an OAuth prompt (mcp-remote's
//!   and generic ones) so that a handshake blocked on a person in a browser
//!   can be shown for what it is and given `auth_timeout` instead of
//!   `init_timeout`.
//! * [`report`] keeps a bounded tail of stderr, defines [`ErrorData`] (the
//!   `error.data` of mcpvisor's own errors, written by the session and read
//!   back by the runner) and turns it into a [`CrashReport`] that says what
//!   the server was doing, how it ended and what it said last.
//! * [`edit`] changes a config file's entry or an env file's variable in
//!   place, keeping everything else (TOML comments included), atomically.
//! * [`sandbox`] reads an entry's `sandbox` (what a server may read, write
//!   and connect to), and writes it for the helper that applies it.
//! * [`duration`] is the one grammar of durations, `"1500ms"`, `"1.5h"`,
//!   `"1m 30s"`, for config files and command-line flags alike.
//! * [`wrap`] puts `mcpvisor run --` in front of a config file's servers
//!   and takes it away again, changing only those tokens, with a backup
//!   next to the file; [`clients`] knows where each client keeps its file.
//! * [`program`] finds the file a server's command runs (a path, or a name
//!   on `PATH`), for the check before spawning and for the hot-reload
//!   watcher, and says in a few words why a command cannot run.
//!
//! A worker's environment is meant to be layered, later wins: mcpvisor's
//! own environment, then [`ServerDef::env`], then [`secrets::resolve_env`],
//! then `--env KEY=VALUE` from the command line ([`secrets::parse_inline`]).

pub mod auth;
pub mod clients;
pub mod duration;
pub mod edit;
pub mod program;
pub mod redact;
pub mod report;
pub mod sandbox;
pub mod secrets;
pub mod server;
pub mod set;
pub mod wrap;

pub use auth::AuthDetector;
pub use duration::{DurationError, parse_duration};
pub use program::{ProgramError, find_program};
pub use redact::Redactor;
pub use report::{
    CrashPhase, CrashReport, ErrorData, ExitKind, HttpEnd, HttpStage, StderrTail, StrayStdout,
};
pub use sandbox::Sandbox;
pub use secrets::{Secret, SecretsError};
pub use server::{
    ConfigEntry, ConfigError, ConfigFile, Dialect, EraChoice, PinPolicy, RemoteTransport,
    RestartMode, ServerDef, SessionMode, StartMode, Supervision, Timer, ToolFilter, ToolOverride,
    UnsupportedServer,
};
pub use set::{Member, ServerSet, SetError, SkipReason, Skipped};
