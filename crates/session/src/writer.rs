//! One writer task per pipe.
//!
//! The owner of a pipe's traffic sends whole messages (without their newline)
//! into a bounded channel. The writer takes everything already queued, writes
//! it as one batch and flushes once, so a burst of small messages costs one
//! system call, not one each.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Messages up to this size are copied into the batch buffer; larger ones are
/// written straight from their own buffer.
const BATCH_BYTES: usize = 64 * 1024;
/// A large message is written in pieces of this size, each under the timeout,
/// so the timeout measures a stall, not the size of the message.
const PIECE: usize = 1024 * 1024;

/// Why a writer stopped before its channel closed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("write made no progress for {0:?}")]
    Stalled(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Writes every message from `rx` to `out`, newline-terminated, until the
/// channel closes (then flushes and returns `Ok`) or a write fails.
/// `stall` bounds each write; `None` waits as long as the reader needs.
pub async fn write_lines<W>(
    mut out: W,
    mut rx: mpsc::Receiver<Bytes>,
    stall: Option<Duration>,
) -> Result<(), WriteError>
where
    W: AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = Vec::with_capacity(BATCH_BYTES);
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(msg) = next {
            if msg.len() >= BATCH_BYTES {
                put(&mut out, &buf, stall).await?;
                buf.clear();
                for piece in msg.chunks(PIECE) {
                    put(&mut out, piece, stall).await?;
                }
                buf.push(b'\n');
            } else {
                buf.extend_from_slice(&msg);
                buf.push(b'\n');
                if buf.len() >= BATCH_BYTES {
                    put(&mut out, &buf, stall).await?;
                    buf.clear();
                }
            }
            next = rx.try_recv().ok();
        }
        put(&mut out, &buf, stall).await?;
        buf.clear();
        bounded(stall, out.flush()).await?;
    }
    bounded(stall, out.flush()).await?;
    Ok(())
}

impl WriteError {
    /// The reader is gone (as opposed to slow).
    pub fn is_closed_pipe(&self) -> bool {
        matches!(self, WriteError::Io(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

async fn put<W: AsyncWrite + Unpin>(
    out: &mut W,
    bytes: &[u8],
    stall: Option<Duration>,
) -> Result<(), WriteError> {
    if bytes.is_empty() {
        return Ok(());
    }
    bounded(stall, out.write_all(bytes)).await
}

async fn bounded<F>(stall: Option<Duration>, io: F) -> Result<(), WriteError>
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    match stall {
        Some(limit) => match tokio::time::timeout(limit, io).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(WriteError::Stalled(limit)),
        },
        None => Ok(io.await?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn writes_lines_in_order_including_large_ones() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel(16);
        let task = tokio::spawn(write_lines(a, rx, None));
        let big = Bytes::from(vec![b'x'; 3 * PIECE + 5]);
        tx.send(Bytes::from_static(b"one")).await.expect("send");
        tx.send(big.clone()).await.expect("send");
        tx.send(Bytes::from_static(b"two")).await.expect("send");
        drop(tx);
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.expect("read");
        task.await.expect("join").expect("write");
        let mut want = b"one\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\ntwo\n");
        assert_eq!(got, want);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_reader_is_a_stall() {
        let (a, _b) = tokio::io::duplex(8);
        let (tx, rx) = mpsc::channel(4);
        tx.send(Bytes::from_static(b"more than eight bytes"))
            .await
            .expect("send");
        let err = write_lines(a, rx, Some(Duration::from_secs(5)))
            .await
            .expect_err("must stall");
        assert!(matches!(err, WriteError::Stalled(_)));
    }
}
