//! How a worker process ended.

use std::fmt;
use std::process::ExitStatus;
use std::time::Duration;

/// The end of one worker process, as its owning task saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code or signal; `None` if the status could not be read.
    pub status: Option<ExitStatus>,
    /// How long the process ran.
    pub uptime: Duration,
    /// Whether mcpvisor asked it to stop (as opposed to it ending on its own).
    pub requested: bool,
}

impl Exit {
    /// An exit whose status could not be read.
    pub(crate) fn unknown(uptime: Duration, requested: bool) -> Self {
        Self {
            status: None,
            uptime,
            requested,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.status {
            Some(status) => write!(f, "{status} after {:.1?}", self.uptime),
            None => write!(f, "an unknown status after {:.1?}", self.uptime),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn displays() {
        let exit = Exit {
            status: Some(ExitStatus::from_raw(9)),
            uptime: Duration::from_millis(1500),
            requested: false,
        };
        assert_eq!(exit.to_string(), "signal: 9 (SIGKILL) after 1.5s");
        let unknown = Exit::unknown(Duration::ZERO, true);
        assert_eq!(unknown.to_string(), "an unknown status after 0.0ns");
    }
}
