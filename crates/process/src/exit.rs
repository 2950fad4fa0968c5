//! How a worker process ended.

use std::fmt;
use std::time::Duration;

use mcpvisor_config::ExitKind;

/// The end of one worker process, as its owning task saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// Its exit code or signal; [`ExitKind::Unknown`] if the status could
    /// not be read.
    pub status: ExitKind,
    /// How long the process ran.
    pub uptime: Duration,
    /// Whether mcpvisor asked it to stop (as opposed to it ending on its own).
    pub requested: bool,
}

impl Exit {
    /// An exit whose status could not be read.
    pub(crate) fn unknown(uptime: Duration, requested: bool) -> Self {
        Self {
            status: ExitKind::Unknown,
            uptime,
            requested,
        }
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} after {:.1?}", self.status, self.uptime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays() {
        let exit = Exit {
            status: ExitKind::signal(9),
            uptime: Duration::from_millis(1500),
            requested: false,
        };
        assert_eq!(
            exit.to_string(),
            "was killed by SIGKILL (signal 9) after 1.5s"
        );
        assert!(ExitKind::Code(0).success());
    }
}
