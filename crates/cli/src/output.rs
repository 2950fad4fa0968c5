//! What the commands print on stdout: listings, results, the demo's
//! narration, help and version.
//!
//! Everything goes through [`print()`], so every command ends the same way
//! when stdout cannot be written: a reader that went away (`| head -1`,
//! `| true`) ends the command quietly with exit status 0, as `rg` does;
//! any other write error (a full disk) is one line on stderr and exit
//! status 2. (`println!` panics in both cases.)
//!
//! `mcpvisor run` is not a user of this: its stdout belongs to the protocol
//! and is written by the session, which ends quietly on a closed pipe too.

use std::io::{self, Write};
use std::process::ExitCode;

/// Why printing stopped.
#[derive(Debug)]
pub enum Error {
    /// The reader closed the pipe: nobody wants the rest.
    Closed,
    /// Any other write error.
    Failed(io::Error),
}

/// Writes `text` to stdout and flushes it, so a failure is seen here and
/// not lost at exit. Every known secret in it is replaced by
/// `[redacted:NAME]` (`mcpvisor_config::redact`): what the commands print is
/// for a person or a script, never a protocol payload forwarded to a
/// client, so a tool's result printed by `call` is redacted too.
pub fn print(text: &str) -> Result<(), Error> {
    let text = mcpvisor_config::redact::global().redact(text);
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::from)
}

/// Writes one line to stderr, with every known secret replaced as in
/// [`print()`]. If stderr cannot be written there is nobody to tell.
pub fn warn(line: &str) {
    let line = mcpvisor_config::redact::global().redact(line);
    announce(&line);
}

/// Writes one whole line to stderr in a single write, so that a program
/// waiting for it (a script or a test reading the address mcpvisor listens
/// on) never reads half of it. `eprintln!` writes each piece of its format
/// on its own: a reader could see `listening on http://` before the
/// address. If stderr cannot be written there is nobody to tell.
pub fn announce(line: &str) {
    let mut text = String::with_capacity(line.len() + 1);
    text.push_str(line);
    text.push('\n');
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// Prints clap's help, version or usage error and gives the exit status:
/// 0 after help or version (unless it could not be written), 2 after a
/// usage error.
pub fn clap_exit(err: &clap::Error) -> ExitCode {
    if err.use_stderr() {
        // A usage error: if stderr cannot be written there is nobody to tell.
        let _ = err.print();
        return ExitCode::from(2);
    }
    match err.print().and_then(|()| io::stdout().flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => ExitCode::from(Error::from(e).report()),
    }
}

// === impl Error ===

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Error::Closed
        } else {
            Error::Failed(e)
        }
    }
}

impl Error {
    /// Says what went wrong (nothing, for a closed pipe) and gives the
    /// command's exit status.
    pub fn report(&self) -> u8 {
        match self {
            Error::Closed => 0,
            Error::Failed(e) => {
                eprintln!("mcpvisor: cannot write to stdout: {e}");
                2
            }
        }
    }
}
