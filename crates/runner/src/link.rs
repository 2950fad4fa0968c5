//! A supervised server, spoken to as raw lines.
//!
//! [`Link::start`] runs a [`Session`] in-process, as `mcpvisor run` runs
//! one over stdio; its workers are processes or remote sessions, whichever
//! the spawner makes. The owner hands it whole JSON-RPC lines over a bounded
//! channel and is handed the session's lines, one at a time, through a
//! [`LineSink`]: no pipe between them, so no framing on either side and no
//! copy through a pipe buffer. Every byte is the owner's to route. The
//! gateway's backends stand on it, and so does the runner's
//! [`crate::Connection`].

use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use mcpvisor_jsonrpc::Spans;
use mcpvisor_session::input::Lines;
use mcpvisor_session::queue::{self, LineReceiver, LineSender};
use mcpvisor_session::writer::{ChannelSlot, Gone, LineSink, Message, Outlet};
use mcpvisor_session::{Config, Control, EventSink, Outcome, Session, Spawner};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Lines the owner can queue for the session before [`Link::try_send`]
/// refuses one.
const QUEUE: usize = 1024;

/// The input side of a running in-process session.
#[derive(Debug)]
pub struct Link {
    inlet: Inlet,
    running: Running,
}

/// What an owner sends a session: its lines and its controls, over
/// bounded channels, never waiting. Made by [`Link::prepare`] before the
/// session runs, so an owner can queue lines for a session that its shell
/// starts later in the same turn.
#[derive(Debug)]
pub struct Inlet {
    lines: LineSender,
    control: mpsc::Sender<Control>,
}

/// A session prepared by [`Link::prepare`] and not started yet: the other
/// ends of its [`Inlet`]. What its inlet queued waits for it.
#[derive(Debug)]
pub struct Unstarted {
    lines: LineReceiver,
    control: mpsc::Receiver<Control>,
    cfg: Config,
}

/// A started session's task, for its stop.
#[derive(Debug)]
pub struct Running {
    session: JoinHandle<Outcome>,
    stop_bound: Duration,
}

impl Link {
    /// Starts a session for `spawner`, reporting its lifecycle to `status`
    /// and handing each line it writes, whole, to `output`. The server
    /// process itself starts with the first message written.
    pub fn start<S: Spawner>(
        spawner: S,
        cfg: Config,
        status: EventSink,
        output: Box<dyn LineSink>,
    ) -> Self {
        let (inlet, unstarted) = Self::prepare(cfg);
        let running = unstarted.start(spawner, status, output);
        Self { inlet, running }
    }

    /// A session's two halves before it runs: the [`Inlet`] its owner
    /// keeps, and the [`Unstarted`] session that [`Unstarted::start`] runs.
    pub fn prepare(cfg: Config) -> (Inlet, Unstarted) {
        let (lines, lines_rx) = queue::channel(QUEUE);
        let (control, control_rx) = mpsc::channel(4);
        (
            Inlet { lines, control },
            Unstarted {
                lines: lines_rx,
                control: control_rx,
                cfg,
            },
        )
    }

    /// Queues one line for the session without waiting. `false` when the
    /// queue is full or the session has ended.
    pub fn try_send(&self, line: Bytes) -> bool {
        self.inlet.try_send(line)
    }

    /// [`Link::try_send`] for a line whose envelope the owner has read or
    /// written itself: `spans` say where it lies, and the session does not
    /// scan the line again.
    pub fn try_send_peeked(&self, line: Bytes, spans: Spans) -> bool {
        self.inlet.try_send_peeked(line, spans)
    }

    /// Asks the session to do something (reload, shut down). Never waits.
    pub fn control(&self, control: Control) -> bool {
        self.inlet.control(control)
    }

    /// The link's parts, for an owner that keeps the session's input and
    /// its end itself: the line queue (the session's stdin closes once
    /// every sender of it is dropped), the controls, the session's task,
    /// and how long a stop may take.
    pub(crate) fn into_parts(
        self,
    ) -> (
        LineSender,
        mpsc::Sender<Control>,
        JoinHandle<Outcome>,
        Duration,
    ) {
        let Self { inlet, running } = self;
        (
            inlet.lines,
            inlet.control,
            running.session,
            running.stop_bound,
        )
    }

    /// Stops the server in layers and waits, bounded, until the session
    /// has ended.
    pub async fn stop(self) -> Option<Outcome> {
        self.running.stop(self.inlet).await
    }
}

// === impl Inlet ===

impl Inlet {
    /// See [`Link::try_send`].
    pub fn try_send(&self, line: Bytes) -> bool {
        self.lines.try_send((line, None)).is_ok()
    }

    /// See [`Link::try_send_peeked`].
    pub fn try_send_peeked(&self, line: Bytes, spans: Spans) -> bool {
        self.lines.try_send((line, Some(spans))).is_ok()
    }

    /// See [`Link::control`].
    pub fn control(&self, control: Control) -> bool {
        self.control.try_send(control).is_ok()
    }

    /// Starts the session's stop: closing its stdin lets it drain; the
    /// shutdown makes it stop at once.
    pub fn shut(self) {
        let Self { lines, control } = self;
        drop(lines);
        let _ = control.try_send(Control::Shutdown);
    }
}

// === impl Unstarted ===

impl Unstarted {
    /// Runs the session, as [`Link::start`] describes.
    pub fn start<S: Spawner>(
        self,
        spawner: S,
        status: EventSink,
        output: Box<dyn LineSink>,
    ) -> Running {
        let (session, stop_bound) = self.into_future(spawner, status, output);
        // The session, and the tasks it starts, log in the caller's span
        // (a gateway's names the server).
        let session = tokio::spawn(tracing::Instrument::in_current_span(session));
        Running {
            session,
            stop_bound,
        }
    }

    /// The session as a future, for an owner that polls it in its own
    /// task (no hop between tasks for each line), and how long a stop of
    /// it may take ([`Running::stop`]'s bound).
    pub fn into_future<S: Spawner>(
        self,
        spawner: S,
        status: EventSink,
        output: Box<dyn LineSink>,
    ) -> (SessionFuture, Duration) {
        let Self {
            lines,
            control,
            cfg,
        } = self;
        let stop_bound = cfg.stop.after_close + cfg.stop.after_term + Duration::from_secs(3);
        let input = Lines::new(lines, cfg.max_message_bytes);
        let output = Outlet::lines(output, Some(cfg.client_write_timeout));
        let session = Session::run_with(cfg, spawner, input, output, control, status);
        (Box::pin(session), stop_bound)
    }
}

/// A session run by its owner's task: see [`Unstarted::into_future`].
pub type SessionFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>;

// === impl Running ===

impl Running {
    /// Stops the server in layers and waits, bounded, until the session
    /// has ended: `inlet` is the session's own, given up here.
    pub async fn stop(self, inlet: Inlet) -> Option<Outcome> {
        inlet.shut();
        tokio::time::timeout(self.stop_bound, self.session)
            .await
            .ok()
            .and_then(Result::ok)
    }
}

/// A [`LineSink`] over a bounded channel: the reader receives each line the
/// session writes, whole, and the session waits (bounded, as for a pipe)
/// while the channel is full.
#[derive(Debug)]
pub struct ChannelSink(ChannelSlot<Bytes>);

impl ChannelSink {
    /// A sink and the receiver of its lines, which holds at most `bound`.
    pub fn channel(bound: usize) -> (Self, mpsc::Receiver<Bytes>) {
        let (tx, rx) = mpsc::channel(bound);
        (Self(ChannelSlot::new(tx)), rx)
    }
}

impl LineSink for ChannelSink {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Gone>> {
        self.0.poll_reserve(cx)
    }

    fn send(&mut self, msg: Message, _spans: Option<Spans>) -> Result<(), Gone> {
        self.0.send(msg.to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ready(sink: &mut ChannelSink) -> Result<(), Gone> {
        std::future::poll_fn(|cx| sink.poll_ready(cx)).await
    }

    #[tokio::test]
    async fn a_channel_sink_hands_over_whole_lines_in_order_until_its_reader_is_gone() {
        let (mut sink, mut rx) = ChannelSink::channel(1);
        for line in ["{\"id\":1}", "{\"id\":2}"] {
            ready(&mut sink).await.expect("the reader is there");
            sink.send(Message::Line(Bytes::from_static(line.as_bytes())), None)
                .expect("taken");
            assert_eq!(rx.recv().await.as_deref(), Some(line.as_bytes()));
        }
        drop(rx);
        assert!(ready(&mut sink).await.is_err(), "Gone once the reader is");
    }
}
