//! The stdio front: one client on a pair of pipes, read and written by the
//! hub's own task.
//!
//! The hub reads the client's lines in its `select!` (bounded framing, as
//! `run` does) and writes what is for the client through an
//! [`writer::Outlet`] at the end of each turn of its loop, once no complete
//! line waits in what it has read: a burst goes out in one write, and a call
//! costs no hop to a reader or a writer task. A line over the limit is
//! answered here (`-32600` with its id when the id is in its first bytes),
//! never forwarded. A client that stops reading is gone once a write has made
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

use super::Outcome;
use super::{DRAIN, FRONT_QUEUE, Hub};
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
    max_bytes: usize,
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
            max_bytes,
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
    pub fn take(&mut self, queued: &mut std::collections::VecDeque<Bytes>) -> usize {
        for line in queued.drain(..) {
            self.out.push(Message::Line(line));
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

impl Hub {
    /// A frame from the stdio client, or its input's end.
    pub(crate) fn on_stdio_frame(
        &mut self,
        stdio: &mut Stdio,
        frame: Option<Result<Frame, FrameError>>,
    ) {
        let front = stdio.front;
        let line = match frame {
            Some(Ok(Frame::Line(line))) => line,
            Some(Ok(Frame::Oversize { len, head })) => {
                let max_bytes = stdio.max_bytes;
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
                return;
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "client input failed");
                self.end_stdio_input(stdio);
                return;
            }
            None => {
                self.end_stdio_input(stdio);
                return;
            }
        };
        if self
            .fronts
            .open
            .get(&front)
            .is_some_and(|f| f.closing.is_none())
        {
            self.on_front_message(front, line);
        }
    }

    /// The client closed its input: its requests in flight may still
    /// finish, for [`DRAIN`] at most.
    fn end_stdio_input(&mut self, stdio: &mut Stdio) {
        stdio.input = None;
        if let Some(f) = self.fronts.open.get_mut(&stdio.front) {
            f.closing
                .get_or_insert_with(|| tokio::time::Instant::now() + DRAIN);
        }
    }

    /// Writes what is queued for the stdio client as far as its pipe takes
    /// it now; a full pipe is waited on in the loop's `select!`.
    pub(crate) async fn write_stdio(&mut self, stdio: &mut Stdio) {
        self.fronts.stdio_backlog = stdio.take(&mut self.fronts.stdio_queue);
        if stdio.out.is_idle() || stdio.out.is_blocked() {
            return;
        }
        if let Some(written) = stdio.out.write_now().await {
            self.on_stdio_written(stdio, written);
        }
        self.fronts.stdio_backlog = stdio.out.queued();
    }

    /// A write to the stdio client finished, failed or stalled.
    pub(crate) fn on_stdio_written(
        &mut self,
        stdio: &mut Stdio,
        written: Result<(), writer::WriteError>,
    ) {
        let Err(e) = written else { return };
        match &e {
            writer::WriteError::Stalled(_) => {
                tracing::warn!(error = %e, "the client stopped reading; it is gone");
            }
            _ => tracing::debug!(error = %e, "client output closed"),
        }
        stdio.input = None;
        stdio.out.close();
        self.drop_front(stdio.front, Outcome::ClientGone);
    }

    /// What waits for the stdio client still goes out once the hub has
    /// stopped, bounded.
    pub(crate) async fn flush_stdio(&mut self, stdio: &mut Stdio) {
        stdio.take(&mut self.fronts.stdio_queue);
        let bound = std::time::Duration::from_secs(5);
        let _ = tokio::time::timeout(bound, stdio.out.flushed()).await;
    }
}
