//! The stdio front: one client on a pair of pipes, read and written by the
//! hub's own task.
//!
//! The shell reads the client's lines in its `select!` (bounded framing, as
//! `run` does) and hands them to the core ([`StdioInput`]); it writes what
//! the core queued for the client through an [`writer::Outlet`] at the end
//! of each turn of its loop, once no complete line waits in what it has
//! read: a burst goes out in one write, and a call costs no hop to a reader
//! or a writer task. A line over the limit is answered by the core
//! (`-32600` with its id when the id is in its first bytes), never
//! forwarded. A client that stops reading is gone once a write has made
//! no progress for [`WRITE_TIMEOUT`], or once it leaves [`FRONT_QUEUE`]
//! messages unwritten; while its queue is long the hub reads nothing more
//! from it.

use std::pin::Pin;

use bytes::Bytes;
use mcpvisor_jsonrpc::envelope::scan_id;
use mcpvisor_jsonrpc::frame::FrameError;
use mcpvisor_jsonrpc::{Frame, INVALID_REQUEST, LineCodec, build};
use mcpvisor_session::writer::{self, Message};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::FramedRead;

use super::{DRAIN, FRONT_QUEUE, Hub, Input, Outcome, StdioInput};
use crate::fronts::FrontId;

/// How long a write to the client may make no progress before the client
/// counts as gone.
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Messages queued for the client past which nothing more is read from it
/// until it catches up.
const READ_PAUSE: usize = FRONT_QUEUE / 4;

/// The stdio client's pipes.
pub(crate) struct Stdio {
    pub front: FrontId,
    /// `None` once the input has ended.
    input: Option<FramedRead<Pin<Box<dyn AsyncRead + Send>>, LineCodec>>,
    pub out: writer::Outlet,
}

impl std::fmt::Debug for Stdio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdio")
            .field("front", &self.front)
            .field("reading", &self.input.is_some())
            .field("out", &self.out)
            .finish()
    }
}

impl Stdio {
    pub fn new<R, W>(front: FrontId, input: R, output: W, max_bytes: usize) -> Self
    where
        R: AsyncRead + Send + 'static,
        W: AsyncWrite + Send + 'static,
    {
        Self {
            front,
            input: Some(FramedRead::new(Box::pin(input), LineCodec::new(max_bytes))),
            out: writer::Outlet::new(Box::pin(output), Some(WRITE_TIMEOUT)),
        }
    }

    /// Whether the hub should read the client now: its input is open and
    /// what it was sent is not far behind.
    pub fn readable(&self) -> bool {
        self.input.is_some() && self.out.queued() < READ_PAUSE
    }

    /// Whether a complete line waits in what was read.
    pub fn has_line(&self) -> bool {
        self.input
            .as_ref()
            .is_some_and(|i| i.decoder().has_line(i.read_buffer()))
    }

    /// Takes the lines the hub queued for the client into the outlet;
    /// returns how many wait to be written.
    pub fn take(&mut self, queued: &mut std::collections::VecDeque<Message>) -> usize {
        for msg in queued.drain(..) {
            self.out.push(msg);
        }
        self.out.queued()
    }
}

/// What the stdio client's pipes have for the hub.
pub(crate) enum Event {
    /// A frame read, or the input's end.
    Read(Option<Result<Frame, FrameError>>),
    /// What was queued is written, or the write failed or stalled.
    Written(Result<(), writer::WriteError>),
}

/// The next [`Event`]: a frame, when `read`; the end of a blocked write,
/// when `flush`. Pending forever with neither (the branch is disabled then).
pub(crate) async fn next(stdio: &mut Option<Stdio>, read: bool, flush: bool) -> Event {
    std::future::poll_fn(|cx| {
        let Some(stdio) = stdio.as_mut() else {
            return std::task::Poll::Pending;
        };
        if flush {
            if let std::task::Poll::Ready(written) = stdio.out.poll_flush(cx) {
                return std::task::Poll::Ready(Event::Written(written));
            }
        }
        match stdio.input.as_mut() {
            Some(input) if read => {
                futures_util::Stream::poll_next(Pin::new(input), cx).map(Event::Read)
            }
            _ => std::task::Poll::Pending,
        }
    })
    .await
}

impl Stdio {
    /// What a frame read (or the input's end) is for the core; the input
    /// is closed at its end.
    pub fn input(&mut self, frame: Option<Result<Frame, FrameError>>) -> StdioInput {
        match frame {
            Some(Ok(Frame::Line(line))) => StdioInput::Line(line),
            Some(Ok(Frame::Oversize { len, head })) => StdioInput::Oversize { len, head },
            Some(Err(e)) => {
                tracing::debug!(error = %e, "client input failed");
                self.input = None;
                StdioInput::Ended
            }
            None => {
                self.input = None;
                StdioInput::Ended
            }
        }
    }

    /// What the end of a write is for the core: nothing, or the client
    /// gone (then nothing more is read or written).
    pub fn written(&mut self, written: Result<(), writer::WriteError>) -> Option<StdioInput> {
        let Err(e) = written else { return None };
        match &e {
            writer::WriteError::Stalled(_) => {
                tracing::warn!(error = %e, "the client stopped reading; it is gone");
            }
            _ => tracing::debug!(error = %e, "client output closed"),
        }
        self.input = None;
        self.out.close();
        Some(StdioInput::Gone)
    }

    /// Writes what the core queued for the client as far as its pipe
    /// takes it now (a full pipe is waited on in the loop's `select!`);
    /// a failed write is handed to the core as its input.
    pub async fn write(&mut self, hub: &mut Hub) {
        hub.fronts.stdio_backlog = self.take(&mut hub.fronts.stdio_queue);
        if self.out.is_idle() || self.out.is_blocked() {
            return;
        }
        if let Some(written) = self.out.write_now().await {
            if let Some(gone) = self.written(written) {
                hub.handle(Input::Stdio(gone));
                hub.end_turn();
            }
        }
        hub.fronts.stdio_backlog = self.out.queued();
    }

    /// What waits for the client still goes out once the hub has
    /// stopped, bounded.
    pub async fn flush(&mut self, hub: &mut Hub) {
        self.take(&mut hub.fronts.stdio_queue);
        let bound = std::time::Duration::from_secs(5);
        let _ = tokio::time::timeout(bound, self.out.flushed()).await;
    }
}

impl Hub {
    /// What the stdio client's pipes gave.
    pub(crate) fn on_stdio(&mut self, input: StdioInput) {
        // The stdio client is the primary front.
        let Some(front) = self.fronts.primary else {
            return;
        };
        match input {
            StdioInput::Line(line) => {
                if self
                    .fronts
                    .open
                    .get(&front)
                    .is_some_and(|f| f.closing.is_none())
                {
                    self.on_front_message(front, line, None);
                }
            }
            StdioInput::Oversize { len, head } => {
                let max_bytes = self.settings.max_message_bytes;
                let id = scan_id(&head).unwrap_or("null").to_owned();
                tracing::warn!(
                    bytes = len,
                    "client message over --max-message-bytes; not forwarded"
                );
                let detail = format!(
                    "Invalid request: the message is {len} bytes, over the limit of {max_bytes} bytes (--max-message-bytes); it was not forwarded"
                );
                let line = build::error(&id, INVALID_REQUEST, &detail, None);
                let related = (id != "null").then(|| Bytes::from(id));
                self.emit_to(front, line, related);
            }
            // Its requests in flight may still finish, for [`DRAIN`] at
            // most.
            StdioInput::Ended => {
                if let Some(f) = self.fronts.open.get_mut(&front) {
                    f.closing
                        .get_or_insert_with(|| tokio::time::Instant::now() + DRAIN);
                }
            }
            StdioInput::Gone => self.drop_front(front, Outcome::ClientGone),
        }
    }
}
