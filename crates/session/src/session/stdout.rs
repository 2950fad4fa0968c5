//! The stdout of every generation whose pipe is still open, read in the
//! owning task's own `select!`.
//!
//! Reading them here instead of in a task per generation saves a task
//! wake-up and a channel hop per message, and gives the same back-pressure:
//! while the session takes no worker events, nothing more is read, and the
//! worker's writes wait on its full pipe.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use futures_util::StreamExt;
use mcpvisor_jsonrpc::LineCodec;
use tokio::io::AsyncRead;
use tokio_util::codec::FramedRead;

use super::WorkerEvent;
use super::gate::Gate;

/// One generation's framed stdout.
struct Reader {
    generation: u64,
    frames: FramedRead<Pin<Box<dyn AsyncRead + Send>>, LineCodec>,
}

/// The open stdouts, each read until it closes (a fenced generation's too,
/// so that it never blocks on a full pipe; its frames are dropped by the
/// session's generation check).
#[derive(Default)]
pub(crate) struct Stdouts {
    readers: Vec<Reader>,
    /// Which reader is asked first, turn by turn, so that one busy
    /// generation cannot starve another.
    turn: usize,
    /// The readers are asked only once one of them may have something.
    gate: Gate,
}

impl std::fmt::Debug for Stdouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.readers.iter().map(|r| r.generation))
            .finish()
    }
}

impl Stdouts {
    pub fn push(&mut self, generation: u64, stdout: Pin<Box<dyn AsyncRead + Send>>, max: usize) {
        let frames = FramedRead::new(stdout, LineCodec::new(max));
        self.readers.push(Reader { generation, frames });
        self.gate.open();
    }

    pub fn is_empty(&self) -> bool {
        self.readers.is_empty()
    }

    /// Whether a generation's stdout already holds a whole message, which
    /// [`Stdouts::next`] yields without another read.
    pub fn has_line(&self) -> bool {
        self.readers
            .iter()
            .any(|r| r.frames.decoder().has_line(r.frames.read_buffer()))
    }

    /// The next frame of any generation, or the end of one's stdout (a
    /// read error ends it too). Pending forever while none is open.
    pub async fn next(&mut self) -> (u64, WorkerEvent) {
        poll_fn(|cx| {
            let Self {
                readers,
                turn,
                gate,
            } = self;
            gate.poll(cx, |cx| {
                let n = readers.len();
                for k in 0..n {
                    let i = (*turn + k) % n;
                    let reader = &mut readers[i];
                    match reader.frames.poll_next_unpin(cx) {
                        Poll::Ready(Some(Ok(frame))) => {
                            *turn = (i + 1) % n;
                            return Poll::Ready((reader.generation, WorkerEvent::Frame(frame)));
                        }
                        Poll::Ready(Some(Err(e))) => {
                            tracing::debug!(generation = reader.generation, error = %e, "worker stdout failed");
                            let generation = readers.swap_remove(i).generation;
                            return Poll::Ready((generation, WorkerEvent::StdoutClosed));
                        }
                        Poll::Ready(None) => {
                            let generation = readers.swap_remove(i).generation;
                            return Poll::Ready((generation, WorkerEvent::StdoutClosed));
                        }
                        Poll::Pending => {}
                    }
                }
                Poll::Pending
            })
        })
        .await
    }
}
