//! Where a session reads its client's messages: a pipe, framed as it is
//! read, or a channel of whole lines from another task of the same process.

use std::task::{Context, Poll};

use bytes::Bytes;
use mcpvisor_jsonrpc::frame::{FrameError, OVERSIZE_HEAD};
use mcpvisor_jsonrpc::{Frame, LineCodec};
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

/// The client's side of a session, as the session reads it.
pub trait ClientInput: Send + Unpin {
    /// The next message, `None` once the client has closed its side.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame, FrameError>>>;

    /// Whether a whole message is already read and waits to be taken, so
    /// that the session can hold its writes back until it has taken them.
    fn has_frame(&self) -> bool;
}

impl<R: AsyncRead + Unpin + Send> ClientInput for FramedRead<R, LineCodec> {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame, FrameError>>> {
        futures_util::Stream::poll_next(std::pin::Pin::new(self), cx)
    }

    fn has_frame(&self) -> bool {
        self.decoder().has_line(self.read_buffer())
    }
}

/// A client in the same process that sends whole lines, without their
/// newline, over a bounded channel. Dropping the sender closes it. The
/// session's size bound applies as it does to a pipe: a longer line is
/// given as a [`Frame::Oversize`] with its head.
#[derive(Debug)]
pub struct Lines {
    rx: mpsc::Receiver<Bytes>,
    max_bytes: usize,
}

impl Lines {
    /// Reads `rx`, with lines longer than `max_bytes` taken as oversize.
    pub fn new(rx: mpsc::Receiver<Bytes>, max_bytes: usize) -> Self {
        Self { rx, max_bytes }
    }
}

impl ClientInput for Lines {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame, FrameError>>> {
        self.rx.poll_recv(cx).map(|line| {
            line.map(|line| {
                Ok(if line.len() > self.max_bytes {
                    Frame::Oversize {
                        len: line.len(),
                        head: line.slice(..OVERSIZE_HEAD.min(line.len())),
                    }
                } else {
                    Frame::Line(line)
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

    #[tokio::test]
    async fn a_line_past_the_bound_is_oversize_with_its_head() {
        let (tx, rx) = mpsc::channel(4);
        let mut lines = Lines::new(rx, 8);
        tx.send(Bytes::from_static(b"12345678"))
            .await
            .expect("send");
        tx.send(Bytes::from(vec![b'x'; OVERSIZE_HEAD + 10]))
            .await
            .expect("send");
        assert!(lines.has_frame());
        let first = std::future::poll_fn(|cx| lines.poll_frame(cx))
            .await
            .expect("a frame")
            .expect("ok");
        assert_eq!(first, Frame::Line(Bytes::from_static(b"12345678")));
        match std::future::poll_fn(|cx| lines.poll_frame(cx))
            .await
            .expect("a frame")
            .expect("ok")
        {
            Frame::Oversize { len, head } => {
                assert_eq!(len, OVERSIZE_HEAD + 10);
                assert_eq!(head.len(), OVERSIZE_HEAD);
            }
            other => panic!("not oversize: {other:?}"),
        }
        assert!(!lines.has_frame());
        drop(tx);
        assert!(
            std::future::poll_fn(|cx| lines.poll_frame(cx))
                .await
                .is_none()
        );
    }
}
