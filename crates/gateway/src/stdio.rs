//! The stdio front: one client on a pair of pipes.
//!
//! It frames the client's input (bounded lines, as `run` does), hands each
//! line to the hub, and writes what the hub sends it, batched, to the
//! output. A line over the limit is answered here (`-32600` with its id when
//! the id is in its first bytes), never forwarded.

use bytes::Bytes;
use futures_util::StreamExt;
use mcpvisor_jsonrpc::envelope::scan_id;
use mcpvisor_jsonrpc::{Frame, INVALID_REQUEST, LineCodec, build};
use mcpvisor_session::writer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use crate::fronts::{FrontCommand, FrontId, Outbound};
use crate::hub::FRONT_QUEUE;

/// How long a write to the client may make no progress before the client
/// counts as gone.
const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves one front on `input`/`output` until the input ends (then the hub
/// is told, and what it still sends is written until it lets go) or the
/// output fails.
pub(crate) async fn serve<R, W>(
    input: R,
    output: W,
    front: FrontId,
    max_bytes: usize,
    hub: mpsc::Sender<FrontCommand>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, out_rx) = mpsc::channel::<Outbound>(FRONT_QUEUE);
    // Our own answers (oversize lines) go out in order with the hub's.
    let own = out_tx.clone();
    if hub
        .send(FrontCommand::Open { front, out: out_tx })
        .await
        .is_err()
    {
        return;
    }
    // What the hub sends is written as it comes: stdio has one stream, so
    // `related` plays no part.
    let writer = tokio::spawn(async move {
        if let Err(e) = writer::write_lines(output, out_rx, Some(WRITE_TIMEOUT)).await {
            tracing::debug!(error = %e, "client output closed");
        }
    });
    let mut frames = FramedRead::new(input, LineCodec::new(max_bytes));
    loop {
        let frame = tokio::select! {
            frame = frames.next() => frame,
            // The output failed: the client has gone; stop reading.
            _ = own.closed() => break,
        };
        let line = match frame {
            Some(Ok(Frame::Line(line))) => line,
            Some(Ok(Frame::Oversize { len, head })) => {
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
                if own.send(Outbound { line, related }).await.is_err() {
                    break;
                }
                continue;
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "client input failed");
                break;
            }
            None => break,
        };
        if hub
            .send(FrontCommand::Message { front, line })
            .await
            .is_err()
        {
            break;
        }
    }
    drop(own);
    let _ = hub.send(FrontCommand::Close { front }).await;
    drop(hub);
    // The hub drops its sender when it forgets this front: then the writer
    // flushes and ends.
    let _ = writer.await;
}
