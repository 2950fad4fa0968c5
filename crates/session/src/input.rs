//! Where a session reads its client's messages: a pipe, framed as it is
//! read, or a channel of whole lines from another task of the same process.

use std::task::{Context, Poll};

use crate::queue::LineReceiver;
use bytes::Bytes;
use mcpvisor_jsonrpc::frame::{FrameError, OVERSIZE_HEAD};
use mcpvisor_jsonrpc::{Frame, LineCodec, Spans};
use tokio::io::AsyncRead;
use tokio_util::codec::FramedRead;

/// One message read from a client (see [`ClientInput::poll_frame`]).
pub type Read = Result<(Frame, Option<Spans>), FrameError>;

/// The client's side of a session, as the session reads it.
pub trait ClientInput: Send + Unpin {
    /// The next message, `None` once the client has closed its side; with
    /// its [`Spans`] when the client peeked or built it and says where its
    /// envelope lies, so the session need not scan it again.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Read>>;

    /// Whether a whole message is already read and waits to be taken, so
    /// that the session can hold its writes back until it has taken them.
    fn has_frame(&self) -> bool;
}

impl<R: AsyncRead + Unpin + Send> ClientInput for FramedRead<R, LineCodec> {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Read>> {
        futures_util::Stream::poll_next(std::pin::Pin::new(self), cx)
            .map(|frame| frame.map(|frame| frame.map(|frame| (frame, None))))
    }

    fn has_frame(&self) -> bool {
        self.decoder().has_line(self.read_buffer())
    }
}

/// One line from a client in the same process, without its newline, and
/// where its envelope lies when the client knows (see [`Spans`]).
pub type Line = (Bytes, Option<Spans>);

/// A client in the same process that sends whole lines over a bounded
/// channel. Dropping the sender closes it. The session's size bound applies
/// as it does to a pipe: a longer line is given as a [`Frame::Oversize`]
/// with its head.
#[derive(Debug)]
pub struct Lines {
    rx: LineReceiver,
    max_bytes: usize,
}

impl Lines {
    /// Reads `rx`, with lines longer than `max_bytes` taken as oversize.
    pub fn new(rx: LineReceiver, max_bytes: usize) -> Self {
        Self { rx, max_bytes }
    }
}

impl ClientInput for Lines {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Read>> {
        self.rx.poll_recv(cx).map(|line| {
            line.map(|(line, spans)| {
                Ok(if line.len() > self.max_bytes {
                    let head = line.slice(..OVERSIZE_HEAD.min(line.len()));
                    let len = line.len();
                    (Frame::Oversize { len, head }, None)
                } else {
                    (Frame::Line(line), spans)
                })
            })
        })
    }

    fn has_frame(&self) -> bool {
        !self.rx.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next(lines: &mut Lines) -> Option<(Frame, Option<Spans>)> {
        std::future::poll_fn(|cx| lines.poll_frame(cx))
            .await
            .map(|frame| frame.expect("no read error"))
    }

    #[tokio::test]
    async fn a_line_past_the_bound_is_oversize_with_its_head() {
        let (tx, rx) = crate::queue::channel(4);
        let mut lines = Lines::new(rx, 8);
        let short = Bytes::from_static(b"12345678");
        tx.try_send((short.clone(), None)).expect("send");
        let long = Bytes::from(vec![b'x'; OVERSIZE_HEAD + 10]);
        let spans = Spans::plain(mcpvisor_jsonrpc::Kind::Request, 0..1, None);
        tx.try_send((long, Some(spans))).expect("send");
        assert!(lines.has_frame());
        assert_eq!(next(&mut lines).await, Some((Frame::Line(short), None)));
        match next(&mut lines).await {
            // An oversize line's spans are dropped with its body.
            Some((Frame::Oversize { len, head }, None)) => {
                assert_eq!(len, OVERSIZE_HEAD + 10);
                assert_eq!(head.len(), OVERSIZE_HEAD);
            }
            other => panic!("not oversize without spans: {other:?}"),
        }
        assert!(!lines.has_frame());
        drop(tx);
        assert!(next(&mut lines).await.is_none());
    }

    #[tokio::test]
    async fn a_line_keeps_the_spans_it_came_with() {
        let (tx, rx) = crate::queue::channel(4);
        let mut lines = Lines::new(rx, 1024);
        let line = Bytes::from_static(br#"{"id":1,"method":"ping"}"#);
        let spans = Spans::plain(mcpvisor_jsonrpc::Kind::Request, 6..7, Some(18..22));
        tx.try_send((line.clone(), Some(spans.clone())))
            .expect("send");
        assert_eq!(
            next(&mut lines).await,
            Some((Frame::Line(line), Some(spans)))
        );
    }
}
