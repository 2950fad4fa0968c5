//! Session settings, validated by the CLI before a session starts.

use std::time::Duration;

use mcpvisor_config::RestartMode;
use mcpvisor_process::StopTimeouts;

/// What to do with a worker stdout line that is not JSON-RPC. Either way it
/// is counted for the generation's crash report.
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
    /// A write to the client's stdout that makes no progress for this long
    /// ends the session as if the client had gone.
    pub client_write_timeout: Duration,
    /// The bound on a replayed `initialize`.
    pub init_timeout: Duration,
    /// The bound on `initialize` (the client's or a replay) while the
    /// worker waits on an authorization link it printed.
    pub auth_timeout: Duration,
    pub on_garbage: GarbagePolicy,
    pub stop: StopTimeouts,
    /// After the client closes stdin, how long requests still in flight may
    /// take before mcpvisor stops.
    pub shutdown_drain: Duration,
    /// When a worker that ended on its own is started again; with
    /// `Never`, requests are refused until a reload (file change, SIGHUP).
    pub restart: RestartMode,
    /// The longest pause between restarts of a crashing worker.
    pub restart_backoff_max: Duration,
    /// An exit within this long of the start counts towards a crash loop.
    pub crash_loop_window: Duration,
    /// This many such exits in a row put the session in the failed state.
    pub crash_loop_exits: u32,
    /// How long the failed state lasts without a reload.
    pub failed_cooldown: Duration,
    /// How long a reload waits for requests in flight on the old worker.
    pub reload_drain_timeout: Duration,
    /// Put the worker's last stderr lines in `error.data` (may hold secrets).
    pub stderr_in_errors: bool,
    /// Put the heads of the first stdout lines that were not JSON-RPC in
    /// `error.data` (may hold secrets). Without it they are only counted.
    pub stdout_in_errors: bool,
    /// Which tools the client may see and call (a config entry's `tools`).
    pub tools: mcpvisor_config::ToolFilter,
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
            client_write_timeout: Duration::from_secs(30),
            init_timeout: Duration::from_secs(60),
            auth_timeout: Duration::from_secs(300),
            on_garbage: GarbagePolicy::Drop,
            stop: StopTimeouts::default(),
            shutdown_drain: Duration::from_secs(5),
            restart: RestartMode::Always,
            restart_backoff_max: Duration::from_secs(10),
            crash_loop_window: Duration::from_secs(10),
            crash_loop_exits: 5,
            failed_cooldown: Duration::from_secs(60),
            reload_drain_timeout: Duration::from_secs(30),
            stderr_in_errors: false,
            stdout_in_errors: false,
            tools: mcpvisor_config::ToolFilter::default(),
        }
    }
}
