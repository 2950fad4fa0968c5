//! How a worker process ended.

use std::fmt;
use std::time::Duration;

/// The status a process ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

/// The end of one worker process, as its owning task saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// `None` if the status could not be read.
    pub status: Option<ExitStatus>,
    /// How long the process ran.
    pub uptime: Duration,
    /// Whether mcpvisor asked it to stop (as opposed to it ending on its own).
    pub requested: bool,
}

impl ExitStatus {
    pub(crate) fn from_std(status: std::process::ExitStatus) -> Option<Self> {
        use std::os::unix::process::ExitStatusExt;
        status
            .code()
            .map(ExitStatus::Code)
            .or_else(|| status.signal().map(ExitStatus::Signal))
    }

    /// Whether the process exited with code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExitStatus::Code(code) => write!(f, "exit code {code}"),
            ExitStatus::Signal(sig) => match nix::sys::signal::Signal::try_from(sig) {
                Ok(name) => write!(f, "signal {sig} ({})", name.as_str()),
                Err(_) => write!(f, "signal {sig}"),
            },
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{status}")?,
            None => f.write_str("unknown status")?,
        }
        write!(f, " after {:.1?}", self.uptime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays() {
        assert_eq!(ExitStatus::Code(3).to_string(), "exit code 3");
        assert_eq!(ExitStatus::Signal(9).to_string(), "signal 9 (SIGKILL)");
        assert!(ExitStatus::Code(0).success());
    }
}
