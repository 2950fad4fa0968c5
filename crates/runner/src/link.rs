//! A supervised server, spoken to as raw lines.
//!
//! [`Link::start`] runs a [`Session`] in-process over a pair of in-memory
//! pipes, exactly as `mcpvisor run` runs one over stdio; its workers are
//! processes or remote sessions, whichever the spawner makes. The owner writes
//! whole JSON-RPC lines in and reads the session's lines out; every byte is
//! its own to route. [`crate::Connection`] (a typed client for `inspect` and
//! `call`) and the gateway's backends both stand on it.

use std::time::Duration;

use bytes::Bytes;
use mcpvisor_jsonrpc::LineCodec;
use mcpvisor_session::writer::write_lines;
use mcpvisor_session::{Config, Control, EventSink, Outcome, Session, Spawner};
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;

/// Room in each in-memory pipe; a full pipe applies back-pressure.
const PIPE_BYTES: usize = 1 << 20;

/// The input side of a running in-process session.
#[derive(Debug)]
pub struct Link {
    lines: mpsc::Sender<Bytes>,
    control: mpsc::Sender<Control>,
    session: JoinHandle<Outcome>,
    stop_bound: Duration,
}

/// The session's output: one frame per line it writes.
pub type Output = FramedRead<DuplexStream, LineCodec>;

impl Link {
    /// Starts a session for `spawner`, reporting its lifecycle to `status`.
    /// The server process itself starts with the first message written.
    pub fn start<S: Spawner>(spawner: S, cfg: Config, status: EventSink) -> (Self, Output) {
        let stop_bound = cfg.stop.after_close + cfg.stop.after_term + Duration::from_secs(3);
        let max = cfg.max_message_bytes;
        let (ours_in, session_in) = tokio::io::duplex(PIPE_BYTES);
        let (session_out, ours_out) = tokio::io::duplex(PIPE_BYTES);
        let (control, control_rx) = mpsc::channel(4);
        let session = tokio::spawn(Session::run(
            cfg,
            spawner,
            session_in,
            session_out,
            control_rx,
            status,
        ));
        let (lines, lines_rx) = mpsc::channel(1024);
        tokio::spawn(write_lines(ours_in, lines_rx, None));
        let link = Self {
            lines,
            control,
            session,
            stop_bound,
        };
        (link, FramedRead::new(ours_out, LineCodec::new(max)))
    }

    /// Queues one line for the session without waiting. `false` when the
    /// queue is full or the session has ended.
    pub fn try_send(&self, line: Bytes) -> bool {
        self.lines.try_send(line).is_ok()
    }

    /// Asks the session to do something (reload, shut down). Never waits.
    pub fn control(&self, control: Control) -> bool {
        self.control.try_send(control).is_ok()
    }

    /// Stops the server in layers and waits, bounded, until the session
    /// has ended.
    pub async fn stop(self) -> Option<Outcome> {
        let Self {
            lines,
            control,
            session,
            stop_bound,
        } = self;
        // Closing the session's stdin lets it drain; the shutdown makes it
        // stop at once.
        drop(lines);
        let _ = control.try_send(Control::Shutdown);
        tokio::time::timeout(stop_bound, session)
            .await
            .ok()
            .and_then(Result::ok)
    }
}
