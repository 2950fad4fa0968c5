//! Session settings, validated by the CLI before a session starts.

use std::time::Duration;

use mcpvisor_process::StopTimeouts;

/// What to do with a worker stdout line that is not JSON-RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GarbagePolicy {
    /// Log its size (never its content) and drop it.
    #[default]
    Drop,
    /// Treat the worker as broken: stop it, fail its requests, restart.
    Restart,
}

/// When a cancelled request's grace runs out without an answer or an
/// acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CancelAckPolicy {
    /// Stop the generation if it has acknowledged a cancel before (it speaks
    /// the acknowledgement, so a missing one means it is stuck); otherwise
    /// release the slot.
    #[default]
    Auto,
    /// Always stop the generation.
    Stop,
    /// Always just release the slot.
    Release,
}

/// Everything a session needs to know.
#[derive(Debug, Clone)]
pub struct Config {
    pub max_in_flight: usize,
    pub max_message_bytes: usize,
    /// Without an answer or a progress notification for this long, a request
    /// times out.
    pub request_timeout: Duration,
    /// No request lives longer than this, progress or not.
    pub request_ceiling: Duration,
    pub cancel_grace: Duration,
    pub cancel_ack_method: String,
    pub cancel_ack: CancelAckPolicy,
    /// A write to the worker's stdin that makes no progress for this long
    /// stops the generation.
    pub write_timeout: Duration,
    /// The bound on a replayed `initialize`.
    pub init_timeout: Duration,
    pub on_garbage: GarbagePolicy,
    pub stop: StopTimeouts,
    /// After the client closes stdin, how long requests still in flight may
    /// take before mcpvisor stops.
    pub shutdown_drain: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            max_message_bytes: 64 * 1024 * 1024,
            request_timeout: Duration::from_secs(120),
            request_ceiling: Duration::from_secs(3600),
            cancel_grace: Duration::from_secs(10),
            cancel_ack_method: "notifications/mcpvisor/requestFinished".into(),
            cancel_ack: CancelAckPolicy::Auto,
            write_timeout: Duration::from_secs(10),
            init_timeout: Duration::from_secs(60),
            on_garbage: GarbagePolicy::Drop,
            stop: StopTimeouts::default(),
            shutdown_drain: Duration::from_secs(5),
        }
    }
}
