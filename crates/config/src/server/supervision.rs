//! Per-server supervision settings written in a config entry.
//!
//! These are overrides, not settings: every field is optional, and `None`
//! means "whatever the command line says". Whoever runs the servers layers
//! them over its own defaults; this crate only reads and checks them, so it
//! needs nothing from the session crate.

use std::fmt;
use std::time::Duration;

use super::entry::Fields;

/// How one server wants to be supervised, where it differs from the
/// command line's defaults.
///
/// Fields in a config entry: `restart`, `request_timeout`,
/// `request_ceiling`, `max_in_flight`, `crash_loop_exits`, `idle_timeout`,
/// `start`, `sessions`, `health_interval` and `health_misses` (Codex's
/// `tool_timeout_sec` is read as `request_timeout`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Supervision {
    /// When a server that ended on its own is started again.
    pub restart: Option<RestartMode>,
    /// A request with no answer and no progress for this long times out.
    pub request_timeout: Option<Duration>,
    /// No request may run longer than this, progress or not.
    pub request_ceiling: Option<Duration>,
    /// Most requests in flight at once (1 to 65536).
    pub max_in_flight: Option<u32>,
    /// This many quick exits in a row is a crash loop (at least 1).
    pub crash_loop_exits: Option<u32>,
    /// Stop the server after it has been idle this long, or never.
    pub idle_timeout: Option<Timer>,
    /// Start the server with the gateway, or at its first use.
    pub start: Option<StartMode>,
    /// One process for every client, or one per client.
    pub sessions: Option<SessionMode>,
    /// How often to check that the server still answers, or never.
    pub health_interval: Option<Timer>,
    /// Missed checks in a row after which the server counts as hung (at
    /// least 1).
    pub health_misses: Option<u32>,
}

/// When a server that ended on its own is started again (`"restart"` in an
/// entry, `--restart` on the command line). The session acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RestartMode {
    /// `"always"`: at once, then with growing pauses while it keeps crashing.
    #[default]
    Always,
    /// `"on-demand"`: when the next request arrives.
    OnDemand,
    /// `"never"`: refuse requests until a reload.
    Never,
}

/// When a server is first started (`"start"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartMode {
    /// `"eager"`: with the gateway.
    Eager,
    /// `"lazy"`: at the first request that needs it.
    Lazy,
}

/// How clients share a server's process (`"sessions"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionMode {
    /// `"shared"`: one process serves every client.
    Shared,
    /// `"per-client"`: each client gets a process of its own.
    PerClient,
}

/// A timer an entry may set or turn off (`false` or `"off"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Turned off for this server, whatever the default.
    Off,
    /// Fires after this long; never zero.
    On(Duration),
}

/// A value an entry picks by name.
trait Choice: Sized + Copy + 'static {
    /// Every value, in the order error messages list them.
    const ALL: &'static [Self];
    /// The word a config entry uses for `self`.
    fn word(self) -> &'static str;
}

impl Choice for RestartMode {
    const ALL: &'static [Self] = &Self::ALL;
    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Choice for StartMode {
    const ALL: &'static [Self] = &[Self::Eager, Self::Lazy];
    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Choice for SessionMode {
    const ALL: &'static [Self] = &[Self::Shared, Self::PerClient];
    fn word(self) -> &'static str {
        self.as_str()
    }
}

/// Fields read here; the entry parser leaves them out of `extra`.
pub(super) const KNOWN: &[&str] = &[
    "restart",
    "request_timeout",
    "request_ceiling",
    "max_in_flight",
    "crash_loop_exits",
    "idle_timeout",
    "start",
    "sessions",
    "health_interval",
    "health_misses",
    // Codex's name for a tool call's timeout.
    "tool_timeout_sec",
];

pub(super) fn parse(fields: &Fields<'_>) -> Result<Supervision, String> {
    let request_timeout = match fields.duration("request_timeout")? {
        Some(timeout) => Some(timeout),
        None => fields.duration("tool_timeout_sec")?,
    };
    let request_ceiling = fields.duration("request_ceiling")?;
    if let (Some(timeout), Some(ceiling)) = (request_timeout, request_ceiling) {
        if ceiling < timeout {
            return Err("\"request_ceiling\" must not be shorter than \"request_timeout\"".into());
        }
    }
    Ok(Supervision {
        restart: choice(fields, "restart")?,
        request_timeout,
        request_ceiling,
        max_in_flight: count(fields, "max_in_flight", 65_536)?,
        crash_loop_exits: count(fields, "crash_loop_exits", u32::MAX)?,
        idle_timeout: timer(fields, "idle_timeout")?,
        start: choice(fields, "start")?,
        sessions: choice(fields, "sessions")?,
        health_interval: timer(fields, "health_interval")?,
        health_misses: count(fields, "health_misses", u32::MAX)?,
    })
}

fn choice<T: Choice>(fields: &Fields<'_>, key: &str) -> Result<Option<T>, String> {
    let Some(value) = fields.string(key).map_err(|_| one_of::<T>(key))? else {
        return Ok(None);
    };
    T::ALL
        .iter()
        .find(|choice| choice.word() == value)
        .map(|choice| Some(*choice))
        .ok_or_else(|| one_of::<T>(key))
}

fn one_of<T: Choice>(key: &str) -> String {
    let names: Vec<String> = T::ALL
        .iter()
        .map(|choice| format!("{:?}", choice.word()))
        .collect();
    match names.split_last() {
        Some((last, [])) => format!("{key:?} must be {last}"),
        Some((last, rest)) => format!("{key:?} must be {} or {last}", rest.join(", ")),
        None => format!("{key:?} has no valid value"),
    }
}

/// A whole number from 1 to `max`.
fn count(fields: &Fields<'_>, key: &str, max: u32) -> Result<Option<u32>, String> {
    let Some(value) = fields.get(key) else {
        return Ok(None);
    };
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=max).contains(n))
        .map(Some)
        .ok_or_else(|| {
            if max == u32::MAX {
                format!("{key:?} must be a whole number of at least 1")
            } else {
                format!("{key:?} must be a whole number from 1 to {max}")
            }
        })
}

/// A duration, or `false`/`"off"` to turn the timer off.
fn timer(fields: &Fields<'_>, key: &str) -> Result<Option<Timer>, String> {
    match fields.get(key) {
        Some(serde_json::Value::Bool(false)) => return Ok(Some(Timer::Off)),
        Some(serde_json::Value::String(s)) if s.trim() == "off" => return Ok(Some(Timer::Off)),
        Some(serde_json::Value::Bool(true)) => {
            return Err(format!(
                "{key:?} must be a duration such as \"10m\", or false to turn it off"
            ));
        }
        _ => {}
    }
    Ok(fields.duration(key)?.map(Timer::On))
}

// === impl Supervision ===

impl Supervision {
    /// Whether the entry overrides nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

// === impl Timer ===

impl Timer {
    /// The duration, or `None` when the timer is off.
    pub fn duration(self) -> Option<Duration> {
        match self {
            Timer::Off => None,
            Timer::On(duration) => Some(duration),
        }
    }
}

// === impl RestartMode ===

impl RestartMode {
    /// Every value, in the order error messages and `--help` list them.
    pub const ALL: [Self; 3] = [Self::Always, Self::OnDemand, Self::Never];

    /// The word a config entry uses for this value.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartMode::Always => "always",
            RestartMode::OnDemand => "on-demand",
            RestartMode::Never => "never",
        }
    }
}

impl fmt::Display for RestartMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl StartMode ===

impl StartMode {
    /// The word a config entry uses for this value.
    pub fn as_str(self) -> &'static str {
        match self {
            StartMode::Eager => "eager",
            StartMode::Lazy => "lazy",
        }
    }
}

impl fmt::Display for StartMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl SessionMode ===

impl SessionMode {
    /// The word a config entry uses for this value.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMode::Shared => "shared",
            SessionMode::PerClient => "per-client",
        }
    }
}

impl fmt::Display for SessionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
